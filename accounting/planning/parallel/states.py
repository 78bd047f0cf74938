"""Model states per GPU: parameters, gradients and AdamW's moments, by sharding stage.

Exact, tensor by tensor, as the torch engine of each stage lays them out
(layout.ZERO_STAGES; checked by accounting/distcheck):

  * stage 0 (DDP): every tensor of this GPU's pipeline stage, TP-split;
  * stage 1 (ZeroRedundancyOptimizer): AdamW's moments only for the whole tensors this rank
    owns; torch assigns tensors largest first, each to the rank with the fewest elements so
    far (the first such rank on a tie);
  * stages 2 and 3 (FSDP2): each tensor's first dimension split by torch.chunk over the
    data-parallel ranks. A rank stores ⌈rows/d⌉ rows of each parameter (FSDP2 pads every
    shard to that size), its gradients in one padded buffer per unit, and AdamW moments of
    its unpadded rows (rank 0 holds the full ⌈rows/d⌉ and so the most).

Expert parallelism (layout.py): a routed expert's matrix holds E/ep whole experts on each
rank, and its data parallelism is the expert-data-parallel group of dp/ep ranks, not the
dp ranks: Megatron-LM reduces expert gradients and shards their optimizer state over
that group (expert_data_parallel_size = world / (etp·ep·pp)); torchtitan fully_shards the
routed experts as their own FSDP unit on that group's mesh ("efsdp"), on dim 1 when
efsdp·ep > E (layout.expert_shard_dim); DeepSpeed-MoE builds the same expert-data-parallel
groups (groups._create_expert_and_data_parallel). The router and the shared experts are
dense weights: replicated over EP, sharded over all dp ranks with the rest of their block.

FROZEN: a tensor the ledger marks frozen (R.Param.frozen: trace.py's untrained() regions
and requires_grad=False, the one-GPU plan's rule, training_state.tensors) gets no gradient
and no optimizer state on any stack or layout, its parameter kept: DeepSeek-V3.2's indexer
under transformers (DeepseekV32Indexer.forward is @torch.no_grad(), transformers 5.23
modeling_deepseek_v32.py, so its weights' .grad stays None), ERNIE 4.5's router statics, a
LoRA plan's base. torch.optim.AdamW skips a parameter whose .grad is None (no state, no
step counter: torch/optim/adam.py Adam._init_group, which AdamW inherits: `if p.grad is not None`); FSDP2 reduce-scatters only the parameters
whose unsharded .grad is set (torch 2.13 _fsdp_param_group.py FSDPParamGroup.post_backward:
fsdp_params_with_grad), so no sharded gradient exists for the others;
ZeroRedundancyOptimizer partitions every parameter it is given (the indexer's require grad)
and keeps state for those stepped. DDP's buckets stay sized by every parameter that
requires grad (buffers.py; the indexer's, never ready, need find_unused_parameters=True).

The ZeRO paper's formula (Rajbhandari et al. 2020, §5.1, Figure 1) is `zero_paper_bytes`
(accounting/literature/memory_formulas.py):
(2 + 2 + K)·Ψ per GPU for plain data parallelism, (2 + 2 + K/N_d)·Ψ with the optimizer
state sharded, (2 + (2 + K)/N_d)·Ψ with gradients too, (2 + 2 + K)·Ψ/N_d with parameters
too, for mixed-precision Adam (K = 12: fp32 parameter copy, momentum and variance).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import cached_property, lru_cache
from math import prod

from accounting.planning.parallel.memo import remembered
from accounting.planning.memory import Precision
from accounting.planning.optimizers import HIDDEN_MATRIX, get_optimizer
from accounting.planning.parallel.layout import Layout, expert_shard_dim, stage_layers
from accounting.planning.parallel.shards import BLOCK, FIRST, LAST, Split, Tensor, chunk

ADAMW_MOMENTS = 2


@dataclass(frozen=True)
class Local:
    """One parameter tensor on one GPU (after the TP and EP splits), and its FSDP shard."""
    tensor: Tensor
    layer: int | None  # None: the same in every block
    sizes: tuple[int, ...]  # TP- (and EP-) local dimensions
    dim: int = 0  # the dimension FSDP2 shards (1: torchtitan's routed experts, expert_shard_dim)

    # cached (frozen fields): a stage's blocks of one kind share these objects, and a
    # 10,000-layer --search asked each for its numel 26 million times (issue 32)
    @cached_property
    def numel(self) -> int:
        return prod(self.sizes)

    @cached_property
    def rest(self) -> int:
        """Elements per index of the sharded dimension."""
        return prod(self.sizes) // self.sizes[self.dim]

    @property
    def trained(self) -> bool:
        """Given a gradient by the backward pass (FROZEN: not a frozen tensor)."""
        return not self.tensor.frozen

    def padded(self, d: int) -> int:
        """Elements of FSDP's padded shard: ⌈rows/d⌉ rows (of the sharded dimension)."""
        return -(-self.sizes[self.dim] // d) * self.rest

    def shard(self, d: int, rank: int) -> int:
        """Elements of this data-parallel rank's unpadded shard."""
        return chunk(self.sizes[self.dim], d, rank) * self.rest


@dataclass(frozen=True)
class Unit:
    """An FSDP unit (one per block, one per MoE block's routed experts under expert
    parallelism, and one root for the rest of a stage's tensors)."""
    name: str
    tensors: tuple[Local, ...]
    root: bool
    expert: bool = False  # the routed experts of one block: sharded over dp/ep ranks
    layer: int | None = None  # the block it belongs to (None: the root)

    def padded(self, d: int) -> int:
        return _padded(self.tensors, d, False)

    def unsharded_padded(self, d: int) -> int:
        """Elements FSDP all-gathers: d padded shards."""
        return d * self.padded(d)

    def unsharded_grads(self, d: int) -> int:
        """Elements of the unit's unsharded gradients FSDP2 reduce-scatters: d padded shards
        of its trained tensors only (FROZEN: foreach_reduce takes the parameters whose
        unsharded .grad is set)."""
        return d * _padded(self.tensors, d, True)

    def gathered_of(self, d: int, names: frozenset[str]) -> tuple[int, int]:
        """(elements, tensors) of the named tensors in the all-gather (the fp8 weights)."""
        mine = [t for t in self.tensors if t.tensor.name in names]
        return d * sum(t.padded(d) for t in mine), len(mine)

    def group(self, layout: Layout) -> int:
        """The data-parallel degree its tensors are replicated (or sharded) over."""
        return layout.edp if self.expert else layout.dp


_PADDED: dict = {}  # (id(tensors), d, trained only) -> ((tensors,), Σ padded shards)


def _padded(tensors: tuple[Local, ...], d: int, trained_only: bool) -> int:
    """Σ of the tensors' padded shards (the trained ones only, or all), remembered per tuple
    object: a stage's blocks of a kind share one (stage_tensors), and the buffers, the
    collectives and the side streams ask each block's unit at the same d."""
    return remembered(_PADDED, (id(tensors), d, trained_only), (tensors,),
                      lambda: sum(t.padded(d) for t in tensors if t.trained or not trained_only),
                      65536)


def stage_tensors(sp: Split, values: dict[str, int], layout: Layout, stage: int,
                  tp_rank: int = 0) -> list[Unit]:
    """The parameter tensors pipeline stage `stage` holds, grouped in FSDP units: its blocks
    (L/pp each, each with its kind's tensors; with ep > 1 an MoE block's routed experts form
    a unit of their own, after the block's), then a root unit (the embedding tables on the
    first stage; the final norm and the LM head on the last; with pp > 1 and a tied head,
    the last stage holds its own copy of the table, as Megatron-LM does)."""
    tied = dict(sp.ledger.tied)
    ep, dim = layout.ep, expert_shard_dim(sp.config, layout)
    units: list[Unit] = []
    kinds: dict[str, tuple[tuple[Local, ...], tuple[Local, ...]]] = {}
    for layer in stage_layers(sp.config, layout, stage):
        g = sp.ledger.group_of(layer)
        if g not in kinds:  # every block of a kind alike
            mine = [t for t in sp.tensors if t.place == BLOCK and t.group == g]
            split_off = [t for t in mine if t.expert and ep > 1]
            kinds[g] = (tuple(Local(t, None, t.local_sizes(values, layout.tp, tp_rank))
                              for t in mine if t not in split_off),
                        tuple(Local(t, None, t.local_sizes(values, layout.tp, tp_rank, ep), dim)
                              for t in split_off))
        block, experts = kinds[g]
        units.append(Unit(f"layers.{layer}", block, False, layer=layer))
        if experts:
            units.append(Unit(f"layers.{layer}.ffn.experts", experts, False, True, layer))
    root = [t for t in sp.tensors
            if (t.place == FIRST and stage == 0) or (t.place == LAST and stage == layout.pp - 1)]
    if tied and layout.pp > 1 and stage == layout.pp - 1 and stage != 0:
        shared = set(tied.values())
        root += [t for t in sp.tensors if t.name in shared]
    if root:
        units.append(Unit("root", tuple(Local(t, None, t.sizes(values, layout.tp, tp_rank))
                                        for t in root), True))
    if stage == layout.pp - 1:
        units += mtp_units(sp, values, layout, tp_rank, kinds)
    return units


def mtp_units(sp: Split, values: dict[str, int], layout: Layout, tp_rank: int,
              kinds: dict) -> list[Unit]:
    """The MTP modules (accounting/planning/mtp_memory.py) on the last stage, as Megatron-LM
    places them (megatron/core/transformer/multi_token_prediction.py, after the decoder's
    last layer): one unit each of a block of the last layer's kind, W_eh (its
    ColumnParallelLinear: the d output rows split over TP) and three norms; with pp > 1 the
    last stage holds the embedding table too, as for a tied head."""
    c = sp.config
    if not c.mtp_layers:
        return []
    g = sp.ledger.group_of(c.num_layers - 1)
    if g not in kinds:  # the last stage's own blocks are of that kind: seen already
        raise AssertionError(f"the last stage holds no block of kind {g}")
    block, experts = kinds[g]
    norms = tuple(Local(t, None, t.sizes(values, layout.tp, tp_rank))
                  for t in sp.tensors if t.module == "ln_final")
    eh = Tensor("mtp.eh_proj.weight", "eh_proj", False, LAST, (("d_model",), ("2", "d_model")),
                0, True, False)
    eh_local = (Local(eh, None, eh.sizes(values, layout.tp, tp_rank)),)
    out = []
    for k in range(c.mtp_layers):  # after the last block: layer indices L, L + 1, …
        out.append(Unit(f"mtp.{k}", block + norms * 3 + eh_local, False, layer=c.num_layers + k))
        if experts:
            out.append(Unit(f"mtp.{k}.ffn.experts", experts, False, True, c.num_layers + k))
    if layout.pp > 1 and not sp.ledger.tied:
        table = tuple(Local(t, None, t.sizes(values, layout.tp, tp_rank))
                      for t in sp.tensors if t.place == FIRST and t.lookup)
        out.append(Unit("mtp.embedding", table, True))
    return out


def zero1_partition(sizes: list[int], d: int) -> list[list[int]]:
    """torch ZeroRedundancyOptimizer._partition_parameters: indices of the tensors each rank
    owns (largest first, each to the least-loaded rank, the first one on a tie)."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)  # stable
    owned: list[list[int]] = [[] for _ in range(d)]
    # (load, rank) in a heap: its smallest is the least load, the first rank on a tie, as
    # torch's min over the ranks, without scanning every rank per tensor (DeepSeek-V3 on
    # 720,720 GPUs: 72 s in min(); issue 32)
    heap = [(0, r) for r in range(d)]  # sorted: already a heap
    for i in order:
        load, r = heapq.heappop(heap)
        owned[r].append(i)
        heapq.heappush(heap, (load + sizes[i], r))
    return owned


@dataclass(frozen=True)
class States:
    """Model-state elements of one GPU (a pipeline stage, TP rank 0, one DP rank)."""
    params: int  # elements of the persistent parameters (padded FSDP shards at stages 2-3)
    params_unpadded: int  # this rank's shard without FSDP's padding (= params below stage 2)
    grads: int  # elements of the persistent gradients (FSDP: the padded reduce-scatter output)
    moments: int  # elements of each AdamW moment (m, and again v)
    tensors: int  # parameter tensors on this stage (one AdamW step counter each)
    owned_tensors: int  # tensors this rank updates (its step counters)
    matmul_weights: int  # elements of matmul weights on this stage (autocast's bf16 copies)
    stage_numel: int  # all TP/EP-local elements of the stage (what stage 0 replicates)
    units: tuple[Unit, ...]
    dp_rank: int
    expert_numel: int = 0  # of stage_numel, the routed experts' (E/ep per rank; ep > 1 only)
    expert_tensors: int = 0  # of tensors, the routed experts' (ep > 1 only)


@lru_cache(maxsize=32)
def _partition(sizes: tuple[int, ...], d: int) -> tuple[tuple[int, ...], ...]:
    """zero1_partition, remembered: a layout's states, its optimizer's state and its worst
    rank each ask it of the same stage's tensors, one after another (a few kept: each holds
    d lists, 720,720 of them in DeepSeek-V3's search on that many GPUs)."""
    return tuple(tuple(o) for o in zero1_partition(list(sizes), d))


def _zero1_owned(flat: list[Local], d: int, rank: int) -> tuple[int, ...]:
    return _partition(tuple(t.numel for t in flat), d)[rank]


_COUNTED: dict = {}  # ids of the units -> (units, (the others' counts, the experts'))


def counted(units: list[Unit], expert: bool | None = None) -> tuple[tuple[Local, int], ...]:
    """Each Local object the units hold, once, with how many times they hold it, in
    first-seen order: a stage's blocks of a kind share one tuple of Local objects
    (stage_tensors), so a sum over the stage's tensors is a sum over its kinds' tensors
    times their counts (the same integers, a fraction of the work). `expert`: the routed
    experts' units only (True), the others (False), or all, the others' first (None).
    Remembered per sequence of unit objects (a stage's states, optimizer and collectives
    each ask it)."""
    others, experts = remembered(
        _COUNTED, tuple(map(id, units)), tuple(units),
        lambda: (tuple(_count([u for u in units if not u.expert])),
                 tuple(_count([u for u in units if u.expert]))), 4096)
    return others if expert is False else experts if expert else others + experts


def _count(units: list[Unit]) -> list[tuple[Local, int]]:
    tuples: dict[int, list] = {}
    for u in units:
        hit = tuples.get(id(u.tensors))
        if hit is None:
            tuples[id(u.tensors)] = [u.tensors, 1]
        else:
            hit[1] += 1
    seen: dict[int, list] = {}
    for tensors, k in tuples.values():
        for t in tensors:
            hit = seen.get(id(t))
            if hit is None:
                seen[id(t)] = [t, k]
            else:
                hit[1] += k
    return [(t, n) for t, n in seen.values()]


def states(units: list[Unit], layout: Layout, dp_rank: int = 0) -> States:
    """With ep > 1 the routed experts' units are sharded over the expert-data-parallel group
    (dp/ep ranks; this rank's place in it: dp_rank // ep), the rest over the dp ranks.
    Gradients and moments are the trained tensors' only (FROZEN); the parameters all."""
    d, z = layout.dp, layout.sharding
    dense_n, expert_n = counted(units, False), counted(units, True)
    flat_n = dense_n + expert_n
    numel = sum(n * t.numel for t, n in flat_n)
    tensors = sum(n for _, n in flat_n)
    trained = sum(n for t, n in flat_n if t.trained)
    grads = sum(n * t.numel for t, n in flat_n if t.trained)
    matmul = sum(n * t.tensor.matmul_weight * t.numel for t, n in flat_n)
    e_numel = sum(n * t.numel for t, n in expert_n)
    extra = dict(expert_numel=e_numel, expert_tensors=sum(n for _, n in expert_n))
    e, e_rank = layout.edp, dp_rank // layout.ep
    if z == 0:
        return States(numel, numel, grads, grads, tensors, trained, matmul, numel,
                      tuple(units), dp_rank, **extra)
    if z == 1:  # one ZeroRedundancyOptimizer per group (Megatron-LM: its distributed optimizer)
        dense = [t for u in units if not u.expert for t in u.tensors]
        expert = [t for u in units if u.expert for t in u.tensors]
        owned = [t for t in [dense[i] for i in _zero1_owned(dense, d, dp_rank)] +
                 [expert[i] for i in _zero1_owned(expert, e, e_rank)] if t.trained]
        mine = sum(t.numel for t in owned)
        return States(numel, numel, grads, mine, tensors, len(owned), matmul, numel,
                      tuple(units), dp_rank, **extra)
    padded = sum(n * t.padded(d) for t, n in dense_n) + sum(n * t.padded(e) for t, n in expert_n)
    shard = sum(n * t.shard(d, dp_rank) for t, n in dense_n) + \
        sum(n * t.shard(e, e_rank) for t, n in expert_n)
    grads = sum(n * t.padded(d) for t, n in dense_n if t.trained) + \
        sum(n * t.padded(e) for t, n in expert_n if t.trained)
    moments = sum(n * t.shard(d, dp_rank) for t, n in dense_n if t.trained) + \
        sum(n * t.shard(e, e_rank) for t, n in expert_n if t.trained)
    # every tensor has a shard on every rank, possibly empty (rows < d); AdamW still keeps a
    # step counter for an empty one (a trained one: FROZEN)
    return States(padded, shard, grads, moments, tensors, trained, matmul, numel,
                  tuple(units), dp_rank, **extra)


def zero1_worst_rank(units: list[Unit], layout: Layout) -> int:
    """The data-parallel rank with the most AdamW state under ZeroRedundancyOptimizer (with
    ep > 1: its dense share over dp ranks plus its experts' share over dp/ep ranks): the
    partition over every tensor, the state of the trained ones (FROZEN)."""
    def loads(tensors: list[Local], d: int) -> list[int]:
        return [sum(tensors[i].numel for i in o if tensors[i].trained)
                for o in _partition(tuple(t.numel for t in tensors), d)]
    dense = loads([t for u in units if not u.expert for t in u.tensors], layout.dp)
    expert = loads([t for u in units if u.expert for t in u.tensors], layout.edp)
    total = [dense[r] + expert[r // layout.ep] for r in range(layout.dp)]
    return total.index(max(total))


def state_bytes(s: States, precision: Precision) -> dict[str, int]:
    """Bytes of each persistent model state (fp32 master weights, fp32 gradients, fp32 AdamW
    m and v, as both precisions of planning.memory keep them)."""
    return {"parameters": s.params * precision.master_bytes,
            "gradients": s.grads * precision.grad_bytes,
            "AdamW m": s.moments * precision.moment_bytes,
            "AdamW v": s.moments * precision.moment_bytes}



# ---- any precision and optimizer (issue 30): the state of the tensors this rank updates ----


def updated(units: list[Unit], layout: Layout,
            dp_rank: int = 0) -> list[tuple[Local, tuple[int, ...]]]:
    """The tensors this rank's optimizer updates and the shape it sees of each: every
    TP-local tensor (stage 0); the whole tensors ZeroRedundancyOptimizer assigns it (stage
    1); its FSDP2 shard of each, ⌈rows/d⌉ or fewer rows of the sharded dimension, unpadded
    (stages 2-3: the optimizer steps the DTensor's local tensor). A frozen tensor is updated
    by none (FROZEN)."""
    return [(t, shape) for t, shape in _updated(units, layout, dp_rank) if t.trained]


def _updated(units: list[Unit], layout: Layout,
             dp_rank: int = 0) -> list[tuple[Local, tuple[int, ...]]]:
    d, z = layout.dp, layout.sharding
    dense = [t for u in units if not u.expert for t in u.tensors]
    expert = [t for u in units if u.expert for t in u.tensors]
    e, e_rank = layout.edp, dp_rank // layout.ep
    if z == 0:
        return [(t, t.sizes) for t in dense + expert]
    if z == 1:
        return [(dense[i], dense[i].sizes) for i in _zero1_owned(dense, d, dp_rank)] + \
               [(expert[i], expert[i].sizes) for i in _zero1_owned(expert, e, e_rank)]
    return [(t, _shard_shape(t, d, dp_rank)) for t in dense] + \
        [(t, _shard_shape(t, e, e_rank)) for t in expert]


def _shard_shape(t: Local, n: int, rank: int) -> tuple[int, ...]:
    """The shape of rank's FSDP2 shard of t over n ranks (unpadded)."""
    sizes = list(t.sizes)
    sizes[t.dim] = chunk(sizes[t.dim], n, rank)
    return tuple(sizes)


def updated_counted(units: list[Unit], layout: Layout,
                    dp_rank: int = 0) -> list[tuple[Local, tuple[int, ...], int]]:
    """updated()'s (tensor, shape) pairs, each distinct one once with its count (counted:
    the blocks of a kind share their Local objects), in first-seen order."""
    if layout.sharding == 1:  # the partition's whole tensors: grouped from the list
        seen: dict[tuple, list] = {}
        for t, shape in updated(units, layout, dp_rank):
            hit = seen.setdefault((id(t), shape), [t, shape, 0])
            hit[2] += 1
        return [(t, shape, n) for t, shape, n in seen.values()]
    dense, expert = counted(units, False), counted(units, True)
    if layout.sharding == 0:
        return [(t, t.sizes, n) for t, n in dense + expert if t.trained]
    e_rank = dp_rank // layout.ep
    return [(t, _shard_shape(t, layout.dp, dp_rank), n) for t, n in dense if t.trained] + \
        [(t, _shard_shape(t, layout.edp, e_rank), n) for t, n in expert if t.trained]


def role(t: Local) -> str:
    """Muon's hidden matrices: a block's 2-D weights (training_state.role's rule: not an
    embedding table, not the LM head, which live outside the blocks)."""
    return HIDDEN_MATRIX if t.tensor.place == BLOCK and len(t.sizes) == 2 else ""


def optimizer_state(units: list[Unit], layout: Layout, s: States, optimizer: str,
                    precision: Precision, mine: list | None = None,
                    ) -> tuple[list[tuple[str, int, str]], int]:
    """([(item, bytes, dtype)], step counters) of this rank's optimizer, tensor by tensor
    with the rules of planning/optimizers.py (checked against torch.optim and bitsandbytes
    there); the fp32 master copy of bf16-master first, shaped like the updated tensors.
    Each distinct (tensor, shape) once, times its count (updated_counted; `mine`: its
    list where the caller has it already)."""
    opt = get_optimizer(optimizer)
    mine = updated_counted(list(units), layout, s.dp_rank) if mine is None else mine
    items: dict[str, list] = {}
    if precision.master:
        items["fp32 master copy of the parameters (optimizer)"] = [
            4 * sum(n * prod(shape) for _, shape, n in mine), "fp32"]
    for t, shape, n in mine:
        for st in opt.state(shape, precision.state_dtype, role(t)):
            acc = items.setdefault(st.item, [0, st.dtype])
            acc[0] += n * st.bytes
    if mine:  # (shared() reads the shapes as a multiset: whether every one is small)
        for st in opt.shared([shape for _, shape, n in mine for _ in range(n)]):
            acc = items.setdefault(st.item, [0, st.dtype])
            acc[0] += st.bytes
    counters = 0 if opt.step_counter is None else sum(
        n for t, _, n in mine if role(t) != opt.counterless_role)
    return [(k, b, dt) for k, (b, dt) in items.items()], counters
