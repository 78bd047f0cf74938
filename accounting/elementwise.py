"""The forward pass's non-matmul FLOPs, one record per tensor operation the model runs.

Kept apart from the matmul ledger so that "matmul FLOPs" and "all FLOPs" are never mixed.
The per-element convention below is a choice (other tools count exp or sqrt as several
FLOPs); it is stated wherever these numbers are printed.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.symbols import monomial, product

CONVENTION = (
    "1 FLOP per output element for each elementwise arithmetic op, transcendental ones "
    "(exp, sigmoid, sqrt) included; 1 FLOP per input element for a reduction "
    "(sum, mean, max); 1 FLOP per element for the causal mask's select (torch.where); "
    "0 for copies, casts, reshapes, indexing and integer/bool ops (building the mask, "
    "positions)"
)

RMSNORM = "RMSNorm"
ROPE = "RoPE"
ATTN_SCALE = "scale by 1/√d_k"
CAUSAL_MASK = "causal mask"
SOFTMAX = "softmax"
SWIGLU_ACT = "SiLU and gating"
RESIDUAL = "residual adds"
COMPONENTS = (RMSNORM, ROPE, ATTN_SCALE, CAUSAL_MASK, SOFTMAX, SWIGLU_ACT, RESIDUAL)


@dataclass(frozen=True)
class Elementwise:
    name: str
    component: str
    op: str  # the aten operator the model runs
    module: str  # where it runs (module path relative to a block, or to the model)
    elements: tuple[str, ...]  # the tensor the FLOPs are counted over
    per_element: int
    copies: int  # instances per layer (per_layer) or per pass
    per_layer: bool
    reduction: bool = False  # `elements` is the reduction's input

    def formula(self) -> str:
        return monomial(self.per_element * self.copies, self.elements)

    def flops(self, values: dict[str, int]) -> int:
        """FLOPs of one layer's worth (per_layer) or of the whole pass."""
        return self.per_element * self.copies * product(self.elements, values)

    def count(self, values: dict[str, int]) -> int:
        return values["L"] if self.per_layer else 1


ROW = ("B", "T", "d_model")
SCORES = ("B", "h", "T", "T")
HIDDEN = ("B", "T", "d_ff")
HALF_HEADS = ("B", "h", "T", "d_k/2")


def _rmsnorm(module: str, copies: int, per_layer: bool) -> tuple[Elementwise, ...]:
    # model.RMSNorm: x / sqrt(mean(x²) + eps) * g, in float32 (CS336 eq. 4).
    def op(name, aten, elements, reduction=False):
        return Elementwise(name, RMSNORM, aten, module, elements, 1, copies, per_layer, reduction)
    return (op("x²", "aten.pow", ROW), op("mean over d_model", "aten.mean", ROW, True),
            op("+ eps", "aten.add", ("B", "T")), op("sqrt", "aten.sqrt", ("B", "T")),
            op("x / rms", "aten.div", ROW), op("· gain", "aten.mul", ROW))


def _e(name, component, op, module, elements, per_element=1, copies=1, reduction=False):
    return Elementwise(name, component, op, module, elements, per_element, copies, True, reduction)


FORWARD_ELEMENTWISE: tuple[Elementwise, ...] = (
    *_rmsnorm("ln1, ln2", copies=2, per_layer=True),
    # RoPE on Q and K: per pair, 4 multiplies (x·cos, x·sin) and one add, one subtract.
    _e("x_even·cos, x_odd·sin, x_even·sin, x_odd·cos", ROPE, "aten.mul", "attn.rope",
       HALF_HEADS, per_element=4, copies=2),
    _e("x_even·cos − x_odd·sin", ROPE, "aten.sub", "attn.rope", HALF_HEADS, copies=2),
    _e("x_even·sin + x_odd·cos", ROPE, "aten.add", "attn.rope", HALF_HEADS, copies=2),
    _e("QKᵀ / √d_k", ATTN_SCALE, "aten.div", "attn", SCORES),
    _e("where(mask, scores, −inf)", CAUSAL_MASK, "aten.where", "attn", SCORES),
    _e("max over keys", SOFTMAX, "aten.amax", "attn", SCORES, reduction=True),
    _e("x − max", SOFTMAX, "aten.sub", "attn", SCORES),
    _e("exp", SOFTMAX, "aten.exp", "attn", SCORES),
    _e("sum over keys", SOFTMAX, "aten.sum", "attn", SCORES, reduction=True),
    _e("exp / sum", SOFTMAX, "aten.div", "attn", SCORES),
    _e("sigmoid(W1·x)", SWIGLU_ACT, "aten.sigmoid", "ffn", HIDDEN),
    _e("SiLU: W1·x · sigmoid", SWIGLU_ACT, "aten.mul", "ffn", HIDDEN),
    _e("gate: SiLU(W1·x) · W3·x", SWIGLU_ACT, "aten.mul", "ffn", HIDDEN),
    _e("x + attn, y + ffn", RESIDUAL, "aten.add", "block", ROW, copies=2),
    *_rmsnorm("ln_final", copies=1, per_layer=False),
)


def _check(records):
    seen = set()
    for r in records:
        key = (r.module, r.name)
        if key in seen:
            raise ValueError(f"duplicate elementwise record {key}")
        if r.component not in COMPONENTS:
            raise ValueError(f"elementwise record {r.name!r} has unknown component {r.component!r}")
        seen.add(key)
    return records


_check(FORWARD_ELEMENTWISE)
