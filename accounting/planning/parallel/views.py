"""A ParallelPlan (and a layout search) as tables. Formatting only: every number comes from
the plan; rounding happens here, for display, in exact arithmetic."""
from __future__ import annotations

from fractions import Fraction

from accounting.planning.parallel import comms as C
from accounting.planning.parallel import stack_views
from accounting.planning.parallel.layout import RECOMPUTE, ZERO_STAGES, Layout
from accounting.planning.parallel import overlap as OV
from accounting.planning.parallel.plan_records import CHECKED, FORMULA_ONLY, ParallelPlan
from accounting.planning import compile_components as CC
from accounting.planning.mfu import END_TO_END
from accounting.planning.optimizers import is_default
from accounting.planning.parallel.step import megatron_seconds
from accounting.planning.views import _dec, _num, _seconds
from accounting.architecture.presets import title
from accounting.tables.table import Table
from accounting.units import GB, TERA, gibibytes, gigabytes, grouped, percent, si


def _gb(n: int) -> str:
    return f"{gigabytes(n)} = {gibibytes(n)}"


def split_text(p: ParallelPlan) -> str:
    """'7, 8 × 14, 7 (chosen: one fewer on the first and last stage)'."""
    from accounting.planning.parallel.layout import layer_split
    lo = p.layout
    sizes = layer_split(p.config, lo)
    runs, out = [], []
    for n in sizes:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    out = ", ".join(f"{n} × {k}" if k > 1 else str(n) for n, k in runs)
    what = f"per virtual stage, {lo.chunks} in model order" if lo.vpp > 1 else "per stage"
    how = ("given (--stage-layers)" if lo.stage_split is not None else
           "even" if len(set(sizes)) == 1 else
           "chosen: one fewer on the first and the last stage (Llama 3's rule)")
    return f"{out} ({what}; {how})"


def layout_text(lo: Layout, engine: str | None = None) -> str:
    """`engine`: a named stack's engine for the sharding stage (default: torch's)."""
    name, torch_engine, _ = ZERO_STAGES[lo.zero]
    engine = engine or torch_engine
    parts = [f"tp {lo.tp}" + (" + sequence parallel" if lo.sp else ""),
             *([f"cp {lo.cp} (ring attention)"] if lo.cp > 1 else []),
             f"pp {lo.pp}" + (f" × {lo.vpp} virtual stages" if lo.vpp > 1 else ""),
             f"dp {lo.dp}"]
    if lo.ep > 1:
        parts.append(f"ep {lo.ep}")
    shard = f"{name.split(' ')[0]} = {engine}" + ("" if lo.dp > 1 else " (dp 1: nothing to shard)")
    return f"{' × '.join(parts)} = {lo.gpus} GPUs; {shard}"


def summary_table(p: ParallelPlan) -> Table:
    c, lo, w = p.config, p.layout, p.worst
    b = lo.micro_batch
    rows = [("model", f"{title(c)}, T = {p.seq:,}"),
            ("layout", layout_text(lo, stack_views.engine(p))),
            ("batch", f"global {lo.global_batch:,} sequences = {lo.micro_batches:,} micro-batches "
                      f"of {b:,} on each of {lo.dp} data-parallel ranks "
                      f"({p.tokens_per_step:,} tokens per step)"),
            ("recomputation", f"{lo.recompute}"),
            ("precision", p.precision.name
                          + (f", {p.implementation} implementation"
                             if p.stack.stack.torch_engines else ""))]
    flags = dict(p.recipe)
    if flags.get("compile"):  # the first screen names what is planned (issue 44)
        rows.append(("torch.compile", CC.describe(flags.get("compile_loss", False))
                     + ("" if flags.get("compile_loss") else "; the loss runs eagerly")))
    if not is_default(p.optimizer):  # (AdamW, the default, goes unsaid as it always has)
        rows.append(("optimizer", p.optimizer))
    if p.finetune is not None:
        from accounting.planning.finetune import describe
        rows.append(("fine-tuning", f"{describe(p.finetune)}; {p.finetune.adapter_count():,} "
                                    "adapter parameters"))
    rows += stack_views.summary_rows(p)
    label = f"memory per GPU (stage {w.stage} of {lo.pp})" if lo.pp > 1 else "memory per GPU"
    moment = p.peak_moment
    rows.append((label, f"{grouped(p.memory)} bytes = {_gb(p.memory)}, allocated at the step's "
                        f"peak" + (f": {moment.name}" if moment else "")
                        + (f" on stage {w.stage}" if lo.pp > 1 else "")
                        + f" (the items below sum to {_gb(p.items_total)}); reserved at least "
                          f"{_gb(p.reserved)} (the caching allocator's blocks; the verdict is "
                          "the allocated)"
                        + (f"; of the allocated, {_gb(p.outside_allocator)} outside the caching "
                           "allocator (async TP's symmetric memory: not in the reserved)"
                           if p.outside_allocator else "")))
    if p.fit is not None:
        f = p.fit
        verdict = (f"fits: {_gb(f.headroom)} to spare of {_gb(f.budget.usable)} usable"
                   if not f.shortfall else
                   f"does not fit: {_gb(f.shortfall)} over the {_gb(f.budget.usable)} usable")
        rows.append((f"on {p.hardware.name}", verdict))
        rows.append(("largest micro-batch that fits",
                     (f"{f.largest:,}" if f.largest else "none (not even 1)")
                     + f" (among the divisors of the {lo.global_batch // lo.dp:,} sequences "
                       f"per data-parallel rank)"))
    flops = max(s.flops.total for s in p.stages)
    rows.append(("FLOPs per GPU per step", f"{grouped(flops)} = {si(flops, 'FLOP')} (slowest stage)"))
    if lo.pp > 1:
        if lo.vpp > 1:
            rows.append(("pipeline bubble (p − 1)/(v·m + p − 1), interleaved",
                         f"({lo.pp} − 1)/({lo.vpp}·{lo.micro_batches} + {lo.pp} − 1) = "
                         f"{percent(p.bubble)} of the step (Narayanan et al.'s (p − 1)/(v·m) "
                         f"= {percent(Fraction(lo.pp - 1, lo.vpp * lo.micro_batches))} of the "
                         f"ideal time)"))
        else:
            rows.append(("pipeline bubble (p − 1)/(m + p − 1)",
                         f"({lo.pp} − 1)/({lo.micro_batches} + {lo.pp} − 1) = "
                         f"{percent(p.bubble)}"))
        rows.append(("layers per stage", split_text(p)))
    traffic = {g: max(sum((x.traffic for x in s.collectives if x.group == g), Fraction(0))
                      for s in p.stages)
               for g in (C.TENSOR, C.CONTEXT, C.PIPELINE, C.DATA, C.EXPERT, C.EXPERT_DATA)}
    moved = ", ".join(f"{g} {si(round(t), 'B')}" for g, t in traffic.items() if t)
    rows.append(("sent per GPU per step", moved or "nothing (one GPU)"))
    if p.step_seconds is not None:
        step, tok = p.step_seconds, p.tokens_per_second
        # a layout that does not fit runs no step: its times are labelled so (issue 32)
        unfit = (f"; if it fitted, which it does not on {p.hardware.name}"
                 if p.fit is not None and p.fit.shortfall else "")
        if p.mfu_scope == END_TO_END:
            kind = "HFU" if p.hfu else "MFU"
            rows.append(("step time (end to end)",
                         f"{_seconds(step)} ({_dec(tok, 0)} tokens/s) at {kind} "
                         f"{_num(p.mfu, 4)} under '{p.mfu_convention}' (bubble and "
                         f"communication inside the figure; the compute-scope estimate would "
                         f"be {_seconds(p.time.seconds)})" + unfit))
        else:
            parts = "; ".join(f"{k} {_seconds(v)}" for k, v in p.time.breakdown().items() if v)
            rows.append(("step time (estimate)",
                         f"{_seconds(step)} ({_dec(tok, 0)} tokens/s; {parts}; no overlap at "
                         f"all: {_seconds(p.time.no_overlap)})" + unfit))
        if p.steps is not None:
            rows.append((f"time for {p.tokens:,} tokens",
                         f"{p.steps:,} steps, {_seconds(step * p.steps)}" + unfit))
    notes = ["Checked on torch.distributed: " + "; ".join(CHECKED) + ".",
             "Formula only: " + "; ".join(FORMULA_ONLY) + "."]
    if stack_views.checked_note(p):
        notes = [stack_views.checked_note(p)]
    if lo.ep > 1:
        notes.append(expert_note(p))
    if lo.tp > 1 and c.vocab_size % lo.tp and p.stack.stack.torch_engines:
        notes.append(f"V = {c.vocab_size:,} is not divisible by tp {lo.tp}: torch.chunk gives "
                     f"each TP rank ⌈V/tp⌉ = {-(-c.vocab_size // lo.tp):,} rows of the embedding "
                     f"and the LM head but the last ones fewer; rank 0, shown, holds the most "
                     f"(Megatron-LM pads V to a multiple of 128·tp instead).")
    return Table(f"Plan for {lo.gpus} GPUs: {c.name}", ("", "value"), tuple(rows), align="ll",
                 notes=tuple(notes))


def expert_note(p: ParallelPlan) -> str:
    """What expert parallelism assumes and what of it is checked (ep > 1)."""
    c, lo = p.config, p.layout
    E = c.num_experts
    cap = ("dropless: each rank sends its b·T·k routed slots and gets as many back, after an "
           "all-to-all of the E token counts" if c.moe_capacity_factor is None else
           f"capacity factor {c.moe_capacity_factor}: each rank sends the E·C rows of its "
           f"dispatch buffer, C = ⌈c·b·T·k/E⌉ per expert, padding included")
    return (f"Expert parallelism: ep {lo.ep} ranks of each data-parallel group hold "
            f"{E // lo.ep} of the {E} experts of every MoE block each (whole experts); the "
            f"experts' gradients, optimizer state (and FSDP shards) are over the dp/ep = "
            f"{lo.edp} ranks holding the same experts, the router, shared experts and the "
            f"rest over all {lo.dp}. Routing assumed balanced: each rank's slots spread evenly "
            f"over the experts, so each rank runs b·T·k expert rows (its FLOPs and saved "
            f"activations as on one GPU) and (ep − 1)/ep of each all-to-all leaves it; a "
            f"skewed router sends more to some ranks. All-to-alls ({cap}) are on the critical "
            f"path. Checked on torch.distributed: the experts per rank, states, all-to-all and "
            f"FSDP2 calls and bytes, FLOPs and saved activations of an EP × FSDP2 layout "
            f"(fake backend, balanced routing; gloo, capacity factor); formula only: EP with "
            f"DDP or ZeRO-1, with pipelining, and skewed routing.")


def memory_table(p: ParallelPlan) -> Table:
    b = p.layout.micro_batch
    names = list(dict.fromkeys(i.name for s in p.stages for i in s.items))
    cols = ["item", "bytes (formula)"] + [f"stage {s.stage}" for s in p.stages]
    rows = []
    for n in names:
        formula = next(i.formula for s in p.stages for i in s.items if i.name == n)
        cells = []
        on_gpu = True
        for s in p.stages:
            it = next((i for i in s.items if i.name == n), None)
            cells.append(gigabytes(it.bytes.at(b)) if it else "-")
            on_gpu = it.on_gpu if it else on_gpu
        rows.append((n + ("" if on_gpu else " [CPU]"), formula, *cells))
    rows.append(("total on the GPU (the items' sum)", "",
                 *(gigabytes(s.memory(b)) for s in p.stages)))
    rows.append(("step's peak (allocated)", "", *(gigabytes(s.peak(b)) for s in p.stages)))
    rows.append(("one micro-batch's activations, a·b + c", "",
                 *(f"{grouped(s.activations.per_micro_batch.a)}·b + "
                   f"{grouped(s.activations.per_micro_batch.c)}" for s in p.stages)))
    rows.append(("micro-batches in flight k", "", *(str(s.activations.in_flight) for s in p.stages)))
    lo = p.layout
    notes = [f"GB = 1e9 bytes, at micro-batch b = {b:,}; stage 0 holds min(m, p) = "
             f"{min(lo.micro_batches, lo.pp)} micro-batches in flight under 1F1B, stage s "
             f"min(m, p − s). Parameters are split over the {lo.tp} TP ranks where they hold "
             "heads, d_ff or the vocabulary (rank 0 holds ⌈n/tp⌉ of an uneven split) and, at "
             "ZeRO-2/3, their first dimension over the data-parallel ranks (FSDP2 pads each "
             "shard to ⌈rows/d⌉ rows).",
             "Recomputation: " + RECOMPUTE[lo.recompute] + ".",
             "The step's peak is the largest of its moments (accounting/planning/parallel/"
             "peak.py): " + "; ".join(f"{m.name}: {m.what}" for m in p.worst.moments) + "."]
    if lo.ep > 1:
        e = lo.edp
        notes.append(f"Routed experts (ep {lo.ep}): {p.config.num_experts // lo.ep} whole experts "
                     f"of each MoE block per GPU; "
                     + (f"FSDP2 shards them over the {e} ranks holding the same experts, on "
                        f"dimension {1 if e * lo.ep > p.config.num_experts else 0} "
                        f"(torchtitan: dimension 1 when dp > E)" if lo.sharding >= 2 and e > 1 else
                        f"ZeroRedundancyOptimizer partitions their AdamW state over the {e} "
                        f"ranks holding the same experts" if lo.sharding == 1 and e > 1 else
                        "each is held by one rank of the data-parallel group"
                        if e == 1 else "replicated over the ranks holding the same experts")
                     + ". Under balanced routing the activations of the experts are one GPU's "
                       "(b·T·k rows per rank).")
    if lo.zero == 1 and lo.dp > 1 and p.stack.stack.torch_engines:
        notes.append(f"ZeroRedundancyOptimizer: the rank with the most AdamW state is shown "
                     f"(rank {p.worst.states.dp_rank}).")
    return Table("Memory per GPU, by pipeline stage", tuple(cols), tuple(rows),
                 align="ll" + "r" * len(p.stages), notes=tuple(notes))


def comms_table(p: ParallelPlan) -> Table:
    rows = []
    for s in p.stages:
        for c in s.collectives:
            link = p.time.links.get(c.group, (None, ""))[1] if p.time else ""
            rows.append((str(s.stage), c.group, c.op, c.what, c.phase,
                         f"{c.calls:,}" + ("" if c.exact_calls else " (≈)"), grouped(c.bytes),
                         si(round(c.traffic), "B"), c.formula, link))
    notes = ("Per GPU per step (m micro-batches). 'bytes' is the payload: the buffer of an "
             "all-reduce or broadcast, the output of an all-gather, the input of a "
             "reduce-scatter, a point-to-point message. 'sent' is what the GPU puts on the "
             "wire with ring algorithms: 2(n−1)/n of the payload for an all-reduce, (n−1)/n "
             "for an all-gather, reduce-scatter or broadcast, all of a send.",
             "d·Σ⌈rows/d⌉·cols: the FSDP unit's parameters with each padded to whole rows on "
             "every data-parallel rank. DDP's bucket count (≈) is decided at run time (25 MiB "
             "buckets in gradient-ready order, one bucket on the first step).")
    return Table("Communication per GPU per step", ("stage", "group", "collective", "what",
                 "phase", "calls", "bytes", "sent", "formula (bytes)", "link"), tuple(rows),
                 align="lllllrrrll", notes=notes)


def flops_table(p: ParallelPlan) -> Table:
    rows = []
    for s in p.stages:
        f = s.flops
        rows.append((str(s.stage), grouped(f.forward), grouped(f.backward), grouped(f.recompute),
                     grouped(f.adamw), grouped(f.total), si(f.total, "FLOP")))
    lo = p.layout
    notes = [f"Per micro-batch of b = {lo.micro_batch:,}: forward, backward (= 2 × forward) and "
             f"recomputed matmul FLOPs on the stage's {p.stages[0].layers} blocks (the LM head "
             f"on the last stage) with h/tp heads, d_ff/tp and ⌈V/tp⌉; total = m·(forward + "
             f"backward + recompute) + AdamW on the elements this rank updates (m = "
             f"{lo.micro_batches:,})."]
    return Table("FLOPs per GPU per step", ("stage", "forward / micro-batch",
                 "backward / micro-batch", "recompute / micro-batch", "AdamW / step", "total",
                 ""), tuple(rows), align="lrrrrrr", notes=tuple(notes))


def time_table(p: ParallelPlan) -> Table:
    t, lo = p.time, p.layout
    if t is None:
        return Table("Step time", notes=("Not estimated: no peak FLOP/s (--gpu NAME or "
                                         "--gpu-flops TFLOPS).",))
    rows = [("compute per micro-batch (slowest stage)", _seconds(t.compute_per_micro_batch)),
            ("tensor-parallel communication per micro-batch", _seconds(t.tensor_parallel_per_micro_batch)),
            ("pipeline sends per micro-batch", _seconds(t.pipeline_per_micro_batch)),
            *([("expert-parallel all-to-alls per micro-batch",
                _seconds(t.expert_parallel_per_micro_batch))] if lo.ep > 1 else []),
            (("interleaved slots m + (p − 1)/v" if lo.vpp > 1 else "1F1B slots m + p − 1"),
             _num(t.slots)),
            *([("context-parallel K/V exchange per micro-batch",
                _seconds(t.context_parallel_per_micro_batch))] if lo.cp > 1 else []),
            ("critical path", _seconds(t.pipeline_path)),
            ("data-parallel communication", _seconds(t.data_parallel)
             + f", {_seconds(t.exposed_data_parallel)} exposed"),
            ("exposed communication (all groups)", _seconds(t.exposed_communication)),
            ("pipeline bubble", _seconds(t.bubble_seconds)),
            ("optimizer step", _seconds(t.optimizer)),
            ("step", _seconds(t.seconds)),
            ("step without any overlap", _seconds(t.no_overlap))]
    if p.mfu_scope == END_TO_END:
        rows.append((f"step at the end-to-end {'HFU' if p.hfu else 'MFU'} (used)",
                     _seconds(p.step_seconds)))
    hw = p.hardware
    rules = "; ".join(f"{g}: {OV.RULES.get(r, r)}" for g, r in t.rules)
    notes = [f"Compute at MFU {_num(p.mfu, 4)} of {_num(hw.peak_flops / TERA)} TFLOP/s "
             f"({p.precision.compute}). Overlap ({p.stack.name}'s rules, "
             f"accounting/planning/parallel/overlap.py: {p.stack.stack.overlap.source}): "
             f"{rules or 'none needed'}. Collectives inside a node from NCCL's measured "
             f"table where it has them, else ring traffic at the per-GPU, per-direction "
             f"bandwidth of the slowest link their group spans."]
    if p.net is not None:
        links = ", ".join(f"{g}: {kind} {_num(bw / GB)} GB/s" for g, (bw, kind) in t.links.items())
        notes.append(f"Interconnect {p.net.name} ({p.net.source}); {p.net.gpus_per_node} GPUs per "
                     f"node; ranks TP fastest, then CP, then DP, then PP. Links: {links}.")
    else:
        notes.append("No interconnect known (a custom GPU): communication not timed; give "
                     "--nvlink-gbs and --network-gbs.")
    if p.steps is not None:
        x = p.mfu * hw.peak_flops
        n, total = _parameters(p)
        meg = megatron_seconds(p.steps * p.tokens_per_step, n, lo.gpus, x,
                               recompute=lo.recompute == "full")
        k = 8 if lo.recompute == "full" else 6
        cite = "eq. (4)" if k == 8 else "§5.1's text beside eq. (4), without recomputation"
        which = (f"{n:,} active per token of {total:,} (a token runs through "
                 f"{p.config.experts_per_token} of {p.config.num_experts} routed experts)"
                 if n != total else f"{n:,}")
        notes.append(f"Megatron-LM's end-to-end estimate {k}·T·P/(n·X) (Narayanan et al. 2021, "
                     f"{cite}) with T = {p.steps * p.tokens_per_step:,} tokens, P = {which}, n = "
                     f"{lo.gpus}, X = {_num(x / TERA)} TFLOP/s: {_seconds(meg)} (no bubble, no "
                     f"communication, attention FLOPs left out).")
    return Table("Step time (estimate)", ("", "seconds"), tuple(rows), align="lr", notes=tuple(notes))


def _parameters(p: ParallelPlan) -> tuple[int, int]:
    """(P of Megatron's estimate, all parameters). Narayanan et al. 2021 derive 8·T·P/(n·X)
    for a dense model, where each token meets every parameter in one multiply-add (2·P FLOPs
    forward, §5.1); a mixture of experts sends a token through k of its E routed experts,
    so P is the active count (Mixtral's 12.9B of 46.7B), not all of them: DeepSeek-V3's
    671B gave 18 times its 37B-active time (issue 45)."""
    from accounting.analysis.workload import analyze
    a = analyze(p.config, p.seq, 1)
    return a.active_param_count, a.param_count


def tables(p: ParallelPlan) -> list[Table]:
    from accounting.planning.parallel.utilization_views import utilization_table
    extra = [] if p.stack.stack.torch_engines else [stack_views.per_layer_table(p)]
    return [summary_table(p), memory_table(p), *extra, flops_table(p), comms_table(p),
            time_table(p), utilization_table(p, p.measured_tokens_per_second)]

