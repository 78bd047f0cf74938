"""A trained vision tower's saved tensors (issue 41, Must 3) against transformers' own tower
on the CPU: the tiny configs of tests/test_vision.py built by AutoModelForImageTextToText
(attention "sdpa"), the tower and projector run on one image in training mode, and every
storage autograd saves in the graph the output's backward pass walks (each node's saved
tensors; parameters excluded, each storage once) summed, against
accounting/ledger/builder/vision_saves.py at the CPU's dtype rules: fp32 parameters, bf16
parameters, fp32 under torch.autocast("cpu", bfloat16). Then the plans: the one-GPU step's
first moment holds them (its JSON), and the many-GPU plans place the tower (transformers'
meta-device shapes, by hand)."""
import contextlib

import pytest

from accounting.analysis import images as I
from accounting.architecture.hf_config import translate
from accounting.ledger.builder import vision as VB
from accounting.ledger.builder import vision_saves as VS
from cli_run import run
from hf_examples import write_config
from test_vision import CONFIGS, _kimi, _kw, _llama4
from test_vision_idefics3 import DATA as IDEFICS3
from test_vision_onevision import DATA as ONEVISION, PINS, SIDE
from test_vision_internvl import DATA as INTERNVL, SIX_B, _with as _internvl_with


def _saved_bytes(model, call):
    """Bytes of the distinct non-parameter storages autograd saves in call() that the
    backward pass from its output needs: every saved tensor of every node reachable from the
    output's grad_fn (autograd's own graph; a node nothing the output depends on is freed
    with its last reference, as LLaVA's unused last layer is), parameters excluded."""
    import torch
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    out = call()
    seen, todo, done = {}, [out.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in done:
            continue
        done.add(node)
        saved = [getattr(node, n) for n in dir(node) if n.startswith("_saved_")]
        if hasattr(node, "saved_tensors"):  # a torch.autograd.Function's (checkpointing)
            saved.append(node.saved_tensors)
        for v in saved:
            for t in (v if isinstance(v, (tuple, list)) else (v,)):
                # (a Python number autograd wraps, 1.702 in QuickGELU's 1.702·x, is a 0-dim
                # float64 CPU tensor: never on the GPU, and saved_tensors_hooks never see it)
                if isinstance(t, torch.Tensor) and not (t.dim() == 0 and
                                                        t.dtype == torch.float64):
                    st = t.untyped_storage()
                    if st.data_ptr() not in params and st.nbytes():
                        seen[st.data_ptr()] = st.nbytes()
        todo += [f for f, _ in node.next_functions]
    out.float().sum().backward()  # the saved tensors were usable
    return sum(seen.values())


def _summed(f):
    """A tower's features: one tensor, or a list of them (one an image), summed."""
    return sum(x.float().sum() for x in f) if isinstance(f, (list, tuple)) else f


def _qwen_image(torch, model, spec, grid, dtype, ac):
    """Qwen's tower on one image of grid (gh, gw) patches, given flattened: its output and,
    for Qwen3-VL, the deepstack features, summed."""
    gh, gw = grid
    px = torch.randn(gh * gw, spec.channels * spec.temporal_patch * spec.patch ** 2, dtype=dtype)

    def call():
        with ac:
            out = model.model.visual(px, grid_thw=torch.tensor([[1, gh, gw]]))
        # Qwen3-VL's deepstack features join the language model's first layers' hidden
        # states, one a layer: those past its layers reach no loss (deepstack_used)
        deep = (getattr(out, "deepstack_features", None) or ())[:spec.deepstack_used]
        return sum((f.float().sum() for f in deep), out.pooler_output.float().sum())
    return call


# LLaVA reading the last layer's output (vision_feature_layer -1) and the full strategy
# (the class token kept), beside LLaVA-1.5's -2 and default; Kimi-K2.5's tiny MoonViT
CONFIGS = {**CONFIGS, "llava_last": {**CONFIGS["llava"], "vision_feature_layer": -1,
                                     "vision_feature_select_strategy": "full"},
           "kimi_k25": _kimi(), "llama4": _llama4(), "idefics3": IDEFICS3,
           "llava_onevision": ONEVISION, "internvl": INTERNVL,
           # InternVL3-38B/78B's InternViT-6B: RMSNorms, QK-norm, the final LayerNorm
           "internvl_6b": _internvl_with(SIX_B)}


def _sdpa_config(data):
    """(torch, transformers, config): transformers' config of `data` (tests/test_vision.py's
    _kw) with "sdpa" attention in the tower, the text model and the whole, torch seeded for
    the model built from it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**_kw(data))
    for sub in ("vision_config", "text_config"):
        getattr(cfg, sub)._attn_implementation = "sdpa"
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return torch, transformers, cfg


def _sdpa_model(data, mode, cls=None, checkpointed=False):
    """(torch, model): transformers' `cls` (a class name; AutoModelForImageTextToText's
    choice without one) of `data` with "sdpa" attention, its parameters in bf16 for mode
    "bf16" and fp32 otherwise, in training mode; `checkpointed`: under transformers'
    reentrant gradient checkpointing."""
    torch, transformers, cfg = _sdpa_config(data)
    model = (getattr(transformers, cls)(cfg) if cls else
             transformers.AutoModelForImageTextToText.from_config(cfg))
    model = (model.to(torch.bfloat16) if mode == "bf16" else model.float()).train()
    if checkpointed:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": True})
        model.train()
    return torch, model


def _precision(torch, mode):
    """(the images' dtype, the context the tower runs in) of a mode of VS.MODES: bf16 pixels
    for bf16 parameters, fp32 ones otherwise, torch.autocast("cpu", bfloat16) for "autocast"."""
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    ac = torch.autocast("cpu", torch.bfloat16) if mode == "autocast" else contextlib.nullcontext()
    return dtype, ac


def _tower(family, mode):
    if family == "llama4":  # built in its dtype, as from_pretrained(dtype=...) does: its
        # complex freqs_ci buffer stays complex64 (model.to(bfloat16) would make it real)
        torch, transformers, cfg = _sdpa_config(CONFIGS[family])
        model = transformers.Llama4ForConditionalGeneration._from_config(
            cfg, dtype=torch.bfloat16 if mode == "bf16" else torch.float32)
        return torch, model.train()
    return _sdpa_model(CONFIGS[family], mode,
                       "Kimi_K25ForConditionalGeneration" if family == "kimi_k25" else None)


TILED = ("llama4", "idefics3", "internvl", "internvl_6b")  # two tiles of image_size² each


def _image_call(family, torch, model, spec, grid, mode):
    """(call, (gh, gw), tiles): transformers' tower (and projector) of `family` on one image
    in `mode`, call() its output or its features summed; Qwen's and Kimi's at `grid`
    patches, the tiled towers' on two tiles of image_size² (4×4 patches each), the others
    on one image_size² image, LLaVA-OneVision on a 448² image's anyres tiles."""
    dtype, ac = _precision(torch, mode)
    tiles = 2 if family in TILED else 1
    if family == "kimi_k25":  # patches of 3×14×14 and their grid
        gh, gw = grid
        px = torch.randn(gh * gw, 3, spec.patch, spec.patch, dtype=dtype)

        def call():
            with ac:
                f = model.model.get_image_features(
                    pixel_values=px, image_grid_thw=torch.tensor([[1, gh, gw]])).pooler_output
            return sum(x.float().sum() for x in f)
    elif family == "llama4":  # two tiles of 56² (4×4 patches each); the projector after
        gh = gw = spec.image_size // spec.patch
        px = torch.randn(2, 3, spec.image_size, spec.image_size, dtype=dtype)

        def call():
            with ac:
                h = model.get_image_features(pixel_values=px).last_hidden_state
                return model.multi_modal_projector(h.view(-1, h.size(-1)))
    elif family == "llava_onevision":  # a 448² image: its anyres tiles and the base tile
        import numpy as np
        import transformers
        proc = transformers.LlavaOnevisionImageProcessorPil(
            size={"height": SIDE, "width": SIDE}, crop_size={"height": SIDE, "width": SIDE},
            image_grid_pinpoints=PINS)
        pv = proc(images=[np.full((448, 448, 3), 128, dtype=np.uint8)], return_tensors="np")
        px = torch.tensor(pv["pixel_values"], dtype=dtype)
        gh = gw = SIDE // spec.patch
        tiles = px.shape[1]
        assert tiles == I.image_row(spec, (448, 448)).tiles

        def call():
            with ac:
                f = model.model.get_image_features(
                    pixel_values=px, image_sizes=torch.tensor([[448, 448]]),
                    vision_feature_layer=-1, vision_feature_select_strategy="full").pooler_output
            return _summed(f)
    elif grid is not None:  # Qwen: flattened patches and their grid
        gh, gw = grid
        call = _qwen_image(torch, model, spec, grid, dtype, ac)
    else:  # one image, or two tiles (Idefics3's with a leading image dimension)
        gh = gw = spec.image_size // spec.patch
        lead = (1, 2) if family == "idefics3" else (2,) if family in TILED else (1,)
        px = torch.randn(*lead, 3, spec.image_size, spec.image_size, dtype=dtype)

        def call():
            with ac:
                f = model.model.get_image_features(pixel_values=px).pooler_output
            return _summed(f)
    return call, (gh, gw), tiles


@pytest.mark.parametrize("mode", VS.MODES)
@pytest.mark.parametrize("family, grid", [("qwen2_5_vl", (8, 8)), ("qwen2_5_vl", (12, 20)),
                                          ("qwen2_vl", (8, 12)), ("qwen3_vl_moe", (8, 8)),
                                          ("qwen3_vl_moe", (12, 20)), ("gemma3", None),
                                          ("llava", None), ("llava_last", None),
                                          ("kimi_k25", (6, 10)), ("llama4", None),
                                          ("idefics3", None), ("llava_onevision", None),
                                          ("internvl", None), ("internvl_6b", None)])
def test_tower_saves_equal_transformers(family, grid, mode):
    """Qwen2.5-VL at one window (8×8 patches) and at 6 windows of 2 sizes (12×20), Qwen2-VL,
    Qwen3-VL-MoE's tower (learned positions, 3 deepstack mergers), Gemma 3's SigLIP and
    projector, LLaVA's CLIP and MLP projector (vision_feature_layer −2, its last layer's saves
    freed with the unused output; and −1 with the class token kept), Kimi-K2.5's MoonViT,
    Llama 4's ViT, Idefics3's SigLIP and InternVL's InternViT (layer scales) on two tiles,
    InternViT-6B's (RMSNorms, QK-norm over the full width, a final LayerNorm) on two tiles,
    LLaVA-OneVision on a 448² image's 37
    anyres tiles (the position_ids buffer its lookups save counted once): the bytes autograd saves for one image (what the
    backward pass needs of the tower) equal the ledger's saves."""
    torch, model = _tower(family, mode)
    spec = translate(CONFIGS[family], "c", family).vision
    call, (gh, gw), tiles = _image_call(family, torch, model, spec, grid, mode)
    measured = _saved_bytes(model, call)
    ledger = VB.walk(spec)
    per, once = VS.bytes_per_image(ledger, VB.values(spec, gh, gw), mode, "cpu")
    assert tiles * per + once == measured


@pytest.mark.parametrize("family", ["gemma3", "qwen2_vl", "qwen2_5_vl"])
def test_checkpointed_towers_equal_transformers(family):
    """--recompute full on the tower: transformers' gradient checkpointing (reentrant:
    CheckpointFunction saves each block's tensor inputs, the graph inside is not kept), fp32,
    one image; the saved tensors of the graph the output's backward walks (the function
    nodes' saved_tensors included) equal the ledger's checkpointed saves. Qwen's rotary cos
    and sin reach its blocks inside a tuple, held by the checkpoint's ctx rather than saved:
    2·N·d_h fp32 added by hand (N = 8·12 patches)."""
    torch, model = _tower(family, "fp32")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    spec = translate(CONFIGS[family], "c", family).vision
    if family == "gemma3":
        gh = gw = spec.image_size // spec.patch
        px = torch.randn(1, 3, spec.image_size, spec.image_size)
        def call():
            f = model.model.get_image_features(pixel_values=px).pooler_output
            return _summed(f)
    else:
        gh, gw = 8, 12
        px = torch.randn(gh * gw, spec.channels * spec.temporal_patch * spec.patch ** 2)
        call = lambda: model.model.visual(  # noqa: E731
            px, grid_thw=torch.tensor([[1, gh, gw]])).pooler_output
    measured = _saved_bytes(model, call)
    rotary = 0 if family == "gemma3" else 2 * gh * gw * spec.head_dim * 4
    per, once = VS.bytes_per_image(VB.walk(spec), VB.values(spec, gh, gw), "fp32", "cpu",
                                   checkpointed=True)
    assert per + once == measured + rotary


def test_checkpointed_blocks_keep_their_input_by_hand():
    """--recompute full on the tower: hand algebra on Qwen2.5-VL's tiny tower at 8×8
    patches in bf16 (N = 64, d_v = 32, 4 blocks): each block keeps its N·d_v bf16 input
    (4·64·32·2 = 16,384 bytes) in place of its saves; the rest (patch embedding, rotary
    tables, window indices, merger) is unchanged."""
    spec = translate(CONFIGS["qwen2_5_vl"], "c", "q").vision
    ledger, v = VB.walk(spec), VB.values(spec, 8, 8)
    full, _ = VS.bytes_per_image(ledger, v, "bf16")
    ckpt, _ = VS.bytes_per_image(ledger, v, "bf16", checkpointed=True)
    table = VS.roles(spec, "bf16", "cuda")
    block = sum(x.bytes(v, table) for x in ledger.saves if x.repeat == "L_v")
    assert ckpt == full - block + 4 * 64 * 32 * 2


def test_every_family_has_its_saves_written():
    """Every tower family the tool reads (the test configs of each) has its saves written:
    none is left out of a plan (vision_train.NOT_WRITTEN is unreached)."""
    from test_vision_mistral3 import DATA
    from test_vision_saves_gemma4 import _gemma4
    datas = [*CONFIGS.values(), DATA, _gemma4()]
    specs = [translate(d, "c", "x").vision for d in datas]
    assert {s.family for s in specs} >= set(VS.FAMILIES)
    assert all(VB.walk(s).saves is not None for s in specs)


def _qwen_bf16_saves(grid=(8, 8), trained=True):
    """transformers' Qwen2.5-VL tiny tower in bf16 on one image of grid patches: the bytes
    autograd saves (frozen: every parameter's requires_grad off, as LLaMA-Factory's
    freeze_vision_tower and freeze_multi_modal_projector leave them)."""
    torch, model = _tower("qwen2_5_vl", "bf16")
    if not trained:
        model.model.visual.requires_grad_(False)
    s = translate(CONFIGS["qwen2_5_vl"], "c", "q").vision
    gh, gw = grid
    px = torch.randn(gh * gw, s.channels * s.temporal_patch * s.patch ** 2, dtype=torch.bfloat16)
    call = lambda: model.model.visual(px, grid_thw=torch.tensor([[1, gh, gw]])).pooler_output  # noqa: E731
    if trained:
        return _saved_bytes(model, call)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: pytest.fail("saved"), lambda t: t):
        call()
    return 0


def _plan(capsys, tmp_path, *argv):
    import json
    code, out, err = run(capsys, "plan", "--config",
                         str(write_config(tmp_path, CONFIGS["qwen2_5_vl"])), "--gpu", "H100",
                         "--ctx", "256", "--precision", "bf16", "--format", "json", *argv)
    assert code == 0, err
    d = json.loads(out)
    return d, {m["name"]: m["bytes"] for m in d["peak"]["moments"]}


def test_plan_holds_the_trained_towers_saves_in_the_peak(capsys, tmp_path):
    """--train-vision with two 112×112 images a sequence (Qwen's processor: 8×8 patches,
    tests/test_vision.py), bf16, batch 3: the JSON's bytes per sequence are twice what
    transformers' own tower saves for one such image (hooks, above), and the start of the
    backward pass holds 3 × that more than without the images; the optimizer's update,
    where no activation is live, holds the same."""
    per_image = _qwen_bf16_saves()
    d, with_images = _plan(capsys, tmp_path, "--train-vision", "--batch", "3",
                           "--image", "112x112", "--images", "2")
    v = d["vision"]
    assert v["activations_counted"] and v["images_per_sequence"] == 2
    assert (v["activation_bytes_per_sequence"], v["activation_bytes_per_step"]) == \
        (2 * per_image, 0)  # bf16 parameters: no autocast copy of a weight
    _, without = _plan(capsys, tmp_path, "--train-vision", "--batch", "3")
    start = next(k for k in with_images if k.startswith("start of the backward"))
    update = next(k for k in with_images if "update" in k)
    assert with_images[start] - without[start] == 3 * 2 * per_image
    assert with_images[update] == without[update]


def test_a_frozen_tower_saves_nothing(capsys, tmp_path):
    """The default (frozen tower and projector): transformers' tower saves nothing for an
    image (a hook that fails on any save), and the plan's moments with an image equal those
    without; the JSON says the activations are not counted because there are none."""
    assert _qwen_bf16_saves(trained=False) == 0
    d, with_image = _plan(capsys, tmp_path, "--image", "112x112")
    _, without = _plan(capsys, tmp_path)
    assert with_image == without
    assert d["vision"]["activations"] == "frozen" and not d["vision"]["activations_counted"]


def test_the_first_screen_says_what_is_counted(capsys, tmp_path):
    """Trained with an image: the line gives the saved bytes; without one: says none is in
    the workload; Mistral 3's Pixtral: its forward-wide block mask besides."""
    path = str(write_config(tmp_path, CONFIGS["qwen2_5_vl"]))
    code, out, _ = run(capsys, "plan", "--config", path, "--gpu", "H100", "--ctx", "256",
                       "--train-vision", "--image", "112x112")
    first = out.split("\n\n")[0]
    assert code == 0 and "saved activations for the 1 image per sequence" in first
    code, out, _ = run(capsys, "plan", "--config", path, "--gpu", "H100", "--ctx", "256",
                       "--train-vision")
    assert code == 0 and "no image in the workload" in out.split("\n\n")[0]
    from test_vision_mistral3 import DATA
    other = str(write_config(tmp_path, DATA, folder="mistral3"))
    code, out, _ = run(capsys, "plan", "--config", other, "--gpu", "H100", "--ctx", "256",
                       "--train-vision", "--image", "112x112")
    assert code == 0 and "+ the block mask over the forward's B × 64 patches, growing as B²" \
        in out.split("\n\n")[0]


def test_pixtral_plan_holds_the_whole_forwards_saves(capsys, tmp_path):
    """Mistral 3 trained with one 112×112 image a sequence (8×8 patches), bf16, batch 3: the
    start of the backward pass holds what transformers' tower saves for one forward of the
    3 images (tests/test_vision_saves_pixtral.py's walk: S = 192 patches under one block
    mask; a multiple of 32, so CUDA's memory-efficient kernel pads neither the mask nor the
    log-sum-exp and the CPU's bytes are CUDA's) more than without images; the largest batch
    is where the exact bytes, the mask's B² among them, fit."""
    import json
    from test_vision_mistral3 import DATA
    from test_vision_saves_pixtral import _measured
    path = str(write_config(tmp_path, DATA, folder="mistral3"))

    def moments(*argv):
        code, out, err = run(capsys, "plan", "--config", path, "--gpu", "H100", "--ctx",
                             "256", "--precision", "bf16", "--batch", "3", "--train-vision",
                             "--format", "json", *argv)
        assert code == 0, err
        d = json.loads(out)
        return d, {m["name"]: m["bytes"] for m in d["peak"]["moments"]}
    d, with_images = moments("--image", "112x112")
    _, without = moments()
    start = next(k for k in with_images if k.startswith("start of the backward"))
    assert with_images[start] - without[start] == _measured([(112, 112)] * 3, "bf16")
    v = d["vision"]
    # one image alone: its mask 64² bf16 (S = 64, aligned), nothing padded
    assert v["activation_bytes_forward_at_batch_1"] == 64 * 64 * 2


def test_image_tokens_beyond_the_context_are_refused(capsys, tmp_path):
    """Two 112×112 images add 2 × 16 = 32 tokens (8×8 patches, a token per 2×2): --ctx 31
    cannot hold them."""
    from cli_run import refused_in_one_line
    refused_in_one_line(capsys, "plan", "--config",
                        str(write_config(tmp_path, CONFIGS["qwen2_5_vl"])), "--gpu", "H100",
                        "--ctx", "31", "--image", "112x112", "--images", "2",
                        expected="add 32 tokens to each sequence, more than --ctx 31")


# ---- many GPUs (planning/parallel/vision.py) ------------------------------------------------

def _tower_shapes():
    """transformers' own Qwen2.5-VL tiny tower and merger on the meta device: each
    parameter's shape (model.model.visual)."""
    from test_vision import _model
    return [tuple(p.shape) for p in _model(CONFIGS["qwen2_5_vl"]).model.visual.parameters()]


def _stage_items(tower, tp=1, pp=1, dp=2, zero=0, trained=True, images=None):
    """{stage: {item name: bytes at b = 1}} and the stages' one-micro-batch activations
    of a plan of the tiny Qwen2.5-VL in bf16 at T = 64, with the tower or without."""
    from accounting.analysis.images import workload
    from accounting.planning.memory import get_precision
    from accounting.planning.parallel.layout import Layout
    from accounting.planning.parallel.plan import parallel_plan
    from accounting.planning.parallel.vision import tower_for
    hf = translate(CONFIGS["qwen2_5_vl"], "c", "q")
    p = get_precision("bf16")
    run_tower = None
    if tower:
        run_tower = tower_for(hf.vision, workload(hf.vision, images, None), p, "adamw",
                              trained, "none", 64)
    lo = Layout(tp * pp * dp, tp, pp, dp, zero=zero, micro_batch=1, global_batch=dp * pp)
    plan = parallel_plan(hf.config, lo, 64, precision=p, implementation="transformers",
                         tower=run_tower)
    return ({s.stage: {i.name.split(" (")[0]: i.bytes.at(1) for i in s.items} for s in plan.stages},
            {s.stage: s.activations.per_micro_batch for s in plan.stages})


@pytest.mark.parametrize("tp", [1, 2])
def test_ddp_and_tp_hold_the_whole_tower(tp):
    """DDP (and TP 2: transformers' TP plans leave the tower unsplit): each GPU holds
    every tower parameter in bf16 (transformers' meta-device shapes: 2·Σ numel), and
    trained, its bf16 gradient too; frozen, its weights alone (every other item as
    without the tower: no gradient, no optimizer state, no DDP bucket)."""
    import math
    n = sum(math.prod(s) for s in _tower_shapes())
    with_tower, _ = _stage_items(True, tp=tp)
    without, _ = _stage_items(False, tp=tp)
    frozen, _ = _stage_items(True, tp=tp, trained=False)
    assert with_tower[0]["parameters"] - without[0]["parameters"] == 2 * n
    assert with_tower[0]["gradients"] - without[0]["gradients"] == 2 * n
    assert frozen[0]["vision tower parameters"] == 2 * n
    assert {k: v for k, v in frozen[0].items() if k != "vision tower parameters"} == without[0]


def test_fsdp_shards_the_tower_by_rows():
    """FSDP2 over 2 ranks: rank 0 holds ⌈rows/2⌉ rows of each tower parameter (torch.chunk on
    dim 0, padded: planning/parallel/states.py), in bf16, from transformers' shapes; trained
    in the model's states, frozen as its own item."""
    import math
    shard = sum(-(-s[0] // 2) * math.prod(s[1:]) for s in _tower_shapes())
    with_tower, _ = _stage_items(True, zero=3)
    without, _ = _stage_items(False, zero=3)
    assert with_tower[0]["parameters"] - without[0]["parameters"] == 2 * shard
    frozen, _ = _stage_items(True, zero=3, trained=False)
    assert frozen[0]["vision tower parameters"] == 2 * shard


def test_pipeline_puts_the_tower_and_its_saves_on_the_first_stage():
    """PP 2: the first stage holds the tower's parameters and, for an image of 8×8 patches
    a sequence, its saves per micro-batch (transformers' tower under hooks, bf16); the last
    stage holds what it held without a tower."""
    import math
    n = sum(math.prod(s) for s in _tower_shapes())
    with_tower, acts = _stage_items(True, pp=2, images=["112x112"])
    without, acts0 = _stage_items(False, pp=2)
    assert with_tower[1] == without[1] and acts[1] == acts0[1]
    assert with_tower[0]["parameters"] - without[0]["parameters"] == 2 * n
    assert (acts[0].a - acts0[0].a, acts[0].c - acts0[0].c) == (_qwen_bf16_saves(), 0)
