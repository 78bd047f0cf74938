"""accelerate's config YAML (accelerate/commands/config/config_args.py ClusterConfig, and the
fsdp_* options of `accelerate launch`, commands/launch.py, 1.15.0): FSDP for ZeRO-2/3
(fsdp_sharding_strategy SHARD_GRAD_OP / FULL_SHARD, FSDP1's names), DDP (MULTI_GPU) for
ZeRO-0, bf16 mixed precision, full recomputation as fsdp_activation_checkpointing. One
machine of `gpus` processes unless more than 8 GPUs (8 a node). accelerate's FSDP has no
tensor or pipeline degree here, and no ZeRO-1: refused."""
from __future__ import annotations

from accounting.planning.emit import check_precision
from accounting.runtime.errors import UsageError

GPUS_PER_NODE = 8


def text(plan) -> str:
    lo = plan.layout
    if lo.tp > 1 or lo.pp > 1 or lo.cp > 1 or lo.ep > 1:
        raise UsageError("--emit accelerate: its FSDP config holds data parallelism only; "
                         "this layout has tp/pp/cp/ep > 1 (use --emit torchtitan or megatron)")
    if lo.sharding == 1:
        raise UsageError("--emit accelerate: ZeRO-1 has no FSDP strategy; plan with --zero 0, "
                         "2 or 3")
    if lo.recompute == "selective":
        raise UsageError("--emit accelerate: fsdp_activation_checkpointing recomputes whole "
                         "blocks; plan with --recompute full or none")
    check_precision(plan, __name__, ("bf16-mixed", "fp32"))
    machines = max(1, -(-lo.gpus // GPUS_PER_NODE))
    lines = [f"# {plan.config.name}: {lo.gpus} GPUs, from `python -m accounting plan` "
             f"(issue 42); per-GPU batch {lo.micro_batch}, gradient accumulation "
             f"{lo.micro_batches} (set them in the training script)",
             "compute_environment: LOCAL_MACHINE",
             f"distributed_type: {'FSDP' if lo.sharding >= 2 else 'MULTI_GPU'}",
             f"mixed_precision: {'no' if plan.precision.name == 'fp32' else 'bf16'}",
             f"num_machines: {machines}",
             f"num_processes: {lo.gpus}",
             "machine_rank: 0",
             "main_training_function: main"]
    if lo.sharding >= 2:
        lines += ["fsdp_config:",
                  f"  fsdp_sharding_strategy: {'FULL_SHARD' if lo.sharding == 3 else 'SHARD_GRAD_OP'}",
                  "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP",
                  f"  fsdp_activation_checkpointing: {'true' if lo.recompute == 'full' else 'false'}",
                  "  fsdp_state_dict_type: SHARDED_STATE_DICT"]
    return "\n".join(lines) + "\n"
