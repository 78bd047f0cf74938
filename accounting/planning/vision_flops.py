"""A vision-language model's tower in the training step's FLOPs and time (issue 41, Must 3).

The tower's matmuls are the vision ledger's records (accounting/ledger/builder/vision.py, one
image's forward, the numbers `python -m accounting --config F --image HxW` prints under the
"vision encoder" component), evaluated at each image's patch grid (analysis/images.py) and
summed over the images of every sequence of the step (B sequences, each with the --image
inputs). Pure Python, exact ints.

* Forward: always (frozen or trained, transformers' get_image_features runs the tower).
* Backward: only when the tower is trained (--train-vision: tower and projector). A frozen
  tower and projector run no backward: neither their parameters nor the pixels require
  grad, so autograd records no graph in them (the rule planning/vision_train.py states for
  the saves). Each matmul's backward is its two gradient matmuls, each the forward's size
  (records.Matmul.gradients), except the one reading the pixels (the patch embedding, the
  walk's first record): pixel_values need no gradient, so only its weight gradient runs
  (autograd's convolution_backward and mm backward compute the input's gradient only where
  output_mask/needs_input_grad asks; torch.utils.flop_counter's conv_backward_flop counts
  only what output_mask asks). Checked against FlopCounterMode on transformers' towers on the
  meta device (tests/test_vision_flops.py).
* Recomputation: under --recompute full, a trained tower's blocks run their forward again in
  the backward pass (transformers' GradientCheckpointingLayer: gradient_checkpointing_enable()
  reaches the tower's blocks; planning/vision_train.py): the records repeated per block
  (repeat set); the patch embedding and the projector are no checkpointed layer. A frozen
  tower is never recomputed (nothing of it is in the backward pass).
* The update: the optimizer's FLOPs over the tower's tensors when trained (each tensor's
  Optimizer.update_flops, as the language model's: planning/training_state.py).
* The projector trained on a frozen tower (--train-projector; LLaVA's stage 1, LLaMA-Factory's
  freeze_multi_modal_projector: false): the tower's forward, no backward in it; the
  projector's matmuls' two gradients each, but the first's where it reads the tower's output
  directly (builder/vision_saves_projector.py DIRECT: that input needs no gradient, only its
  weight's runs); no recomputation (no frozen block is in the graph); the update of the
  projector's tensors alone. Checked against FlopCounterMode on transformers' models with
  the tower's requires_grad off (tests/test_vision_projector.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder import vision as VB
from accounting.ledger.builder import vision_saves as VS
from accounting.planning.optimizers import get_optimizer
from accounting.ledger.builder import vision_saves_projector as VP
from accounting.planning.training_state import role
from accounting.planning.vision_train import part, trained_params


@dataclass(frozen=True)
class TowerFlops:
    """The tower's FLOPs in one training step (B sequences, each with its images)."""
    images: int  # images per step (B × the images of a sequence)
    forward: int  # matmul FLOPs, every image's tiles
    backward: int  # 0 when frozen
    recompute: int  # the checkpointed blocks' forward again (--recompute full, trained)
    update: int  # the optimizer's update of the tower's tensors (0 when frozen)
    trained: bool
    projector_only: bool = False  # the projector trained on a frozen tower

    @property
    def total(self) -> int:
        return self.forward + self.backward + self.recompute + self.update

    @property
    def model_flops(self) -> int:
        """What MFU counts: forward, backward, the update (recomputation excluded)."""
        return self.forward + self.backward + self.update


def _pixels_record(ledger) -> object:
    """The record reading the pixels: the patch embedding, the walk's first matmul."""
    return ledger.matmuls[0]


def image_records(spec: VisionSpec, row, trained, full: bool):
    """(forward, backward, recomputed) record lists of one image row, the forward's values,
    the backward's and the recomputation's values, and the row's runs (tiles): the records
    timed and counted below, one place for both. LLaVA's, LLaVA-OneVision's and InternVL's
    projectors read vision_feature_layer's hidden state: the layers after it run forward,
    but their output reaches no loss, so no backward (nor recomputation) runs in them
    (vision_saves.used_layers: LLaVA-1.5's -2 leaves the last layer out). `trained`:
    False, True or vision_train.PROJECTOR (the projector's records alone run backward)."""
    ledger = VB.walk(spec)
    v = VB.values(spec, *row.grid)
    vb = {**v, VS.BLOCK: VS.used_layers(spec)} if spec.family in VS.LLAVA else v
    first = _pixels_record(ledger)
    fwd = list(ledger.matmuls)
    bwd, again = [], []
    trained, alone = part(trained)
    if alone:
        names, direct = VP.roots(ledger), VP.first_matmul(ledger)
        for r in ledger.matmuls:
            if VS.unused_merger(spec, r.module):  # Qwen3-VL's past the text layers: no
                continue  # loss reads its output, no backward runs in it
            if VP.is_projector(r.module, names):  # the tower's output needs no gradient:
                gs = r.gradients()  # the first matmul reading it runs its weight's alone
                bwd += list(gs[1:] if r is direct else gs)
    elif trained:
        for r in ledger.matmuls:
            if VS.unused_merger(spec, r.module):
                continue
            gs = r.gradients()
            if r is first or r.module == "pooler":  # their left operand needs no gradient:
                gs = gs[1:]  # the pixels; Gemma 4's pooler's one-hot weights (built in
                # Gemma4VisionPooler's forward, no parameter): the right operand's alone
            bwd += list(gs)
        if full:
            again = [r for r in ledger.matmuls if r.repeat is not None]
    return fwd, bwd, again, v, vb, row.tiles


def _flops(records, v) -> int:
    return sum(r.count(v) * r.flops(v) for r in records)


def cross_pairs(spec: VisionSpec, rows, batch: int) -> int:
    """The (query, key) pairs Pixtral's attention runs beyond each image's own: transformers'
    PixtralVisionModel concatenates every image of the forward (get_image_features takes the
    batch's images: B sequences' rows) into one sequence and, under sdpa or eager attention
    (the plan's), masks the other images out with generate_block_attention_mask, an additive
    block-diagonal mask (modeling_pixtral.py): the kernels compute every block (an additive
    mask skips none), so the executed pairs are (B·ΣN)², of which Σ B·N² are each image's
    own, the useful ones the ledger's rows count. (flash_attention_2 would run cu_seqlens,
    each image alone: not the plan's attention.) 0 for the other towers, which attend
    within each image (Qwen's cu_seqlens, the fixed-size towers' batch dimension)."""
    if spec.family != "pixtral" or not rows:
        return 0
    ns = [r.tiles * r.grid[0] * r.grid[1] for r in rows]
    return (batch * sum(ns)) ** 2 - batch * sum(n * n for n in ns)


def padded_patches(spec: VisionSpec, rows, batch: int) -> int:
    """The patches Pixtral's patch convolution runs beyond the images' own: the processor
    pads the call's images to the largest height and width among them (PixtralImageProcessor
    returns one pixel_values tensor, image_sizes beside it) and PixtralVisionModel runs
    patch_conv over that whole tensor before cropping each image's patches back
    (modeling_pixtral.py). 0 for images of one size, and for the other towers."""
    if spec.family != "pixtral" or not rows:
        return 0
    gh, gw = max(r.grid[0] for r in rows), max(r.grid[1] for r in rows)
    return batch * sum(gh * gw - r.grid[0] * r.grid[1] for r in rows)


def cross_records(spec: VisionSpec, rows, batch: int, trained: bool, full: bool):
    """[(forward, backward, recomputed) (records, values, label)] of Pixtral's work beyond
    its images' rows: the attention products over cross_pairs (the records' S_f set to
    those pairs) and the patch convolution over padded_patches (its weight's gradient too:
    convolution_backward runs over the whole padded input); [] when none."""
    x, pad = cross_pairs(spec, rows, batch), padded_patches(spec, rows, batch)
    if not x and not pad:
        return []
    f, b, a, v, _, _ = image_records(spec, rows[0], trained, full)
    first = _pixels_record(VB.walk(spec))
    v = {**v, "S_f": x, "N_p": pad}
    return [([r for r in rs if r.batch or r == first or r.name == f"{first.name} dB"], v,
             label) for rs, label in ((f, ""), (b, ""), (a, " (recomputed)"))]


def tower_flops(spec: VisionSpec, workload, batch: int, trained, recompute: str,
                optimizer: str) -> TowerFlops:
    """The tower's FLOPs in a step of `batch` sequences, each with workload's images
    (analysis/images.py's VisionWorkload, None: no image, nothing run)."""
    rows = workload.images if workload is not None else ()
    full = recompute == "full"
    fwd = bwd = again = 0
    for row in rows:
        f, b, a, v, vb, tiles = image_records(spec, row, trained, full)
        fwd += tiles * _flops(f, v)
        bwd += tiles * _flops(b, vb)
        again += tiles * _flops(a, vb)
    fwd, bwd, again = batch * fwd, batch * bwd, batch * again
    cross = cross_records(spec, rows, batch, trained, full)
    if cross:  # Pixtral's attention over the whole forward's images (cross_pairs)
        fwd, bwd, again = (x + _flops(rs, v) for x, (rs, v, _) in zip((fwd, bwd, again),
                                                                     cross))
    update = 0
    on, alone = part(trained)
    if on:
        ledger, v = VB.walk(spec), VB.values(spec)
        opt = get_optimizer(optimizer)
        update = sum(p.count(v) * opt.update_flops(p.sizes(v), role(p, p.sizes(v)))
                     for p in trained_params(ledger, alone))
    return TowerFlops(batch * len(rows), fwd, bwd, again, update, on, alone)


# The tower's attention is bidirectional over each image's segments (Qwen2.5-VL's windows,
# cu_seqlens per image): the measured attention tables (aiconfigurator-core) are causal
# prefill kernels of a language model, so it is timed by its FLOPs at the roofline's share
# of the peak, its scores kept on chip (SDPA's flash or memory-efficient kernel: no S×S
# tensor read or written), its backward by its gradient records' FLOPs (2× the forward; a
# flash backward's recomputed QKᵀ is not added).
ATTENTION_SOURCE = "roofline (the tower's attention: its FLOPs at 0.7 of the dense peak)"


def tower_ops(spec: VisionSpec, workload, batch: int, trained, recompute: str,
              machine, update_bytes: int | None = None) -> list:
    """The tower's ops in the step's op-by-op time (timing/ops.py's rules): each matmul
    record timed as the language model's are (a GEMM from the measured tables, or the
    roofline, labelled; the attention core's per-head products a batched GEMM at the
    roofline, as the unfused attention's), forward, backward when trained, recomputed under
    full. Each image's GEMMs at its own rows (its patches): transformers' Qwen and Pixtral
    towers run all the images of a forward as one sequence, and the fixed-size towers
    stack them, so timing them apart is the conservative side. The tower's norms,
    activations and autocast casts are not timed. `update_bytes`: the optimizer's bytes per
    trained element (its update, memory-bound, as timing/step.py times the model's)."""
    from fractions import Fraction
    from accounting.timing import ops as O
    rows = workload.images if workload is not None else ()
    full = recompute == "full"
    out = []
    for row in rows:
        f, b, a, v0, vb, tiles = image_records(spec, row, trained, full)
        for records, label, v in ((f, "", v0), (b, "", vb), (a, " (recomputed)", vb)):
            for r in records:
                if r.batch:  # the attention core's per-head products: see ATTENTION_SOURCE
                    t = O.OpTime(r.name, O.ATTENTION, Fraction(r.count(v) * r.flops(v))
                                 / (machine.peak_flops * O.ROOFLINE_DERATE), ATTENTION_SOURCE)
                else:
                    t = O.time_matmul(r, v, r.count(v), machine)
                out.append(O.OpTime(f"vision tower: {r.name}{label}", t.category,
                                    t.seconds * tiles * batch, t.source, t.note))
    for rs, v, label in cross_records(spec, rows, batch, trained, full):  # Pixtral's
        for r in rs:  # products over the other images' blocks (cross_pairs), patch
            # convolution over the padding (padded_patches): each at the roofline's share
            out.append(O.OpTime(f"vision tower: {r.name}{label} (other images' blocks, "
                                f"padding)", O.ATTENTION if r.batch else O.GEMMS,
                                Fraction(r.count(v) * r.flops(v))
                                / (machine.peak_flops * O.ROOFLINE_DERATE), ATTENTION_SOURCE
                                if r.batch else "roofline (the padding's patch convolution: "
                                "its FLOPs at 0.7 of the dense peak)"))
    on, alone = part(trained)
    if on and update_bytes:
        ledger, v = VB.walk(spec), VB.values(spec)
        rate, _, src = machine.memory_rate()
        n = sum(p.numel(v) * p.count(v) for p in trained_params(ledger, alone))
        out.append(O.OpTime(f"vision {'projector' if alone else 'tower'}: optimizer update",
                            O.OPTIMIZER, Fraction(n * update_bytes) / rate, src))
    return out
