"""--offload activations (issue 44): torchtune 0.6.1's OffloadActivations (torchtune/training/
_activation_offloading.py), the saved-tensor hooks its recipes wrap around the model's
forward pass (`with self.activations_handling_ctx: logits = self._model(**batch)`), as a
change to the ledger's kept activations:

  * pack_tensor moves a saved tensor to the CPU when `num_bytes >= min_offload_size` (1024
    bytes by default) and it is neither an nn.Parameter nor an nn.Buffer; smaller ones stay
    on the device as they are.
  * get_act_offloading_ctx_manager enters a NoOpManager (saved_tensors_hooks that keep the
    tensor) around the model's output head ("the cost for offloading the activation and
    then soon after bringing it back is expensive"): the LM head's saves stay.
  * the loss runs outside the context (recipes/full_finetune_single_device.py _loss_step):
    its saves stay.
  * in flight: with use_streams (the default on CUDA) the forward keeps the last
    max_fwd_stash_size = 5 offloaded tensors alive until the copy's event is waited on
    (`fwd_stash`, cleared at the first unpack of the backward pass), and the backward pass
    brings a block's tensors back as its nodes unpack them (unpack_tensor_with_streams
    prefetches on a second stream, each freed after its node runs). The plan keeps one
    block's offloaded saves on the device at every moment that holds activations (the
    last block's at the backward's start, each block's during its own backward): an upper
    bound of the five stashed tensors and of the block being differentiated. A tensor
    saved once for the pass but by every block's ops (the RoPE cos and sin) is packed by
    each block: each block's backward brings back a copy of its own.

tests/test_activation_offload.py runs OffloadActivations(use_streams=False) on the CPU over
transformers' Llama and checks which saved tensors it moves against this rule.
"""
from __future__ import annotations

from accounting.ledger.symbols import Expr

MIN_OFFLOAD_SIZE = 1024  # OffloadActivations(min_offload_size=1024)
KEPT_MODULES = ("lm_head", "loss")  # the output head's NoOpManager; the loss outside the context
INPUTS = ("token ids",)  # the batch the training loop holds: a copy goes, the tensor stays


def _symbol(i: int) -> str:
    return f"[off{i}]"  # 1 when record i's tensors reach MIN_OFFLOAD_SIZE at the workload


def _offloadable(activations) -> list[tuple[int, object]]:
    return [(i, r) for i, r in enumerate(activations)
            if r.saved and r.module not in KEPT_MODULES and r.name not in INPUTS]


def add_values(v: dict[str, int], activations) -> dict[str, int]:
    """Each offloadable record's indicator at this workload: one tensor of it (its
    elements over its copies) at least MIN_OFFLOAD_SIZE bytes."""
    out = dict(v)
    for i, r in _offloadable(activations):
        per = r.elements.evaluate(v) * r.bytes_per_element // max(r.copies, 1)
        out[_symbol(i)] = int(per >= MIN_OFFLOAD_SIZE)
    return out


def _in_blocks(acts) -> set[str]:
    """The modules of the blocks' records: a record of one of them saved once for the whole
    pass (the RoPE cos and sin every block's muls save) is packed again by each block, and
    each block's backward brings its own copy back."""
    return {r.module for r in acts if r.repeat}


def offloaded(activations, removed=None) -> tuple[Expr, Expr]:
    """(the bytes moved off the device, every block's; one block's of each kind, in flight).
    `removed`: each record's share a compiled block no longer saves (compile_memory.py
    removed_shares, aligned with `activations`): what is not saved is not offloaded."""
    moved, flight = Expr(), Expr()
    acts = list(activations)
    blocks = _in_blocks(acts)
    for i, r in _offloadable(acts):
        keep = 1 - removed[i] if removed is not None else 1
        if not keep:
            continue
        one = r.elements.scale(r.bytes_per_element * keep).times(_symbol(i))
        moved = moved + (one.times(r.repeat) if r.repeat else one)
        if r.repeat or r.module in blocks:
            flight = flight + one
    return moved, flight


def flight_groups(activations, v: dict[str, int], removed=None) -> list[tuple[int, int]]:
    """(bytes, 1) of each tensor of one block (of each kind) brought back to the device: the
    in-flight set `offloaded` counts, as tensors (reserved.py packs them in the offload
    stream's pool)."""
    acts = list(activations)
    blocks, out = _in_blocks(acts), []
    for i, r in _offloadable(acts):
        keep = 1 - removed[i] if removed is not None else 1
        if (r.repeat or r.module in blocks) and keep and v.get(_symbol(i)):
            per = r.elements.evaluate(v) * r.bytes_per_element * keep // max(r.copies, 1)
            out += [(int(per), max(r.copies, 1))]
    return out


def offloaded_names(activations, v: dict[str, int]) -> list[str]:
    """The records moved off the device at the workload `v` (add_values' indicators)."""
    return [r.name for i, r in _offloadable(activations) if v.get(_symbol(i))]


RULE = ("--offload activations: torchtune's OffloadActivations moves the model's saved "
        "tensors of ≥ 1,024 bytes to the CPU (the LM head's and the loss's stay); one block's "
        "are on the device at a time")

__all__ = ["KEPT_MODULES", "MIN_OFFLOAD_SIZE", "RULE", "add_values", "flight_groups",
           "offloaded", "offloaded_names"]
