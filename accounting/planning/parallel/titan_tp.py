"""torchtitan's tensor parallelism as its apply_tp runs it (issue 44): three rules of the
torchtitan stack record (stacks.Stack.loss_parallel, loss_frees_bf16_logits,
fp8_tp_gathers) that change what a rank holds, each read from the source it follows and
measured on the CPU where it runs (tests/test_titan_tp.py: torch's fake process group,
saved-tensor hooks and torch's MemTracker): loss_parallel's backward temporaries and the
freed bf16 logits at the loss's backward (allocated, reserved), and what its float8 TP's
blocks save (float8_tp_rows, at the end).

What torchtitan's TP is (torchtitan/parallelisms/parallelize_llama.py apply_tp at 9dec370,
the commit of its 2024-12 benchmark tables; models/llama3/infra/parallelize.py today):
ColwiseParallel on wq/wk/wv/w1/w3, RowwiseParallel(output_layouts=Shard(1)) on wo/w2,
SequenceParallel on the norms, PrepareModuleInput all-gathering each sublayer's input
once, and the LM head ColwiseParallel with its logits left vocab-sharded
(output_layouts=Shard(-1), use_local_output=False) for torch's loss_parallel.

Already planned elsewhere, and measured by tests/test_titan_tp.py on a torchtitan block
parallelized with that plan: DTensor's all-gather is its own autograd op, so the linears
after it save the gathered, full-sequence input (activations.py: the GATHERED rows, not
Megatron's re-gather); torchao's float8 TP gathers in fp8 and async TP's symmetric-memory
workspace (stacks.Stack.fp8_tp_gathers, async_tp; stack_memory.async_tp_workspace).

FSDP2's float8 all-gather (`--precision fp8-torchao-fsdp`: Float8LinearConfig's
enable_fsdp_float8_all_gather) is planned by buffers.py (the gathered weights one byte an
element); torchtitan's precompute_float8_dynamic_scale_for_fsdp after the optimizer step
(torchao/float8/fsdp_utils.py: torch._foreach_norm over the float8 weights, stacked, one
all-reduce) holds one fp32 amax a weight: not planned (bytes, not megabytes).

The first rule, the loss's backward under loss_parallel. torchtitan's loss is
F.cross_entropy(pred.flatten(0, 1).float(), labels) (train.py at 9dec370, not compiled:
"TODO: compiling loss function causes CUDA errors"), run inside its train_context, which
enters torch.distributed.tensor.parallel.loss_parallel() whenever TP is on
(parallel_dims.loss_parallel_enabled = tp > 1 and not training.disable_loss_parallel, the
default). loss_parallel replaces log_softmax and nll_loss on the vocab-sharded logits
(torch/distributed/tensor/parallel/loss.py, torch 2.13): its forward keeps the fp32
log-probabilities x (what F.cross_entropy keeps), but its backward fuses the two
gradients into `_nll_loss_and_log_softmax_backward`: grad_input = torch.zeros_like(x),
then `(grad_input + torch.exp(x)) * grad_output`; so x, grad_input, exp(x) and their sum
are live at once (then x, grad_input, the sum and the product): three fp32 temporaries the
size of the rank's logits beside the saved x, where F.cross_entropy's unfused backward
holds two (nll_loss's gradient and log_softmax's, peak.py). Today's torchtitan
(components/loss.py _LossParallelCrossEntropy.backward) writes the same fused expression.
The forward holds at most the bf16 logits, their fp32 copy, `shifted` and exp(shifted):
3.5 such tensors, below the backward's 4.
"""
from __future__ import annotations

from dataclasses import dataclass

# torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward: the
# zeros_like gradient, exp(x), and their sum (then the product), live with the saved x
LOSS_PARALLEL_TEMPORARIES = 3
LOSS_PARALLEL_SOURCE = ("torch.distributed.tensor.parallel.loss_parallel's fused backward "
                        "(loss.py _nll_loss_and_log_softmax_backward: zeros_like(x), exp(x), "
                        "their sum)")


@dataclass(frozen=True)
class LossGradients:
    """The fp32 temporaries the size of the rank's logits the loss's backward holds."""
    count: int
    what: str


def loss_gradients(stack, tp: int) -> LossGradients | None:
    """Under a stack whose loss runs under torch's loss_parallel when TP is on
    (Stack.loss_parallel: torchtitan), the loss's backward temporaries; None where the
    plain F.cross_entropy rule of peak.py holds (no TP, or another stack)."""
    if not (stack.loss_parallel and tp > 1):
        return None
    return LossGradients(LOSS_PARALLEL_TEMPORARIES, LOSS_PARALLEL_SOURCE)


@dataclass(frozen=True)
class CompiledLossParallel:
    """torchtitan's compiled loss under loss_parallel: bytes per element of the rank's
    logits, b·(T/cp)·⌈V/tp⌉: what the loss's backward adds, and what its forward's end adds
    beyond the saved fp32 log-probabilities (the ledger's row): the logits themselves
    (unless counted already) and a temporary."""
    backward: int
    logits: int
    temporary: int
    what_backward: str
    what_forward: str


# torchtitan's cross_entropy_loss compiled (training.compile, components/loss.py at e7c0cae)
# on vocab-sharded bf16 logits under loss_parallel, measured on one TP rank of 4 on the fake
# process group (tests/titan_compiled_loss_measure.py, inductor's output code replayed; two
# shapes): the graph saves the fp32 log-probabilities (as eager) and a bool a row, not the
# logits, so `del pred` frees them; its forward holds one more fp32 tensor the size of the
# rank's logits (the shifted logits, between the max's and the sum's all-reduces) beside the
# log-probabilities, with the bf16 logits still live; its backward writes one buffer, the
# logits' gradient in bf16 (which the freed logits' block serves: no block left unusable).
# Per-row buffers (under 1% of a logits tensor at V/tp ≥ 250) are not planned
COMPILED_LOSS_PARALLEL = CompiledLossParallel(
    2, 2, 4, "the compiled loss under loss_parallel (torch.compile): the logits' bf16 "
              "gradient 2·b·(T/cp)·⌈V/tp⌉",
    "the compiled loss under loss_parallel: the bf16 logits and one fp32 temporary beside "
    "the saved log-probabilities, (2 + 4)·b·(T/cp)·⌈V/tp⌉")


def compiled_loss_parallel(stack, tp: int, compiled_loss: bool) -> CompiledLossParallel | None:
    """The compiled loss's rule under TP (Stack.compiles_standard_loss and loss_parallel:
    torchtitan); None where another rule holds."""
    if not (compiled_loss and stack.compiles_standard_loss and stack.loss_parallel and tp > 1):
        return None
    return COMPILED_LOSS_PARALLEL


@dataclass(frozen=True)
class FreedLogits:
    """A block the caching allocator keeps reserved, unused, at the loss's backward."""
    bytes: "Linear"
    what: str


def freed_logits(stack, local_tokens: int, local_vocab: int) -> FreedLogits | None:
    """The bf16 logits' block, b·(T/cp)·⌈V/tp⌉·2 bytes, reserved but unusable at the loss's
    backward (Stack.loss_frees_bf16_logits: torchtitan), with or without TP.

    Its loss makes the fp32 copy F of the head's bf16 logits L, and from it the fp32
    log-probabilities (under loss_parallel also `shifted` and exp(shifted), freed before it
    returns); `del pred` frees L before loss.backward(). The backward then asks for fp32
    tensors the size of F, one more than the forward held at once (the rule above; two
    under F.cross_entropy). c10/cuda/CUDACachingAllocator.cpp serves a request from a free
    block at least its size (get_free_block, best fit) and never joins blocks of different
    segments; so L's freed block, half an fp32 tensor, serves none of them, and the last one
    takes a new segment (with expandable_segments, as torchtitan's run_train.sh sets it,
    L lies below F and the log-probabilities and cannot grow into the new mapping at the
    segment's end). Reserved ≥ the allocated peak + L's block: a lower bound (later steps
    reuse the blocks; an earlier split of them leaves more unusable, not less)."""
    if not stack.loss_frees_bf16_logits:
        return None
    from accounting.planning.parallel.activations import Linear
    return FreedLogits(Linear(local_tokens * local_vocab * 2, 0),
                       "the loss's freed bf16 logits, b·(T/cp)·⌈V/tp⌉·2 bytes (pred.float(), "
                       "del pred): a block the backward's fp32 temporaries cannot use")


# ---- float8 TP: what the blocks save --------------------------------------------------------
# torchtitan's apply_tp with float8 (Float8ColwiseParallel, Float8RowwiseParallel,
# PrepareFloat8ModuleInput; torchao/float8/float8_tensor_parallel.py, torchao 0.18): each
# style's _prepare_input_fn casts the module's input to fp8 (hp_tensor_to_float8_dynamic,
# e4m3) before it redistributes it, and torchao's Float8Linear saves the input it is handed
# (float8_linear.py matmul_with_hp_or_float8_args.forward: ctx.save_for_backward(input_hp,
# weight_hp_t), input_hp already a Float8TrainingTensor), the weight as the parameter itself
# (no fp8 copy). So the column-parallel linears save the gathered input in fp8 (once per
# sublayer: wq/wk/wv, w1/w3 share it), a row-parallel linear an fp8 copy of its input,
# which replaces the bf16 tensor where the linear was its only saver (w2's input) and sits
# beside it where another op saves it too (wo's input, SDPA's output). Measured on the CPU:
# tests/test_titan_tp.py (Float8Linear emulated, one rank of 4 on the fake process group).
# Not applied under torchtitan's per-op selective checkpointing (its policy saves mm
# outputs; what it keeps of the fp8 casts is not measured here): the bf16 ledger there.
FP8_SAVED = "fp8_e4m3"
FLOAT8_LIBRARY = "torchao"  # the ledger's fp8 linears (Trace._fp8_linear): torchao's Float8Linear
LINEAR_SAVER = "fp8 linear ("  # how that ledger names a linear layer among a tensor's savers


def float8_tp(stack, precision, layout) -> bool:
    """The blocks run torchtitan's float8 TP: its fp8 library, TP on, no per-op SAC."""
    from accounting.planning.parallel.layout import SELECTIVE
    return (precision.fp8 is not None and precision.fp8 in stack.fp8_tp_gathers
            and layout.tp > 1 and layout.recompute != SELECTIVE)


def float8_tp_rows(rows: list) -> list:
    """The rows (activations.Row) of the ledger built with torchao's fp8 linears (same
    bytes: Float8Linear saves the bf16 input it is handed) as torchtitan's float8 TP saves
    them (the rule above): a block's gathered column-parallel input in fp8; a TP-split
    tensor a linear saves in fp8, instead of bf16 when only linears save it, else beside
    it. The attention core's matmuls (model/'s unfused attention) are not linears."""
    from dataclasses import replace
    from accounting.planning.parallel.activations import Linear
    from accounting.planning.parallel.shards import BLOCK, GATHERED, TP_SPLIT

    def fp8(r, name=None):
        per = r.record.bytes_per_element
        rec = replace(r.record, dtype=FP8_SAVED,
                      name=name or f"{r.record.name} (fp8: float8 TP's input cast)")
        return replace(r, record=rec, bytes=Linear(r.bytes.a // per, r.bytes.c // per))
    out = []
    for r in rows:
        savers = _savers(r.record.why)
        linear = [w for w in savers if w.startswith(LINEAR_SAVER)]
        if r.place != BLOCK or not linear or r.kind not in (GATHERED, TP_SPLIT):
            out.append(r)
        elif len(linear) == len(savers):  # only linears save it: they save the fp8 cast
            out.append(fp8(r))
        else:  # another op keeps the bf16 tensor; the row-parallel linear its fp8 copy
            out += [r, fp8(r, f"{r.record.name}, fp8 copy (Float8RowwiseParallel's input)")]
    return out


def _savers(why: str) -> list[str]:
    """The ops a record's `why` names ("saved by A (x, y), B (z)": A (x, y) and B (z)),
    split at the commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in why.removeprefix("saved by "):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])
