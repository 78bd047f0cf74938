"""Weights as the serving engine's kernel holds them, beside the bytes the checkpoint stores
(issue 43, Must 2). A quantized MoE kernel pads the expert matrices to its tile sizes when it
creates the parameters, so the GPU holds more than the file:

MXFP4 experts (gpt-oss), vLLM's Mxfp4MoEMethod.create_weights and get_mxfp4_backend
(vllm/model_executor/layers/quantization/mxfp4.py, read at commit 007d500 of
vllm-project/vllm). Each expert's intermediate width per TP rank I and the hidden width H are
rounded up by the backend the GPU gets:
    Marlin (sm80-sm89, sm120, or VLLM_MXFP4_USE_MARLIN)   I to 128, H to 256
      ("The moe marlin kernel requires that for each linear n % 256 == 0 and k % 128 == 0")
    Triton (sm90-sm100 with triton_kernels, the default on Hopper)   I to 64, H as is
    FlashInfer BF16/TRT-LLM (sm100 with FlashInfer, its default there)   I to 256, H to 256
    FlashInfer CUTLASS / SM90 BF16 (opt-in)   I to 128, H to 128
and the parameters are w13 (E, 2·I, H/2) + scales (E, 2·I, H/32), w2 (E, H, I/2) + scales
(E, H, I/32), biases bf16 (E, 2·I) and (E, H). On Hopper the engine takes Triton when
triton_kernels is installed, else Marlin: the weights are a range, Triton's at the low end,
Marlin's at the high one. gpt-oss-120b on one H100: 60.77 GiB stored, 65.9 GiB through
Marlin (I 2,880 -> 2,944, H 2,880 -> 3,072).

Other formats keep their stored bytes when loaded, each by its kernel's rule: GPTQ/AWQ through
Marlin repack the int32 qweight into Marlin's tiles of the same size (gptq_marlin_repack,
awq_marlin_repack) and keep the scales; an act-order GPTQ layer adds its g_idx sort indices,
int32 (in), the size of the g_idx the file already holds (gptq_marlin.py,
marlin_sort_g_idx); FP8 weights stay one byte (Hopper's CUTLASS/DeepGEMM paths; Ampere's
weight-only FP8 Marlin repacks into the same bytes). Those differences are under a megabyte
a layer and are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.formats.layouts import MXFP4_BLOCK
from accounting.units import BF16, DTYPE_BYTES


@dataclass(frozen=True)
class Padding:
    """One kernel path's rounding of the expert widths."""
    backend: str
    intermediate: int  # I rounded up to a multiple of this
    hidden: int  # H rounded up to a multiple of this (1: as is)


MARLIN = Padding("Marlin", 128, 256)
TRITON = Padding("Triton (triton_kernels)", 64, 1)
FLASHINFER_BF16 = Padding("FlashInfer BF16 / TRT-LLM", 256, 256)

# the paths vLLM may take by architecture, the default first (get_mxfp4_backend)
MXFP4_PATHS = {"sm90": (TRITON, MARLIN), "sm100": (FLASHINFER_BF16, TRITON, MARLIN),
               "sm103": (FLASHINFER_BF16, TRITON, MARLIN)}
MXFP4_OTHER = (MARLIN,)  # Ampere, Ada, sm120: triton_kernels need 9.0 <= capability < 11.0
MXFP4_UNKNOWN = (TRITON, MARLIN, FLASHINFER_BF16)  # a GPU given by its memory alone


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def mxfp4_expert_bytes(experts: int, hidden: int, inter: int, pad: Padding,
                       biases: bool) -> int:
    """One MoE layer's expert parameters on one TP rank as vLLM creates them."""
    h, i = _up(hidden, pad.hidden), _up(inter, pad.intermediate)
    values = 2 * i * h + h * i
    out = experts * (values // 2 + values // MXFP4_BLOCK)
    if biases:
        out += experts * (2 * i + h) * DTYPE_BYTES[BF16]
    return out


@dataclass(frozen=True)
class Loaded:
    """The weights per GPU as loaded: low and high ends (equal when one path)."""
    low: int
    high: int
    paths: tuple[str, ...]  # the kernel paths, low end first
    rule: str


def loaded(config, scheme_name: str, stored: int, moe_layers: int, tp: int,
           arch: str | None) -> Loaded:
    """`stored` bytes of one GPU's weights as the kernel holds them, `moe_layers` of them
    with routed experts."""
    if scheme_name != "mxfp4" or not moe_layers or config.num_experts is None:
        return Loaded(stored, stored, (), "as stored")
    paths = MXFP4_PATHS.get(arch, MXFP4_UNKNOWN if arch is None else MXFP4_OTHER)
    inter = config.expert_d_ff // tp
    bias = bool(config.expert_bias)  # gpt-oss: the experts' biases, padded too
    plain = Padding("stored", 1, 1)
    base = mxfp4_expert_bytes(config.num_experts, config.d_model, inter, plain, bias)
    sizes = sorted((stored + moe_layers * (mxfp4_expert_bytes(config.num_experts,
                                                                config.d_model, inter, p,
                                                                bias) - base), p.backend)
                   for p in paths)
    return Loaded(sizes[0][0], sizes[-1][0], tuple(b for _, b in sizes),
                  "MXFP4 experts padded by vLLM's " + " or ".join(b for _, b in sizes)
                  + " path (mxfp4.py create_weights)")
