"""The reserved peak of an offloaded one-GPU step, from two steps replayed through the caching
allocator (issue 44): reserved.py packs the tensors of one moment, which under --offload
activations leaves out what decides the reserve, the first step's history. The first
step's loss cuts segments while nothing else is free; the first backward's gradients and the
first optimizer step's AdamW state are then placed in them, best fit, the offloaded
activations having cut no other free blocks; from the second step on the loss's tensors cut
segments again. tests/test_reserved_replay.py found it by replaying a traced H200 step.

The two steps as the ledger's records and the libraries make them, at the granularity of
saved tensors, each allocation and free through allocator.Replay (one pool per stream):

  * before: each parameter (fp32, registration order), the buffers, cuBLAS's workspaces
    (cuda_peak.py CUBLAS_WORKSPACE);
  * zero_grad(set_to_none=True) frees the previous step's gradients;
  * forward: the ledger's saved records in model/'s order, block after block; a record the
    offloading moves (activation_offload.py: torchtune's rule, or every saved tensor
    under torch.autograd.graph.save_on_cpu) is freed as soon as it is made (its host copy
    holds the data: torchtune pack_tensor; torch/autograd/graph.py pack_to_cpu), but a
    weight's bf16 copy stays until the forward's end, in autocast's cast cache
    (aten/src/ATen/autocast_mode.cpp cached_cast; torch.autocast.__exit__ clears it);
  * the loss as CUDA runs it (cuda_peak.py LOSS): the logits in bf16, log_softmax's bf16
    result, nll_loss's float32 copy; the logits freed as F.cross_entropy returns;
  * backward: nll_loss_backward's float32 gradient; NllLossBackward's saved copy released
    once it ran (torch/csrc/autograd/engine.cpp evaluate_function: release_variables);
    the cast's bf16 gradient, log_softmax's bf16 gradient; the head's weight gradient;
    then each block from the last: its moved tensors brought back (torchtune: on its
    second stream, a pool of its own, reserved.py OFFLOAD_STREAM; save_on_cpu: the compute
    stream's), its weights' fp32 gradients (AccumulateGrad), its saves freed;
  * the optimizer: at the first step() AdamW's exp_avg and exp_avg_sq for each trained
    tensor (torch/optim/adam.py Adam._init_group: torch.zeros_like); each step one
    temporary per tensor (_multi_tensor_adam: torch._foreach_sqrt(exp_avg_sqs)), freed.

What it leaves out: the ops' transients inside a block (each freed before the next op of
its size comes: they reuse one block), the activations' gradients. Planned where its rules
hold: the course model's ops, bf16 autocast with the standard loss, AdamW over every
parameter, no recomputation, on CUDA; None elsewhere (reserved.py's packing stands)."""
from __future__ import annotations

from accounting.ledger.builder.common import COURSE
from accounting.planning import activation_offload as AO
from accounting.planning import cuda_peak as CP
from accounting.planning import loss_memory as LM
from accounting.planning.allocator import Replay
from accounting.planning.optimizers import DEFAULT_OPTIMIZER
from accounting.units import BF16, DTYPE_BYTES, FP32

LSM = "log-softmax of the logits"
WEIGHT_COPY = "bf16 copy of"  # the ledger's records of autocast's weight casts


def applies(model) -> bool:
    return (model.device == CP.CUDA and model.implementation == COURSE
            and model.precision.name == "bf16-mixed" and model.loss == LM.STANDARD
            and model.optimizer == DEFAULT_OPTIMIZER and model.recompute == "none"
            and model.finetune is None and model.trainable is None and not model.compile
            and not model.optimizer_in_backward and model.vision_forward is None
            and model.vision_saved == (0, 0)
            and any(r.name == LSM for r in model.ledger.activations)
            and len({r.repeat for r in model.ledger.activations if r.repeat}) == 1)


def two_steps(model, batch: int, seq: int, save_on_cpu: bool = False) -> tuple[int, int] | None:
    """(reserved, allocated) peaks of the second step (after reset_peak_memory_stats), or
    None where the rules above do not hold. `save_on_cpu`: every saved tensor moved, the
    loss's too, on one stream (the H200 run of tests/data/recipes_h200.json); else the
    model's own offloading (torchtune's rule, its second stream), or none."""
    if not applies(model):
        return None
    v = model.values(seq, batch)
    acts = [r for r in model.ledger.activations if r.saved]
    if save_on_cpu:
        moved = {r.name for r in acts}
    elif model.offload_activations:
        moved = set(AO.offloaded_names(model.ledger.activations, v))
    else:
        moved = set()
    btv = next(r for r in acts if r.name == LSM).elements.evaluate(v)
    main, side = Replay(), Replay()
    stream = side if model.offload_activations and not save_on_cpu else main
    keys = iter(range(1, 1 << 62))

    def alloc(pool, n: int):
        k = next(keys)
        if n > 0:
            pool.alloc(k, n)
            return pool, k
        return None

    def free(handles) -> None:
        for h in handles:
            if h is not None and h[1] in h[0].at:
                h[0].free(h[1])

    def each(r) -> tuple[int, int]:  # (bytes of one tensor, tensors) of a record in a block
        n = max(r.copies, 1)
        return r.elements.evaluate(v) * r.bytes_per_element // n, n

    for t in model.tensors:
        for _ in range(t.copies):
            alloc(main, t.numel * DTYPE_BYTES[FP32])
    for b in model.ledger.buffers:
        n = v[b.repeat] if b.repeat else 1
        for _ in range(n):
            alloc(main, b.expr().evaluate(v) // n)
    for _ in range(CP.CUBLAS_WORKSPACES):
        alloc(main, CP.cublas_workspace_bytes(model.arch))
    blocks = [r for r in acts if r.repeat]
    first = acts.index(blocks[0]) if blocks else len(acts)
    front = [r for r in acts[:first] if not r.repeat]
    tail = [r for r in acts[first:] if not r.repeat and r.module != "loss"]
    layers = v[blocks[0].repeat] if blocks else 0
    trained = [t for t in model.tensors if t.trained]
    head = [t for t in trained if t.param.module in ("lm_head", "token_embeddings")][-1:]
    grads: list = []
    for step in (1, 2):
        if step == 2:
            main.reset_peaks()
            side.reset_peaks()
        free(grads)
        grads, cache = [], []

        def save(records) -> list:
            kept = []
            for r in records:
                size, n = each(r)
                for _ in range(n):
                    h = alloc(main, size)
                    if r.name not in moved:
                        kept.append(h)
                    elif r.name.startswith(WEIGHT_COPY):
                        cache.append(h)  # autocast's cache holds it to the forward's end
                    else:
                        free([h])
            return kept
        held_front = save(front)
        held_blocks = [save(blocks) for _ in range(layers)]
        held_tail = save(tail)
        logits = alloc(main, DTYPE_BYTES[BF16] * btv)
        lsm = alloc(main, DTYPE_BYTES[BF16] * btv)
        copy = alloc(main, DTYPE_BYTES[FP32] * btv)
        free([logits])
        if save_on_cpu:
            free([lsm, copy])
        free(cache)  # the autocast context exits
        if save_on_cpu:
            copy = alloc(main, DTYPE_BYTES[FP32] * btv)
        nll = alloc(main, DTYPE_BYTES[FP32] * btv)
        free([copy])
        cast = alloc(main, DTYPE_BYTES[BF16] * btv)
        free([nll])
        if save_on_cpu:
            lsm = alloc(main, DTYPE_BYTES[BF16] * btv)
        grad = alloc(main, DTYPE_BYTES[BF16] * btv)
        free([cast, lsm])
        grads += [alloc(main, t.numel * DTYPE_BYTES[FP32]) for t in head]
        free([grad])
        back = [alloc(stream, s) for r in tail if r.name in moved
                for s, n in [each(r)] for _ in range(n)]
        free(held_tail + back)
        for layer in reversed(range(layers)):
            back = [alloc(stream, s) for r in blocks if r.name in moved
                    for s, n in [each(r)] for _ in range(n)]
            grads += [alloc(main, t.numel * DTYPE_BYTES[FP32]) for t in trained
                      if t.param.repeat]
            free(held_blocks[layer] + back)
        grads += [alloc(main, t.numel * DTYPE_BYTES[FP32]) for t in trained
                  if not t.param.repeat and t not in head for _ in range(t.copies)]
        free(held_front)
        if step == 1:  # Adam._init_group: exp_avg and exp_avg_sq, torch.zeros_like each
            for t in trained:
                for _ in range(2 * t.copies):
                    alloc(main, t.numel * DTYPE_BYTES[FP32])
        free([alloc(main, t.numel * DTYPE_BYTES[FP32]) for t in trained
              for _ in range(t.copies)])  # torch._foreach_sqrt(exp_avg_sqs)
    return (main.peak_reserved + side.peak_reserved, main.peak_allocated + side.peak_allocated)
