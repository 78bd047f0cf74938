"""The moments of a one-GPU training step that decide its peak (MemoryModel.peak_terms), each
exact for AdamW (tests/test_peak.py measures them), with optimizer.zero_grad(set_to_none=
True), PyTorch's default, so no gradient exists in the forward pass:

  * the backward pass's first op, log_softmax's backward: the parameters, the optimizer's
    state (and master copy), the buffers, every kept activation, the loss, and two tensors
    of B·T·V in the log-probabilities' dtype — the gradient of the log-softmax (nll_loss's
    backward) and of the logits (the log-softmax's backward);
  * the optimizer's update: parameters, gradients, state, and for AdamW's foreach path one
    more state-sized tensor per parameter (torch._foreach_sqrt of v); under bf16-master the
    fp32 gradients of the master copy as well; the buffers, the loss, the token ids and
    targets;
  * with --loss chunked or fused-linear, the forward's end as well (loss_memory.py: the
    logits chunks, or Liger's chunk), and the loss region's own kept tensors and gradients
    in place of the standard ones; with --offload activations, the kept activations less
    those torchtune's OffloadActivations moves to the CPU, one block's in flight
    (activation_offload.py).
Gradient temporaries inside one block's backward pass can exceed these (the naive softmax's
backward makes five tensors of B·h·T²): not modelled, measured in tests/test_peak.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger.symbols import Expr
from accounting.planning import activation_offload as AO
from accounting.planning import compile_memory as CM
from accounting.planning import cuda_peak as CP
from accounting.planning import loss_memory as LM
from accounting.planning import mtp_memory as MT
from accounting.planning.param_counts import parameter_count
from accounting.planning import training_state as TS
from accounting.planning.optimizers import get_optimizer, is_default
from accounting.units import DTYPE_BYTES, FP32, INT64



@dataclass(frozen=True)
class PeakPhase:
    """One moment of a training step and the bytes live at it, as a closed form."""
    name: str
    bytes: Expr
    what: str
    activations: bool = True  # the kept activations are live at it (not the update)


def peak_terms(m) -> tuple:
    """`m`: a MemoryModel (model scope)."""
    p, opt = m.precision, get_optimizer(m.optimizer)
    held = sum((t.bytes for t in m.state_terms if t.on_gpu and not t.name.startswith(
        ("gradients", "bf16 copies"))), Expr())
    grads = sum((t.bytes for t in m.state_terms if t.name.startswith("gradients")), Expr())
    buffers = sum((b.expr() for b in m.ledger.buffers), Expr())
    acts = m.ledger.activations
    kept = sum((r.elements.scale(r.bytes_per_element).times(*((r.repeat,) if r.repeat else ()))
                for r in acts if r.saved), Expr()) \
        + sum(m._mtp([MT.activation_bytes(m.config, m.ledger)]
                     if m.config.mtp_layers else []), Expr())
    lr = m.loss_region
    kept = kept + lr.kept
    offload_what = ""
    if m.compile:  # inductor's partitioner keeps less of each block (compile_memory.py)
        change = CM.saved_change(acts, p.autocast)
        kept = kept + change  # none under full checkpointing: said so, not the rule's list
        offload_what = "; " + (CM.RULE if change.terms else CM.RULE_NONE)
    if m.offload_activations:  # what a compiled block no longer saves is not offloaded
        moved, flight = AO.offloaded(acts, CM.removed_shares(acts, p.autocast)
                                     if m.compile else None)
        kept = kept - moved + flight
        offload_what += "; " + AO.RULE
    per_seq, once = m.vision_saved  # issue 41: a trained vision tower's saves, kept until
    if per_seq or once:  # the backward pass reaches it, its last (planning/vision_train.py)
        kept = kept + Expr.of(per_seq, ("B",)) + Expr.of(once)
        if m.vision_forward is not None:  # Pixtral's block mask: V_fwd, exact at each B
            kept = kept + Expr.of(1, ("V_fwd",))
        offload_what += "; the vision tower's saved activations"
    f32, i64 = DTYPE_BYTES[FP32], DTYPE_BYTES[INT64]
    lsm = next((r for r in acts if r.name == "log-softmax of the logits"), None)
    # the 0-dim loss the training loop holds (a fused kernel's: float32, flash-attn's
    # cross_entropy returns float32 losses)
    loss = Expr.of(lsm.bytes_per_element if lsm is not None else f32)
    inputs = Expr.of(2 * i64, ("B", "T"))  # token ids and targets, int64
    _, n_trained = TS.counts(m.tensors)
    temp, temp_what = Expr(), ""
    if opt.foreach_temporary and n_trained:
        sb = p.moment_bytes
        temp = Expr.of(sb * n_trained) if n_trained != TS.counts(m.tensors)[0] else \
            parameter_count(m.config).scale(sb)
        temp_what = f", and √v for every trained parameter ({sb}·N)"
    if p.master and n_trained:
        temp = temp + Expr.of(f32 * n_trained)
        temp_what += ", the master copy's fp32 gradients (4·N)"
    big = max((t.numel for t in m.tensors if t.trained), default=0)
    if opt.step_temporary and big:  # one tensor's at a time: the largest's
        temp = temp + Expr.of(opt.step_temporary * big)
        temp_what += f", the largest tensor's step buffers ({opt.step_temporary}·{big:,})"
    for n_mtp in m._mtp([MT.parameters(m.config, m.ledger)] if m.config.mtp_layers else []):
        # the MTP modules' tensors are updated with the rest: their √v, fp32 gradients
        temp = temp + Expr.of(n_mtp * ((p.moment_bytes if opt.foreach_temporary else 0)
                                       + (f32 if p.master else 0)))
    boundary = held + buffers + kept + loss + lr.backward
    update = held + grads + temp + buffers + loss + inputs
    forward = None if lr.forward is None else held + buffers + kept + lr.forward
    cuda = ""
    for a in m.cuda_adjustments:  # CUDA's kernels (accounting/planning/cuda_peak.py)
        boundary = boundary + a.bytes
        forward = None if forward is None else forward + a.bytes
        cuda += f"; {a.rule}: {a.what}"
    if m.device == CP.CUDA:
        reserve = CP.workspace(m.arch)
        boundary, update = boundary + reserve.bytes, update + reserve.bytes
        forward = None if forward is None else forward + reserve.bytes
        cuda += f"; {reserve.rule}: {reserve.what}"
    extra = () if forward is None else (PeakPhase(
        f"end of the forward pass (--loss {m.loss})", forward,
        f"parameters, optimizer state, buffers, the kept activations, {lr.what_forward}"
        f"{offload_what}{cuda}"),)
    if m.optimizer_in_backward:  # one tensor's gradient and update temporaries at most
        per = m.state_precision.grad_bytes + (p.moment_bytes if opt.foreach_temporary
                                              else 0) + (f32 if p.master else 0) \
            + opt.step_temporary
        return (PeakPhase("backward pass, its largest tensor stepped in it (optimizer in "
                          "backward)", boundary + Expr.of(per * big),
                          f"the start of the backward pass{cuda}, and the largest trained "
                          f"tensor's gradient and update temporaries ({per}·{big:,})"),) + extra
    start = ("start of the backward pass (log-softmax backward)" if m.loss == LM.STANDARD
             and lsm is not None else "start of the backward pass (the loss's backward)"
             if m.loss == LM.STANDARD
             else f"start of the backward pass (--loss {m.loss})")
    return (PeakPhase(start, boundary,
                      "parameters, optimizer state, buffers, the kept activations, the "
                      f"loss, and {lr.what_backward}{offload_what}{cuda}"),
            PeakPhase("AdamW update (foreach)" if is_default(m.optimizer) else
                      f"optimizer update ({m.optimizer})", update,
                      f"parameters, gradients, optimizer state{temp_what}, buffers, the "
                      "loss, token ids and targets"
                      + (f"; {CP.RULES[CP.CUBLAS_WORKSPACE].name}" if m.device == CP.CUDA
                         else ""), activations=False)) + extra
