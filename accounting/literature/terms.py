"""A formula's estimate and its terms: what to add to the formula's count to reach the
exact one, and the helpers estimates.py builds them with (parameter groups, the attention
core, widths the formula assumes)."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.literature import formulas as F
from accounting.literature.exact import Exact
from accounting.ledger import records as R
from accounting.architecture.config import ModelConfig
from accounting.units import grouped

Number = int | Fraction

LEFT_OUT, ADDED, APPROXIMATED, DOES_NOT_FIT, UNEXPLAINED = (
    "left out", "added", "approximated", "does not fit", "unexplained")
KINDS = (LEFT_OUT, ADDED, APPROXIMATED, DOES_NOT_FIT, UNEXPLAINED)


@dataclass(frozen=True)
class Term:
    """What to add to a formula's count to move it to the exact one (negative: the
    formula counts something the model does not run, or counts it larger)."""
    label: str
    kind: str
    forward: Number
    training: Number
    detail: str = ""


@dataclass(frozen=True)
class Estimate:
    key: str
    name: str  # "PaLM (Chowdhery et al. 2022)"
    source: str  # where the formula is printed, and the formula
    forward: Number
    training: Number
    evaluated_with: str  # the paper's symbols and the values given to them
    terms: tuple[Term, ...]
    misfits: tuple[str, ...]  # short tags of the assumptions this config breaks
    notes: tuple[str, ...] = ()



def make_estimate(x: Exact, key: str, name: str, source: str, forward: Number, training: Number,
              evaluated_with: str, terms: list[Term], misfits: list[str],
              notes: list[str] = ()) -> Estimate:
    """Drop zero terms; add an 'unexplained' term for whatever the terms do not close."""
    if x.kernel_recompute:
        terms = [*terms, Term("fused attention kernel: its backward runs QKᵀ again", LEFT_OUT, 0,
                              x.kernel_recompute, "training only: the kernel keeps no scores, "
                              "so its backward recomputes them (5 T×T matmuls per head, not 4)")]
    terms = [t for t in terms if t.forward or t.training]
    if x.inactive_experts and any(t.label.startswith("routed experts") for t in terms):
        misfits = [*misfits, "MoE: N counts every expert"]
    gap_f = x.forward - forward - sum(t.forward for t in terms)
    gap_t = x.training - training - sum(t.training for t in terms)
    if (gap_f or gap_t) and x.recurrent:  # a hybrid model: the formulas do not apply there
        misfits = [*misfits, "hybrid: recurrent layers"]
        terms.append(Term("recurrent layers (short conv, gated DeltaNet, Mamba-2/-1): the formula "
                          "does not apply", DOES_NOT_FIT, F.exact(gap_f), F.exact(gap_t),
                          "its terms assume attention and MLP in every block; the recurrent "
                          "layers' projections, conv and chunked scan (and the MLP-only or "
                          "mixer-only blocks) differ from what it counts by this much"))
    elif gap_f or gap_t:
        terms.append(Term("difference not explained by the terms above", UNEXPLAINED,
                          F.exact(gap_f), F.exact(gap_t), "a defect of this reconciliation"))
    return Estimate(key, name, source, F.exact(forward), F.exact(training), evaluated_with,
                    tuple(terms), tuple(dict.fromkeys(misfits)), tuple(notes))


def scaled_term(x: Exact, label: str, kind: str, forward: Number, detail: str = "",
       training: Number | None = None) -> Term:
    """A term whose training part is 3 × its forward part (backward = two gradient matmuls
    of each forward one's size) unless given; the fused kernel's extra QKᵀ is its own term."""
    if training is None:  # two gradient matmuls of each forward one's size
        training = 3 * forward
    return Term(label, kind, F.exact(forward), F.exact(training), detail)


def symbol_text(**values: int) -> str:
    return ", ".join(f"{k} = {grouped(v)}" for k, v in values.items())


def parameter_terms(x: Exact, counted: dict[str, bool]) -> list[Term]:
    """Terms for the parameters an N-based formula counts at 2 FLOPs per token (forward)
    though no matmul reads them. `counted` says which groups its N includes."""
    tok, out = x.tokens, []
    if counted.get("token") and x.token_table_lookup_only:
        out.append(scaled_term(x, "token embedding table counted as a matmul", ADDED,
                      -2 * x.token_table_lookup_only * tok,
                      "the model reads rows by index (0 FLOPs); untied, the table is not the "
                      "LM head's weight: −2·V·d_model·B·T"))
    if counted.get("position") and x.position_table:
        out.append(scaled_term(x, "position table counted as a matmul", ADDED, -2 * x.position_table * tok,
                      "learned positions are looked up and added (the add is non-matmul): "
                      "−2·T_pos·d_model·B·T"))
    if counted.get("biases", True) and x.biases:
        out.append(scaled_term(x, "biases counted as matmul weights", APPROXIMATED, -2 * x.biases * tok,
                      "2 FLOPs per bias per token; the model adds them (non-matmul FLOPs, "
                      "listed below)"))
    if counted.get("biases", True) and x.attention_sinks:
        out.append(scaled_term(x, "attention sinks counted as matmul weights", APPROXIMATED,
                      -2 * x.attention_sinks * tok, "one logit per head joins the softmax "
                      "(non-matmul FLOPs, listed below)"))
    if x.inactive_experts:
        c = x.config
        out.append(scaled_term(x, f"routed experts a token does not run ({c.num_experts - c.experts_per_token} "
                         f"of {c.num_experts} per MoE layer)", DOES_NOT_FIT,
                      -2 * x.inactive_experts * tok,
                      "N counts every expert; a token runs its top-k: −2·(N − N_active)·B·T"))
    if x.capacity_padding:
        out.append(scaled_term(x, "expert capacity: padded rows the experts run", LEFT_OUT,
                      x.capacity_padding, "E·C rows run, B·T·k of them routed slots"))
    if counted.get("norms", True) and x.norm_params:
        out.append(scaled_term(x, "norm parameters counted as matmul weights", APPROXIMATED,
                      -2 * x.norm_params * tok, "norm gains and biases are elementwise "
                      "(non-matmul FLOPs, listed below)"))
    return out


def core_terms(x: Exact, formula_core: Number, what: str) -> list[Term]:
    """The attention core (QKᵀ and scores·V): the formula's count → the useful (causal)
    count → the executed count (the full T×T the model computes, then masks)."""
    useful = x.components_useful[R.ATTN_CORE]
    executed = x.components[R.ATTN_CORE]
    out = []
    if formula_core == 0:
        return [scaled_term(x, "attention core (QKᵀ, scores·V)", LEFT_OUT, executed,
                   "no term of the formula grows with T²")]
    if formula_core != useful and formula_core != executed:
        out.append(scaled_term(x, f"attention core: {what} vs the causal pairs", APPROXIMATED,
                      useful - formula_core,
                      "useful count: the T(T+1)/2 query-key pairs a causal kernel needs"))
        out.append(scaled_term(x, "causal masking: the masked half the model computes anyway",
                      LEFT_OUT, executed - useful,
                      "the model computes all T×T scores, then masks (executed count)"))
    elif formula_core == useful:
        out.append(scaled_term(x, "causal masking: the masked half the model computes anyway",
                      LEFT_OUT, executed - useful))
    return out


def is_gated(c: ModelConfig) -> bool:
    return c.mlp_kind.gated


def is_gqa(c: ModelConfig) -> bool:
    return c.kv_heads != c.num_heads


def width_terms(x: Exact, formula: dict[str, Number], assumes: str) -> list[Term]:
    """Per-component differences of a formula written for multi-head attention of width
    d_attn and a two-matrix MLP: each names the assumption it breaks."""
    c, out = x.config, []
    d_proj = x.components[R.ATTN_PROJ] - formula[R.ATTN_PROJ]
    if d_proj:
        why = ("multi-head latent attention: low-rank Q and K/V projections"
               if c.mla else
               f"grouped-query attention: K and V project to h_kv·d_k = {grouped(c.kv_heads * c.d_k)}"
               if is_gqa(c) else f"attention width h·d_k = {grouped(c.num_heads * c.d_k)}")
        out.append(scaled_term(x, f"attention projections: {why}", DOES_NOT_FIT, d_proj,
                      f"the formula assumes {assumes}"))
    d_ffn = x.components[R.FFN] - formula[R.FFN]
    if d_ffn:
        n = 3 if is_gated(c) else 2
        if c.num_experts is not None:
            what = (f"feed-forward: a router and top-{c.experts_per_token} of {c.num_experts} "
                    f"experts of d_model×{grouped(c.expert_d_ff)}"
                    + (f" (+ {c.num_shared_experts} shared)" if c.num_shared_experts else "")
                    + f" in {sum(k.moe for k in c.layer_kinds)} of {c.num_layers} layers")
        else:
            what = (f"feed-forward: {n} matrices of d_model×d_ff = "
                    f"{grouped(c.d_model)}×{grouped(c.d_ff)} ({c.mlp_kind.label})")
        out.append(scaled_term(x, what, DOES_NOT_FIT, d_ffn, f"the formula's MLP: {formula['ffn_shape']}"))
    return out
