"""FLOPs per GPU per step, the pipeline bubble, and a step-time estimate.

FLOPs: the ledger's forward matmul records on this GPU's stage (its L/pp blocks; the LM
head on the last stage), each with its TP-split symbols (h/tp heads, d_ff/tp, ⌈V/tp⌉ of
the vocabulary); backward = one gradient matmul per operand, the same size, so 2 × forward
(and a fused attention kernel's recomputed QKᵀ); recomputation adds the ledger's
`recomputed` matmuls (the blocks' forward, or the attention cores');
m micro-batches per step; plus AdamW's 14 FLOPs per element this rank updates and 1 per
tensor (its step counter). Sequence parallelism changes no matmul: each runs on the
gathered sequence.

Time (assumptions, printed with the plan):
  * compute at `mfu` of the datasheet peak;
  * 1F1B: m + p − 1 micro-batch slots on the critical path of the slowest stage, so the
    bubble — the share of a step a stage idles — is (p − 1)/(m + p − 1) (Narayanan et al.
    2021, §2.2);
  * what overlaps is the stack's rule (overlap.py, each read from the stack's source):
    tensor-parallel collectives, pipeline sends and expert-parallel all-to-alls (the
    experts wait for their tokens) sit on that critical path; a context-parallel ring's
    exchange only where it outlasts the micro-batch's attention; data-parallel collectives
    (the expert-data-parallel ones too) by the engine's rule: DDP's last bucket, FSDP2's
    first all-gather and last reduce-scatter, or all of them (DeepSpeed below ZeRO-3,
    Megatron-Core's defaults); without a rule (step_time's overlap None) they hide under
    the whole critical path, the old assumption;
  * each collective moves its ring traffic (comms.Collective.traffic) at the per-GPU,
    per-direction bandwidth of the slowest link its group spans: NVLink inside a node,
    the network between nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from accounting.ledger.records import EXECUTED
from accounting.planning.compute import ADAMW_OPS, PARAMETER, TENSOR
from accounting.planning.gpus import Interconnect
from accounting.runtime.errors import UsageError
from accounting.ledger.records import BACKWARD
from accounting.planning.parallel import overlap as OV
from accounting.planning.parallel.comms import (ALL_GATHER, CONTEXT, DATA, EXPERT, EXPERT_DATA,
                                                PIPELINE, REDUCE_SCATTER, STEP,
                                                TENSOR as TP_GROUP, Collective)
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.shards import Split
from accounting.planning.parallel.states import States

ATTENTION_SHARE = "attention"  # timing/ops.py's ATTENTION category (the kernels' shares)
GEMM_SHARE = "GEMMs"  # timing/ops.py's GEMMS category
ADAMW_PER_ELEMENT = sum(o.flops_per_element for o in ADAMW_OPS if o.per == PARAMETER)
ADAMW_PER_TENSOR = sum(o.flops_per_element for o in ADAMW_OPS if o.per == TENSOR)


@dataclass(frozen=True)
class StageFlops:
    stage: int
    forward: int  # per micro-batch, matmuls
    backward: int
    recompute: int
    micro_batches: int
    adamw: int  # per step

    @property
    def per_micro_batch(self) -> int:
        return self.forward + self.backward + self.recompute

    @property
    def total(self) -> int:
        return self.micro_batches * self.per_micro_batch + self.adamw

    @property
    def model_flops(self) -> int:
        """What MFU counts: without recomputation."""
        return self.micro_batches * (self.forward + self.backward) + self.adamw


def stage_flops(sp: Split, layout: Layout, stage: int, kinds: tuple[tuple[str, int], ...],
                seq: int, st: States, tp_rank: int = 0, counting: str = EXECUTED) -> StageFlops:
    """`sp` is the split of the run's ledger (its recomputation: `recomputed` holds the
    forward matmuls the backward pass runs again); `kinds` the stage's blocks of each kind
    (Split.kinds). Expert parallelism moves the experts' matmuls between ranks without
    changing their sum; under balanced routing each rank runs B·T·k expert rows (E·C with
    a capacity factor), as one GPU does."""
    fwd, bwd, again = _matmuls(sp, layout.tp, tp_rank, seq, layout.micro_batch, kinds,
                               stage == layout.pp - 1, counting)
    if layout.cp > 1:
        # each context-parallel rank runs T/cp tokens through every matmul and, the chunks
        # load-balanced, 1/cp of the attention core's (query, key) pairs: exactly 1/cp
        # (2·cp divides T, so cp divides T, T², and the causal pairs (T/2)·(T + 1))
        fwd, bwd, again = (x // layout.cp for x in (fwd, bwd, again))
    adamw = ADAMW_PER_ELEMENT * st.moments + ADAMW_PER_TENSOR * st.owned_tensors
    return StageFlops(stage, fwd, bwd, again, layout.micro_batches, adamw)


@lru_cache(maxsize=4096)
def _matmuls(sp: Split, tp: int, tp_rank: int, seq: int, b: int,
             kinds: tuple[tuple[str, int], ...], last: bool,
             counting: str = EXECUTED) -> tuple[int, int, int]:
    """(forward, backward, recomputed) matmul FLOPs of one micro-batch on a stage, counted
    as executed (full T×T attention) or useful (the causal pairs: what a causal flash
    kernel runs; --mfu-convention causal)."""
    v = sp.tp_values(sp.values(seq, b), tp, tp_rank)
    count = dict(kinds)
    # a LoRA plan's frozen linears: autograd computes no weight gradient for them
    # (planning/finetune.py flops_exprs, the same rule)
    frozen = set()
    if sp.ledger.adapters is not None:
        trained = {(p.per_layer, p.module) for p in sp.ledger.params if not p.frozen}
        frozen = {r for r in sp.ledger.forward
                  if r.grads == ("dX", "dW") and (r.per_layer, r.module) not in trained}

    def on_stage(records) -> int:
        return sum((count.get(r.repeat, 0) if r.per_layer else 1) * r.flops(v, counting)
                   for r in records if r.per_layer or last)
    return (on_stage(sp.ledger.forward),
            on_stage(g for r in sp.ledger.forward for g in r.gradients()
                     if not (r in frozen and g.name.endswith(" dW"))),
            on_stage(sp.ledger.recomputed))


def slots(layout: Layout) -> Fraction:
    """Micro-batch slots on the critical path: m + p − 1 under 1F1B; with v virtual stages
    each slot of the fill and drain is a chunk's, 1/v of the stage's work: m + (p − 1)/v
    (Narayanan et al. 2021, §2.2.2: bubble time fraction (p − 1)/(v·m))."""
    p, m, v = layout.pp, layout.micro_batches, layout.vpp
    return m + Fraction(p - 1, v)


def bubble(layout: Layout) -> Fraction:
    """The share of a step each stage idles: (p − 1)/(m + p − 1) under 1F1B,
    (p − 1)/(v·m + p − 1) interleaved (the paper's (p − 1)/(v·m) is the idle time over the
    ideal time, not over the step)."""
    return (slots(layout) - layout.micro_batches) / slots(layout)


def group_link(layout: Layout, group: str, net: Interconnect) -> tuple[Fraction, str]:
    """The bandwidth a group's collectives run at: NVLink when the whole group sits in one
    node (ranks: TP fastest, then DP — its EP groups ep consecutive DP ranks —, then PP),
    else the network."""
    tc = layout.tp * layout.cp  # Megatron-LM's rank order tp-cp-(ep)-dp-pp
    span = {TP_GROUP: layout.tp, CONTEXT: tc, DATA: tc * layout.dp, EXPERT: layout.tp * layout.ep,
            EXPERT_DATA: layout.tp * layout.dp, PIPELINE: tc * layout.dp * layout.pp}[group]
    g = net.gpus_per_node
    if span <= g and g % span == 0 or span == 1:
        return net.nvlink, "NVLink"
    if net.network is None:
        raise UsageError(f"the {group} group spans {span} GPUs, beyond one {net.name} of {g}, "
                         f"and the GPU table lists no cluster network for it: give --network-gbs")
    return net.network, "network"


def group_links(layout: Layout, net: Interconnect | None) -> dict:
    """The link of each group the layout has (group_link; none without `net`)."""
    groups = ((TP_GROUP, DATA, PIPELINE) + ((EXPERT, EXPERT_DATA) if layout.ep > 1 else ())
              + ((CONTEXT,) if layout.cp > 1 else ()))
    return {g: group_link(layout, g, net) for g in groups} if net else {}


@dataclass(frozen=True)
class StepTime:
    compute_per_micro_batch: Fraction  # seconds, slowest stage
    tensor_parallel_per_micro_batch: Fraction
    pipeline_per_micro_batch: Fraction
    slots: Fraction  # m + p − 1, or m + (p − 1)/v interleaved
    optimizer: Fraction
    data_parallel: Fraction  # all of the step's DP communication
    links: dict  # group -> (bandwidth, "NVLink"|"network")
    expert_parallel_per_micro_batch: Fraction = Fraction(0)  # all-to-alls, slowest stage
    context_parallel_per_micro_batch: Fraction = Fraction(0)  # K/V exchange, slowest stage
    # issue 39: what the stack's overlap rules (overlap.py) leave exposed; None: the rules
    # were not applied (DP overlapped with the whole critical path, CP exposed)
    exposed_data_parallel_rule: Fraction | None = None
    context_parallel_exposed_per_micro_batch: Fraction | None = None
    micro_batches: int = 1
    shares: tuple = ()  # (category, share of the compute): the kernels' breakdown
    rules: tuple = ()  # (group, rule) applied
    # async TP (overlap.py ASYNC_TP): the TP seconds a micro-batch leaves exposed; None: all
    tensor_parallel_exposed_per_micro_batch: Fraction | None = None

    @property
    def exposed_tensor_parallel(self) -> Fraction:
        x = self.tensor_parallel_exposed_per_micro_batch
        return self.tensor_parallel_per_micro_batch if x is None else x

    @property
    def exposed_context_parallel(self) -> Fraction:
        x = self.context_parallel_exposed_per_micro_batch
        return self.context_parallel_per_micro_batch if x is None else x

    @property
    def pipeline_path(self) -> Fraction:
        """The critical path of the pipeline schedule: each slot a micro-batch's compute and
        its exposed communication."""
        return self.slots * (self.compute_per_micro_batch + self.exposed_tensor_parallel
                             + self.pipeline_per_micro_batch + self.expert_parallel_per_micro_batch
                             + self.exposed_context_parallel)

    @property
    def seconds(self) -> Fraction:
        """The critical path, the data-parallel communication it does not hide, the update."""
        return self.pipeline_path + self.exposed_data_parallel + self.optimizer

    @property
    def no_overlap(self) -> Fraction:
        return (self.slots * (self.compute_per_micro_batch + self.tensor_parallel_per_micro_batch
                              + self.pipeline_per_micro_batch
                              + self.expert_parallel_per_micro_batch
                              + self.context_parallel_per_micro_batch)
                + self.data_parallel + self.optimizer)

    @property
    def exposed_data_parallel(self) -> Fraction:
        if self.exposed_data_parallel_rule is not None:
            return self.exposed_data_parallel_rule
        return max(Fraction(0), self.data_parallel - self.pipeline_path)

    @property
    def exposed_communication(self) -> Fraction:
        """Every collective's time on the critical path (TP, pipeline sends, EP, CP's
        unhidden exchange, in each slot; DP's unhidden part once)."""
        return (self.slots * (self.exposed_tensor_parallel + self.pipeline_per_micro_batch
                              + self.expert_parallel_per_micro_batch
                              + self.exposed_context_parallel)
                + self.exposed_data_parallel)

    @property
    def bubble_seconds(self) -> Fraction:
        return (self.slots - self.micro_batches) * self.compute_per_micro_batch

    def breakdown(self) -> dict[str, Fraction]:
        """The step, summed: the m micro-batches' compute (split by the kernels' categories
        where they timed it, else one "compute"), exposed communication, bubble, optimizer."""
        compute = self.micro_batches * self.compute_per_micro_batch
        out = ({c: compute * s for c, s in self.shares} if self.shares else {"compute": compute})
        out.update({"exposed communication": self.exposed_communication,
                    "bubble": self.bubble_seconds, "optimizer": self.optimizer})
        return out


def _data_parallel_exposed(rule: str, timed: list, m: int, forward: Fraction,
                           backward: Fraction) -> Fraction:
    """The data-parallel seconds of one stage's step that `rule` (overlap.py) leaves on the
    critical path; `timed` its (collective, seconds) pairs, `forward` and `backward` one
    micro-batch's compute seconds of each pass."""
    step = sum((t for c, t in timed if c.phase == STEP), Fraction(0))
    rest = [(c, t) for c, t in timed if c.phase != STEP]
    if rule == OV.EXPOSED or not rest:
        return step + sum((t for _, t in rest), Fraction(0))
    fwd = sum((t for c, t in rest if c.phase != BACKWARD), Fraction(0))
    bwd = sum((t for c, t in rest if c.phase == BACKWARD), Fraction(0))
    if rule == OV.BUCKETS:  # the last micro-batch's backward hides all but the last bucket
        tail = max((t / c.calls for c, t in rest if c.phase == BACKWARD), default=Fraction(0))
        return step + fwd + (max(tail, bwd - backward) if bwd else Fraction(0))
    # PREFETCH: the first all-gather and the last reduce-scatter exposed each time they run
    # (every micro-batch, or once a step where the unit stays gathered: comms.data_parallel's
    # once_per_step), the rest hidden under its pass's compute where shorter than it
    gathers = [(c, t) for c, t in rest if c.phase != BACKWARD and c.op == ALL_GATHER]
    scatters = [(c, t) for c, t in rest if c.op == REDUCE_SCATTER]
    first = max(gathers, key=lambda ct: ct[1] / ct[0].calls)[1] if gathers else Fraction(0)
    last = max(scatters, key=lambda ct: ct[1] / ct[0].calls)[1] if scatters else Fraction(0)
    return (step + first + last + max(Fraction(0), fwd - first - m * forward)
            + max(Fraction(0), bwd - last - m * backward))


def step_time(layout: Layout, flops: list[StageFlops], comms: list[list[Collective]],
              peak: Fraction, mfu: Fraction, net: Interconnect | None,
              timer=None, overlap: OV.Overlap | None = None, shares: tuple = (),
              async_tp: bool = False) -> StepTime:
    """`flops` and `comms` per stage (every stage, or the first and last). `timer` (issue
    39, planning/kernel_time.py collective_timer): a collective inside a node timed from NCCL's
    measured table, where it has one; the others by their ring traffic at the link.
    `overlap`: the stack's rules (overlap.py), None for the old assumption (DP hidden under
    the whole critical path, the rest exposed); `shares`: each kernel category's share of
    the compute (kernel_time.kernel_rate), the attention's hiding a CP ring's exchange and
    the GEMMs' an async TP's collectives (`async_tp`: the run's --async-tp, overlap.ASYNC_TP)."""
    rate = peak * mfu
    m = layout.micro_batches
    links = group_links(layout, net)
    attention = dict(shares).get(ATTENTION_SHARE)
    gemms = dict(shares).get(GEMM_SHARE)
    dp_rule = overlap.data_rule(layout.sharding) if overlap is not None else None

    def seconds_of(c: Collective) -> Fraction:
        if c.group in links and links[c.group][1] == "NVLink" and timer is not None:
            t = timer(c)
            if t is not None:
                return t
        sent, over = c.traffic_parts
        bw = links[c.group][0]  # (sent/over)/bw as one fraction: one reduction, not two
        return Fraction(sent * bw.denominator, over * bw.numerator)
    per_stage = []
    for f, collectives in zip(flops, comms):
        timed = [(c, seconds_of(c)) for c in collectives if c.group in links]
        total: dict[str, Fraction] = {}
        for c, t in timed:
            total[c.group] = total.get(c.group, Fraction(0)) + t
        compute = Fraction(f.per_micro_batch) / rate
        cp = total.get(CONTEXT, Fraction(0)) / m
        cp_exposed = None
        if overlap is not None:
            cp_exposed = cp
            if overlap.context_parallel == OV.RING and attention is not None:
                cp_exposed = max(Fraction(0), cp - compute * attention)
        dp = total.get(DATA, Fraction(0)) + total.get(EXPERT_DATA, Fraction(0))
        dp_exposed = None
        if dp_rule is not None:
            fwd = compute * f.forward / f.per_micro_batch if f.per_micro_batch else Fraction(0)
            dp_exposed = _data_parallel_exposed(
                dp_rule, [(c, t) for c, t in timed if c.group in (DATA, EXPERT_DATA)], m, fwd,
                compute - fwd)
        tp = total.get(TP_GROUP, Fraction(0)) / m
        tp_exposed = None
        if overlap is not None and async_tp and layout.tp > 1:
            hidden = compute * gemms * Fraction(layout.tp - 1, layout.tp) if gemms else 0
            tp_exposed = max(Fraction(0), tp - hidden)
        per_stage.append((compute, tp,
                          total.get(PIPELINE, Fraction(0)) / m, Fraction(f.adamw) / rate, dp,
                          total.get(EXPERT, Fraction(0)) / m, cp, cp_exposed, dp_exposed,
                          tp_exposed))
    worst = max(per_stage, key=lambda s: s[0] + (s[1] if s[9] is None else s[9]) + s[2] + s[5]
                + (s[6] if s[7] is None else s[7]))
    rules = ()
    if overlap is not None:
        rules = tuple((g, r) for g, r in overlap.describe(layout.sharding, async_tp).items()
                      if g in links or g == "pipeline" and layout.pp > 1)
    exposed_dp = (None if dp_rule is None
                  else max(s[8] for s in per_stage))
    return StepTime(worst[0], worst[1], worst[2], slots(layout),
                    max(s[3] for s in per_stage), max(s[4] for s in per_stage), links, worst[5],
                    worst[6], exposed_dp, worst[7], m, tuple(shares), rules, worst[9])


def megatron_seconds(tokens: int, params: int, gpus: int, flops_per_gpu: Fraction,
                     recompute: bool = True) -> Fraction:
    """Narayanan et al. 2021 (Megatron-LM), §5.1: end-to-end training time ≈ 8·T·P/(n·X)
    (their eq. (4), with activation recomputation) for T tokens, P parameters, n GPUs each
    achieving X FLOP/s: 2·P FLOPs per token forward, 4·P backward, 2·P more for the forward
    recomputed. Without recomputation the paper's text gives 6·T·P/(n·X); that is not eq.
    (4). X is a hardware rate (recomputed FLOPs counted): an HFU times the peak."""
    k = 8 if recompute else 6
    return Fraction(k * tokens * params) / (gpus * Fraction(flops_per_gpu))
