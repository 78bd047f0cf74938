"""`serve --search` with length distributions, a TTFT percentile and a request rate (issue 40):
the pruned search against its exhaustive mode on the new workload kinds, p50 of a fixed
workload against the fixed case, percentiles monotone, utilisation, and the CLI's contract."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from accounting.formats.schemes import get_scheme
from accounting.architecture.loaders import read_config
from accounting.architecture.presets import get_preset
from accounting.serving import lengths
from accounting.serving.search import Workload, search
from tests.cli_run import refused_in_one_line, run

L70 = str(Path(__file__).parent / "data" / "serving" / "Llama-3.1-70B.json")


def _config():
    return read_config(L70)[0]


def _figures(r):
    return [(x.key(), x.replicas, x.ttft_seconds, x.tpot_seconds,
             x.tokens_per_second_per_gpu(r.workload.osl_mean)) for x in r.layouts]


def test_p50_of_a_fixed_workload_is_the_fixed_case():
    """A fixed prompt has one prefill time: its every percentile is it (no request rate)."""
    c, s = _config(), get_scheme("bf16")
    plain = search(c, s, "H100", Workload(4096, 1024, Fraction(3), Fraction(1, 20), None, 8))
    for p in (Fraction(1, 2), Fraction(99, 100)):
        w = Workload.of(lengths.fixed(4096), lengths.fixed(1024), Fraction(3), Fraction(1, 20),
                        None, 8, percentile=p)
        assert _figures(search(c, s, "H100", w)) == _figures(plain)


def test_distribution_without_a_queue_uses_mean_lengths_and_the_prompt_quantile():
    """A two-valued prompt list: the aggregated mean TPOT adds E[P]·B/OSL, with E[P] the mean
    of serve's TTFTs at the two prompts (serve run here at each); p90 TTFT is the longer
    one's."""
    from accounting.serving.plan import serve
    c, s = _config(), get_scheme("bf16")
    isl = lengths.parse("list:1024,3072", "--isl")
    w = Workload.of(isl, lengths.fixed(512), None, None, None, 4, percentile=Fraction(9, 10))
    r = search(c, s, "H100", w)
    agg = next(x for x in r.frontier if not x.disaggregated)
    d = agg.decode
    ttft = {n: serve(c, get_scheme(d.weights), gpu="H100", tp=d.tp, kv_dtype=d.kv_dtype,
                     ctx=n + 512, prompt=n, concurrency=1).time.ttft_seconds
            for n in (1024, 3072)}
    assert w.isl == 2048  # the plans' length: the mean
    assert agg.ttft_seconds == ttft[3072]  # p90 of {1024, 3072} is 3072
    mean = d.step_seconds + d.batch * (ttft[1024] + ttft[3072]) / 2 / 512
    assert agg.step_mean == mean
    # p90 of the TPOT's spread (two prompt lengths: the prefills in a request's life vary)
    assert agg.tpot_seconds > mean


@pytest.mark.slow
@pytest.mark.parametrize("rate,p", [(None, Fraction(9, 10)), (Fraction(3), Fraction(99, 100)),
                                    (Fraction(1), None)])
def test_search_equals_its_exhaustive_mode_on_distributions(rate, p):
    c, s = _config(), get_scheme("bf16")
    w = Workload.of(lengths.parse("uniform:1024,6144", "--isl", 1),
                    lengths.parse("normal:512,128", "--osl", 1), Fraction(2), Fraction(1, 25),
                    rate, 8, percentile=p)
    fast = search(c, s, "H100", w)
    full = search(c, s, "H100", w, exhaustive=True)
    assert fast.layouts, "a layout meets these targets on 8 H100s"
    assert fast.layouts[0].tokens_per_second_per_gpu(w.osl_mean) == \
        full.layouts[0].tokens_per_second_per_gpu(w.osl_mean)


def test_percentiles_are_monotone_and_a_rate_adds_a_wait():
    c, s = _config(), get_scheme("bf16")
    isl, osl = lengths.parse("uniform:512,4096", "--isl"), lengths.fixed(256)

    def by_key(p, rate):
        w = Workload.of(isl, osl, None, Fraction(1, 20), rate, 8, percentile=p)
        return {x.key(): x for x in search(c, s, "H100", w).layouts}
    ps = [Fraction(1, 2), Fraction(9, 10), Fraction(99, 100)]
    queued = [by_key(p, Fraction(2)) for p in ps]
    alone = [by_key(p, None) for p in ps]
    common = set.intersection(*(set(q) for q in queued + alone))
    assert common
    for k in common:
        ts = [q[k].ttft_seconds for q in queued]
        assert ts == sorted(ts) and ts[0] < ts[-1]
        for q, a in zip(queued, alone):
            assert q[k].ttft_seconds >= a[k].ttft_seconds  # the wait is never negative
            assert 0 < q[k].utilisation < 1


def test_a_layout_at_utilisation_one_or_more_meets_nothing():
    """One GPU cannot sustain 100 requests/s of 4k prompts: no layout is offered, exit 0."""
    c, s = _config(), get_scheme("fp8")
    w = Workload(4096, 256, None, None, Fraction(100), 1)
    assert not search(c, s, "H100", w).layouts


def test_cli_contract_with_a_distribution(capsys):
    code, out, err = run(capsys, "serve", "--config", L70, "--gpu", "H100", "--search",
                         "--max-gpus", "8", "--isl", "uniform:2048,6144", "--osl", "1024",
                         "--ttft", "3", "--tpot", "0.05", "--percentile", "p90",
                         "--request-rate", "2", "--format", "json")
    assert code == 0, err
    r = json.loads(out)
    assert r["workload"]["isl_distribution"] == "uniform:2048,6144"
    pct = r["workload"]["percentile"]
    assert (pct["numerator"], pct["denominator"]) == (9, 10)
    # the mean of uniform:2048,6144's 4,096 draws: near (2048 + 6144) / 2 = 4096
    assert abs(r["workload"]["isl_mean"]["approx"] - 4096) < 100
    lays = r["layouts"]
    assert lays
    per_gpu = [x["tokens_per_second_per_gpu"] for x in lays]
    assert per_gpu == sorted(per_gpu, reverse=True)
    for x in lays:
        assert x["ttft_seconds"] <= 3 and x["tpot_seconds"] <= 0.05
        assert x["ttft_statistic"] == "p90" and 0 < x["utilisation"] < 1
        assert isinstance(x["command"], str) and isinstance(x["disaggregated"], bool)
    # the engine must take the longest request: 6,144 + 1,024 (vLLM --max-model-len)
    assert "--max-model-len 7168" in lays[0]["command"]


@pytest.mark.parametrize("argv,flag", [
    (["--isl", "gamma:1,2"], "--isl"), (["--isl", "uniform:9,1"], "--isl"),
    (["--percentile", "100"], "--percentile"), (["--percentile", "abc"], "--percentile"),
    (["--osl", "file:/nonexistent/lengths.txt"], "--osl")])
def test_bad_workload_flags_refused_in_one_line(capsys, argv, flag):
    base = {"--isl": "4096", "--osl": "1024"}
    for a, b in zip(argv[::2], argv[1::2]):
        base[a] = b
    args = [x for kv in base.items() for x in kv]
    refused_in_one_line(capsys, "serve", "--config", L70, "--gpu", "H100", "--search", *args,
                        expected=flag)


def test_a_seed_without_random_lengths_refused(capsys):
    refused_in_one_line(capsys, "serve", "--config", L70, "--gpu", "H100", "--search",
                        "--isl", "list:100,200", "--osl", "64", "--seed", "3", expected="--seed")


def test_percentile_without_search_refused(capsys):
    refused_in_one_line(capsys, "serve", "--config", L70, "--gpu", "H100", "--percentile",
                        "90", expected="--percentile")


def _brute_force(config, gpu, isl, osl, ttft, tpot, rate, max_gpus, p) -> list[tuple]:
    """(tokens/s per GPU, TPOT, TTFT) of every deployment meeting the targets at `rate` (the
    fewest replicas that do),
    every combination tried and composed again here (docs/serving_search.md's algebra): TP 1..8,
    bf16/fp8 weights and KV, batches 1, 2, 4 ... 1024, 1..8 prefill and decode workers, 1..
    replicas. The queue's formulas are queueing.py's (checked on their own against a simulation
    in test_serving_queue.py); everything composed around them is written out here."""
    from accounting.planning.gpus import get_gpu
    from accounting.serving.plan import serve
    from accounting.serving.queueing import Series, quantile, wait
    from accounting.serving.tpot_spread import tpot_quantile
    card = get_gpu(gpu)
    n_in, n_out = isl.representative, osl.representative  # the plans' lengths: means rounded up
    e_out = osl.mean
    plans, prompts = {}, {}
    for wt in ("bf16", "fp8"):
        for kvd in ("bf16", "fp8"):
            for tp in (1, 2, 4, 8):
                if tp > max_gpus:
                    continue
                # serve's TTFT at each of the prompt lengths' points (prompt, probability)
                prompts[(wt, kvd, tp)] = [
                    (serve(config, get_scheme(wt), gpu=gpu, tp=tp, kv_dtype=kvd, ctx=n + n_out,
                           prompt=n, concurrency=1).time.ttft_seconds, q, n)
                    for n, q in isl.points]
                b = 1
                while b <= 1024:
                    pl = serve(config, get_scheme(wt), gpu=gpu, tp=tp, kv_dtype=kvd,
                               ctx=n_in + n_out, prompt=n_in, concurrency=b)
                    if pl.fits and b <= pl.max_num_seqs:
                        plans[(wt, kvd, tp, b)] = pl
                    b *= 2
    found = []

    def first_meeting(cap, servers, mean, cs2, service, gpus, step, then=None):
        for n in range(1, max_gpus // gpus + 1):
            lam = rate / n
            if lam >= cap:
                continue  # utilisation >= 1
            q = wait(servers, lam, mean, cs2)
            if then is not None:  # aggregated: then behind the prompts admitted before
                q = Series(q, wait(1, lam, *then))
            t = quantile(q, service, p)
            if t <= ttft:
                found.append((rate * e_out / (n * gpus), step, t))
                return
    for (wt, kvd, tp, b), pl in plans.items():
        pts = prompts[(wt, kvd, tp)]
        e_p = sum(s * q for s, q, _ in pts)
        d = pl.time.tpot_seconds
        agg_tpot = d + b * e_p / e_out  # B prefills over E[OSL] steps
        var_p = sum(s * s * q for s, q, _ in pts) - e_p * e_p
        # at a percentile, TPOT's spread between requests (tpot_spread.py, checked on its own
        # against a simulation of the engine in test_serving_queue.py)
        stat = tpot_quantile(d, b, (e_p, var_p), osl, p)
        if stat <= tpot:  # aggregated: B slots, each held E[OSL]·TPOT (the mean)
            first_meeting(b / (e_out * agg_tpot), b, e_out * agg_tpot, osl.squared_cv,
                          sorted((s, q) for s, q, _ in pts), tp, stat,
                          (e_p, var_p / (e_p * e_p)))
        if d > tpot:
            continue
        for (wt2, kvd2, tp2, b2) in plans:
            if (wt2, kvd2, b2) != (wt, kvd, 1):
                continue
            ppts = prompts[(wt2, kvd2, tp2)]
            e_pre = sum(s * q for s, q, _ in ppts)
            var = sum(s * s * q for s, q, _ in ppts) - e_pre * e_pre
            for x in range(1, 9):
                for y in range(1, 9):
                    gpus = x * tp2 + y * tp
                    if gpus > max_gpus:
                        continue
                    link = card.fabric.nvlink if gpus <= 8 else card.fabric.network
                    per_token = Fraction(pl.kv_bytes_per_token_per_gpu) / link
                    service = sorted((s + n * per_token, q) for s, q, n in ppts)
                    cap = min(Fraction(x) / e_pre, Fraction(y * b) / (e_out * d))
                    first_meeting(cap, x, e_pre, var / (e_pre * e_pre), service, gpus, d)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("ttft,tpot,rate,p", [
    (Fraction(1, 2), Fraction(1, 40), Fraction(6), Fraction(1, 2)),  # aggregated wins
    (Fraction(1, 10), Fraction(1, 80), Fraction(12), None),  # 2 prefill + 1 decode, mean
    (Fraction(1, 4), Fraction(1, 100), Fraction(6), Fraction(99, 100))])
def test_search_optimum_equals_brute_force_on_a_distribution_at_a_rate(ttft, tpot, rate, p):
    """Llama-3.1-8B on up to 4 H100s, prompts of 1k/2k/3k tokens and outputs of 100/301
    (mean 200.5): the search's best is the brute force's: its tokens/s per GPU, then (ties:
    the same GPUs at the rate) the fastest TPOT among those, and a TTFT one of them has."""
    config = get_preset("meta-llama/Llama-3.1-8B")
    isl = lengths.parse("list:1024,2048,3072", "--isl")
    osl = lengths.parse("list:100,301", "--osl")
    w = Workload.of(isl, osl, ttft, tpot, rate, 4, percentile=p)
    r = search(config, get_scheme("bf16"), "H100", w)
    assert r.layouts, "a layout meets these targets on 4 H100s"
    found = _brute_force(config, "H100", isl, osl, ttft, tpot, rate, 4, p)
    top = max(x[0] for x in found)
    step = min(x[1] for x in found if x[0] == top)
    best = r.layouts[0]
    assert best.tokens_per_second_per_gpu(w.osl_mean) == top
    assert best.tpot_seconds == step
    assert best.ttft_seconds in {x[2] for x in found if x[:2] == (top, step)}
