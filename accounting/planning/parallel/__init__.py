"""Plans for many GPUs: data, tensor, pipeline and sequence parallelism with ZeRO/FSDP
sharding (expert parallelism once the spec has experts). Pure Python; the torch.distributed
checks live in accounting/distcheck.
"""
from accounting.planning.parallel.layout import (FSDP_NAMES, RECOMPUTE, ZERO_STAGES, Layout,
                                                 check_layout, problems)
from accounting.planning.parallel.plan import ParallelPlan, parallel_plan

__all__ = ["FSDP_NAMES", "RECOMPUTE", "ZERO_STAGES", "Layout", "ParallelPlan", "check_layout",
           "parallel_plan", "problems"]
