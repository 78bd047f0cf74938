"""One call for a multi-GPU plan: per-GPU memory, FLOPs, communication and step time of a
layout. Returns data (the records: plan_records.py); views.py renders it.

Stages shown: the first, the second (the most loaded of the middle stages: it holds
p − 1 micro-batches and receives from both sides) and the last; every other stage holds
no more memory and no more work than one of these.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import prod

from accounting.analysis.workload import check_workload
from accounting.architecture.config import ModelConfig
from accounting.runtime import names
from accounting.runtime.errors import UsageError
from accounting.planning.compute import check_mfu, exact
from accounting.planning.gpus import Hardware, Interconnect
from accounting.planning.optimizers import DEFAULT_OPTIMIZER, is_default
from accounting.ledger.builder.common import COURSE
from accounting.ledger.records import EXECUTED, USEFUL
from accounting.planning.memory import Precision
from accounting.planning.mfu import COMPUTE, SIX_N, check_convention, check_scope
from accounting.planning.parallel import activations as A
from accounting.planning.parallel import comms as C
from accounting.planning.parallel import lora_states as LS
from accounting.planning.parallel import offload as OF
from accounting.planning import activation_offload as AO
from accounting.planning import compile_components as CC, compile_memory as CM, loss_memory as LM
from accounting.planning.parallel import peak as PK
from accounting.planning.parallel import pipeline_buffers as PB
from accounting.units import DTYPE_BYTES
from accounting.planning.parallel import vision as TV
from accounting.planning.parallel.fit import fit as _fit, shortfall as _shortfall
from accounting.planning.parallel.buffers import Item, engine_buffers, stage_buffers
from accounting.planning.parallel.layout import SELECTIVE, Layout, check_layout, stage_layers
from accounting.planning.parallel.shards import BLOCK, FIRST, Split, split
from accounting.planning.parallel import titan_tp as TT
from accounting.planning.parallel.stack_memory import StackRun, ledger_rows, per_layer
from accounting.planning.parallel.stack_memory import reduce_scattered
from accounting.planning.parallel.stack_memory import implementation as stack_implementation
from accounting.planning.parallel.stack_memory import memory as stack_memory
from accounting.planning.parallel.stacks import W16, check as check_stack
from accounting.planning.parallel.states import (States, counted, stage_tensors, states,
                                                  zero1_worst_rank)
from accounting.planning.parallel.optimizer_state import check as check_optimizer
from accounting.planning.parallel import fsdp_streams as FS
from accounting.planning.parallel.optimizer_state import (fp8_gathered, fp8_items,
                                                          optimizer_items, update_flops)
from accounting.planning.parallel.step import group_links, stage_flops, step_time
# the records it assembles (plan_records.py)
from accounting.planning.parallel.plan_records import ParallelPlan, StagePlan

FP8_GATHER = 1  # bytes an element of a float8 TP all-gather moves (e4m3 / e5m2)


def _shown(config: ModelConfig, layout: Layout) -> list[int]:
    """The first stage, the second, the last, and with an uneven split the middle stage with
    the most blocks (the slowest), the first of them."""
    pp = layout.pp
    shown = {0, min(1, pp - 1), pp - 1}
    if pp > 2:
        sizes = [len(stage_layers(config, layout, s)) for s in range(pp)]
        shown.add(max(range(1, pp - 1), key=lambda s: (sizes[s], -s)))
    return sorted(shown)


def _states_key(dl: Layout) -> Layout:
    """What the model states depend on (not the batch, recomputation or SP): the search's
    layouts that differ only there share them."""
    return replace(dl, sp=False, micro_batch=1, global_batch=dl.dp, recompute="none")


@lru_cache(maxsize=4096)
def _units(sp: Split, seq: int, b: int, dl: Layout, stage: int, tp_rank: int,
           extra: tuple = ()) -> list:
    """A stage's units (`dl` with zero 0: the sharding stages of a layout hold the same
    tensors, and their sums per unit are remembered per unit's tensors: states.py _padded);
    `extra`: units the first stage holds beside the model's (a vision tower's:
    parallel/vision.py)."""
    return stage_tensors(sp, sp.values(seq, b), dl, stage, tp_rank) + (
        list(extra) if stage == 0 else [])


@lru_cache(maxsize=4096)
def _states(sp: Split, seq: int, b: int, dl: Layout, stage: int, tp_rank: int,
            dp_rank: int | None, extra: tuple = ()):
    """`extra`: units the first stage holds beside the model's (a vision tower's:
    parallel/vision.py)."""
    units = _units(sp, seq, b, replace(dl, zero=0), stage, tp_rank, extra)
    rank = dp_rank if dp_rank is not None else (
        zero1_worst_rank(units, dl) if dl.sharding == 1 else 0)
    return units, states(units, dl, rank)


@lru_cache(maxsize=4096)
def _activations(sp: Split, plain: Split, layout: Layout, local: int, tp_rank: int, stage: int,
                 kinds: tuple, output_bytes: int = 0,
                 hidden: bool = False) -> A.StageActivations:
    """A stage's activations (the same for every sharding stage: `layout` has zero 0);
    `output_bytes`: the residual stream's bytes per element, where torch's pipelining keeps
    the stage's output of each micro-batch in flight (pipeline_buffers.py)."""
    rows = (A.rows(sp, layout, local, tp_rank=tp_rank),
            A.rows(plain, layout, local, tp_rank=tp_rank))
    out = PB.stage_outputs(layout, stage, local, sp.config.d_model, output_bytes,
                           sp.config.vocab_size, PB.logits_bytes(sp.ledger) if output_bytes else 0,
                           hidden)
    return A.stage_activations(*rows, layout, stage, kinds, A.mtp_rows(sp, rows[0], layout.tp),
                               out)


def run_split(config: ModelConfig, p: Precision, recompute: str = "none",
              implementation: str = COURSE) -> Split:
    """The split ledger of a run in precision `p` (its autocast, parameter dtype, fp8) of
    `implementation`'s ops (recipes.py: model/'s, or transformers' for a Hugging Face
    model, as the one-GPU plan runs it)."""
    return split(config, p.autocast, recompute, implementation, param_dtype=p.param_dtype,
                 fp8=p.fp8)


def data_layout(layout: Layout) -> Layout:
    """The layout the sharding and the data-parallel collectives see: dp·cp ranks (the same
    micro-batches each: the global batch scaled with them)."""
    if layout.cp == 1:
        return layout
    return replace(layout, dp=layout.dp * layout.cp, cp=1,
                   global_batch=layout.global_batch * layout.cp)


def activation_bytes(precision: Precision) -> int:
    """Bytes per element of the activations the TP and PP collectives move
    (Precision.message_bytes: 2 in bf16 or under autocast, 4 in fp32)."""
    return precision.message_bytes


def stage_plan(sp: Split, layout: Layout, precision: Precision, seq: int, stage: int,
               act_rows: tuple[list[A.Row], list[A.Row]], values: dict[str, int],
               tp_rank: int = 0, dp_rank: int | None = None,
               stack: StackRun = StackRun(), counting: str = EXECUTED,
               optimizer: str = DEFAULT_OPTIMIZER, finetune=None,
               implementation: str = COURSE, offload: frozenset = frozenset(),
               loss: str = LM.STANDARD, tower=None) -> StagePlan:
    """One GPU of a stage: TP rank `tp_rank`, data-parallel rank `dp_rank` (default: 0, or
    under ZeroRedundancyOptimizer the rank with the most AdamW state). `act_rows` are the
    saved tensors of a rank's T/cp tokens (the course model's: another stack plans its own).
    `finetune`: a LoRA plan (planning/finetune.py; lora_states.py: its model states).
    `tower`: a vision tower's TowerRun (parallel/vision.py): its tensors and saved
    activations on the first stage."""
    c = sp.config
    layers = stage_layers(c, layout, stage)
    kinds = sp.kinds(layers)
    # context parallelism: the cp ranks of a group hold the same parameters, so gradients
    # are reduced (and ZeRO/FSDP shards spread) over dp·cp ranks (Megatron-LM's data-parallel
    # group with context parallelism; torchtitan's dp_shard_cp mesh); each rank runs T/cp tokens
    dl = data_layout(layout)
    local = seq // layout.cp
    # (ZeroRedundancyOptimizer's most loaded rank is torch's; the other stacks' states are
    # the same on every data-parallel rank)
    units, st = _states(sp, seq, layout.micro_batch, _states_key(dl), stage, tp_rank,
                        dp_rank if dp_rank is not None or stack.stack.torch_engines else 0,
                        TV.state_units(tower))
    z, d, p = dl.sharding, dl.dp, precision
    if not stack.stack.torch_engines:
        items, acts = stack_memory(stack, sp, dl, precision, st, stage, kinds, values, local,
                                   tp_rank)
        items += fp8_items(sp, units, p, values)  # Megatron + TE: its fp8 weight copies
        items = OF.apply(items, offload, stack.stack)
        return _finish(sp, layout, precision, seq, stage, layers, kinds, units, st, items,
                       acts, values, tp_rank, W16 if stack.stack.fsdp2_bf16 else None,
                       counting, once_per_step=stack.stack.pp_keeps_unsharded and layout.pp > 1,
                       fp8_tp_gathers=stack.stack.fp8_tp_gathers)
    lora = None if finetune is None else LS.split_states(units, dl, st.dp_rank, finetune)
    if lora is not None:
        items = LS.state_items(finetune, units, dl, st.dp_rank, optimizer)
        update = None if is_default(optimizer) else update_flops(LS.parts(units, False), dl,
                                                                lora.trained, optimizer)
    else:
        b_sym = "⌈rows/d⌉·cols" if z >= 2 else ""
        # with ep > 1: N_stage counts E/ep experts of each MoE block (their FSDP shards over the
        # dp/ep ranks: ⌈rows/e⌉·cols, e = dp/ep)
        n_sym = "(N_dense + N_experts/ep)" if st.expert_numel else "N_stage"
        fsdp_params = f"{p.master_bytes}·Σ{b_sym}" if z >= 2 else f"{p.master_bytes}·{n_sym}"
        shards = ", FSDP shards" if z >= 2 else ""
        items = [Item(f"parameters ({p.param_dtype}{shards})", fsdp_params,
                      A.Linear(0, st.params * p.master_bytes), model_state=True,
                      per_element=p.master_bytes)]
        # a frozen tensor (DeepSeek-V3.2's indexer under transformers) has neither
        # (states.py FROZEN)
        frozen = any(not t.trained for t, _ in counted(units))
        t_sym = f"({n_sym} − N_frozen)" if frozen else n_sym
        items.append(Item(f"gradients ({p.grad_dtype}{shards})",
                          f"{p.grad_bytes}·Σ{b_sym}" + (" (trained tensors)" if frozen else "")
                          if z >= 2 else f"{p.grad_bytes}·{t_sym}",
                          A.Linear(0, st.grads * p.grad_bytes), model_state=True,
                          per_element=p.grad_bytes))
        items += optimizer_items(units, dl, st, optimizer, p, t_sym)
        update = None if is_default(optimizer) else update_flops(units, dl, st, optimizer)
        items += fp8_items(sp, units, p, values)
    if stage == 0:  # issue 41: a frozen vision tower's weights (a trained one is in `st`)
        items += TV.frozen_items(tower, dl, p)
    buf = stage_buffers(sp, values, kinds)
    if buf:
        bias = c.num_experts is not None and c.router_bias
        items.append(Item("RoPE cos/sin tables (fp32 buffers)"
                          + (" and the routers' correction biases" if bias else ""),
                          f"L_stage·2·T_max·({'d_rope' if c.mla else 'd_rot' if c.rotary_dim else 'd_k'}/2)·4"
                          + (" + L_moe·E·4" if bias else ""),
                          A.Linear(0, buf)))
    plain = run_split(c, precision, implementation=implementation) if finetune is None \
        else LS.lora_split(finetune, precision.autocast)
    # the residual stream's dtype: the parameters' (autocast's matmuls add into it)
    acts = _activations(sp, plain, replace(layout, zero=0), local, tp_rank, stage, kinds,
                        DTYPE_BYTES[p.param_dtype] if stack.stack.pp_fwd_cache else 0,
                        loss == LM.FUSED_LINEAR)
    if tower is not None and stage == 0:  # issue 41: the tower's saves (parallel/vision.py)
        acts = TV.with_saves(acts, TV.saved_at(tower, layout.micro_batch))
    copies = acts.copies_held(acts.in_flight)
    items.append(Item("activations of the k micro-batches in flight"
                      + ("" if layout.recompute == "none" else " + one block's recomputed part"),
                      "k·(a·b + c) (saved tensors, TP/SP-split" + (
                          "; the stage's output kept by the schedule" if layout.pp > 1 else "")
                      + ")",
                      acts.total + copies.times(-1), activations=True))
    if copies.c:
        items.append(Item("bf16 copies of the matmul weights (k micro-batches)",
                          "k·2·N_matmul_stage", copies, activations=True,
                          note="autocast casts each weight for its matmul, which saves the copy "
                               "until its backward pass"))
    items += (engine_buffers(sp, dl, precision, st, stage, values, local, tp_rank)
              if lora is None else LS.buffer_items(sp, dl, precision, lora, stage, values, local))
    items = OF.apply(items, offload, stack.stack)
    out = _finish(sp, layout, precision, seq, stage, layers, kinds, units, st, items, acts,
                  values, tp_rank, None, counting, update, lora)
    if stage == 0 and tower is not None:  # issue 41: the tower's matmuls (parallel/vision.py)
        out = replace(out, flops=TV.with_flops(out.flops, tower, layout.micro_batch))
    return out


def _finish(sp: Split, layout: Layout, p: Precision, seq: int, stage: int, layers, kinds,
            units, st: States, items: list[Item], acts: A.StageActivations,
            values: dict[str, int], tp_rank: int, gather_bytes: int | None = None,
            counting: str = EXECUTED, update: int | None = None,
            lora: LS.Parts | None = None, once_per_step: bool = False,
            fp8_tp_gathers: tuple[str, ...] = ()) -> StagePlan:
    """The stage's communication and FLOPs, beside its memory items (`gather_bytes`: what
    FSDP2 gathers per element, when not the master's: bf16 under torchtitan's policy;
    `fp8_tp_gathers`: the stack's float8 TP, stacks.Stack.fp8_tp_gathers)."""
    c = sp.config
    dl, local = data_layout(layout), seq // layout.cp
    buf = stage_buffers(sp, values, kinds)
    act_bytes = activation_bytes(p)
    norms = [(t, n) for t, n in counted(units) if sp.sequence_norm(t.tensor)]
    comms = (C.tensor_parallel(layout, len(layers), stage, layout.micro_batch, local, c.d_model,
                               act_bytes, c.positions == "learned",
                               (sum(n for _, n in norms), sum(n * t.numel for t, n in norms)),
                               p.grad_bytes,
                               FP8_GATHER if p.fp8 in fp8_tp_gathers else None)
             + C.pipeline(layout, stage, layout.micro_batch,
                          local // (layout.tp if layout.sp else 1), c.d_model, act_bytes)
             + C.context_parallel(layout, len(layers), layout.micro_batch, seq,
                                  -(-c.kv_heads // layout.tp) * c.d_k, act_bytes)
             + (C.data_parallel(dl, st, p, buf, gather_bytes or p.master_bytes,
                                fp8_gathered(sp, p), once_per_step) if lora is None
                else LS.collectives(dl, p, lora, buf)))
    if dict(sp.ledger.tied) and layout.pp > 1 and stage in (0, layout.pp - 1):
        table = next(t for t in sp.tensors if t.place == FIRST and t.matmul_weight)
        comms += C.tied_embedding(layout, prod(table.sizes(values, layout.tp)), p.grad_bytes)
    moe_layers = 0
    if c.num_experts is not None:
        kinds_of = c.layer_kinds  # a property that builds the tuple: read it once
        moe_layers = sum(1 for i in layers if kinds_of[i].moe)
    comms += C.expert_parallel(layout, c, moe_layers, layout.micro_batch * seq, c.d_model,
                               act_bytes)
    flops = stage_flops(sp, layout, stage, kinds, seq, st if lora is None else lora.trained,
                        tp_rank, counting)
    if update is not None:  # another optimizer's update (`update`: its FLOPs on this rank)
        flops = replace(flops, adamw=update)
    return StagePlan(stage, len(layers), st, tuple(items), acts, flops, tuple(comms), kinds)


def _activations_change(rows, s, precision, micro_batch: int, compile: bool,
                        offload: bool, sac: bool = False, unread: int = 0) -> A.Linear:
    """The change to stage `s`'s in-flight block activations, as a·b + c (≤ 0): --compile,
    what a compiled block does not save (compile_memory.py's shares of the rank's rows);
    --offload activations, the blocks' saved tensors torchtune's OffloadActivations moves to
    the CPU (activation_offload.py: ≥ 1 KiB a tensor at this micro-batch, the batch's token
    ids aside), one block's kept in flight. The head's and the loss's stay, as do the
    embedding's (not moved here: an upper bound by those few). `sac`: torchtitan's per-op
    selective checkpointing, its blocks compiled inside it (`rows`: its own ledger's, no
    autocast: `precision` None); `unread`: bytes a block saves at b = 1 outside the rows
    that its compiled partition drops (compile_memory.SAC_UNREAD_SCATTER)."""
    count = dict(s.kinds)
    total = A.Linear(-unread * sum(count.values()) * s.activations.in_flight, 0)
    if not (compile or offload):  # (every share 0, nothing moved: no row changes anything)
        return total
    autocast = precision.autocast if precision is not None else None
    shares = CM.removed_shares([r.record for r in rows], autocast, sac) if compile \
        else [0] * len(rows)
    flight = {}
    for r, k in zip(rows, shares):
        if r.place != BLOCK or not count.get(r.record.repeat, 0):
            continue
        n = count[r.record.repeat] * s.activations.in_flight
        left = A.Linear(int(r.bytes.a * (1 - k)), int(r.bytes.c * (1 - k)))
        total = total + A.Linear(r.bytes.a - left.a, r.bytes.c - left.c).times(-n)
        rec = r.record
        if offload and rec.saved and rec.module not in AO.KEPT_MODULES and \
                rec.name not in AO.INPUTS and \
                r.bytes.at(micro_batch) // max(rec.copies, 1) >= AO.MIN_OFFLOAD_SIZE:
            total = total + left.times(-n)
            flight[rec.repeat] = flight.get(rec.repeat, A.Linear()) + left
    return sum(flight.values(), total)


def parallel_plan(config: ModelConfig, layout: Layout, seq: int | None = None, *,
                  precision: Precision, hardware: Hardware | None = None,
                  net: Interconnect | None = None, mfu=None, margin="0",
                  tokens: int | None = None, stages: list[int] | None = None,
                  tp_rank: int = 0, dp_rank: int | None = None,
                  stack: StackRun = StackRun(), mfu_convention: str = EXECUTED,
                  mfu_scope: str = COMPUTE, hfu: bool = False,
                  measured_tokens_per_second=None, optimizer: str = DEFAULT_OPTIMIZER,
                  finetune=None, implementation: str = COURSE,
                  offload: frozenset = frozenset(), loss: str = "standard",
                  loss_chunks: int | None = None, compile: bool = False,
                  tower=None, screen: bool = False,
                  compile_components: frozenset | None = None) -> ParallelPlan | int:
    """The plan of one GPU per stage shown (TP rank 0 — it holds the most of an uneven
    split — and data-parallel rank 0, or the given ranks). `mfu` is read under
    `mfu_convention` and `mfu_scope` (planning/mfu.py): in the compute scope the rate each
    stage executes its FLOPs at (executed, or causal: the attention core's causal pairs, as
    a causal flash kernel runs them), the bubble and the communication added; end to end a
    whole-step MFU (an HFU with `hfu`). `optimizer`: planning/optimizers.py's name (the
    torch stack; the other stacks plan their own Adam). `finetune`: a LoRA plan
    (planning/finetune.py resolve): the base frozen, the adapters trained (lora_states.py).
    `implementation`: whose ops the torch stack plans (recipes.py: model/'s, or
    transformers' as the one-GPU plan of a Hugging Face model runs them); the other stacks
    run their own (stack_memory.implementation). `tower`: a vision-language model's
    TowerRun (parallel/vision.py), the torch stack's full training only. `screen` (the
    layout search, which keeps only that of a layout that does not fit): such a layout
    comes back as its shortfall in bytes, an int, without its largest micro-batch and its
    step time (its groups' links are still checked: group_link's refusal stays).
    `compile_components`: what --compile compiles (compile_components.py; None: the
    stack's default, Stack.compile_components)."""
    check_convention(mfu_convention)
    check_scope(mfu_scope)
    if mfu_scope == COMPUTE and mfu_convention == SIX_N:
        raise UsageError("--mfu-convention 6N has no per-stage count (no attention, no "
                         "layer split); use it with --mfu-scope end-to-end")
    if mfu_scope == COMPUTE and hfu:
        raise UsageError("--hfu reads an end-to-end figure as a hardware FLOPs utilization; in "
                         "--mfu-scope compute every executed FLOP (recomputation included) is "
                         "already timed at the figure: give --mfu-scope end-to-end with --hfu")
    measured = None
    if measured_tokens_per_second is not None:
        measured = exact(measured_tokens_per_second, "--measured-tokens-per-s")
        if measured <= 0:
            raise UsageError(f"--measured-tokens-per-s must be positive, got "
                             f"{measured_tokens_per_second}")
    seq = config.context_length if seq is None else seq
    check_workload(seq, layout.global_batch, config)
    # Megatron (flash) and torchtitan (SDPA) run a fused kernel whatever --attention says:
    # the plan counts the attention that runs, and context parallelism needs nothing more
    config = stack.as_run(config)
    check_layout(config, layout, seq)
    check_stack(stack.stack, config, layout, stack.dropout)
    if stack.async_tp and layout.tp == 1:
        raise UsageError("--async-tp overlaps tensor parallelism's collectives with its "
                         "matmuls: give --tp T (T > 1) --sp with it")
    check_optimizer(optimizer, data_layout(layout), precision)
    if not stack.stack.torch_engines and (not is_default(optimizer) or precision.fp8 not in (
            None, *stack.stack.fp8)):
        raise UsageError(f"--stack {stack.name} plans its own Adam in its own precision; give "
                         f"--optimizer with --stack torch (torchtitan takes fp8-torchao, "
                         f"megatron fp8-te and fp8-te-current)")
    if stack.stack.megatron_core:  # TE's fp8 (--fp8-format hybrid) or bf16: the run's ledger
        stack = replace(stack, fp8=precision.fp8)
    source, predicted, shares = "mfu", None, ()
    if mfu is None and mfu_scope == COMPUTE and finetune is None:  # issue 39: op by op
        from accounting.planning.kernel_time import kernel_rate
        # at the whole sequence: a CP rank runs 1/cp of each kind of its work (stage_flops),
        # so the whole sequence's mix of GEMMs and attention sets its rate (a T/cp-token
        # sequence has cp times too few attention pairs for that mix)
        predicted = kernel_rate(config, precision, layout.recompute, seq,
                                layout.micro_batch, layout.tp, hardware)
    if predicted is not None:
        u, source, shares = predicted
    else:
        u = check_mfu("0.5" if mfu is None else mfu)
    m = exact(margin, names.arg("margin"))
    if not 0 <= m < 1:
        raise UsageError(f"{names.arg('margin')} must be in [0, 1) (a share of the memory), "
                         f"got {margin}")
    if finetune is not None:
        LS.check(finetune, layout, stack.name)
    # the stage asked for, not the one in effect: on one data-parallel rank nothing is
    # sharded, yet DeepSpeed's ZeRO-Offload and FSDP2's CPUOffloadPolicy run there (the
    # ZeRO-Offload paper's single-GPU runs; fully_shard on a one-rank mesh)
    OF.check(frozenset(offload), stack.stack, layout.zero)
    if OF.ACTIVATIONS in offload and not stack.stack.torch_engines:
        raise UsageError(f"--offload activations is planned with --stack torch (torchtune's "
                         f"OffloadActivations); leave it out with --stack {stack.name}")
    chunks = LM.check(loss, loss_chunks, config)
    compiled_loss = CC.LOSS in CC.resolve(compile, compile_components,
                                          stack.stack.compile_components)
    if compile:
        # the stack first: another stack's config (deepspeed's eager attention) would be
        # refused as the model's ("… has attention other than SDPA") for a model that has it
        if not (stack.stack.torch_engines or stack.stack.compiles_blocks):
            raise UsageError(f"--compile is planned with --stack torch or torchtitan; leave "
                             f"it out with --stack {stack.name}")
        CM.check(config)
        if finetune is not None and layout.recompute != "full":  # as one GPU's (plan.py)
            raise UsageError("--compile with LoRA is planned under --recompute full (a LoRA "
                             "block's own partition is not measured): give --recompute full, "
                             "or leave --compile or --lora-rank out")
    if loss != LM.STANDARD and not stack.stack.torch_engines:
        raise UsageError(f"--loss {loss} is planned with --stack torch (the other stacks run "
                         f"their own loss); leave --loss out with --stack {stack.name}")
    impl = implementation if stack.stack.torch_engines else COURSE
    sp = run_split(config, precision, layout.recompute, impl) if finetune is None else \
        LS.lora_split(finetune, precision.autocast, layout.recompute)
    plain = run_split(config, precision, implementation=impl) if finetune is None else \
        LS.lora_split(finetune, precision.autocast)
    values = sp.values(seq, layout.micro_batch)
    local = seq // layout.cp  # each context-parallel rank saves its T/cp tokens' tensors
    # the course model's saved tensors (a stack other than torch plans its own: stack_memory)
    rows = ((A.rows(sp, layout, local, tp_rank=tp_rank),
             A.rows(plain, layout, local, tp_rank=tp_rank))
            if stack.stack.torch_engines else ([], []))
    counting = USEFUL if mfu_convention != EXECUTED else EXECUTED
    plans = tuple(stage_plan(sp, layout, precision, seq, s, rows, values, tp_rank, dp_rank,
                             stack, counting, optimizer, finetune, impl, frozenset(offload),
                             loss, tower)
                  for s in (stages if stages is not None else _shown(config, layout)))
    arch = hardware.arch if hardware is not None else None
    # --compile under torchtitan: its own Llama's blocks (the stack's ledger, no autocast),
    # inside its checkpoint wrapper (compile_memory.py)
    titan = compile and not stack.stack.torch_engines
    crows = ledger_rows(stack, config, layout, local, tp_rank)[1] if titan else rows[0]
    sac = titan and layout.recompute == SELECTIVE
    unread = sum(x for n, x in reduce_scattered(stack, config, layout, local)
                 if n.startswith(CM.SAC_UNREAD_SCATTER)) if sac else 0
    plans = tuple(replace(s, moments=PK.moments(
        sp, layout, precision, s.stage, s.kinds, values, local, layout.micro_batches,
        s.activations.in_flight, s.states, stack, optimizer, arch, impl,
        finetune is not None or OF.moves_optimizer(frozenset(offload), stack.stack),
        loss, chunks, _activations_change(crows, s, None if titan else precision,
                                          layout.micro_batch, compile,
                                          OF.ACTIVATIONS in offload, sac, unread),
        finetune is not None, compiled_loss)) for s in plans)
    # FSDP2's side streams' segments, reserved beside the default stream's (fsdp_streams.py)
    plans = tuple(replace(s, pools=FS.side_pools(data_layout(layout), s.states, s.items, stack,
                                                 precision,
                                                 fp8_gathered(sp, precision), finetune is None))
                  for s in plans)
    at = None
    if config.num_experts is not None and config.moe_capacity_factor is not None:
        def at(s: StagePlan, b: int) -> A.StageActivations:  # C = ⌈c·b·T·k/E⌉ at this b
            r = (A.rows(sp, layout, local, tp_rank=tp_rank, micro_batch=b),
                 A.rows(plain, layout, local, tp_rank=tp_rank,
                        micro_batch=b))
            return A.stage_activations(*r, layout, s.stage, s.kinds)
    if screen and (short := _shortfall(plans, layout, hardware, m)):
        if hardware.peak_flops:  # the step time's refusal (a group beyond a node, no network)
            group_links(layout, net)
        return short
    fit = _fit(plans, layout, hardware, m, at)
    time = None
    if hardware is not None and hardware.peak_flops:
        timer = None
        if source == "kernels":  # issue 39: in-node collectives from NCCL's measured table
            from accounting.planning.kernel_time import collective_timer
            timer = collective_timer(hardware)
        time = step_time(layout, [s.flops for s in plans], [list(s.collectives) for s in plans],
                         hardware.peak_flops, u, net, timer, stack.stack.overlap, shares,
                         async_tp=stack.async_tp)
        if source == "kernels":  # the update by the bytes it moves (memory-bound)
            from accounting.planning.kernel_time import optimizer_seconds
            time = replace(time, optimizer=max(optimizer_seconds(
                s.states.moments, precision, optimizer, hardware) for s in plans))
    return ParallelPlan(config, layout, seq, precision, hardware, net, u, plans, fit, time, tokens,
                        stack, per_layer(stack, sp, layout, local, rows[0],
                                         TT.float8_tp(stack.stack, precision, layout)), mfu_convention,
                        mfu_scope, hfu, measured, optimizer, finetune, source,
                        stack_implementation(stack, config) if not stack.stack.torch_engines
                        else impl if finetune is None else finetune.implementation,
                        frozenset(offload),
                        (("loss", loss), ("loss_chunks", chunks if loss == LM.CHUNKED else None),
                         ("compile", bool(compile)), ("compile_loss", compiled_loss)))
