"""Every layout of N GPUs for a model, ranked by estimated step time, and why the others fail.

Candidates: each tp·pp·dp = N; for a mixture of experts each expert-parallel degree ep
dividing both dp and the experts (unless the user fixed --ep); sequence parallelism on and
off when tp > 1; each sharding stage (one, when dp = 1: nothing to shard); the micro-batch
the user gave, else 1 — with a
fixed MFU a smaller micro-batch only shrinks the pipeline bubble and the memory, so 1 is
never slower here (in practice small micro-batches lower the utilization: give
--micro-batch to compare at your own). A layout is rejected with the first reason it cannot
run (layout.problems) or, when it can, because the most loaded GPU needs more memory than
usable (by how much).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product
from math import gcd

from accounting.spec.config import ModelConfig
from accounting.planning.gpus import Hardware, Interconnect
from accounting.planning.memory import Precision
from accounting.planning.parallel.layout import Layout, check_numbers, divisors, experts, problems
from accounting.planning.parallel.plan import ParallelPlan, parallel_plan


@dataclass(frozen=True)
class Rejected:
    layout: Layout
    reason: str
    shortfall: int = 0  # bytes over the usable memory (0: it cannot run at all)


@dataclass(frozen=True)
class Search:
    config: ModelConfig
    gpus: int
    seq: int
    ranked: tuple[ParallelPlan, ...]  # fastest first
    rejected: tuple[Rejected, ...]
    fixed: dict  # what the user fixed (zero, sp, micro_batch)


def search(config: ModelConfig, base: Layout, seq: int, *, precision: Precision,
           hardware: Hardware, net: Interconnect | None, mfu="0.5", margin="0",
           fix_zero: bool = False, fix_sp: bool = False, fix_micro: bool = False,
           fix_ep: bool = False, progress=None, tokens: int | None = None) -> Search:
    """`base` carries the GPUs, global batch, recomputation and whatever the user fixed;
    `progress(done, total)`, if given, is called after each (tp, pp) pair (the CLI's
    accounting/runtime/progress.Ticker: a line on stderr when a search runs long)."""
    check_numbers(base)
    n, E = base.gpus, experts(config)
    ranked, rejected = [], []
    pairs, done = sum(len(divisors(n // tp)) for tp in divisors(n)), 0
    for tp in divisors(n):
        for pp in divisors(n // tp):
            if progress is not None:
                progress(done, pairs)
            done += 1
            dp = n // (tp * pp)
            eps = (base.ep,) if fix_ep or not E else tuple(divisors(gcd(dp, E)))
            for ep, sp in product(eps, ((base.sp,) if fix_sp else
                                        ((False, True) if tp > 1 else (False,)))):
                zeros = (base.zero,) if fix_zero else ((0, 1, 2, 3) if dp > 1 else (0,))
                for zero in zeros:
                    if progress is not None:  # (a pair's layouts may take long themselves)
                        progress(done - 1, pairs)
                    lo = replace(base, tp=tp, pp=pp, dp=dp, ep=ep, sp=sp, zero=zero,
                                 micro_batch=base.micro_batch if fix_micro else 1)
                    found = problems(config, lo, seq)
                    if found:
                        rejected.append(Rejected(lo, found[0]))
                        break  # the same reason holds for every further sharding stage
                    p = parallel_plan(config, lo, seq, precision=precision, hardware=hardware,
                                      net=net, mfu=mfu, margin=margin, tokens=tokens)
                    if p.fit is not None and p.fit.shortfall:
                        rejected.append(Rejected(lo, "does not fit", p.fit.shortfall))
                    else:
                        ranked.append(p)
    ranked.sort(key=lambda p: (p.time.seconds if p.time else 0, p.memory, p.layout.label()))
    return Search(config, n, seq, tuple(ranked), tuple(rejected),
                  {"zero": fix_zero, "sp": fix_sp, "micro_batch": fix_micro, "ep": fix_ep})
