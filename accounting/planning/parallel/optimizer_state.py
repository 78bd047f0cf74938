"""The optimizer's state and the fp8 state on one GPU of a many-GPU plan, as memory items,
for any precision (planning/precisions.py) and optimizer (planning/optimizers.py): the
rules are the one-GPU plan's, applied to the tensors this rank updates
(states.updated: all, ZeroRedundancyOptimizer's whole tensors, or FSDP2's shards).

Under FSDP2 (stages 2-3) an optimizer steps each DTensor's local shard: an elementwise
state (AdamW's m and v, SGD's momentum) is shaped like the shard, exactly; the others are
refused there (Adafactor's factored rows and columns, Muon's orthogonalisation and the
8-bit optimizers' blocks need the whole matrix or a library's own FSDP support), and Muon
under ZeRO-1 too (ZeroRedundancyOptimizer wraps one optimizer class; the recipe is two).
"""
from __future__ import annotations

from math import prod

from accounting.planning.parallel.memo import remembered
from accounting.planning import fp8 as F8
from accounting.planning.memory import Precision
from accounting.planning.optimizers import elementwise, get_optimizer, is_paged
from accounting.planning.parallel import activations as A
from accounting.planning.parallel.buffers import Item
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.states import (States, Unit, optimizer_state,
                                                 role, updated, updated_counted)
from accounting.planning.training_state import STEP_BYTES
from accounting.runtime.errors import UsageError
from accounting.units import DTYPE_BYTES

# the names the many-GPU plans have always given AdamW's moments (their JSON's items)
_NAMES = {"AdamW first moment m": "AdamW moments: first moment m",
          "AdamW second moment v": "AdamW moments: second moment v"}


def check(optimizer: str, layout: Layout, p: Precision | None = None) -> None:
    """An optimizer whose state is not elementwise is planned up to ZeRO-1 only; fp8
    all-gathers need FSDP."""
    opt = get_optimizer(optimizer)
    if p is not None and p.fsdp_fp8_gather and (layout.sharding < 2 or layout.dp == 1):
        raise UsageError(f"--precision {p.name} all-gathers the fp8 weights under FSDP2: give "
                         f"--zero 2 or 3 over more than one data-parallel rank, or --precision "
                         f"fp8-torchao")
    if opt.zero1_refusal and layout.sharding == 1:
        raise UsageError(f"--optimizer {opt.name} under ZeRO-1 is not modelled "
                         f"({opt.zero1_refusal}): give --zero 0")
    if layout.sharding >= 2 and not opt.elementwise:
        raise UsageError(f"--optimizer {optimizer} under FSDP (--zero {layout.sharding}) is not "
                         f"modelled (its state needs whole matrices, not row shards): give "
                         f"--zero 0 or 1, or --optimizer {' / '.join(elementwise())}")


_ITEMS: dict = {}  # key -> ((units, states), items): the search's layouts share their states


def optimizer_items(units: list[Unit], layout: Layout, st: States, optimizer: str,
                    p: Precision, n_sym: str) -> list[Item]:
    """The master copy (bf16-master, fp8-te), the optimizer's state and its step counters
    on this rank; remembered per (units, States) object (the planner's cache hands the
    same ones to the layouts of a search that differ only in batch or SP: what a rank
    updates depends on its states and on dp, ep and the sharding stage only)."""
    key = (id(units), id(st), layout.dp, layout.ep, layout.sharding, optimizer, p, n_sym)
    return list(remembered(_ITEMS, key, (units, st), lambda: tuple(
        _optimizer_items(units, layout, st, optimizer, p, n_sym)), 4096))


def _optimizer_items(units: list[Unit], layout: Layout, st: States, optimizer: str,
                     p: Precision, n_sym: str) -> list[Item]:
    z = layout.sharding
    scope = (n_sym if z == 0 else "(this rank's whole tensors)" if z == 1
             else "Σ(this rank's rows)·cols")
    mine = updated_counted(list(units), layout, st.dp_rank)
    state, counters = optimizer_state(units, layout, st, optimizer, p, mine)
    numel = sum(n * prod(shape) for _, shape, n in mine)
    opt = get_optimizer(optimizer)
    items = []
    for name, b, dtype in state:
        per = DTYPE_BYTES[dtype]
        label = _NAMES.get(name, name) + ("" if dtype in name else f" ({dtype})")
        items.append(Item(label, f"{per}·{scope}" if b == per * numel else f"{b:,}",
                          A.Linear(0, b), model_state=True, per_element=per,
                          on_gpu=not is_paged(name)))
    on_gpu = opt.step_counter == "device"
    if counters:
        items.append(Item(f"{opt.counter_label} step counters (fp32 scalars)",
                          f"{STEP_BYTES}·(tensors updated)", A.Linear(0, counters * STEP_BYTES),
                          on_gpu=on_gpu, note="" if on_gpu else
                          "torch keeps them on the CPU unless fused or capturable"))
    return items


def fp8_items(sp, units: list[Unit], p: Precision, values: dict[str, int]) -> list[Item]:
    """Transformer Engine's fp8 weight copies (weight and transpose) of this rank's
    TP-local linear weights, and their DelayedScaling state (planning/fp8.py); torchao's
    float8 keeps none. Not sharded by ZeRO: each rank casts the weights it computes with."""
    if p.fp8 != F8.TE:
        return []
    names = F8.weight_names(sp.ledger)
    weights = [t for u in units for t in u.tensors if t.tensor.name in names]
    n = sum(t.numel for t in weights)
    k = F8.TE_WEIGHT_COPIES * F8.FP8_BYTES
    copies = [Item("fp8 weight copies (Transformer Engine: weight and transpose, e4m3)",
                   f"{k}·N_fp8_stage", A.Linear(0, k * n), model_state=True, per_element=k)]
    return copies if not p.delayed_scaling else copies + [
            Item("fp8 scaling state (DelayedScaling: scales, amax history)",
                 f"{F8.TE_SCALING_BYTES:,}·(te.Linear layers)",
                 A.Linear(0, F8.TE_SCALING_BYTES * len(weights)))]


def update_flops(units: list[Unit], layout: Layout, st: States, optimizer: str) -> int:
    """FLOPs of this rank's optimizer update: the registry's per-tensor count
    (planning/optimizers.py update_flops) over the tensors it updates, in the shapes it
    sees them (AdamW's gives step.py's 14 per element and 1 per tensor)."""
    opt = get_optimizer(optimizer)
    return sum(opt.update_flops(shape, role(t)) for t, shape in updated(list(units), layout,
                                                                        st.dp_rank))


def fp8_gathered(sp, p: Precision) -> frozenset[str]:
    """The weights FSDP2 all-gathers in fp8 (Precision.fsdp_fp8_gather: the Float8Linear
    weights), else none."""
    return F8.weight_names(sp.ledger) if p.fsdp_fp8_gather else frozenset()
