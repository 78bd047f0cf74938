"""Model states per GPU of a LoRA plan (planning/finetune.py) on many GPUs, torch stack.

The base is frozen (requires_grad False): every rank holds it, replicated under DDP
(stage 0) or as FSDP2's padded ⌈rows/d⌉-row shards (stages 2-3: fully_shard shards every
parameter of a unit, trained or not; torch/distributed/fsdp/_fully_shard/_fsdp_param.py),
in the base's dtype, with no gradient and no optimizer state. The adapters (lora_A, lora_B,
float32: PEFT's autocast_adapter_dtype) are trained: their gradients (FSDP2: the padded
reduce-scatter output, one buffer per unit, of the tensors that require grad only:
_fsdp_collectives.foreach_reduce) and the optimizer's state of this rank's unpadded shard
(torch.optim steps the DTensor's local tensor).

The tensors and their FSDP units come from the LoRA ledger through the same Split as a full
fine-tune (shards.split with the adapters; states.stage_tensors). Under TP the shapes
would split lora_B of a column-parallel linear and lora_A of a row-parallel one (the TP
symbol's dimension), but that layout is not checked against PEFT and torch's TP here, so a
LoRA plan refuses --tp (and ZeroRedundancyOptimizer, --zero 1, and pipelining) in one line.
Checked on torch.distributed's fake backend (tests/test_lora_gpus.py: PEFT's LoRA on
model.TransformerLM under FSDP2, each rank's parameter, gradient and AdamW bytes).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from accounting.planning.finetune import FineTune
from accounting.planning.optimizers import get_optimizer
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.shards import chunk, split
from accounting.planning.parallel.states import Local, Unit, role, stage_tensors
from accounting.runtime.errors import UsageError
from accounting.units import DTYPE_BYTES


@dataclass(frozen=True)
class LoraStates:
    """Bytes of one GPU's model states (pipeline stage 0, one data-parallel rank)."""
    base_bytes: int  # the frozen base (its padded shard under FSDP2)
    adapter_bytes: int  # lora_A and lora_B, their padded shards under FSDP2
    gradient_bytes: int  # the adapters' gradients only
    optimizer: tuple[tuple[str, int, str], ...]  # (item, bytes, dtype) of the adapters' state
    step_counters: int  # one per trained tensor this rank updates (an empty shard too)
    base_numel: int
    adapter_numel: int
    gradient_numel: int

    @property
    def optimizer_bytes(self) -> int:
        return sum(b for _, b, _ in self.optimizer)

    @property
    def total_bytes(self) -> int:
        return self.base_bytes + self.adapter_bytes + self.gradient_bytes + self.optimizer_bytes


def check(layout: Layout) -> None:
    """What a LoRA plan on many GPUs runs: DDP or FSDP2 over data-parallel ranks."""
    if layout.tp > 1 or layout.pp > 1 or layout.cp > 1 or layout.ep > 1:
        raise UsageError("LoRA on many GPUs is planned with data parallelism only (DDP or "
                         "FSDP2); leave out --tp, --pp, --cp and --ep")
    if layout.sharding == 1:
        raise UsageError("LoRA on many GPUs is planned under DDP (--zero 0) or FSDP2 "
                         "(--fsdp); ZeroRedundancyOptimizer (--zero 1) is not")


def units(ft: FineTune, layout: Layout) -> list[Unit]:
    """The tensors of the LoRA model in FSDP units (one per block, and the root)."""
    sp = split(ft.config, None, "none", ft.implementation, ft.base_dtype, adapters=ft.adapters)
    return stage_tensors(sp, sp.values(1, 1), layout, 0)


def lora_states(ft: FineTune, layout: Layout, dp_rank: int = 0,
                optimizer: str = "adamw") -> LoraStates:
    """This data-parallel rank's model states under `layout` (check() first)."""
    if ft.qlora:
        raise UsageError("QLoRA (--base-weights nf4) is planned on one GPU; leave out --gpus")
    check(layout)
    d, sharded = layout.dp, layout.sharding >= 2
    flat = [t for u in units(ft, layout) for t in u.tensors]

    def held(t: Local) -> int:
        return t.padded(d) if sharded else t.numel
    base = [t for t in flat if t.tensor.frozen]
    trained = [t for t in flat if not t.tensor.frozen]
    adapter_dtype = ft.adapters.adapter_dtype
    ab, bb = DTYPE_BYTES[adapter_dtype], DTYPE_BYTES[ft.base_dtype]
    opt = get_optimizer(optimizer)
    items: dict[str, list] = {}
    shapes = []
    for t in trained:
        shape = list(t.sizes)
        if sharded:
            shape[t.dim] = chunk(shape[t.dim], d, dp_rank)
        shapes.append(tuple(shape))
        for st in opt.state(tuple(shape), adapter_dtype, role(t)):
            items.setdefault(st.item, [0, st.dtype])[0] += st.bytes
    if shapes:
        for st in opt.shared(shapes):
            items.setdefault(st.item, [0, st.dtype])[0] += st.bytes
    counters = 0 if opt.step_counter is None else len(trained)
    base_n, adapter_n = sum(map(held, base)), sum(map(held, trained))
    return LoraStates(base_n * bb, adapter_n * ab, adapter_n * ab,
                      tuple((k, b, dt) for k, (b, dt) in items.items()), counters,
                      base_n, adapter_n, adapter_n)


def unsharded_numel(ft: FineTune, layout: Layout) -> int:
    """All elements of the stage (what DDP replicates): base and adapters."""
    return sum(prod(t.sizes) for u in units(ft, layout) for t in u.tensors)
