"""The literature's FLOP formulas evaluated for one config and workload, beside the exact
ledger, with a term-by-term reconciliation.

Each formula of accounting/literature/formulas.py is evaluated with its paper's own conventions (the
symbols it defines, mapped from the config below); where the paper's assumptions do not fit
the architecture (Kaplan's and Megatron's two-matrix MLP for a gated one, d_attn = d_model,
multi-head K/V for grouped-query attention) it is still evaluated as written, and a term
says what does not fit. Every term is an exact integer computed from the ledger's records
(components' matmul FLOPs, parameter tensors) minus the formula's own part, so that

    formula + Σ terms = the exact matmul FLOPs (executed count)

for the forward pass and for training (forward + backward); a difference the terms do not
explain would appear as an "unexplained" term (tests assert there is none). The exact count
is matmul FLOPs, what MFU counts; the non-matmul FLOPs (norms, softmax, activations, bias
and residual adds, ...) are listed once beside it, since every formula but Chinchilla's
leaves them all out.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

from accounting.literature import formulas as F
from accounting.ledger import records as R
from accounting.analysis.workload import Analysis, analyze
from accounting.ledger.builder import NORM_PARAMS
from accounting.spec.config import ModelConfig
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


# ---- the exact side: reductions of the ledger --------------------------------------------

@dataclass(frozen=True)
class Exact:
    """The ledger's counts for one workload, in the pieces the formulas are compared on."""
    forward_analysis: Analysis = field(repr=False)

    @property
    def config(self) -> ModelConfig:
        return self.forward_analysis.config

    @property
    def seq(self) -> int:
        return self.forward_analysis.seq

    @property
    def batch(self) -> int:
        return self.forward_analysis.batch

    @property
    def tokens(self) -> int:
        return self.seq * self.batch

    @cached_property
    def components(self) -> dict[str, int]:
        return self.forward_analysis.component_flops(R.EXECUTED)

    @cached_property
    def components_useful(self) -> dict[str, int]:
        return self.forward_analysis.component_flops(R.USEFUL)

    @property
    def forward(self) -> int:
        return sum(self.components.values())

    @property
    def forward_useful(self) -> int:
        return sum(self.components_useful.values())

    @cached_property
    def training(self) -> int:
        """Forward + backward matmul FLOPs, from the ledger's backward records."""
        a = self.forward_analysis
        return analyze(a.config, a.seq, a.batch, "train").matmul_flops(R.EXECUTED)

    @cached_property
    def training_useful(self) -> int:
        a = self.forward_analysis
        return analyze(a.config, a.seq, a.batch, "train").matmul_flops(R.USEFUL)

    @cached_property
    def backward_factor(self) -> Fraction:
        """training / forward: 3 when every matmul has two gradient matmuls of its size."""
        return Fraction(self.training, self.forward)

    @cached_property
    def kernel_recompute(self) -> int:
        """Training FLOPs beyond 3 × forward: the fused attention kernel's backward runs QKᵀ
        again (every other matmul has exactly two gradient matmuls of its size)."""
        return self.training - 3 * self.forward

    @cached_property
    def non_matmul(self) -> dict[str, int]:
        return self.forward_analysis.elementwise_by_component()

    @cached_property
    def block_forward(self) -> int:
        """Forward matmul FLOPs of all blocks (what full recomputation runs again)."""
        return sum(r.flops for r in self.forward_analysis.matmul_rows if r.record.per_layer)

    # ---- parameter groups ------------------------------------------------------------------
    def _numel(self, keep: Callable[[R.Param], bool]) -> int:
        return sum(r.numel for r in self.forward_analysis.param_rows if keep(r.record))

    @cached_property
    def params(self) -> int:
        return self.forward_analysis.param_count

    @cached_property
    def matmul_weights(self) -> int:
        """Parameters a matmul reads (a tied token table is the LM head's weight)."""
        return self._numel(lambda p: p.matmul_weight)

    @cached_property
    def token_table_lookup_only(self) -> int:
        """The token embedding table when untied: read by index only, no FLOPs."""
        return self._numel(lambda p: p.component == R.EMBEDDING and not p.matmul_weight)

    @cached_property
    def token_table(self) -> int:
        return self._numel(lambda p: p.component == R.EMBEDDING)

    @cached_property
    def position_table(self) -> int:
        return self._numel(lambda p: p.component == R.POSITION_EMBEDDING)

    @cached_property
    def head_weight_untied(self) -> int:
        return self._numel(lambda p: p.component == R.LM_HEAD)

    @cached_property
    def biases(self) -> int:
        """Bias vectors of the attention and MLP linears (norm biases are norm parameters)."""
        return self._numel(lambda p: p.component in (R.ATTN_PROJ, R.FFN) and not p.matmul_weight)

    @cached_property
    def norm_params(self) -> int:
        return self._numel(lambda p: p.component in NORM_PARAMS.values())

    @property
    def tied(self) -> bool:
        return bool(self.forward_analysis.ledger.tied)

    @cached_property
    def inactive_experts(self) -> int:
        """Parameters of the routed experts a token does not run (E − k of E per MoE layer)."""
        a = self.forward_analysis
        return a.param_count - a.active_param_count

    @property
    def capacity_padding(self) -> int:
        """Forward FLOPs of an expert capacity's padded rows (E·C run, B·T·k routed)."""
        return self.components[R.FFN] - self.components_useful[R.FFN]


def exact_counts(config: ModelConfig, seq: int | None = None, batch: int = 1) -> Exact:
    return Exact(analyze(config, seq, batch, "forward"))


# ---- building an estimate -------------------------------------------------------------------

def _estimate(x: Exact, key: str, name: str, source: str, forward: Number, training: Number,
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
    if gap_f or gap_t:
        terms.append(Term("difference not explained by the terms above", UNEXPLAINED,
                          F.exact(gap_f), F.exact(gap_t), "a defect of this reconciliation"))
    return Estimate(key, name, source, F.exact(forward), F.exact(training), evaluated_with,
                    tuple(terms), tuple(dict.fromkeys(misfits)), tuple(notes))


def _t(x: Exact, label: str, kind: str, forward: Number, detail: str = "",
       training: Number | None = None) -> Term:
    """A term whose training part is 3 × its forward part (backward = two gradient matmuls
    of each forward one's size) unless given; the fused kernel's extra QKᵀ is its own term."""
    if training is None:  # two gradient matmuls of each forward one's size
        training = 3 * forward
    return Term(label, kind, F.exact(forward), F.exact(training), detail)


def _symbols(**values: int) -> str:
    return ", ".join(f"{k} = {grouped(v)}" for k, v in values.items())


def _parameter_terms(x: Exact, counted: dict[str, bool]) -> list[Term]:
    """Terms for the parameters an N-based formula counts at 2 FLOPs per token (forward)
    though no matmul reads them. `counted` says which groups its N includes."""
    tok, out = x.tokens, []
    if counted.get("token") and x.token_table_lookup_only:
        out.append(_t(x, "token embedding table counted as a matmul", ADDED,
                      -2 * x.token_table_lookup_only * tok,
                      "the model reads rows by index (0 FLOPs); untied, the table is not the "
                      "LM head's weight: −2·V·d_model·B·T"))
    if counted.get("position") and x.position_table:
        out.append(_t(x, "position table counted as a matmul", ADDED, -2 * x.position_table * tok,
                      "learned positions are looked up and added (the add is non-matmul): "
                      "−2·T_pos·d_model·B·T"))
    if counted.get("biases", True) and x.biases:
        out.append(_t(x, "biases counted as matmul weights", APPROXIMATED, -2 * x.biases * tok,
                      "2 FLOPs per bias per token; the model adds them (non-matmul FLOPs, "
                      "listed below)"))
    if x.inactive_experts:
        c = x.config
        out.append(_t(x, f"routed experts a token does not run ({c.num_experts - c.experts_per_token} "
                         f"of {c.num_experts} per MoE layer)", DOES_NOT_FIT,
                      -2 * x.inactive_experts * tok,
                      "N counts every expert; a token runs its top-k: −2·(N − N_active)·B·T"))
    if x.capacity_padding:
        out.append(_t(x, "expert capacity: padded rows the experts run", LEFT_OUT,
                      x.capacity_padding, "E·C rows run, B·T·k of them routed slots"))
    if counted.get("norms", True) and x.norm_params:
        out.append(_t(x, "norm parameters counted as matmul weights", APPROXIMATED,
                      -2 * x.norm_params * tok, "norm gains and biases are elementwise "
                      "(non-matmul FLOPs, listed below)"))
    return out


def _core_terms(x: Exact, formula_core: Number, what: str) -> list[Term]:
    """The attention core (QKᵀ and scores·V): the formula's count → the useful (causal)
    count → the executed count (the full T×T the model computes, then masks)."""
    useful = x.components_useful[R.ATTN_CORE]
    executed = x.components[R.ATTN_CORE]
    out = []
    if formula_core == 0:
        return [_t(x, "attention core (QKᵀ, scores·V)", LEFT_OUT, executed,
                   "no term of the formula grows with T²")]
    if formula_core != useful and formula_core != executed:
        out.append(_t(x, f"attention core: {what} vs the causal pairs", APPROXIMATED,
                      useful - formula_core,
                      "useful count: the T(T+1)/2 query-key pairs a causal kernel needs"))
        out.append(_t(x, "causal masking: the masked half the model computes anyway",
                      LEFT_OUT, executed - useful,
                      "the model computes all T×T scores, then masks (executed count)"))
    elif formula_core == useful:
        out.append(_t(x, "causal masking: the masked half the model computes anyway",
                      LEFT_OUT, executed - useful))
    return out


def _gated(c: ModelConfig) -> bool:
    return c.mlp_kind.gated


def _gqa(c: ModelConfig) -> bool:
    return c.kv_heads != c.num_heads


def _width_terms(x: Exact, formula: dict[str, Number], assumes: str) -> list[Term]:
    """Per-component differences of a formula written for multi-head attention of width
    d_attn and a two-matrix MLP: each names the assumption it breaks."""
    c, out = x.config, []
    d_proj = x.components[R.ATTN_PROJ] - formula[R.ATTN_PROJ]
    if d_proj:
        why = ("multi-head latent attention: low-rank Q and K/V projections"
               if c.mla else
               f"grouped-query attention: K and V project to h_kv·d_k = {grouped(c.kv_heads * c.d_k)}"
               if _gqa(c) else f"attention width h·d_k = {grouped(c.num_heads * c.d_k)}")
        out.append(_t(x, f"attention projections: {why}", DOES_NOT_FIT, d_proj,
                      f"the formula assumes {assumes}"))
    d_ffn = x.components[R.FFN] - formula[R.FFN]
    if d_ffn:
        n = 3 if _gated(c) else 2
        if c.num_experts is not None:
            what = (f"feed-forward: a router and top-{c.experts_per_token} of {c.num_experts} "
                    f"experts of d_model×{grouped(c.expert_d_ff)}"
                    + (f" (+ {c.num_shared_experts} shared)" if c.num_shared_experts else "")
                    + f" in {sum(k.moe for k in c.layer_kinds)} of {c.num_layers} layers")
        else:
            what = (f"feed-forward: {n} matrices of d_model×d_ff = "
                    f"{grouped(c.d_model)}×{grouped(c.d_ff)} ({c.mlp_kind.label})")
        out.append(_t(x, what, DOES_NOT_FIT, d_ffn, f"the formula's MLP: {formula['ffn_shape']}"))
    return out


# ---- the formulas, mapped onto a config ------------------------------------------------------

def six_n_all(x: Exact) -> Estimate:
    n, tok = x.params, x.tokens
    terms = [*_parameter_terms(x, {"token": True, "position": True}),
             *_core_terms(x, 0, "")]
    notes = ["N = every parameter, as the model counts them (a tied table once); "
             "6N per token is 2N forward + 4N backward."]
    if x.tied:
        notes.append("Tied head: the table counted once in N is the LM head's weight, so 6N "
                     "counts the LM head exactly.")
    return _estimate(x, "6N", "6N (all parameters)", "6·N per token (2·N forward)",
                     F.two_n(n) * tok, F.six_n(n) * tok, _symbols(N=n), terms, [], notes)


def six_n_non_embedding(x: Exact) -> Estimate:
    n = x.params - x.token_table - x.position_table - x.head_weight_untied
    tok = x.tokens
    terms = [_t(x, "LM head (forward and backward)", LEFT_OUT, x.components[R.LM_HEAD],
                "its weight is a vocabulary matrix, excluded from non-embedding N"),
             *_parameter_terms(x, {}), *_core_terms(x, 0, "")]
    return _estimate(x, "6N-nonembed", "6N (non-embedding N)",
                     "6·N per token, N without vocabulary and position matrices (Kaplan et al. "
                     "2020's N)", F.two_n(n) * tok, F.six_n(n) * tok, _symbols(N=n), terms, [],
                     ["N = every parameter except the token and position tables and an untied "
                      "LM head matrix (Kaplan et al. 2020: 'excluding all vocabulary and "
                      "positional embeddings')."])


def kaplan(x: Exact) -> Estimate:
    c, tok, T, B = x.config, x.tokens, x.seq, x.batch
    d_attn = c.num_heads * c.d_k
    fwd = F.kaplan_forward_per_token(c.num_layers, c.d_model, d_attn, c.d_ff, T) * tok
    parts = {R.ATTN_PROJ: 2 * tok * c.num_layers * 4 * c.d_model * d_attn,
             R.FFN: 2 * tok * c.num_layers * 2 * c.d_model * c.d_ff,
             "ffn_shape": "2 matrices of d_model×d_ff (Table 1's feedforward row)"}
    core = 2 * c.num_layers * T * d_attn * tok
    assert parts[R.ATTN_PROJ] + parts[R.FFN] + core == fwd
    terms = [*_width_terms(x, parts, "QKV and project of width d_attn = h·d_k"),
             *_core_terms(x, core, "T²/2 pairs (2·n_layer·n_ctx·d_attn per token)"),
             _t(x, "LM head (forward and backward)", LEFT_OUT, x.components[R.LM_HEAD],
                "Table 1's de-embed row (2·d_model·n_vocab) is not in its total")]
    misfits = (["gated MLP"] if _gated(c) else []) + (["GQA"] if _gqa(c) else [])
    notes = ["Evaluated with Table 1's general form (this config's d_ff and d_attn = h·d_k); "
             "its N ≈ 12·n_layer·d_model² holds only for d_attn = d_ff/4 = d_model."]
    if c.d_ff != 4 * c.d_model:
        misfits.append("d_ff ≠ 4·d_model")
    if d_attn != c.d_model:
        misfits.append("d_attn ≠ d_model")
    return _estimate(x, "kaplan", "Kaplan et al. 2020, Table 1",
                     "Table 1: C_forward = 2N + 2·n_layer·n_ctx·d_attn, N = "
                     "2·d_model·n_layer·(2·d_attn + d_ff); training 3×", fwd, 3 * fwd,
                     _symbols(n_layer=c.num_layers, d_model=c.d_model, d_attn=d_attn,
                              d_ff=c.d_ff, n_ctx=T), terms, misfits, notes)


def chinchilla(x: Exact) -> Estimate:
    c, B, T = x.config, x.batch, x.seq
    t = F.chinchilla_terms(T, c.vocab_size, c.d_model, c.num_heads, c.d_k, c.d_ff, c.num_layers)
    fwd = B * t.forward()
    L = c.num_layers
    parts = {R.ATTN_PROJ: B * L * (t.kqv + t.final_linear), R.FFN: B * L * t.dense,
             "ffn_shape": "2 matrices of d_model×ffw_size (its dense block)"}
    terms = [_t(x, "embeddings as a one-hot matmul", ADDED, -B * t.embeddings,
                "the model looks the rows up (0 FLOPs): −2·B·T·V·d_model"),
             _t(x, "softmax as 3·heads·T² FLOPs", ADDED, -B * L * t.softmax,
                "non-matmul; the exact softmax FLOPs are listed with the non-matmul FLOPs"),
             *_width_terms(x, parts, "K, Q, V of width key_size·heads"),
             *_core_terms(x, B * L * (t.logits + t.reduction), "")]
    d_head = x.components[R.LM_HEAD] - B * t.final_logits
    if d_head:
        terms.append(_t(x, "final logits", APPROXIMATED, d_head))
    misfits = (["gated MLP"] if _gated(c) else []) + (["GQA"] if _gqa(c) else [])
    notes = ["Attention is counted over the full T×T (not causal): the executed count. "
             "Table A4's ratios are reproduced only without the embedding and final-logit "
             "terms (tests/test_formulas.py); evaluated here as printed."]
    return _estimate(x, "chinchilla", "Chinchilla 2022, Appendix F",
                     "Appendix F: embeddings + L·(attention + dense) + logits; training 3×",
                     fwd, F.chinchilla_training(fwd),
                     _symbols(seq_len=T, vocab_size=c.vocab_size, d_model=c.d_model,
                              num_heads=c.num_heads, key_size=c.d_k, ffw_size=c.d_ff,
                              num_layers=L) + f" (× B = {grouped(B)} sequences)",
                     terms, misfits, notes)


def _megatron_parts(x: Exact) -> tuple[dict, int, int]:
    c, B, s, l, h = x.config, x.batch, x.seq, x.config.num_layers, x.config.d_model
    parts = {R.ATTN_PROJ: 8 * B * s * l * h**2, R.FFN: 16 * B * s * l * h**2,
             "ffn_shape": "h → 4h → h, 16·B·s·h² per layer"}
    core = 4 * B * s**2 * l * h
    head = 2 * B * s * h * c.vocab_size
    assert parts[R.ATTN_PROJ] + parts[R.FFN] + core + head == F.megatron_forward(B, s, l, h, c.vocab_size)
    return parts, core, head


def _megatron_terms(x: Exact, parts, core, head) -> tuple[list[Term], list[str]]:
    c = x.config
    terms = _width_terms(x, parts, "multi-head attention of width h = d_model")
    d_core = x.components[R.ATTN_CORE] - core
    if d_core:
        terms.append(_t(x, f"attention core: width h·d_k = {grouped(c.num_heads * c.d_k)}, "
                           f"not h = {grouped(c.d_model)}", DOES_NOT_FIT, d_core))
    d_head = x.components[R.LM_HEAD] - head
    if d_head:
        terms.append(_t(x, "logit layer", APPROXIMATED, d_head))
    misfits = ["MLP not h→4h→h" if (_gated(c) or c.d_ff != 4 * c.d_model) else ""]
    misfits += (["GQA"] if _gqa(c) else []) + (["h·d_k ≠ d_model"] if d_core else [])
    return terms, [m for m in misfits if m]


def _megatron_symbols(x: Exact) -> str:
    c = x.config
    return _symbols(B=x.batch, s=x.seq, l=c.num_layers, h=c.d_model, V=c.vocab_size)


def megatron(x: Exact) -> Estimate:
    c, B, s = x.config, x.batch, x.seq
    parts, core, head = _megatron_parts(x)
    fwd = F.megatron_forward(B, s, c.num_layers, c.d_model, c.vocab_size)
    train = F.megatron_training(B, s, c.num_layers, c.d_model, c.vocab_size, recompute=True)
    terms, misfits = _megatron_terms(x, parts, core, head)
    layers = fwd - head  # eq. (3) runs every layer's forward once more
    terms.append(Term("activation recomputation (one more forward of every layer)", ADDED, 0,
                      -layers, "eq. (3) counts hardware FLOPs: 24·B·s·l·h² + 4·B·s²·l·h more"))
    return _estimate(x, "megatron", "Megatron-LM 2021, eq. (3)",
                     "eq. (3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), with recomputation; "
                     "forward 24·B·s·l·h² + 4·B·s²·l·h + 2·B·s·h·V", fwd, train,
                     _megatron_symbols(x), terms, misfits,
                     ["Attention counted over the full s×s (executed). Without recomputation "
                      "the paper's count is 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)): "
                      "Korthikanti et al.'s model FLOPs, the next row."])


def korthikanti_model(x: Exact) -> Estimate:
    c, B, s = x.config, x.batch, x.seq
    parts, core, head = _megatron_parts(x)
    train = F.korthikanti_model_flops(B, s, c.num_layers, c.d_model, c.vocab_size)
    terms, misfits = _megatron_terms(x, parts, core, head)
    return _estimate(x, "korthikanti-model", "Korthikanti 2022, model FLOPs",
                     "Appendix A: 72·B·s·l·h²·(1 + s/(6h) + V/(12·h·l)); forward a third",
                     F.exact(Fraction(train, 3)), train, _megatron_symbols(x), terms, misfits,
                     ["What MFU counts: forward + backward, no recomputation."])


def korthikanti_hardware(x: Exact) -> Estimate:
    c, B, s, l, h = x.config, x.batch, x.seq, x.config.num_layers, x.config.d_model
    parts, core, head = _megatron_parts(x)
    train = F.korthikanti_hardware_flops_selective(B, s, l, h, c.vocab_size)
    fwd = F.exact(Fraction(F.korthikanti_model_flops(B, s, l, h, c.vocab_size), 3))
    terms, misfits = _megatron_terms(x, parts, core, head)
    terms.append(Term("selective recomputation: QKᵀ and scores·V forward again", ADDED, 0,
                      -4 * B * s**2 * l * h, "what selective recomputation reruns: 4·B·s²·l·h"))
    terms.append(Term("s/(3h) in the paper's formula: 8·B·s²·l·h beyond that", APPROXIMATED, 0,
                      -8 * B * s**2 * l * h, "s/(3h) adds 12·B·s²·l·h to the model FLOPs, three "
                      "times the recomputed forward; its Table 5 HFU uses it as written"))
    return _estimate(x, "korthikanti-hardware",
                     "Korthikanti 2022, hardware FLOPs",
                     "Appendix A: 72·B·s·l·h²·(1 + s/(3h) + V/(12·h·l))", fwd, train,
                     _megatron_symbols(x), terms, misfits,
                     ["Hardware FLOPs: what the GPU runs, recomputation included (HFU)."])


def palm(x: Exact) -> Estimate:
    c, tok, T = x.config, x.tokens, x.seq
    n = x.params
    core = 4 * c.num_layers * c.num_heads * c.d_k * T * tok
    terms = [*_parameter_terms(x, {"token": True, "position": True}),
             *_core_terms(x, core, "")]
    return _estimate(x, "palm", "PaLM 2022, Appendix B",
                     "Appendix B: 6N + 12·L·H·Q·T per token (model FLOPs, for MFU)",
                     F.palm_forward_per_token(n, c.num_layers, c.num_heads, c.d_k, T) * tok,
                     F.palm_training_per_token(n, c.num_layers, c.num_heads, c.d_k, T) * tok,
                     _symbols(N=n, L=c.num_layers, H=c.num_heads, Q=c.d_k, T=T), terms, [],
                     ["N = every parameter ('an N-parameter model'); 12·L·H·Q·T counts the "
                      "full T×T scores: the executed count, not the causal one."])


def nanogpt_block_size(c: ModelConfig, seq: int) -> int:
    """nanoGPT's T is its block_size, the length it trains at: with a learned position table
    that is the table's length (GPT-2's 1,024, even for shorter batches); without one,
    block_size is simply set to the training length, T."""
    return c.context_length if c.positions == "learned" else seq


def nanogpt(x: Exact) -> Estimate:
    c, tok, T = x.config, x.tokens, x.seq
    n = x.params - x.position_table
    block = nanogpt_block_size(c, T)
    per_token = F.nanogpt_flops_per_token(n, c.num_layers, c.num_heads, c.d_model, block)
    q = c.d_model // c.num_heads
    fwd = F.exact(Fraction(per_token, 3) * tok)  # 6N + 12LHQT is 3 × (2N + 4LHQT)
    terms = _parameter_terms(x, {"token": True, "position": False})
    if block != T:
        terms.append(_t(x, f"T is block_size = {grouped(block)}, not the analysed {grouped(T)}",
                        APPROXIMATED, 4 * c.num_layers * c.num_heads * q * (T - block) * tok,
                        "estimate_mfu uses cfg.block_size for T"))
    if q != c.d_k:
        terms.append(_t(x, f"Q = n_embd // n_head = {q}, not head_dim {c.d_k}", DOES_NOT_FIT,
                        4 * c.num_layers * c.num_heads * (c.d_k - q) * T * tok))
    terms += _core_terms(x, 4 * c.num_layers * c.num_heads * c.d_k * T * tok, "")
    misfits = (["T = block_size"] if block != T else []) + (["head_dim ≠ d_model/h"] if q != c.d_k else [])
    return _estimate(x, "nanogpt", "nanoGPT estimate_mfu",
                     "model.py: 6N + 12·L·H·Q·T per token, N without the position table, "
                     "Q = n_embd//n_head, T = block_size", fwd, per_token * tok,
                     _symbols(N=n, L=c.num_layers, H=c.num_heads, Q=q, T=block), terms, misfits,
                     ["N = get_num_params(): every parameter but the position table (a tied "
                      "token table is kept: it is the LM head's weight)."])


@dataclass(frozen=True)
class Formula:
    key: str
    evaluate: Callable[[Exact], Estimate]


def _registry(*entries: Formula) -> tuple[Formula, ...]:
    keys = [e.key for e in entries]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise ValueError(f"duplicate formula keys: {sorted(dupes)}")
    return entries


FORMULAS: tuple[Formula, ...] = _registry(
    Formula("6N", six_n_all), Formula("6N-nonembed", six_n_non_embedding),
    Formula("kaplan", kaplan), Formula("chinchilla", chinchilla), Formula("megatron", megatron),
    Formula("korthikanti-model", korthikanti_model),
    Formula("korthikanti-hardware", korthikanti_hardware),
    Formula("palm", palm), Formula("nanogpt", nanogpt),
)


# ---- MFU conventions ----------------------------------------------------------------------

@dataclass(frozen=True)
class Convention:
    name: str
    kind: str  # "model" or "hardware"
    flops: Number  # per training step of B·T tokens
    exact: bool  # from the ledger (else a formula)


@dataclass(frozen=True)
class Comparison:
    exact: Exact
    estimates: tuple[Estimate, ...]

    @property
    def config(self) -> ModelConfig:
        return self.exact.config

    def estimate(self, key: str) -> Estimate:
        return next(e for e in self.estimates if e.key == key)

    def conventions(self) -> list[Convention]:
        """Model FLOPs (MFU's numerator) and hardware FLOPs (with recomputation) of one
        training step, exact and as the formulas count them."""
        x = self.exact
        core = x.components[R.ATTN_CORE]
        e = {k: self.estimate(k).training for k in ("palm", "nanogpt", "6N", "korthikanti-model",
                                                    "megatron", "korthikanti-hardware")}
        return [
            Convention("exact, executed attention (what FLOP counters measure)", "model",
                       x.training, True),
            Convention("exact, causal attention pairs only (useful)", "model",
                       x.training_useful, True),
            Convention("PaLM 6N + 12·L·H·Q·T", "model", e["palm"], False),
            Convention("nanoGPT estimate_mfu", "model", e["nanogpt"], False),
            Convention("6N", "model", e["6N"], False),
            Convention("Korthikanti et al. model FLOPs", "model", e["korthikanti-model"], False),
            Convention("exact + full recomputation (every block's forward again)", "hardware",
                       x.training + x.block_forward, True),
            Convention("Megatron-LM eq. (3), full recomputation", "hardware", e["megatron"], False),
            Convention("exact + selective recomputation (QKᵀ, scores·V again)", "hardware",
                       x.training + core, True),
            Convention("Korthikanti et al. eq., selective recomputation", "hardware",
                       e["korthikanti-hardware"], False),
        ]


def compare(config: ModelConfig, seq: int | None = None, batch: int = 1) -> Comparison:
    """Every formula of FORMULAS for `config` at T = seq (default: context_length), B = batch."""
    x = exact_counts(config, seq, batch)
    return Comparison(x, tuple(f.evaluate(x) for f in FORMULAS))
