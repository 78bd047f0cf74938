"""torchtitan's tensor parallelism as its apply_tp runs it (issue 44): the rules of the
torchtitan stack record (stacks.Stack.loss_parallel) that change what a TP rank holds at
the step's peak, each read from the source it follows and measured on the CPU where it runs
(tests/test_titan_tp.py: torch's fake process group, saved-tensor hooks and torch's
MemTracker).

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

The rule here, the loss's backward under loss_parallel. torchtitan's loss is
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
