"""Capacity planning: training memory with AdamW, what fits in a GPU, FLOPs and time to
train, inference cost. Pure Python (no torch); `python -m accounting plan --help`.

    >>> from accounting import get_preset
    >>> from accounting.planning import plan
    >>> p = plan(get_preset("gpt2-xl"), scope="course", gpu="A100-80GB", margin="0")
    >>> p.memory.per_sequence, p.memory.fixed, p.batch_fit.largest
    (16776044544, 34032921600, 3)
"""
from accounting.planning.compute import (ADAMW_OPS, StepFlops, TrainingTime, adamw_flops,
                                         step_flops, training_time)
from accounting.planning.fit import BatchFit, Budget, ContextFit, largest_batch, longest_context
from accounting.planning.gpus import GPUS, Hardware, get_gpu
from accounting.planning.inference import Inference, inference
from accounting.planning.memory import (PRECISIONS, Activation, MemoryModel,
                                        TrainingMemory, get_precision)
from accounting.planning.plan import Plan, plan

__all__ = ["ADAMW_OPS", "GPUS", "PRECISIONS", "Activation", "BatchFit", "Budget",
           "ContextFit", "Hardware", "Inference", "MemoryModel", "Plan", "StepFlops",
           "TrainingMemory", "TrainingTime", "adamw_flops", "get_gpu", "get_precision",
           "inference", "largest_batch", "longest_context", "plan", "step_flops",
           "training_time"]
