"""Communication per GPU per step, collective by collective, with the formula of each.

Every entry is what the torch engine of the layout issues on one GPU (pipeline stage s,
tensor-parallel rank 0, data-parallel rank 0) during one optimizer step of m micro-batches;
accounting/distcheck records the same collectives on torch.distributed and compares
calls and bytes. `bytes` is the payload: the full buffer of an all-reduce or broadcast,
the output of an all-gather, the input of a reduce-scatter, one point-to-point message.
What a rank sends over the wire with ring algorithms (the NCCL tests' "bus bandwidth"
convention) is `traffic`: 2(n−1)/n of the payload for an all-reduce, (n−1)/n for an
all-gather, a reduce-scatter, a broadcast or an all-to-all, all of it for a send.

Tensor parallelism, per micro-batch (Megatron-LM's f/g operators, Shoeybi et al. 2019 §3;
Korthikanti et al. 2022 §4.2.2 with sequence parallelism), on activations of B·T·d_model:
  without SP: each block all-reduces its attention and MLP outputs (forward) and the
    gradients of their inputs (backward); the vocab-parallel embedding all-reduces its
    output, the LM head the gradient of its input;
  with SP: each all-reduce becomes a reduce-scatter plus an all-gather (same bytes moved);
  the vocab-parallel cross-entropy all-reduces three B·T vectors (row max, sum of
  exponentials, target logit) in fp32.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.planning.memory import Precision
from accounting.planning.parallel.layout import Layout, experts
from accounting.planning.parallel.states import States

DATA, TENSOR, PIPELINE, EXPERT = "data parallel", "tensor parallel", "pipeline", "expert parallel"
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = "all-reduce", "all-gather", "reduce-scatter"
BROADCAST, SEND, RECV, ALL_TO_ALL = "broadcast", "send", "recv", "all-to-all"
FORWARD, BACKWARD, STEP = "forward", "backward", "optimizer step"
LOSS_BYTES = 4  # the cross-entropy's statistics are fp32 (autocast runs it in fp32)

_RING = {ALL_REDUCE: (2, 1), ALL_GATHER: (1, 1), REDUCE_SCATTER: (1, 1), BROADCAST: (1, 1),
         ALL_TO_ALL: (1, 1)}


@dataclass(frozen=True)
class Collective:
    group: str
    op: str
    what: str
    phase: str
    calls: int  # per step
    bytes: int  # payload, all calls together
    ranks: int  # group size
    formula: str  # the payload, in symbols
    exact_calls: bool = True  # False: the engine decides the count (DDP's buckets)

    @property
    def traffic(self) -> Fraction:
        """Bytes this GPU sends, ring algorithms."""
        if self.op in (SEND, RECV):
            return Fraction(self.bytes if self.op == SEND else 0)
        k, _ = _RING[self.op]
        return Fraction(k * (self.ranks - 1) * self.bytes, self.ranks)


def tensor_parallel(layout: Layout, layers: int, stage: int, b: int, seq: int, d_model: int,
                    act_bytes: int, learned_positions: bool, norms: tuple[int, int] = (0, 0),
                    grad_bytes: int = 4) -> list[Collective]:
    """TP collectives of one stage for one step (m micro-batches of b sequences). `norms`:
    (tensors, elements) of the stage's d_model-wide norm parameters, whose gradients are
    partial sums under sequence parallelism."""
    t, m = layout.tp, layout.micro_batches
    if t == 1:
        return []
    x = b * seq * d_model * act_bytes
    f = f"b·T·d_model·{act_bytes}"
    first, last = stage == 0, stage == layout.pp - 1
    out: list[Collective] = []

    def add(op, what, phase, per_mb, payload=x, formula=f):
        if per_mb:
            out.append(Collective(TENSOR, op, what, phase, per_mb * m, per_mb * m * payload, t,
                                  f"{per_mb * m:,} × {formula}"))
    if not layout.sp:
        add(ALL_REDUCE, "block outputs (attention, MLP)", FORWARD, 2 * layers)
        add(ALL_REDUCE, "gradients of the block inputs (attention, MLP)", BACKWARD, 2 * layers)
        if first:
            add(ALL_REDUCE, "vocab-parallel embedding output", FORWARD, 1)
        if last:
            add(ALL_REDUCE, "gradient of the LM head's input", BACKWARD, 1)
    else:
        add(ALL_GATHER, "block inputs (attention, MLP) and the LM head's input", FORWARD,
            2 * layers + last)
        add(REDUCE_SCATTER, "block outputs (attention, MLP)", FORWARD, 2 * layers)
        add(ALL_GATHER, "gradients of the block outputs", BACKWARD, 2 * layers)
        add(REDUCE_SCATTER, "gradients of the block inputs and of the LM head's input",
            BACKWARD, 2 * layers + last)
        if first and learned_positions:  # positions are added to the whole sequence first
            add(ALL_REDUCE, "vocab-parallel embedding output (then split along T, after "
                            "adding positions)", FORWARD, 1)
            add(ALL_GATHER, "gradient of the first block's input", BACKWARD, 1)
        elif first:
            add(REDUCE_SCATTER, "vocab-parallel embedding output", FORWARD, 1)
            add(ALL_GATHER, "gradient of the embedding output", BACKWARD, 1)
    if last:
        add(ALL_REDUCE, "vocab-parallel cross-entropy (row max, sum of exponentials, target "
                        "logit)", FORWARD, 3, b * seq * LOSS_BYTES, f"b·T·{LOSS_BYTES}")
    n, elements = norms
    if layout.sp and n:
        # SequenceParallel's replicated norm weights get partial gradients (each rank saw T/tp
        # tokens). FSDP2 all-reduces each over the TP group when it takes the gradient after
        # every backward pass; without FSDP, DTensor reduces them lazily, once per use: AdamW's
        # foreach step reads each gradient three times (lerp_ for m, addcmul_(g, g) for v).
        if layout.sharding >= 2:
            out.append(Collective(TENSOR, ALL_REDUCE, "partial gradients of the sequence-parallel "
                                  "norms (FSDP2, after each backward)", BACKWARD, n * m,
                                  m * elements * grad_bytes, t,
                                  f"{m:,} × norm parameters·{grad_bytes}"))
        else:
            out.append(Collective(TENSOR, ALL_REDUCE, "partial gradients of the sequence-parallel "
                                  "norms, at each of AdamW's 3 reads", STEP, 3 * n,
                                  3 * elements * grad_bytes, t, f"3 × norm parameters·{grad_bytes}"))
    return out


def pipeline(layout: Layout, stage: int, b: int, seq: int, d_model: int,
             act_bytes: int) -> list[Collective]:
    """1F1B point-to-point: each micro-batch's output to the next stage (forward) and the
    gradient of its input to the previous one (backward), on every TP rank."""
    p, m = layout.pp, layout.micro_batches
    if p == 1:
        return []
    x = b * seq * d_model * act_bytes
    f = f"{m:,} × b·T·d_model·{act_bytes}"
    out = []
    if stage < p - 1:
        out += [Collective(PIPELINE, SEND, "activations to the next stage", FORWARD, m, m * x, 2, f),
                Collective(PIPELINE, RECV, "gradients from the next stage", BACKWARD, m, m * x, 2, f)]
    if stage > 0:
        out += [Collective(PIPELINE, RECV, "activations from the previous stage", FORWARD, m,
                           m * x, 2, f),
                Collective(PIPELINE, SEND, "gradients to the previous stage", BACKWARD, m,
                           m * x, 2, f)]
    return out


def data_parallel(layout: Layout, st: States, precision: Precision, buffer_bytes: int,
                  param_bytes: int) -> list[Collective]:
    """Sharding-stage collectives of one stage's data-parallel group for one step, with
    gradient accumulation as torch does it: DDP under no_sync for all micro-batches but the
    last (one all-reduce per step), FSDP2 reducing after every micro-batch (its default).
    `param_bytes`: bytes per parameter element FSDP gathers (4, or 2 under bf16 mixed
    precision); `buffer_bytes`: the stage's buffers (the RoPE tables), which DDP broadcasts
    from rank 0 before each forward pass that will synchronize (broadcast_buffers=True)."""
    d, z, m = layout.dp, layout.sharding, layout.micro_batches
    if d == 1:
        return []
    g = precision.grad_bytes
    out: list[Collective] = []
    if z <= 1:
        grads = st.stage_numel * g
        out.append(Collective(DATA, ALL_REDUCE, "gradients (DDP buckets; once per step, "
                              "no_sync for the other micro-batches)", BACKWARD,
                              ddp_buckets(grads), grads, d, f"{g}·N_stage", exact_calls=False))
        if buffer_bytes:
            out.append(Collective(DATA, BROADCAST, "buffers (RoPE tables) from rank 0 before the "
                                  "synchronizing forward pass (DDP broadcast_buffers=True; none "
                                  "under no_sync)", FORWARD, 1, buffer_bytes, d, "buffer bytes"))
        if z == 1:
            out.append(Collective(DATA, BROADCAST, "updated parameters, each from its owner "
                                  "(ZeroRedundancyOptimizer)", STEP, st.tensors,
                                  st.stage_numel * precision.master_bytes, d,
                                  f"{precision.master_bytes}·N_stage"))
        return out
    by_kind = {root: [u for u in st.units if u.root == root] for root in (True, False)}
    for unit in st.units:
        same = by_kind[unit.root]  # (once: a list per unit made the search quadratic in L)
        if not unit.root and unit is not same[0]:
            continue  # the blocks are identical: one entry for all of them
        gathered = unit.unsharded_padded(d)
        name = "root unit (embedding, final norm, LM head)" if unit.root else "blocks"
        k = len(same)
        ag = gathered * param_bytes
        rs = gathered * g
        pf = f"d·Σ⌈rows/d⌉·cols·{param_bytes}"
        out.append(Collective(DATA, ALL_GATHER, f"parameters of the {name}", FORWARD, k * m,
                              k * m * ag, d, f"{k * m:,} × {pf}"))
        if z == 3:
            out.append(Collective(DATA, ALL_GATHER, f"parameters of the {name}, again",
                                  BACKWARD, k * m, k * m * ag, d, f"{k * m:,} × {pf}"))
        out.append(Collective(DATA, REDUCE_SCATTER, f"gradients of the {name}", BACKWARD, k * m,
                              k * m * rs, d, f"{k * m:,} × d·Σ⌈rows/d⌉·cols·{g}"))
    return out


DDP_FIRST_BUCKET = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET = 25 * 1024 * 1024  # bucket_cap_mb = 25


def ddp_buckets(grad_bytes: int) -> int:
    """About how many all-reduces DDP issues per step once it has rebuilt its buckets in
    gradient-ready order (one bucket of 1 MiB, then 25 MiB each; a bucket closes when it
    reaches its limit, so the real count depends on the tensor sizes). The first step uses
    one bucket."""
    if grad_bytes <= DDP_FIRST_BUCKET:
        return 1
    return 1 + -(-(grad_bytes - DDP_FIRST_BUCKET) // DDP_BUCKET)


def expert_all_to_all_bytes(tokens: int, top_k: int, d_model: int, act_bytes: int) -> int:
    """One all-to-all of a mixture-of-experts layer: every token's hidden state sent to each
    of its top-k experts (dispatch), or brought back (combine)."""
    return tokens * top_k * d_model * act_bytes


def expert_parallel(layout: Layout, config, layers: int, tokens: int, d_model: int,
                    act_bytes: int) -> list[Collective]:
    """Expert parallelism (Lepikhin et al. 2020, GShard): per MoE layer and micro-batch, a
    dispatch and a combine all-to-all in the forward pass and the same two in the backward,
    over the ep ranks that hold the experts. A dense model has none. (Formula only: the
    planner refuses MoE models in layout.check_model until expert sharding of the
    parameters is modelled.)"""
    if layout.ep == 1 or not experts(config):
        return []
    m = layout.micro_batches
    x = expert_all_to_all_bytes(tokens, config.experts_per_token, d_model, act_bytes)
    f = f"{2 * layers * m:,} × tokens·k·d_model·{act_bytes}"
    return [Collective(EXPERT, ALL_TO_ALL, "token dispatch and combine", phase, 2 * layers * m,
                       2 * layers * m * x, layout.ep, f) for phase in (FORWARD, BACKWARD)]


def tied_embedding(layout: Layout, table_elements: int, grad_bytes: int) -> list[Collective]:
    """With pp > 1 a tied LM head lives on the last stage as a copy of the first stage's
    table; Megatron-LM all-reduces the two gradients once per step (formula only: torch's
    pipelining has no tied weights across stages)."""
    if layout.pp == 1:
        return []
    return [Collective(PIPELINE, ALL_REDUCE, "tied embedding gradient, first ↔ last stage",
                       STEP, 1, table_elements * grad_bytes, 2, f"V/tp·d_model·{grad_bytes}")]
