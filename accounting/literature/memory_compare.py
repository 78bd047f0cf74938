"""The literature's memory formulas (memory_formulas.py) evaluated for a many-GPU plan, beside
the stack's exact count, each reconciled term by term:

    formula + Σ terms = the plan's exact bytes

for two quantities: the model states of the most loaded GPU (parameters, gradients and the
optimizer's state: the ZeRO paper, Megatron's theoretical_memory_usage.py, Transformer Math
101) and the activations one transformer layer saves for one micro-batch on one GPU
(Korthikanti et al.'s Table 2, Megatron's and Transformer Math's per-layer formulas).

Model states: for each state the formula counts (parameters, gradients, optimizer state),
two terms — the bytes per element the stack keeps against the formula's, times the
formula's elements; and the elements on this GPU against the formula's, times the stack's
bytes per element. Activations: under the megatron stack, one term per tensor of
Korthikanti's list (the stack's bytes for it less the paper's) and one per tensor the
paper does not list; under the other stacks (another implementation, whose tensors do not
map one to one onto the paper's), the paper's terms taken out one by one and the
implementation's saved tensors put in one by one. No term is a remainder: tests check that
the terms close each gap exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import prod

from accounting.literature import memory_formulas as MF
from accounting.literature.formulas import Number, exact
from accounting.planning.memory import parameter_count, values
from accounting.planning.parallel import megatron as M
from accounting.planning.parallel.plan import ParallelPlan
from accounting.planning.parallel.shards import split

STATES = ("parameters", "gradients", "optimizer state")
MODEL_STATES, LAYER = "model states per GPU", "activations of one layer, one micro-batch"


@dataclass(frozen=True)
class MemoryTerm:
    label: str
    bytes: Number
    detail: str = ""


@dataclass(frozen=True)
class MemoryEstimate:
    key: str
    name: str
    source: str
    quantity: str  # MODEL_STATES or LAYER
    formula: Number
    exact: int
    evaluated_with: str
    terms: tuple[MemoryTerm, ...]

    @property
    def closes(self) -> bool:
        return self.formula + sum(t.bytes for t in self.terms) == self.exact


def _num(x: Number) -> str:
    x = Fraction(x)
    return f"{x.numerator:,}" if x.denominator == 1 else f"{float(x):,.2f}"


def _state_of(name: str) -> str:
    return "parameters" if name.startswith("parameters") else \
        "gradients" if name.startswith("gradients") else "optimizer state"


def _state_terms(p: ParallelPlan, parts: dict[str, Fraction], per_element: dict[str, Fraction],
                 formula_count: Fraction, count_label: str) -> tuple[list[MemoryTerm], int]:
    """Terms from the formula's `parts` (bytes of each state; `per_element`: its bytes per
    element; `formula_count`: the parameters it puts on one GPU before data-parallel
    sharding) to the plan's model-state items on the most loaded GPU. Per state: the bytes
    per element; the stage's TP-local tensors against the whole tensors / tp (replicated
    norms and biases, uneven splits); the whole tensors / tp against the formula's count
    (`count_label`: what the formula counts differently); the stack's sharding and padding."""
    st = p.worst.states
    vals = split(p.config).values(p.seq, 1)
    local = Fraction(st.stage_numel)
    whole = sum((Fraction(prod(t.tensor.sizes(vals, 1)), p.layout.tp)
                 for u in st.units for t in u.tensors), Fraction(0))
    items = [i for i in p.worst.items if i.model_state and i.on_gpu]
    terms, total = [], 0
    for state in STATES:
        mine = [i for i in items if _state_of(i.name) == state]
        got = sum(i.bytes.c for i in mine)
        total += got
        beta_s = sum(i.per_element for i in mine)
        n_s = Fraction(got, beta_s) if beta_s else Fraction(0)
        beta_f = per_element[state]
        n_f = parts[state] / beta_f
        share = n_f / formula_count if formula_count else Fraction(0)  # 1, or 1/d if sharded
        if beta_s != beta_f and n_f:
            terms.append(MemoryTerm(f"{state}: {beta_s} bytes per element where the formula "
                                    f"counts {_num(beta_f)}", exact((beta_s - beta_f) * n_f),
                                    ", ".join(i.name for i in mine)))
        for label, delta, what in (
                (f"{state}: TP rank 0's tensors against the whole ones / tp", local - whole,
                 "norms, row-parallel biases and learned positions replicated on every TP rank; "
                 "rank 0 holds ⌈n/tp⌉ of an uneven split"),
                (f"{state}: this stage's whole tensors / tp against the formula's count",
                 whole - formula_count, count_label),
                (f"{state}: the stack's sharding and padding", n_s / share - local if share else 0,
                 "stored elements against an even 1/d share of the stage (Megatron's 64-element "
                 "starts, lcm(d, 128) buffer end and V padded to 128·tp; FSDP's ⌈rows/d⌉ rows; "
                 "DeepSpeed's 2·d flat buffer or per-tensor padding; ZeroRedundancyOptimizer's "
                 "whole tensors)")):
            if delta:
                terms.append(MemoryTerm(label, exact(beta_s * share * delta), what))
        if not share and n_s:  # the formula holds none of this state: all of it is a term
            terms.append(MemoryTerm(f"{state}: not in the formula", got))
    return terms, total


def _psi(p: ParallelPlan) -> int:
    """Ψ: the model's parameters (the ledger's count; a tied table once)."""
    return parameter_count(p.config).evaluate(values(p.config, p.seq, 1))


def model_state_estimates(p: ParallelPlan) -> list[MemoryEstimate]:
    lo, c = p.layout, p.config
    psi = _psi(p)
    out = []
    per16 = {"parameters": Fraction(2), "gradients": Fraction(2), "optimizer state": Fraction(12)}
    zero = lo.sharding
    for key, name, source, parts in (
            ("zero", "ZeRO (Rajbhandari et al. 2020)", "§5.1, Figure 1: (2 + 2 + K)·Ψ, stage "
             f"{zero}: {MF.ZERO_PAPER_STAGES[zero]}, K = 12",
             MF.zero_parts(Fraction(psi, lo.tp * lo.pp), lo.dp, zero)),
            ("transformer-math", "Transformer Math 101 (EleutherAI 2023)",
             "2 + 2 + 12 bytes per parameter over TP·PP, sharded by ZeRO stage",
             MF.transformer_math_parts(psi, lo.tp, lo.pp, lo.dp, zero))):
        terms, total = _state_terms(p, parts, per16, Fraction(psi, lo.tp * lo.pp),
                                    f"Ψ/(tp·pp) = {_num(Fraction(psi, lo.tp * lo.pp))}: the "
                                    f"stage's blocks with the embedding on the first stage and "
                                    f"the head on the last, not an even 1/pp of Ψ")
        out.append(MemoryEstimate(key, name, source, MODEL_STATES, exact(sum(parts.values())),
                                  total, f"Ψ = {psi:,} parameters, Ψ/(tp·pp) on each GPU, "
                                  f"N_d = {lo.dp}", tuple(terms)))
    # Megatron: its own count of the most loaded shard, 18 or 6 + 12/d bytes per parameter
    dist = zero >= 1
    layer = MF.megatron_layer_params(c.d_model, c.d_ff, c.num_heads, c.kv_heads, c.d_k,
                                     c.mlp_kind.gated, c.norm == "rmsnorm")
    shard = MF.megatron_most_loaded_shard(c.num_layers, layer, c.d_model, M.padded_vocab(c, lo.tp),
                                          c.norm == "rmsnorm", not c.tie_embeddings, lo.tp, lo.pp)
    bpp = MF.megatron_bytes_per_parameter(dist, lo.dp)
    parts = {k: v * shard for k, v in bpp.items()}
    per = {k: (Fraction(12) if k == "optimizer state" else v) for k, v in bpp.items()}
    if dist:  # the optimizer's 12/d per parameter: 12 bytes of each of shard/d elements
        parts["optimizer state"] = Fraction(12, lo.dp) * shard
    terms, total = _state_terms(p, parts, per, shard,
                                "Megatron's count of the most loaded shard: no linear biases "
                                "or learned positions, norms divided by tp, V padded, the "
                                "embedding counted on every stage")
    out.append(MemoryEstimate("megatron", "Megatron-LM theoretical_memory_usage.py",
                              "compute_weight_and_optimizer_memory: most loaded shard × "
                              + ("(6 + 12/d)" if dist else "18") + " bytes",
                              MODEL_STATES, exact(sum(parts.values())), total,
                              f"most loaded shard {float(shard):,.0f} parameters (its count: no "
                              f"linear biases, norms split over TP, V padded to "
                              f"{M.padded_vocab(c, lo.tp):,}), d = {lo.dp}", tuple(terms)))
    return out


def _megatron_terms(p: ParallelPlan, paper: list[tuple[str, Number]]) -> list[MemoryTerm]:
    b = p.layout.micro_batch
    saved = p.stack.megatron_layer(p.config, p.layout, p.seq // p.layout.cp)
    terms = []
    for label, value in paper:
        mine = sum(x * b for _, term, x in saved if term == label)
        if mine != value:
            terms.append(MemoryTerm(f"{label}: {mine:,} here, the formula {_num(value)}",
                                    exact(mine - value),
                                    "; ".join(n for n, term, _ in saved if term == label)
                                    or "not saved by this stack in this setting"))
    _, rows = M.rows(p.config, p.layout, p.seq // p.layout.cp, p.stack.dropout > 0,
                     p.stack.kernel)
    why = {r.record.name: r.record.why for r in rows}  # the ledger's "saved by …"
    for name, term, x in saved:
        if term is None:
            terms.append(MemoryTerm(f"not in the formula: {name}", x * b, why.get(name, "")))
    return terms


def _rows_terms(p: ParallelPlan, paper: list[tuple[str, Number]]) -> list[MemoryTerm]:
    terms = [MemoryTerm(f"the formula's {label}", exact(-value)) for label, value in paper if value]
    terms += [MemoryTerm(f"saved: {name}", v) for name, v in p.per_layer if v]
    return terms


def layer_estimates(p: ParallelPlan) -> list[MemoryEstimate]:
    lo, c = p.layout, p.config
    s, b, h, a, t = p.seq, lo.micro_batch, c.d_model, c.num_heads, lo.tp
    rc = lo.recompute
    row = MF.korthikanti_row(lo.sp, rc == "selective", rc == "full", t)
    exact_bytes = p.per_layer_activation_bytes
    megatron = p.stack.stack.megatron_core
    out = []
    with_ = f"s = {s:,}, b = {b}, h = {h:,}, a = {a}, t = {t}"
    for key, name, source, value, paper in (
            ("korthikanti", "Korthikanti et al. 2022", f"Table 2, {row}",
             MF.korthikanti_layer(row, s, b, h, a, t),
             MF.korthikanti_terms(s, b, h, a, t, lo.sp, rc == "selective")),
            ("megatron", "Megatron-LM theoretical_memory_usage.py",
             "compute_activation_memory" + ("" if lo.sp and rc == "selective" else "_without_sp")
             + " per layer", MF.megatron_layer_activations(s, b, h, c.d_ff, t,
                                                           lo.sp and rc == "selective"),
             MF.korthikanti_terms(s, b, h, a, t, lo.sp and rc == "selective", True,
                                  c.d_ff if lo.sp and rc == "selective" else None)),
            ("transformer-math", "Transformer Math 101 (EleutherAI 2023)",
             "sbh(10 + 24/t + 5as/(ht)); 2sbh with full recomputation",
             MF.transformer_math_layer(s, b, h, a, t, rc),
             MF.korthikanti_terms(s, b, h, a, t, False, rc == "selective"))):
        if rc == "full":  # the layer's input: 2sbh
            paper = [("the layer's input", Fraction(2 * s * b * h))]
            value = 2 * s * b * h
            terms = [MemoryTerm("the layer's input: here " + (f"a sequence shard (/{t})" if lo.sp
                                                             else "whole"),
                                exact(exact_bytes - value))]
        else:
            terms = _megatron_terms(p, paper) if megatron else _rows_terms(p, paper)
        out.append(MemoryEstimate(key, name, source, LAYER, exact(value), exact_bytes, with_,
                                  tuple(t_ for t_ in terms if t_.bytes)))
    return out


def compare(p: ParallelPlan) -> list[MemoryEstimate]:
    return model_state_estimates(p) + layer_estimates(p)
