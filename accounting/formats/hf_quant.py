"""A config.json's quantization_config read as a weight scheme (accounting/formats/schemes.py)
and the modules it leaves unquantized. Each quant_method's keys are those the library that
writes it saves (transformers' quantizer configs, utils/quantization_config.py; compressed-
tensors' QuantizationConfig); a key the tool cannot honour is refused in one line.

    awq                  bits, group_size, zero_point, version "gemm"; modules_to_not_convert
    gptq                 bits, group_size, desc_act, sym
    compressed-tensors   format (pack-quantized, int-quantized, float-quantized,
                         naive-quantized), one config_groups entry's weights (num_bits, type,
                         symmetric, strategy, group_size, block_structure),
                         input_activations (static or dynamic), ignore
    fp8                  weight_block_size (block-wise) or none (per tensor), activation_scheme,
                         modules_to_not_convert
    fbgemm_fp8           modules_to_not_convert (per-row scales)
    bitsandbytes         load_in_4bit / load_in_8bit, bnb_4bit_quant_type,
                         bnb_4bit_use_double_quant, llm_int8_skip_modules
    mxfp4                modules_to_not_convert (gpt-oss)
"""
from __future__ import annotations

from dataclasses import replace
from collections.abc import Mapping

from accounting.formats.schemes import Scheme, get_scheme
from accounting.runtime.errors import UsageError

METHODS = ("awq", "gptq", "compressed-tensors", "fp8", "fbgemm_fp8", "bitsandbytes", "mxfp4")


def _bad(what: str) -> UsageError:
    return UsageError(f"quantization_config: {what}; supported quant_method: "
                      f"{', '.join(METHODS)} (see docs/serving.md)")


def _int(q: Mapping, key: str, default=None) -> int | None:
    v = q.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"{key} must be an integer, got {v!r}")
    return v


def _names(v) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _bad(f"a module list must be a list of names, got {v!r}")
    return tuple(v)


def scheme_from_config(q) -> Scheme:
    """The scheme a quantization_config names (exit 2 for one the tool does not know)."""
    if not isinstance(q, Mapping):
        raise _bad(f"expected an object, got {type(q).__name__}")
    method = q.get("quant_method")
    if method == "awq":
        return _awq(q)
    if method == "gptq":
        return _gptq(q)
    if method == "compressed-tensors":
        return _compressed(q)
    if method == "fp8":
        block = q.get("weight_block_size")
        static = q.get("activation_scheme", "dynamic") == "static"
        if block is not None:
            if not (isinstance(block, list) and len(block) == 2
                    and all(isinstance(b, int) and b > 0 for b in block)):
                raise _bad(f"weight_block_size must be two positive integers, got {block!r}")
            s = replace(get_scheme("fp8-block"), params=(("block", tuple(block)),),
                        label=f"FP8 e4m3, fp32 scale per {block[0]}×{block[1]} block")
        else:
            s = replace(get_scheme("fp8"), params=(("static_input", static),))
        return s.with_ignore(_names(q.get("modules_to_not_convert")))
    if method == "fbgemm_fp8":
        return get_scheme("fbgemm-fp8").with_ignore(_names(q.get("modules_to_not_convert")))
    if method == "bitsandbytes":
        skip = _names(q.get("llm_int8_skip_modules"))
        if q.get("load_in_4bit"):
            kind = q.get("bnb_4bit_quant_type", "nf4")
            if kind not in ("nf4", "fp4"):
                raise _bad(f"bnb_4bit_quant_type {kind!r} is not nf4 or fp4")
            s = get_scheme(kind)
            if not q.get("bnb_4bit_use_double_quant", False):
                s = replace(s, params=(("quant_type", kind), ("blocksize", 64),
                                       ("double_quant", False)),
                            label=s.label.replace("double quantization", "no double quantization"))
            return s.with_ignore(skip)
        if q.get("load_in_8bit"):
            return get_scheme("bnb-int8").with_ignore(skip)
        raise _bad("bitsandbytes with neither load_in_4bit nor load_in_8bit")
    if method == "mxfp4":
        return get_scheme("mxfp4").with_ignore(_names(q.get("modules_to_not_convert")))
    raise _bad(f"quant_method {method!r} is not known here")


def _awq(q: Mapping) -> Scheme:
    bits, group = _int(q, "bits", 4), _int(q, "group_size", 128)
    version = str(q.get("version", "gemm")).lower()
    if bits != 4 or version not in ("gemm", "gemv_fast", "marlin") or q.get("zero_point") is False:
        raise _bad(f"awq with bits {bits}, version {version!r}, zero_point "
                   f"{q.get('zero_point')!r}: only 4-bit GEMM with zero points is laid out here")
    s = get_scheme("awq").with_group(group)
    return s.with_ignore(_names(q.get("modules_to_not_convert")))


def _gptq(q: Mapping) -> Scheme:
    bits, group = _int(q, "bits", 4), _int(q, "group_size", 128)
    if bits not in (2, 4, 8):
        raise _bad(f"gptq bits {bits}: 2, 4 or 8 are laid out here")
    act = bool(q.get("desc_act"))
    base = get_scheme("gptq-act-order" if act else "gptq")
    label = (f"GPTQ int{bits}, " + (f"group {group}" if group != -1 else "one group per row")
             + (", desc_act (act-order g_idx)" if act else "")
             + ": int32-packed weights and zeros, fp16 scales, g_idx")
    return replace(base, params=(("bits", bits), ("group", group)), label=label)


def _compressed(q: Mapping) -> Scheme:
    fmt = q.get("format")
    groups = q.get("config_groups") or {}
    if not isinstance(groups, Mapping) or len(groups) != 1:
        raise _bad(f"compressed-tensors with {len(groups) if isinstance(groups, Mapping) else 0} "
                   f"config_groups: one group is laid out here")
    (g,) = groups.values()
    w = g.get("weights") or {}
    bits, typ = w.get("num_bits"), w.get("type", "int")
    strategy, gsize = w.get("strategy"), w.get("group_size")
    symmetric = bool(w.get("symmetric", True))
    act = g.get("input_activations") or {}
    static = bool(act) and not act.get("dynamic", False)
    ignore = _names(q.get("ignore"))
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
            raise _bad(f"compressed-tensors strategy {strategy!r}")
        block = tuple(w["block_structure"]) if strategy == "block" else None
        params = (("strategy", strategy), ("group", gsize), ("block", block),
                  ("static_input", static), ("symmetric", symmetric))
        kind = "fp8 e4m3" if typ == "float" else "int8"
        return Scheme("compressed-tensors", f"{kind}, bf16 scale per {strategy} "
                      f"(compressed-tensors{', static input scale' if static else ''})",
                      "ct_8bit", params, ignore=ignore)
    raise _bad(f"compressed-tensors format {fmt!r} with {bits}-bit {typ}: laid out here are "
               f"pack-quantized int4/int8 and int-/float-quantized 8-bit")
