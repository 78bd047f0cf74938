"""What autograd saves in Mistral 3's trained Pixtral tower (issue 41, Must 3) once per
forward, not per image: PixtralVisionModel (transformers 5.23 modeling_pixtral.py),
attention "sdpa", in the roles of vision_saves.py (its docstring); measured against
transformers' tower on the CPU with the graph walk of tests/test_vision_train.py (fp32,
bf16 and fp32 under bf16 autocast: tests/test_vision_saves_pixtral.py).

Pixtral runs every image of a forward as ONE sequence: PixtralVisionModel.forward
concatenates the images' patches (S = Σ N over the forward's images: all B sequences'
images, Mistral3Model.get_image_features runs them in one call) and masks the other images
out with an additive block-diagonal float mask, generate_block_attention_mask: one (S, S)
tensor of the residual stream's dtype made once per forward and passed to every layer.
Each image's saves are linear in its N (builder/vision_pixtral.py, the tower's walk); the
mask is not: S² per forward, whole_forward() below, which the plan adds at each batch
(planning/vision_train.py).

sdpa with a float mask saves the mask it ran with:
  CPU (_scaled_dot_product_flash_attention_for_cpu, measured): the mask itself, one tensor
      shared by every layer; under autocast sdpa is a lower-precision op, so each layer
      casts the fp32 mask to bf16 and saves its own copy (L_v of them);
  CUDA: flash attention takes no mask, so the memory-efficient kernel runs (sdp_utils.cpp
      priority_order: flash, efficient, math, cudnn). Not followed here, as in
      vision_gemma4.py: recent sdp_utils.cpp's check_prefer_cudnn_attention puts
      cuDNN first on sm90/sm100 when the runtime cuDNN is newer than 9.15 (unless
      TORCH_CUDNN_SDPA_DEPRIORITIZED), whose saves are not written. preprocess_mask
      (attention.cpp, mem_eff_alignment = 8) keeps the mask when its row stride is a multiple of 8 (S % 8
      == 0), else pad_bias copies it into S × (⌈S/8⌉·8) at each call; its log-sum-exp is
      (h, ⌈S/32⌉·32) fp32 (kAlignLSE = 32, _efficient_attention_forward in attention.cu).
      Read, not measured.
The mask's bytes (S² elements) are the `--image` rows' Σ N² only on the block diagonal; the
rest is the other images' −inf.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.architecture.vision import VisionSpec
from accounting.units import BF16, DTYPE_BYTES, FP32


@dataclass(frozen=True)
class WholeForward:
    """The saves of one Pixtral forward that are not a sum over its images: the block mask
    (and, on CUDA, the padding of the memory-efficient kernel's mask and log-sum-exp), for
    `patches` = Σ N of one sequence's images; a forward of B sequences holds S = B·patches.
    bytes(B) is exact at every B."""
    patches: int  # Σ N over one sequence's images
    layers: int
    heads: int
    mode: str  # fp32, bf16, autocast (vision_saves.MODES)
    device: str  # cuda, cpu
    # the conv's input is the forward's images padded to the largest height and width (the
    # processor's one pixel_values tensor): per sequence, Σ over its images of the padded
    # patches beyond its own, each k_v pixels in the compute dtype
    padding: int = 0  # elements per sequence
    # --recompute full: each layer (a GradientCheckpointingLayer) saves its tensor inputs,
    # the mask among them (the one tensor, as the forward made it), nothing inside
    checkpointed: bool = False

    def bytes(self, batch: int) -> int:
        s = batch * self.patches
        if s == 0:
            return 0
        f32, b16 = DTYPE_BYTES[FP32], DTYPE_BYTES[BF16]
        pixels = batch * self.padding * (f32 if self.mode == "fp32" else b16)
        # the mask's dtype: the residual stream's (ln_pre's output: fp32 under autocast);
        # sdpa under autocast runs on (and saves) a bf16 copy, cast at each layer
        cast = self.mode == "autocast"
        size = b16 if self.mode in ("bf16", "autocast") else f32
        if self.checkpointed:
            return s * s * (f32 if self.mode in ("fp32", "autocast") else b16) + pixels
        if self.device == "cpu":
            return (self.layers if cast else 1) * s * s * size + pixels
        aligned = s % 8 == 0
        width = -(-s // 8) * 8
        copies = 1 if (aligned and not cast) else self.layers
        lse_pad = self.layers * self.heads * (-(-s // 32) * 32 - s) * f32
        return copies * s * width * size + lse_pad + pixels


def whole_forward(spec: VisionSpec, grids: list[tuple[int, int]], mode: str,
                  device: str = "cuda", checkpointed: bool = False) -> WholeForward | None:
    """`grids`: one sequence's images, each (patches high, patches wide); None for a tower
    whose images attend apart (every family but Pixtral)."""
    if spec.family != "pixtral":
        return None
    n = sum(h * w for h, w in grids)
    side = (max((h for h, _ in grids), default=0), max((w for _, w in grids), default=0))
    k_v = spec.channels * spec.patch * spec.patch
    padding = (len(grids) * side[0] * side[1] - n) * k_v
    return WholeForward(n, spec.depth, spec.heads, mode, device, padding, checkpointed)
