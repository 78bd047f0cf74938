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

Expert parallelism, per MoE layer and micro-batch (GShard, Lepikhin et al. 2020 §2.2;
Megatron-LM's MoEAlltoAllTokenDispatcher; torchtitan's ExpertParallel._token_dispatch and
_token_combine; DeepSpeed-MoE's MOELayer), over the ep ranks of an expert-parallel group:
  dropless (Mixtral, DeepSeek-V3): first the E token counts per expert (torchtitan
    all-to-alls them to learn the split sizes; int64 here, as torch.bincount gives them;
    Megatron-LM all-gathers them instead), then the dispatch of the rank's b·T·k routed
    token slots (each a d_model row) and the combine that brings their outputs back;
  with a capacity factor c: the E·C rows of the dispatch buffer, C = ⌈c·b·T·k/E⌉ per
    expert, zero padding included (DeepSpeed-MoE's (E, C, d_model) `dispatched_input`);
  the backward pass moves the gradients of both the same way (two more all-to-alls).
The payload is what the rank sends, itself included; under balanced routing (each rank's
slots spread evenly over the E experts) (ep − 1)/ep of it leaves the rank, which is what
`traffic` counts. The gradients of the routed experts are reduced over the
expert-data-parallel group (the dp/ep ranks holding the same experts), the rest over dp.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.planning.parallel.memo import remembered
from accounting.ledger.records import BACKWARD, FORWARD
from accounting.planning.memory import Precision
from accounting.planning.parallel.layout import Layout, experts
from accounting.ledger.builder.moe import expert_capacity
from accounting.planning.parallel.states import States
from accounting.planning.fp8 import FSDP_FP8_ALL_GATHER_BYTES
from accounting.units import DTYPE_BYTES, FP32, INT64, MiB

AMAX_BYTES = DTYPE_BYTES[FP32]  # one weight's amax, all-reduced (torchao: a 0-dim fp32)

DATA, TENSOR, PIPELINE, EXPERT = "data parallel", "tensor parallel", "pipeline", "expert parallel"
CONTEXT = "context parallel"  # the cp ranks that split one sequence (ring attention)
EXPERT_DATA = "expert data parallel"  # the dp/ep ranks that hold the same experts
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = "all-reduce", "all-gather", "reduce-scatter"
BROADCAST, SEND, RECV, ALL_TO_ALL = "broadcast", "send", "recv", "all-to-all"
STEP = "optimizer step"  # the third phase a collective runs in (FORWARD, BACKWARD: the ledger's)
LOSS_BYTES = DTYPE_BYTES[FP32]  # the cross-entropy's statistics are fp32 (autocast runs it in fp32)

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
        sent, over = self.traffic_parts
        return Fraction(sent, over)

    @property
    def traffic_parts(self) -> tuple[int, int]:
        """traffic as (numerator, ranks): sums of many collectives stay ints until divided."""
        if self.op in (SEND, RECV):
            return (self.bytes if self.op == SEND else 0), 1
        k, _ = _RING[self.op]
        return k * (self.ranks - 1) * self.bytes, self.ranks


def tensor_parallel(layout: Layout, layers: int, stage: int, b: int, seq: int, d_model: int,
                    act_bytes: int, learned_positions: bool, norms: tuple[int, int] = (0, 0),
                    grad_bytes: int = 4, gather_bytes: int | None = None) -> list[Collective]:
    """TP collectives of one stage for one step (m micro-batches of b sequences). `norms`:
    (tensors, elements) of the stage's d_model-wide norm parameters, whose gradients are
    partial sums under sequence parallelism. `gather_bytes`: the bytes an element of the
    blocks' sequence-parallel all-gathers moves when not act_bytes (float8 TP: the block
    inputs gathered in fp8 in the forward pass, the block outputs' gradients in fp8 in the
    backward; stacks.Stack.fp8_tp_gathers)."""
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
        if gather_bytes is None or gather_bytes == act_bytes:
            add(ALL_GATHER, "block inputs (attention, MLP) and the LM head's input", FORWARD,
                2 * layers + last)
        else:  # the blocks' gathers in fp8 (1 byte), the LM head's input in act_bytes
            g, gf = b * seq * d_model * gather_bytes, f"b·T·d_model·{gather_bytes}"
            add(ALL_GATHER, "block inputs (attention, MLP), in fp8", FORWARD, 2 * layers, g, gf)
            add(ALL_GATHER, "the LM head's input", FORWARD, last)
        add(REDUCE_SCATTER, "block outputs (attention, MLP)", FORWARD, 2 * layers)
        if gather_bytes is None or gather_bytes == act_bytes:
            add(ALL_GATHER, "gradients of the block outputs", BACKWARD, 2 * layers)
        else:
            add(ALL_GATHER, "gradients of the block outputs, in fp8", BACKWARD, 2 * layers,
                b * seq * d_model * gather_bytes, f"b·T·d_model·{gather_bytes}")
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
    """Point-to-point per step: each micro-batch's output to the next stage (forward) and the
    gradient of its input to the previous one (backward), on every TP rank. With v virtual
    stages (the interleaved schedule) each of the stage's v chunks sends its output on, the
    last stage's to the first (chunk j·p + p − 1 feeds chunk (j + 1)·p), all but the model's
    last chunk: v·m sends a step instead of m (Narayanan et al. 2021, §2.2.2: "the amount of
    communication also increases by v")."""
    p, m, v = layout.pp, layout.micro_batches, layout.vpp
    if p == 1:
        return []
    x = b * seq * d_model * act_bytes
    out = []
    sends, recvs = v - (stage == p - 1), v - (stage == 0)  # chunks with a next / a previous
    f = f"{{n:,}} × b·T·d_model·{act_bytes}"
    if sends:
        n = sends * m
        out += [Collective(PIPELINE, SEND, "activations to the next stage", FORWARD, n, n * x, 2,
                           f.format(n=n)),
                Collective(PIPELINE, RECV, "gradients from the next stage", BACKWARD, n, n * x,
                           2, f.format(n=n))]
    if recvs:
        n = recvs * m
        out += [Collective(PIPELINE, RECV, "activations from the previous stage", FORWARD, n,
                           n * x, 2, f.format(n=n)),
                Collective(PIPELINE, SEND, "gradients to the previous stage", BACKWARD, n,
                           n * x, 2, f.format(n=n))]
    return out


def context_parallel(layout: Layout, layers: int, b: int, seq: int, kv_width: int,
                     act_bytes: int) -> list[Collective]:
    """Context parallelism, per step (m micro-batches of b sequences, `layers` blocks on the
    stage): each attention needs the keys and values of all T tokens, of which a rank holds
    T/cp. torch's context_parallel (torch.distributed.tensor.experimental._attention, the
    ring: cp − 1 rotations of the K and V shards, each sent on while a block of attention
    runs) and Llama 3's all-gather (Dubey et al. 2024, §3.3.2: all-gather K and V, attend
    with the local queries) move the same bytes per rank: (cp − 1)/cp of b·T·2·kv_width
    elements (kv_width = h_kv/tp·d_k) forward; backward the K and V again and their
    gradients back (a reduce-scatter; the ring rotates dK and dV home). Counted here as the
    all-gather form: payload b·T·2·kv_width, ring traffic (cp − 1)/cp of it."""
    cp, m = layout.cp, layout.micro_batches
    if cp == 1 or not layers:
        return []
    n = layers * m
    x = b * seq * 2 * kv_width * act_bytes
    f = f"{n:,} × b·T·2·(h_kv/tp)·d_k·{act_bytes}"
    return [Collective(CONTEXT, ALL_GATHER, "keys and values of the whole sequence", FORWARD, n,
                       n * x, cp, f),
            Collective(CONTEXT, ALL_GATHER, "keys and values again (not kept from the forward)",
                       BACKWARD, n, n * x, cp, f),
            Collective(CONTEXT, REDUCE_SCATTER, "gradients of the keys and values", BACKWARD, n,
                       n * x, cp, f)]


def data_parallel(layout: Layout, st: States, precision: Precision, buffer_bytes: int,
                  param_bytes: int, fp8_weights: frozenset[str] = frozenset(),
                  once_per_step: bool = False) -> list[Collective]:
    """Sharding-stage collectives of one stage's data-parallel group for one step, with
    gradient accumulation as torch does it: DDP under no_sync for all micro-batches but the
    last (one all-reduce per step), FSDP2 reducing after every micro-batch (its default).
    `param_bytes`: bytes per parameter element FSDP gathers (4, or 2 under bf16 mixed
    precision); `buffer_bytes`: the stage's buffers (the RoPE tables), which DDP broadcasts
    from rank 0 before each forward pass that will synchronize (broadcast_buffers=True).
    With ep > 1 the routed experts' part goes over the expert-data-parallel group of dp/ep
    ranks (none when ep = dp: each expert lives on one rank; FSDP2 skips the collectives of
    a one-rank mesh, FSDPParamGroup.unshard and foreach_reduce). `fp8_weights`: the
    weights FSDP2 gathers in fp8, one byte an element (Precision.fsdp_fp8_gather), each
    with an fp32 amax all-reduce per gather (torchao fsdp_utils.py). `once_per_step`: FSDP2
    under torch.distributed.pipelining's schedules with parameters kept unsharded from the
    forward to the backward (torchtitan's reshard_after_forward = not pp_enabled): each
    unit gathered once, in its first forward, and reduce-scattered once, after its last
    backward (torch/distributed/pipelining/stage.py _PipelineStageBase.
    backward_maybe_with_nosync: set_reshard_after_backward(False) and
    set_requires_gradient_sync(False) for every micro-batch, the unit's post_backward run
    once at the last)."""
    d, z, m = layout.dp, layout.sharding, layout.micro_batches
    if once_per_step and z >= 2:
        m = 1
    if d == 1:
        return []
    g = precision.grad_bytes
    e = layout.edp
    dense = st.stage_numel - st.expert_numel
    moe = bool(st.expert_numel)
    out: list[Collective] = []
    if z <= 1:
        grads = dense * g
        out.append(Collective(DATA, ALL_REDUCE, "gradients (DDP buckets; once per step, "
                              "no_sync for the other micro-batches)"
                              + (" of all but the routed experts" if moe else ""), BACKWARD,
                              ddp_buckets(grads), grads, d,
                              f"{g}·(N_stage − N_experts/ep)" if moe else f"{g}·N_stage",
                              exact_calls=False))
        if moe and e > 1:
            eg = st.expert_numel * g
            out.append(Collective(EXPERT_DATA, ALL_REDUCE, "gradients of the routed experts "
                                  "(once per step, over the dp/ep ranks holding them)", BACKWARD,
                                  ddp_buckets(eg), eg, e, f"{g}·N_experts/ep", exact_calls=False))
        if buffer_bytes:
            out.append(Collective(DATA, BROADCAST, "buffers (RoPE tables) from rank 0 before the "
                                  "synchronizing forward pass (DDP broadcast_buffers=True; none "
                                  "under no_sync)", FORWARD, 1, buffer_bytes, d, "buffer bytes"))
        if z == 1:
            mb = precision.master_bytes
            out.append(Collective(DATA, BROADCAST, "updated parameters, each from its owner "
                                  "(ZeroRedundancyOptimizer)", STEP, st.tensors - st.expert_tensors,
                                  dense * mb, d,
                                  f"{mb}·(N_stage − N_experts/ep)" if moe else f"{mb}·N_stage"))
            if moe and e > 1:
                out.append(Collective(EXPERT_DATA, BROADCAST, "updated routed experts, each "
                                      "from its owner (ZeroRedundancyOptimizer over the dp/ep "
                                      "ranks)", STEP, st.expert_tensors, st.expert_numel * mb, e,
                                      f"{mb}·N_experts/ep"))
        return out
    kinds = [("blocks", lambda u: not u.root and not u.expert),
             ("routed experts", lambda u: u.expert),
             ("root unit (embedding, final norm, LM head)", lambda u: u.root)]
    for name, member in kinds:
        units = [u for u in st.units if member(u)]
        n = units[0].group(layout) if units else 1
        if n == 1:
            continue  # no unit, or experts on a one-rank mesh (ep = dp)
        k = len(units)
        gathered = _gathered(st, name, units, n)
        group, sym = (EXPERT_DATA, "e") if name == "routed experts" else (DATA, "d")
        f8, w8 = (sum(x) for x in zip((0, 0), *(u.gathered_of(n, fp8_weights) for u in units))) \
            if fp8_weights else (0, 0)
        # the reduce-scatter: the trained tensors' gradients only (states.py FROZEN)
        ag = (gathered - f8) * param_bytes + f8 * FSDP_FP8_ALL_GATHER_BYTES
        rs = sum(u.unsharded_grads(n) for u in units) * g
        pf = f"{sym}·Σ⌈rows/{sym}⌉·cols·{param_bytes}" + (" (fp8 weights: ·1)" if f8 else "")
        passes = [(FORWARD, "")] + ([(BACKWARD, ", again")] if z == 3 and not once_per_step
                                    else [])
        for phase, again in passes:
            out.append(Collective(group, ALL_GATHER, f"parameters of the {name}{again}", phase,
                                  k * m, m * ag, n, f"{k * m:,} × {pf}"))
            if w8:  # each fp8 weight's amax over its shards, before it is cast
                out.append(Collective(group, ALL_REDUCE, f"amax of each fp8 weight of the "
                                      f"{name}{again} (torchao reduce_amax)", phase, m * w8,
                                      m * w8 * AMAX_BYTES, n, f"{m * w8:,} × 4"))
        out.append(Collective(group, REDUCE_SCATTER, f"gradients of the {name}", BACKWARD, k * m,
                              m * rs, n, f"{k * m:,} × {sym}·Σ⌈rows/{sym}⌉·cols·{g}"))
    return out


_GATHERED: dict = {}  # (id(states), kind, n) -> ((states,), elements): the search's plans share states


def _gathered(st: States, name: str, units, n: int) -> int:
    """Σ of the units' gathered (padded) elements, remembered per States object (the
    planner's cache hands the same one to the layouts that differ only in batch or SP)."""
    return remembered(_GATHERED, (id(st), name, n), (st,),
                      lambda: sum(u.unsharded_padded(n) for u in units), 4096)


DDP_FIRST_BUCKET = MiB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024
DDP_BUCKET = 25 * MiB  # bucket_cap_mb = 25 (torch multiplies by 1024 * 1024)


def ddp_buckets(grad_bytes: int) -> int:
    """About how many all-reduces DDP issues per step once it has rebuilt its buckets in
    gradient-ready order (one bucket of 1 MiB, then 25 MiB each; a bucket closes when it
    reaches its limit, so the real count depends on the tensor sizes). The first step uses
    one bucket."""
    if grad_bytes <= DDP_FIRST_BUCKET:
        return 1
    return 1 + -(-(grad_bytes - DDP_FIRST_BUCKET) // DDP_BUCKET)


COUNT_BYTES = DTYPE_BYTES[INT64]  # token counts per expert (torch.bincount), before a dropless dispatch


def expert_rows(config, tokens: int) -> int:
    """Rows one rank sends in a dispatch (and gets back in the combine) for `tokens` tokens:
    its tokens·k routed slots (dropless), or the E·C rows of the dispatch buffer under a
    capacity factor c (C = ⌈c·tokens·k/E⌉, model/moe.py and the ledger's expert_capacity)."""
    slots = tokens * config.experts_per_token
    if config.moe_capacity_factor is None:
        return slots
    return config.num_experts * expert_capacity(config.moe_capacity_factor, slots,
                                                config.num_experts)


def expert_parallel(layout: Layout, config, moe_layers: int, tokens: int, d_model: int,
                    act_bytes: int) -> list[Collective]:
    """Expert-parallel all-to-alls of one stage for one step (m micro-batches of `tokens`
    = b·T tokens; `moe_layers`: the stage's MoE blocks): see the module docstring. A dense
    model, ep = 1 or a stage without MoE blocks has none."""
    if layout.ep == 1 or not experts(config) or not moe_layers:
        return []
    n = moe_layers * layout.micro_batches
    x = expert_rows(config, tokens) * d_model * act_bytes
    dropless = config.moe_capacity_factor is None
    rows = "b·T·k" if dropless else "E·C"
    f = f"{2 * n:,} × {rows}·d_model·{act_bytes}"
    out = []
    if dropless:
        E = experts(config)
        out.append(Collective(EXPERT, ALL_TO_ALL, "token counts per expert (the dispatch's "
                              "split sizes)", FORWARD, n, n * E * COUNT_BYTES, layout.ep,
                              f"{n:,} × E·{COUNT_BYTES}"))
    out.append(Collective(EXPERT, ALL_TO_ALL, "token dispatch and combine", FORWARD, 2 * n,
                          2 * n * x, layout.ep, f))
    out.append(Collective(EXPERT, ALL_TO_ALL, "gradients of the combine and of the dispatch",
                          BACKWARD, 2 * n, 2 * n * x, layout.ep, f))
    return out


def tied_embedding(layout: Layout, table_elements: int, grad_bytes: int) -> list[Collective]:
    """With pp > 1 a tied LM head lives on the last stage as a copy of the first stage's
    table; Megatron-LM all-reduces the two gradients once per step (formula only: torch's
    pipelining has no tied weights across stages)."""
    if layout.pp == 1:
        return []
    return [Collective(PIPELINE, ALL_REDUCE, "tied embedding gradient, first ↔ last stage",
                       STEP, 1, table_elements * grad_bytes, 2, f"V/tp·d_model·{grad_bytes}")]
