"""Every layout of N GPUs for a model, ranked by estimated step time, and why the others fail.

Candidates: each tp·cp·pp·dp = N (cp, context parallelism, only for a model with the fused
attention kernel, --attention sdpa, and down to 1,024 tokens a rank; pp up to the layers, split evenly or, where pp does not
divide them, with one layer fewer on the first and last stage; cp from 1 up until a layout
of the (tp, pp) fits); 1 and 2 virtual stages per
GPU where the pipeline has the layers and the micro-batches; for a mixture of experts each expert-parallel degree ep
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

from accounting.architecture.config import ModelConfig
from accounting.planning.gpus import Hardware, Interconnect
from accounting.planning.memory import Precision
from accounting.planning.parallel.layout import Layout, check_numbers, divisors, experts, problems
from accounting.planning.parallel.plan import ParallelPlan, parallel_plan
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import problems as stack_problems


MIN_CP_TOKENS = 1024  # the shortest sequence shard the search gives a context-parallel rank


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
    stack: StackRun = StackRun()  # the training stack every layout is planned under


def search(config: ModelConfig, base: Layout, seq: int, *, precision: Precision,
           hardware: Hardware, net: Interconnect | None, mfu=None, margin="0",
           fix_zero: bool = False, fix_sp: bool = False, fix_micro: bool = False,
           fix_ep: bool = False, fix_cp: bool = False, fix_vpp: bool = False,
           progress=None, tokens: int | None = None, stack: StackRun = StackRun(),
           implementation: str = "course", **utilization) -> Search:
    """`base` carries the GPUs, global batch, recomputation and whatever the user fixed;
    `tokens` (--tokens) gives each layout its time to train; `progress(done, total)`, if
    given, is called before each (tp, pp) pair and each layout planned (the CLI's
    accounting/runtime/progress.Ticker: a line on stderr when a search runs long).
    `stack`: every layout planned as that stack holds it, among its sharding stages (its
    engines: Megatron 0-1, DeepSpeed 0-3, torchtitan 2-3); DeepSpeed's data parallelism
    alone (tp = pp = 1: Megatron-DeepSpeed's TP and PP are not modelled)."""
    check_numbers(base)
    n, E = base.gpus, experts(config)
    L = config.num_layers
    ranked, rejected = [], []
    # context parallelism replaces a fused attention kernel: tried only with --attention sdpa
    # (every degree 2·cp divides T), unless fixed; virtual stages: 1, and 2 where the pipeline
    # has the layers and the micro-batches for them (Megatron-LM: m a multiple of pp)
    if fix_cp or stack.as_run(config).attention != "sdpa":  # megatron, torchtitan: fused
        cps = (base.cp,)
    else:  # down to MIN_CP_TOKENS a rank: below, the K/V exchange outweighs its attention
        cps = tuple(c for c in divisors(n) if seq % (2 * c) == 0
                    and (c == 1 or seq // c >= MIN_CP_TOKENS))
    def family(tp: int, cp: int, pp: int, dp: int) -> bool:
        """Every variant of one (tp, cp, pp, dp): ranked or rejected; True if any fits."""
        fits = False
        eps = (base.ep,) if fix_ep or not E else tuple(divisors(gcd(dp, E)))
        vpps = (base.vpp,) if fix_vpp or pp == 1 else tuple(
            v for v in (1, 2) if v == 1 or (L >= 2 * pp and
                                            (base.global_batch // (dp * base.micro_batch)) % pp == 0))
        for ep, sp, vpp in product(eps, ((base.sp,) if fix_sp else
                                         ((False, True) if tp > 1 else (False,))), vpps):
            # the sharding stages from ZeRO-3 down: each lower one holds more, so once one
            # does not fit the lower ones are rejected without planning them
            zeros = (base.zero,) if fix_zero else (
                tuple(z for z in (3, 2, 1, 0)
                      if stack.stack.torch_engines or z in stack.stack.engines)
                if dp * cp > 1 else (0,))
            short = 0
            for zero in zeros:
                if progress is not None:  # (a pair's layouts may take long themselves)
                    progress(state[0] - 1, state[1])
                lo = replace(base, tp=tp, pp=pp, dp=dp, ep=ep, sp=sp, zero=zero, cp=cp,
                             vpp=vpp, stage_split=base.stage_split if pp == base.pp else None,
                             micro_batch=base.micro_batch if fix_micro else 1)
                if short:
                    rejected.append(Rejected(lo, f"does not fit (ZeRO-{zero + 1} did not: "
                                                 f"this stage holds more)", short))
                    continue
                found = problems(stack.as_run(config), lo, seq) or stack_problems(stack.stack, config, lo,
                                                                     stack.dropout)
                if found:
                    rejected.append(Rejected(lo, found[0]))
                    break  # the same reason holds for every further sharding stage
                # screened: a layout that does not fit comes back as its shortfall only
                p = parallel_plan(config, lo, seq, precision=precision, hardware=hardware,
                                  net=net, mfu=mfu, margin=margin, tokens=tokens,
                                  stack=stack, implementation=implementation, screen=True,
                                  **utilization)
                if isinstance(p, int):
                    rejected.append(Rejected(lo, "does not fit", p))
                    short = p  # at least this much for the stages below
                else:
                    ranked.append(p)
                    fits = True
        return fits

    state = [0, sum(len(divisors(n // tp)) for tp in divisors(n))]  # (pairs done, pairs)
    for tp in divisors(n):
        for pp in divisors(n // tp):
            if progress is not None:
                progress(*state)
            state[0] += 1
            if pp > L and not fix_vpp:
                continue  # a stage per layer at most (refused; not worth a row each)
            if stack.stack.zero_partitions and tp * pp > 1:
                continue  # ZeRO's data parallelism only (stacks.problems says why)
            rest = n // (tp * pp)
            for cp in (c for c in cps if rest % c == 0):
                # context parallelism from 1 up, until a layout fits: a larger cp only adds
                # K/V traffic to the same per-GPU work
                if family(tp, cp, pp, rest // cp) and not fix_cp:
                    break
    ranked.sort(key=lambda p: (p.step_seconds or 0, p.time.seconds if p.time else 0, p.memory,
                               p.layout.label()))
    return Search(config, n, seq, tuple(ranked), tuple(rejected),
                  {"zero": fix_zero, "sp": fix_sp, "micro_batch": fix_micro, "ep": fix_ep,
                   "cp": fix_cp, "vpp": fix_vpp}, stack)
