"""A config.json's quantization_config read as a weight scheme (accounting/formats/schemes.py)
and the modules it leaves unquantized. Each quant_method's keys are those the library that
writes it saves (transformers' quantizer configs, utils/quantization_config.py; compressed-
tensors' QuantizationConfig), each block checked first against its method's schema
(accounting/formats/quant_schema.py: types, signs, divisibility, required keys); a key the
tool cannot honour is refused in one line.

    awq                  bits, group_size, zero_point, version "gemm"; modules_to_not_convert
    gptq                 bits, group_size, desc_act, sym
    compressed-tensors   format (pack-quantized, int-quantized, float-quantized,
                         naive-quantized), one config_groups entry's weights (num_bits, type,
                         symmetric, strategy, group_size, block_structure),
                         input_activations (static or dynamic), ignore
    fp8                  weight_block_size (block-wise) or none (per tensor), activation_scheme,
                         scale_fmt (fp32 or ue8m0 block scales), modules_to_not_convert
                         (or ignored_layers)
    fbgemm_fp8           modules_to_not_convert (per-row scales)
    bitsandbytes         load_in_4bit / load_in_8bit, bnb_4bit_quant_type,
                         bnb_4bit_use_double_quant, llm_int8_skip_modules
    mxfp4                modules_to_not_convert (gpt-oss)
"""
from __future__ import annotations

from dataclasses import replace

from accounting.formats.quant_schema import METHODS, bad as _bad, read  # noqa: F401
from accounting.formats.schemes import Scheme, get_scheme


def scheme_from_config(q) -> Scheme:
    """The scheme a quantization_config names (exit 2 for one the tool does not know, or
    one its library would refuse)."""
    method, v = read(q)
    if method == "awq":
        return _awq(v)
    if method == "gptq":
        return _gptq(v)
    if method == "compressed-tensors":
        return _compressed(v)
    if method == "fp8":
        return _fp8(v)
    if method == "fbgemm_fp8":
        return get_scheme("fbgemm-fp8").with_ignore(tuple(v["modules_to_not_convert"] or ()))
    if method == "bitsandbytes":
        return _bnb(v)
    return get_scheme("mxfp4").with_ignore(tuple(v["modules_to_not_convert"] or ()))


def _fp8(v: dict) -> Scheme:
    ignore = tuple(v["modules_to_not_convert"] or ()) + tuple(v["ignored_layers"] or ())
    block = v["weight_block_size"]
    if block is None:  # vLLM's Fp8Config: no weight_block_size is one scale per tensor
        s = replace(get_scheme("fp8"), params=(("static_input", v["activation_scheme"]
                                                  == "static"),))
        return s.with_ignore(ignore)
    # scale_fmt "ue8m0": the block scales are 1-byte float8_e8m0fnu (DeepSeek-V4), not fp32
    scale = 1 if v["scale_fmt"] == "ue8m0" else 4
    label = (f"FP8 e4m3, {'ue8m0' if scale == 1 else 'fp32'} scale per {block[0]}×{block[1]} "
             f"block")
    s = replace(get_scheme("fp8-block"), params=(("block", tuple(block)),
                                                  ("scale_bytes", scale)), label=label)
    return s.with_ignore(ignore)


def _bnb(v: dict) -> Scheme:
    skip = tuple(v["llm_int8_skip_modules"] or ())
    if v["load_in_8bit"]:
        return get_scheme("bnb-int8").with_ignore(skip)
    if not v["load_in_4bit"]:
        raise _bad("bitsandbytes with neither load_in_4bit nor load_in_8bit")
    kind = v["bnb_4bit_quant_type"]  # transformers' default "fp4" when absent
    s = get_scheme(kind)
    if not v["bnb_4bit_use_double_quant"]:
        s = replace(s, params=(("quant_type", kind), ("blocksize", 64), ("double_quant", False)),
                    label=s.label.replace("double quantization", "no double quantization"))
    return s.with_ignore(skip)


def _awq(v: dict) -> Scheme:
    bits, group, version = v["bits"], v["group_size"], v["version"].lower()
    if bits != 4 or version not in ("gemm", "gemv_fast", "marlin") or not v["zero_point"]:
        raise _bad(f"awq with bits {bits}, version {version!r}, zero_point "
                   f"{v['zero_point']!r}: only 4-bit GEMM with zero points is laid out here")
    s = get_scheme("awq").with_group(group)
    return s.with_ignore(tuple(v["modules_to_not_convert"] or ()))


def _gptq(v: dict) -> Scheme:
    bits, group, act = v["bits"], v["group_size"], v["desc_act"]
    if bits not in (2, 4, 8):
        raise _bad(f"gptq bits {bits}: 2, 4 or 8 are laid out here")
    base = get_scheme("gptq-act-order" if act else "gptq")
    label = (f"GPTQ int{bits}, " + (f"group {group}" if group != -1 else "one group per row")
             + (", desc_act (act-order g_idx)" if act else "")
             + ": int32-packed weights and zeros, fp16 scales, g_idx")
    return replace(base, params=(("bits", bits), ("group", group)), label=label)


def _compressed(v: dict) -> Scheme:
    fmt, w, act = v["format"], v["weights"], v["input_activations"]
    bits, typ = w["num_bits"], w["type"]
    strategy, gsize, symmetric = w["strategy"], w["group_size"], w["symmetric"]
    static = act is not None and not act["dynamic"]
    ignore = tuple(v["ignore"] or ())
    if fmt == "pack-quantized" and typ == "int" and bits in (4, 8):
        if strategy not in ("group", "channel"):
            raise _bad(f"pack-quantized strategy {strategy!r}: group or channel")
        params = (("bits", bits), ("group", gsize if strategy == "group" else None),
                  ("symmetric", symmetric))
        label = (f"int{bits} packed in int32, bf16 scale per "
                 + (f"group {gsize}" if strategy == "group" else "output channel")
                 + (", symmetric" if symmetric else ", with zero points")
                 + " (compressed-tensors)")
        return Scheme("compressed-tensors", label, "ct_packed", params, ignore=ignore)
    if fmt in ("int-quantized", "float-quantized", "naive-quantized") and bits == 8:
        if strategy not in ("tensor", "channel", "group", "block"):
            raise _bad(f"compressed-tensors strategy {strategy!r}: tensor, channel, group or "
                       f"block are laid out here")
        params = (("strategy", strategy), ("group", gsize if strategy == "group" else None),
                  ("block", w["block_structure"]), ("static_input", static),
                  ("symmetric", symmetric))
        kind = "fp8 e4m3" if typ == "float" else "int8"
        return Scheme("compressed-tensors", f"{kind}, bf16 scale per {strategy} "
                      f"(compressed-tensors{', static input scale' if static else ''})",
                      "ct_8bit", params, ignore=ignore)
    raise _bad(f"compressed-tensors format {fmt!r} with {bits}-bit {typ}: laid out here are "
               f"pack-quantized int4/int8 and int-/float-quantized 8-bit")
