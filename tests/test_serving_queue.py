"""The wait for a server at a request rate (serving/queueing.py) and request lengths as
distributions (serving/lengths.py), issue 40. Expected values: hand algebra (Erlang's C for
M/M/2, Pollaczek–Khinchine for M/D/1, the quantiles of a written-out list), and a brute-force
simulation written here (seeded Poisson arrivals, c servers FCFS by the Kiefer–Wolfowitz
workload recursion) for what has no closed form."""
from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from accounting.runtime.errors import UsageError
from accounting.serving import lengths
from accounting.serving.queueing import Series, Wait, erlang_c, quantile, wait


def _simulate(c: int, rate: float, service, n: int = 120_000, seed: int = 7):
    """(waits, ttfts) of n Poisson arrivals at c FCFS servers; service(rng) draws one
    request's service time (its TTFT = its wait + its service). Kiefer–Wolfowitz: keep the
    c servers' remaining work sorted; an arrival waits for the least loaded."""
    rng = random.Random(seed)
    work = [0.0] * c
    waits, ttfts = [], []
    for _ in range(n):
        s = service(rng)
        w = work[0]
        waits.append(w)
        ttfts.append(w + s)
        work[0] = w + s
        gap = rng.expovariate(rate)
        work = sorted(max(0.0, x - gap) for x in work)
    burn = n // 10
    return waits[burn:], ttfts[burn:]


def _q(xs, p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(p * len(xs)) - 1)]


def test_erlang_c_by_hand():
    # M/M/1: P(wait) = ρ. M/M/2 at a = 1: P0 = 1 / (1 + a + a²/(2(1 − a/2))) = 1/3 ... and
    # C = a²/(2(1 − a/2)) · P0 = 1 · 1/3 = 1/3
    assert erlang_c(1, 0.6) == pytest.approx(0.6, abs=1e-12)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3, abs=1e-12)


def test_md1_mean_wait_is_pollaczek_khinchine_by_hand():
    # M/D/1, S = 1 s, λ = 0.5/s: Wq = λE[S²] / (2(1 − ρ)) = 0.5 · 1 / (2 · 0.5) = 0.5 s
    w = wait(1, Fraction(1, 2), Fraction(1), Fraction(0))
    assert w.mean == pytest.approx(0.5, rel=1e-12) and w.utilisation == Fraction(1, 2)
    assert w.probability == pytest.approx(0.5, rel=1e-12)  # P(wait > 0) = ρ in M/G/1


def test_unstable_queue_has_no_finite_wait():
    w = wait(2, Fraction(3), Fraction(1), Fraction(0))  # ρ = 3/2
    assert not w.stable and w.utilisation == Fraction(3, 2) and math.isinf(w.mean)


@pytest.mark.slow
def test_md1_against_a_simulation():
    """M/D/1 at ρ = 0.8: the mean is exact (P-K: 0.8 · 1 / (2 · 0.2) = 2 s); the p90 comes
    from the exponential tail, an approximation: within 10% of the simulated p90."""
    w = wait(1, Fraction(4, 5), Fraction(1), Fraction(0))
    waits, _ = _simulate(1, 0.8, lambda rng: 1.0)
    assert sum(waits) / len(waits) == pytest.approx(2.0, rel=0.05)
    assert w.mean == pytest.approx(2.0, rel=1e-12)
    p90 = float(quantile(w, ((Fraction(0), Fraction(1)),), Fraction(9, 10)))
    assert p90 == pytest.approx(_q(waits, 0.9), rel=0.10)


@pytest.mark.slow
def test_mm2_percentile_is_exact_against_a_simulation():
    """M/M/2 (exponential service, mean 1 s) at λ = 1.4/s: the tail C·exp(−(2μ − λ)t) is
    exact; p90 and p99 of the wait within 5% of the simulation's."""
    w = wait(2, Fraction(7, 5), Fraction(1), Fraction(1))
    waits, _ = _simulate(2, 1.4, lambda rng: rng.expovariate(1.0), n=200_000)
    zero = ((Fraction(0), Fraction(1)),)
    for p in (Fraction(9, 10), Fraction(99, 100)):
        assert float(quantile(w, zero, p)) == pytest.approx(_q(waits, float(p)), rel=0.05)
    # the closed form of the p90 by hand: C = 0.7²·2/(1 + ... ) via erlang_c; t = ln(C/0.1)/0.6
    assert float(quantile(w, zero, Fraction(9, 10))) == \
        pytest.approx(math.log(erlang_c(2, 1.4) / 0.1) / 0.6, rel=1e-9)


@pytest.mark.slow
def test_mgc_ttft_percentiles_against_a_simulation():
    """Four prefill servers, prompts of two lengths (service 0.2 s or 0.6 s, equally likely),
    λ = 9/s (ρ = 0.9): Allen–Cunneen's mean and the TTFT mixture's p50/p90/p99 (wait + own
    service) within 10% of the simulation's."""
    pts = ((Fraction(1, 5), Fraction(1, 2)), (Fraction(3, 5), Fraction(1, 2)))
    from accounting.serving.queueing import mean_service
    m, cs2 = mean_service(pts)
    assert (m, cs2) == (Fraction(2, 5), Fraction(1, 4))  # by hand: E = 0.4, Var = 0.04
    w = wait(4, Fraction(9), m, cs2)
    waits, ttfts = _simulate(4, 9.0, lambda rng: 0.2 if rng.random() < 0.5 else 0.6,
                             n=200_000)
    assert w.mean == pytest.approx(sum(waits) / len(waits), rel=0.10)
    for p in (Fraction(1, 2), Fraction(9, 10), Fraction(99, 100)):
        assert float(quantile(w, pts, p)) == pytest.approx(_q(ttfts, float(p)), rel=0.10)
    assert float(quantile(w, pts, None)) == pytest.approx(sum(ttfts) / len(ttfts), rel=0.05)


def test_ttft_quantiles_are_monotone_and_the_mean_is_service_plus_wait():
    pts = ((Fraction(1, 10), Fraction(1, 4)), (Fraction(1, 2), Fraction(3, 4)))
    w = wait(2, Fraction(3), Fraction(2, 5), Fraction(1, 4))
    qs = [quantile(w, pts, Fraction(p, 100)) for p in (10, 50, 90, 99, Fraction(999, 10))]
    assert qs == sorted(qs)
    assert quantile(w, pts, None) == Fraction(2, 5) + Fraction(w.mean)
    # no queue: the quantiles of the service alone, read off the two points by hand
    assert quantile(None, pts, Fraction(1, 4)) == Fraction(1, 10)
    assert quantile(None, pts, Fraction(26, 100)) == Fraction(1, 2)


def test_lengths_by_hand_and_deterministic():
    d = lengths.parse("list:10,1,3,2", "--isl")
    assert d.values == (1, 2, 3, 10) and d.mean == 4 and d.representative == 4
    assert [d.quantile(Fraction(p, 100)) for p in (25, 50, 75, 76, 100)] == [1, 2, 3, 10, 10]
    assert d.points == ((1, Fraction(1, 4)), (2, Fraction(1, 4)), (3, Fraction(1, 4)),
                        (10, Fraction(1, 4)))
    assert d.squared_cv == Fraction(114 - 16 * 4, 4) / 16  # (E[X²] − 16)/16, E[X²] = 114/4
    u = lengths.parse("uniform:100,200", "--isl", seed=3)
    assert u == lengths.parse("uniform:100,200", "--isl", seed=3)
    assert u != lengths.parse("uniform:100,200", "--isl", seed=4)
    assert 100 <= u.values[0] and u.values[-1] <= 200 and len(u.points) == lengths.POINTS
    assert sum(q for _, q in u.points) == 1
    n = lengths.parse("normal:1000,400,500,1500", "--osl")
    assert n.values[0] == 500 and n.values[-1] == 1500  # clipped to [LO, HI]
    f = lengths.parse("4096", "--isl")
    assert f.fixed and f.quantile(Fraction(1, 2)) == 4096 == f.representative


@pytest.mark.parametrize("spec", ["uniform:5,1", "normal:10", "list:", "list:0,3", "gamma:1,2",
                                  "uniform:a,b"])
def test_bad_length_specs_are_refused(spec):
    with pytest.raises(UsageError, match="--isl"):
        lengths.parse(spec, "--isl")


def test_a_length_file(tmp_path):
    p = tmp_path / "lengths.txt"
    p.write_text("# a trace\n120\n\n480  # long\n240\n")
    d = lengths.parse(f"file:{p}", "--isl")
    assert d.values == (120, 240, 480) and d.mean == 280


def test_two_waits_in_series_by_hand_and_by_sampling():
    """Both waits certain (C = 1), exponential of rates 1 and 2: P(E1 + E2 > t) =
    (2e^(−t) − e^(−2t)) / (2 − 1), at t = 1: 2/e − 1/e² = 0.60042... (hand algebra); with
    atoms at zero, the tail against 200,000 draws of the two waits (seeded)."""
    sure = Series(Wait(1, Fraction(1, 2), 1.0, 1.0), Wait(1, Fraction(1, 2), 1.0, 0.5))
    assert sure.tail(1.0) == pytest.approx(2 / math.e - 1 / math.e ** 2, rel=1e-12)
    same = Series(Wait(1, Fraction(1, 2), 1.0, 1.0), Wait(1, Fraction(1, 2), 1.0, 1.0))
    assert same.tail(2.0) == pytest.approx(3 * math.exp(-2), rel=1e-9)  # (1 + t)e^(−t)
    a, b = Wait(3, Fraction(4, 5), 0.4, 0.3), Wait(1, Fraction(1, 2), 0.5, 0.2)
    both = Series(a, b)
    rng = random.Random(11)

    def draw(w):
        return rng.expovariate(w.probability / w.mean) if rng.random() < w.probability else 0.0
    xs = [draw(a) + draw(b) for _ in range(200_000)]
    for t in (0.0, 0.2, 0.5, 1.5):
        assert both.tail(t) == pytest.approx(sum(x > t for x in xs) / len(xs), abs=0.005)
    assert both.mean == pytest.approx(0.5) and both.probability == pytest.approx(0.7)
    pts = ((Fraction(1, 10), Fraction(1)),)
    p90 = float(quantile(both, pts, Fraction(9, 10)))
    assert p90 - 0.1 == pytest.approx(sorted(xs)[int(0.9 * len(xs))], rel=0.03)


def _engine(b: int, step: float, outs: list[int], prefills: list[float], n: int, seed: int = 5):
    """Per-request TPOTs of one aggregated engine, simulated: b slots (staggered at the
    start), every step D emits a token for each; a finished request is replaced at once by
    one of random output length, whose prompt's prefill stalls the engine before the next
    step. TPOT = (its last token's time − its first step's start) / its tokens."""
    rng = random.Random(seed)
    t, slots, out = 0.0, [], []
    for _ in range(b):
        o = rng.choice(outs)
        t += rng.choice(prefills)
        slots.append([rng.randint(1, o), 0.0, o])
    for s in slots:
        s[1] = t
    while len(out) < n:
        t += step
        done = []
        for s in slots:
            s[0] -= 1
            if s[0] == 0:
                out.append((t - s[1]) / s[2])
                done.append(s)
        for s in done:
            s[0] = s[2] = rng.choice(outs)
            t += rng.choice(prefills)
        for s in done:
            s[1] = t
    return out[5 * b:]


@pytest.mark.slow
@pytest.mark.parametrize("b,outs,prefills", [
    (16, [53, 149, 347], [0.1, 0.3]), (4, [101, 307], [0.05, 0.15]),
    (64, [211, 601], [0.1, 0.3]), (16, [256], [0.1, 0.3])])
def test_tpot_spread_against_a_simulated_engine(b, outs, prefills):
    """The aggregated TPOT's mean and p50/p90/p99 over requests (tpot_spread.py) within 8% of
    the simulated engine's (D = 20 ms)."""
    from accounting.serving.tpot_spread import tpot_quantile
    osl = lengths.parse("list:" + ",".join(map(str, outs)), "--osl")
    pre = [Fraction(x).limit_denominator(1000) for x in prefills]
    e_p = sum(pre) / len(pre)
    var_p = sum(x * x for x in pre) / len(pre) - e_p * e_p
    xs = _engine(b, 0.02, outs, prefills, 60_000)
    d = Fraction(1, 50)
    assert float(tpot_quantile(d, b, (e_p, var_p), osl, None)) == \
        pytest.approx(sum(xs) / len(xs), rel=0.05)
    for p in (Fraction(1, 2), Fraction(9, 10), Fraction(99, 100)):
        assert float(tpot_quantile(d, b, (e_p, var_p), osl, p)) == \
            pytest.approx(_q(xs, float(p)), rel=0.08)


def test_tpot_spread_is_none_for_fixed_lengths_by_hand():
    """Fixed prompts and outputs: every percentile is the mean D + b·P/OSL, exactly (here
    1/50 + 8 · 1/5 / 256 = 1/50 + 1/160)."""
    from accounting.serving.tpot_spread import tpot_quantile
    osl = lengths.fixed(256)
    for p in (None, Fraction(1, 2), Fraction(99, 100)):
        assert tpot_quantile(Fraction(1, 50), 8, (Fraction(1, 5), Fraction(0)), osl, p) == \
            Fraction(1, 50) + Fraction(1, 160)
