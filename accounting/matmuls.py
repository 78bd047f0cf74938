"""Every matrix multiply of the model, as a small frozen record with a symbolic shape.

A record says C = A·B with A: batch×m×n and B: batch×n×p (n contracted), each of m, n,
p a product of shape symbols. Its multiply-adds are batch·m·n·p and its FLOPs
FLOPS_PER_MAC times that (the 2mnp rule). Backward records are derived, not written:
each forward matmul has one gradient matmul per operand, of the same size.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.symbols import dims, monomial, product
from accounting.units import FLOPS_PER_MAC

# Components of the matmul FLOPs; every matmul belongs to exactly one.
ATTN_PROJ = "attention projections"
ATTN_CORE = "attention core"
FFN = "feed-forward"
LM_HEAD = "LM head"
COMPONENTS = (ATTN_PROJ, ATTN_CORE, FFN, LM_HEAD)

FORWARD, BACKWARD = "forward", "backward"
PHASES = {"forward": (FORWARD,), "backward": (BACKWARD,), "train": (FORWARD, BACKWARD)}

# Which attention-core FLOPs count: the full T×T the model computes and masks
# ("executed", what the FLOP counters see), or the T(T+1)/2 unmasked pairs ("useful").
EXECUTED, USEFUL = "executed", "useful"


@dataclass(frozen=True)
class Matmul:
    name: str
    component: str
    phase: str
    per_layer: bool  # True: once in each of the L blocks; False: once per pass
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]  # contracted
    p: tuple[str, ...]
    causal: bool = False  # two of the T factors are a causal (query, key) pair
    grads: tuple[str, str] = ("dA", "dB")  # names of the gradient matmuls of A and B

    @property
    def factors(self) -> tuple[str, ...]:
        return self.batch + self.m + self.n + self.p

    def useful_factors(self) -> tuple[str, ...]:
        """The factors with one causal T·T pair replaced by P = T(T+1)/2."""
        if not self.causal:
            return self.factors
        f = list(self.factors)
        f.remove("T")
        f.remove("T")
        return tuple(f) + ("P",)

    def formula(self, counting: str = EXECUTED) -> str:
        """FLOPs per instance, e.g. '2·B·T·d_model²'."""
        return monomial(FLOPS_PER_MAC, self.factors if counting == EXECUTED else self.useful_factors())

    @property
    def shapes(self) -> str:
        """'[B·h, T, d_k] @ [B·h, d_k, T]' in matmul orientation (A: m×n, B: n×p)."""
        lead = [dims(self.batch)] if self.batch else []
        a = ", ".join(lead + [dims(self.m), dims(self.n)])
        b = ", ".join(lead + [dims(self.n), dims(self.p)])
        return f"[{a}] @ [{b}]"

    def flops(self, values: dict[str, int], counting: str = EXECUTED) -> int:
        """FLOPs of one instance (one layer's worth when per_layer)."""
        factors = self.factors if counting == EXECUTED else self.useful_factors()
        return FLOPS_PER_MAC * product(factors, values)

    def count(self, values: dict[str, int]) -> int:
        return values["L"] if self.per_layer else 1


def _gradients(fwd: Matmul) -> tuple[Matmul, Matmul]:
    """dA = dC·Bᵀ (m×p @ p×n) and dB = Aᵀ·dC (n×m @ m×p): same size as the forward."""
    d_a, d_b = fwd.grads
    common = dict(component=fwd.component, phase=BACKWARD, per_layer=fwd.per_layer,
                  batch=fwd.batch, causal=fwd.causal)
    return (Matmul(f"{fwd.name} {d_a}", m=fwd.m, n=fwd.p, p=fwd.n, **common),
            Matmul(f"{fwd.name} {d_b}", m=fwd.n, n=fwd.m, p=fwd.p, **common))


def _projection(name: str, component: str, d_in: str, d_out: str, per_layer: bool = True) -> Matmul:
    # Linear: y = x Wᵀ, "... d_in, d_out d_in -> ... d_out"; batch and seq flatten into m.
    return Matmul(name, component, FORWARD, per_layer, (), ("B", "T"), (d_in,), (d_out,),
                  grads=("dX", "dW"))


# The forward pass, in execution order (CS336 §3.5–3.6). Q, K, V are three matmuls of
# d_model×d_model (h·d_k = d_model), not one per head.
FORWARD_MATMULS: tuple[Matmul, ...] = (
    _projection("Q projection", ATTN_PROJ, "d_model", "d_model"),
    _projection("K projection", ATTN_PROJ, "d_model", "d_model"),
    _projection("V projection", ATTN_PROJ, "d_model", "d_model"),
    # "... queries d_k, ... keys d_k -> ... queries keys"
    Matmul("QKᵀ scores", ATTN_CORE, FORWARD, True, ("B", "h"), ("T",), ("d_k",), ("T",),
           causal=True, grads=("dQ", "dK")),
    # "... queries keys, ... keys d_v -> ... queries d_v"
    Matmul("scores·V", ATTN_CORE, FORWARD, True, ("B", "h"), ("T",), ("T",), ("d_k",),
           causal=True, grads=("d(scores)", "dV")),
    _projection("output projection", ATTN_PROJ, "d_model", "d_model"),
    _projection("SwiGLU W1", FFN, "d_model", "d_ff"),
    _projection("SwiGLU W3", FFN, "d_model", "d_ff"),
    _projection("SwiGLU W2", FFN, "d_ff", "d_model"),
    _projection("LM head", LM_HEAD, "d_model", "V", per_layer=False),
)


def _registry(records) -> dict[tuple[str, str], Matmul]:
    """One table keyed by (phase, name) that refuses duplicates."""
    table: dict[tuple[str, str], Matmul] = {}
    for r in records:
        key = (r.phase, r.name)
        if key in table:
            raise ValueError(f"duplicate matmul record {key}")
        if r.component not in COMPONENTS:
            raise ValueError(f"matmul {r.name!r} has unknown component {r.component!r}")
        table[key] = r
    return table


# The embedding's backward is a scatter-add of dX rows into the table, not a matmul, and
# token ids need no gradient, so the backward ledger is exactly the gradients below.
MATMULS = _registry(FORWARD_MATMULS + tuple(g for f in FORWARD_MATMULS for g in _gradients(f)))


def matmuls(phase: str = "forward") -> list[Matmul]:
    """Records of a pass ('forward', 'backward' or 'train'), forward first."""
    phases = PHASES[phase]
    return [r for r in MATMULS.values() if r.phase in phases]
