"""A layout of N GPUs: the degrees of data, tensor, pipeline, sequence and expert
parallelism, the sharding stage, the batch split, and the recomputation; and the checks
that make a layout valid for a model (bad input is a one-line UsageError, exit 2).

Ranks are numbered tensor-parallel fastest, then data-parallel, then pipeline stage
(Megatron-LM's default order): a TP group is tp consecutive GPUs, inside a node whenever
tp divides the GPUs per node.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.spec.config import ModelConfig
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

    @property
    def micro_batches(self) -> int:
        """m: micro-batches each pipeline runs per step (gradient accumulation steps)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def sharding(self) -> int:
        """The stage in effect: nothing to shard without data parallelism."""
        return self.zero if self.dp > 1 else 0

    def label(self) -> str:
        parts = [f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp}"]
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.sp:
            parts.append("sp")
        parts.append(f"zero={self.zero}")
        parts.append(f"micro={self.micro_batch}")
        return " ".join(parts)


def experts(config: ModelConfig) -> int:
    """Experts per MoE layer; 0 for a dense model. Expert parallelism plugs in here and in
    comms.py; check_model refuses MoE models until expert sharding is modelled."""
    return getattr(config, "num_experts", 0) or 0


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _choose(n: int, limit: int = 8) -> str:
    ds = divisors(n)
    return ", ".join(map(str, ds[:limit])) + (", …" if len(ds) > limit else "")


def problems(config: ModelConfig, layout: Layout, seq: int) -> list[str]:
    """Why a layout cannot run this model (empty: it can). One sentence each, naming the fix."""
    c, lo = config, layout
    out = []
    product = lo.tp * lo.pp * lo.dp
    if product != lo.gpus:
        out.append(f"tp {lo.tp} × pp {lo.pp} × dp {lo.dp} = {product} GPUs, not --gpus "
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
    if c.num_layers % lo.pp:
        out.append(f"pp {lo.pp} does not divide the {c.num_layers} layers; each pipeline stage "
                   f"holds the same number of blocks (pp among {_choose(c.num_layers)})")
    if lo.ep > 1 and not experts(c):
        out.append(f"--ep {lo.ep}: {c.name} has no experts (a dense model); expert parallelism "
                   f"needs a mixture-of-experts model (leave --ep at 1)")
    elif lo.ep > 1 and (lo.dp % lo.ep or experts(c) % lo.ep):
        out.append(f"--ep {lo.ep} must divide the data-parallel degree {lo.dp} and the "
                   f"{experts(c)} experts (expert-parallel groups are carved out of the "
                   f"data-parallel ones, each holding whole experts)")
    if lo.global_batch % lo.dp:
        out.append(f"global batch {lo.global_batch:,} is not divisible by dp {lo.dp}; each "
                   f"data-parallel rank takes the same number of sequences")
    elif (lo.global_batch // lo.dp) % lo.micro_batch:
        out.append(f"micro-batch {lo.micro_batch} does not divide the {lo.global_batch // lo.dp:,} "
                   f"sequences each data-parallel rank runs per step (global batch "
                   f"{lo.global_batch:,} / dp {lo.dp}); choose among "
                   f"{_choose(lo.global_batch // lo.dp)}")
    return out


def check_numbers(layout: Layout) -> None:
    """Types and ranges (before the model-specific checks)."""
    for name in ("gpus", "tp", "pp", "dp", "ep", "micro_batch", "global_batch"):
        v = getattr(layout, name)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} must be a positive integer, got {v!r}")
    if layout.gpus > 10**6:
        raise UsageError(f"--gpus must be at most 1,000,000, got {layout.gpus:,}")
    if layout.zero not in ZERO_STAGES:
        raise UsageError(f"--zero must be 0, 1, 2 or 3, got {layout.zero!r}")
    if layout.recompute not in RECOMPUTE:
        raise UsageError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {layout.recompute!r}")


def check_model(config: ModelConfig) -> None:
    """Models the multi-GPU planner does not lay out yet, refused in one line rather than
    planned wrongly: it holds every block alike (one kind of block), splits over TP only
    tensors with heads, d_ff or V, and has no expert sharding."""
    c = config
    kinds = set(c.layer_kinds)
    what = ("a mixture of experts" if c.num_experts is not None else
            "multi-head latent attention" if c.mla else
            "blocks of several kinds (local and global attention layers)" if len(kinds) > 1 else "")
    if what:
        raise UsageError(f"multi-GPU plans of {what} are not supported yet (expert and "
                         f"per-kind sharding are not modelled); plan one GPU without --gpus, "
                         f"or see the single-GPU memory and FLOPs")


def check_layout(config: ModelConfig, layout: Layout, seq: int) -> None:
    check_model(config)
    check_numbers(layout)
    found = problems(config, layout, seq)
    if found:
        raise UsageError(found[0])


def resolve(gpus: int, tp: int = 1, pp: int = 1, dp: int | None = None) -> int:
    """The data-parallel degree: given, or gpus / (tp·pp)."""
    if dp is not None:
        return dp
    if gpus % (tp * pp):
        raise UsageError(f"--gpus {gpus} is not divisible by tp {tp} × pp {pp}; give degrees "
                         f"whose product is the number of GPUs")
    return gpus // (tp * pp)
