"""The ledger's parameters matched to a checkpoint's tensors, by name and shape.

Names: transformers' (the model_type's name table, accounting/architecture/hf_schema.py ModuleNames,
the one the transformers cross-check and serving's shards use), or model/'s own for a
config that is not a Hugging Face one. A ledger parameter `layers.{i}.<module>.<leaf>` is
`<blocks>.<i>.<their module>.<leaf>`. Shapes: a Linear weight is stored (out, in) with the
ledger's head axes flattened (nn.Linear's layout); a transposed 2-D tensor (GPT-2's Conv1D,
transformers' pytorch_utils.py) is the same tensor. Where the table maps several of the
ledger's modules to one of theirs (GPT-2's fused c_attn) and for the routed experts (stored
per expert, or fused in one tensor, as the checkpoint chose), the elements are compared in
total under that module. A checkpoint without the base model's prefix (GPT-2's 'h.0.…'
for 'transformer.h.0.…') is read as transformers' loader reads it (modeling_utils.py,
base_model_prefix). Quantization data beside a weight (scales, zero points, packed
weights: compressed-tensors', FP8's weight_scale_inv, GPTQ/AWQ's, bitsandbytes') is stored
bytes, not a difference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from accounting.checkpoint.headers import Checkpoint, Tensor
from accounting.ledger.ledger import Ledger

# tensors a quantized checkpoint stores beside (or instead of) a module's weight:
# compressed-tensors (weight_packed, weight_scale, weight_zero_point, weight_shape,
# weight_global_scale, input_global_scale), FP8 (weight_scale_inv, input_scale), GPTQ/AWQ
# (qweight, qzeros, scales, g_idx), bitsandbytes (weight.absmax, weight.quant_map,
# weight.nested_*, weight.quant_state.*, SCB)
QUANT_LEAVES = ("weight_packed", "weight_scale", "weight_scale_inv", "weight_zero_point",
                "weight_shape", "weight_global_scale", "input_global_scale", "input_scale",
                "qweight", "qzeros", "scales", "g_idx", "SCB", "weight_format")
QUANT_PREFIXES = ("weight.absmax", "weight.quant_map", "weight.nested_", "weight.quant_state")
MAX_NAMED = 8  # differences named in full; the rest counted


@dataclass(frozen=True)
class Match:
    tensors: int  # the checkpoint's tensors
    parameters: int  # their elements (a tied copy once; a packed weight at its ledger count)
    bytes: int  # stored, every tensor (quantization data included)
    bytes_by_dtype: tuple[tuple[str, int], ...]
    expected_tensors: int
    expected_parameters: int
    differences: tuple[str, ...]
    source: str
    files: int
    checkpoint: Checkpoint | None = field(default=None, repr=False, compare=False)

    @property
    def agrees(self) -> bool:
        return not self.differences


def _hf_shape(p, v: dict) -> tuple[int, ...]:
    """The parameter's shape as nn.Linear/Embedding/norms store it."""
    dims = [v[s] for s in p.shape]
    if p.matmul_weight and not p.lookup and len(dims) > 2 and not p.name.endswith("bias"):
        split = 1 if p.module.endswith("output_proj") else len(dims) - 1  # (out..., in)
        return (prod(dims[:split]), prod(dims[split:]))
    # the tensor's real shape: a K/V bias of (h_kv, d_k) symbols is one dimension (its dims,
    # layers.Linear's), as nn.Linear stores it (issue 41 found Qwen2's GQA biases reported)
    return p.sizes(v) if p.dims else tuple(dims)


def _module_name(module: str, layer: int | None, names) -> str:
    if names is None:  # model/'s own names
        return f"layers.{layer}.{module}" if layer is not None else module
    table = names.block if layer is not None else names.top
    theirs = table.get(module, module)
    return f"{names.blocks}.{layer}.{theirs}" if layer is not None else theirs


def _leaf(p) -> str:
    module = p.module + "."
    i = p.name.find(module)
    return p.name[i + len(module):] if i >= 0 else p.name.rsplit(".", 1)[-1]


def expected(lg: Ledger, names) -> tuple[dict, dict, dict]:
    """(name -> (shape or None when fused, elements), expert module -> elements,
    tied name -> the name it copies) in the checkpoint's names."""
    v = lg.values(1, 1)
    groups = dict(lg.groups)
    tensors: dict[str, list] = {}
    experts: dict[str, int] = {}
    for p in lg.params:
        for layer in (groups[p.repeat] if p.repeat is not None else (None,)):
            module = _module_name(p.module, layer, names)
            n = prod(v[s] for s in p.shape)
            if getattr(p, "routed_expert", False):
                experts[module] = experts.get(module, 0) + n
                continue
            name = f"{module}.{_leaf(p)}"
            if name in tensors:  # several of ours in one of theirs (fused c_attn): the total
                tensors[name] = [None, tensors[name][1] + n]
                continue
            tensors[name] = [_hf_shape(p, v), n]
    tied = {}
    for copy, source in lg.tied:
        def theirs(n: str) -> str:
            for p in lg.params:
                if p.name == n:
                    return f"{_module_name(p.module, None, names)}.{_leaf(p)}"
            mod, _, leaf = n.rpartition(".")
            return f"{_module_name(mod, None, names)}.{leaf}"
        tied[theirs(copy)] = theirs(source)
    return {k: tuple(x) for k, x in tensors.items()}, experts, tied


def _shape(s) -> str:
    return "×".join(f"{n:,}" for n in s) if s else "scalar"


def match(lg: Ledger, names, ck: Checkpoint, rename=None) -> Match:
    """`rename`: transformers' tensor name -> the checkpoint's (GGUF: llama.cpp's), or None
    where it has none."""
    want, experts, tied = expected(lg, names)
    if rename is not None:
        def to(n: str) -> str:
            return rename(n) or n
        want = {to(k): v for k, v in want.items()}
        experts = {to(k): v for k, v in experts.items()}
        tied = {to(k): to(v) for k, v in tied.items()}
    prefix = names.blocks.split(".")[0] + "." if names is not None and "." in names.blocks \
        and rename is None else ""
    diffs: list[str] = []
    seen: set[str] = set()
    got_experts = {k: 0 for k in experts}
    quantized: set[str] = set()  # modules with quantization data
    params = 0
    unmatched: list[Tensor] = []
    for t in ck.tensors:
        name = t.name
        if name not in want and prefix and prefix + name in want:
            name = prefix + name
        module, _, leaf = name.rpartition(".")
        if name in want:
            seen.add(name)
            shape, n = want[name]
            if shape is None:
                ok = t.elements == n
            else:
                ok = t.shape == shape or (len(shape) == 2 and t.shape == shape[::-1])
            if not ok and t.dtype in ("U8", "I8", "I32", "U32", "F4") and t.elements < n:
                quantized.add(module)  # packed; judged by its quantization data below
                params += n
                continue
            params += t.elements if ok else 0
            if not ok:
                diffs.append(f"{name} is {_shape(t.shape)} in the checkpoint, "
                             f"{_shape(shape) if shape else f'{n:,} elements'} in the ledger")
            continue
        if name in tied:
            if t.shape == want.get(tied[name], (None,))[0]:
                continue  # the tied head stored a second time
            diffs.append(f"{name} (tied to {tied[name]}) is {_shape(t.shape)} in the checkpoint")
            continue
        hit = next((m for m in experts if name.startswith(m + ".")), None)
        if hit is not None:
            got_experts[hit] += t.elements
            params += t.elements
            continue
        q_leaf = name.split(".")[-1]
        base = next((name[:-len(p)] for p in QUANT_PREFIXES if p in name), None)
        if q_leaf in QUANT_LEAVES or base is not None:
            mod = (base or module + ".").rstrip(".")
            quantized.add(mod)
            w = mod + ".weight"
            if w in want and w not in seen and q_leaf in ("qweight", "weight_packed"):
                seen.add(w)
                params += want[w][1]
            continue
        unmatched.append(t)
    for t in unmatched:
        diffs.append(f"{t.name} ({_shape(t.shape)} {t.dtype}) is in the checkpoint, not in "
                     f"the ledger")
    for name, (shape, n) in want.items():
        if name not in seen:
            diffs.append(f"{name} ({_shape(shape) if shape else f'{n:,} elements'}) is in the "
                         f"ledger, not in the checkpoint")
    for m, n in experts.items():
        if got_experts[m] != n:
            diffs.append(f"{m}.*: {got_experts[m]:,} elements in the checkpoint, {n:,} in the "
                         f"ledger")
    if len(diffs) > MAX_NAMED:
        diffs = diffs[:MAX_NAMED] + [f"and {len(diffs) - MAX_NAMED:,} more"]
    return Match(len(ck.tensors), params, ck.bytes, tuple(ck.bytes_by_dtype().items()),
                 len(want), sum(n for _, n in want.values()) + sum(experts.values()),
                 tuple(diffs), ck.source, ck.files, ck)
