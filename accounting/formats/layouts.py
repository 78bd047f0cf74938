"""What each weight format stores for one Linear weight of `out` × `in` elements: tensor name
-> bytes. One function per format, its layout read from the code that writes it (cited).

Conventions: `in` is the contracted (input) width, `out` the output width, as torch.nn.Linear
stores weight (out, in). Integers pack along the axis the format packs (AWQ along out, GPTQ
along in, compressed-tensors along in); a group is `group` consecutive input columns.
A layout that cannot hold the shape (a group size that does not divide the input width, a
packing that does not divide it) raises UsageError: vLLM refuses the same shapes at load.
"""
from __future__ import annotations

from math import ceil

from accounting.runtime.errors import UsageError
from accounting.units import DTYPE_BYTES, FP32, FP16 as _FP16, INT64 as _INT64
from accounting.units import INT32 as _INT32

INT32, INT64, FP32_BYTES = DTYPE_BYTES[_INT32], DTYPE_BYTES[_INT64], DTYPE_BYTES[FP32]
FP16_BYTES = DTYPE_BYTES[_FP16]


def _positive(what: str, v) -> None:
    # a size below 1 never divides (n % -2 == 0 would pass: negative bytes followed);
    # quant_schema.py refuses such a block first, this guards every other caller
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UsageError(f"{what} must be a positive integer, got {v!r}")


def _check(what: str, n: int, by: int, axis: str) -> None:
    _positive(what, by)
    if n % by:
        raise UsageError(f"{what}: {by} does not divide the {axis} width {n:,} of a weight; "
                         f"choose a group size that divides it (or another scheme)")


def dense(out: int, inp: int, element_bytes: int) -> dict[str, int]:
    """An unquantized weight: out·in elements of `element_bytes` (bf16/fp16 2, fp32 4)."""
    return {"weight": out * inp * element_bytes}


def awq(out: int, inp: int, bits: int = 4, group: int = 128) -> dict[str, int]:
    """AutoAWQ's GEMM layout (awq/modules/linear/gemm.py, WQLinear_GEMM.__init__): qweight
    int32 (in, out·bits/32), qzeros int32 (in/group, out·bits/32), scales fp16 (in/group, out).
    Zero points always stored (AWQ is asymmetric: zero_point true)."""
    group = inp if group in (-1, None) else group
    _check("awq group_size", inp, group, "input")
    _check("awq packing", out, 32 // bits, "output")
    groups, packed_out = inp // group, out * bits // 32
    return {"qweight": inp * packed_out * INT32, "qzeros": groups * packed_out * INT32,
            "scales": groups * out * FP16_BYTES}


def gptq(out: int, inp: int, bits: int = 4, group: int = 128,
         scale_in: int | None = None) -> dict[str, int]:
    """AutoGPTQ/GPTQModel's layout (auto_gptq/nn_modules/qlinear/*, QuantLinear.__init__):
    qweight int32 (in·bits/32, out), qzeros int32 (ceil(in/group), out·bits/32), scales fp16
    (ceil(in/group), out), g_idx int32 (in): the group of each input column, stored with and
    without desc_act (act-order permutes it; sequential it is i // group). group -1: one
    group over the whole input. `scale_in`: the input width the scales and zeros cover when
    it is not this shard's (vLLM keeps them whole on a row-parallel shard of an act-order
    model: quantization/gptq.py, GPTQLinearMethod.create_weights, scale_and_zero_input_dim
    None)."""
    group = inp if group in (-1, None) else group
    _check("gptq group_size", inp, group, "input")
    _check("gptq packing", inp, 32 // bits if 32 % bits == 0 else 32, "input")
    groups = ceil((scale_in or inp) / group)
    return {"qweight": inp * bits // 32 * out * INT32,
            "qzeros": groups * ceil(out * bits / 32) * INT32,
            "scales": groups * out * FP16_BYTES, "g_idx": inp * INT32}


def ct_packed(out: int, inp: int, bits: int = 4, group: int | None = 128,
              symmetric: bool = True, scale_bytes: int = 2) -> dict[str, int]:
    """compressed-tensors 'pack-quantized' (compressors/quantized_compressors/pack_quantized.py,
    checked by packing a layer in tests/test_formats.py): weight_packed int32 (out,
    in·bits/32), weight_scale in the model's dtype (out, in/group) or (out, 1) per channel,
    weight_zero_point int32 packed along out (ceil(out·bits/32), groups) only when asymmetric,
    weight_shape int64 (2,)."""
    if group is not None:
        _check("compressed-tensors group_size", inp, group, "input")
    groups = 1 if group is None else inp // group
    _check("compressed-tensors packing", inp, 32 // bits, "input")
    out_d = {"weight_packed": out * inp * bits // 32 * INT32,
             "weight_scale": out * groups * scale_bytes}
    if not symmetric:
        out_d["weight_zero_point"] = ceil(out * bits / 32) * groups * INT32
    out_d["weight_shape"] = 2 * INT64
    return out_d


def ct_8bit(out: int, inp: int, strategy: str = "channel", group: int | None = None,
            block: tuple[int, int] | None = None, scale_bytes: int = 2,
            static_input: bool = False, symmetric: bool = True) -> dict[str, int]:
    """compressed-tensors 'int-quantized' (int8) and 'float-quantized' (fp8 e4m3): weight one
    byte per element (out, in); weight_scale in the model's dtype: (1,) per tensor, (out, 1)
    per channel, (out, in/group) per group, (ceil(out/b0), ceil(in/b1)) per block; an
    asymmetric int8 weight adds weight_zero_point (int8, the scale's shape); a static input
    scheme adds input_scale (1,)."""
    if strategy == "tensor":
        scales = 1
    elif strategy == "channel":
        scales = out
    elif strategy == "group":
        _check("compressed-tensors group_size", inp, group, "input")
        scales = out * (inp // group)
    elif strategy == "block":
        for b in block:
            _positive("compressed-tensors block_structure", b)
        scales = -(-out // block[0]) * -(-inp // block[1])
    else:
        raise UsageError(f"compressed-tensors strategy {strategy!r} is not known here; "
                         f"supported: tensor, channel, group, block")
    d = {"weight": out * inp, "weight_scale": scales * scale_bytes}
    if not symmetric:
        d["weight_zero_point"] = scales
    if static_input:
        d["input_scale"] = scale_bytes
    return d


def fp8_block(out: int, inp: int, block: tuple[int, int] = (128, 128),
              scale_bytes: int = FP32_BYTES) -> dict[str, int]:
    """Block-wise FP8 as DeepSeek-V3 and Qwen3-FP8 ship it (quant_method "fp8",
    weight_block_size [128, 128]; transformers' FP8Linear, integrations/finegrained_fp8.py):
    weight float8_e4m3fn (out, in), weight_scale_inv float32 (ceil(out/128), ceil(in/128));
    scale_fmt "ue8m0" stores the scales as 1-byte float8_e8m0fnu (scale_bytes 1)."""
    for b in block:
        _positive("fp8 weight_block_size", b)
    return {"weight": out * inp,
            "weight_scale_inv": -(-out // block[0]) * -(-inp // block[1]) * scale_bytes}


def fp8_tensor(out: int, inp: int, static_input: bool = False) -> dict[str, int]:
    """Per-tensor FP8 (quant_method "fp8" without weight_block_size; vLLM's Fp8LinearMethod,
    model_executor/layers/quantization/fp8.py, create_weights): weight float8_e4m3fn (out,
    in), weight_scale float32 (1,), and input_scale float32 (1,) when activation_scheme is
    static."""
    d = {"weight": out * inp, "weight_scale": FP32_BYTES}
    if static_input:
        d["input_scale"] = FP32_BYTES
    return d


def fbgemm_fp8(out: int, inp: int) -> dict[str, int]:
    """FBGEMM's per-row FP8 (quant_method "fbgemm_fp8", Meta's Llama-3.1-405B-Instruct-FP8;
    transformers' FbgemmFp8Linear, integrations/fbgemm_fp8.py): weight float8_e4m3fn (out,
    in), weight_scale float32 (out, 1), input_scale_ub float32 (1)."""
    return {"weight": out * inp, "weight_scale": out * FP32_BYTES, "input_scale_ub": FP32_BYTES}


MXFP4_BLOCK = 32  # OCP Microscaling: 32 FP4 (e2m1) values share one E8M0 scale


def mxfp4(out: int, inp: int) -> dict[str, int]:
    """MXFP4 as gpt-oss ships its experts (transformers integrations/mxfp4.py; the
    checkpoint's *_blocks uint8 (…, out, in/32, 16) and *_scales uint8 (…, out, in/32)):
    two e2m1 values a byte, one e8m0 scale byte per 32 values."""
    _check("mxfp4 block", inp, MXFP4_BLOCK, "input")
    return {"blocks": out * inp // 2, "scales": out * inp // MXFP4_BLOCK}


def bnb_4bit(out: int, inp: int, quant_type: str = "nf4", blocksize: int = 64,
             double_quant: bool = True) -> dict[str, int]:
    """bitsandbytes 4-bit: the fine-tuning branch's layout (accounting/formats/bnb.py owns it),
    imported here when used."""
    bnb = _bnb()
    return bnb.bnb_4bit_bytes(out, inp, quant_type=quant_type, blocksize=blocksize,
                              double_quant=double_quant)


def bnb_8bit(out: int, inp: int) -> dict[str, int]:
    """bitsandbytes LLM.int8(): accounting/formats/bnb.py's layout, imported when used."""
    return _bnb().bnb_8bit_bytes(out, inp)


def _bnb():
    """accounting/formats/bnb.py, imported when a bitsandbytes scheme is used (the one copy of
    its layouts, written by the fine-tuning branch)."""
    try:
        from accounting.formats import bnb
    except ImportError:
        raise UsageError("the bitsandbytes layouts (accounting/formats/bnb.py) are not in this "
                         "build; choose another scheme (see --weights)") from None
    return bnb
