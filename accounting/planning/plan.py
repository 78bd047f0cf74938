"""One call that answers every planning question for a workload: training memory, what
fits, FLOPs per step, time to train, inference. Returns data; views.py renders it."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.analysis import arguments as A
from accounting.analysis.workload import MAX_WORKLOAD, check_workload
from accounting.spec.config import ModelConfig
from accounting.runtime.errors import UsageError
from accounting.planning.compute import (
    StepFlops,
    TrainingTime,
    check_mfu,
    exact,
    step_flops,
    training_time,
)
from accounting.planning.fit import (
    BatchFit,
    Budget,
    ContextFit,
    largest_batch,
    longest_context,
)
from accounting.planning.gpus import Hardware, get_gpu
from accounting.planning.inference import Inference, inference
from accounting.planning.memory import (
    FP32,
    MODEL,
    NO_RECOMPUTE,
    PRECISIONS,
    RECOMPUTE,
    SCOPES,
    MemoryModel,
    Precision,
    TrainingMemory,
    get_precision,
)


@dataclass(frozen=True)
class Plan:
    config: ModelConfig
    seq: int
    batch: int
    precision: Precision
    scope: str
    recompute: str
    hardware: Hardware | None
    mfu: Fraction
    margin: Fraction
    memory: TrainingMemory
    batch_fit: BatchFit | None  # None without a memory size
    context_fit: ContextFit | None
    flops: StepFlops
    time: TrainingTime | None  # None without a peak or without --steps/--tokens
    inference: Inference


def hardware(gpu: str | None = None, memory_bytes: int | None = None,
             peak_tflops=None, bandwidth_tbs=None, compute: str = FP32) -> Hardware | None:
    """A table GPU, or the user's own numbers (any of them may be left out), or None."""
    custom = (memory_bytes, peak_tflops, bandwidth_tbs)
    if gpu is not None:
        if any(x is not None for x in custom):
            raise UsageError("give either --gpu NAME or --gpu-mem/--gpu-flops/--gpu-bw, not both")
        return Hardware.from_gpu(get_gpu(gpu), compute)
    if all(x is None for x in custom):
        return None
    if memory_bytes is not None and (isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int)
                                     or memory_bytes <= 0):
        raise UsageError(f"--gpu-mem must be a positive size, got {memory_bytes!r}")
    peak = None if peak_tflops is None else exact(peak_tflops, "--gpu-flops")
    bw = None if bandwidth_tbs is None else exact(bandwidth_tbs, "--gpu-bw")
    for flag, x in (("--gpu-flops", peak), ("--gpu-bw", bw)):
        if x is not None and x <= 0:
            raise UsageError(f"{flag} must be positive, got {x}")
    return Hardware.custom(memory_bytes, peak, bw)


def plan(config: ModelConfig | str, seq: int | None = None, batch: int = 1, *,
         precision: str = FP32, scope: str = MODEL, recompute: str = NO_RECOMPUTE,
         gpu: str | None = None, memory_bytes: int | None = None, peak_tflops=None,
         bandwidth_tbs=None, mfu="0.5", margin="0", steps: int | None = None,
         tokens: int | None = None, position: int | None = None) -> Plan:
    """Every answer for one workload. Numbers given as strings or Fractions stay exact.
    config: a ModelConfig or a preset name; gpu a name of accounting.planning.gpus.GPUS (or
    memory_bytes, peak_tflops, bandwidth_tbs of your own); precision, scope and recompute
    one of their names (a wrong type is a TypeError, an unknown name a UsageError)."""
    config = A.config(config)
    seq = A.count(seq, "seq", "the config's context_length")
    batch = A.count(batch, "batch")
    precision = A.choice(precision, "precision", PRECISIONS)
    scope = A.choice(scope, "scope", SCOPES)
    recompute = A.choice(recompute, "recompute", RECOMPUTE)
    gpu = A.optional_name(gpu, "gpu", "a GPU name such as 'H100'")
    memory_bytes, steps, tokens, position = (
        A.count(v, name, "not given") for v, name in ((memory_bytes, "memory_bytes"),
                                                     (steps, "steps"), (tokens, "tokens"),
                                                     (position, "position")))
    seq = config.context_length if seq is None else seq
    check_workload(seq, batch, config)
    for value, name in ((steps, "steps"), (tokens, "tokens"), (position, "position")):
        if value is not None and value > MAX_WORKLOAD:  # the CLI's bound (issue 32)
            raise UsageError(f"{name} (--{name}) must be at most 10^15, got {value:.3e}")
    if position is not None and (isinstance(position, bool) or not isinstance(position, int)
                                 or position <= 0):
        raise UsageError(f"--position must be a positive integer, got {position!r}")
    if position is not None and config.positions == "learned" and position > config.context_length:
        # the token at position t attends to t keys; a learned table has no row past its end
        raise UsageError(f"--position {position:,} is past {config.name}'s learned position "
                         f"table ({config.context_length:,} positions); give --position up to "
                         f"{config.context_length:,} (RoPE models decode at any position)")
    if steps is not None and tokens is not None:
        raise UsageError("give either --steps or --tokens, not both")
    p = get_precision(precision)
    hw = hardware(gpu, memory_bytes, peak_tflops, bandwidth_tbs, p.compute)
    u = check_mfu(mfu)
    m = exact(margin, "--margin")
    model = MemoryModel(config, p, scope, recompute)
    budget = Budget(hw.memory_bytes, m) if hw and hw.memory_bytes else None
    if budget is None and not 0 <= m < 1:
        raise UsageError(f"--margin must be in [0, 1) (a share of the memory), got {margin}")
    flops = step_flops(config, seq, batch, recompute)
    time = None
    if hw and hw.peak_flops and (steps is not None or tokens is not None):
        time = training_time(flops, hw.peak_flops, u, steps, tokens)
    elif steps is not None or tokens is not None:
        training_time(flops, 1, u, steps, tokens)  # validates the counts
    return Plan(config, seq, batch, p, scope, recompute, hw, u, m, model.at(batch, seq),
                largest_batch(model, seq, budget) if budget else None,
                longest_context(model, batch, budget) if budget else None,
                flops, time,
                inference(config, batch, seq, p, position,
                          hw.peak_flops if hw else None, hw.bandwidth if hw else None))
