"""The multi-GPU plan's records: one GPU of a stage (StagePlan: its items, activations,
FLOPs, collectives and the step's moments) and the whole plan (ParallelPlan: the stages
shown, the fit, the step time, and what they add up to), with what the torch.distributed
checks verify beside what stays a formula. plan.py assembles them; views.py renders them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from fractions import Fraction

from accounting.architecture.config import ModelConfig
from accounting.planning.gpus import Hardware, Interconnect
from accounting.planning.optimizers import DEFAULT_OPTIMIZER
from accounting.ledger.builder.common import COURSE
from accounting.ledger.records import EXECUTED
from accounting.planning.memory import Precision
from accounting.planning.mfu import COMPUTE, END_TO_END, end_to_end_seconds
from accounting.planning.parallel import activations as A
from accounting.planning.parallel import comms as C
from accounting.planning.parallel import peak as PK
from accounting.planning.parallel.fit import Fit
from accounting.planning.parallel.buffers import Item
from accounting.planning.parallel.layout import Layout, micro_batches_in_flight
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.states import States
from accounting.planning.parallel.step import StageFlops, StepTime, bubble

# What the torch.distributed checks (accounting/distcheck, tests/test_distributed.py) verify,
# and what stays a formula here.
CHECKED = ("parameter, gradient and AdamW-state bytes per rank (FSDP2 and TP/SP on the fake "
           "backend at 8 to 64 ranks; DDP, ZeroRedundancyOptimizer, FSDP2 × TP/SP and a 1F1B "
           "pipeline on a gloo group of CPU processes)",
           "the activation bytes each rank's blocks save, TP/SP splits included "
           "(saved_tensors_hooks), and the micro-batches a 1F1B stage holds (Schedule1F1B)",
           "matmul FLOPs per rank (FlopCounterMode on the rank's local tensors)",
           "collectives per step, calls and bytes, by kind (a dispatch hook beside CommDebugMode)",
           "the interleaved schedule's chunks in flight, step length and sends per rank "
           "(ScheduleInterleaved1F1B's own order)", "a pipeline stage's live peak over a "
           "step and the outputs its schedule keeps (1F1B and interleaved on a gloo group)",
           "the context-parallel K/V exchange and the ring's backward buffers (torch's "
           "ring attention on a gloo group, against full attention)", "LoRA (--lora-rank) "
           "under FSDP2: PEFT's adapters on a frozen base, each rank's states, matmul FLOPs and "
           "collectives (fake backend)")
FORMULA_ONLY = ("recomputation",
                "communication buffers (DDP buckets, FSDP2's gathered units, pipelining receive "
                "buffers)", "bf16 mixed precision", "TP or PP combined with DDP or ZeRO-1, and "
                "PP combined with TP or FSDP", "the tied embedding's gradient all-reduce across "
                "pipeline stages (Megatron-LM)", "step time", "context parallelism's activations "
                "and FLOPs per rank (the ledger at T/cp: torch's context_parallel needs CUDA)")


@dataclass(frozen=True)
class StagePlan:
    stage: int
    layers: int
    states: States
    items: tuple[Item, ...]
    activations: A.StageActivations
    flops: StageFlops
    collectives: tuple[C.Collective, ...]
    kinds: tuple[tuple[str, int], ...] = ()  # blocks of each kind on the stage (Split.kinds)
    moments: tuple[PK.Moment, ...] = ()  # the step's moments (peak.py); () before they are set
    pools: object = None  # FSDP2's side streams' reserved segments (fsdp_streams.SidePools)

    def memory(self, b: int) -> int:
        """The items' sum on the GPU at micro-batch b: the breakdown, what the step holds at
        one time or another (the peak, `peak`, is what must fit)."""
        return sum(i.bytes.at(b) for i in self.items if i.on_gpu)

    def moment_bytes(self, m: PK.Moment, b: int, activations: int | None = None,
                     all_first: bool = True) -> int:
        """Bytes live at moment m at micro-batch b (`activations`: the in-flight activations'
        bytes when not the items' own, at another micro-batch; `all_first`: whether the
        stage still runs all its forwards before its first backward there, which the
        moments with fewer micro-batches in flight assume)."""
        acts = self._activation_items.at(b) if activations is None else activations
        if not m.recomputed:  # the activations' item holds one block's recomputed part
            acts -= self.activations.recomputed_block.at(b)
        if all_first:  # backward passes done (else the steady state: k and every gradient)
            acts -= m.fewer * self.activations.per_micro_batch.at(b)
        if m.head_freed:  # the loss's, head's and final norm's saves, freed before any block's
            acts -= self.activations.head.at(b)
        return self._held(m).at(b) + (acts if m.activations else 0) + m.extra.at(b)

    @cached_property
    def _activation_items(self) -> A.Linear:
        """The in-flight activations' items on the GPU, summed as a·b + c."""
        return sum((i.bytes for i in self.items if i.on_gpu and i.activations), A.Linear())

    def _held(self, m: PK.Moment) -> A.Linear:
        """The items moment m holds beside the activations, summed as a·b + c (each item's
        bytes are a·b + c, the chunk's accumulation and the resharded blocks constants):
        summed once per moment, as the fit asks each moment at every micro-batch."""
        cache = self.__dict__.setdefault("_held_lines", {})  # id(m) -> (m, line)
        hit = cache.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        # (one chunk's backward passes of the one-round interleaved schedule: the sharded
        # gradients of the chunks already reduced stay, counted whole; peak.Moment.chunk)
        unsharded = self.accumulating(m) and m.chunk is None

        def size(i) -> A.Linear:
            if m.chunk is not None and i.accumulated and i.per_chunk:
                return A.Linear(0, i.per_chunk[m.chunk])  # this chunk's accumulation only
            if m.after_forward:  # the blocks resharded after their forward: none gathered
                return A.Linear(i.bytes.a, i.bytes.c - getattr(i, "resharded_after_forward", 0))
            return i.bytes
        line = sum((size(i) for i in self.items if m.holds(i) and not i.activations
                    and not (unsharded and i.name.startswith("gradients"))), A.Linear())
        cache[id(m)] = (m, line)
        return line

    def accumulating(self, m: PK.Moment) -> bool:
        """FSDP2 under pipelining's no-sync accumulates unsharded gradients and makes no
        sharded one until the last micro-batch's reduce-scatter, which frees the unsharded
        unit by unit (measured: tests/test_pipeline_live.py): in the passes the sharded
        gradients' item is the accumulated one's, not beside it."""
        return m.backward_buffers and any(i.accumulated and i.on_gpu for i in self.items)

    def peak_moment(self, b: int, activations: int | None = None,
                    all_first: bool = True) -> tuple[int, PK.Moment | None]:
        """(bytes, moment) of the step's peak on this GPU at micro-batch b (the items' sum
        and None before the moments are set)."""
        if not self.moments:
            return self.memory(b), None
        return max(((self.moment_bytes(m, b, activations, all_first), m)
                    for m in self.moments), key=lambda x: x[0])

    def peak(self, b: int) -> int:
        return self.peak_moment(b)[0]

    def outside_allocator(self, b: int, moment: PK.Moment | None = None) -> int:
        """Of the bytes live at `moment` (every item's where None), those the caching
        allocator does not hand out (Item.outside_allocator: async TP's symmetric memory)."""
        return sum(i.bytes.at(b) for i in self.items
                   if i.on_gpu and getattr(i, "outside_allocator", False)
                   and (moment is None or moment.holds(i)))

    @property
    def model_states(self) -> int:
        return sum(i.bytes.c for i in self.items if i.on_gpu and i.model_state)

    def memory_at(self, b: int, per_rank: int, layout: Layout,
                  activations: A.StageActivations | None = None) -> int:
        """Bytes at another micro-batch b of the same per-rank batch (m = per_rank / b
        micro-batches, min(m, p − s) of them in flight); `activations`: the stage's at b
        where they are not linear in b (an expert capacity factor)."""
        a = activations or self.activations
        k = micro_batches_in_flight(layout, self.stage, per_rank // b)
        acts = a.held(k).at(b) \
            + a.recomputed_block.at(b)  # the weight copies are in per_micro_batch
        if self.moments:  # the step's peak at this micro-batch
            return self.peak_moment(b, acts, per_rank // b <= layout.pp - self.stage)[0]
        return sum(i.bytes.at(b) for i in self.items if i.on_gpu and not i.activations) + acts


@dataclass(frozen=True)
class ParallelPlan:
    config: ModelConfig
    layout: Layout
    seq: int
    precision: Precision
    hardware: Hardware | None
    net: Interconnect | None
    mfu: Fraction
    stages: tuple[StagePlan, ...]
    fit: Fit | None
    time: StepTime | None
    tokens: int | None = None  # to train on, for the time to train
    stack: StackRun = StackRun()
    per_layer: tuple[tuple[str, int], ...] = ()  # one block's saved tensors, one micro-batch
    mfu_convention: str = EXECUTED  # which FLOPs the --mfu figure counts (planning/mfu.py)
    mfu_scope: str = COMPUTE  # the rate on each stage, or a whole-step (end-to-end) figure
    hfu: bool = False  # an end-to-end figure that counts the recomputed FLOPs
    measured_tokens_per_second: Fraction | None = None  # to convert into MFU/HFU
    optimizer: str = DEFAULT_OPTIMIZER  # planning/optimizers.py's name (the torch stack's choice)
    finetune: object = None  # a LoRA plan (planning/finetune.py FineTune), or full training
    # issue 39: "kernels" or "roofline" when the stages' rate was predicted op by op
    # (planning/kernel_time.py kernel_rate: no --mfu given), "mfu" when --mfu gave it
    time_source: str = "mfu"

    @property
    def predicted_mfu(self) -> Fraction | None:
        """The step's model FLOPs in the --mfu-convention's count (no recomputation, no
        optimizer) / (n · peak · step time)."""
        t = self.step_seconds
        if t is None:
            return None
        from accounting.planning.mfu import convention_flops
        f = convention_flops(self.config, self.seq, self.layout.recompute, self.mfu_convention)
        return Fraction(f.per_step(self.layout.global_batch)) / (
            self.layout.gpus * self.hardware.peak_flops * t)
    implementation: str = COURSE  # whose ops the torch stack runs (recipes.IMPLEMENTATIONS)
    offload: frozenset = frozenset()  # model states kept on the CPU (offload.py: --offload)
    # issue 44's recipe flags as (name, value) pairs: loss, loss_chunks, compile, compile_loss
    recipe: tuple = ()

    @property
    def step_seconds(self) -> Fraction | None:
        """The step time: the compute-scope estimate (bubble and communication added), or
        at an end-to-end utilization the convention's FLOPs of the step / (n·peak·u)."""
        if self.hardware is None or not self.hardware.peak_flops:
            return None
        if self.mfu_scope == END_TO_END:
            return end_to_end_seconds(self.config, self.seq, self.layout.recompute,
                                      self.mfu_convention, self.layout.global_batch,
                                      self.layout.gpus, self.hardware.peak_flops, self.mfu,
                                      self.hfu)
        return None if self.time is None else self.time.seconds

    @property
    def tokens_per_second(self) -> Fraction | None:
        t = self.step_seconds
        return None if t is None else Fraction(self.tokens_per_step) / t

    @property
    def per_layer_activation_bytes(self) -> int:
        """What one block saves for one micro-batch on one GPU of the layout (TP rank 0)."""
        return sum(b for _, b in self.per_layer)

    @property
    def model_states(self) -> int:
        """Parameters, gradients, master copy and optimizer moments on the GPU (worst stage)."""
        return self.worst.model_states

    @property
    def worst(self) -> StagePlan:
        """The stage whose GPU peaks highest (the first of equals)."""
        b = self.layout.micro_batch
        return max(self.stages, key=lambda s: (s.peak(b), -s.stage))

    @property
    def memory(self) -> int:
        """The worst GPU's allocated peak (peak.py): what must fit."""
        return self.worst.peak(self.layout.micro_batch)

    @property
    def peak_moment(self) -> PK.Moment | None:
        """The moment the worst GPU peaks at."""
        return self.worst.peak_moment(self.layout.micro_batch)[1]

    @property
    def reserved(self) -> int:
        """The worst GPU's reserved peak: the caching allocator's segments at its allocated
        peak (planning/reserved.py)."""
        from accounting.planning.reserved import stage
        w = self.worst
        return stage(w, self.layout.micro_batch, self.per_layer,
                     w.layers * w.activations.in_flight,
                     self.hardware.arch if self.hardware is not None else None,
                     capacity=self.hardware.memory_bytes if self.hardware is not None else None,
                     offload_stream=self.per_layer if "activations" in self.offload else (),
                     pools=w.pools)

    @property
    def outside_allocator(self) -> int:
        """Of the worst GPU's allocated peak, the device memory outside the caching
        allocator (async TP's symmetric-memory workspace): counted by the verdict, not by
        the reserved figure (torch.cuda.max_memory_reserved)."""
        w = self.worst
        return w.outside_allocator(self.layout.micro_batch, self.peak_moment)

    @property
    def items_total(self) -> int:
        """The worst GPU's items summed: the breakdown's total."""
        return self.worst.memory(self.layout.micro_batch)

    @property
    def bubble(self) -> Fraction:
        return bubble(self.layout)

    @property
    def tokens_per_step(self) -> int:
        return self.layout.global_batch * self.seq

    @property
    def steps(self) -> int | None:
        return None if self.tokens is None else -(-self.tokens // self.tokens_per_step)
