"""DeepSpeed's config JSON (deepspeed/runtime/config.py DeepSpeedConfig, 0.19.8): the batch
triple it checks (train_batch_size = train_micro_batch_size_per_gpu ·
gradient_accumulation_steps · data-parallel world size: _batch_assertion), the ZeRO stage
(zero_optimization.stage) and bf16. DeepSpeed's config has no tensor or pipeline degree
(those are Megatron-DeepSpeed's arguments, or a PipelineModule in code): such a layout is
refused."""
from __future__ import annotations

import json

from accounting.planning.emit import check_precision
from accounting.runtime.errors import UsageError


def text(plan) -> str:
    lo = plan.layout
    if lo.tp > 1 or lo.pp > 1 or lo.cp > 1 or lo.ep > 1:
        raise UsageError("--emit deepspeed: DeepSpeed's config holds data parallelism and ZeRO "
                         "only; this layout has tp/pp/cp/ep > 1 (use --emit megatron, or plan "
                         "with --tp 1 --pp 1)")
    check_precision(plan, __name__, ("bf16-mixed", "fp32", "bf16", "bf16-master"))
    cfg = {
        "train_batch_size": lo.global_batch,
        "train_micro_batch_size_per_gpu": lo.micro_batch,
        "gradient_accumulation_steps": lo.micro_batches,
        "zero_optimization": {"stage": lo.sharding},
        "bf16": {"enabled": plan.precision.name != "fp32"},
        "optimizer": {"type": "AdamW"},
    }
    return json.dumps(cfg, indent=2) + "\n"
