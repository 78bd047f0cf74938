"""torchtitan's TOML job config (torchtitan/config/job_config.py at 6404b93: [training]
local_batch_size, global_batch_size, seq_len, steps, mixed_precision_param; [parallelism]
data_parallel_replicate_degree, data_parallel_shard_degree, tensor_parallel_degree,
pipeline_parallel_degree, pipeline_parallel_microbatch_size, context_parallel_degree,
expert_parallel_degree, enable_async_tensor_parallel (with --async-tp);
[activation_checkpoint] mode).

ZeRO maps as torchtitan applies FSDP2 (torchtitan/distributed/parallel_dims.py): stage 3 =
FSDP over all data-parallel ranks (shard degree dp, replicate 1); stage 0 = DDP (replicate
dp, shard 1). ZeRO-1 and -2 have no torchtitan setting (its FSDP2 reshards after forward
or not, fsdp_reshard_after_forward 'never' ≈ ZeRO-2) and map to shard with reshard 'never'
for 2; 1 is refused."""
from __future__ import annotations

from accounting.planning.emit import check_precision
from accounting.runtime.errors import UsageError


def text(plan) -> str:
    lo = plan.layout
    if lo.sharding == 1:
        raise UsageError("--emit torchtitan: ZeRO-1 (sharded optimizer state only) has no "
                         "torchtitan setting; plan with --zero 0, 2 or 3")
    check_precision(plan, __name__, ("bf16-mixed", "fp32"))
    shard, replicate = (lo.dp, 1) if lo.sharding >= 2 else (1, lo.dp)
    mode = {"none": "none", "full": "full", "selective": "selective"}[lo.recompute]
    lines = [
        f"# {plan.config.name}: {lo.gpus} GPUs, from `python -m accounting plan` (issue 42)",
        "[model]",
        '# torchtitan names its models (name, flavor): set them to this architecture',
        "",
        "[training]",
        f"local_batch_size = {lo.micro_batch * lo.micro_batches}",
        f"global_batch_size = {lo.global_batch}",
        f"seq_len = {plan.seq}",
    ]
    if plan.steps is not None:
        lines.append(f"steps = {plan.steps}")
    lines += [
        f'mixed_precision_param = "{"float32" if plan.precision.name == "fp32" else "bfloat16"}"',
        "",
        "[parallelism]",
        f"data_parallel_replicate_degree = {replicate}",
        f"data_parallel_shard_degree = {shard}",
        f'fsdp_reshard_after_forward = "{"never" if lo.sharding == 2 else "default"}"',
        f"tensor_parallel_degree = {lo.tp}",
        f"pipeline_parallel_degree = {lo.pp}",
        f"pipeline_parallel_microbatch_size = {lo.micro_batch}",
        f"context_parallel_degree = {lo.cp}",
        f"expert_parallel_degree = {lo.ep}",
    ]
    if plan.stack.async_tp:  # Parallelism.enable_async_tensor_parallel (--async-tp)
        lines.append("enable_async_tensor_parallel = true")
    lines += [
        "",
        "[activation_checkpoint]",
        f'mode = "{mode}"',
    ]
    return "\n".join(lines) + "\n"
