"""Plans for many GPUs: data, tensor, pipeline, sequence and expert parallelism with
ZeRO/FSDP sharding. Pure Python; the torch.distributed checks live in accounting/distcheck.
"""
from accounting.planning.parallel.layout import (FSDP_NAMES, RECOMPUTE, ZERO_STAGES, Layout,
                                                 check_layout, problems)
from accounting.planning.parallel.plan import ParallelPlan, parallel_plan



def plan_frame(*args, **kwargs):
    """DataFrame of a multi-GPU plan (pandas imported on call); see frames.py."""
    from accounting.planning.parallel.frames import plan_frame as f
    return f(*args, **kwargs)


def search_frame(*args, **kwargs):
    """DataFrame of a layout search (pandas imported on call); see frames.py."""
    from accounting.planning.parallel.frames import search_frame as f
    return f(*args, **kwargs)


__all__ = ["plan_frame", "search_frame", "FSDP_NAMES", "RECOMPUTE", "ZERO_STAGES", "Layout", "ParallelPlan", "check_layout",
           "parallel_plan", "problems"]
