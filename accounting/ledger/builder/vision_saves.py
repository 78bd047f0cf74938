"""What autograd saves in a trained vision tower for the backward pass (issue 41, Must 3):
the roles of the saved tensors and their bytes. The saves themselves (vision_save.Save, one
image's forward through transformers' tower and projector, in the vision ledger's symbols,
accounting/ledger/builder/vision.py values()) are emitted by the vision builder's walk of
each tower, beside its parameters and matmuls (builder/vision_vit.py, vision_qwen.py,
vision_gemma4.py, vision_pixtral.py), for the families whose saves are checked against
transformers on the CPU with saved-tensor hooks (tests/test_vision_train.py): Qwen2-VL,
Qwen2.5-VL, Qwen3-VL and Qwen3.5, Gemma 3's SigLIP with its projector and LLaVA's CLIP
with its MLP projector (LLaVA-OneVision's SigLIP and projector on each tile), Kimi-K2.5's
MoonViT with its projector and Llama 4's, Idefics3's (SmolVLM's the same), InternVL's
InternViT (LayerNorm, or InternViT-6B's RMSNorms and QK-norm), Gemma 4's and Mistral 3's
Pixtral (vision_saves_pixtral.py, its forward-wide block mask beside the per-image saves),
transformers 5.23, attention "sdpa"; here the norms' and mergers' saves those walks share,
and autocast's weight copies (weight_copies).

Frozen tower (LLaMA-Factory's default: FinetuningArguments.freeze_vision_tower = True and
freeze_multi_modal_projector = True, src/llamafactory/hparams/finetuning_args.py): no
parameter needs a gradient and neither do the pixels, so autograd records no graph and
saves nothing (nothing here applies).

Each save is per image, except `fixed` ones (once per forward of the tower: the bf16 copy
autocast makes of each weight matrix for its matmul, which is per call, however many images
the call carries). The dtype of a save is a role, resolved by dtype_bytes():
  A   the compute dtype: float32, or bfloat16 (bf16 parameters, or under autocast: linear,
      conv and sdpa are autocast's lower-precision ops, so what they save is a bf16 copy);
  P   the parameters' dtype (SigLIP's and CLIP's residual stream: autocast's bf16 conv
      output plus the fp32 position embedding is fp32);
  F   float32 whatever the parameters (RMSNorm's upcast and rsqrt, sdpa's log-sum-exp,
      the rotary tables);
  I   int64 (indices an index op saves);
  LN  a LayerNorm's saved input: the residual stream's dtype, but float32 under CUDA's
      autocast (layer_norm is on its fp32 list; the CPU's autocast leaves it alone);
  ST  a LayerNorm's mean and rstd: float32 (the accumulation type on CUDA and under
      autocast), the input's dtype on the CPU without autocast;
  AC  a second bf16 copy under autocast of an input two linears share (each casts its
      own), nothing otherwise;
  LNC the fp32 copy CUDA's autocast makes for a LayerNorm whose input another op saves
      already (Qwen3-VL's deepstack mergers read the residual stream a block's norm1 or
      the merger saves), nothing otherwise;
  ACC a bf16 copy under CUDA's autocast of a LayerNorm's output each linear reading it makes
      (fp32 there; the CPU's autocast leaves a bf16 residual's LayerNorm in bf16), nothing
      otherwise;
  IC, IG  int64 on the CPU only, on CUDA only (embedding_bag's bookkeeping differs: below);
  NA  the parameters' dtype without autocast, nothing under it (LLaVA's projector input:
      the feature layer's output itself, or under autocast only its bf16 copy: AC);
  W   autocast's bf16 copy of a weight matrix, nothing otherwise;
  LNR a LayerNorm's input no other op saves, unless CUDA's autocast saves its fp32 copy
      (LNC) in its place (vision_saves_projector.py).
`repeat` "L_v": in every block. A block under gradient checkpointing (transformers'
GradientCheckpointingLayer: Qwen2VLVisionBlock, Qwen2_5_VLVisionBlock, SiglipEncoderLayer;
gradient_checkpointing_enable() reaches the tower's blocks) keeps its input, the residual
stream, instead of its saves.
"""
from __future__ import annotations

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder.vision_save import BLOCK, Save  # noqa: F401 (re-exported)
from accounting.units import BF16, DTYPE_BYTES, FP32, INT64

# the towers whose projector reads vision_feature_layer's hidden state (the later layers run,
# their saves freed with their unused outputs): LLaVA's, LLaVA-OneVision's, InternVL's
LLAVA = ("llava", "llava_onevision", "internvl")
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3", "kimi_k25", "llama4", "idefics3",
            "gemma4", "pixtral", *LLAVA)
USED = "L_vu"  # LLaVA: the layers whose output reaches the projector (vision_feature_layer)
# the linears reading the pixels (Llama 4's unfolded patches, Gemma 4's patch vectors): the
# pixels need no gradient, so their mm keeps the input alone, not autocast's weight copy
PIXEL_LINEARS = ("vision_model.patch_embedding.linear.weight",
                 "model.vision_tower.patch_embedder.input_proj.weight")


MODES = (FP32, BF16, "autocast")  # parameters fp32, bf16, or fp32 under bf16 autocast
DEVICES = ("cuda", "cpu")


def mode_of(precision) -> str:
    """A planning Precision's mode (planning/precisions.py): its autocast, else its
    parameters' dtype."""
    if precision.autocast is not None:
        return "autocast"
    return "bf16" if precision.param_dtype == BF16 else "fp32"


def roles(spec: VisionSpec, mode: str, device: str) -> dict[str, int]:
    """Bytes per element of each role (the module's docstring) for this tower, mode, device."""
    f32, b16 = DTYPE_BYTES[FP32], DTYPE_BYTES[BF16]
    out = {"A": f32 if mode == "fp32" else b16, "P": b16 if mode == "bf16" else f32,
           "F": f32, "I": DTYPE_BYTES[INT64],
           "ST": b16 if (mode == "bf16" and device == "cpu") else f32,
           "AC": b16 if mode == "autocast" else 0, "W": b16 if mode == "autocast" else 0}
    out["NA"] = 0 if mode == "autocast" else out["P"]
    out["ACC"] = b16 if (mode == "autocast" and device == "cuda") else 0
    out["IC"] = DTYPE_BYTES[INT64] if device == "cpu" else 0
    out["IG"] = DTYPE_BYTES[INT64] if device == "cuda" else 0
    out["R"] = out[residual(spec)]
    out["LN"] = f32 if (mode == "autocast" and device == "cuda") else out["R"]
    out["LNC"] = f32 if (mode == "autocast" and device == "cuda") else 0
    # a LayerNorm's input where no other op saves it and no fp32 copy replaces it (CUDA's
    # autocast saves that copy, LNC): Qwen3-VL's deepstack mergers trained on a frozen tower
    out["LNR"] = 0 if (mode == "autocast" and device == "cuda") else out["R"]
    # Gemma 4's (vision_gemma4.py): a bool; weight.float() of bf16 parameters; fp32
    # unless autocast casts it; the compute dtype or fp32 on one device only (its masked
    # sdpa: the CPU's flash kernel, CUDA's memory-efficient one)
    out.update({"B1": 1, "WF": f32 if mode == "bf16" else 0,
                "FA": b16 if mode == "autocast" else f32,
                "AX": out["A"] if device == "cpu" else 0, "AG": out["A"] if device == "cuda" else 0,
                "FC": f32 if device == "cpu" else 0, "FG": f32 if device == "cuda" else 0})
    return out


def supported(spec: VisionSpec) -> bool:
    return spec.family in FAMILIES


def weight_copies(spec: VisionSpec, params) -> list[Save]:
    """Autocast's bf16 copy of every weight matrix a matmul or conv reads (a position table
    is looked up, not multiplied), once per forward of the tower (`fixed`); builder/
    vision.py walk() adds them after the tower's own saves. `params`: the tower's parameter
    records. (Llama 4's patch linear reads the unfolded pixels, which need no gradient: its
    mm keeps the input alone, for the weight's gradient; a conv keeps its weight either
    way.)"""
    s, out = spec, []
    for p in params:
        if len(p.shape) == 2 and "position" not in p.name and "pos_embed" not in p.name \
                and p.name not in PIXEL_LINEARS and not unused_merger(s, p.module):
            repeat = USED if (s.family in LLAVA and p.repeat) else p.repeat
            out.append(Save(f"bf16 copy of {p.name}", p.module, repeat, p.shape, "W",
                            fixed=True))
    return out


def unused_merger(spec: VisionSpec, module: str) -> bool:
    """A Qwen3-VL deepstack merger (its module, any prefix) whose output reaches no loss:
    the k-th past the language model's layers (VisionSpec.deepstack_used)."""
    _, found, rest = module.partition("deepstack_merger_list.")
    return bool(found) and int(rest.split(".")[0]) >= spec.deepstack_used


def residual(spec: VisionSpec) -> str:
    """The role of the residual stream between blocks (what checkpointing keeps)."""
    # SigLIP, CLIP, Llama 4: an fp32 position table or class embedding joins the stream;
    # Kimi casts its positions to the stream's dtype, Qwen adds none
    # (Pixtral's ln_pre multiplies the bf16 conv output by its fp32 weight under autocast)
    return "P" if spec.family in ("gemma3", "llama4", "idefics3", "gemma4", "pixtral",
                                  *LLAVA) else "A"


def layernorm(out, name: str, module: str, repeat, rows: str, width: str = "d_v") -> None:
    out.append(Save(f"{name} input", module, repeat, (rows, width), "LN"))
    out.append(Save(f"{name} mean and rstd", module, repeat, (rows,), "ST"))
    out.append(Save(f"{name} mean and rstd", module, repeat, (rows,), "ST"))


def rmsnorm(out, name: str, module: str, repeat, rows: str, role: str = "A") -> None:
    """Qwen2RMSNorm (InternVLVisionRMSNorm the same): x.to(float32) (pow saves it), rsqrt's
    output, and weight · x_normed saves x_normed cast back to the input's dtype (for the
    weight's gradient): `role`, the input's (InternViT-6B's residual stream is "R": fp32
    under autocast; its q_norm and k_norm read q_proj's and k_proj's outputs, "A")."""
    out.append(Save(f"{name} fp32 input", module, repeat, (rows, "d_v"), "F", input_grad=True))
    out.append(Save(f"{name} rsqrt", module, repeat, (rows,), "F", input_grad=True))
    out.append(Save(f"{name} normalized", module, repeat, (rows, "d_v"), role))


def used_layers(spec: VisionSpec) -> int:
    """The layers whose output reaches LLaVA's projector: hidden_states[vision_feature_layer]
    of the L + 1 (the embeddings', then each layer's)."""
    k = spec.feature_layer
    return max(0, min(spec.depth, spec.depth + 1 + k if k < 0 else k))


def merger_mlp(out, m: str, fc1: str, act: str, fc2: str) -> None:
    """A patch merger's MLP on N_m rows of s²·d_v: fc1's input, the GELU's, fc2's."""
    for name, what in ((fc1, "input"), (act, "GELU input"), (fc2, "input")):
        out.append(Save(f"{m} {name} {what}", f"{m}.{name}", None, ("N_m", "d_vm"), "A"))


def bytes_per_image(ledger, values: dict[str, int], mode: str, device: str = "cuda",
                    checkpointed: bool = False) -> tuple[int, int] | None:
    """(bytes per image at these values, bytes once per forward); None: saves not written
    for this tower. checkpointed: each block keeps its input (N × d_v in the residual
    stream's dtype) in place of its saves."""
    table = ledger.saves
    if table is None:
        return None
    r = roles(ledger.spec, mode, device)
    n = values.get("N", 0)  # CUDA's memory-efficient sdpa: its mask's columns to 8, its
    # log-sum-exp's rows to 32 (vision_gemma4.py)
    values = {**values, USED: used_layers(ledger.spec), "N_8": -(-n // 8) * 8,
              "N_32": -(-n // 32) * 32}
    blocks = USED if ledger.spec.family in LLAVA else BLOCK
    kept = [x for x in table if not (checkpointed and x.repeat == blocks)]
    if checkpointed:
        kept.append(Save("block input (gradient checkpointing)", "blocks.{i}", blocks,
                         ("N", "d_v"), "R"))
    per = sum(x.bytes(values, r) for x in kept if not x.fixed)
    once = sum(x.bytes(values, r) for x in kept if x.fixed)
    return per, once
