"""Activation memory per GPU: the ledger's saved tensors, split by tensor and sequence
parallelism, times the micro-batches a 1F1B pipeline stage holds.

Each record of the (unfolded) ledger is split as shards.py reads it off its shape:
heads, d_ff or V over the TP ranks; the sequence-parallel region along T with --sp; the
inputs of the column-parallel matmuls (the norms' outputs, which Q/K/V, W1 and the LM head
read) replicated even with --sp, because torch saves the tensor the all-gather produced
(Megatron-LM instead saves its shard and gathers it again in the backward pass,
Korthikanti et al. 2022 §4.2.2; `megatron_sp=True` counts that). Everything is a linear
function of the micro-batch size b: bytes = a·b + c.

Recomputation and dtypes are the ledger's: it is built under the precision's autocast and
the recomputation (full: each block checkpointed; selective: each attention core), so its
saved tensors are what each block keeps, autocast's bf16 copies of the weights included.

In flight: 1F1B (Narayanan et al. 2021, §2.2) runs at most p − s micro-batches forward
on stage s (0-based) before their backward passes start, so the first stage holds
min(m, p) micro-batches' activations and the last stage one (measured under torch's
Schedule1F1B by accounting/distcheck).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from accounting.ledger import records as R
from accounting.planning import mtp_memory as MT
from accounting.planning.parallel.layout import NO_RECOMPUTE, Layout, micro_batches_in_flight
from accounting.planning.parallel.shards import (BLOCK, EVERY, FIRST, GATHERED, LAST,
                                                 SEQUENCE, TP_SPLIT, Split, chunk)


@dataclass(frozen=True)
class Linear:
    """a·b + c bytes."""
    a: int = 0
    c: int = 0

    def __add__(self, o: "Linear") -> "Linear":
        return Linear(self.a + o.a, self.c + o.c)

    def times(self, k: int) -> "Linear":
        return Linear(self.a * k, self.c * k)

    def at(self, b: int) -> int:
        return self.a * b + self.c


@dataclass(frozen=True)
class Row:
    record: R.Activation
    kind: str
    place: str
    bytes: Linear  # one instance (one block, or once), one micro-batch of b


def rows(sp: Split, layout: Layout, seq: int, megatron_sp: bool = False,
         tp_rank: int = 0, micro_batch: int | None = None,
         vocab: int | None = None) -> list[Row]:
    """`micro_batch` (default: the layout's) matters only under an expert capacity factor,
    whose C = ⌈c·b·T·k/E⌉ rows per expert are not linear in b: there a·b + c is exact at
    this b only. `vocab`: V as the stack holds it (Megatron pads it), if not the config's."""
    b = layout.micro_batch if micro_batch is None else micro_batch
    capacity = sp.config.num_experts is not None and sp.config.moe_capacity_factor is not None
    return list(_rows(sp, layout.tp, layout.sp, seq, megatron_sp, tp_rank,
                      b if capacity else 1, layout.ep, vocab))


@lru_cache(maxsize=4096)
def _rows(sp: Split, tp_degree: int, sequence_parallel: bool, seq: int, megatron_sp: bool,
          tp_rank: int, b: int = 1, ep: int = 1, vocab: int | None = None) -> tuple[Row, ...]:
    """Every tensor autograd saves in the run `sp` was built for (its autocast dtypes, its
    recomputation), with its bytes on TP rank `tp_rank` for one micro-batch of b sequences.
    accounting/distcheck checks the blocks' part on torch, rank by rank.

    Expert parallelism (ep > 1) changes no saved activation under balanced routing: each
    rank runs B·T·k expert rows (E/ep experts, each B·T·k·ep/E rows: the ep ranks' B·T·k
    slots spread evenly over the E experts), as one GPU does; the all-to-all saves nothing.
    Two differences: autocast's bf16 copies of the routed experts' weights are of the rank's
    E/ep experts; and under a capacity factor one GPU's experts save the E·C + 1 rows of the
    dispatch buffer (the last one where dropped slots go), an expert-parallel rank the E·C
    rows the all-to-all delivered."""
    full = sp.values(seq, b)
    if vocab is not None:
        full["V"] = vocab
    local_experts = None
    if ep > 1:
        if "E·C+1" in full:
            full["E·C+1"] = full["E"] * full["C"]
        local_experts = dict(full, E=full["E"] // ep)
    tp = sp.tp_values(full, tp_degree, tp_rank)
    seq_split = dict(full, T=seq // tp_degree) if sequence_parallel else full
    out = []
    # A parallel block's shared norm output feeds attn and ffn: with --sp each sublayer's
    # PrepareModuleInput all-gathers it, and each gathered copy is saved (two, not one)
    shared = sequence_parallel and not megatron_sp and sp.config.block == "parallel_shared_norm"
    for a in sp.ledger.activations:
        if not a.saved:
            continue
        kind = sp.activation_kind(a)
        v = (tp if kind == TP_SPLIT
             else seq_split if kind == SEQUENCE or (kind == GATHERED and megatron_sp) else full)
        if local_experts and a.weight_copy and a.shape[:1] == ("E",) \
                and a.saved_in.endswith("experts"):
            v = local_experts  # the rank's E/ep routed experts (tp = 1 with experts)
        with_b = a.elements.evaluate(dict(v, B=1)) * a.bytes_per_element
        without_b = a.elements.evaluate(dict(v, B=0)) * a.bytes_per_element
        twice = shared and kind == GATHERED and a.per_layer and a.saved_in.startswith("attn.")
        out.append(Row(a, kind, sp.place(a),
                       Linear(with_b - without_b, without_b).times(2 if twice else 1)))
    return tuple(out)


@dataclass(frozen=True)
class StageActivations:
    """Activation bytes on one pipeline stage as a·b + c, with the parts that make it."""
    stage: int
    in_flight: int  # micro-batches held
    layers: int
    per_micro_batch: Linear  # one micro-batch's kept activations on this stage
    weight_copies: Linear  # of which autocast's bf16 copies of the weights (no b term)
    recomputed_block: Linear  # with recomputation: one block's recomputed part, while it runs
    total: Linear
    # of per_micro_batch, what is held for one micro-batch whatever k: the last stage's head
    # and loss (LAST rows; `once_copies`: autocast's copy of the head's weight among them).
    # The last (virtual) stage runs each micro-batch's forward straight into its backward:
    # under 1F1B it holds one micro-batch (k = 1); under ScheduleInterleaved1F1B the last
    # rank holds up to p chunk passes of its earlier chunks but one of the last
    # (tests/test_pipeline_schedules.py reads it off torch's order), so the head's and the
    # loss's saved tensors are one micro-batch's while its blocks' are ⌈chunks/v⌉'s
    once: Linear = Linear()
    once_copies: Linear = Linear()
    # of `once`, the last stage's final norm's, LM head's and loss's saved tensors (LAST
    # rows): autograd frees each node's saved tensors once the node has run (torch/csrc/
    # autograd/engine.cpp evaluate_function: fn.release_variables() unless retain_graph),
    # and the loss's and the head's nodes run before any block's, so no block's backward
    # pass sees them (measured on the CPU: tests/test_published_runs.py)
    head: Linear = Linear()

    def held(self, k: int) -> Linear:
        """The kept activations of k micro-batches in flight (without the recomputed part)."""
        return self.per_micro_batch.times(k) + self.once.times(1 - k) if k else Linear()

    def copies_held(self, k: int) -> Linear:
        """Autocast's weight copies among `held(k)`."""
        return self.weight_copies.times(k) + self.once_copies.times(1 - k) if k else Linear()


def stage_activations(kept: list[Row], without_recompute: list[Row], layout: Layout,
                      stage: int, kinds: tuple[tuple[str, int], ...],
                      mtp: Linear = Linear(), output: Linear = Linear()) -> StageActivations:
    """Stage `stage` (0-based) holding `kinds` (blocks of each kind, Split.kinds) under 1F1B:
    k = min(m, p − s) micro-batches of what the ledger keeps (the blocks', and the
    embedding's on the first stage, the head's and the loss's on the last), and, with
    recomputation, what one block saves beyond that while its backward pass runs (the
    ledger without recomputation, less the one with; the largest over the stage's kinds);
    on the last stage the MTP modules' (mtp: one micro-batch's, mtp_rows); `output`: the
    stage output a micro-batch in flight keeps beyond its saved tensors (the schedule's
    fwd_cache: pipeline_buffers.stage_outputs)."""
    p = layout.pp
    count = dict(kinds)
    in_flight = micro_batches_in_flight(layout, stage)
    places = {BLOCK, EVERY} | ({FIRST} if stage == 0 else set()) | \
        ({LAST} if stage == p - 1 else set())

    def total(rs, where=places, copies=None) -> Linear:
        return sum(((r.bytes.times(count.get(r.record.repeat, 0)) if r.place == BLOCK
                     else r.bytes) for r in rs
                    if r.place in where and (copies is None or r.record.weight_copy == copies)),
                   Linear())
    per_mb = total(kept) + (mtp if stage == p - 1 else Linear()) + output
    last = stage == p - 1
    once = total(kept, {LAST}) + mtp + output if last else Linear()
    once_copies = total(kept, {LAST}, True) if last else Linear()
    recomputed = Linear()
    if layout.recompute != NO_RECOMPUTE:
        parts = []
        for g in count:
            one = Linear()
            for r in without_recompute:
                one = one + r.bytes if r.place == BLOCK and r.record.repeat == g else one
            for r in kept:
                one = one + r.bytes.times(-1) if r.place == BLOCK and r.record.repeat == g else one
            parts.append(one)
        recomputed = max(parts, key=lambda x: x.at(layout.micro_batch), default=Linear())
    acts = StageActivations(stage, in_flight, sum(count.values()), per_mb,
                            total(kept, copies=True), recomputed, Linear(), once, once_copies,
                            _after_blocks(kept) if last else Linear())
    return replace(acts, total=acts.held(in_flight) + recomputed)


def _after_blocks(kept: list[Row]) -> Linear:
    """The last stage's saves of the modules after its blocks (the final norm's, the LM
    head's, the loss's): LAST rows but those saved in "block" at model scope (RoPE's cos
    and sin, computed once a pass and read by every block's backward until the first's)."""
    return sum((r.bytes for r in kept if r.place == LAST and r.record.saved_in != "block"),
               Linear())


def mtp_rows(sp: Split, kept: list[Row], tp: int) -> Linear:
    """One micro-batch's saved bytes of the MTP modules on the last stage: the rows of the
    records each module repeats (accounting/planning/mtp_memory.py), TP-split as the model's,
    and autocast's copy of W_eh (its d/tp output rows)."""
    c = sp.config
    if not c.mtp_layers:
        return Linear()
    times = {id(r): k for r, k in MT.module_records(c, sp.ledger)}
    one = sum((r.bytes.times(times[id(r.record)]) for r in kept if id(r.record) in times),
              Linear())
    d = c.d_model
    one = one + Linear(0, MT.eh_copy_bytes(c, sp.ledger) * chunk(d, tp) * 2 * d)
    return one.times(c.mtp_layers)
