"""The memory items of one GPU under a named stack (stacks.py): model states by the stack's
rules, activations by its implementation, and its engine's buffers. plan.py calls `memory`
for every stack but torch, whose items it builds itself.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from accounting.planning.parallel.memo import remembered
from accounting.planning.parallel import activations as A
from accounting.planning.parallel import megatron as M
from accounting.planning.parallel import titan_tp as TT
from accounting.planning.parallel import pipeline_buffers as PB
from accounting.planning.parallel.buffers import (Item, engine_buffers, largest_module,
                                                  stage_buffers)
from accounting.planning.parallel.layout import NO_RECOMPUTE, SELECTIVE, Layout
from accounting.planning.parallel.shards import BLOCK, Split, split
from accounting.planning.parallel.stacks import (DEFAULT_STACK, W16, Stack, get_stack,
                                                 state_items)
from accounting.planning.parallel.states import States
from accounting.planning.memory import Precision
from accounting.ledger.builder.common import COURSE, TORCHTITAN as TITAN_IMPL
from accounting.architecture.config import ModelConfig
from accounting.units import BF16


@dataclass(frozen=True)
class StackRun:
    """A stack and its settings for one plan."""
    stack: Stack = get_stack(DEFAULT_STACK)
    dropout: float = 0.0  # megatron: the hidden and attention dropout probability
    kernel: str = M.FLASH  # megatron: the attention kernel
    fp8: str | None = None  # megatron: TE's fp8 (Precision.fp8, "te"), else None (bf16)
    async_tp: bool = False  # torchtitan: async TP's symmetric-memory workspace (Stack.async_tp)

    @property
    def name(self) -> str:
        return self.stack.name

    @property
    def fused_attention(self) -> bool:
        """Megatron-Core with its default kernel runs Transformer Engine's flash attention,
        torchtitan its Llama's F.scaled_dot_product_attention, whatever --attention says (the
        ledgers they plan are built so: megatron.ledger_split, memory() below): context
        parallelism's ring attention replaces that kernel, without --attention sdpa."""
        return self.stack.fused_attention and (self.kernel == M.FLASH or not self.stack.megatron_core)

    def as_run(self, config: ModelConfig) -> ModelConfig:
        """The config with the attention kernel this stack runs (for the layout's checks)."""
        return _remembered(("sdpa", id(config)), config,
                           lambda: replace(config, attention="sdpa")) \
            if self.fused_attention else config

    def megatron_layer(self, config, layout: Layout, seq: int) -> list[tuple[str, str | None, int]]:
        """(name, Korthikanti's term, bytes at b = 1) of one block under Megatron."""
        return M.layer(config, layout, seq, self.dropout > 0, self.kernel, self.fp8)


def implementation(run: StackRun, c: ModelConfig) -> str:
    """Which implementation of the model the stack runs (builder.walk's knob): DeepSpeed
    wraps the one given, transformers' where its ops are modelled for this config
    (recipes.transformers_gap), else model/'s; torchtitan runs its own Llama (dense
    pre-norm RMSNorm/RoPE/SwiGLU blocks; another block: model/'s ops, the closest modelled):
    the stack record's own rule (stacks.py)."""
    return _remembered((run.stack.name, id(c)), c, lambda: run.stack.implementation(c))


_REMEMBERED: dict = {}  # key (with id(config)) -> ((config,), value)


def _remembered(key: tuple, config: ModelConfig, make):
    """make() of a frozen config, remembered per config object: the layout search asks a
    stack's run config and implementation of the same config for every layout and stage
    (dataclasses.replace re-validates the config: a quarter of a torchtitan search)."""
    return remembered(_REMEMBERED, key, (config,), make, 1024)


def ledger_rows(run: StackRun, c: ModelConfig, layout: Layout, seq: int, tp_rank: int = 0,
                recompute: str | None = None,
                float8_tp: bool = False) -> tuple[Split, list[A.Row]]:
    """The saved tensors of one GPU's `seq` tokens under a stack other than torch: its
    implementation's ledger in 16-bit parameters without autocast (DeepSpeed's bf16 engine
    calls module.bfloat16(); torchtitan's FSDP2 MixedPrecisionPolicy gathers bf16
    parameters and the blocks compute in them; Megatron's Float16Module)."""
    rc = layout.recompute if recompute is None else recompute
    if run.stack.megatron_core:
        return M.rows(c, layout, seq, run.dropout > 0, run.kernel, rc, tp_rank, run.fp8)
    # (under float8 TP the ledger with torchao's Float8Linear: the same bytes, its linears
    # named as such, which the rule below reads)
    sp = _split(c, rc, implementation(run, c), TT.FLOAT8_LIBRARY if float8_tp else None)
    rows = A.rows(sp, layout, seq, tp_rank=tp_rank)
    # torchtitan's float8 TP saves its linears' inputs in fp8 (titan_tp.float8_tp_rows)
    return sp, (TT.float8_tp_rows(rows) if float8_tp else rows)


@lru_cache(maxsize=256)
def _split(c: ModelConfig, recompute: str, impl: str, fp8: str | None = None) -> Split:
    """The implementation's ledger in bf16 parameters (transformers' and torchtitan's with
    their SDPA kernel; `fp8`: its linears that library's fp8 linears)."""
    return split(replace(c, attention="sdpa") if impl != COURSE else c, None, recompute, impl,
                 BF16, fp8=fp8)


def stage_activations(run: StackRun, c: ModelConfig, layout: Layout, seq: int, stage: int,
                      kinds: tuple[tuple[str, int], ...], tp_rank: int,
                      float8_tp: bool = False) -> A.StageActivations:
    """A stage's activations under the stack's ledger (the same for every sharding stage:
    `layout` has zero 0), against the same ledger without recomputation."""
    return _stage_activations(run.name, run.dropout, run.kernel, c, layout, seq, stage, kinds,
                              tp_rank, run.fp8, float8_tp)


@lru_cache(maxsize=4096)
def _stage_activations(name: str, dropout: float, kernel: str, c: ModelConfig, layout: Layout,
                       seq: int, stage: int, kinds: tuple[tuple[str, int], ...],
                       tp_rank: int, fp8: str | None = None,
                       float8_tp: bool = False) -> A.StageActivations:
    run = StackRun(get_stack(name), dropout, kernel, fp8)
    own, kept = ledger_rows(run, c, layout, seq, tp_rank, float8_tp=float8_tp)
    _, whole = ledger_rows(run, c, layout, seq, tp_rank, NO_RECOMPUTE, float8_tp)
    # torchtitan's blocks compute in bf16 (FSDP2's param_dtype): its stage outputs are bf16
    out = PB.stage_outputs(layout, stage, seq, c.d_model, W16, c.vocab_size,
                           PB.logits_bytes(own.ledger)) if run.stack.pp_fwd_cache \
        else A.Linear()
    acts = A.stage_activations(kept, whole, layout, stage, kinds, output=out)
    extra = sum(x for _, x in reduce_scattered(run, c, layout, seq))
    if not extra:
        return acts
    per_mb = acts.per_micro_batch + A.Linear(extra * acts.layers, 0)
    again = acts.recomputed_block + A.Linear(-min(extra, acts.recomputed_block.a), 0)
    acts = replace(acts, per_micro_batch=per_mb, recomputed_block=again)
    return replace(acts, total=acts.held(acts.in_flight) + again)


def reduce_scattered(run: StackRun, c: ModelConfig, layout: Layout,
                     seq: int) -> list[tuple[str, int]]:
    """torchtitan's per-op SAC under TP + SP also keeps the two reduce-scattered sublayer
    outputs of each block (_c10d_functional.reduce_scatter_tensor is in its save list,
    torchtitan/models/llama3/infra/parallelize.py _op_sac_save_list): bf16 sequence shards,
    b = 1. A collective the ledger does not run: the stack adds it."""
    if not (run.stack.fsdp2_bf16 and layout.recompute == SELECTIVE and layout.tp > 1
            and layout.sp and implementation(run, c) == TITAN_IMPL):
        return []
    one = W16 * (seq // layout.tp) * c.d_model
    return [(f"{where} output reduce-scattered (sequence shard; SAC save list)", one)
            for where in ("attention", "feed-forward")]


def per_layer(run: StackRun, sp: Split, layout: Layout, seq: int,
              rows: list[A.Row], float8_tp: bool = False) -> tuple[tuple[str, int], ...]:
    """(name, bytes) of what one block saves for one micro-batch on this GPU (TP rank 0):
    the stack's implementation's saved tensors (the first kind of block when there are
    several)."""
    b = layout.micro_batch
    if run.stack.megatron_core:
        return tuple((n, x * b) for n, _, x in run.megatron_layer(sp.config, layout, seq))
    extra = []
    if not run.stack.torch_engines:
        extra = reduce_scattered(run, sp.config, layout, seq)
        sp, rows = ledger_rows(run, sp.config, layout, seq, float8_tp=float8_tp)
    kind = sp.ledger.groups[0][0]
    keep = [r for r in rows if r.place == BLOCK and r.record.repeat == kind]
    return tuple((r.record.name, r.bytes.at(b)) for r in keep) + \
        tuple((n, x * b) for n, x in extra)


def memory(run: StackRun, sp: Split, layout: Layout, precision: Precision, st: States,
           stage: int, kinds: tuple[tuple[str, int], ...], values: dict[str, int], seq: int,
           tp_rank: int = 0) -> tuple[list[Item], A.StageActivations]:
    c = sp.config
    items = state_items(run.stack, c, st, layout)
    if run.stack.megatron_core:
        acts = stage_activations(run, c, replace(layout, zero=0), seq, stage, kinds, tp_rank)
        what = ("Megatron-Core + TE saved tensors (16-bit" + ("; TE's linear inputs fp8"
                                                             if run.fp8 else "")
                + "; 1-byte dropout masks"
                + (f", dropout {run.dropout}" if run.dropout else ", no dropout") + f"; {run.kernel} attention)")
    else:
        own = _split(c, layout.recompute, implementation(run, c))
        f8 = TT.float8_tp(run.stack, precision, layout)
        acts = stage_activations(run, c, replace(layout, zero=0), seq, stage, kinds, tp_rank, f8)
        what = f"the {implementation(run, c)} implementation, bf16 parameters, no autocast" + (
            "; torchtitan's per-op selective checkpointing" if run.stack.fsdp2_bf16
            and layout.recompute == SELECTIVE else "") + (
            "; float8 TP: the linears' inputs saved in fp8" if f8 else "")
        buf = stage_buffers(own, values, kinds)
        if buf:
            items.append(Item("RoPE cos/sin tables (fp32 buffers)", "L_stage·2·T_max·(d_k/2)·4",
                              A.Linear(0, buf)))
    items.append(Item("activations of the k micro-batches in flight"
                      + ("" if layout.recompute == NO_RECOMPUTE else " + one block's recomputed part"),
                      f"k·(a·b + c) ({what}" + ("; the stage's output kept by the schedule"
                                               if run.stack.pp_fwd_cache and layout.pp > 1
                                               else "") + ")", acts.total, activations=True))
    if run.stack.fsdp2_bf16:
        items += engine_buffers(sp, layout, precision, st, stage, values, seq, tp_rank,
                                bf16_gathers=True,
                                keep_unsharded=run.stack.pp_keeps_unsharded)
    if run.async_tp and layout.tp > 1:
        items.append(async_tp_workspace(run, c, layout, precision, seq))
    if run.stack.zero_partitions and layout.sharding == 3:
        items.append(Item("ZeRO-3 working set: the largest module gathered (2 + 2 bytes per "
                          "element)", "4·largest_layer_params", A.Linear(0, 4 * largest_module(st)),
                          note="DeepSpeed's estimate_zero3_model_states_mem_needs counts it "
                               "(largest_layer_memory)"))
    return items, acts


def async_tp_workspace(run: StackRun, c, layout: Layout, precision: Precision,
                       seq: int) -> Item:
    """The symmetric-memory workspace of async TP (stacks.Stack.async_tp): the largest of
    a fused all-gather matmul's shard, b·⌈T/tp⌉·d_model·g (g = 1 byte under float8 TP, else
    2), and a fused matmul reduce-scatter's two bf16 output chunks, 2·b·⌈T/tp⌉·d_model·2."""
    rows = -(-seq // layout.tp)
    gather = 1 if precision.fp8 in run.stack.fp8_tp_gathers else 2
    per_b = max(rows * c.d_model * gather, 2 * rows * c.d_model * 2)
    # Outside the caching allocator (Item.outside_allocator): get_symm_mem_workspace's
    # _SymmetricMemory.empty_strided_p2p goes to the symmetric-memory backend's allocator,
    # CUDASymmetricMemoryAllocator::alloc (torch/csrc/distributed/c10d/symm_mem/
    # CUDASymmetricMemory.cu, read at pytorch 029e473; in 2024-12, torch 1963fc8's
    # generation, torch/csrc/distributed/c10d/CUDASymmetricMemory.cu, the same calls): the
    # driver's cuMemCreate of round_up(size, 16) + the signal pad, rounded up to the
    # allocation granularity, mapped by cuMemMap; c10's CUDACachingAllocator never sees it,
    # so torch.cuda.max_memory_reserved (what torchtitan reports) does not count it.
    return Item("async TP symmetric-memory workspace (one per TP group)",
                "max(b·⌈T/tp⌉·d_model·g, 2·b·⌈T/tp⌉·d_model·2)", A.Linear(per_b, 0),
                note="torch/distributed/_symmetric_memory get_symm_mem_workspace: grown to "
                     "the largest request, kept; allocated outside the caching allocator "
                     "(CUDASymmetricMemoryAllocator::alloc: cuMemCreate), so outside "
                     "max_memory_reserved",
                outside_allocator=True)

