"""The step's peak on one GPU of a layout, found the way the one-GPU plan finds it
(planning/memory.py MemoryModel.peak_terms): the moments of a training step, each with what
is live at it, the largest of them the peak. The items of plan.py stay the breakdown (their
sum is what the step holds at one time or another); a moment keeps the items live at it and
adds the transients the sum leaves out:

  * the start of the backward pass, on the stage holding the LM head: the loss's fp32
    gradients, nll_loss's and log_softmax's, 2·b·(T/cp)·⌈V/tp⌉·4 bytes (tools/autograd/
    derivatives.yaml; torch/csrc/autograd/engine.cpp evaluate_function frees a node's saved
    tensors right after it runs: both gradients are live at log_softmax's backward;
    tests/test_peak.py measures it on one GPU, ../shared/gpu/README.md on an H200), and the
    CUDA kernels' own saves (planning/cuda_peak.py: the loss under CUDA autocast,
    transformers' logits, the SDPA backend), per micro-batch in flight. On the other stages
    the backward pass starts from a received gradient (the pipelining receive buffers,
    already an item). The gradients are live here only when the rank runs more than one
    micro-batch (those of the earlier ones; optimizer.zero_grad(set_to_none=True) leaves
    none from the last step), or when the stack keeps them in a persistent buffer
    (Stack.persistent_grads: Megatron's main_grad buffer, DeepSpeed's contiguous gradients).
  * the optimizer's update: the model states, the gradients, the update's temporaries
    (torch.optim.AdamW's foreach path makes √v for every element it updates,
    torch/optim/adam.py _multi_tensor_adam: torch._foreach_sqrt; bf16-master: the master
    copy's fp32 gradients), the persistent buffers (DDP's buckets, pipelining's receive
    buffers, RoPE tables), no activations, no FSDP unit gathered (Item.backward_only).

  * the embedding's backward on the first stage under TP (the stage's last nodes, then
    FSDP2's post-backward of the root unit): the whole V×d_model embedding gradient DTensor
    computes (buffers._fsdp_embedding), no block's recomputed activations.

Under the interleaved schedule at m < 2p each backward moment is split by the local chunk
whose passes it is in (Moment.chunk): FSDP2's accumulation is that chunk's only.

Every moment holds the cuBLAS workspaces (cuda_peak.workspace). Where a gradient temporary
inside one block's backward pass exceeds both (the naive softmax's), it is not modelled,
as on one GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from accounting.planning import cuda_peak as CP
from accounting.planning import loss_memory as LM
from accounting.planning.optimizers import get_optimizer
from accounting.planning.parallel import titan_tp as TT
from accounting.planning.parallel import ring_attention as RA
from accounting.planning.parallel.activations import Linear
from accounting.planning.parallel.layout import NO_RECOMPUTE

from accounting.units import BF16, DTYPE_BYTES, FP32, INT64

# the two moments' names (not the ledger's phase names, records.BACKWARD)
AT_BACKWARD, AT_UPDATE = "start of the backward pass", "optimizer update"
AT_BLOCK_BACKWARD = "a block's backward pass"


@dataclass(frozen=True)
class Moment:
    """One moment of the step on one GPU: which items are live at it, and what it adds."""
    name: str
    what: str
    extra: Linear  # transients beyond the items, a·b + c in the micro-batch b
    activations: bool  # the in-flight activations are live
    gradients: bool  # the gradient items are live
    backward_buffers: bool  # the items live only through the passes (FSDP's gathered units)
    recomputed: bool = False  # one block's recomputed activations are live (recomputation)
    fewer: int = 0  # micro-batches in flight fewer than the stage's k (its backward passes done)
    # what the caching allocator keeps reserved at this moment beyond its live tensors, from
    # the step's history (a freed block too small for this moment's requests; reserved.py)
    history: Linear = Linear()
    # the backward's own gradient buffers (Item.pass_grads) are live: False at the loss's
    # backward and the forward's end, which come before the head's backward allocates them
    # (autograd runs the loss's nodes, then the LM head's, whose weight gradient is the
    # root unit's first; FSDP2 reduce-scatters the root's at the backward's end)
    pass_grads: bool = True
    # the embedding's backward on the first stage (its whole gradient under FSDP2 × TP is
    # live here only: Item.embedding)
    embedding: bool = False
    # the one-round interleaved schedule (torch's ScheduleInterleaved1F1B at m < 2p): the
    # local chunk whose backward passes this moment is in. Each chunk's m backwards run
    # together, the last chunk's first (number_of_rounds = 1: microbatches_per_round = m),
    # and torch reduces a chunk's gradients right after its last backward (2.13:
    # schedules.py _add_reduce_grad, "reduce_grad frees memory and we want to schedule it
    # just after the last backward-like stage"; 2024-12: stage.py backward_maybe_with_nosync
    # ran FSDP2's post_backward at last_backward), freeing that chunk's unsharded fp32
    # accumulation before the next chunk's first backward: FSDP2's accumulation holds only
    # this chunk's share (Item.per_chunk); the sharded gradients of the chunks already
    # reduced stay (counted whole: an upper bound)
    chunk: int | None = None
    # a block's backward pass: the loss's, LM head's and final norm's saved tensors were
    # freed when their nodes ran (StageActivations.head)
    head_freed: bool = False
    # the forward's end and the loss's backward: the blocks FSDP2 reshards after their
    # forward are not gathered yet (buffers.Item.resharded_after_forward)
    after_forward: bool = False

    def holds(self, item) -> bool:
        if not item.on_gpu:
            return False
        if getattr(item, "embedding", False):
            return self.embedding
        if getattr(item, "pass_grads", False) and not self.pass_grads:
            return False
        if item.activations:
            return self.activations
        if item.accumulated:  # FSDP2's unsharded accumulation: in the passes, once begun
            return self.gradients and self.backward_buffers
        if item.name.startswith("gradients"):
            return self.gradients
        if item.backward_only:
            return self.backward_buffers
        return True


def _rank_values(values: dict[str, int], tp: int, local: int) -> dict[str, int]:
    """The shape symbols as one TP rank of T/cp tokens sees them (heads, d_ff and V split)."""
    v = dict(values)
    for s in ("h", "h_kv", "d_ff", "2d_ff", "V"):  # (2d_ff: Gemma 4's double-wide MLPs)
        if s in v:
            v[s] = -(-v[s] // tp)
    v["T"] = local
    return v


def _cuda(sp, values: dict[str, int], autocast, implementation: str, tp: int, local: int,
          kinds: tuple[tuple[str, int], ...], last: bool, in_flight: int) -> tuple[Linear, str]:
    """cuda_peak's adjustments at the start of the backward pass, as this rank holds them:
    the attention kernels' of the stage's blocks (each micro-batch in flight), the loss's on
    the last stage."""
    acts = sp.ledger.activations
    v1 = _rank_values({**values, "B": 1}, tp, local)
    count = dict(kinds)
    total, what = Linear(0, 0), []
    for a in CP.attention(acts, values):
        kind = next((k for k in count if a.what.startswith(f"{k} blocks")), None)
        if kind is None:  # a kind of block this stage holds none of (DeepSeek's dense first
            continue  # layers on stage 0 only)
        per = a.bytes.evaluate({**v1, **{k: 0 for k in count}, kind: count[kind]})
        total = total + Linear(per * in_flight, 0)
        what.append(a.rule)
    if last:
        for a in CP.loss(acts, autocast, implementation, sp.ledger.logits_dtype):
            total = total + Linear(a.bytes.evaluate(v1), 0)
            what.append(a.rule)
    return total, "; ".join(what)


def _ring(sp, layout, values: dict[str, int], precision, stack,
          implementation: str) -> tuple[Linear, str]:
    """Context parallelism's ring attention backward, inside one block's backward pass
    (ring_attention.py; torch's context_parallel, Stack.ring_attention): its gathered K
    and V and fp32 gradient buffers, for the heads SDPA is given (h after repeat_kv)."""
    if layout.cp == 1 or not stack.stack.ring_attention:
        return Linear(), ""
    # the implementation's ledger without recomputation (every tensor it makes): the torch
    # stack's (the run's), or the stack's own (torchtitan's Llama)
    if stack.stack.torch_engines:
        from accounting.planning.parallel.shards import split
        sp = split(sp.config, precision.autocast, NO_RECOMPUTE, implementation,
                   param_dtype=precision.param_dtype, fp8=precision.fp8)
    else:
        from accounting.planning.parallel.stack_memory import ledger_rows
        sp = ledger_rows(stack, sp.config, layout, values["T"] // layout.cp,
                         recompute=NO_RECOMPUTE)[0]
    repeated = any(a.name.startswith("K repeated (repeat_kv") for a in sp.ledger.activations)
    heads = values["h"]
    x = RA.backward_buffers(layout, values["T"], heads, heads if repeated else values["h_kv"],
                            values["d_k"], precision.message_bytes)
    return x, (
        "; the ring attention's backward (context parallelism): the gathered K and V of the "
        "whole sequence and its fp32 gradient buffers")


def _loss_linear(sp, values: dict[str, int], tp: int, local: int, loss: str, chunks: int,
                 param_bytes: int, micro_batch: int, compiled_loss: bool = False):
    """The loss recipe's region (loss_memory.py) on the last stage's rank, as a·b + c:
    (what the backward's start adds, what the forward's end adds, the region)."""
    region = LM.region(sp.ledger.activations, loss, param_bytes, compiled_loss)
    rank = _rank_values(values, tp, local)

    def linear(e) -> Linear:
        with_b, without_b = e.split("B")
        one = LM.add_values({**rank, "B": 1}, loss, chunks)
        at_b = LM.add_values({**rank, "B": micro_batch}, loss, chunks)
        # Liger's chunk rows (no B factor) at the layout's micro-batch: exact at it
        return Linear(with_b.evaluate(one), without_b.evaluate(at_b))
    return (linear(region.kept + region.backward),
            None if region.forward is None else linear(region.kept + region.forward), region)


def moments(sp, layout, precision, stage: int, kinds, values: dict[str, int], local: int,
            micro_batches: int, in_flight: int, st, stack, optimizer: str, arch: str | None,
            implementation: str, no_update_temporary: bool, loss_name: str = LM.STANDARD,
            loss_chunks: int = LM.DEFAULT_CHUNKS,
            compiled: Linear = Linear(), frozen_head: bool = False,
            compiled_loss: bool = False) -> tuple[Moment, ...]:
    """The moments of this GPU's step (`micro_batches` per step on this rank, `in_flight`
    at its first backward pass; `st` its states). `no_update_temporary`: the update makes
    none on the GPU (LoRA's adapters: a few; an optimizer offloaded to the CPU). `loss`:
    the loss recipe (loss_memory.py) on the last stage: its region replaces F.cross_
    entropy's gradients, and a chunked or fused loss adds the forward's end. `compiled`:
    the change to the in-flight activations under --compile and --offload activations
    (plan.py _activations_change), at every moment that holds them; `frozen_head`: the LM head is not trained (LoRA: Liger makes no
    grad_weight); `compiled_loss`: --compile-components names the loss: the chunked loss
    compiled (loss_memory.py), or under a stack that compiles its whole F.cross_entropy
    (Stack.compiles_standard_loss: torchtitan) the standard loss (under TP its
    loss_parallel: titan_tp.compiled_loss_parallel)."""
    last = stage == layout.pp - 1
    work = CP.workspace(arch)
    ws = Linear(0, work.bytes.evaluate({}))
    tp = layout.tp
    grads_live = micro_batches > 1 or stack.stack.persistent_grads
    f32, i64 = DTYPE_BYTES[FP32], DTYPE_BYTES[INT64]
    own = stack.stack.torch_engines  # the run's ledger is the torch stack's (autocast's dtypes)
    # the log-probabilities' dtype: the ledger's under the torch stack (fp32 unless the
    # whole model runs in bf16); the other stacks' losses upcast the logits (torchtitan's
    # cross_entropy_loss on pred.float(), Megatron's fp32 vocab-parallel cross-entropy,
    # transformers' ForCausalLMLoss under DeepSpeed)
    lsm = next((r for r in sp.ledger.activations if r.name == "log-softmax of the logits"),
               None) if own else None
    lb = lsm.bytes_per_element if lsm is not None else f32
    # nll_loss's and log_softmax's two gradients; a fused kernel's one, in the logits' dtype
    # (flash-attn's cross-entropy under llm-foundry: builder/megatron.py flash_cross_entropy)
    n_grads, gb = 2, lb
    if own and lsm is None:
        n_grads, gb = 1, next(r.bytes_per_element for r in sp.ledger.activations
                              if r.name == "logits (output embedding)")
    # the 0-dim loss the training loop holds (last stage); at the update, the int64 token
    # ids (first stage) and targets (last stage) of the last micro-batch
    loss = Linear(0, lb if last else 0)
    inputs = Linear(i64 * local * ((stage == 0) + last), 0)
    extra, what = ws + loss + compiled, [f"{work.rule}: {work.what}"]
    forward, region = None, None
    # torchtitan's loss compiled (--compile-components model,loss): without TP the rule of
    # loss_memory.compiled_whole, under TP (loss_parallel) titan_tp.compiled_loss_parallel
    whole = last and loss_name == LM.STANDARD and compiled_loss \
        and stack.stack.compiles_standard_loss and tp == 1
    lp = TT.compiled_loss_parallel(stack.stack, tp, compiled_loss) \
        if last and loss_name == LM.STANDARD else None
    # under PP the last stage's logits are counted already, in the pipeline's fwd_cache
    # (pipeline_buffers.py)
    fwd_cache_logits = layout.pp > 1 and stack.stack.pp_fwd_cache
    if last and loss_name != LM.STANDARD:
        start, forward, region = _loss_linear(sp, values, tp, local, loss_name, loss_chunks,
                                              0 if frozen_head else precision.master_bytes,
                                              layout.micro_batch, compiled_loss)
        extra = extra + start
        what.insert(0, f"--loss {loss_name}: {region.what_backward}")
        fwd_name = f"end of the forward pass (--loss {loss_name})"
        fwd_what = f"--loss {loss_name}: {region.what_forward}"
    elif lp is not None:
        rank_logits = local * -(-values["V"] // tp)
        start = Linear(lp.backward * rank_logits, 0)
        forward = Linear(((0 if fwd_cache_logits else lp.logits) + lp.temporary)
                         * rank_logits, 0)
        extra = extra + start
        what.insert(0, f"{lp.what_backward} (T/cp = {local:,}, ⌈V/tp⌉ = "
                       f"{-(-values['V'] // tp):,})")
        fwd_name, fwd_what = "end of the forward pass (the compiled loss)", lp.what_forward
    elif whole:
        # torchtitan's compiled cross_entropy_loss (loss_memory.compiled_whole): its bf16
        # logits saved in place of the fp32 log-probabilities its ledger keeps, one bf16
        # gradient; no moment at the forward's end above this one
        # (under PP the fwd_cache holds the saved logits already: pipeline_buffers.py)
        rule = LM.compiled_whole(f32, DTYPE_BYTES[BF16], fwd_cache_logits)
        with_b, without_b = (rule.kept + rule.backward).split("B")
        rank = _rank_values(values, tp, local)
        extra = extra + Linear(with_b.evaluate({**rank, "B": 1}), without_b.evaluate(rank))
        what.insert(0, rule.what_backward)
    elif last:
        vocab = -(-values["V"] // tp)
        fused = TT.loss_gradients(stack.stack, tp)  # torchtitan's loss_parallel (titan_tp.py)
        n_grads = fused.count if fused is not None else n_grads
        extra = extra + Linear(n_grads * local * vocab * gb, 0)
        what.insert(0, f"the loss's gradients {n_grads}·b·(T/cp)·⌈V/tp⌉·{gb} "
                       f"(T/cp = {local:,}, ⌈V/tp⌉ = {vocab:,}"
                       + (f"; {fused.what}" if fused is not None else "") + ")")
    if own:
        adj, rules = _cuda(sp, values, precision.autocast, implementation, tp, local, kinds,
                           last and (region is None or region.cuda_loss), in_flight)
        extra = extra + adj
        if rules:
            what.append(rules)
    held = "the states, " + ("the gradients of the earlier micro-batches, " if grads_live
                             else "") + "the activations in flight, the engines' buffers; "
    # the loss's backward (the last stage), then each block's, which with recomputation
    # holds one block's recomputed activations too (MemoryModel's "one block, recomputed")
    freed = TT.freed_logits(stack.stack, local, -(-values["V"] // tp)) \
        if last and loss_name == LM.STANDARD and not whole and lp is None else None
    out = [Moment(AT_BACKWARD + " (the loss's backward)", held + "; ".join(
        what + ([f"reserved beside: {freed.what}"] if freed else [])), extra, True,
        grads_live, True, history=freed.bytes if freed else Linear(), pass_grads=False,
        after_forward=True)] \
        if last else []
    if forward is not None:  # the forward's end: the chunks, or Liger's chunk (loss_memory.py),
        # or the compiled loss_parallel's temporaries (titan_tp.py)
        fwd = extra + start.times(-1) + forward
        out.append(Moment(fwd_name, held + fwd_what, fwd, True, grads_live, True,
                          pass_grads=False, after_forward=True))
    ring, ring_what = _ring(sp, layout, values, precision, stack, implementation)
    block = AT_BLOCK_BACKWARD + (
        " (its recomputed activations live)" if layout.recompute != "none" else "")
    if stage < layout.pp - 1 and layout.vpp == 1 and 1 < micro_batches <= layout.pp - stage \
            and not stack.stack.persistent_grads:
        # 1F1B runs all of this stage's m forwards before its first backward (torch's
        # Schedule1F1B: warmup_chunks = min(m, p − s)): the first backward pass starts with
        # k = m micro-batches in flight and no gradient yet; once it is done, every gradient
        # exists and k − 1 micro-batches are in flight (measured on gloo at m = p:
        # tests/test_pipeline_live.py)
        first = held.replace("the gradients of the earlier micro-batches, ", "")
        out.append(Moment(block + ", the first micro-batch's", first + f"{work.rule}"
                          + ring_what, ws + loss + compiled + ring, True, False, True, True,
                          head_freed=True))
        out.append(Moment(block + ", a later micro-batch's (k − 1 in flight)",
                          held + f"{work.rule}" + ring_what, ws + loss + compiled + ring, True,
                          True, True, True, 1, head_freed=True))
    else:  # (on the last stage without recomputation too: the loss's moment holds no
        # gradient buffer of the pass, Moment.pass_grads, so a block's backward may exceed it)
        out.append(Moment(block, held + f"{work.rule}" + ring_what,
                          ws + loss + compiled + ring, True, grads_live, True, True,
                          head_freed=True))
    if layout.vpp > 1 and layout.micro_batches < 2 * layout.pp:
        out = [replace(m, name=f"{m.name} (local chunk {j}'s backward passes)", chunk=j)
               for m in out for j in range(layout.vpp)]
    if stage == 0 and tp > 1:
        # the embedding's backward, the stage's last node, then FSDP2's post-backward of the
        # root unit (buffers._fsdp_embedding): the current micro-batch's activations are
        # freed, no block's recomputed activations live, every block's gradient made
        out.append(Moment("the embedding's backward (its whole gradient, TP)",
                          held.replace("the gradients of the earlier micro-batches, ",
                                       "the gradients, ") + f"{work.rule}",
                          ws + loss + compiled, True, True, True, False, 1, embedding=True,
                          chunk=0 if layout.vpp > 1 and layout.micro_batches < 2 * layout.pp
                          else None))
    temp, temp_what = 0, ""
    if not no_update_temporary:
        per = stack.stack.update_temporary
        if per is None:  # the torch stack: --optimizer's and the precision's
            opt = get_optimizer(optimizer)
            per = (precision.moment_bytes if opt.foreach_temporary else 0) + \
                (DTYPE_BYTES[FP32] if precision.master else 0)
            if opt.step_temporary:  # torchao's compiled step, one tensor at a time: the
                # largest trained local tensor's (an upper bound under ZeRO-1's partition)
                big = max((t.numel for u in st.units for t in u.tensors if t.trained),
                          default=0)
                temp_what = f", the largest tensor's step buffers ({opt.step_temporary}·{big:,})"
                temp = opt.step_temporary * big
        temp += per * st.moments
        if per * st.moments:
            temp_what = f", the update's temporaries ({per} bytes per element updated)" \
                + temp_what
    update = Moment(AT_UPDATE, f"the states, the gradients{temp_what}, the persistent buffers; "
                            f"{work.rule}", ws + loss + inputs + Linear(0, temp), False, True,
                    False)
    return (*out, update)
