"""The schema of a config.json's quantization_config, one per quant_method, in one place:
each key's type, sign and allowed values, its default when absent (the default of the
library that reads it), and the rules between keys. accounting/formats/hf_quant.py reads a
block only through `read()`, so that a block the library would refuse is refused here, in
one line (exit 2), before any layout sees a group size of 0 or -2.

The rules are the readers' own (cited per key):
  transformers 5.23.0, utils/quantization_config.py: GPTQConfig.post_init (bits in 2, 3, 4,
    8; group_size > 0 or -1), AwqConfig (a GPTQConfig: the same group_size rule),
    BitsAndBytesConfig.__init__ and post_init (load_in_4bit and load_in_8bit booleans, not
    both: "load_in_4bit and load_in_8bit are both True, but only one can be used at the
    same time"; bnb_4bit_quant_type default "fp4", bnb_4bit_use_double_quant default
    False, llm_int8_skip_modules a list), FineGrainedFP8Config.post_init
    (activation_scheme "dynamic" or "static"; weight_block_size two positive integers;
    scale_fmt "float" or "ue8m0"; expert_dtype "fp8" or "fp4"; ignored_layers an alias of
    modules_to_not_convert, MiniMax's spelling);
  compressed-tensors 0.20.0, quantization/quant_args.py QuantizationArgs: type "int" or
    "float" (QuantizationType), strategy one of QuantizationStrategy, group_size >= -1 and
    > 0 for strategy "group", block_structure two positive integers or the string "RxC"
    for strategy "block" (and only then); quant_scheme.py QuantizationScheme: weights and
    input_activations are QuantizationArgs objects.
A boolean is never a number here (True is 1 to Python, not a group size: json's true).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

from accounting.runtime.errors import UsageError

METHODS = ("awq", "gptq", "compressed-tensors", "fp8", "fbgemm_fp8", "bitsandbytes", "mxfp4")
REQUIRED = object()  # a key with no default: absent is refused


def bad(what: str) -> UsageError:
    return UsageError(f"quantization_config: {what}; supported quant_method: "
                      f"{', '.join(METHODS)} (see docs/serving.md)")


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- the kinds of value -------------------------------------------------------------------
def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def group_size(v) -> bool:
    """A group of input columns: a positive width, or -1 for one group per row."""
    return is_int(v) and (v > 0 or v == -1)


def boolean(v) -> bool:
    return isinstance(v, bool)


def names(v) -> bool:
    return v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v))


def one_of(*allowed: str, fold: bool = False) -> Callable[[object], bool]:
    def check(v) -> bool:
        return isinstance(v, str) and (v.lower() if fold else v) in allowed
    return check


def block_pair(v) -> bool:
    """Two positive integers (a block's rows and columns)."""
    return isinstance(v, list) and len(v) == 2 and all(is_int(b) and b > 0 for b in v)


def ct_block(v) -> bool:
    """compressed-tensors' block_structure: two positive integers, or "RxC" (its
    validate_block_structure reads the string form for backward compatibility)."""
    if isinstance(v, str):
        parts = v.split("x")
        return len(parts) == 2 and all(p.isdigit() and int(p) > 0 for p in parts)
    return block_pair(v)


def ct_block_value(v) -> tuple[int, int]:
    return tuple(int(p) for p in v.split("x")) if isinstance(v, str) else tuple(v)


@dataclass(frozen=True)
class Key:
    name: str
    check: Callable[[object], bool]
    want: str  # what the message says it must be
    default: object = None  # REQUIRED: no default


# ---- one schema per method ----------------------------------------------------------------
SKIP = Key("modules_to_not_convert", names, "null or a list of module names")
SCHEMAS: dict[str, tuple[Key, ...]] = {
    "awq": (Key("bits", is_int, "an integer", 4),
            Key("group_size", group_size, "a positive integer or -1", 128),
            Key("zero_point", boolean, "true or false", True),
            Key("version", lambda v: isinstance(v, str), "a string", "gemm"),
            SKIP),
    "gptq": (Key("bits", is_int, "an integer", 4),
             Key("group_size", group_size, "a positive integer or -1", 128),
             Key("desc_act", boolean, "true or false", False),
             Key("sym", boolean, "true or false", True)),
    "fp8": (Key("activation_scheme", one_of("dynamic", "static", fold=True),
                '"dynamic" or "static"', "dynamic"),
            Key("weight_block_size", lambda v: v is None or block_pair(v),
                "null or two positive integers"),
            Key("scale_fmt", one_of("float", "ue8m0"), '"float" or "ue8m0"', "float"),
            Key("expert_dtype", one_of("fp8"), '"fp8" (DeepSeek-V4\'s FP4-packed experts, '
                '"fp4", are not laid out here)', "fp8"),
            SKIP, Key("ignored_layers", names, "null or a list of module names")),
    "fbgemm_fp8": (SKIP,),
    "mxfp4": (SKIP,),
    "bitsandbytes": (Key("load_in_4bit", boolean, "true or false", False),
                     Key("load_in_8bit", boolean, "true or false", False),
                     Key("bnb_4bit_quant_type", one_of("nf4", "fp4"), '"nf4" or "fp4"', "fp4"),
                     Key("bnb_4bit_use_double_quant", boolean, "true or false", False),
                     Key("llm_int8_skip_modules", names, "null or a list of module names")),
    "compressed-tensors": (Key("format", lambda v: isinstance(v, str), "a string", REQUIRED),
                           Key("config_groups", lambda v: isinstance(v, Mapping) and len(v) == 1
                               and all(isinstance(g, Mapping) for g in v.values()),
                               "one group, an object (more groups are not laid out here)",
                               REQUIRED),
                           Key("ignore", names, "null or a list of module names")),
}
# a config_groups entry's weights (and input_activations): compressed-tensors' QuantizationArgs
STRATEGIES = ("tensor", "channel", "group", "block", "token", "tensor_group", "attn_head")
CT_ARGS = (Key("num_bits", lambda v: is_int(v) and v > 0, "a positive integer", 8),
           Key("type", one_of("int", "float", fold=True), '"int" or "float"', "int"),
           Key("symmetric", boolean, "true or false", True),
           Key("strategy", lambda v: v is None or one_of(*STRATEGIES, fold=True)(v),
               f"null or one of {', '.join(STRATEGIES)}"),
           Key("group_size", lambda v: v is None or (is_int(v) and v >= -1 and v != 0),
               "null, a positive integer or -1"),
           Key("block_structure", lambda v: v is None or ct_block(v),
               'null, two positive integers or "RxC"'),
           Key("dynamic", lambda v: isinstance(v, bool) or v == "local",
               'true, false or "local"', False))


FOLDED = ("type", "strategy", "activation_scheme")  # read case-blind by their libraries


def _values(where: str, q: Mapping, keys: tuple[Key, ...]) -> dict:
    out = {}
    for k in keys:
        if k.name not in q or q[k.name] is None and k.default is not REQUIRED:
            if k.default is REQUIRED:
                raise bad(f"{where} needs {k.name} ({k.want})")
            out[k.name] = k.default
            continue
        v = q[k.name]
        if not k.check(v):
            raise bad(f"{where} {k.name} must be {k.want}, got {_show(v)}")
        out[k.name] = v.lower() if k.name in FOLDED else v
    return out


def read(q) -> tuple[str, dict]:
    """(quant_method, its keys' values, defaults filled in), or UsageError in one line."""
    if not isinstance(q, Mapping):
        raise bad(f"expected an object, got {type(q).__name__}")
    method = q.get("quant_method")
    if method not in SCHEMAS:
        raise bad(f"quant_method {_show(method)} is not known here")
    v = _values(method, q, SCHEMAS[method])
    if method == "bitsandbytes" and v["load_in_4bit"] and v["load_in_8bit"]:
        # transformers refuses the pair (BitsAndBytesConfig.__init__ and the setters)
        raise bad("bitsandbytes load_in_4bit and load_in_8bit are both true; transformers "
                  "refuses the pair (only one can be used at the same time)")
    if method == "compressed-tensors":
        (group,) = q["config_groups"].values()
        v["weights"] = ct_args("weights", group.get("weights"), required=True)
        v["input_activations"] = ct_args("input_activations", group.get("input_activations"))
    return method, v


def ct_args(where: str, a, required: bool = False) -> dict | None:
    """A config_groups entry's QuantizationArgs with compressed-tensors' own rules between
    strategy, group_size and block_structure (QuantizationArgs.validate_model_after)."""
    if a is None and not required:
        return None
    if not isinstance(a, Mapping):
        raise bad(f"compressed-tensors {where} must be an object of quantization arguments, "
                  f"got {_show(a)}")
    v = _values(f"compressed-tensors {where}", a, CT_ARGS)
    strategy, gsize, block = v["strategy"], v["group_size"], v["block_structure"]
    if strategy is None and block is None:  # compressed-tensors infers it from group_size
        strategy = v["strategy"] = ("tensor" if gsize is None else
                                    "channel" if gsize == -1 else "group")
    if strategy in ("group", "tensor_group") and (gsize is None or gsize <= 0):
        raise bad(f"compressed-tensors {where} strategy {strategy!r} needs a positive "
                  f"group_size, got {_show(gsize)}")
    if gsize is not None and gsize > 0 and strategy not in (None, "group", "tensor_group"):
        raise bad(f"compressed-tensors {where} group_size {gsize} needs strategy 'group', "
                  f"got {strategy!r}")
    if (strategy == "block") != (block is not None):
        raise bad(f"compressed-tensors {where}: strategy 'block' and block_structure go "
                  f"together (strategy {strategy!r}, block_structure {_show(block)})")
    if block is not None:
        v["block_structure"] = ct_block_value(block)
    return v
