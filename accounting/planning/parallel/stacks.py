"""Named training stacks: what each framework holds per GPU (`plan … --stack NAME`).

A stack brings its engine (how the model states are kept and sharded) and, for Megatron and
torchtitan, its own implementation of the model (what the layers save). `torch` is the
course model under torch's engines (DDP, ZeroRedundancyOptimizer, FSDP2 with autocast; the
default, checked on torch.distributed). The others:

  * megatron — Megatron-Core with Transformer Engine: bf16 parameters, fp32 gradients (the
    DDP grad buffer, `main_grad`), fp32 master copy and Adam moments; `--zero 1` is its
    distributed optimizer, which shards the master copy and the moments over the
    data-parallel ranks: 6 + 12/d bytes per parameter, 18 without
    (megatron/training/theoretical_memory_usage.py, compute_weight_and_optimizer_memory;
    megatron/core/optimizer/distrib_optimizer.py). With the distributed optimizer the
    parameter and gradient buffers are padded: each parameter starts at a multiple of 64
    elements, the buffer ends at a multiple of lcm(d, 128)
    (megatron/core/distributed/param_and_grad_buffer.py, _pad_start_of_param_if_needed,
    _pad_end_of_bucket_if_needed; one bucket, i.e. overlap_grad_reduce off). The vocabulary
    is padded to a multiple of 128·tp. Activations: the builder's MEGATRON implementation
    (accounting/ledger/builder/megatron.py), reduced by megatron.py.
  * deepspeed — DeepSpeed ZeRO 1–3 wrapping the implementation given (transformers' where
    its ops are modelled for the config, else the course model): 16-bit parameters and gradients, an fp32 master copy and Adam's moments (K = 12
    bytes per parameter, the ZeRO paper's §5.1), the optimizer state partitioned at stage 1,
    gradients too at 2, parameters too at 3. Partitions: stages 1–2 flatten the 16-bit
    parameters into one buffer padded to a multiple of 2·d elements
    (runtime/zero/stage_1_and_2.py: nccl_start_alignment_factor = 2), each rank owning 1/d
    of it; stage 3 pads each parameter to a multiple of d (partition_parameters.py,
    _aligned_size). Stage 0 is the paper's baseline (16 bytes per parameter; DeepSpeed's
    FP16_Optimizer).
  * torchtitan — FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
    (torchtitan/distributed/parallel_dims.py and models/llama3/infra/parallelize.py,
    apply_fsdp): fp32 sharded parameters, gradients and AdamW moments as torch's FSDP2, but
    the all-gathers move bf16 and the blocks compute in bf16 without autocast's copies.

DeepSpeed and torchtitan activations: the ledger of the implementation each runs
(stack_memory.implementation: transformers' for DeepSpeed, the builder's TORCHTITAN for
torchtitan's Llama) with bf16 parameters and no autocast (DeepSpeed's bf16 engine calls
module.bfloat16(); FSDP2's MixedPrecisionPolicy hands the blocks bf16 parameters);
torchtitan with --recompute selective: its per-op selective checkpointing (the builder's
policy region: Trace.policy_region; the SP reduce-scatters' outputs: stack_memory).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import lcm
from typing import Callable

from accounting.planning import compile_components as CC
from accounting.planning.parallel.activations import Linear
from accounting.planning.parallel.buffers import Item
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.megatron import padded_vocab
from accounting.planning.parallel.offload import DEEPSPEED_POLICIES, FSDP2_POLICIES, Policy
from accounting.planning.parallel.overlap import (DEEPSPEED_OVERLAP, MEGATRON_OVERLAP,
                                                  TORCH_OVERLAP, TORCHTITAN_OVERLAP, Overlap)
from accounting.planning.parallel.states import States
from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from accounting.ledger.builder.common import COURSE, TORCHTITAN as TITAN_IMPL, TRANSFORMERS
from accounting.units import BF16, DTYPE_BYTES, FP32
from accounting.registry import registrar

TORCH, MEGATRON, DEEPSPEED, TORCHTITAN = "torch", "megatron", "deepspeed", "torchtitan"
DEFAULT_STACK = TORCH  # `--stack` left out
W16, W32 = DTYPE_BYTES[BF16], DTYPE_BYTES[FP32]
ADAM_STATE_BYTES = 3 * W32  # fp32 master copy, m and v: the ZeRO paper's K = 12


@dataclass(frozen=True)
class Stack:
    name: str
    title: str
    engines: dict[int, str]  # sharding stage → the engine that runs it
    default_zero: int
    bf16: bool  # plans in 16-bit (the stack's own precision, not --precision)
    checked: str
    # ---- its behaviour: what the planner asks of a stack, never its name -----------------
    # which implementation of the model it runs (builder.walk's knob), given the config
    implementation: Callable[[ModelConfig], str] = lambda c: COURSE
    # the course model's states, buffers and activations under torch's own engines: the
    # planner builds them itself (plan.py) and torch.distributed checks them (distcheck)
    torch_engines: bool = False
    # Megatron-Core + Transformer Engine: its distributed optimizer's padded buffers, the
    # vocabulary padded to 128·tp, its own saved tensors (megatron.py, Korthikanti's terms),
    # dropout masks and the attention kernel as settings, models it does not plan refused
    megatron_core: bool = False
    # DeepSpeed ZeRO's partitions (flat 16-bit buffers, K = 12), the ZeRO-3 working set; data
    # parallelism only (tensor and pipeline parallelism are Megatron-DeepSpeed's)
    zero_partitions: bool = False
    # FSDP2 with a bf16 MixedPrecisionPolicy: bf16 all-gathers and blocks, per-op selective
    # checkpointing of its own Llama (which keeps the SP reduce-scattered outputs)
    fsdp2_bf16: bool = False
    # the fp8 it plans within its own precision (Precision.fp8 values)
    fp8: tuple[str, ...] = ()
    # runs its own model's fused attention whatever --attention says (Megatron-Core: TE's
    # flash attention, unless its kernel is set otherwise; torchtitan's Llama:
    # F.scaled_dot_product_attention), so context parallelism needs no --attention sdpa
    fused_attention: bool = False
    # the step's peak (peak.py): gradients held in a buffer allocated once, live at every
    # moment (Megatron-Core's main_grad buffer, megatron/core/distributed/
    # param_and_grad_buffer.py _ParamAndGradBuffer; DeepSpeed ZeRO's contiguous_gradients,
    # on by default), else freed by zero_grad(set_to_none=True) (torch, torchtitan)
    persistent_grads: bool = False
    # bytes per updated element the optimizer's update allocates for itself: None is the
    # torch stack's --optimizer (planning/optimizers.py); torchtitan builds torch.optim.AdamW
    # with foreach=True (torchtitan/components/optimizer.py OptimizersContainer; √v in fp32,
    # torch/optim/adam.py _multi_tensor_adam); Megatron's and DeepSpeed's fused Adam
    # (apex/TE FusedAdam, deepspeed/ops/adam/fused_adam.py: multi_tensor_adam) update in place
    update_temporary: int | None = None
    # with pipeline parallelism, FSDP2 keeps each stage's parameters gathered from the forward
    # to the backward pass: torchtitan's reshard_after_forward policy "default" is
    # `not pp_enabled` ("For PP, by default do not reshard after forward to avoid
    # per-microbatch all-gathers, which can be expensive and non-overlapped",
    # torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy; in 2024-12
    # torchtitan/parallelisms/parallelize_llama.py apply_fsdp)
    pp_keeps_unsharded: bool = False
    # --compile: torch.compile of each TransformerBlock of its own model, after the AC
    # wrapper (torchtitan/models/llama3/infra/parallelize.py parallelize_llama: "turn on
    # per-TransformerBlock compile after AC wrapping and before FSDP", apply_compile;
    # planning/compile_memory.py)
    compiles_blocks: bool = False
    # what --compile compiles unless --compile-components says (compile_components.py). The
    # torch stack follows torchtune's recipes (compile: training.compile_model and
    # compile_loss, full_finetune_single_device.py @1814feb): the loss too, which compiles
    # the chunked loss's cross-entropy only (a compiled standard loss's result is dropped
    # by the recipe: it runs eagerly). torchtitan's CompileConfig.components default
    # ["model", "loss"] (config/configs.py at b5bcd76; training.compile compiled the loss
    # since bbb1b61, 2025-04-02: components/loss.py build_cross_entropy_loss)
    compile_components: tuple[str, ...] = (CC.MODEL, CC.LOSS)
    # whether a compiled loss is its whole F.cross_entropy on the fp32 copy of the logits
    # (torchtitan's cross_entropy_loss under torch.compile: loss_memory.compiled_whole)
    compiles_standard_loss: bool = False
    # its pipeline is torch.distributed.pipelining's: each stage keeps its output of every
    # micro-batch in flight in the stage's fwd_cache until that micro-batch's backward
    # (pipeline_buffers.py; measured on gloo, tests/test_pipeline_live.py)
    pp_fwd_cache: bool = False
    # its --cp is torch's context_parallel (ring attention; ring_attention.py: the buffers of
    # its backward, inside one block's backward pass)
    ring_attention: bool = False
    # the module of planning/emit/ that writes its launch settings, `plan … --emit NAME`
    # (issue 42; torch's engines launched by accelerate's FSDP/DDP config)
    emitter: str = ""
    # --offload: the model states it can keep in CPU memory, option -> policy (offload.py)
    offload: dict[str, Policy] = field(default_factory=dict)
    # what its engines overlap with compute, each rule read from its source (overlap.py;
    # step.py applies it to the step time)
    overlap: Overlap = TORCH_OVERLAP
    # float8 tensor parallelism (issue 44): the fp8 libraries (Precision.fp8) under which its
    # TP all-gathers move fp8. torchtitan's apply_tp with float8 tensorwise TP
    # (models/llama3/infra/parallelize.py: Float8ColwiseParallel, Float8RowwiseParallel,
    # PrepareFloat8ModuleInput) runs torchao's float8_tensor_parallel.py (torchao 0.18):
    # _prepare_input_fn casts the sequence shard to fp8 (hp_tensor_to_float8_dynamic, e4m3)
    # before `redistribute` all-gathers it, and _prepare_output_fn's NoopFwToFloat8BwDynamic
    # casts the output's gradient to fp8 (e5m2) before the backward's all-gather; the
    # reduce-scatters stay bf16, the LM head (not a Float8Linear) gathers bf16
    fp8_tp_gathers: tuple[str, ...] = ()
    # async TP (`--async-tp`; torchtitan's parallelism.enable_async_tensor_parallel: inductor's
    # micro-pipeline TP rewrites the TP matmuls into torch's symmetric-memory ops). torch
    # 2.13's torch/distributed/_symmetric_memory/__init__.py keeps one workspace per group
    # (get_symm_mem_workspace: _group_name_to_workspace_tensor, re-allocated only to grow, so
    # held from the first use to the end), sized by the largest request: a fused all-gather
    # matmul asks for its shards' bytes (_pipelined_multi_all_gather_and_consume: Σ
    # x.numel()·x.element_size(), the sequence shard b·(T/tp)·d, fp8 under float8 TP), a
    # fused matmul reduce-scatter for two output chunks (_pipelined_produce_and_all2all:
    # out_chunks[0] bytes × 2, b·(T/tp)·d in bf16); the gathered input and the stacked
    # partial outputs are ordinary tensors the unfused path makes too (parallel/comms)
    async_tp: bool = False
    # with TP, its loss runs under torch's loss_parallel on vocab-sharded logits (torchtitan's
    # train_context: parallel_dims.loss_parallel_enabled, on by default), whose fused backward
    # holds three fp32 logits-sized temporaries, not F.cross_entropy's two (titan_tp.py)
    loss_parallel: bool = False
    # its loss casts the LM head's bf16 logits to fp32 and frees them before the backward
    # pass (torchtitan: F.cross_entropy(pred.flatten(0, 1).float(), …), then `del pred`),
    # whose fp32 temporaries cannot use the freed bf16 block: the caching allocator keeps it
    # reserved at the loss's backward (titan_tp.py freed_logits)
    loss_frees_bf16_logits: bool = False


STACKS: dict[str, Stack] = {}


register = registrar(STACKS, "stack")


register(Stack(TORCH, "the course model under torch's engines (DDP, ZeroRedundancyOptimizer, "
               "FSDP2; autocast)", {0: "DDP", 1: "DDP + ZeroRedundancyOptimizer",
                                    2: "FSDP SHARD_GRAD_OP", 3: "FSDP FULL_SHARD"}, 0, False,
               "torch.distributed (accounting/distcheck)", torch_engines=True, pp_fwd_cache=True,
               ring_attention=True,
               emitter="accelerate", offload=FSDP2_POLICIES, overlap=TORCH_OVERLAP))
register(Stack(MEGATRON, "Megatron-Core with Transformer Engine (bf16 parameters, fp32 gradient "
               "buffer, fused norm+linear, fused activations, flash attention)",
               {0: "Megatron DDP (fp32 grad buffer)", 1: "Megatron distributed optimizer"}, 0,
               True, "Korthikanti et al. 2022's equations (1)-(6) and Megatron's "
               "theoretical_memory_usage.py (tests/test_stacks.py); read from source: it needs a "
               "GPU", megatron_core=True, fp8=("te",), fused_attention=True,
               persistent_grads=True, update_temporary=0, emitter=MEGATRON,
               overlap=MEGATRON_OVERLAP))
register(Stack(DEEPSPEED, "DeepSpeed ZeRO wrapping the implementation given (transformers' "
               "model in bf16 where modelled, else the course model; 16-bit parameters and "
               "gradients, fp32 master copy and Adam moments, K = 12)",
               {0: "DeepSpeed without ZeRO (FP16_Optimizer)", 1: "DeepSpeed ZeRO-1",
                2: "DeepSpeed ZeRO-2", 3: "DeepSpeed ZeRO-3"}, 0, True,
               "the ZeRO paper's Figure 1 and DeepSpeed's own estimators "
               "(estimate_zero2/3_model_states_mem_needs, tests/test_stacks.py); the "
               "activations on transformers' model in bf16 (tests/test_stack_implementations.py)",
               implementation=lambda c: _wrapped(c), zero_partitions=True,
               persistent_grads=True, update_temporary=0, emitter=DEEPSPEED,
               offload=DEEPSPEED_POLICIES, overlap=DEEPSPEED_OVERLAP))
register(Stack(TORCHTITAN, "its own Llama under FSDP2 with MixedPrecisionPolicy("
               "param_dtype=bf16, reduce_dtype=fp32), no autocast", {2: "FSDP2 SHARD_GRAD_OP, bf16 all-gathers",
                                                   3: "FSDP2 FULL_SHARD, bf16 all-gathers"}, 3,
               True, "FSDP2 with a bf16 MixedPrecisionPolicy on torch.distributed's fake "
               "backend (accounting/distcheck); its block's saved tensors and per-op selective "
               "checkpointing on the CPU (tests/test_stack_implementations.py, test_stacks.py)",
               implementation=lambda c: TITAN_IMPL if llama_block(c) else COURSE,
               fsdp2_bf16=True, fp8=("torchao",), fused_attention=True,
               update_temporary=W32, pp_keeps_unsharded=True, compiles_blocks=True,
               pp_fwd_cache=True, ring_attention=True, emitter=TORCHTITAN,
               overlap=TORCHTITAN_OVERLAP, fp8_tp_gathers=("torchao",), async_tp=True,
               loss_parallel=True, loss_frees_bf16_logits=True,
               compiles_standard_loss=True))


def get_stack(name: str) -> Stack:
    try:
        return STACKS[name]
    except KeyError:
        raise UsageError(f"unknown --stack {name!r}; choose among {', '.join(STACKS)}") from None


def problems(stack: Stack, config: ModelConfig, layout: Layout, dropout: float) -> list[str]:
    """Why this stack cannot plan this model and layout (one sentence each, naming the fix)."""
    c, out = config, []
    if layout.zero not in stack.engines and layout.dp > 1:
        out.append(f"--stack {stack.name} runs --zero among {', '.join(map(str, stack.engines))} "
                   f"({'; '.join(f'{z}: {e}' for z, e in stack.engines.items())}), not "
                   f"--zero {layout.zero}")
    if dropout and not stack.megatron_core:
        out.append(f"--dropout is the megatron stack's (its masks are counted there); the "
                   f"{stack.name} stack plans without dropout: leave --dropout out")
    if stack.zero_partitions and (layout.tp > 1 or layout.pp > 1):
        out.append("--stack deepspeed plans ZeRO data parallelism around the implementation "
                   "given (tensor and pipeline parallelism are Megatron-DeepSpeed's, not "
                   "modelled); give --tp 1 --pp 1, or use --stack megatron")
    if stack.fsdp2_bf16 and layout.recompute == "selective" and not llama_block(c):
        out.append("--stack torchtitan with --recompute selective plans per-op checkpointing of "
                   "torchtitan's dense Llama block; this model's block is not one: use "
                   "--recompute none or full")
    if stack.fsdp2_bf16 and layout.tp > 1 and not layout.sp:
        # torchtitan's apply_tp (models/llama3/infra/parallelize.py) has no switch for it: the
        # norms are SequenceParallel() and wo/w2 RowwiseParallel(output_layouts=Shard(1)), so
        # the block input and the reduce-scattered outputs are sequence shards
        out.append("--stack torchtitan runs tensor parallelism with sequence parallelism "
                   "(its apply_tp shards the norms' sequence): add --sp")
    if stack.megatron_core:
        why = [(c.num_experts is not None, "a mixture of experts"), (c.mla, "latent attention"),
               (c.block != "sequential", f"the {c.block} block"),
               (c.norm_placement != "pre", f"{c.norm_placement} norms"),
               (c.qk_norm != "none", "QK-norm"),
               (c.mlp_kind.activation not in ("silu", "gelu", "gelu_tanh"), f"the {c.mlp} MLP")]
        for bad, what in why:
            if bad:
                out.append(f"--stack megatron plans dense pre-norm GPT/Llama layers, and "
                           f"{c.name} has {what} (not modelled there): use --stack torch")
                break
        if layout.ep > 1:
            out.append("--stack megatron with --ep is not planned; use --stack torch")
    return out


def _wrapped(c: ModelConfig) -> str:
    """DeepSpeed wraps the implementation given: transformers' where its ops are modelled
    for this config (recipes.transformers_gap), else model/'s (and model/'s for the models
    transformers runs with eager attention only, recipes.eager_only: the stacks plan SDPA)."""
    from accounting.planning.recipes import eager_only, transformers_gap
    return TRANSFORMERS if transformers_gap(c) is None and eager_only(c) is None else COURSE


def llama_block(c: ModelConfig) -> bool:
    """A block torchtitan's Llama runs (torchtitan/models/llama3/model/model.py): dense,
    pre-norm RMSNorm, RoPE, SwiGLU, no QK-norm, every block alike, and transformers' ops
    modelled for it (recipes.transformers_gap: the same Llama layout)."""
    from accounting.planning.recipes import transformers_gap
    return (c.num_experts is None and not c.mla and c.block == "sequential"
            and c.norm == "rmsnorm" and c.norm_placement == "pre" and c.qk_norm == "none"
            and c.positions == "rope" and c.mlp == "swiglu" and len(set(c.layer_kinds)) == 1
            and transformers_gap(c) is None)


def check(stack: Stack, config: ModelConfig, layout: Layout, dropout: float) -> None:
    found = problems(stack, config, layout, dropout)
    if found:
        raise UsageError(found[0])


# ---- model states ------------------------------------------------------------------------
def _megatron_sizes(config: ModelConfig, st: States, layout: Layout) -> list[int]:
    """Elements of each parameter Megatron holds on this GPU, state-dict order: the
    vocabulary tables padded to 128·tp rows (padded_vocab) on each TP rank."""
    rows = padded_vocab(config, layout.tp) // layout.tp
    return [(rows * t.rest if t.tensor.tp_dim == 0 and t.tensor.dims[0] == ("V",) else t.numel)
            for u in st.units for t in u.tensors]


def _megatron_buffer(sizes: list[int], layout: Layout) -> tuple[int, int]:
    """(elements of the param/grad buffer, elements of this rank's optimizer shard)."""
    n = sum(sizes)
    if layout.sharding != 1:
        return n, n
    end = 0
    for size in reversed(sizes):  # params[::-1], starts padded to 64
        end = -(-end // 64) * 64 + size
    total = -(-end // lcm(layout.dp, 128)) * lcm(layout.dp, 128)
    return total, total // layout.dp


def _deepspeed_elements(st: States, layout: Layout) -> tuple[int, int, int]:
    """(16-bit parameter, 16-bit gradient, optimizer-partition) elements on this rank."""
    z, d = layout.sharding, layout.dp
    sizes = [t.numel for u in st.units for t in u.tensors]
    n = sum(sizes)
    if z == 0:
        return n, n, n
    if z <= 2:
        part = -(-n // (2 * d)) * 2  # flat buffer padded to a multiple of 2·d, 1/d each
        return n, (n if z == 1 else part), part
    part = sum(-(-s // d) for s in sizes)  # each parameter padded to a multiple of d
    return part, part, part


def state_items(stack: Stack, config: ModelConfig, st: States, layout: Layout) -> list[Item]:
    """The model-state items of one GPU (parameters, gradients, master copy, moments) under
    a stack other than torch."""
    z, d = layout.sharding, layout.dp
    if stack.megatron_core:
        buf, shard = _megatron_buffer(_megatron_sizes(config, st, layout), layout)
        dist = z == 1
        sym = "⌈B/d⌉" if dist else "N_stage"
        pad = " (buffer B padded)" if dist else ""
        items = [Item("parameters (bf16)" + pad, "2·B" if dist else "2·N_stage",
                      Linear(0, W16 * buf), model_state=True, per_element=W16),
                 Item("gradients (fp32 main_grad buffer)" + pad, "4·B" if dist else "4·N_stage",
                      Linear(0, W32 * buf), model_state=True, per_element=W32)]
        scope = ", distributed optimizer shard" if dist else ""
        items += [Item(f"master copy of the parameters (fp32{scope})", f"4·{sym}",
                       Linear(0, W32 * shard), model_state=True, per_element=W32),
                  Item(f"Adam moments: first moment m (fp32{scope})", f"4·{sym}",
                       Linear(0, W32 * shard), model_state=True, per_element=W32),
                  Item(f"Adam moments: second moment v (fp32{scope})", f"4·{sym}",
                       Linear(0, W32 * shard), model_state=True, per_element=W32)]
        return items
    if stack.zero_partitions:
        p, g, o = _deepspeed_elements(st, layout)
        part = "Ψ/N_d" if z else "Ψ"
        return [Item("parameters (16-bit" + (", partitioned)" if z == 3 else ")"),
                     f"2·{'Ψ/N_d' if z == 3 else 'Ψ'}", Linear(0, W16 * p), model_state=True,
                     per_element=W16),
                Item("gradients (16-bit" + (", partitioned)" if z >= 2 else ")"),
                     f"2·{'Ψ/N_d' if z >= 2 else 'Ψ'}", Linear(0, W16 * g), model_state=True,
                     per_element=W16),
                Item("optimizer state: fp32 master copy, Adam moments m and v"
                     + (" (partitioned)" if z else ""), f"12·{part}",
                     Linear(0, ADAM_STATE_BYTES * o), model_state=True,
                     per_element=ADAM_STATE_BYTES,
                     note="at the step DeepSpeed also casts this rank's 16-bit gradient "
                          "partition to fp32 (4·Ψ/N_d) while the activations are freed; not in "
                          "the total")]
    # torchtitan: FSDP2's fp32 shards, as torch's (states.py)
    fs = ", FSDP shards)" if z >= 2 else ")"
    b_sym = "⌈rows/d⌉·cols" if z >= 2 else ""
    n = f"4·Σ{b_sym}" if z >= 2 else "4·N_stage"
    return [Item("parameters (fp32" + fs, n, Linear(0, W32 * st.params), model_state=True,
                 per_element=W32),
            Item("gradients (fp32" + fs, n, Linear(0, W32 * st.grads), model_state=True,
                 per_element=W32),
            Item("AdamW moments: first moment m (fp32)", "4·Σ(this rank's rows)·cols",
                 Linear(0, W32 * st.moments), model_state=True, per_element=W32),
            Item("AdamW moments: second moment v (fp32)", "4·Σ(this rank's rows)·cols",
                 Linear(0, W32 * st.moments), model_state=True, per_element=W32)]
