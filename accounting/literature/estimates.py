"""The literature's formulas mapped onto a config: each evaluated with its paper's own
symbols, with the terms that close it to the exact count (terms.py); FORMULAS, the registry."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from accounting.literature import formulas as F
from accounting.literature.exact import Exact
from accounting.literature.terms import (ADDED, APPROXIMATED, DOES_NOT_FIT, LEFT_OUT, Estimate,
                                         Term, core_terms, make_estimate, is_gated, is_gqa,
                                         parameter_terms, symbol_text, scaled_term, width_terms)
from accounting.ledger import records as R
from accounting.architecture.config import ModelConfig
from accounting.units import grouped


def six_n_all(x: Exact) -> Estimate:
    n, tok = x.params, x.tokens
    terms = [*parameter_terms(x, {"token": True, "position": True}),
             *core_terms(x, 0, "")]
    notes = ["N = every parameter, as the model counts them (a tied table once); "
             "6N per token is 2N forward + 4N backward."]
    if x.tied:
        notes.append("Tied head: the table counted once in N is the LM head's weight, so 6N "
                     "counts the LM head exactly.")
    return make_estimate(x, "6N", "6N (all parameters)", "6·N per token (2·N forward)",
                     F.two_n(n) * tok, F.six_n(n) * tok, symbol_text(N=n), terms, [], notes)


def six_n_non_embedding(x: Exact) -> Estimate:
    n = x.params - x.token_table - x.position_table - x.head_weight_untied
    tok = x.tokens
    terms = [scaled_term(x, "LM head (forward and backward)", LEFT_OUT, x.components[R.LM_HEAD],
                "its weight is a vocabulary matrix, excluded from non-embedding N"),
             *parameter_terms(x, {}), *core_terms(x, 0, "")]
    return make_estimate(x, "6N-nonembed", "6N (non-embedding N)",
                     "6·N per token, N without vocabulary and position matrices (Kaplan et al. "
                     "2020's N)", F.two_n(n) * tok, F.six_n(n) * tok, symbol_text(N=n), terms, [],
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
    terms = [*width_terms(x, parts, "QKV and project of width d_attn = h·d_k"),
             *core_terms(x, core, "T²/2 pairs (2·n_layer·n_ctx·d_attn per token)"),
             scaled_term(x, "LM head (forward and backward)", LEFT_OUT, x.components[R.LM_HEAD],
                "Table 1's de-embed row (2·d_model·n_vocab) is not in its total")]
    misfits = (["gated MLP"] if is_gated(c) else []) + (["GQA"] if is_gqa(c) else [])
    notes = ["Evaluated with Table 1's general form (this config's d_ff and d_attn = h·d_k); "
             "its N ≈ 12·n_layer·d_model² holds only for d_attn = d_ff/4 = d_model."]
    if c.d_ff != 4 * c.d_model:
        misfits.append("d_ff ≠ 4·d_model")
    if d_attn != c.d_model:
        misfits.append("d_attn ≠ d_model")
    return make_estimate(x, "kaplan", "Kaplan et al. 2020, Table 1",
                     "Table 1: C_forward = 2N + 2·n_layer·n_ctx·d_attn, N = "
                     "2·d_model·n_layer·(2·d_attn + d_ff); training 3×", fwd, 3 * fwd,
                     symbol_text(n_layer=c.num_layers, d_model=c.d_model, d_attn=d_attn,
                              d_ff=c.d_ff, n_ctx=T), terms, misfits, notes)


def chinchilla(x: Exact) -> Estimate:
    c, B, T = x.config, x.batch, x.seq
    t = F.chinchilla_terms(T, c.vocab_size, c.d_model, c.num_heads, c.d_k, c.d_ff, c.num_layers)
    fwd = B * t.forward()
    L = c.num_layers
    parts = {R.ATTN_PROJ: B * L * (t.kqv + t.final_linear), R.FFN: B * L * t.dense,
             "ffn_shape": "2 matrices of d_model×ffw_size (its dense block)"}
    terms = [scaled_term(x, "embeddings as a one-hot matmul", ADDED, -B * t.embeddings,
                "the model looks the rows up (0 FLOPs): −2·B·T·V·d_model"),
             scaled_term(x, "softmax as 3·heads·T² FLOPs", ADDED, -B * L * t.softmax,
                "non-matmul; the exact softmax FLOPs are listed with the non-matmul FLOPs"),
             *width_terms(x, parts, "K, Q, V of width key_size·heads"),
             *core_terms(x, B * L * (t.logits + t.reduction), "")]
    d_head = x.components[R.LM_HEAD] - B * t.final_logits
    if d_head:
        terms.append(scaled_term(x, "final logits", APPROXIMATED, d_head))
    misfits = (["gated MLP"] if is_gated(c) else []) + (["GQA"] if is_gqa(c) else [])
    notes = ["Attention is counted over the full T×T (not causal): the executed count. "
             "Table A4's ratios are reproduced only without the embedding and final-logit "
             "terms (tests/test_formulas.py); evaluated here as printed."]
    return make_estimate(x, "chinchilla", "Chinchilla 2022, Appendix F",
                     "Appendix F: embeddings + L·(attention + dense) + logits; training 3×",
                     fwd, F.chinchilla_training(fwd),
                     symbol_text(seq_len=T, vocab_size=c.vocab_size, d_model=c.d_model,
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
    terms = width_terms(x, parts, "multi-head attention of width h = d_model")
    d_core = x.components[R.ATTN_CORE] - core
    if d_core:
        terms.append(scaled_term(x, f"attention core: width h·d_k = {grouped(c.num_heads * c.d_k)}, "
                           f"not h = {grouped(c.d_model)}", DOES_NOT_FIT, d_core))
    d_head = x.components[R.LM_HEAD] - head
    if d_head:
        terms.append(scaled_term(x, "logit layer", APPROXIMATED, d_head))
    misfits = ["MLP not h→4h→h" if (is_gated(c) or c.d_ff != 4 * c.d_model) else ""]
    misfits += (["GQA"] if is_gqa(c) else []) + (["h·d_k ≠ d_model"] if d_core else [])
    return terms, [m for m in misfits if m]


def _megatron_symbols(x: Exact) -> str:
    c = x.config
    return symbol_text(B=x.batch, s=x.seq, l=c.num_layers, h=c.d_model, V=c.vocab_size)


def megatron(x: Exact) -> Estimate:
    c, B, s = x.config, x.batch, x.seq
    parts, core, head = _megatron_parts(x)
    fwd = F.megatron_forward(B, s, c.num_layers, c.d_model, c.vocab_size)
    train = F.megatron_training(B, s, c.num_layers, c.d_model, c.vocab_size, recompute=True)
    terms, misfits = _megatron_terms(x, parts, core, head)
    layers = fwd - head  # eq. (3) runs every layer's forward once more
    terms.append(Term("activation recomputation (one more forward of every layer)", ADDED, 0,
                      -layers, "eq. (3) counts hardware FLOPs: 24·B·s·l·h² + 4·B·s²·l·h more"))
    return make_estimate(x, "megatron", "Megatron-LM 2021, eq. (3)",
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
    return make_estimate(x, "korthikanti-model", "Korthikanti 2022, model FLOPs",
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
    return make_estimate(x, "korthikanti-hardware",
                     "Korthikanti 2022, hardware FLOPs",
                     "Appendix A: 72·B·s·l·h²·(1 + s/(3h) + V/(12·h·l))", fwd, train,
                     _megatron_symbols(x), terms, misfits,
                     ["Hardware FLOPs: what the GPU runs, recomputation included (HFU)."])


def palm(x: Exact) -> Estimate:
    c, tok, T = x.config, x.tokens, x.seq
    n = x.params
    core = 4 * c.num_layers * c.num_heads * c.d_k * T * tok
    terms = [*parameter_terms(x, {"token": True, "position": True}),
             *core_terms(x, core, "")]
    return make_estimate(x, "palm", "PaLM 2022, Appendix B",
                     "Appendix B: 6N + 12·L·H·Q·T per token (model FLOPs, for MFU)",
                     F.palm_forward_per_token(n, c.num_layers, c.num_heads, c.d_k, T) * tok,
                     F.palm_training_per_token(n, c.num_layers, c.num_heads, c.d_k, T) * tok,
                     symbol_text(N=n, L=c.num_layers, H=c.num_heads, Q=c.d_k, T=T), terms, [],
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
    terms = parameter_terms(x, {"token": True, "position": False})
    if block != T:
        terms.append(scaled_term(x, f"T is block_size = {grouped(block)}, not the analysed {grouped(T)}",
                        APPROXIMATED, 4 * c.num_layers * c.num_heads * q * (T - block) * tok,
                        "estimate_mfu uses cfg.block_size for T"))
    if q != c.d_k:
        terms.append(scaled_term(x, f"Q = n_embd // n_head = {q}, not head_dim {c.d_k}", DOES_NOT_FIT,
                        4 * c.num_layers * c.num_heads * (c.d_k - q) * T * tok))
    terms += core_terms(x, 4 * c.num_layers * c.num_heads * c.d_k * T * tok, "")
    misfits = (["T = block_size"] if block != T else []) + (["head_dim ≠ d_model/h"] if q != c.d_k else [])
    return make_estimate(x, "nanogpt", "nanoGPT estimate_mfu",
                     "model.py: 6N + 12·L·H·Q·T per token, N without the position table, "
                     "Q = n_embd//n_head, T = block_size", fwd, per_token * tok,
                     symbol_text(N=n, L=c.num_layers, H=c.num_heads, Q=q, T=block), terms, misfits,
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
