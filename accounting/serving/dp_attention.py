"""Attention data parallelism with expert parallelism (issue 40): a mixture-of-experts worker
of D·T GPUs whose D ranks each run attention (and the dense layers) at TP T on their own
sequences and KV cache, the routed experts spread whole over all D·T GPUs.

  vLLM: --data-parallel-size D --tensor-parallel-size T --enable-expert-parallel (D engine
    cores, one scheduler and KV cache each; FusedMoE's ep_size = D·T, E/(D·T) experts a GPU:
    vllm/model_executor/layers/fused_moe/layer.py; docs "Data Parallel Deployment").
  SGLang: --tp-size D·T --attn-dp-size D --ep-size D·T (sglang 0.5.23
    arg_groups/fields/parallel.py; --dp-size D --enable-dp-attention before).
For a latent-attention model (DeepSeek-V3) this is what pays: under TP the one latent KV head
is whole on every rank (kv.py), so TP T holds each sequence's cache T times; D ranks of TP T
hold it D times fewer.

Every figure is serve's plan of ONE rank (tp = T, concurrency b = the rank's batch) adjusted:
  weights/GPU = the rank's − its routed experts (E sliced T ways) + the routed experts / D
                (the same E·bytes over D·T GPUs, whole: shards.py's expert_bytes)
  KV pool     = serve's pool + the routed-expert bytes freed (vLLM's and SGLang's pools are the
                budget less the weights: linear in them); sequences at ISL + OSL from it
  decode step = serve's step at b, its routed-expert GEMMs × f (EP gives each GPU the same
                expert FLOPs and weight bytes as TP on average; f ≥ 1 is the busiest GPU's
                share over the mean, the stated load imbalance, --ep-imbalance, 1 = uniform
                routing), plus per MoE layer two all-to-alls (dispatch, combine) of b·k rows
                of d_model bf16 a GPU, NCCL's measured alltoall table at D·T GPUs (in a node;
                none measured across nodes: the layout is not offered)
  TTFT        = serve's (one prompt on one rank) + the prompt's all-to-alls the same way
The worker's batch is D·b; its throughput D·b tokens per step.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.serving import kv
from accounting.timing.layer_ops import MOE_OP, expert_parallel

# timing's routed-expert ops: the GEMM tables' three, or the MoE table's one fused call
EXPERT_OPS = ("expert W1", "expert W2", "expert W3", MOE_OP)


@dataclass(frozen=True)
class DPWorker:
    dp: int
    tp: int
    rank_batch: int
    imbalance: Fraction
    weights_bytes_per_gpu: int
    pool_bytes: int
    max_rank_sequences: int
    ttft_seconds: Fraction
    step_seconds: Fraction
    alltoall_seconds: Fraction  # in the decode step
    experts_per_gpu: int

    @property
    def gpus(self) -> int:
        return self.dp * self.tp

    @property
    def batch(self) -> int:
        return self.dp * self.rank_batch

    @property
    def fits(self) -> bool:
        return self.pool_bytes > 0 and self.max_rank_sequences >= self.rank_batch


def _alltoall(card, gpus: int, elements: int) -> Fraction | None:
    from accounting.timing import tables
    system = tables.system_of(card.name)
    found = tables.collective(system, "alltoall", gpus) if system else None
    if found is None:
        return None
    grid, _ = found
    return Fraction(grid(elements).seconds)


def dp_worker(config, plan, dp: int, imbalance=Fraction(1), isl: int | None = None):
    """The DP-attention + EP worker of D = dp ranks from serve's plan of one rank (None where
    the model has no routed experts, the GPUs span nodes, or no all-to-all table exists)."""
    from accounting.planning.gpus import get_gpu
    if config.num_experts is None or plan.time is None or plan.time.kernels is None:
        return None
    card = get_gpu(plan.gpu)
    e = dp * plan.tp
    if e > card.fabric.gpus_per_node or config.num_experts % e:
        return None
    f = Fraction(imbalance)
    b = plan.time.batch
    moe_layers = config.num_layers - len(config.dense_layers)
    k = config.experts_per_token
    step_a2a = _alltoall(card, e, b * k * config.d_model)
    if step_a2a is None:
        return None
    bind = plan.binding
    experts = bind.stage.expert_bytes
    freed = experts - experts // dp
    pool = bind.pool_bytes + freed
    per_seq = kv.bytes_per_sequence(list(bind.caches), plan.ctx, plan.defaults.block_size)
    most = max(pool, 0) // per_seq if per_seq else 0
    tpot = plan.time.kernels.tpot
    expert_s = sum((o.seconds for o in tpot.ops if o.name in EXPERT_OPS), Fraction(0))
    a2a = 2 * moe_layers * step_a2a
    # the MoE table's row at EP e for all D ranks' tokens where it has one (issue 39b), else
    # the rank's expert time at TP T
    ep_op = expert_parallel(tpot.machine, config, dp * b, e)
    step = tpot.seconds + (f - 1) * expert_s + a2a if ep_op is None else \
        tpot.seconds - expert_s + f * ep_op.seconds + a2a
    prompt = isl or plan.time.prompt
    chunk = min(prompt, plan.max_num_batched_tokens)
    chunks = -(-prompt // chunk)
    pre = _alltoall(card, e, chunk * k * config.d_model) or Fraction(0)
    ttft = plan.time.ttft_seconds + chunks * 2 * moe_layers * pre
    # the prompt's experts, too, spread over the worker's e GPUs (the MoE table at EP e for
    # each chunk of the plan's own prompt) in place of the rank's at TP T
    own = min(plan.time.prompt, plan.max_num_batched_tokens)
    ep_pre = expert_parallel(tpot.machine, config, own, e)
    if ep_pre is not None:
        ttft += -(-plan.time.prompt // own) * ep_pre.seconds - sum(
            (o.seconds for o in plan.time.kernels.ttft.ops if o.name.startswith(MOE_OP)),
            Fraction(0))
    return DPWorker(dp, plan.tp, b, f, plan.weights_bytes_per_gpu - freed, pool, most, ttft,
                    step, a2a, config.num_experts // e)
