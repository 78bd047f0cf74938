"""What each stack overlaps with compute, and what stays exposed on the step's critical path:
one rule per parallelism, each read from the stack's source (issue 39, Must 2). A Stack
record (stacks.py) carries its Overlap; step.py applies it.

Data parallelism, by engine (the rule depends on the sharding stage: a Stack's engines):
  * BUCKETS — torch DDP (torch/nn/parallel/distributed.py DistributedDataParallel.__init__:
    bucket_cap_mb = 25, the first bucket _DEFAULT_FIRST_BUCKET_BYTES = 1 MiB; torch
    v2.5.1): a bucket's all-reduce is launched from the autograd hook as soon as its
    gradients are ready, so the all-reduces run under the rest of the backward pass; under
    no_sync (gradient accumulation) only the last micro-batch's backward reduces. Exposed:
    the last bucket's all-reduce (it waits for the last gradient, then
    Reducer::finalize_backward waits for it), or more where the reduction outlasts that
    backward.
  * PREFETCH — FSDP2 (torch/distributed/_composable/fsdp/_fsdp_state.py _pre_forward and
    _fsdp_param_group.py FSDPParamGroup.pre_backward/post_backward, torch v2.5.1; the
    all-gathers on their own stream, the next unit's all-gather issued while the current
    unit computes, the reduce-scatter of a unit's gradients while the next unit's backward
    runs; torchtitan's apply_fsdp, torchtitan/models/llama3/infra/parallelize.py, keeps
    these defaults and reshard_after_forward=False only for the last block). Per
    micro-batch (FSDP2 reduces after every micro-batch) the first all-gather (the root
    unit's, before any compute) and the last reduce-scatter (the root unit's, after the last
    block's backward) are exposed, and so is whatever the rest outlasts its pass's compute.
    DeepSpeed ZeRO-3 prefetches the same way (stage3_prefetch_bucket_size; overlap_comm
    defaults to True at stage 3: deepspeed/runtime/zero/config.py DeepSpeedZeroConfig
    overlap_comm_valid, `self.stage == ZeroStageEnum.weights`).
  * EXPOSED — nothing overlapped: DeepSpeed stages 0–2 (overlap_comm defaults to False
    below stage 3, the same validator: gradients reduced on the compute stream,
    deepspeed/runtime/zero/stage_1_and_2.py reduce_ipg_grads, and the updated 16-bit
    partitions all-gathered after the step); Megatron-Core's DDP with its defaults
    (megatron/core/distributed/distributed_data_parallel_config.py
    DistributedDataParallelConfig: overlap_grad_reduce = False, overlap_param_gather =
    False; the megatron stack plans one bucket, i.e. overlap_grad_reduce off, and its
    --emit megatron passes neither --overlap-grad-reduce nor --overlap-param-gather).
Collectives of the optimizer step (ZeroRedundancyOptimizer's broadcasts) follow the update:
exposed under every rule.

Tensor parallelism: exposed (on the critical path) unless the run turns on asynchronous TP.
Megatron-Core's userbuffer overlap (ModelParallelConfig.tp_comm_overlap = False by default,
megatron/core/model_parallel_config.py) is off by default and not planned. torchtitan's async
TP (`--async-tp`: `parallelism.enable_async_tensor_parallel`, torchtitan/distributed/
tensor_parallel.py maybe_enable_async_tp: inductor's micro-pipeline TP pass rewrites each
all-gather → matmul and matmul → reduce-scatter into torch's fused symmetric-memory ops) is
ASYNC_TP: torch/distributed/_symmetric_memory/__init__.py (torch 2.13)
_pipelined_all_gather_and_consume consumes the local shard first and each remote shard as
it arrives, the copy of the next shard running under the matmul of the one in hand;
_pipelined_produce_and_all2all sends each produced chunk while the next is computed. With
the matmul in tp chunks of t_m/tp, a fused op takes max(t_m, t_m/tp + t_c): exposed
max(0, t_c − t_m·(tp − 1)/tp). Applied to a micro-batch's TP traffic against its GEMM time
(the kernels' GEMM share of the compute: the TP matmuls are the blocks' GEMMs); where the
compute is not split by kernel (--mfu), nothing is hidden.

Pipeline parallelism: the bubble by schedule (step.py slots: (p − 1)/m of the ideal time for
GPipe and 1F1B, (p − 1)/(v·m) interleaved; Narayanan et al. 2021 §2.2; torchtitan's
torch.distributed.pipelining Schedule1F1B / ScheduleInterleaved1F1B; Megatron-Core's
forward_backward_pipelining_with(out)_interleaving), point-to-point sends exposed.

Context parallelism: RING — each rotation's send/recv of a K/V shard is issued before the
attention of the shard in hand and waited for after it (torch's context_parallel:
torch/distributed/tensor/experimental/_attention.py _templated_ring_attention, torch
v2.5.1; Megatron-Core through TE's AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/
attention.py, which double-buffers the K/V exchange on its own stream): the exchange is
exposed only where it outlasts the micro-batch's attention.

Expert parallelism: the dispatch and combine all-to-alls are exposed (torchtitan's
ExpertParallel._token_dispatch/_token_combine wait for them before the experts run;
Megatron-Core's --overlap-moe-expert-parallel-comm and DeepEP are off by default).
"""
from __future__ import annotations

from dataclasses import dataclass

BUCKETS, PREFETCH, EXPOSED, RING, ASYNC_TP = "buckets", "prefetch", "exposed", "ring", "async"

RULES = {
    BUCKETS: "DDP's gradient buckets (25 MiB, the first 1 MiB): all-reduced under the last "
             "micro-batch's backward; the last bucket exposed",
    PREFETCH: "FSDP2-style prefetch: each unit's all-gather under the previous unit's "
              "compute, its reduce-scatter under the next unit's backward; the first "
              "all-gather and the last reduce-scatter of each micro-batch exposed",
    EXPOSED: "not overlapped: on the critical path",
    RING: "ring: each K/V exchange under the attention of the shard in hand; exposed where "
          "longer than the attention",
    ASYNC_TP: "async TP: each all-gather and reduce-scatter micro-pipelined with the matmul it "
              "feeds (torch's symmetric-memory fused ops); exposed where longer than "
              "(tp − 1)/tp of the GEMMs",
}


@dataclass(frozen=True)
class Overlap:
    """A stack's overlap rules. `data_parallel` maps a sharding stage (a key of the stack's
    engines) to its rule; `source` cites where each was read."""
    data_parallel: dict[int, str]
    tensor_parallel: str = EXPOSED
    context_parallel: str = RING
    expert_parallel: str = EXPOSED
    source: str = ""

    def data_rule(self, sharding: int) -> str:
        return self.data_parallel.get(sharding, EXPOSED)

    def describe(self, sharding: int, async_tp: bool = False) -> dict[str, str]:
        return {"data parallel": self.data_rule(sharding),
                "tensor parallel": ASYNC_TP if async_tp else self.tensor_parallel,
                "pipeline": "bubble by schedule; sends exposed",
                "context parallel": self.context_parallel,
                "expert parallel": self.expert_parallel}


TORCH_OVERLAP = Overlap(
    {0: BUCKETS, 1: BUCKETS, 2: PREFETCH, 3: PREFETCH},
    source="torch v2.5.1: nn/parallel/distributed.py (DDP buckets), distributed/_composable/"
           "fsdp (FSDP2 prefetch), distributed/tensor/experimental/_attention.py (CP ring)")
TORCHTITAN_OVERLAP = Overlap(
    {2: PREFETCH, 3: PREFETCH},
    source="torchtitan 9dec370 models/llama3/infra/parallelize.py apply_fsdp (FSDP2's "
           "prefetch), enable_async_tensor_parallel off by default (--async-tp: torch's "
           "_symmetric_memory micro-pipelining); torch's CP ring")
DEEPSPEED_OVERLAP = Overlap(
    {0: EXPOSED, 1: EXPOSED, 2: EXPOSED, 3: PREFETCH},
    source="deepspeed/runtime/zero/config.py DeepSpeedZeroConfig.overlap_comm_valid "
           "(overlap_comm = stage == 3 by default)")
MEGATRON_OVERLAP = Overlap(
    {0: EXPOSED, 1: EXPOSED},
    source="megatron/core/distributed/distributed_data_parallel_config.py "
           "(overlap_grad_reduce = overlap_param_gather = False), model_parallel_config.py "
           "(tp_comm_overlap = False); TE's AttnFuncWithCPAndKVP2P (CP ring)")
