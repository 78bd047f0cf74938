"""What torch.distributed.pipelining itself keeps alive on a stage, beyond the saved tensors
of the stage's blocks (issue 44): the rules of the stacks that run torch's schedules (the
torch stack and torchtitan; Stack.pp_fwd_cache), read from torch 2.13's
torch/distributed/pipelining/stage.py and schedules.py and measured on a gloo pipeline
(tests/test_pipeline_live.py).

  * The stage's output of each micro-batch in flight. _PipelineStageBase.forward_one_chunk
    stores (output_tuple, flatten_input_tensors) in `fwd_cache[chunk]` and
    backward_one_chunk pops it: the output lives from the micro-batch's forward to its
    backward, whether or not autograd saved it. Under full activation checkpointing a
    block saves only its input, so the stage's last output is saved by nothing else; without
    it, the op that would save it is on the next stage. Its elements: b·T·d_model per
    micro-batch, the sequence shard T/tp under sequence parallelism (torchtitan's blocks end
    in RowwiseParallel(output_layouts=Shard(1)) with a local output), in the residual
    stream's dtype. On the last stage the output is the logits, b·T·⌈V/tp⌉ in the head's
    dtype, which F.cross_entropy does not save (log_softmax saves its result): the
    fwd_cache keeps them through the loss's backward, one micro-batch's (the last stage
    runs each forward straight into its backward), where one GPU's training loop has
    dropped them (measured on gloo: tests/test_pipeline_live.py).
  * The receive buffers (buffers.py engine_buffers, "pipelining receive buffers"): one per
    micro-batch for the activations and one for the gradients, made at the first step
    (_prepare_forward_infra, _setup_backward_recv_info) and kept.
  * Not held in torch 2.13: the gradient of a received activation. stage_backward
    (_backward.py) reads `val.grad` into the stage's bwd_cache and sets it to None, and the
    send pops it (get_bwd_send_ops).
  * Not held by torchtitan since e5ef99a (2025-10-22, "Update PP to release memory earlier";
    torch PR 165822): the last stage's `output_chunks`, every micro-batch's logits kept for
    step() to return them; torchtitan now calls step(..., return_outputs=False). Its 9dec370
    of the 2024-12 benchmarks called step() without it, so its last stage held the m
    micro-batches' bf16 logits, m·b·T·⌈V/tp⌉·2 bytes, at the end of the step (8.4 GB at
    torchtitan's Table 5, not its worst rank; docs/parallel.md).
"""
from __future__ import annotations

from accounting.planning.parallel.activations import Linear
from accounting.planning.parallel.layout import Layout


LOGITS = "logits (output embedding)"  # the ledger's record of the LM head's output


def logits_bytes(ledger) -> int:
    """Bytes per element of the logits where the ledger does not save them (0 where it
    does: they are among the stage's saved tensors already)."""
    r = next((a for a in ledger.activations if a.name == LOGITS), None)
    return 0 if r is None or r.saved else r.bytes_per_element


def stage_outputs(layout: Layout, stage: int, seq: int, d_model: int, element_bytes: int,
                  vocab: int = 0, logits: int = 0, hidden: bool = False) -> Linear:
    """One micro-batch's stage output kept in the fwd_cache until its backward, as a·b:
    b·(T/tp under SP)·d_model·element_bytes on every stage but the last, the logits
    b·T·⌈V/tp⌉·logits on the last (`seq`: the rank's tokens, T/cp; `logits`:
    logits_bytes); `hidden`: the last stage's model ends at its final hidden state, as a
    block stage does (--loss fused-linear: Liger's loss applies the head itself)."""
    if layout.pp == 1:
        return Linear()
    if stage == layout.pp - 1 and not hidden:
        return Linear(seq * -(-vocab // layout.tp) * logits, 0)
    rows = seq // layout.tp if layout.sp else seq
    return Linear(rows * d_model * element_bytes, 0)
