"""A layout search as tables: the feasible layouts, fastest first, and the rejected ones with
their reasons. Formatting only."""
from __future__ import annotations

from fractions import Fraction

from accounting.planning.compile_components import describe
from accounting.planning.parallel.layout import ZERO_STAGES
from accounting.planning.parallel.search import Search
from accounting.planning.views import _dec, _seconds
from accounting.tables.table import Table
from accounting.units import gigabytes, percent

SHOWN = 20


def _stage(zero: int, dp: int, s: Search) -> str:
    if dp == 1:  # no sharding stage; a stack's engines need not hold 0 (torchtitan: 2, 3)
        return "-"
    engine = ZERO_STAGES[zero][1] if s.stack.stack.torch_engines else s.stack.stack.engines[zero]
    return f"{zero} ({engine})"


def ranked_table(s: Search) -> Table:
    moe = s.config.num_experts is not None  # an ep column (expert parallelism) after dp
    cps = any(p.layout.cp > 1 for p in s.ranked[:SHOWN])
    vs = any(p.layout.vpp > 1 for p in s.ranked[:SHOWN])
    # --tokens: each layout's time to train, its last column (was: none shown, issue 32)
    train = any(p.steps is not None for p in s.ranked)
    rows = []
    for i, p in enumerate(s.ranked[:SHOWN], 1):
        lo, step = p.layout, p.step_seconds
        tok = Fraction(p.tokens_per_step) / step
        rows.append((str(i), str(lo.tp), *([str(lo.cp)] if cps else []), str(lo.pp),
                     *([str(lo.vpp)] if vs else []), str(lo.dp), *([str(lo.ep)] if moe else []),
                     "yes" if lo.sp else "-",
                     _stage(lo.zero, lo.dp, s), str(lo.micro_batch), gigabytes(p.memory),
                     gigabytes(p.fit.headroom), f"{p.fit.largest:,}", percent(p.bubble, 1),
                     _seconds(step), _dec(tok, 0),
                     *([_seconds(step * p.steps)] if train else [])))
    first = s.ranked[0] if s.ranked else None
    notes = []
    if first is not None:
        lo = first.layout
        notes.append(f"{len(s.ranked)} feasible layouts of {s.gpus} GPUs"
                     + (f" (the {SHOWN} fastest shown)" if len(s.ranked) > SHOWN else "")
                     + f"; global batch {lo.global_batch:,} sequences of T = {s.seq:,}, "
                       f"recomputation {lo.recompute}, {first.precision.name}, "
                       f"{first.hardware.name} {_rate(first)}"
                     + ("." if s.stack.stack.torch_engines else
                        f"; memory as the {s.stack.name} stack holds it ({s.stack.stack.title})."))
    else:
        notes.append(f"No layout of {s.gpus} GPUs fits; see the rejected layouts below.")
    if not s.fixed["micro_batch"]:
        notes.append("Micro-batch 1 everywhere: at a fixed MFU a larger micro-batch only adds "
                     "memory and pipeline bubble (in practice it raises the utilization; compare "
                     "with --micro-batch b). 'largest b' is the largest micro-batch that fits.")
    notes.append("Step time: compute at the MFU (without --mfu: each layout's tp and micro-batch "
                 "timed op by op from measured kernels, accounting/timing) plus the communication "
                 "the stack's overlap rules leave exposed (accounting/planning/parallel/"
                 "overlap.py; see a single layout's plan for the breakdown).")
    if cps or vs:
        notes.append(("cp: context-parallel degree (tried from 1 up, per tp and pp, until a "
                      "layout fits; " + ("as given); " if s.fixed.get("cp") else "with the "
                      "fused attention kernel, --attention sdpa, only); ") if cps else "")
                     + ("v: virtual stages per GPU (the interleaved schedule; 1 and 2 tried); "
                        if vs else "")
                     + "pp need not divide the layers (one fewer on the first and last stage).")
    if moe:
        notes.append("ep: expert-parallel degree (each ep dividing dp and the experts tried"
                     + (", as given" if s.fixed.get("ep") else "") + "); routing assumed "
                     "balanced, the all-to-alls on the critical path.")
    # the recipe on the first line (the first screen names what is planned)
    flags = {} if first is None else dict(first.recipe)  # issue 44's --loss, --compile
    loss = flags.get("loss", "standard")
    recipe = "" if first is None else (
        f" ({first.precision.name}, {first.hardware.name} {_rate(first)}"
        + ("" if s.stack.stack.torch_engines else f", {s.stack.name} stack")
        + ("" if loss == "standard" else f", loss {loss}"
           + (f" ({flags['loss_chunks']} chunks)" if flags.get("loss_chunks") else ""))
        + (f", {describe(flags.get('compile_loss', False))} under torch.compile"
           if flags.get("compile") else "") + ")")
    return Table(f"Layouts for {s.gpus} GPUs: {s.config.name}, fastest first{recipe}",
                 ("#", "tp", *(("cp",) if cps else ()), "pp", *(("v",) if vs else ()), "dp",
                  *(("ep",) if moe else ()), "sp", "sharding", "micro", "memory/GPU",
                  "to spare", "largest b", "bubble", "step", "tokens/s",
                  *((f"time for {s.ranked[0].tokens:,} tokens",) if train else ())),
                 tuple(rows), align="lrrr" + "r" * (cps + vs) + ("r" if moe else "") + "llrrrrrrr"
                 + ("r" if train else ""),
                 notes=tuple(notes))


def rejected_table(s: Search) -> Table:
    seen, rows = set(), []
    fit_fail: dict[tuple, list] = {}
    for r in s.rejected:
        lo = r.layout
        key = (lo.tp, lo.pp, lo.dp, lo.cp)
        if r.shortfall:
            fit_fail.setdefault(key, []).append(r)
            continue
        if (key, r.reason) in seen:
            continue
        seen.add((key, r.reason))
        rows.append((str(lo.tp), str(lo.pp), str(lo.dp) + (f" (cp {lo.cp})" if lo.cp > 1 else ""),
                     _variant(r) if lo.ep > 1 else "-", r.reason))
    feasible = {(p.layout.tp, p.layout.pp, p.layout.dp, p.layout.cp) for p in s.ranked}
    for key, rs in fit_fail.items():
        best = min(rs, key=lambda r: r.shortfall)
        order = {_variant(r): (r.layout.ep, r.layout.sharding, r.layout.sp, r.layout.vpp)
                 for r in rs}
        tried = ", ".join(sorted(order, key=order.get))
        if key in feasible:
            why = (f"{tried}: do not fit ({gigabytes(best.shortfall)} over at best); the other "
                   f"variants are ranked above")
        else:
            why = f"does not fit: {gigabytes(best.shortfall)} over at best ({tried} tried)"
        tp, pp, dp, cp = key
        rows.append((str(tp), str(pp), str(dp) + (f" (cp {cp})" if cp > 1 else ""),
                     _variant(best), why))
    return Table(f"Rejected layouts of {s.gpus} GPUs", ("tp", "pp", "dp", "closest", "why"),
                 tuple(rows), align="rrrll",
                 notes=("Each (tp, pp, dp) once; a layout that cannot run at all is rejected for "
                        "the first reason found; one that runs but does not fit shows its "
                        "closest variant and the bytes it lacks (GB = 1e9).",))


def _variant(r) -> str:
    lo = r.layout
    return ((f"ep {lo.ep} " if lo.ep > 1 else "") + f"zero {lo.sharding}" + (" sp" if lo.sp else "")
            + (f" v{lo.vpp}" if lo.vpp > 1 else ""))


def tables(s: Search) -> list[Table]:
    return [ranked_table(s), rejected_table(s)]


def _rate(p) -> str:
    """'at MFU 0.5' (given), or where the predicted rate comes from (issue 39)."""
    if p.time_source == "mfu":
        return f"at MFU {float(p.mfu):g}"
    return f"timed by {p.time_source}" if p.time_source == "roofline" else \
        "timed from measured kernels"
