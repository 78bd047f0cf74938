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
fine-tune (shards.split with the adapters; states.stage_tensors).

Tensor parallelism (--tp): the adapters are split as the base layer they wrap, PEFT's own
rule for Megatron's parallel layers (peft 0.21.2, peft/tuners/lora/tp_layer.py,
LoraParallelLinear.update_layer): under a RowParallelLinear lora_A is a RowParallelLinear
(its d_in split over TP) and lora_B a whole nn.Linear; under a ColumnParallelLinear lora_A is
a whole nn.Linear and lora_B a ColumnParallelLinear (its d_out split); both float32
(megatron_config.params_dtype = torch.float32). That is the shape rule of shards.py: the
factor that carries the TP symbol (h, d_ff) is split, the r × d_model one replicated.
Pipelining (--pp) gives each stage its blocks' base and adapters (states.stage_tensors).

QLoRA (--base-weights nf4) on many GPUs: DDP or FSDP2 only (torchtune's
lora_finetune_distributed: training/_distributed.py shard_model, fully_shard on each layer;
transformers + PEFT + FSDP with bnb_4bit_quant_storage). FSDP2 shards an NF4 weight along its
rows like any parameter: torchao's NF4Tensor splits on dim 0 (nf4_tensor.py nf4_split) and
all-gathers its quantized_scalers, quantization_factor and quantized_data
(NF4Tensor.fsdp_pre_all_gather), the NF4 code table and scaler mean travelling as metadata
(whole on every rank). A rank so holds the 4-bit layout of its ⌈rows/d⌉ rows
(nf4_shard_bytes); the gathered unit is d such shards. No stack runs NF4 under TP or PP
(torchtune's NF4 linear is not a DTensor layout; Megatron has no NF4): refused in one line.
Checked on torch.distributed's fake backend (tests/test_lora_gpus.py: PEFT's LoRA on
model.TransformerLM under FSDP2, each rank's parameter, gradient and AdamW bytes); TP
counts and the NF4 shard rule in tests/test_lora_tp_qlora.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from accounting.formats.bnb import bnb_4bit_bytes
from accounting.formats.torchao_nf4 import torchao_nf4_bytes
from accounting.planning.finetune import NF4_TORCHAO, FineTune
from accounting.planning.memory import Precision
from accounting.planning.optimizers import DEFAULT_OPTIMIZER, get_optimizer
from accounting.planning.parallel import comms as C
from accounting.planning.parallel.activations import Linear
from accounting.planning.parallel.buffers import Item, engine_buffers
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.shards import Split, chunk, split
from accounting.planning.parallel.stacks import DEFAULT_STACK, get_stack
from accounting.planning.parallel.states import (Local, States, Unit, role, stage_tensors,
                                                 states)
from accounting.planning.training_state import STEP_BYTES
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


def check(ft: FineTune, layout: Layout, stack: str = DEFAULT_STACK) -> None:
    """What a LoRA plan on many GPUs runs: DDP or FSDP2 over data-parallel ranks, torch."""
    if ft.qlora and (layout.tp > 1 or layout.pp > 1):
        raise UsageError("QLoRA (--base-weights nf4) on many GPUs is planned under DDP or FSDP2 "
                         "(no stack runs NF4 weights under TP or PP); leave out --tp and --pp")
    if not get_stack(stack).torch_engines:
        raise UsageError(f"LoRA on many GPUs is planned on --stack torch, not {stack}")
    if layout.cp > 1 or layout.ep > 1:
        raise UsageError("LoRA on many GPUs is planned with data, tensor and pipeline "
                         "parallelism; leave out --cp and --ep")
    if layout.sharding == 1:
        raise UsageError("LoRA on many GPUs is planned under DDP (--zero 0) or FSDP2 "
                         "(--fsdp); ZeroRedundancyOptimizer (--zero 1) is not")


def nf4_shard_bytes(rows: int, cols: int, ft: FineTune) -> int:
    """Bytes of `rows` rows of a cols-wide NF4 weight (a rank's FSDP2 shard, or the whole
    weight): the 4-bit codes and per-block scales of those rows, the code table and the
    double quantization's constants whole (torchao: NF4Tensor.fsdp_pre_all_gather gathers
    only the row-sharded tensors; bitsandbytes' quant state likewise per weight). The layout
    is the implementation's: torchao's NF4Tensor for torchtune, bitsandbytes' otherwise."""
    if rows <= 0 or cols <= 0:
        return 0
    if ft.nf4_layout == NF4_TORCHAO:
        return sum(torchao_nf4_bytes(rows, cols, dtype=ft.base_dtype).values())
    return sum(bnb_4bit_bytes(rows, cols, double_quant=ft.double_quant).values())


def base_tensor_bytes(ft: FineTune, t: Local, rows: int, quantized: frozenset[str]) -> int:
    """Bytes of `rows` rows (of the sharded dimension) of the frozen tensor t."""
    if t.tensor.name in quantized and t.dim == 0 and len(t.sizes) == 2:
        return nf4_shard_bytes(rows, t.sizes[1], ft)
    return rows * t.rest * DTYPE_BYTES[ft.base_dtype]


def quantized_names(ft: FineTune) -> frozenset[str]:
    return frozenset(p.name for p in ft.quantized())


def lora_split(ft: FineTune, autocast: str | None, recompute: str = "none") -> Split:
    """The LoRA ledger (adapters on a base frozen in ft.base_dtype), split."""
    return split(ft.config, autocast, recompute, ft.implementation, ft.base_dtype,
                 adapters=ft.adapters)


def units(ft: FineTune, layout: Layout) -> list[Unit]:
    """The tensors of the LoRA model in FSDP units (one per block, and the root)."""
    sp = lora_split(ft, None)
    return stage_tensors(sp, sp.values(1, 1), layout, 0)


def parts(us: list[Unit], frozen: bool) -> list[Unit]:
    """The units with only their frozen (or only their trained) tensors."""
    out = [replace(u, tensors=tuple(t for t in u.tensors if t.tensor.frozen == frozen))
           for u in us]
    return [u for u in out if u.tensors]


def lora_states(ft: FineTune, layout: Layout, dp_rank: int = 0, optimizer: str = DEFAULT_OPTIMIZER,
                us: list[Unit] | None = None) -> LoraStates:
    """This data-parallel rank's model states under `layout` (`us`: the stage's units,
    default pipeline stage 0's)."""
    check(ft, layout)
    d, sharded = layout.dp, layout.sharding >= 2
    flat = [t for u in (units(ft, layout) if us is None else us) for t in u.tensors]

    def held(t: Local) -> int:
        return t.padded(d) if sharded else t.numel
    base = [t for t in flat if t.tensor.frozen]
    trained = [t for t in flat if not t.tensor.frozen]
    adapter_dtype = ft.adapters.adapter_dtype
    ab = DTYPE_BYTES[adapter_dtype]
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
    q = quantized_names(ft)
    base_b = sum(base_tensor_bytes(ft, t, -(-t.sizes[t.dim] // d) if sharded else t.sizes[t.dim], q)
                 for t in base)
    return LoraStates(base_b, adapter_n * ab, adapter_n * ab,
                      tuple((k, b, dt) for k, (b, dt) in items.items()), counters,
                      base_n, adapter_n, adapter_n)


# ---- the many-GPU plan's pieces (plan.py stage_plan) ----

@dataclass(frozen=True)
class Parts:
    """A stage's states split: the frozen base's and the trained adapters'."""
    base: States
    trained: States
    ft: FineTune

    def precisions(self, p: Precision) -> tuple[Precision, Precision]:
        """(the base's, the adapters') storage: the base in ft.base_dtype, the adapters, their
        gradients and state in the adapter dtype (float32)."""
        a = self.ft.adapters.adapter_dtype
        return (replace(p, param_dtype=self.ft.base_dtype),
                replace(p, param_dtype=a, grad_dtype=a, state_dtype=a))


def split_states(us: list[Unit], layout: Layout, dp_rank: int, ft: FineTune) -> Parts:
    return Parts(states(parts(us, True), layout, dp_rank),
                 states(parts(us, False), layout, dp_rank), ft)


def state_items(ft: FineTune, us: list[Unit], layout: Layout, dp_rank: int,
                optimizer: str) -> list[Item]:
    """The model-state items of one GPU of a LoRA plan."""
    s = lora_states(ft, layout, dp_rank, optimizer, us)
    sharded = layout.sharding >= 2
    sym = "Σ⌈rows/d⌉·cols" if sharded else "N"
    shards = ", FSDP shards" if sharded else ""
    ab, bb = DTYPE_BYTES[ft.adapters.adapter_dtype], DTYPE_BYTES[ft.base_dtype]
    base = (f"frozen base (linear weights in NF4 ({ft.nf4_layout}), the rest {ft.base_dtype}"
            if ft.qlora else f"frozen base ({ft.base_dtype}")
    form = (f"NF4(Σ{'⌈rows/d⌉' if sharded else 'rows'} rows) + {bb}·{sym}_rest" if ft.qlora
            else f"{bb}·{sym}_base")
    out = [Item(f"{base}{shards}; no gradient, no optimizer state)", form,
                Linear(0, s.base_bytes), model_state=True, per_element=0 if ft.qlora else bb),
           Item(f"LoRA adapters ({ft.adapters.adapter_dtype}{shards})", f"{ab}·{sym}_LoRA",
                Linear(0, s.adapter_bytes), model_state=True, per_element=ab),
           Item(f"gradients of the adapters ({ft.adapters.adapter_dtype}{shards})",
                f"{ab}·{sym}_LoRA", Linear(0, s.gradient_bytes), model_state=True,
                per_element=ab)]
    scope = "Σ(this rank's rows)·cols of the adapters" if sharded else "N_LoRA"
    for name, b, dtype in s.optimizer:
        per = DTYPE_BYTES[dtype]
        out.append(Item(f"{name} of the adapters ({dtype})", f"{per}·{scope}", Linear(0, b),
                        model_state=True, per_element=per))
    opt = get_optimizer(optimizer)
    if s.step_counters:
        on_gpu = opt.step_counter == "device"
        out.append(Item(f"{opt.counter_label} step counters (fp32 scalars)",
                        f"{STEP_BYTES}·(adapter tensors)", Linear(0, s.step_counters * STEP_BYTES),
                        on_gpu=on_gpu, note="" if on_gpu else
                        "torch keeps them on the CPU unless fused or capturable"))
    return out


def _merge(items: list, key, add) -> list:
    out: dict = {}
    for i in items:
        k = key(i)
        out[k] = add(out[k], i) if k in out else i
    return list(out.values())


def buffer_items(sp: Split, layout: Layout, p: Precision, pt: Parts, stage: int,
                 values: dict[str, int], seq: int) -> list[Item]:
    """The engines' buffers: DDP's buckets of the adapters' gradients; FSDP2's gathered
    units (the base in its dtype, the adapters in theirs) and unsharded adapter gradients."""
    pb, pa = pt.precisions(p)
    items = engine_buffers(sp, layout, pa, pt.trained, stage, values, seq)
    if layout.sharding >= 2 and layout.dp > 1:
        base = [i for i in engine_buffers(sp, layout, pb, pt.base, stage, values, seq)
                if i.name.startswith("FSDP2 gathered")]
        if pt.ft.qlora:  # the gathered NF4 shards, not 2 bytes an element
            root, blocks = qlora_gathered(pt.ft, pt.base.units, layout)
            base = [replace(i, bytes=Linear(0, root + blocks),
                            resharded_after_forward=blocks if i.resharded_after_forward else 0)
                    for i in base]
        items += base
    kept = f"NF4 and {pt.ft.base_dtype}" if pt.ft.qlora else pt.ft.base_dtype
    gathered = (f"FSDP2 gathered units (the base in {kept}, the adapters in "
                f"{pt.ft.adapters.adapter_dtype})")
    return _merge(items, lambda i: i.name,
                  lambda a, b: replace(a, name=a.name.replace("FSDP2 gathered fp32 units",
                                                              gathered),
                                       bytes=a.bytes + b.bytes,
                                       resharded_after_forward=a.resharded_after_forward
                                       + b.resharded_after_forward,
                                       formula=a.formula + " (adapters) + " + b.formula + " (base)"))


def qlora_gathered(ft: FineTune, us, layout: Layout) -> tuple[int, int]:
    """Bytes of the frozen base FSDP2 holds gathered under QLoRA, (the root unit's, the
    blocks': at stage 3 two blocks, one gathered, the next prefetched; at stage 2 every
    block, as buffers.engine_buffers counts them): d shards of ⌈rows/d⌉ rows, each in the
    NF4 layout (NF4Tensor.fsdp_post_all_gather rebuilds one NF4Tensor from the d shards')."""
    d, q = layout.dp, quantized_names(ft)

    def gathered(u: Unit) -> int:
        return sum(d * base_tensor_bytes(ft, t, -(-t.sizes[t.dim] // d), q) for t in u.tensors)
    root = sum(gathered(u) for u in us if u.root)
    blocks = [gathered(u) for u in us if not u.root]
    return root, (sum(blocks) if layout.sharding == 2 else sum(sorted(blocks)[-2:]))


def _nf4_gather(c, pt: Parts, layout: Layout):
    """A QLoRA base unit's all-gather: per micro-batch, d shards of each weight in its NF4
    layout (NF4Tensor.fsdp_pre_all_gather's quantized tensors), the rest in bf16."""
    ft, d, q = pt.ft, layout.dp, quantized_names(pt.ft)
    root = "root unit" in c.what
    units = [u for u in pt.base.units if u.root == root and not u.expert]
    per = sum(d * base_tensor_bytes(ft, t, -(-t.sizes[t.dim] // d), q)
              for u in units for t in u.tensors)
    return replace(c, bytes=layout.micro_batches * per,
                   formula=f"{c.calls:,} gathers: d·NF4(⌈rows/d⌉ rows) + d·2·Σ⌈rows/d⌉·cols_rest")


def collectives(layout: Layout, p: Precision, pt: Parts, buffer_bytes: int) -> list:
    """The data-parallel collectives: the adapters' gradients reduced (DDP's all-reduce,
    FSDP2's reduce-scatter of the tensors that require grad); FSDP2 gathers every unit,
    base and adapters (one all-gather per unit: the bytes of both)."""
    pb, pa = pt.precisions(p)
    out = C.data_parallel(layout, pt.trained, pa, buffer_bytes, pa.master_bytes)
    if layout.sharding >= 2:
        base = [c for c in C.data_parallel(layout, pt.base, pb, 0, pb.master_bytes)
                if c.op == C.ALL_GATHER]
        if pt.ft.qlora:  # the NF4 shards travel, not 2 bytes an element
            base = [_nf4_gather(c, pt, layout) for c in base]
        out += base
    return _merge(out, lambda c: (c.group, c.op, c.what, c.phase),
                  lambda a, b: replace(a, bytes=a.bytes + b.bytes, calls=max(a.calls, b.calls),
                                       formula=f"{a.formula} (adapters) + {b.formula} (base)"))
