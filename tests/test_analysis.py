"""The analytic calculator against hand derivations written here, independently of the records.

Hand algebra used throughout (CS336 §3.6 2mnp rule, C = A·B with A m×n, B n×p costs 2mnp):
per block, with N = B·T tokens:
  Q, K, V, O projections   4 · 2·N·d·d          = 8·N·d²
  QKᵀ and scores·V         2 · 2·B·h·T·T·d_k    = 4·B·T²·d      (h·d_k = d)
  SwiGLU W1, W3, W2        3 · 2·N·d·d_ff       = 6·N·d·d_ff
and once: LM head          2·N·d·V
"""
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting import analyze, get_preset
from accounting.architecture.config import ModelConfig
from accounting.ledger.records import ATTN_CORE, ATTN_PROJ, FFN, LM_HEAD


def hand_forward(L, d, h, d_ff, V, T, B, useful=False):
    """Forward matmul FLOPs by component, from the algebra in the module docstring."""
    core = 4 * B * T * T * d if not useful else 2 * B * T * (T + 1) * d  # P = T(T+1)/2 pairs
    return {ATTN_PROJ: L * 8 * B * T * d * d, ATTN_CORE: L * core,
            FFN: L * 6 * B * T * d * d_ff, LM_HEAD: 2 * B * T * d * V}


def hand_params(L, d, d_ff, V):
    # embedding V·d; per block 2 norms (2d) + 4 attention matrices (4d²) + 3 FFN (3·d·d_ff);
    # final norm d; untied head V·d
    return V * d + L * (2 * d + 4 * d * d + 3 * d * d_ff) + d + V * d


def test_gpt2_xl_forward_flops_and_params():
    # By hand, GPT-2 XL (L=48, d=1600, h=25, d_ff=6400, V=50257) at T=1024, B=1:
    #   per block: 8·1024·1600² = 20,971,520,000; 4·1024²·1600 = 6,710,886,400;
    #              6·1024·1600·6400 = 62,914,560,000  -> 90,596,966,400
    #   48 blocks: 4,348,654,387,200; LM head 2·1024·1600·50257 = 164,682,137,600
    #   total 4,513,336,524,800
    a = analyze(get_preset("gpt2-xl"), seq=1024)
    assert a.matmul_flops() == 4_513_336_524_800
    assert a.component_flops_per_layer() == {ATTN_PROJ: 20_971_520_000, ATTN_CORE: 6_710_886_400,
                                             FFN: 62_914_560_000}
    # 2·80,411,200 (embedding + head) + 48·40,963,200 + 1,600 = 2,127,057,600
    assert a.param_count == 2_127_057_600


def test_gpt2_xl_16k_ratio():
    # 16k: per block 8·16384·1600² + 4·16384²·1600 + 6·16384·1600·6400 = 3,060,164,198,400;
    # ×48 + 2·16384·1600·50257 = 149,522,795,724,800, i.e. 33.13× the 1k total (the
    # chapter's "34×" is a slip).
    a = analyze(get_preset("gpt2-xl"), seq=16384)
    assert a.matmul_flops() == 149_522_795_724_800
    assert a.ratio_to_context_length() == Fraction(149_522_795_724_800, 4_513_336_524_800)


configs = st.builds(
    lambda L, heads, d_k_half, d_ff, V, ctx: ModelConfig(V, ctx, L, heads * 2 * d_k_half, heads, d_ff),
    st.integers(1, 64), st.integers(1, 32), st.integers(1, 64), st.integers(1, 20000),
    st.integers(1, 300000), st.integers(1, 4096))


@settings(max_examples=300, deadline=None)
@given(configs, st.integers(1, 10**6), st.integers(1, 512))
def test_records_match_hand_closed_form(c, T, B):
    for useful in (False, True):
        a = analyze(c, seq=T, batch=B, counting="useful" if useful else "executed")
        expected = hand_forward(c.num_layers, c.d_model, c.num_heads, c.d_ff, c.vocab_size, T, B, useful)
        assert a.component_flops() == expected
        assert a.matmul_flops() == sum(expected.values())
        # the closed-form polynomial (built from the same records, but symbolically) agrees
        assert a.matmul_polynomial().at(B=B, T=T) == sum(expected.values())
        assert sum(a.component_shares().values()) == 1
    assert a.param_count == hand_params(c.num_layers, c.d_model, c.d_ff, c.vocab_size)


@settings(max_examples=100, deadline=None)
@given(configs, st.integers(1, 5000), st.integers(1, 64))
def test_backward_is_twice_forward_per_component(c, T, B):
    # One gradient matmul per operand, each the size of the forward one: dA = dC·Bᵀ and
    # dB = Aᵀ·dC both cost 2mnp.
    fwd = analyze(c, T, B, "forward").component_flops()
    bwd = analyze(c, T, B, "backward").component_flops()
    train = analyze(c, T, B, "train").component_flops()
    assert bwd == {k: 2 * v for k, v in fwd.items()}
    assert train == {k: 3 * v for k, v in fwd.items()}


def hand_non_matmul(L, d, h, d_ff, T, B):
    """Non-matmul FLOPs under elementwise.CONVENTION, counted from the model's ops by hand.

    RMSNorm per token row of d: pow d, mean d, +eps 1, sqrt 1, divide d, gain d -> 4d + 2
    RoPE on Q and K: per pair 4 mul + 1 sub + 1 add = 3 per element, over 2·B·T·d
    attention per score element (B·h·T²): scale 1, mask 1, softmax 5 (max, sub, exp, sum, div)
    SwiGLU per hidden element (B·T·d_ff): sigmoid, x·sigmoid, gate -> 3
    residual: 2 adds of B·T·d
    """
    N = B * T
    norm = N * (4 * d + 2)
    block = 2 * norm + 3 * 2 * N * d + 7 * B * h * T * T + 3 * N * d_ff + 2 * N * d
    return L * block + norm


@settings(max_examples=200, deadline=None)
@given(configs, st.integers(1, 10**5), st.integers(1, 64))
def test_non_matmul_matches_hand_count(c, T, B):
    a = analyze(c, T, B)
    expected = hand_non_matmul(c.num_layers, c.d_model, c.num_heads, c.d_ff, T, B)
    assert a.elementwise_flops == expected
    assert a.elementwise_polynomial().at(B=B, T=T) == expected


def test_huge_workload_is_exact():
    # T = 10^7, B = 10^4 on GPT-2 XL: far past 2^63 and float precision; must stay exact.
    T, B = 10**7, 10**4
    a = analyze(get_preset("gpt2-xl"), seq=T, batch=B)
    expected = sum(hand_forward(48, 1600, 25, 6400, 50257, T, B).values())
    assert expected > 2**63
    assert a.matmul_flops() == expected
    assert isinstance(a.matmul_flops(), int)
    assert a.matmul_polynomial().at(B=B, T=T) == expected


@pytest.mark.parametrize("name,d,d_ff", [("gpt2-small", 768, 3072), ("gpt2-medium", 1024, 4096),
                                         ("gpt2-large", 1280, 5120), ("gpt2-xl", 1600, 6400)])
def test_crossover(name, d, d_ff):
    # Executed: attention core 4·B·L·T²·d vs FFN 6·B·L·T·d·d_ff -> equal at T = 1.5·d_ff.
    # Useful:   2·B·L·T(T+1)·d vs 6·B·L·T·d·d_ff -> equal at T + 1 = 3·d_ff.
    a = analyze(get_preset(name))
    x = a.crossover("executed")
    assert x.equal_at == Fraction(3 * d_ff, 2) and x.first_seq == 3 * d_ff // 2 + 1
    y = a.crossover("useful")
    assert y.equal_at == 3 * d_ff - 1 and y.first_seq == 3 * d_ff
    # and the claim holds at the integers on either side
    for counting, first in (("executed", x.first_seq), ("useful", y.first_seq)):
        before = analyze(get_preset(name), first - 1).component_flops(counting)
        after = analyze(get_preset(name), first).component_flops(counting)
        assert before[ATTN_CORE] <= before[FFN] and after[ATTN_CORE] > after[FFN]


def test_useful_counts_only_causal_pairs():
    # T=3, one head of width 2: executed QKᵀ is 2·3·2·3 = 36 FLOPs; the causal pairs
    # (q,k) with k <= q are 6 of the 9, so useful = 2·6·2 = 24.
    c = ModelConfig(vocab_size=5, context_length=3, num_layers=1, d_model=2, num_heads=1, d_ff=4)
    rows = {r.record.name: r for r in analyze(c, 3).matmul_rows}
    assert rows["QKᵀ scores"].flops == 36 and rows["QKᵀ scores"].useful_flops == 24
    assert rows["scores·V"].flops == 36 and rows["scores·V"].useful_flops == 24
    assert rows["Q projection"].useful_flops == rows["Q projection"].flops == 2 * 3 * 2 * 2


def test_params_by_component_and_memory():
    a = analyze(get_preset("gpt2-small"))
    by = a.params_by_component()
    assert by["token embedding"] == by["LM head"] == 50257 * 768
    assert by["RMSNorm gains"] == (2 * 12 + 1) * 768
    assert sum(by.values()) == a.param_count
    mem = a.param_memory_bytes()
    assert mem["fp32"] == 4 * a.param_count and mem["bf16"] == 2 * a.param_count
    assert mem["int8"] == a.param_count
