"""A vision-language model's tower in a many-GPU plan (issue 41, Must 3), torch stack.

Where the tower lives and how it is split, as the stacks that train these models do:
  * tensor parallelism: not split, every TP rank holds the whole tower and runs it on the
    images of its micro-batch. transformers 5.23's tensor-parallel plans name the language
    model's blocks only (Qwen2_5_VLTextConfig.base_model_tp_plan: "layers.*.self_attn.q_proj"
    ...; Qwen2_5_VLVisionConfig has none; Gemma3TextConfig's likewise, SiglipVisionConfig
    none), so tp_plan="auto" leaves the tower replicated;
  * pipeline parallelism: on the first stage (the base_model_pp_plan of those text configs
    starts at embed_tokens; the tower's features are scattered into the embeddings before
    the first block), its saved tensors in each micro-batch the first stage holds in flight;
  * data parallelism: its tensors are model tensors like the others (DDP replicates them,
    ZeroRedundancyOptimizer assigns their state, FSDP2 shards each one's rows:
    planning/parallel/states.py), in FSDP units of one vision block each, as transformers'
    _no_split_modules names them (Qwen2_5_VLVisionBlock, Qwen2VLVisionBlock; SigLIP's
    encoder layers), and one unit of the rest (patch embedding, final norms, projector).
    A frozen tower's tensors need no gradient and no optimizer state; with the projector
    trained alone (--train-projector) its tensors are the model states' and the rest of
    the tower the frozen item.
A tower unit's `layer` is negative (−1 − its block; −1 − L_v for the rest of the tower):
the language model's blocks are numbered from 0, and buffers.py keys units by layer. The
tower's saved activations are planning/vision_train.py's (builder/vision_saves.py), the
same on every TP rank (each runs the whole tower on its micro-batch's images).
The tower's FLOPs (planning/vision_flops.py) are in the first stage's: each micro-batch's
images through the whole tower on every rank of the first stage (TP ranks each run it, as
they hold it whole; a context-parallel rank is not given a share of the images: each runs
them all, the conservative side), forward always, backward and recomputation when trained;
the trained tower's update is in the stage's AdamW FLOPs through its state units (the
moments this rank owns). Its time is the stage's: those FLOPs at the rate the stage's
compute runs (the language model's kernel rate or --mfu), not timed op by op.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache, partial

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder import vision as VB
from accounting.planning.parallel.activations import Linear, StageActivations
from accounting.planning.parallel.shards import FIRST, Tensor
from accounting.planning.parallel.states import Local, Unit
from accounting.planning.vision_train import PROJECTOR, part


@dataclass(frozen=True)
class TowerRun:
    """What the first stage holds of the tower beside the language model."""
    units: tuple[Unit, ...]  # its tensors, on every TP rank of the first stage
    saved: Linear  # its saved activations per micro-batch: a per sequence, c once
    training: object  # planning/vision_train.py TowerTraining (the line and the JSON)
    # planning/vision_flops.py's TowerFlops of one sequence's images (batch 1): each
    # micro-batch adds micro_batch × its forward, backward and recompute; None: not run
    flops: object = None
    # the TowerFlops of a micro-batch of b sequences: flops_at(b) (Pixtral's attention over
    # the micro-batch's images grows as b², planning/vision_flops.py cross_pairs)
    flops_at: object = None


@lru_cache(maxsize=64)
def tower_units(spec: VisionSpec, trained) -> tuple[Unit, ...]:
    """`trained`: False, True or vision_train.PROJECTOR (the projector's tensors alone not
    frozen)."""
    on, alone = part(trained)
    ledger, v = VB.walk(spec), VB.values(spec)
    blocks: dict[int, list[Local]] = {}
    rest: list[Local] = []
    for p in ledger.params:
        frozen = not on or (alone and p.name not in ledger.projector_params)
        t = Tensor(p.name, p.module, p.repeat is not None, FIRST, tuple((s,) for s in p.shape),
                   None, len(p.shape) == 2, False, frozen=frozen)
        sizes = p.sizes(v)
        if p.repeat is None:
            rest.append(Local(t, None, sizes))
            continue
        for j in range(p.count(v)):  # one Local for every block, as stage_tensors shares
            blocks.setdefault(j, []).append(Local(t, None, sizes))
    units = [Unit(f"vision block {j}", tuple(ts), False, layer=-1 - j)
             for j, ts in sorted(blocks.items())]
    return tuple(units) + (Unit("vision tower (the rest)", tuple(rest), False,
                                layer=-1 - len(blocks)),)


def tower_run(spec: VisionSpec, training, flops_at=None) -> TowerRun:
    """`training`: the TowerTraining of planning/vision_train.py, its activations set;
    `flops_at(b)`: the TowerFlops of b sequences' images (planning/vision_flops.py)."""
    a = training.activations
    return TowerRun(tower_units(spec, PROJECTOR if training.projector_only else
                                training.trained),
                    Linear(a.per_sequence, a.fixed) if a is not None else Linear(), training,
                    flops_at(1) if flops_at is not None else None, flops_at)


def with_flops(flops, tower, micro_batch: int):
    """The first stage's StageFlops with the tower's matmuls of each micro-batch's images
    (its update is already in `adamw`: the tower's state units are the stage's)."""
    if tower is None or tower.flops_at is None:
        return flops
    t = tower.flops_at(micro_batch)
    return replace(flops, forward=flops.forward + t.forward,
                   backward=flops.backward + t.backward,
                   recompute=flops.recompute + t.recompute)


def saved_at(tower: TowerRun, micro_batch: int) -> Linear:
    """The tower's saves of one micro-batch: a per sequence, c once, and in c Pixtral's
    block mask over the micro-batch's images at this micro-batch (S² at S = b·Σ N: not on
    the line, so exact at this b alone; builder/vision_saves_pixtral.py)."""
    a = tower.training.activations
    extra = a.forward_bytes(micro_batch) if a is not None and a.counted else 0
    return tower.saved + Linear(0, extra)


def with_saves(acts: StageActivations, saved: Linear) -> StageActivations:
    """The first stage's activations with the tower's in each micro-batch in flight."""
    if saved == Linear():
        return acts
    return replace(acts, per_micro_batch=acts.per_micro_batch + saved,
                   total=acts.total + saved.times(acts.in_flight))


def tower_for(spec: VisionSpec, images, precision, optimizer: str, trained: bool,
              recompute: str, seq: int) -> TowerRun:
    """The TowerRun of a vision-language config's tower (`images`: analysis/images.py's
    VisionWorkload of each sequence's images, or None) under this precision and optimizer,
    frozen or trained (planning/vision_train.py)."""
    from accounting.planning.vision_flops import tower_flops
    from accounting.planning.vision_train import tower_activations, tower_training
    training = replace(tower_training(spec, precision, optimizer, trained),
                       activations=tower_activations(spec, images, precision, recompute,
                                                     trained, seq))
    return tower_run(spec, training, partial(tower_flops, spec, images, trained=trained,
                                             recompute=recompute, optimizer=optimizer))


def state_units(tower) -> tuple[Unit, ...]:
    """The units the first stage's model states hold (states.py): a trained tower's; a
    frozen tower is frozen_items' alone (no gradient, no optimizer state); with the projector
    trained alone, the projector's tensors (in the unit of the tower's rest)."""
    if tower is None or not tower.training.trained:
        return ()
    if not tower.training.projector_only:
        return tower.units
    return tuple(replace(u, tensors=kept) for u in tower.units
                 for kept in [tuple(t for t in u.tensors if not t.tensor.frozen)] if kept)


def frozen_items(tower, layout, precision) -> list:
    """A frozen tower's parameters on a first-stage GPU, in the parameters' dtype: whole
    below ZeRO-2, FSDP2's padded shard (⌈rows/d⌉ rows of each) at ZeRO-2/3, as the model's
    (FSDP2's fully_shard shards a module's frozen parameters with the rest). Its FSDP
    all-gathers are not in the collectives."""
    from accounting.planning.parallel.buffers import Item
    if tower is None or (tower.training.trained and not tower.training.projector_only):
        return []
    d, z = layout.dp, layout.sharding
    n = sum(t.padded(d) if z >= 2 else t.numel for u in tower.units for t in u.tensors
            if t.tensor.frozen)
    b = precision.master_bytes
    return [Item(f"vision tower parameters (frozen, {precision.param_dtype}"
                 f"{', FSDP shards' if z >= 2 else ''})",
                 f"{b}·Σ⌈rows/d⌉·cols (tower)" if z >= 2 else f"{b}·N_tower",
                 Linear(0, n * b), model_state=True, per_element=b)]
