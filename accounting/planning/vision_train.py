"""A vision-language model's tower in a one-GPU training plan (issue 41, Must 3): frozen, as
LLaMA-Factory fine-tunes by default (FinetuningArguments.freeze_vision_tower = True,
src/llamafactory/hparams/finetuning_args.py), trained (--train-vision), or frozen under a
trained projector (--train-projector: LLaVA's stage 1; the projector's gradients, state and
saves alone, builder/vision_saves_projector.py). Pure Python: the
tower's parameter records (accounting/ledger/builder/vision.py) priced like the language
model's (planning/precisions.py, planning/optimizers.py).

Frozen: its weights in the parameters' dtype, nothing else. Its parameters need no gradient
and the pixels none, so autograd records no graph in it: it saves no activation for
backward, and its forward's intermediates are freed before the language model's forward
(transformers' get_image_features runs first).
Trained: its weights, gradients (the gradient dtype), the optimizer's state per tensor
(Optimizer.state of each tensor's real shape, its step counters where they live on the GPU,
its shared state) and an fp32 master copy where the precision keeps one; and what autograd
saves in it for the backward pass at the --image inputs of each sequence
(the vision ledger's, accounting/ledger/builder/vision.py's walk, checked against
transformers' towers with saved-tensor hooks; Pixtral's block mask over the forward's B·Σ N patches beside them,
builder/vision_saves_pixtral.py), kept from the tower's forward, the step's first, to the
end of the backward pass: live at every moment the language model's kept activations are
(planning/peak_moments.py). Under --recompute full each tower block keeps its input
(transformers' GradientCheckpointingLayer: gradient_checkpointing_enable() reaches the
tower's blocks); --recompute selective has no counterpart in the tower (transformers
checkpoints whole layers), so it saves as without recompute. The tower's FLOPs in the
step: planning/vision_flops.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder import vision as VB
from accounting.ledger.builder import vision_saves as VS
from accounting.planning.optimizers import get_optimizer
from accounting.runtime.errors import UsageError
from accounting.units import DTYPE_BYTES, FP32

# which part trains: the whole (True, --train-vision: tower and projector), the projector
# alone on a frozen tower (PROJECTOR, --train-projector), or none (False: frozen)
PROJECTOR = "projector"


def part(trained) -> tuple[bool, bool]:
    """(anything trained, the projector alone) of a `trained` value: False, True or
    PROJECTOR."""
    if trained not in (False, True, PROJECTOR):
        raise UsageError(f"train_vision must be False, True or {PROJECTOR!r}, got {trained!r}")
    return bool(trained), trained == PROJECTOR


def flag(trained) -> str:
    """The command line's flag for a `trained` value (messages name it)."""
    return "--train-projector" if part(trained)[1] else "--train-vision"


# what the plan says of the tower's activations
COUNTED = "counted"
FROZEN = "frozen"  # nothing saved
NO_IMAGES = "no --image"  # trained, but no image in the workload
NOT_WRITTEN = "not written"  # trained, its saves not written for this family (left out)


@dataclass(frozen=True)
class TowerActivations:
    status: str
    images: int = 0  # images per sequence
    image_tokens: int = 0  # tokens they add to each sequence
    per_sequence: int = 0  # bytes saved for each sequence's images
    fixed: int = 0  # bytes saved once per step (autocast's bf16 weight copies)
    checkpointed: bool = False
    # Pixtral's saves that grow with the whole forward's patches, not per image (its block
    # mask: S² at S = B·Σ N): builder/vision_saves_pixtral.py WholeForward, bytes(B) exact;
    # None for every other tower
    forward: object = None

    def forward_bytes(self, batch: int) -> int:
        """The forward-wide saves at `batch` sequences (0 but for Pixtral)."""
        return self.forward.bytes(batch) if self.forward is not None else 0

    # what a renderer asks (present/vision_views.py reads these, never the status names)
    @property
    def counted(self) -> bool:
        return self.status == COUNTED

    @property
    def frozen(self) -> bool:
        return self.status == FROZEN

    @property
    def no_images(self) -> bool:
        return self.status == NO_IMAGES

    @property
    def not_written(self) -> bool:
        return self.status == NOT_WRITTEN

    @property
    def saved(self) -> tuple[int, int]:
        """(per sequence, once): MemoryModel.vision_saved."""
        return self.per_sequence, self.fixed


def tower_activations(spec: VisionSpec, workload, precision, recompute: str, trained: bool,
                      seq: int) -> TowerActivations:
    """The tower's saves for one sequence's images (workload: analysis/images.py's
    VisionWorkload of --image/--images, None when not given); seq: the sequence's tokens,
    which hold the image tokens."""
    rows = workload.images if workload is not None else ()
    tokens = sum(r.tokens for r in rows)
    if tokens > seq:
        raise UsageError(f"--image: the images add {tokens:,} tokens to each sequence, more "
                         f"than --ctx {seq:,}; the sequence holds them: give --ctx {tokens:,} "
                         f"or more")
    trained, alone = part(trained)
    if not trained:
        return TowerActivations(FROZEN, len(rows), tokens)
    if not rows:
        return TowerActivations(NO_IMAGES)
    ledger = VB.walk(spec)
    if ledger.saves is None:
        return TowerActivations(NOT_WRITTEN, len(rows), tokens)
    mode, full = VS.mode_of(precision), recompute == "full"
    if alone:  # the projector's saves alone; no block of the frozen tower is in the graph,
        # so none is checkpointed, and Pixtral's block mask is saved by none
        from accounting.ledger.builder import vision_saves_projector as VP
        ledger = replace(ledger, saves=VP.saves(ledger))
        full = False
    per = once = 0
    for r in rows:
        p, o = VS.bytes_per_image(ledger, VB.values(spec, *r.grid), mode, "cuda", full)
        per, once = per + p * r.tiles, o
    if alone:
        return TowerActivations(COUNTED, len(rows), tokens, per, once)
    from accounting.ledger.builder.vision_saves_pixtral import whole_forward
    forward = whole_forward(spec, [r.grid for r in rows for _ in range(r.tiles)], mode,
                            "cuda", full)
    return TowerActivations(COUNTED, len(rows), tokens, per, once, full, forward)


@dataclass(frozen=True)
class TowerTraining:
    family: str
    params: int
    trained: bool
    weights: int  # bytes
    gradients: int
    optimizer: int
    master: int
    activations: TowerActivations | None = None  # in the step's peak, not in total
    projector_only: bool = False  # the projector trained on a frozen tower (--train-projector)
    trained_params: int = 0  # the parameters with a gradient and optimizer state

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.master


def tower_training(spec: VisionSpec, precision, optimizer: str, trained) -> TowerTraining:
    """`trained`: False (frozen), True (tower and projector) or PROJECTOR (the projector
    alone: its parameters' gradients, optimizer state and master copy; every weight held)."""
    trained, alone = part(trained)
    ledger, v = VB.walk(spec), VB.values(spec)
    params = ledger.param_count(v)
    weights = params * DTYPE_BYTES[precision.param_dtype]
    if not trained:
        return TowerTraining(spec.family, params, False, weights, 0, 0, 0)
    opt = get_optimizer(optimizer)
    state, shapes, tensors = 0, [], 0
    for p in trained_params(ledger, alone):
        shape, n = p.sizes(v), p.count(v)
        shapes += [shape] * n
        tensors += n
        state += n * sum(s.bytes for s in opt.state(shape, precision.state_dtype))
    state += sum(s.bytes for s in opt.shared(shapes))
    if opt.step_counter == "device":  # a 0-dim float32 step per tensor on the GPU
        state += tensors * DTYPE_BYTES[FP32]
    n = sum(p.numel(v) * p.count(v) for p in trained_params(ledger, alone))
    master = n * DTYPE_BYTES[FP32] if precision.master else 0
    return TowerTraining(spec.family, params, True, weights, n * precision.grad_bytes, state,
                         master, projector_only=alone, trained_params=n)


def trained_params(ledger, projector_only: bool) -> list:
    """The vision ledger's parameter records that train: all, or the projector's."""
    if not projector_only:
        return list(ledger.params)
    return [p for p in ledger.params if p.name in ledger.projector_params]
