"""The vectorised closed forms (accounting/analysis/grid.py) and the DataFrame sweep built on them
equal analyze() point by point, exactly.

The reference is analyze(config, T, B, phase, counting), which sums every ledger row of
one workload: independent of the closed-form reduction, the branch choice (sliding
window, RoPE table length) and the capacity rows C that grid.py handles. Points are drawn
at random across both sides of each branch point (T against W and against the context
length), for every architecture family of tests/test_architectures.py (windows, MoE with
and without a capacity factor, latent attention) and the presets.
"""
import random

import pytest

from accounting import PRESETS, ModelConfig, analyze, get_preset
from accounting.ledger import records as R
from accounting.runtime.errors import UsageError
from accounting.analysis.grid import component_grids, flops_grid
from test_architectures import BASE, VARIANTS, variant

COUNTINGS = (R.EXECUTED, R.USEFUL)
PHASES = ("forward", "backward", "train")


def _points(rng: random.Random, config: ModelConfig, n: int) -> list[int]:
    """Contexts on both sides of every branch point of this config (and at them)."""
    marks = [1, config.context_length] + ([config.sliding_window] if config.sliding_window else []) \
        + ([config.attention_chunk] if config.attention_chunk else [])  # Llama 4's chunks
    near = {max(1, m + d) for m in marks for d in (-1, 0, 1)}
    limit = config.context_length if config.positions == "learned" else 4 * max(marks) + 40
    picks = near | {rng.randint(1, limit) for _ in range(n)}
    return sorted(t for t in picks if t <= limit)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_family_equals_analyze(name):
    rng = random.Random(name)
    config = variant(name)
    seqs = _points(rng, config, 6)
    batches = [1, rng.randint(2, 5), rng.randint(6, 40)]
    for phase in PHASES:
        for counting in COUNTINGS:
            grids = component_grids(config, seqs, batches, phase, counting, (None,) + R.COMPONENTS)
            for i, t in enumerate(seqs):
                for j, b in enumerate(batches):
                    a = analyze(config, t, b, phase, counting)
                    assert grids[None][i, j] == a.matmul_flops(), (phase, counting, t, b)
                    comps = a.component_flops()
                    for c in R.COMPONENTS:
                        # (a model without recurrent layers lists no recurrent mixing)
                        assert grids[c][i, j] == comps.get(c, 0), (phase, counting, c, t, b)


def test_capacity_rows_follow_b_times_t():
    """C = ⌈c·B·T·k/E⌉ is no polynomial in B and T: each (T, B) gets its own; a capacity
    factor that is not a whole number makes the ceiling bite."""
    config = ModelConfig(**{**BASE, **VARIANTS["moe_capacity"], "moe_capacity_factor": 1.25},
                         name="capacity 1.25")
    seqs, batches = list(range(1, 30)), [1, 2, 3, 7]
    got = flops_grid(config, seqs, batches, "train")
    for i, t in enumerate(seqs):
        for j, b in enumerate(batches):
            assert got[i, j] == analyze(config, t, b, "train").matmul_flops()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_on_random_points(name):
    config = get_preset(name)
    rng = random.Random(name)
    seqs = _points(rng, config, 4)
    batches = [1, rng.randint(2, 64)]
    got = flops_grid(config, seqs, batches, "train")
    for i, t in enumerate(seqs):
        for j, b in enumerate(batches):
            assert got[i, j] == analyze(config, t, b, "train").matmul_flops()


def test_overflowing_int64_falls_back_to_python_ints():
    config = get_preset("gpt2-xl")
    big = flops_grid(config, [10**7], [10**4])  # ~2.5e24 FLOPs: past int64
    assert big.dtype == object and big[0, 0] == analyze(config, 10**7, 10**4).matmul_flops()
    assert flops_grid(config, [1024], [1]).dtype.kind == "i"


def test_the_grid_refuses_what_analyze_refuses():
    with pytest.raises(UsageError, match="learned position table"):
        flops_grid(get_preset("openai-community/gpt2"), [1024, 1025])
    with pytest.raises(UsageError, match="positive integer"):
        flops_grid(get_preset("gpt2-small"), [1024], [0])


def test_dataframe_sweep_equals_the_one_by_analyze():
    from accounting.frames import sweep, sweep_by_analysis
    configs = ["gpt2-small", "openai-community/gpt2", variant("window_alternating"),
               variant("moe_capacity"), variant("mla_window_moe")]
    rng = random.Random(7)
    seqs = sorted({rng.randint(1, 8) for _ in range(6)} | {1, 3, 8})
    for phase in ("forward", "train"):
        for batch in (1, 3):
            fast, slow = sweep(configs, seqs, batch, phase), sweep_by_analysis(configs, seqs, batch, phase)
            assert fast.equals(slow)
            assert list(fast.dtypes) == list(slow.dtypes)
            assert [type(x) for x in fast["flops"]] == [int] * len(fast)


def test_sweep_shares_past_2_to_the_53():
    """Past 2**53 FLOPs an int no longer converts to float exactly, so sweep() divides the
    Python ints (the exact ratio rounded once) rather than numpy floats: GPT-2 XL's CS336
    shape at T = 3·10^6 is about 3·10^18 forward (48·4·1600·T² for attention alone), past
    2**53 yet within int64. At T = 3·10^6 + 2 and + 3 float(a) / float(b) differs from
    a / b in the last bit for some components (found by a search over T; asserted below,
    so this case can catch the numpy shortcut used past its range)."""
    from accounting.frames import sweep, sweep_by_analysis
    seqs = [1000, 3 * 10**6 + 2, 3 * 10**6 + 3]
    fast, slow = sweep(["gpt2-xl"], seqs), sweep_by_analysis(["gpt2-xl"], seqs)
    assert 2**63 > max(fast["total_flops"]) > 48 * 4 * 1600 * 9 * 10**12 > 2**53
    assert fast.equals(slow)
    flops, totals = list(fast["flops"]), list(fast["total_flops"])
    assert list(fast["share"]) == [f / t for f, t in zip(flops, totals)]
    assert any(float(f) / float(t) != f / t for f, t in zip(flops, totals))


def test_an_empty_sweep_has_the_columns_and_dtypes_of_any_other():
    from accounting import sweep
    empty, one = sweep(["gpt2-small"], []), sweep(["gpt2-small"], [8])
    # one row per component gpt2-small has (no recurrent mixing: it has no recurrent layers)
    assert len(empty) == 0 and len(one) == len(R.COMPONENTS) - 1
    assert list(empty.columns) == list(one.columns)
    assert list(empty.dtypes) == list(one.dtypes)


def test_sweeps_refuse_contexts_that_are_not_integers():
    # A float is refused, not truncated (int(1024.5) would silently give 1024's count).
    import numpy as np

    from accounting import sweep
    for seqs in ([1024.5], ["1024"], [1024, 2048.0]):
        with pytest.raises(UsageError, match="--ctx must be a positive integer"):
            sweep(["gpt2-small"], seqs)
        with pytest.raises(UsageError, match="--ctx must be a positive integer"):
            flops_grid(get_preset("gpt2-small"), seqs)
    with pytest.raises(UsageError, match="--batch must be a positive integer"):
        flops_grid(get_preset("gpt2-small"), [8], [2.5])
    # numpy's integers are integers: 2·3·T·(…) exactly as for Python ints
    assert (flops_grid(get_preset("gpt2-small"), np.array([8, 9]), np.array([3])) ==
            flops_grid(get_preset("gpt2-small"), [8, 9], [3])).all()


def test_sweep_carries_total_and_active_parameters():
    """Mixtral-8x7B-v0.1 by hand (its config.json: V = 32,000, d = 4,096, L = 32, 32 query
    and 8 KV heads of 128, 8 experts of width 14,336, top-2, untied head): per layer
    attention 2·4096² + 2·4096·1024 = 41,943,040, one SwiGLU expert 3·4096·14336 =
    176,160,768, router 4096·8, two RMSNorm gains 2·4096; plus embedding and head 2·32000·4096
    and the final norm. Active per token keeps 2 of the 8 experts ("12.9B active")."""
    from accounting import sweep
    attn, expert, router, norms = 41_943_040, 176_160_768, 4096 * 8, 2 * 4096
    outer = 2 * 32_000 * 4096 + 4096
    total = 32 * (attn + 8 * expert + router + norms) + outer
    active = 32 * (attn + 2 * expert + router + norms) + outer
    df = sweep(["mistralai/Mixtral-8x7B-v0.1", "gpt2-small"], [1024, 2048])
    mix = df[df["model"] == "mistralai/Mixtral-8x7B-v0.1"]
    assert set(mix["params"]) == {total} and set(mix["active_params"]) == {active}
    assert active == 12_879_925_248
    dense = df[df["model"] == "gpt2-small"]
    assert (dense["params"] == dense["active_params"]).all()
