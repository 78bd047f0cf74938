"""The weight schemes, by name: what `--weights SCHEME` names and what a checkpoint's
quantization_config is read as (accounting/formats/hf_quant.py). A scheme is a layout
(accounting/formats/layouts.py) with its parameters, and which matrices it covers.

What stays unquantized is the loaders' rule, stated once here: the token embedding, the
LM head and the routers (vLLM builds the MoE gate as ReplicatedLinear(quant_config=None),
models/deepseek_v2.py and mixtral.py; AutoAWQ and GPTQ quantize only the blocks' Linear
layers), every norm and bias (model dtype); a checkpoint may leave more (its ignore list).
MXFP4 covers only the routed experts (gpt-oss: attention stays bf16).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from accounting.formats import layouts
from accounting.runtime.errors import UsageError
from accounting.registry import registrar

LINEAR, EXPERTS = "every Linear of the blocks", "the routed experts only"


@dataclass(frozen=True)
class Scheme:
    name: str
    label: str  # what the answer prints
    kind: str  # the layouts function
    params: tuple[tuple[str, object], ...] = ()
    covers: str = LINEAR
    desc_act: bool = False  # GPTQ act-order (vLLM keeps row-parallel scales whole)
    ignore: tuple[str, ...] = ()  # a checkpoint's own list of unquantized modules (patterns)

    @property
    def dense(self) -> bool:
        return self.kind == "dense"

    @property
    def group(self) -> int | None:
        return dict(self.params).get("group")

    def tensors(self, out: int, inp: int, scale_in: int | None = None) -> dict[str, int]:
        """Bytes of each stored tensor of one out × in weight (`scale_in`: GPTQ act-order's
        whole input width for a row-parallel shard's scales)."""
        kw = dict(self.params)
        if scale_in is not None and self.kind == "gptq" and self.desc_act:
            kw["scale_in"] = scale_in
        return getattr(layouts, self.kind)(out, inp, **kw)

    def with_group(self, group: int) -> Scheme:
        if "group" not in dict(self.params):
            raise UsageError(f"--group-size applies to a grouped scheme (awq, gptq, w4a16); "
                             f"{self.name} has no groups")
        params = tuple((k, group if k == "group" else v) for k, v in self.params)
        return replace(self, params=params, label=_relabel(self.label, group))

    def with_ignore(self, ignore: tuple[str, ...]) -> Scheme:
        return replace(self, ignore=tuple(ignore))


def _relabel(label: str, group: int) -> str:
    import re
    return re.sub(r"group \d+", f"group {group}", label)


SCHEMES: dict[str, Scheme] = {}


register = registrar(SCHEMES, "scheme")


for _s in (
    Scheme("bf16", "bf16 (2 bytes per weight)", "dense", (("element_bytes", 2),)),
    Scheme("fp16", "fp16 (2 bytes per weight)", "dense", (("element_bytes", 2),)),
    Scheme("fp32", "fp32 (4 bytes per weight)", "dense", (("element_bytes", 4),)),
    Scheme("fp8", "FP8 e4m3, one fp32 scale per tensor (vLLM fp8)", "fp8_tensor"),
    Scheme("fp8-block", "FP8 e4m3, fp32 scale per 128×128 block (DeepSeek-V3)", "fp8_block",
           (("block", (128, 128)),)),
    Scheme("fp8-channel", "FP8 e4m3, bf16 scale per output channel (compressed-tensors "
           "FP8_DYNAMIC)", "ct_8bit", (("strategy", "channel"),)),
    Scheme("fbgemm-fp8", "FP8 e4m3, fp32 scale per output row (FBGEMM)", "fbgemm_fp8"),
    Scheme("int8", "int8, bf16 scale per output channel (compressed-tensors W8A8)", "ct_8bit",
           (("strategy", "channel"),)),
    Scheme("w4a16", "int4 packed in int32, bf16 scale per group 128, symmetric "
           "(compressed-tensors W4A16)", "ct_packed", (("bits", 4), ("group", 128))),
    Scheme("awq", "AWQ int4, group 128: int32-packed weights and zeros, fp16 scales", "awq",
           (("bits", 4), ("group", 128))),
    Scheme("gptq", "GPTQ int4, group 128: int32-packed weights and zeros, fp16 scales, g_idx",
           "gptq", (("bits", 4), ("group", 128))),
    Scheme("gptq-act-order", "GPTQ int4, group 128, desc_act (act-order g_idx)", "gptq",
           (("bits", 4), ("group", 128)), desc_act=True),
    Scheme("gptq-int8", "GPTQ int8, group 128", "gptq", (("bits", 8), ("group", 128))),
    Scheme("mxfp4", "MXFP4 experts (e2m1, one e8m0 scale per 32), the rest bf16 (gpt-oss)",
           "mxfp4", covers=EXPERTS),
    Scheme("nf4", "bitsandbytes NF4, blocksize 64, double quantization", "bnb_4bit",
           (("quant_type", "nf4"), ("blocksize", 64), ("double_quant", True))),
    Scheme("fp4", "bitsandbytes FP4, blocksize 64, double quantization", "bnb_4bit",
           (("quant_type", "fp4"), ("blocksize", 64), ("double_quant", True))),
    Scheme("bnb-int8", "bitsandbytes LLM.int8() (int8 rows, fp32 row scales)", "bnb_8bit"),
):
    register(_s)
del _s


def get_scheme(name: str) -> Scheme:
    key = name.strip().lower()
    if key not in SCHEMES:
        raise UsageError(f"unknown weight scheme {name!r}; supported: {', '.join(SCHEMES)}")
    return SCHEMES[key]
