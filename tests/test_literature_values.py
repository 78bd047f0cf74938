"""Each literature formula's value, by hand from its paper, at configs where the papers'
assumptions fit and where they do not (issue 23).

The reconciliation in accounting/literature/compare.py closes by construction: whatever gap
its terms leave becomes an "unexplained" term, so `formula + Σ terms == exact` cannot fail
and a wrong formula value (say Kaplan's d_attn taken as d_model instead of h·d_k) would
only move the gap into another term. Here every formula's forward and training FLOPs are
written out from the paper's own expression with the config's numbers, the exact count
from the 2mnp rule per matmul, and, for a GPT-2-shaped config, every term the comparison
lists, so that a term can only be what the paper's own approximation leaves.

Papers (the expressions below restate them; nothing is taken from accounting/):
* Kaplan et al. 2020, Table 1: N = 2·d_model·n_layer·(2·d_attn + d_ff), C_forward = 2N +
  2·n_layer·n_ctx·d_attn per token, d_attn = n_heads·d_head (its attention width);
  training ≈ 3 × forward (§2.1).
* Hoffmann et al. 2022 (Chinchilla), Appendix F: embeddings 2·T·V·d; per layer KQV
  2·3·T·d·(k·H), logits 2·T²·(k·H), softmax 3·H·T², reduction 2·T²·(k·H), final linear
  2·T·(k·H)·d, dense 2·T·(2·d·ffw); final logits 2·T·d·V; training 3 × forward.
* Narayanan et al. 2021 (Megatron-LM) eq. (3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with
  recomputation; the forward 24·B·s·l·h² + 4·B·s²·l·h + 2·B·s·h·V (§5.1), h = d_model.
* Korthikanti et al. 2022, Appendix A: model 72·B·s·l·h²·(1 + s/(6h) + V/(12·h·l)),
  hardware (selective recomputation) 72·B·s·l·h²·(1 + s/(3h) + V/(12·h·l)).
* Chowdhery et al. 2022 (PaLM), Appendix B: 6N + 12·L·H·Q·T per token, N every parameter.
* nanoGPT model.py estimate_mfu: 6N + 12·L·H·Q·T, N without the position table,
  Q = n_embd // n_head, T = block_size.
* 6N per token (2N forward), N all parameters or the non-embedding ones.
"""
from dataclasses import dataclass
from fractions import Fraction

import pytest

from accounting.literature.compare import compare
from accounting.literature.terms import UNEXPLAINED
from accounting.architecture.config import ModelConfig


@dataclass(frozen=True)
class Shape:
    """A config's numbers, spelt out by hand once (each config below states them)."""
    V: int
    ctx: int
    L: int
    d: int
    h: int
    kv: int
    hd: int
    f: int
    gated: bool
    layernorm: bool
    learned: bool
    tied: bool
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool
    sdpa: bool

    def params(self) -> dict[str, int]:
        """Parameters by group: Q d·h·hd, K and V d·kv·hd each, O h·hd·d (+ biases), the MLP
        3 (gated) or 2 matrices d·f (+ biases: 2f + d gated, f + d plain), two norms per
        block (RMSNorm d, LayerNorm 2d) and a final one, the token table V·d, a learned
        position table ctx·d, an untied head V·d."""
        norm = 2 * self.d if self.layernorm else self.d
        weights = self.L * (self.d * self.h * self.hd + 2 * self.d * self.kv * self.hd
                            + self.h * self.hd * self.d + (3 if self.gated else 2) * self.d * self.f)
        biases = self.L * (self.qkv_bias * (self.h * self.hd + 2 * self.kv * self.hd)
                           + self.out_bias * self.d
                           + self.mlp_bias * ((2 if self.gated else 1) * self.f + self.d))
        return {"weights": weights, "biases": biases, "norms": (2 * self.L + 1) * norm,
                "token": self.V * self.d, "position": self.ctx * self.d if self.learned else 0,
                "head": 0 if self.tied else self.V * self.d}

    def N(self) -> int:
        return sum(self.params().values())

    def exact(self, T: int, B: int) -> dict[str, int]:
        """Forward matmul FLOPs, 2mnp per matmul, executed attention (full T×T)."""
        tok = B * T
        return {"proj": self.L * 2 * tok * self.d * (2 * self.h * self.hd + 2 * self.kv * self.hd),
                "core": self.L * 2 * 2 * B * self.h * T * T * self.hd,
                "ffn": self.L * 2 * tok * (3 if self.gated else 2) * self.d * self.f,
                "head": 2 * tok * self.d * self.V}

    def core_useful(self, T: int, B: int) -> int:
        """QKᵀ and scores·V over the T(T+1)/2 causal pairs."""
        return self.L * 2 * 2 * B * self.h * self.hd * T * (T + 1) // 2

    def training(self, T: int, B: int) -> int:
        """Backward: two gradient matmuls of each forward one's size (3 × forward); the
        fused kernel's backward recomputes QKᵀ once more, 2·B·h·T²·hd per layer."""
        fwd = sum(self.exact(T, B).values())
        return 3 * fwd + (self.L * 2 * B * self.h * T * T * self.hd if self.sdpa else 0)


# Qwen3-like wide heads: h·d_k = 4·32 = 128 ≠ d_model 64; SwiGLU, RMSNorm, RoPE, untied.
WIDE = (ModelConfig(vocab_size=100, context_length=64, num_layers=2, d_model=64, num_heads=4,
                    d_ff=128, head_dim=32, name="wide heads"),
        Shape(V=100, ctx=64, L=2, d=64, h=4, kv=4, hd=32, f=128, gated=True, layernorm=False,
              learned=False, tied=False, qkv_bias=False, out_bias=False, mlp_bias=False,
              sdpa=False))
# Narrow heads with grouped-query attention: h·d_k = 6·8 = 48 ≠ 96, 2 K/V heads; a plain
# GELU MLP, tied head, Q/K/V biases, the fused kernel.
NARROW_GQA = (ModelConfig(vocab_size=90, context_length=128, num_layers=3, d_model=96,
                          num_heads=6, num_kv_heads=2, head_dim=8, d_ff=200, mlp="gelu",
                          tie_embeddings=True, qkv_bias=True, attention="sdpa", name="narrow gqa"),
              Shape(V=90, ctx=128, L=3, d=96, h=6, kv=2, hd=8, f=200, gated=False,
                    layernorm=False, learned=False, tied=True, qkv_bias=True, out_bias=False,
                    mlp_bias=False, sdpa=True))
# GPT-2's shape in small: LayerNorm, tanh-GELU MLP of 4·d, learned positions (40), tied
# head, biases everywhere, h·d_k = d_model: every paper's assumptions hold.
GPT2_LIKE = (ModelConfig(vocab_size=101, context_length=40, num_layers=2, d_model=48,
                         num_heads=4, d_ff=192, norm="layernorm", mlp="gelu_tanh",
                         positions="learned", tie_embeddings=True, qkv_bias=True, out_bias=True,
                         mlp_bias=True, name="gpt2-like"),
             Shape(V=101, ctx=40, L=2, d=48, h=4, kv=4, hd=12, f=192, gated=False, layernorm=True,
                   learned=True, tied=True, qkv_bias=True, out_bias=True, mlp_bias=True,
                   sdpa=False))

CASES = [(WIDE, 64, 3), (WIDE, 7, 1), (NARROW_GQA, 100, 2), (GPT2_LIKE, 32, 2), (GPT2_LIKE, 40, 1)]
IDS = [f"{c[0].name}-T{T}-B{B}" for c, T, B in CASES]


def by_paper(s: Shape, T: int, B: int) -> dict[str, tuple[Fraction, Fraction]]:
    """(forward, training) FLOPs of B sequences of T tokens, each formula as printed."""
    tok, p = B * T, s.params()
    N = s.N()
    out = {}
    # Kaplan Table 1, d_attn = n_heads·d_head
    d_attn = s.h * s.hd
    n_k = 2 * s.d * s.L * (2 * d_attn + s.f)
    fwd = (2 * n_k + 2 * s.L * T * d_attn) * tok
    out["kaplan"] = (fwd, 3 * fwd)
    # Chinchilla Appendix F, per sequence, × B
    kH = s.hd * s.h
    layer = (2 * 3 * T * s.d * kH + 2 * T * T * kH + 3 * s.h * T * T + 2 * T * T * kH
             + 2 * T * kH * s.d + 2 * T * (2 * s.d * s.f))
    fwd = B * (2 * T * s.V * s.d + s.L * layer + 2 * T * s.d * s.V)
    out["chinchilla"] = (fwd, 3 * fwd)
    # Megatron-LM / Korthikanti: h = d_model, s = T
    h, l, V = s.d, s.L, s.V
    meg_fwd = 24 * B * T * l * h**2 + 4 * B * T**2 * l * h + 2 * B * T * h * V
    meg = 96 * B * T * l * h**2 * (1 + Fraction(T, 6 * h) + Fraction(V, 16 * l * h))
    out["megatron"] = (meg_fwd, meg)
    model = 72 * B * T * l * h**2 * (1 + Fraction(T, 6 * h) + Fraction(V, 12 * h * l))
    out["korthikanti-model"] = (model / 3, model)
    hardware = 72 * B * T * l * h**2 * (1 + Fraction(T, 3 * h) + Fraction(V, 12 * h * l))
    out["korthikanti-hardware"] = (model / 3, hardware)
    # PaLM: Q the head dimension, T the sequence
    out["palm"] = ((2 * N + 4 * s.L * s.h * s.hd * T) * tok, (6 * N + 12 * s.L * s.h * s.hd * T) * tok)
    # nanoGPT: N without positions, Q = n_embd // n_head, T = block_size (the learned
    # table's length; without one, the training length)
    n_nano, Q, block = N - p["position"], s.d // s.h, s.ctx if s.learned else T
    per_token = 6 * n_nano + 12 * s.L * s.h * Q * block
    out["nanogpt"] = (Fraction(per_token, 3) * tok, per_token * tok)
    out["6N"] = (2 * N * tok, 6 * N * tok)
    n_ne = N - p["token"] - p["position"] - p["head"]
    out["6N-nonembed"] = (2 * n_ne * tok, 6 * n_ne * tok)
    return out


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_formula_is_its_paper_expression(case):
    (config, s), T, B = case
    cmp = compare(config, T, B)
    # the exact side, by the 2mnp rule
    assert cmp.exact.forward == sum(s.exact(T, B).values())
    assert cmp.exact.training == s.training(T, B)
    assert cmp.exact.params == s.N()
    expected = by_paper(s, T, B)
    assert sorted(e.key for e in cmp.estimates) == sorted(expected)  # every formula, once
    for e in cmp.estimates:
        assert (e.forward, e.training) == expected[e.key], e.key
        assert not [t for t in e.terms if t.kind == UNEXPLAINED], (e.key, e.terms)


def test_kaplan_d_attn_is_the_attention_width_not_d_model():
    """Table 1 writes the QKV and project rows with d_attn, the attention output width:
    with 4 heads of 32 on d_model 64 it is 128, and then the projections are exact (the
    formula's 2·4·d_model·d_attn per token is Q, K, V, O of 64×128): no projection term,
    only the gated MLP's third matrix, the diagonal, the masked half and the LM head."""
    (config, s), T, B = WIDE, 64, 3
    kap = compare(config, T, B).estimate("kaplan")
    terms = {t.label.split(":")[0]: (t.forward, t.training) for t in kap.terms}
    tok, L, d = B * T, s.L, s.d
    e = s.exact(T, B)
    assert terms == {
        "feed-forward": (2 * tok * L * d * s.f, 3 * 2 * tok * L * d * s.f),  # SwiGLU's W3
        # Kaplan's 2·n_layer·n_ctx·d_attn per token is T²/2 pairs; causal T(T+1)/2
        "attention core": (s.core_useful(T, B) - 2 * L * T * 128 * tok,
                           3 * (s.core_useful(T, B) - 2 * L * T * 128 * tok)),
        "causal masking": (e["core"] - s.core_useful(T, B), 3 * (e["core"] - s.core_useful(T, B))),
        "LM head (forward and backward)": (e["head"], 3 * e["head"]),
    }
    assert "d_attn ≠ d_model" in kap.misfits


def test_gqa_narrow_heads_terms_are_the_width_differences():
    """Kaplan with d_attn = 48 counts K and V at 48 wide; GQA's are 2·8 = 16: the
    projection term is −2·(2·96·(48 − 16))·B·T·L. Megatron's h = d_model = 96 counts the
    core 2× too wide (h·d_k = 48): its core term is −(4·B·s²·l·96 − 4·B·s²·l·48)."""
    (config, s), T, B = NARROW_GQA, 100, 2
    cmp = compare(config, T, B)
    tok = B * T
    kap = {t.label.split(":")[0]: t.forward for t in cmp.estimate("kaplan").terms}
    assert kap["attention projections"] == -2 * 2 * 96 * (48 - 16) * tok * s.L
    meg = {t.label.split(":")[0]: t.forward for t in cmp.estimate("megatron").terms}
    assert meg["attention core"] == 4 * B * T**2 * s.L * 48 - 4 * B * T**2 * s.L * 96
    # the fused kernel's extra QKᵀ is a training-only term of every formula
    for e in cmp.estimates:
        extra = [t for t in e.terms if t.label.startswith("fused attention kernel")]
        assert [(t.forward, t.training) for t in extra] == [(0, s.L * 2 * B * 6 * T * T * 8)], e.key


def test_gpt2_shaped_every_term_is_the_papers_own_approximation():
    """Where a paper's assumptions hold (GPT-2's shape: MHA of width d_model, a 4·d plain
    MLP), its terms are only what the paper chose to count differently, each by hand:
    Korthikanti's model FLOPs are exact (no term at all); Megatron only adds the
    recomputed forward; Chinchilla only its one-hot embedding and 3·H·T² softmax; PaLM and
    6N only parameters no matmul reads (positions, biases, norm gains and biases) — both
    count the full T×T core, which is the executed count."""
    (config, s), T, B = GPT2_LIKE, 32, 2
    cmp = compare(config, T, B)
    tok, p, e = B * T, s.params(), s.exact(T, B)
    L, d, h, V = s.L, s.d, s.h, s.V

    def terms(key):
        return {t.label: (t.forward, t.training) for t in cmp.estimate(key).terms}

    def thrice(x):
        return (x, 3 * x)

    params = {"position table counted as a matmul": thrice(-2 * p["position"] * tok),
              "biases counted as matmul weights": thrice(-2 * p["biases"] * tok),
              "norm parameters counted as matmul weights": thrice(-2 * p["norms"] * tok)}
    assert terms("korthikanti-model") == {}
    assert terms("megatron") == {"activation recomputation (one more forward of every layer)":
                                 (0, -(24 * B * T * L * d**2 + 4 * B * T**2 * L * d))}
    assert terms("korthikanti-hardware") == {
        "selective recomputation: QKᵀ and scores·V forward again": (0, -4 * B * T**2 * L * d),
        "s/(3h) in the paper's formula: 8·B·s²·l·h beyond that": (0, -8 * B * T**2 * L * d)}
    assert terms("chinchilla") == {"embeddings as a one-hot matmul": thrice(-2 * B * T * V * d),
                                   "softmax as 3·heads·T² FLOPs": thrice(-3 * B * L * h * T * T)}
    assert terms("palm") == params
    assert terms("6N") == {**params, "attention core (QKᵀ, scores·V)": thrice(e["core"])}
    # nanoGPT: N without positions, and T = block_size 40 for a 32-token batch
    nano = {k: v for k, v in params.items() if not k.startswith("position")}
    nano["T is block_size = 40, not the analysed 32"] = thrice(4 * L * h * (d // h) * (T - 40) * tok)
    assert terms("nanogpt") == nano
    # Kaplan's non-embedding count has no bias or norm: the core's diagonal and masked half
    # and the LM head are all it leaves out
    kap = {k.split(":")[0]: v for k, v in terms("kaplan").items()}
    assert kap == {"attention core": thrice(s.core_useful(T, B) - 2 * L * T * d * tok),
                   "causal masking": thrice(e["core"] - s.core_useful(T, B)),
                   "LM head (forward and backward)": thrice(e["head"])}
