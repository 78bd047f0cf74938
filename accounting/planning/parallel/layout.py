"""A layout of N GPUs: the degrees of data, tensor, pipeline, sequence and expert
parallelism, the sharding stage, the batch split, and the recomputation; and the checks
that make a layout valid for a model (bad input is a one-line UsageError, exit 2).

Ranks are numbered tensor-parallel fastest, then data-parallel, then pipeline stage
(Megatron-LM's default order): a TP group is tp consecutive GPUs, inside a node whenever
tp divides the GPUs per node.

Expert parallelism (a mixture-of-experts model; --ep) is carved out of the data-parallel
ranks, as Megatron-LM (expert_model_parallel_size, its rank order "tp-cp-ep-dp-pp") and
torchtitan (expert_parallel_degree: the "efsdp" × "ep" mesh under "fsdp") do: within the
dp data-parallel ranks, ep consecutive ones form an expert-parallel group holding E/ep whole
experts each, and the dp/ep ranks that hold the same experts form the expert-data-parallel
group (data-parallel rank = expert-data-parallel rank · ep + expert-parallel rank).
Expert tensor parallelism (Megatron-LM's --expert-tensor-parallel-size, which defaults to
--tp) is not modelled: MoE models are planned with --tp 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from accounting.architecture.config import ModelConfig
from accounting.runtime.errors import UsageError
from accounting.planning import memory as _M

# Sharding stages: the ZeRO paper's names (Rajbhandari et al. 2020, §5) and the torch
# engine each is checked on (accounting/distcheck/).
ZERO_STAGES = {
    0: ("ZeRO-0 (plain data parallelism)", "DDP",
        "torch DistributedDataParallel: replicated parameters, gradients and AdamW state; "
        "gradients all-reduced in buckets"),
    1: ("ZeRO-1 (P_os: optimizer state sharded)", "DDP + ZeroRedundancyOptimizer",
        "torch ZeroRedundancyOptimizer over DDP: gradients all-reduced, AdamW state of whole "
        "parameters partitioned greedily over the data-parallel ranks, updated parameters "
        "broadcast by their owners"),
    2: ("ZeRO-2 (P_os+g: gradients sharded too)", "FSDP SHARD_GRAD_OP",
        "torch FSDP2 fully_shard(reshard_after_forward=False): parameters, gradients and AdamW "
        "state sharded at rest; each unit's parameters gathered once per micro-batch and kept "
        "through its backward pass; gradients reduce-scattered"),
    3: ("ZeRO-3 (P_os+g+p: parameters sharded too)", "FSDP FULL_SHARD",
        "torch FSDP2 fully_shard: parameters gathered for each unit's forward and again for "
        "its backward, freed after each; gradients reduce-scattered"),
}
FSDP_NAMES = {"no_shard": 0, "shard_grad_op": 2, "full_shard": 3}

# Recomputation: the one-GPU memory model's modes (the ledger is built under each).
NO_RECOMPUTE, SELECTIVE, FULL = _M.NO_RECOMPUTE, _M.SELECTIVE_RECOMPUTE, _M.FULL_RECOMPUTE
RECOMPUTE = _M.RECOMPUTE


@dataclass(frozen=True)
class Layout:
    gpus: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    sp: bool = False  # sequence parallelism over the TP group (Korthikanti et al. 2022)
    zero: int = 0
    micro_batch: int = 1  # sequences per micro-batch on one data-parallel rank
    global_batch: int = 1  # sequences per optimizer step, all data-parallel ranks together
    recompute: str = NO_RECOMPUTE
    cp: int = 1  # context parallelism: the sequence split over cp ranks (ring attention)
    vpp: int = 1  # virtual pipeline stages per GPU (the interleaved 1F1B schedule)
    stage_split: tuple[int, ...] | None = None  # layers per (virtual) stage, when given

    @property
    def micro_batches(self) -> int:
        """m: micro-batches each pipeline runs per step (gradient accumulation steps)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def edp(self) -> int:
        """The expert-data-parallel degree dp/ep: the ranks holding the same experts."""
        return self.dp // self.ep

    @property
    def sharding(self) -> int:
        """The stage in effect: nothing to shard without data parallelism."""
        return self.zero if self.dp > 1 else 0

    @property
    def chunks(self) -> int:
        """Model chunks in the pipeline: pp stages of vpp virtual stages each."""
        return self.pp * self.vpp

    def label(self) -> str:
        parts = [f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp}"]
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        if self.vpp > 1:
            parts.append(f"vpp={self.vpp}")
        if self.stage_split is not None:
            parts.append("layers=" + ",".join(map(str, self.stage_split)))
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.sp:
            parts.append("sp")
        parts.append(f"zero={self.zero}")
        parts.append(f"micro={self.micro_batch}")
        return " ".join(parts)


def experts(config: ModelConfig) -> int:
    """Experts per MoE layer; 0 for a dense model."""
    return getattr(config, "num_experts", 0) or 0


@lru_cache(maxsize=1024)
def split_layers(num_layers: int, chunks: int) -> tuple[int, ...]:
    """Layers per model chunk when none are given: as even as can be, and where `chunks`
    does not divide the layers, one layer fewer on the first and the last chunk first (then
    the second and the second to last, ...): Llama 3's rule for 126 layers on 16 stages
    (Dubey et al. 2024, §3.3.2: "we reduce one Transformer layer each from the first and
    the last stages", which hold the embedding and the output layer with the loss)."""
    per = -(-num_layers // chunks)
    sizes = [per] * chunks
    spare = per * chunks - num_layers
    for i in range(spare):
        sizes[i // 2 if i % 2 == 0 else chunks - 1 - i // 2] -= 1
    return tuple(sizes)


def layer_split(config: ModelConfig, layout: Layout) -> tuple[int, ...]:
    """Layers per model chunk, in model order (pp·vpp chunks; chunk c on stage c mod pp):
    the given --stage-layers, or split_layers'."""
    if layout.stage_split is not None:
        return layout.stage_split
    return split_layers(config.num_layers, layout.chunks)


def stage_layers(config: ModelConfig, layout: Layout, stage: int) -> tuple[int, ...]:
    """The blocks of pipeline stage `stage`, in order: its chunks stage, stage + pp, ... of
    the layer split (one chunk, consecutive blocks, without virtual stages)."""
    return _stage_table(layer_split(config, layout), layout.pp)[stage]


@lru_cache(maxsize=1024)
def _stage_table(sizes: tuple[int, ...], pp: int) -> tuple[tuple[int, ...], ...]:
    """Every stage's blocks for a split of the layers into chunks (chunk c on stage c mod pp)."""
    out: list[list[int]] = [[] for _ in range(pp)]
    start = 0
    for c, n in enumerate(sizes):
        out[c % pp].extend(range(start, start + n))
        start += n
    return tuple(tuple(x) for x in out)


def micro_batches_in_flight(layout: Layout, stage: int, m: int | None = None) -> int:
    """Micro-batches whose activations stage `stage` (0-based) holds at its peak, of m.
    1F1B (Narayanan et al. 2021, §2.2; torch's Schedule1F1B): min(m, p − s). The interleaved
    schedule (vpp = v > 1; Megatron-LM's forward_backward_pipelining_with_interleaving and
    torch's ScheduleInterleaved1F1B) runs 2(p − s − 1) + (v − 1)·p warm-up chunk forwards
    before its first backward, so 2(p − s − 1) + (v − 1)·p + 1 chunks (each 1/v of the
    stage's blocks) are held: ⌈that / v⌉ micro-batches of the whole stage, which for the
    first stage is Megatron-LM's in_flight_microbatches = ⌈p·(1 + (p − 1)/(p·v))⌉
    (theoretical_memory_usage.py: the interleaved schedule's memory penalty). Rounded up:
    Megatron-LM scales the layers' activations by the fraction p + (p − 1)/v itself (23.5
    micro-batches for p 16, v 2, where this counts 24: half a stage more, an upper bound)."""
    m = layout.micro_batches if m is None else m
    if layout.vpp == 1:
        return min(m, layout.pp - stage)
    return -(-chunks_in_flight(layout, stage, m) // layout.vpp)


def chunks_in_flight(layout: Layout, stage: int, m: int | None = None) -> int:
    """Model chunks (micro-batch × virtual stage) whose activations stage `stage` holds at its
    peak under the interleaved schedule: min(v·m, 2(p − s − 1) + (v − 1)·p + 1) (torch's
    _get_warmup_ops with m a multiple of p, plus the steady state's one;
    tests/test_pipeline_schedules.py reads it off ScheduleInterleaved1F1B's order)."""
    m = layout.micro_batches if m is None else m
    p, v = layout.pp, layout.vpp
    return min(v * m, 2 * (p - stage - 1) + (v - 1) * p + 1)


def expert_shard_dim(config: ModelConfig, layout: Layout) -> int:
    """The dimension FSDP2 shards a routed expert's (E/ep, rows, cols) matrix on over the
    expert-data-parallel group: torchtitan's apply_fsdp (models/llama4/infra/parallelize.py)
    shards dim 1 when efsdp·ep > E ("FSDP's default Shard(0) leaves some EFSDP ranks with
    empty or very small shards"), else FSDP2's default dim 0."""
    return 1 if layout.edp * layout.ep > experts(config) else 0


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _choose(n: int, limit: int = 8) -> str:
    ds = divisors(n)
    return ", ".join(map(str, ds[:limit])) + (", …" if len(ds) > limit else "")


def problems(config: ModelConfig, layout: Layout, seq: int) -> list[str]:
    """Why a layout cannot run this model (empty: it can). One sentence each, naming the fix."""
    c, lo = config, layout
    out = []
    product = lo.tp * lo.cp * lo.pp * lo.dp
    if product != lo.gpus:
        cp = f" × cp {lo.cp}" if lo.cp > 1 else ""
        out.append(f"tp {lo.tp}{cp} × pp {lo.pp} × dp {lo.dp} = {product} GPUs, not --gpus "
                   f"{lo.gpus}; the degrees must multiply to the number of GPUs")
    if lo.tp > 1:
        if c.num_heads % lo.tp:
            out.append(f"tp {lo.tp} does not divide the {c.num_heads} attention heads; each "
                       f"tensor-parallel rank holds whole heads (tp among {_choose(c.num_heads)})")
        elif c.kv_heads % lo.tp:
            out.append(f"tp {lo.tp} does not divide the {c.kv_heads} key/value heads; each "
                       f"tensor-parallel rank holds whole KV heads (tp among {_choose(c.kv_heads)})")
        if c.d_ff % lo.tp:
            out.append(f"tp {lo.tp} does not divide d_ff = {c.d_ff:,}; the MLP's inner width is "
                       f"split evenly over the tensor-parallel ranks")
        if c.qk_norm == "full":
            out.append(f"tp {lo.tp} with QK-norm over the full projection width (OLMo-2) is not "
                       f"planned: that norm's mean spans the heads of every tensor-parallel rank")
    if lo.sp and lo.tp == 1:
        out.append("--sp (sequence parallelism) splits the sequence over the tensor-parallel "
                   "group; it needs --tp > 1")
    elif lo.sp and seq % lo.tp:
        out.append(f"sequence parallelism splits T = {seq:,} tokens over tp {lo.tp} ranks; "
                   f"choose a T divisible by {lo.tp}")
    out += pipeline_problems(c, lo)
    out += context_problems(c, lo, seq)
    if lo.tp > 1 and experts(c):
        out.append(f"tp {lo.tp} with a mixture of experts is not planned: expert tensor "
                   f"parallelism (Megatron-LM's --expert-tensor-parallel-size, which defaults "
                   f"to --tp) is not modelled; use --tp 1 and split the experts with --ep")
    if lo.tp > 1 and c.mla:
        out.append(f"tp {lo.tp} with multi-head latent attention is not planned (its shared "
                   f"latent projections are not split by heads); use --tp 1")
    E = experts(c)
    if lo.ep > 1 and not E:
        out.append(f"--ep {lo.ep}: {c.name} has no experts (a dense model); expert parallelism "
                   f"needs a mixture-of-experts model (leave --ep at 1)")
    elif lo.ep > 1 and E % lo.ep:
        out.append(f"--ep {lo.ep} does not divide the {E} experts; each expert-parallel rank "
                   f"holds whole experts, E/ep of them (ep among {_choose(E)})")
    elif lo.ep > 1 and lo.dp % lo.ep:
        out.append(f"--ep {lo.ep} does not divide the data-parallel degree {lo.dp}; "
                   f"expert-parallel groups are carved out of the data-parallel ranks "
                   f"(ep among {_choose(lo.dp)})")
    elif (lo.ep > 1 and lo.sharding >= 2 and lo.edp > 1 and expert_shard_dim(c, lo) == 1
          and (c.expert_d_ff % lo.edp or c.d_model % lo.edp)):
        out.append(f"FSDP2 shards the experts' second dimension when dp {lo.dp} > {E} experts "
                   f"(torchtitan), evenly: dp/ep = {lo.edp} must divide d_e = "
                   f"{c.expert_d_ff:,} and d_model = {c.d_model:,}; choose another --ep")
    if lo.global_batch % lo.dp:
        out.append(f"global batch {lo.global_batch:,} is not divisible by dp {lo.dp}; each "
                   f"data-parallel rank takes the same number of sequences")
    elif (lo.global_batch // lo.dp) % lo.micro_batch:
        out.append(f"micro-batch {lo.micro_batch} does not divide the {lo.global_batch // lo.dp:,} "
                   f"sequences each data-parallel rank runs per step (global batch "
                   f"{lo.global_batch:,} / dp {lo.dp}); choose among "
                   f"{_choose(lo.global_batch // lo.dp)}")
    return out


def pipeline_problems(c: ModelConfig, lo: Layout) -> list[str]:
    """The layer split and the virtual stages."""
    out = []
    if lo.pp > 1 and c.kv_shared_layers:  # Gemma 4 E2B/E4B
        out.append(f"pp {lo.pp} with KV sharing: the last {c.kv_shared_layers} layers attend "
                   f"over K and V that earlier layers compute, which a pipeline stage boundary "
                   f"would cut (not planned); plan it with --pp 1")
    if lo.vpp > 1 and lo.pp == 1:
        out.append(f"--virtual-stages {lo.vpp} interleaves the stages of a pipeline; it needs "
                   f"--pp > 1")
    elif lo.vpp > 1 and lo.micro_batches % lo.pp:
        out.append(f"the interleaved schedule runs the micro-batches in groups of pp: "
                   f"{lo.micro_batches:,} micro-batches is not a multiple of pp {lo.pp} "
                   f"(Megatron-LM's rule; choose a global batch of dp·micro-batch·{lo.pp}·k)")
    if lo.stage_split is not None:
        n = lo.chunks
        what = f"pp {lo.pp}" + (f" × {lo.vpp} virtual stages" if lo.vpp > 1 else "")
        if len(lo.stage_split) != n:
            out.append(f"--stage-layers gives {len(lo.stage_split)} numbers; {what} needs {n}, "
                       f"one per {'virtual ' if lo.vpp > 1 else ''}stage in model order")
        elif sum(lo.stage_split) != c.num_layers:
            out.append(f"--stage-layers adds up to {sum(lo.stage_split)} layers; {c.name} has "
                       f"{c.num_layers}")
    elif c.num_layers < lo.chunks:
        out.append(f"{lo.chunks} pipeline chunks (pp {lo.pp} × {lo.vpp}) for {c.num_layers} "
                   f"layers: each chunk needs a layer at least; choose a smaller --pp or "
                   f"--virtual-stages")
    return out


def context_problems(c: ModelConfig, lo: Layout, seq: int) -> list[str]:
    """Context parallelism: torch's context_parallel (and Megatron-LM's, with Transformer
    Engine) replaces a fused attention kernel; each rank holds T/cp tokens, two load-balanced
    chunks of T/(2·cp) (the causal mask's work evened out)."""
    if lo.cp == 1:
        return []
    out = []
    if c.attention != "sdpa":
        out.append(f"--cp {lo.cp}: context parallelism (ring attention) replaces the fused "
                   f"attention kernel (F.scaled_dot_product_attention), not the explicit scores "
                   f"and softmax; give --attention sdpa")
    if seq % (2 * lo.cp):
        out.append(f"--cp {lo.cp} splits T = {seq:,} into 2·cp = {2 * lo.cp} load-balanced "
                   f"chunks; choose a T divisible by {2 * lo.cp}")
    if lo.sp and (seq // lo.cp) % lo.tp:
        out.append(f"sequence parallelism splits the T/cp = {seq // lo.cp:,} tokens of a "
                   f"context-parallel rank over tp {lo.tp}; choose a T divisible by "
                   f"{lo.cp * lo.tp}")
    if lo.ep > 1:
        out.append("context parallelism with expert parallelism is not planned; leave --ep at 1")
    if c.sliding_window is not None or c.attention_chunk is not None:
        out.append("context parallelism with sliding-window or chunked attention is not planned "
                   "(torch's ring attention runs full causal attention)")
    return out


def check_numbers(layout: Layout) -> None:
    """Types and ranges (before the model-specific checks)."""
    for name in ("gpus", "tp", "pp", "dp", "ep", "micro_batch", "global_batch", "cp", "vpp"):
        v = getattr(layout, name)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            flag = "--virtual-stages" if name == "vpp" else "--" + name.replace("_", "-")
            raise UsageError(f"{flag} must be a positive integer, got {v!r}")
    if layout.stage_split is not None and (
            not layout.stage_split or any(isinstance(n, bool) or not isinstance(n, int) or n <= 0
                                          for n in layout.stage_split)):
        raise UsageError(f"--stage-layers must be positive integers, one per stage, got "
                         f"{layout.stage_split!r}")
    if layout.gpus > 10**6:
        raise UsageError(f"--gpus must be at most 1,000,000, got {layout.gpus:,}")
    if layout.zero not in ZERO_STAGES:
        raise UsageError(f"--zero must be 0, 1, 2 or 3, got {layout.zero!r}")
    if layout.recompute not in RECOMPUTE:
        raise UsageError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {layout.recompute!r}")


def check_layout(config: ModelConfig, layout: Layout, seq: int) -> None:
    check_numbers(layout)
    found = problems(config, layout, seq)
    if found:
        raise UsageError(found[0])


def resolve(gpus: int, tp: int = 1, pp: int = 1, dp: int | None = None, cp: int = 1) -> int:
    """The data-parallel degree: given, or gpus / (tp·cp·pp)."""
    if dp is not None:
        return dp
    if gpus % (tp * cp * pp):
        cps = f" × cp {cp}" if cp > 1 else ""
        raise UsageError(f"--gpus {gpus} is not divisible by tp {tp}{cps} × pp {pp}; give "
                         f"degrees whose product is the number of GPUs")
    return gpus // (tp * cp * pp)
