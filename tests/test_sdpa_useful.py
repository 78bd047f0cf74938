"""The fused kernel's useful (causal) count (issue 34). FLOP counters see only the executed
work (torch's sdpa formula counts the full T×T: tests/test_architectures.py checks that), so
the useful count of `--attention sdpa` had no check but the README's snapshot: a fused record
that forgot its causal flag doubled the attention core's useful FLOPs unnoticed. The fused
kernel computes the same attention as the course's explicit core, so its useful work is the
same (query, key) pairs; each config below is built both ways and compared record by record
and in the totals, and the attention core is compared with the pairs counted by hand:

  P   = T(T+1)/2                          (causal: query i sees keys 0..i)
  P_W = Σ_i min(i + 1, W)                  (a sliding window of W keys, itself included)
  P_C = Σ over the chunks of c(c + 1)/2    (causal within chunks of C; the last one shorter)

per layer and head: QKᵀ 2·P·d_k FLOPs, scores·V 2·P·d_v (d_v: latent attention's v_head_dim,
zero-padded to d_k in the kernel, useful d_v).
"""
from dataclasses import replace

import pytest

from accounting import analyze
from accounting.ledger.records import ATTN_CORE, BACKWARD, FORWARD, USEFUL
from accounting.architecture.config import ModelConfig

BASE = dict(vocab_size=37, context_length=16, num_layers=2, d_model=32, num_heads=4, d_ff=40)
CONFIGS = {
    "mha": {},
    "gqa": dict(num_kv_heads=2),
    "window": dict(sliding_window=3),
    "window_alternating": dict(sliding_window=5, layer_types=("local", "global"), num_kv_heads=1),
    "chunked": dict(num_layers=3, attention_chunk=4, layer_types=("chunked", "chunked", "global")),
    "chunked_window": dict(num_layers=3, sliding_window=2, attention_chunk=3,
                           layer_types=("local", "chunked", "global")),
    "latent": dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6),
    "window_wider_than_T": dict(num_kv_heads=1, sliding_window=20),
}


def _pairs(kind: str, T: int, c: ModelConfig) -> int:
    if kind == "local":
        return sum(min(i + 1, c.sliding_window) for i in range(T))
    if kind == "chunked":
        C = c.attention_chunk
        sizes = [C] * (T // C) + ([T % C] if T % C else [])
        return sum(n * (n + 1) // 2 for n in sizes)
    return T * (T + 1) // 2


def _core_by_hand(c: ModelConfig, T: int, B: int) -> int:
    kinds = c.layer_types or ("local" if c.sliding_window else "global",) * c.num_layers
    if c.kv_lora_rank:
        d_k, d_v = c.qk_nope_head_dim + c.qk_rope_head_dim, c.v_head_dim
    else:
        d_k = d_v = c.d_k
    return sum(2 * B * c.num_heads * _pairs(k, T, c) * (d_k + d_v) for k in kinds)


def _useful(a, phase: str) -> dict:
    """(module, name) -> useful FLOPs (all layers) of each matmul record of the pass."""
    out = {}
    for r in a.matmul_rows:
        if r.record.phase == phase:
            key = (r.record.module, r.record.name, r.record.repeat)
            assert key not in out
            out[key] = r.useful_flops
    return out


@pytest.mark.parametrize("T", [1, 7, 16])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_fused_kernels_useful_count_is_the_naive_ones(name, T):
    B = 2
    naive = ModelConfig(**{**BASE, **CONFIGS[name]})
    fused = replace(naive, attention="sdpa")
    a, b = analyze(naive, T, B, "train"), analyze(fused, T, B, "train")
    # forward: the same records, each with the same useful count; the same totals
    assert _useful(b, FORWARD) == _useful(a, FORWARD)
    assert b.matmul_flops(USEFUL, FORWARD) == a.matmul_flops(USEFUL, FORWARD)
    # the attention core against the pairs counted by hand
    core = sum(r.useful_flops for r in b.matmul_rows
               if r.record.phase == FORWARD and r.record.component == ATTN_CORE)
    assert core == _core_by_hand(naive, T, B)
    # backward: the naive gradients, and the kernel's recomputed QKᵀ, useful as its forward
    fwd, back, naive_back = _useful(b, FORWARD), _useful(b, BACKWARD), _useful(a, BACKWARD)
    again = {k: v for k, v in back.items() if k[1].endswith(" (recomputed)")}
    assert {k: v for k, v in back.items() if k not in again} == naive_back
    assert again and all(
        v == fwd[(m, n.removesuffix(" (recomputed)"), rep)] for (m, n, rep), v in again.items())
    assert b.matmul_flops(USEFUL, BACKWARD) == a.matmul_flops(USEFUL, BACKWARD) + sum(again.values())


def test_gpt2_xl_at_1024_tokens():
    """The issue's figure: gpt2-xl, T = 1,024, B = 1, forward useful 4,352,432,537,600 FLOPs
    both ways (a fused record without its causal flag made it 4,432,884,531,200)."""
    from accounting import get_preset
    c = get_preset("gpt2-xl")
    for attention in ("naive", "sdpa"):
        a = analyze(replace(c, attention=attention), 1024, 1, "forward")
        assert a.matmul_flops(USEFUL, FORWARD) == 4_352_432_537_600
    # the core by hand: 48 layers, 25 heads of 64, P = 1024·1025/2 = 524,800 pairs:
    # 48 · 2 · 25 · 524,800 · (64 + 64) = 161,218,560,000
    assert _core_by_hand(c, 1024, 1) == 161_218_560_000
