"""Megatron-LM's arguments (megatron/training/arguments.py, NVIDIA/Megatron-LM): the layout
(--tensor-model-parallel-size, --pipeline-model-parallel-size,
--num-layers-per-virtual-pipeline-stage, --context-parallel-size,
--expert-model-parallel-size, --sequence-parallel, --use-distributed-optimizer for ZeRO-1),
the batch (--micro-batch-size, --global-batch-size, --seq-length, --train-iters), the
recipe (--bf16, --recompute-granularity full|selective with --recompute-method uniform
--recompute-num-layers 1) and the model's shape (--num-layers, --hidden-size,
--ffn-hidden-size, --num-attention-heads, --group-query-attention --num-query-groups,
--kv-channels, --max-position-embeddings, --position-embedding-type rope, --swiglu,
--normalization RMSNorm, --disable-bias-linear, --untie-embeddings-and-output-weights).
Megatron's distributed optimizer is ZeRO-1; ZeRO-2/3 are refused (Megatron-FSDP aside)."""
from __future__ import annotations

from accounting.planning.emit import check_precision
from accounting.runtime.errors import UsageError


def text(plan) -> str:
    lo, c = plan.layout, plan.config
    if lo.sharding >= 2:
        raise UsageError("--emit megatron: Megatron-LM's distributed optimizer shards the "
                         "optimizer state only (ZeRO-1); plan with --zero 0 or 1")
    check_precision(plan, __name__, ("bf16-mixed", "fp32", "bf16-master"))
    args = [f"--tensor-model-parallel-size {lo.tp}", f"--pipeline-model-parallel-size {lo.pp}"]
    if lo.vpp > 1:
        args.append(f"--num-layers-per-virtual-pipeline-stage {c.num_layers // (lo.pp * lo.vpp)}")
    if lo.cp > 1:
        args.append(f"--context-parallel-size {lo.cp}")
    if lo.ep > 1:
        args.append(f"--expert-model-parallel-size {lo.ep}")
    if lo.sp:
        args.append("--sequence-parallel")
    if lo.sharding == 1:
        args.append("--use-distributed-optimizer")
    args += [f"--micro-batch-size {lo.micro_batch}", f"--global-batch-size {lo.global_batch}",
             f"--seq-length {plan.seq}"]
    if plan.steps is not None:
        args.append(f"--train-iters {plan.steps}")
    if plan.precision.name != "fp32":
        args.append("--bf16")
    if lo.recompute == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 1"]
    elif lo.recompute == "selective":
        args.append("--recompute-granularity selective")
    args += [f"--num-layers {c.num_layers}", f"--hidden-size {c.d_model}",
             f"--ffn-hidden-size {c.d_ff}", f"--num-attention-heads {c.num_heads}"]
    if c.kv_heads != c.num_heads:
        args += ["--group-query-attention", f"--num-query-groups {c.kv_heads}"]
    if c.d_k * c.num_heads != c.d_model:
        args.append(f"--kv-channels {c.d_k}")
    args.append(f"--max-position-embeddings {max(c.context_length, plan.seq)}")
    if c.positions == "rope":
        args += ["--position-embedding-type rope", f"--rotary-base {int(c.rope_theta)}"]
    if c.mlp == "swiglu":
        args.append("--swiglu")
    if c.norm == "rmsnorm":
        args.append("--normalization RMSNorm")
    if not (c.qkv_bias or c.out_bias or c.mlp_bias):
        args.append("--disable-bias-linear")
    if not c.tie_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    return " \\\n  ".join(args) + "\n"
