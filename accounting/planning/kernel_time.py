"""The predicted time of a plan: a Machine for the plan's GPU, and one step timed op by op.
Planning's side of the time model (issue 39): it reads the GPU and optimizer records and
calls the timing package below it (timing/ops.py, step.py, tables.py), which imports nothing
of planning (tests/test_layout.py's floors).

A table GPU with aiconfigurator-core installed is timed from the measured kernels
(source "kernels"); one without (or the package absent, or a GPU given by its numbers) by
the roofline at ops.ROOFLINE_DERATE and ops.BANDWIDTH_DERATE (source "roofline").
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from fractions import Fraction

from accounting.planning.gpus import Hardware, get_gpu
from accounting.planning.optimizers import DEFAULT_OPTIMIZER, get_optimizer
from accounting.timing import ops as O
from accounting.timing import step as S
from accounting.timing import tables
from accounting.units import BF16, FP8, TERA


def machine(hw, gpu_name: str | None, engine: str = tables.TRAINING_ENGINE,
            compute: str = BF16) -> O.Machine | None:
    """The timer's view of a plan's hardware (None without a peak or a bandwidth); an fp32
    run's GEMMs have no table (roofline at the fp32 peak)."""
    if hw is None or hw.peak_flops is None or hw.bandwidth is None:
        return None
    if compute not in (BF16, FP8):  # fp8 training: its linear GEMMs fp8, the rest bf16
        return O.Machine(hw.name, None, hw.peak_flops, None, hw.bandwidth, engine, None)
    fp8 = None
    if gpu_name is not None:
        g = get_gpu(gpu_name)
        fp8 = g.peak_tflops[FP8] * TERA if FP8 in g.peak_tflops else None
        peak = g.peak_tflops.get(BF16, None)
        peak = peak * TERA if peak is not None else hw.peak_flops
        return O.Machine(g.name, tables.system_of(g.name), peak, fp8, hw.bandwidth, engine)
    return O.Machine(hw.name, None, hw.peak_flops, None, hw.bandwidth, engine)


@dataclass(frozen=True)
class StepPrediction:
    """One training step on one GPU, predicted op by op."""
    timed: S.Timed
    tokens: int  # B·T of the step
    model_flops: int  # the step's forward + backward matmul FLOPs (MFU's numerator)
    peak_flops: Fraction

    @property
    def step_seconds(self) -> Fraction:
        return self.timed.seconds

    @property
    def tokens_per_second(self) -> Fraction:
        return self.tokens / self.step_seconds

    @property
    def mfu(self) -> Fraction:
        """Model FLOPs (forward and backward matmuls as executed, no recomputation, no
        optimizer) per second over the dense bf16 peak."""
        return Fraction(self.model_flops) / (self.step_seconds * self.peak_flops)

    @property
    def source(self) -> str:
        return self.timed.source


def predict_step(model, seq: int, batch: int, mach: O.Machine, flops, optimizer: str,
                 trainable_params: int | None = None, extra_ops: tuple = ()) -> StepPrediction:
    """`model` a planning.memory.MemoryModel (its ledger is the run's), `flops` its StepFlops;
    extra_ops: OpTimes run in the same step beside the model's (a vision tower's,
    planning/vision_flops.py), their forward and backward matmuls in flops.vision."""
    v = model.values(seq, batch)
    timed = S.training_step(model.ledger, v, mach, model.precision, get_optimizer(optimizer),
                            trainable_params)
    if extra_ops:
        timed = S.Timed(timed.ops + tuple(extra_ops), mach)
    tower = flops.vision.forward + flops.vision.backward if flops.vision is not None else 0
    return StepPrediction(timed, seq * batch, flops.forward + flops.backward + tower,
                          mach.peak_flops)


def _gpu_name(hw) -> str | None:
    if hw is None or hw.arch is None:
        return None
    return hw.name


@lru_cache(maxsize=256)
def _kernel_rate(config, precision, recompute: str, seq: int, micro_batch: int, tp: int,
                 gpu: str | None, peak: Fraction, bandwidth: Fraction
                 ) -> tuple[Fraction, str, tuple[tuple[str, Fraction], ...]]:
    from accounting.ledger.ledger import ledger
    lg = ledger(config, precision.autocast, recompute, "course", precision.param_dtype,
                fp8=precision.fp8)
    hw = Hardware(gpu or "custom GPU", None, peak, bandwidth, "", None)
    mach = machine(hw, gpu, compute=precision.compute)
    v = lg.values(seq, micro_batch)
    # the optimizer's update is taken off below: any record does
    timed = S.training_step(lg, v, mach, precision, get_optimizer(DEFAULT_OPTIMIZER), tp=tp)
    cats = timed.by_category()
    seconds = timed.seconds - cats[O.OPTIMIZER]
    shares = tuple((c, cats[c] / seconds) for c in O.CATEGORIES
                   if c != O.OPTIMIZER and cats[c])
    flops = sum(r.count(v) * r.flops(v) for r in lg.forward) \
        + sum(r.count(v) * g.flops(v) for r in lg.forward for g in r.gradients()) \
        + sum(r.count(v) * r.flops(v) for r in lg.recomputed)
    rate = Fraction(flops, tp) / (seconds * peak)
    return min(rate, Fraction(1)), timed.source, shares


def kernel_rate(config, precision, recompute: str, seq: int, micro_batch: int, tp: int,
                hw) -> tuple[Fraction, str, tuple[tuple[str, Fraction], ...]] | None:
    """The compute-scope utilization one GPU of a TP group reaches on a micro-batch, the
    whole model's every executed matmul FLOP (recomputation included) over its op-by-op time
    (GEMMs at the TP-split shapes, attention, memory-bound ops; the optimizer apart), and
    its source: what the many-GPU step model then runs each stage at; and each category's
    share of that time (GEMMs, attention, memory-bound: the step's breakdown, and the
    attention a context-parallel ring hides its exchange under). None without a peak and a
    bandwidth."""
    if hw is None or not hw.peak_flops or not hw.bandwidth:
        return None
    return _kernel_rate(config, precision, recompute, seq, micro_batch, tp, _gpu_name(hw),
                        Fraction(hw.peak_flops), Fraction(hw.bandwidth))


# the many-GPU planner's collective names -> NCCL's tables' op_name (nccl_perf.parquet)
_NCCL_OPS = {"all-reduce": "all_reduce", "all-gather": "all_gather",
             "reduce-scatter": "reduce_scatter", "all-to-all": "alltoall"}


def collective_timer(hw):
    """A function timing one planned collective (comms.Collective: its op, calls, total
    bytes, ranks) inside a node from NCCL's measured table for the GPU's system (message
    sizes read as elements of 2 bytes, the table's half precision; a size as NCCL's tests
    give it: the whole buffer), or None where no table covers it (another op, a group size
    not measured, a GPU without tables): the planner's link model then times it."""
    system = tables.system_of(_gpu_name(hw))
    if system is None:
        return None
    return _system_timer(system)


@lru_cache(maxsize=16)
def _system_timer(system: str):
    """One timer per system, remembering each collective it timed (a search plans the same
    collectives for many layouts)."""

    @lru_cache(maxsize=8192)
    def seconds(c) -> Fraction | None:
        op = _NCCL_OPS.get(c.op)
        if op is None or c.calls <= 0:
            return None
        found = tables.collective(system, op, c.ranks)
        if found is None:
            return None
        grid, _ = found
        per_call = max(1, c.bytes // c.calls // 2)
        return c.calls * Fraction(grid(per_call).seconds)
    return seconds


def optimizer_seconds(elements: int, precision, optimizer: str, hw) -> Fraction:
    """A rank's optimizer step over the `elements` it updates, as the bytes its update moves
    (the optimizer record's update_bytes) at the measured share of the bandwidth: the update is
    memory-bound, never at a FLOP rate."""
    return elements * _seconds_per_element(precision, optimizer, _gpu_name(hw), hw.name,
                                           Fraction(hw.peak_flops), Fraction(hw.bandwidth))


@lru_cache(maxsize=64)
def _seconds_per_element(precision, optimizer: str, gpu: str | None, name: str,
                         peak: Fraction, bandwidth: Fraction) -> Fraction:
    """The update's seconds per element on one GPU (a search asks per layout and stage)."""
    hw = Hardware(name, None, peak, bandwidth, "", None)
    mach = machine(hw, gpu, compute=precision.compute)
    rate, _, _ = mach.memory_rate()
    return Fraction(get_optimizer(optimizer).update_bytes(precision)) / rate
