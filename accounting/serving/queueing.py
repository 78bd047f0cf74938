"""The wait for a server at a request rate (`serve --search --request-rate R`, issue 40).

Requests arrive as a Poisson stream, the open-loop load `vllm bench serve --request-rate R`
sends: vllm/benchmarks/serve.py (benchmarks/benchmark_serving.py before), get_request, sleeps
np.random.gamma(shape=burstiness, scale=1/(R·burstiness)) between requests, an exponential
gap at its default burstiness 1. Each replica gets an equal share (random routing keeps each
share Poisson). A queue of c identical servers, one shared
FCFS line, service time S with mean m and squared coefficient of variation cs2:

  offered load      a = λ·m;  utilisation ρ = a / c (ρ ≥ 1: the line grows without end)
  P(wait > 0)       C = Erlang's C formula for c servers (exact for M/M/c), by Erlang B's
                    recursion B_0 = 1, B_k = a·B_{k−1} / (k + a·B_{k−1}), C = c·B / (c − a(1 − B))
                    (Kleinrock, Queueing Systems vol. 1, 1975, §3.5)
  mean wait         Wq = C / (c/m − λ) · (1 + cs2) / 2
                    (Allen–Cunneen, for M/G/c: A. O. Allen, Probability, Statistics and
                    Queueing Theory, 2nd ed. 1990; Whitt, "Approximations for the GI/G/m
                    queue", 1993). For c = 1 it is exact: Pollaczek–Khinchine's
                    Wq = λ·E[S²] / (2(1 − ρ)), E[S²] = m²(1 + cs2).
  P(wait > t)       C · exp(−t · C / Wq): the conditional wait exponential with its mean kept.
                    Exact for M/M/c (rate cμ − λ); for other service times an approximation
                    (the heavy-traffic limit of the wait is exponential: Kingman 1962).
tests/test_serving_queue.py checks the formulas against hand algebra (M/D/1, M/M/2) and
against a brute-force simulation of the queue (seeded Poisson arrivals, the Kiefer–Wolfowitz
recursion for c servers), written there.

An aggregated engine's request waits twice, for a slot and then behind the prompts admitted
before it (the engine prefills one prompt's chunks after another: one server, M/G/1): the two
waits are taken as independent (Series below).

A request's TTFT is its wait plus its own service (its prefill, and its KV transfer), which
depends on its own prompt: with the prompt lengths' points (lengths.py) s_k of probability
w_k, P(TTFT > t) = Σ w_k · P(wait > t − s_k), decreasing in t; its p-quantile is found by
bisection. The wait's tail holds an exponential, so these figures are floats (the rest of the
search is exact); they are returned as exact ratios of those floats.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Wait:
    servers: int
    utilisation: Fraction  # λ·m / c, exact
    probability: float  # P(wait > 0)
    mean: float  # seconds

    @property
    def stable(self) -> bool:
        return self.utilisation < 1

    def tail(self, t: float) -> float:
        """P(wait > t)."""
        if t < 0:
            return 1.0
        if self.probability <= 0 or self.mean <= 0:
            return 0.0
        return self.probability * math.exp(-t * self.probability / self.mean)

    def bound(self, eps: float) -> float:
        """A t with P(wait > t) <= eps."""
        if self.probability <= eps or self.mean <= 0:
            return 0.0
        return self.mean / self.probability * math.log(self.probability / eps)


@dataclass(frozen=True)
class Series:
    """Two waits one after the other, taken as independent (an aggregated engine's: a slot,
    then the prompts admitted before it to prefill). With each wait 0 or, with probability
    C_i, exponential of rate k_i = C_i / mean_i, P(W1 + W2 > t) =
        C1(1 − C2)e^(−k1 t) + (1 − C1)C2 e^(−k2 t) + C1 C2 (k2 e^(−k1 t) − k1 e^(−k2 t))/(k2 − k1)
    (the last: the tail of a sum of two exponentials; (1 + k t)e^(−k t) when k1 = k2)."""
    first: Wait
    second: Wait

    @property
    def utilisation(self) -> Fraction:
        return max(self.first.utilisation, self.second.utilisation)

    @property
    def stable(self) -> bool:
        return self.first.stable and self.second.stable

    @property
    def probability(self) -> float:
        return 1 - (1 - self.first.probability) * (1 - self.second.probability)

    @property
    def mean(self) -> float:
        return self.first.mean + self.second.mean

    def tail(self, t: float) -> float:
        a, b = self.first, self.second
        if t < 0:
            return 1.0
        if a.probability <= 0 or a.mean <= 0:
            return b.tail(t)
        if b.probability <= 0 or b.mean <= 0:
            return a.tail(t)
        c1, c2 = a.probability, b.probability
        k1, k2 = c1 / a.mean, c2 / b.mean
        e1, e2 = math.exp(-k1 * t), math.exp(-k2 * t)
        if abs(k1 - k2) <= 1e-9 * max(k1, k2):
            both = (1 + k1 * t) * e1
        else:
            both = (k2 * e1 - k1 * e2) / (k2 - k1)
        return c1 * (1 - c2) * e1 + (1 - c1) * c2 * e2 + c1 * c2 * both

    def bound(self, eps: float) -> float:
        """P(W1 + W2 > t1 + t2) <= P(W1 > t1) + P(W2 > t2) <= eps."""
        return self.first.bound(eps / 2) + self.second.bound(eps / 2)


def erlang_c(c: int, a: float) -> float:
    """P(wait > 0) in M/M/c at offered load a < c."""
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return c * b / (c - a * (1 - b))


def wait(servers: int, rate: Fraction, mean: Fraction, cs2: Fraction) -> Wait:
    """The wait of a Poisson stream of `rate` requests/s at `servers` servers of mean service
    `mean` seconds and squared CV `cs2`."""
    rho = rate * mean / servers
    if rho >= 1:
        return Wait(servers, rho, 1.0, math.inf)
    if rate == 0:
        return Wait(servers, rho, 0.0, 0.0)
    a = float(rate * mean)
    c = erlang_c(servers, a)
    wq = c / (servers / float(mean) - float(rate)) * (1 + float(cs2)) / 2
    return Wait(servers, rho, c, wq)


def mean_service(points) -> tuple[Fraction, Fraction]:
    """(mean, squared CV) of a service time given as (seconds, probability) points."""
    m = sum((s * w for s, w in points), Fraction(0))
    m2 = sum((s * s * w for s, w in points), Fraction(0))
    return m, (m2 - m * m) / (m * m) if m else Fraction(0)


def _over(w, points):
    """t -> P(wait + own service > t)."""
    if isinstance(w, Series):
        gs = [(float(s), float(q)) for s, q in points]
        return lambda t: sum(q * w.tail(t - s) for s, q in gs)
    fs = [(float(s), float(q) * w.probability, float(q)) for s, q in points]
    k, exp = w.probability / w.mean if w.mean > 0 else math.inf, math.exp

    def over(t: float) -> float:
        return sum(q if t < s else cq * exp((s - t) * k) for s, cq, q in fs)
    return over


def within(w, points, p: Fraction | None, limit: Fraction) -> bool:
    """Whether the statistic (quantile() below) is at most `limit`, in one evaluation:
    P(TTFT > limit) <= 1 − p, or the mean's sum."""
    if p is None:
        return quantile(w, points, None) <= limit
    return _over(w, points)(float(limit)) <= 1 - float(p)


def quantile(w, points, p: Fraction | None) -> Fraction:
    """The p-quantile of wait + own service (points: (seconds, probability), the seconds
    rising: a longer prompt's prefill is never shorter); p None: the mean. Without a wait (w None) the quantile of the service alone, exactly."""
    if p is None:
        own = sum((s * q for s, q in points), Fraction(0))
        return own if w is None else own + Fraction(w.mean)
    acc, alone = Fraction(0), points[-1][0]
    for s, q in points:  # the service's own p-quantile, exactly (points in rising order)
        acc += q
        if acc >= p:
            alone = s
            break
    if w is None or w.probability <= 0:
        return alone
    target = 1 - float(p)
    if target <= 0:
        raise ValueError("a queue's wait has no 100th percentile (its tail is exponential)")

    over = _over(w, points)

    lo = float(points[0][0])
    hi = float(points[-1][0]) + w.bound(target) + 1e-12
    t = lo
    if over(lo) > target:
        for _ in range(48):  # bisection: over() decreases in t (to 2^-48 of the bracket)
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if over(mid) > target else (lo, mid)
        t = hi
    # a wait is never negative: the quantile is at least the service's own (exact) one,
    # which the floats above may miss by a rounding
    return max(alone, Fraction(t))
