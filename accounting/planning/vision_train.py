"""A vision-language model's tower in a one-GPU training plan (issue 41, Must 3): frozen, as
LLaMA-Factory fine-tunes by default (FinetuningArguments.freeze_vision_tower = True,
src/llamafactory/hparams/finetuning_args.py), or trained (--train-vision). Pure Python: the
tower's parameter records (accounting/ledger/builder/vision.py) priced like the language
model's (planning/precisions.py, planning/optimizers.py).

Frozen: its weights in the parameters' dtype, nothing else. Its parameters need no gradient
and the pixels none, so autograd records no graph in it: it saves no activation for
backward, and its forward's intermediates are freed before the language model's forward
(transformers' get_image_features runs first).
Trained: its weights, gradients (the gradient dtype), the optimizer's state per tensor
(Optimizer.state of each tensor's real shape, its step counters where they live on the GPU,
its shared state) and an fp32 master copy where the precision keeps one. Its activations
saved for backward at --image inputs are NOT counted (the first screen says so).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder import vision as VB
from accounting.planning.optimizers import get_optimizer
from accounting.units import DTYPE_BYTES, FP32

@dataclass(frozen=True)
class TowerTraining:
    family: str
    params: int
    trained: bool
    weights: int  # bytes
    gradients: int
    optimizer: int
    master: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.master


def tower_training(spec: VisionSpec, precision, optimizer: str, trained: bool) -> TowerTraining:
    ledger, v = VB.walk(spec), VB.values(spec)
    params = ledger.param_count(v)
    weights = params * DTYPE_BYTES[precision.param_dtype]
    if not trained:
        return TowerTraining(spec.family, params, False, weights, 0, 0, 0)
    opt = get_optimizer(optimizer)
    state, shapes, tensors = 0, [], 0
    for p in ledger.params:
        shape, n = p.sizes(v), p.count(v)
        shapes += [shape] * n
        tensors += n
        state += n * sum(s.bytes for s in opt.state(shape, precision.state_dtype))
    state += sum(s.bytes for s in opt.shared(shapes))
    if opt.step_counter == "device":  # a 0-dim float32 step per tensor on the GPU
        state += tensors * DTYPE_BYTES[FP32]
    master = params * DTYPE_BYTES[FP32] if precision.master else 0
    return TowerTraining(spec.family, params, True, weights,
                         params * precision.grad_bytes, state, master)
