"""Activation memory per GPU: the ledger's saved tensors, split by tensor and sequence
parallelism, times the micro-batches a 1F1B pipeline stage holds.

Each record of the (unfolded) ledger is split as shards.py reads it off its shape:
heads, d_ff or V over the TP ranks; the sequence-parallel region along T with --sp; the
inputs of the column-parallel matmuls (the norms' outputs, which Q/K/V, W1 and the LM head
read) replicated even with --sp, because torch saves the tensor the all-gather produced
(Megatron-LM instead saves its shard and gathers it again in the backward pass,
Korthikanti et al. 2022 §4.2.2; `megatron_sp=True` counts that). Everything is a linear
function of the micro-batch size b: bytes = a·b + c.

In flight: 1F1B (Narayanan et al. 2021, §2.2) runs at most p − s micro-batches forward
on stage s (0-based) before their backward passes start, so the first stage holds
min(m, p) micro-batches' activations and the last stage one.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting import records as R
from accounting.planning.memory import Precision, bytes_per_element
from accounting.planning.parallel.layout import FULL, SELECTIVE, Layout
from accounting.planning.parallel.shards import (BLOCK, FIRST, GATHERED, LAST, SEQUENCE,
                                                 TP_SPLIT, Split)


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
    core: bool
    bytes: Linear  # one instance (one block, or once), one micro-batch of b


def rows(sp: Split, layout: Layout, precision: Precision, seq: int,
         megatron_sp: bool = False, tp_rank: int = 0) -> list[Row]:
    """Every activation autograd saves (and each block's input, which full recomputation
    keeps), with its bytes on TP rank `tp_rank` for one micro-batch of b sequences.
    accounting/distcheck checks the blocks' part on torch, rank by rank."""
    full = sp.values(seq, 1)
    tp = sp.tp_values(full, layout.tp, tp_rank)
    seq_split = dict(full, T=seq // layout.tp) if layout.sp else full
    out = []
    for a in sp.ledger.activations:
        if not a.saved and not a.block_input:  # full recomputation keeps the block input
            continue
        kind = sp.activation_kind(a)
        v = (tp if kind == TP_SPLIT
             else seq_split if kind == SEQUENCE or (kind == GATHERED and megatron_sp) else full)
        size = bytes_per_element(a, precision)
        with_b = a.elements.evaluate(v) * size
        without_b = a.elements.evaluate(dict(v, B=0)) * size
        out.append(Row(a, kind, sp.place(a), sp.core(a), Linear(with_b - without_b, without_b)))
    return out


@dataclass(frozen=True)
class StageActivations:
    """Activation bytes on one pipeline stage as a·b + c, with the parts that make it."""
    stage: int
    in_flight: int  # micro-batches held
    layers: int
    per_micro_batch: Linear  # one micro-batch's kept activations on this stage
    recomputed_block: Linear  # full recomputation: one block's activations during its backward
    total: Linear


def stage_activations(act_rows: list[Row], layout: Layout, stage: int,
                      layers: int) -> StageActivations:
    """Stage `stage` (0-based) of `layers` blocks under 1F1B."""
    p = layout.pp
    in_flight = min(layout.micro_batches, p - stage)
    block = [r for r in act_rows if r.place == BLOCK and r.record.saved]
    if layout.recompute == SELECTIVE:
        block = [r for r in block if not r.core]
    kept = ([r for r in act_rows if r.record.block_input] if layout.recompute == FULL
            else block)
    places = ({FIRST} if stage == 0 else set()) | ({LAST} if stage == p - 1 else set())
    once = sum((r.bytes for r in act_rows if r.place in places and r.record.saved), Linear())
    per_mb = sum((r.bytes for r in kept), Linear()).times(layers) + once
    recomputed = Linear()
    if layout.recompute == FULL:
        recomputed = sum((r.bytes for r in block if not r.record.block_input), Linear())
    return StageActivations(stage, in_flight, layers, per_mb, recomputed,
                            per_mb.times(in_flight) + recomputed)
