"""TPOT at a percentile of requests in an aggregated engine (`serve --search --percentile P`,
issue 40).

An aggregated worker rank holding b sequences steps every D seconds and, between steps,
prefills the prompt of each request that replaces a finished one (search.py): a request's
time per output token is D plus the prefills that land in its life, over its o tokens. Each
of the b slots turns over once per E[OSL] steps on average, so during o steps

    N (prefills)      E[N] = o·b / E[OSL],  Var[N] = o·b·cs²_OSL / E[OSL]
                      (the renewal process's counting variance, t·σ²/μ³ a slot: Cox, Renewal
                      Theory, 1962, §3.3; 0 when every output is as long: each slot then
                      turns over exactly once in OSL steps)
    S = Σ_N P_j       E[S] = E[N]·E[P],  Var[S] = E[N]·Var[P] + Var[N]·E[P]²
    TPOT_o = D + S/o  mean D + b·E[P]/E[OSL] for every o (the mean TPOT of search.py),
                      sd √Var[S] / o

taken as normal for each output length o (the output lengths' points, lengths.py), so
P(TPOT > t) = Σ_o q_o·(1 − Φ((t − mean)/sd_o)); its p-quantile by bisection. With fixed
prompts and outputs the sd is 0 and every percentile is the mean, exactly.
tests/test_serving_queue.py checks it against a simulation of the engine written there (b
slots, random lengths, the prefills between steps).
"""
from __future__ import annotations

import math
from fractions import Fraction


def tpot_quantile(step: Fraction, b: int, prefill: tuple[Fraction, Fraction], osl,
                  p: Fraction | None) -> Fraction:
    """The p-quantile over requests of an aggregated rank's TPOT; `prefill` = (E[P],
    Var[P]) over the prompt lengths; `osl` the output lengths (lengths.Lengths); p None:
    the mean."""
    e_p, var_p = prefill
    mean = step + b * e_p / osl.mean
    var_n_per = b * osl.squared_cv / osl.mean  # Var[N] per step of a request's life
    sds = []
    for o, q in osl.points:
        var_s = Fraction(o * b) / osl.mean * var_p + o * var_n_per * e_p * e_p
        sds.append((math.sqrt(var_s) / o, float(q)))
    if p is None or all(sd == 0 for sd, _ in sds):
        return mean
    target, m = 1 - float(p), float(mean)

    def over(t: float) -> float:
        return sum(q * (0.5 * math.erfc((t - m) / (sd * math.sqrt(2))) if sd > 0 else
                        float(t < m)) for sd, q in sds)
    top = max(sd for sd, _ in sds)
    lo, hi = m - 10 * top, m + 10 * top
    for _ in range(48):  # over() decreases in t
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if over(mid) > target else (lo, mid)
    return max(step, Fraction(hi))  # a TPOT is never under the decode step
