"""The vision tower's FLOPs in the training step (issue 41, Must 3;
accounting/planning/vision_flops.py): hand algebra on a tiny Qwen2-VL tower through the
plan's JSON, and torch's FlopCounterMode over transformers' own towers run forward and
backward on the CPU (trained: parameters requiring grad, the pixels not), for the
backward's rule (two gradient matmuls per forward matmul, the patch embedding's weight
gradient alone; Gemma 4's pooler's right operand alone) and the recomputation under
gradient checkpointing. LLaVA-1.5's vision_feature_layer -2: the last layer runs forward
only (its output reaches no loss)."""
import json

import pytest

from accounting.architecture.hf_config import translate
from accounting.ledger.builder import vision as VB
from accounting.planning import vision_flops as VF
from cli_run import run
from hf_examples import write_config
from test_vision import CONFIGS, _gemma4, _kw


def _plan_flops(capsys, tmp_path, *argv):
    code, out, err = run(capsys, "plan", "--config",
                         str(write_config(tmp_path, CONFIGS["qwen2_vl"])), "--gpu", "H100",
                         "--ctx", "256", "--precision", "bf16", "--format", "json", *argv)
    assert code == 0, err
    return json.loads(out)["flops_per_step"]


def _hand():
    """The tiny Qwen2-VL tower's FLOPs on one 112×112 image, by hand (see below): (patch
    embedding, one block, forward)."""
    patch = 2 * 64 * 1176 * 32
    block = 2 * 64 * 32 * 96 + 2 * (2 * 64 * 64 * 32) + 2 * 64 * 32 * 32 + 2 * (2 * 64 * 32 * 128)
    merger = 2 * 16 * 128 * 128 + 2 * 16 * 128 * 64
    return patch, block, patch + 3 * block + merger


def test_qwen2_vl_tower_flops_by_hand(capsys, tmp_path):
    """The tiny Qwen2-VL tower of tests/test_vision.py (depth 3, d_v 32, mlp_ratio 4: f_v
    128, 2 heads, patch 14, temporal 2: k_v = 3·2·14² = 1,176 pixels a patch; merge 2: the
    merger's width 4·32 = 128 into d_t 64) on 112×112 images (8×8 = 64 patches, 16 merged
    tokens), two a sequence, batch 3: 6 images a step. Hand algebra, 2 FLOPs a MAC:
      patch embedding 2·64·1176·32; per block QKV 2·64·32·96, QKᵀ and scores·V 2·64²·32
      each (all heads), proj 2·64·32·32, fc1 and fc2 2·64·32·128 each; merger 2·16·128·128
      + 2·16·128·64.
    Backward (trained) = 2 × forward less the patch embedding's input gradient (the pixels
    need none); recomputed (--recompute full) = the three blocks again; AdamW's update
    14 per parameter + 1 per tensor. A frozen tower: the forward alone."""
    patch, block, fwd = _hand()
    # parameters: patch (32·1176, no bias), per block 2 LayerNorms (2·2·32), qkv 32·96 + 96,
    # proj 32·32 + 32, fc1 32·128 + 128, fc2 128·32 + 32; merger ln_q 2·32, mlp.0 128·128 +
    # 128, mlp.2 128·64 + 64
    per_block = 4 * 32 + 32 * 96 + 96 + 32 * 32 + 32 + 32 * 128 + 128 + 128 * 32 + 32
    n = 32 * 1176 + 3 * per_block + 2 * 32 + 128 * 128 + 128 + 128 * 64 + 64
    tensors = 1 + 3 * 12 + 2 + 4
    images = ("--image", "112x112", "--images", "2", "--batch", "3")
    t = _plan_flops(capsys, tmp_path, "--train-vision", "--recompute", "full", *images)
    v = t["vision"]
    assert (v["images_per_step"], v["forward"], v["backward"], v["recompute"]) == \
        (6, 6 * fwd, 6 * (2 * fwd - patch), 6 * 3 * block)
    assert v["optimizer"] == 14 * n + tensors
    without = _plan_flops(capsys, tmp_path, "--train-vision", "--recompute", "full",
                          "--batch", "3")
    assert v["total"] == 6 * (fwd + 2 * fwd - patch + 3 * block) + 14 * n + tensors
    assert without["vision"]["total"] == 14 * n + tensors  # no image: the update alone
    assert t["total"] - without["total"] == 6 * (fwd + 2 * fwd - patch + 3 * block)
    frozen = _plan_flops(capsys, tmp_path, "--recompute", "full", *images)["vision"]
    assert (frozen["forward"], frozen["backward"], frozen["recompute"], frozen["optimizer"]) \
        == (6 * fwd, 0, 0, 0)


def _tower_model(data, family):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**_kw(data))
    for sub in ("vision_config", "text_config"):
        if getattr(cfg, sub, None) is not None:
            getattr(cfg, sub)._attn_implementation = "eager"
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = (transformers.Gemma4ForConditionalGeneration(cfg) if family == "gemma4"
             else transformers.AutoModelForImageTextToText.from_config(cfg))
    return torch, model.train()


def _counted(torch, call):
    """FlopCounterMode's totals of call()'s forward and of its output's backward."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as fwd:
        out = call()
    with FlopCounterMode(display=False) as bwd:
        out.float().sum().backward()
    return fwd.get_total_flops(), bwd.get_total_flops()


def _call(torch, model, family, spec):
    """(call, grid): the tower and projector on one image, as get_image_features runs them."""
    if family in ("qwen2_vl", "qwen2_5_vl"):
        gh, gw = 8, 12
        px = torch.randn(gh * gw, spec.channels * spec.temporal_patch * spec.patch ** 2)
        return (lambda: model.model.visual(px, grid_thw=torch.tensor([[1, gh, gw]]))
                .pooler_output), (gh, gw)
    if family == "gemma4":  # 3×6 patches padded to 4 soft tokens' 36 (tests/test_vision.py)
        gh, gw = 3, 6
        real = [[x, y] for y in range(gh) for x in range(gw)]
        pos = torch.tensor([real + [[-1, -1]] * (36 - len(real))])
        px = torch.randn(1, 36, 768)
        return (lambda: model.model.get_image_features(pixel_values=px,
                                                       image_position_ids=pos)
                .pooler_output[0]), (gh, gw)
    side = spec.image_size // spec.patch
    px = torch.randn(1, 3, spec.image_size, spec.image_size)

    def call():
        f = model.model.get_image_features(pixel_values=px).pooler_output
        return f[0] if isinstance(f, (list, tuple)) else f
    return call, (side, side)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "gemma3", "llava", "gemma4"])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_backward_and_recompute_equal_the_counter(family, checkpointed):
    """transformers' tower and projector trained (fp32, eager attention, the CPU), one
    image: FlopCounterMode's forward equals the ledger's forward records, and its backward
    (autograd's convolution_backward/mm backward, which skip the pixels' gradient) equals
    vision_flops' backward records; with gradient checkpointing (reentrant, as
    gradient_checkpointing_enable runs the towers' GradientCheckpointingLayer blocks) the
    backward also runs the blocks' forward again: the recomputed records."""
    data = _gemma4() if family == "gemma4" else CONFIGS[family]
    torch, model = _tower_model(data, family)
    if checkpointed:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": True})
        model.train()
    spec = translate(data, "c", family).vision
    call, grid = _call(torch, model, family, spec)
    fwd, bwd = _counted(torch, call)
    row = type("Row", (), {"grid": grid, "tiles": 1})()
    f, b, again, v, vb, _ = VF.image_records(spec, row, True, checkpointed)
    ours = lambda rs, v: sum(r.count(v) * r.flops(v) for r in rs)  # noqa: E731
    assert fwd == ours(f, v)
    assert bwd == ours(b, vb) + ours(again, vb)
    assert ours(b, vb) < 2 * ours(f, v)  # the patch embedding's input gradient is not run
    if checkpointed:
        assert ours(again, vb) > 0


def test_frozen_tower_runs_no_backward():
    """A frozen tower and projector (requires_grad off, LLaMA-Factory's default): the
    output needs no gradient, so there is no backward to run (and none counted)."""
    torch, model = _tower_model(CONFIGS["qwen2_vl"], "qwen2_vl")
    for p in model.parameters():
        p.requires_grad_(False)
    spec = translate(CONFIGS["qwen2_vl"], "c", "qwen2_vl").vision
    call, grid = _call(torch, model, "qwen2_vl", spec)
    assert call().grad_fn is None
    row = type("Row", (), {"grid": grid, "tiles": 1})()
    _, b, again, _, _, _ = VF.image_records(spec, row, False, True)
    assert (b, again) == ([], [])


def _stages(tower: bool, trained: bool = True, images=("112x112",), pp: int = 2):
    """The stages' StageFlops of the tiny Qwen2-VL on pp stages × 2 DP ranks, bf16, T = 64,
    micro-batch 2, full recomputation, with the tower (and one image a sequence) or
    without."""
    from accounting.analysis.images import workload
    from accounting.planning.memory import get_precision
    from accounting.planning.parallel.layout import Layout
    from accounting.planning.parallel.plan import parallel_plan
    from accounting.planning.parallel.vision import tower_for
    hf = translate(CONFIGS["qwen2_vl"], "c", "q")
    p = get_precision("bf16")
    run_tower = tower_for(hf.vision, workload(hf.vision, list(images), None), p, "adamw",
                          trained, "full", 64) if tower else None
    lo = Layout(pp * 2, 1, pp, 2, micro_batch=2, global_batch=2 * 2 * pp, recompute="full")
    plan = parallel_plan(hf.config, lo, 64, precision=p, implementation="transformers",
                         tower=run_tower)
    return {s.stage: s.flops for s in plan.stages}


def test_many_gpus_first_stage_runs_the_tower():
    """Many GPUs: the first stage's matmuls per micro-batch gain the tower's on each of its
    2 sequences' images (hand algebra of the tiny Qwen2-VL, above): forward 2·fwd, backward
    2·(2·fwd − patch), recomputed 2·3·block; its AdamW update (the tower's state units on
    that stage's ranks) is in the stage's update; the last stage's FLOPs are unchanged.
    Frozen: the forward alone."""
    patch, block, fwd = _hand()
    with_tower, without = _stages(True), _stages(False)
    s0, b0 = with_tower[0], without[0]
    assert (s0.forward - b0.forward, s0.backward - b0.backward,
            s0.recompute - b0.recompute) == (2 * fwd, 2 * (2 * fwd - patch), 2 * 3 * block)
    assert s0.adamw > b0.adamw and with_tower[1] == without[1]
    frozen = _stages(True, trained=False)[0]
    assert (frozen.forward - b0.forward, frozen.backward, frozen.recompute, frozen.adamw) == \
        (2 * fwd, b0.backward, b0.recompute, b0.adamw)


def test_the_step_time_adds_the_towers_ops():
    """One GPU without --mfu (H100's roofline or kernel tables): the predicted step with
    the trained tower's images is the step without them plus the tower's own ops, each
    named "vision tower: ...", their seconds summed exactly; its attention products are the
    labelled roofline term (their FLOPs at 0.7 of the dense peak, by hand here); the MFU's
    numerator gains the tower's forward and backward."""
    from fractions import Fraction
    from accounting.analysis.images import workload
    from accounting.planning.plan import plan
    from accounting.timing import ops as O
    hf = translate(CONFIGS["qwen2_vl"], "c", "q")
    images = workload(hf.vision, ["112x112"], None)
    kw = dict(precision="bf16", gpu="H100", tower=hf.vision, train_vision=True,
              recompute="full")
    with_images = plan(hf.config, 256, 2, images=images, **kw)
    without = plan(hf.config, 256, 2, **kw)
    a, b = with_images.prediction, without.prediction
    tower = [o for o in a.timed.ops if o.name.startswith("vision tower: ")]
    assert tower and len(a.timed.ops) == len(b.timed.ops) + len(tower) - 1
    # (the update's op is there without images too: the tower is trained either way)
    assert a.step_seconds == b.step_seconds + sum(
        (o.seconds for o in tower if o.category != O.OPTIMIZER), Fraction(0))
    qk = next(o for o in tower if o.name == "vision tower: QKᵀ")
    # 3 blocks, 2 heads of 16, 64² pairs, 2 sequences of one image, at 0.7 of the bf16 peak
    # (H100-SXM's dense bf16 989 TFLOP/s: NVIDIA's datasheet gives 1,979 with sparsity)
    assert a.timed.machine.peak_flops == 989 * 10**12
    assert qk.seconds == Fraction(2 * 3 * 2 * 64 * 64 * 16 * 2) / (989 * 10**12
                                                                    * Fraction(7, 10))
    assert qk.source.startswith("roofline (the tower's attention")
    f = with_images.flops.vision
    assert a.model_flops - b.model_flops == f.forward + f.backward


def test_pixtral_attends_over_every_image_of_the_forward():
    """Mistral 3's Pixtral (the tiny config of tests/test_vision_mistral3.py) trained, two
    images of 4×6 and 6×8 patches in one get_image_features call (the CPU, eager attention:
    FlopCounterMode counts no CPU flash sdpa): transformers concatenates them into one
    sequence of 24 + 48 = 72 patches with a block-diagonal mask, so the attention runs over
    72² pairs, forward and backward; and its patch convolution runs over both images padded
    to 6×8 (96 patches, the weight's gradient too). vision_flops adds the pairs beyond each
    image's own, 72² − (24² + 48²) = 2,304, and the 24 padding patches to the per-image
    rows."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from test_vision_mistral3 import DATA
    cfg = transformers.AutoConfig.for_model(**_kw(DATA))
    cfg._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(cfg).train()
    spec = translate(DATA, "c", "m3").vision
    grids = [(4, 6), (6, 8)]
    px = torch.zeros(2, 3, 6 * 14, 8 * 14)  # padded to the largest, as the processor pads
    sizes = torch.tensor([[g[0] * 14, g[1] * 14] for g in grids])

    def call():
        f = model.model.get_image_features(pixel_values=px, image_sizes=sizes).pooler_output
        return torch.cat(list(f)) if isinstance(f, (list, tuple)) else f
    fwd, bwd = _counted(torch, call)
    Row = type("Row", (), {})
    rows = []
    for g in grids:
        r = Row()
        r.grid, r.tiles = g, 1
        rows.append(r)
    assert VF.cross_pairs(spec, rows, 1) == 72 ** 2 - 24 ** 2 - 48 ** 2 == 2304
    assert VF.padded_patches(spec, rows, 1) == 2 * 48 - 72
    work = type("W", (), {"images": tuple(rows)})()
    t = VF.tower_flops(spec, work, 1, True, "none", "adamw")
    assert (t.forward, t.backward) == (fwd, bwd)
    # by hand, the cross terms alone: QKᵀ and scores·V over 2,304 pairs, 2 heads of 16, 2
    # layers, 2 FLOPs a MAC; the patch convolution (k_v = 3·14² = 588 to d_v 32) over 24
    per_image = sum(VF._flops(VF.image_records(spec, r, True, False)[0],
                              VB.values(spec, *r.grid)) for r in rows)
    assert t.forward - per_image == 2 * 2 * 2304 * 2 * 16 * 2 + 2 * 24 * 588 * 32


def test_the_first_screen_says_what_of_the_tower_the_step_counts(capsys, tmp_path):
    """The vision tower line: trained with an image, its forward, backward and update in the
    step's FLOPs and time; trained without one, its update alone; frozen, its forward alone;
    on many GPUs, in the first stage's."""
    path = str(write_config(tmp_path, CONFIGS["qwen2_vl"]))
    base = ("plan", "--config", path, "--gpu", "H100", "--ctx", "256")
    cases = [(("--train-vision", "--image", "112x112"), "in the step's FLOPs and time"),
             (("--train-vision",), "of its FLOPs only its optimizer update"),
             (("--image", "112x112"), "(no backward: frozen)"),
             (("--gpus", "2", "--train-vision", "--image", "112x112"),
              "in the first stage's FLOPs and time")]
    for argv, said in cases:
        code, out, err = run(capsys, *base, *argv)
        line = next(x for x in out.splitlines() if x.startswith("vision tower:"))
        assert code == 0 and said in line, (argv, line)
