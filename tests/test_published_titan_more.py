"""torchtitan's later published memory runs (issue 44): torchtitan issue #1185's Llama 3 70B
on 128 H100s (FSDP 16 × TP 8, full AC; data of 2025-03-25) and Trainy's Llama 3.1 8B on 32
and 64 H200s (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md, torchtitan e7c0cae).

Expected values: the figures those sources published, typed in
accounting/literature/published_runs.py (GiB: torchtitan's log line of max_memory_reserved
at those dates), and hand algebra from Llama 3.1 8B's config.json, written out below."""
from fractions import Fraction

import pytest

from accounting.cli.published_table import answer
from accounting.literature import published_runs as PR

I1185 = "torchtitan issue #1185 (70B, 128 GPUs, FSDP 16 × TP 8, full AC): "
TRAINY = "torchtitan Trainy H200 (8B, FSDP, torch.compile + Float8): "
TABLE4 = "torchtitan Table 4 (70B, 256 GPUs, FSDP 32 × TP 8, torch.compile + Float8): "
NEW = {I1185 + "bf16, vanilla TP": "71.51", I1185 + "bf16, async TP": "71.08",
       I1185 + "float8 tensorwise, vanilla TP": "55.26",
       TRAINY + "32 GPUs": "47.96", TRAINY + "64 GPUs": "46.97"}


def _flag(run, name):
    return run.flags[run.flags.index(name) + 1]


def test_typed_as_published():
    # issue #1185's comment: "bf16 (vanilla TP): ... peak memory 71.51", "bf16 (async TP):
    # ... 71.08", "float8 tensorwise (vanilla TP): ... 55.26"; Trainy's table: 47.96 (4
    # nodes), 46.97 (8 nodes), Memory(GiB)
    for name, gib in NEW.items():
        r = PR.RUNS[name]
        assert r.measured_gib == Fraction(gib) and r.metric == PR.RESERVED
        assert r.stack == "torchtitan" and r.unexpressed  # each names what it assumes
    # the layouts as the sources state them: 128 GPUs at TP 8 (FSDP 16), full AC; 4 and 8
    # nodes of 8 H200 at local batch 2, selective AC (llama3_8b.toml), fp8 all-gathers
    for row in ("bf16, vanilla TP", "bf16, async TP", "float8 tensorwise, vanilla TP"):
        r = PR.RUNS[I1185 + row]
        assert (_flag(r, "--gpus"), _flag(r, "--tp"), _flag(r, "--recompute")) == \
            ("128", "8", "full")
        assert ("--async-tp" in r.flags) == (row == "bf16, async TP")
    for gpus in (32, 64):
        r = PR.RUNS[TRAINY + f"{gpus} GPUs"]
        assert (_flag(r, "--gpus"), _flag(r, "--micro-batch"), _flag(r, "--batch"),
                _flag(r, "--precision"), _flag(r, "--recompute")) == \
            (str(gpus), "2", str(2 * gpus), "fp8-torchao-fsdp", "selective")


def test_the_trainy_rows_are_the_timing_tables_runs():
    # the same two runs feed docs/timing.md (accounting/published.py, TT_H200): one set of
    # settings for both tables
    from accounting.published import RUNS as TIMED, TT_H200
    timed = {r.gpus: r for r in TIMED if r.source == TT_H200}
    assert set(timed) == {32, 64}
    for gpus, t in timed.items():
        r = PR.RUNS[TRAINY + f"{gpus} GPUs"]
        assert (_flag(r, "--batch"), _flag(r, "--ctx"), _flag(r, "--precision"),
                _flag(r, "--recompute"), _flag(r, "--gpu")) == \
            (str(t.batch), str(t.ctx), t.precision, t.recompute, t.gpu)


_BELOW = pytest.mark.xfail(strict=True, reason="with torchtitan's compiled loss planned "
                           "(loss_memory.compiled_whole, measured on the CPU) the Trainy rows "
                           "plan 0.89 and 0.86 of their measured reserved peak: a gap the "
                           "eager loss's 15.7 GiB hid, not located (docs/parallel.md)")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_BELOW) if n.startswith(TRAINY) else n
                                  for n in NEW])
def test_never_more_than_ten_percent_below(name):
    # issue 44's bound: the plan never more than 10% below a measured peak. bf16 rows 0.95
    # and 0.96; float8 1.23 (above: docs/parallel.md, "Published runs")
    a = answer(PR.RUNS[name])
    assert a.ratio >= Fraction(9, 10), (name, float(a.ratio))


@pytest.mark.parametrize("name", list(NEW))
def test_each_run_fits_its_card(name):
    assert answer(PR.RUNS[name]).fits  # a run that ran fits its card


@pytest.mark.parametrize("row", ["bf16, vanilla TP", "bf16, async TP"])
def test_the_bf16_rows_are_within_ten_percent(row):
    a = answer(PR.RUNS[I1185 + row])
    assert Fraction(9, 10) <= a.ratio <= Fraction(11, 10), float(a.ratio)


def test_async_tp_moves_no_reserved_byte_and_the_measured_pair_agrees():
    # async TP's workspace is symmetric memory, outside the caching allocator
    # (planning/parallel/titan_compile.py), so max_memory_reserved does not count it: the
    # two rows' reserved figures are equal. The source measured them 0.43 GiB apart
    # (71.51 − 71.08), not Table 4's 4.3 (71.9 − 67.6): within 1 GiB of each other
    v, s = answer(PR.RUNS[I1185 + "bf16, vanilla TP"]), answer(PR.RUNS[I1185 + "bf16, async TP"])
    assert v.reserved == s.reserved
    measured = v.run.measured_gib - s.run.measured_gib
    assert measured == Fraction("0.43") and abs(measured) < 1
    t4 = PR.RUNS[TABLE4 + "2D"].measured_gib - PR.RUNS[TABLE4 + "2D + AsyncTP"].measured_gib
    assert t4 == Fraction("4.3") and t4 > 5 * measured


def test_trainy_rows_differ_by_the_sharded_state_at_the_loss():
    # by hand: the plan's peak is the loss's backward, where no gradient exists
    # (zero_grad(set_to_none=True)); what 32 → 64 ranks halves is each rank's fp32
    # parameter shard and AdamW's two fp32 moments, 12 bytes a parameter: Llama 3.1 8B's
    # 8,030,261,248 parameters (config.json) × 12 × (1/32 − 1/64) = 1,505,673,984 bytes.
    # (The source measured 47.96 − 46.97 = 0.99 GiB; the plan 1.40.)
    a, b = answer(PR.RUNS[TRAINY + "32 GPUs"]), answer(PR.RUNS[TRAINY + "64 GPUs"])
    assert a.moment == b.moment == "start of the backward pass (the loss's backward)"
    assert a.allocated - b.allocated == 8_030_261_248 * 12 // 64 == 1_505_673_984


@pytest.mark.xfail(strict=True, reason="issue #1185's float8 run measured 16.25 GiB below its "
                   "bf16 twin (55.26 against 71.51); under full AC the plan's float8 moves no "
                   "byte at its peak, the loss's backward (docs/parallel.md, Published runs)")
def test_the_float8_row_is_within_ten_percent_above():
    a = answer(PR.RUNS[I1185 + "float8 tensorwise, vanilla TP"])
    assert a.ratio <= Fraction(11, 10), float(a.ratio)


@pytest.mark.parametrize("gpus", [32, 64])
def test_the_trainy_rows_are_within_ten_percent_above(gpus):
    # torchtitan e7c0cae compiles the loss under training.compile (components/loss.py
    # build_cross_entropy_loss), planned by --stack torchtitan's default --compile-components
    # model,loss. Before (the loss eager, its fp32 log-probabilities and two fp32 gradients
    # live at the loss's backward): 1.30 and 1.28
    a = answer(PR.RUNS[TRAINY + f"{gpus} GPUs"])
    assert a.ratio <= Fraction(11, 10), float(a.ratio)


def test_the_runs_before_2025_04_compile_no_loss():
    # the paper's runs (9dec370: train.py "TODO: compiling loss function causes CUDA
    # errors") and #1185's (1daca4c: loss.py's torch.compile line commented out) compile the
    # blocks only; Trainy's (e7c0cae) the loss too, the stack's default
    for name, r in PR.RUNS.items():
        if r.stack == "torchtitan" and "--compile" in r.flags:
            if name.startswith(TRAINY):
                assert "--compile-components" not in r.flags
            else:
                assert _flag(r, "--compile-components") == "model", name


def test_fsdp_16_holds_the_larger_shards_table_4_measured_above():
    # docs/parallel.md: Table 4's 2D (FSDP 32) measured 71.9 GiB, above issue #1185's bf16 run
    # at FSDP 16 (71.51) though each rank of the latter holds twice the shard. By hand: at
    # the loss's backward (no gradient live) the fp32 parameters and AdamW's two moments, 12
    # bytes a parameter, Llama 3.1 70B's 70,553,706,496 (config.json) × 12 × (1/16 − 1/32)
    # / 8 TP ranks = 3,307,204,992 bytes (3.1 GiB), within FSDP2's padding of each shard's
    # dim 0 to a multiple of its ranks (under 1 MiB here)
    v, t = answer(PR.RUNS[I1185 + "bf16, vanilla TP"]), answer(PR.RUNS[TABLE4 + "2D"])
    assert v.moment == t.moment == "start of the backward pass (the loss's backward)"
    by_hand = 70_553_706_496 * 12 // 256
    assert by_hand == 3_307_204_992
    assert 0 <= v.allocated - t.allocated - by_hand < 2**20
    assert v.run.measured_gib < t.run.measured_gib  # 71.51 < 71.9, as published
