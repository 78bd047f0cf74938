"""Replicas of a searched layout, and at a request rate the wait for a server (issue 40).

Without --request-rate: as many replicas as --max-gpus holds, each run at its capacity
(requests arrive as slots free: no queue, TTFT is the request's own prefill and transfer).

With --request-rate R: n replicas share R evenly (λ = R/n each, Poisson: queueing.py) and a
request waits, before its own service, for
  aggregated:     one of the worker's B slots (a request holds its slot for its OSL decode
                  steps of TPOT each, its prefill among the stalls TPOT already counts:
                  service OSL·TPOT, mean E[OSL]·TPOT, squared CV the output lengths'),
                  c = B servers; then the prompts admitted before it, which the engine
                  (each DP rank its own, λ/D) prefills one after another: one server of
                  service P over the prompt lengths (M/G/1, Pollaczek–Khinchine); its
                  utilisation λ·E[P]/D is below the slots' (TPOT counts B·E[P]/E[OSL]);
  disaggregated:  one of the x prefill workers (one prompt at a time: service the prompt's
                  prefill, its points over the prompt lengths), c = x servers; the decode
                  slots (y·B) are not a second queue here: their utilisation is the same λ /
                  capacity, and below 1 their many slots keep Erlang's C small.
Utilisation = λ / the replica's capacity (requests/s), the same for both (capacity is the
smaller of the stages'); at >= 1 the line grows without end and the layout meets no target.
The replicas: the fewest whose TTFT statistic (mean, or the percentile) meets the target,
from the fewest whose capacity covers R; where none within --max-gpus does, the fewest
stable ones (shown, not meeting).
"""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from accounting.serving.queueing import Series, quantile, wait, within


def _wait(layout, w, n: int):
    lam = Fraction(w.request_rate) / n
    util = lam / layout.requests_per_second
    if layout.disaggregated:
        m, cs2 = layout.prefill.prefill_moments
        return wait(layout.prefill_workers, lam, m, cs2), util
    d = layout.decode
    slot = wait(d.batch, lam, w.osl_mean * layout.step_mean, w.osl_lengths.squared_cv)
    m, cs2 = d.prefill_moments  # then behind the prompts admitted before it: its rank's
    return Series(slot, wait(1, lam / d.dp, m, cs2)), util


def _queued(layout, w, n: int, q, util):
    return replace(layout, replicas=n, demand=w.request_rate, utilisation=util, wait=q,
                   ttft_seconds=quantile(q, layout.service, w.percentile))


def replicated(layout, w):
    """The layout replicated for the workload, or None where no replica count fits."""
    per = layout.gpus_per_replica
    most = w.max_gpus // per
    if w.request_rate is None:
        return replace(layout, replicas=most) if most >= 1 else None
    first = -(-Fraction(w.request_rate) // layout.requests_per_second)
    stable = None
    floor = layout.ttft_seconds  # no wait yet: what no replica count goes below
    for n in range(max(1, int(first)), most + 1):
        q, util = _wait(layout, w, n)
        if util >= 1:
            continue
        if stable is None:
            stable = (n, q, util)
        if w.ttft is None or floor > w.ttft:
            break  # the first stable count: no more replicas can help
        if within(q, layout.service, w.percentile, w.ttft):
            return _queued(layout, w, n, q, util)
    return None if stable is None else _queued(layout, w, *stable)
