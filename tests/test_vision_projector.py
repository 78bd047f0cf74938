"""The projector trained on a frozen tower (issue 41; LLaVA's --tune_mm_mlp_adapter,
LLaMA-Factory's freeze_vision_tower with freeze_multi_modal_projector false): against
transformers' own models on the CPU (the tiny configs of tests/test_vision.py, attention
"sdpa"), every parameter of the tower requires_grad False and the projector's (the vision
ledger's projector parameters, by their state-dict keys) True. Independent sources: which
parameters autograd gives a .grad, the bytes of every storage autograd saves in the graph the
output's backward walks (tests/test_vision_train.py's walk), and FlopCounterMode's backward
FLOPs, each beside builder/vision_saves_projector.py and planning/vision_flops.py."""
import pytest

from accounting.architecture.hf_config import translate
from accounting.ledger.builder import vision as VB
from accounting.ledger.builder import vision_saves as VS
from accounting.ledger.builder import vision_saves_projector as VP
from test_vision_train import (CONFIGS, _image_call, _plan, _precision, _saved_bytes,
                               _sdpa_model, _tower)


def _freeze(model, ledger):
    """The tower's parameters frozen, the projector's trained (by state-dict key); returns
    the trained parameters' names."""
    proj = set(ledger.projector_params)
    tops = {".".join(p.name.split(".")[:2 if p.name.startswith("model.") else 1])
            for p in ledger.params}
    for n, p in model.named_parameters():
        if any(n == t or n.startswith(t + ".") for t in tops):
            p.requires_grad_(n in proj)
    return {n for n, p in model.named_parameters() if p.requires_grad and n in proj}


def _setup(family, mode, grid=None):
    """(model, spec, ledger, call, (gh, gw), tiles): transformers' model with its tower
    frozen and projector trained, and its image forward through the projector."""
    torch, model = _tower(family, mode)
    spec = translate(CONFIGS[family], "c", family).vision
    ledger = VB.walk(spec)
    _freeze(model, ledger)
    call, (gh, gw), tiles = _image_call(family, torch, model, spec, grid, mode)
    return torch, model, spec, ledger, call, (gh, gw), tiles


FAMILIES = [("qwen2_5_vl", (8, 8)), ("qwen2_5_vl", (12, 20)), ("qwen2_vl", (8, 12)),
            ("qwen3_vl_moe", (8, 8)), ("gemma3", None), ("llava", None), ("llava_last", None),
            ("kimi_k25", (6, 10)), ("llama4", None), ("idefics3", None), ("internvl", None),
            ("internvl_6b", None)]


@pytest.mark.parametrize("mode", VS.MODES)
@pytest.mark.parametrize("family, grid", FAMILIES)
def test_projector_saves_equal_transformers(family, grid, mode):
    """The bytes autograd saves for one image (per tile where tiled) with the tower frozen and
    the projector trained equal the projector-only saves: LayerNorms keep input, mean and
    rstd, Python RMSNorms their normalized output alone, a first linear on the tower's
    output its input without autocast's weight copy; Qwen3-VL's deepstack norms the two
    block outputs (indexes 0 and 2 of [0, 2, 3]: 3 is the last block's, the merger's input)."""
    _, model, spec, ledger, call, (gh, gw), tiles = _setup(family, mode, grid)
    measured = _saved_bytes(model, call)
    from dataclasses import replace
    mine = replace(ledger, saves=VP.saves(ledger))
    per, once = VS.bytes_per_image(mine, VB.values(spec, gh, gw), mode, "cpu")
    assert tiles * per + once == measured


@pytest.mark.parametrize("family, grid", FAMILIES[:1] + FAMILIES[3:6])
def test_only_the_projector_gets_gradients(family, grid):
    """After backward, exactly the ledger's projector parameters hold a .grad (transformers'
    own model: the tower's parameters none), but Qwen3-VL's third deepstack merger's (its
    output past the 2 text layers reaches no loss: VisionSpec.deepstack_used)."""
    _, model, spec, ledger, call, _, _ = _setup(family, "fp32", grid)
    call().float().sum().backward()
    got = {n for n, p in model.named_parameters() if p.grad is not None}
    unused = {n for n in ledger.projector_params if "deepstack_merger_list.2." in n}
    assert bool(unused) == (family == "qwen3_vl_moe")
    assert got == set(ledger.projector_params) - unused
    assert all(VS.unused_merger(spec, n) for n in unused)


@pytest.mark.parametrize("family, grid", [("qwen2_5_vl", (8, 12)), ("qwen3_vl_moe", (8, 8)),
                                          ("gemma3", None), ("llava", None),
                                          ("kimi_k25", (6, 10)), ("llama4", None),
                                          ("idefics3", None), ("internvl", None)])
def test_projector_backward_flops_equal_the_counter(family, grid):
    """FlopCounterMode over the backward of transformers' model with the tower frozen (fp32,
    the CPU): the projector's gradient matmuls, both for each but the first where it reads
    the tower's output (LLaVA's linear_1, Llama 4's adapter fc1, Idefics3's connector: the
    weight's alone)."""
    from torch.utils.flop_counter import FlopCounterMode
    from accounting.planning import vision_flops as VF
    from accounting.planning.vision_train import PROJECTOR
    torch, model, spec, ledger, call, grid, tiles = _setup(family, "fp32", grid)
    out = call()
    with FlopCounterMode(display=False) as bwd:
        out.float().sum().backward()
    row = type("Row", (), {"grid": grid, "tiles": tiles})()
    _, b, again, _, vb, _ = VF.image_records(spec, row, PROJECTOR, False)
    assert again == []
    assert bwd.get_total_flops() == tiles * sum(r.count(vb) * r.flops(vb) for r in b) > 0
    if family in VP.DIRECT:  # the first matmul's input gradient is not run
        first = VP.first_matmul(ledger)
        assert sum(1 for r in b if r.module == first.module) == 1


def _projector_numel(family):
    """The projector's parameters in transformers' own model (meta device), by its module."""
    from test_vision import _model
    model = _model(CONFIGS[family])
    ledger = VB.walk(translate(CONFIGS[family], "c", family).vision)
    named = dict(model.named_parameters())
    tower = {n for n in named if any(n.startswith(t) for t in ("model.visual",
                                                               "model.vision_tower"))}
    proj = {n for n in named if ".merger." in n}  # Qwen2.5-VL's PatchMerger: visual.merger
    assert proj == set(ledger.projector_params)
    return (sum(named[n].numel() for n in proj),
            sum(named[n].numel() for n in tower - proj))


def test_plan_trains_the_projector_alone(capsys, tmp_path):
    """--train-projector on the tiny Qwen2.5-VL in bf16 with AdamW, batch 3, two 112×112
    images a sequence (8×8 patches each): the gradients are the merger's parameters (counted
    on transformers' model) × 2 bytes, AdamW's two bf16 moments 2 × 2 bytes each plus a
    step counter per tensor; the start of the backward pass holds 3 × 2 × what
    transformers' model saves for one image with its tower frozen (hooks, above) more than
    without images; the tower's FLOPs: the merger's backward alone."""
    proj, _ = _projector_numel("qwen2_5_vl")
    d, with_images = _plan(capsys, tmp_path, "--train-projector", "--batch", "3",
                           "--image", "112x112", "--images", "2")
    v = d["vision"]
    assert v["trained_part"] == "projector" and v["trained_parameters"] == proj
    assert v["gradient_bytes"] == 2 * proj
    _, model, spec, ledger, call, _, _ = _setup("qwen2_5_vl", "bf16", (8, 8))
    per_image = _saved_bytes(model, call)
    assert (v["activation_bytes_per_sequence"], v["activation_bytes_per_step"]) == \
        (2 * per_image, 0)
    _, without = _plan(capsys, tmp_path, "--train-projector", "--batch", "3")
    start = next(k for k in with_images if k.startswith("start of the backward"))
    assert with_images[start] - without[start] == 3 * 2 * per_image
    f = d["flops_per_step"]["vision"]
    # by hand: N_m = 16 merged rows of d_vm = 128 (4·32): mlp.0 128 → 128, mlp.2 128 → 64
    # (d_t), each matmul's two gradients of its forward's size, 6 images
    assert f["projector_only"] and f["recompute"] == 0
    assert f["backward"] == 6 * 2 * (2 * 16 * 128 * 128 + 2 * 16 * 128 * 64)


def test_both_flags_are_refused(capsys, tmp_path):
    from cli_run import refused_in_one_line
    from hf_examples import write_config
    refused_in_one_line(capsys, "plan", "--config",
                        str(write_config(tmp_path, CONFIGS["qwen2_5_vl"])), "--gpu", "H100",
                        "--train-vision", "--train-projector", expected="give one of them")


def test_many_gpus_hold_the_projectors_state_and_the_towers_weights():
    """DDP over 2 GPUs, bf16: the projector's gradients (2 bytes each, transformers' count),
    the rest of the tower as frozen weights (2 bytes each)."""
    from test_vision_train import _stage_items
    from accounting.planning.vision_train import PROJECTOR
    proj, rest = _projector_numel("qwen2_5_vl")
    items, _ = _stage_items(True, trained=PROJECTOR)
    without, _ = _stage_items(False)
    assert items[0]["gradients"] - without[0]["gradients"] == 2 * proj
    assert items[0]["parameters"] - without[0]["parameters"] == 2 * proj
    assert items[0]["vision tower parameters"] == 2 * rest


def test_checkpointing_puts_the_frozen_tower_in_the_graph():
    """What the plan does not model (docs/planning.md): transformers 5.23's
    gradient_checkpointing_enable() calls enable_input_require_grads(), whose hook on the
    tower's get_input_embeddings() (Qwen2.5-VL's patch_embed) makes its output require
    grad, so the frozen tower's blocks run backward (and their forward again) beside the
    projector's gradients: FlopCounterMode's backward exceeds the projector's records."""
    from torch.utils.flop_counter import FlopCounterMode
    from accounting.planning import vision_flops as VF
    from accounting.planning.vision_train import PROJECTOR
    torch, model, spec, ledger, call, grid, tiles = _setup("qwen2_5_vl", "fp32", (8, 12))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    assert type(model.model.visual.get_input_embeddings()).__name__ == "Qwen2_5_VisionPatchEmbed"
    out = call()
    with FlopCounterMode(display=False) as bwd:
        out.float().sum().backward()
    row = type("Row", (), {"grid": grid, "tiles": tiles})()
    _, b, _, _, vb, _ = VF.image_records(spec, row, PROJECTOR, True)
    assert bwd.get_total_flops() > sum(r.count(vb) * r.flops(vb) for r in b)


def test_qwen2_5_vl_7b_projector_by_hand(capsys):
    """docs/planning.md's example: Qwen2.5-VL-7B's merger, from its config.json (hidden_size
    1,280, spatial_merge_size 2, out_hidden_size 3,584): ln_q's 1,280 weights, mlp.0
    5,120·5,120 + 5,120, mlp.2 3,584·5,120 + 3,584 = 44,574,464 parameters trained, their
    bf16 gradients 2 bytes each."""
    import json
    from cli_run import run
    code, out, err = run(capsys, "plan", "--config",
                         "tests/data/serving/Qwen2.5-VL-7B-Instruct.json", "--gpu", "H100",
                         "--ctx", "4096", "--precision", "bf16", "--train-projector",
                         "--format", "json")
    assert code == 0, err
    v = json.loads(out)["vision"]
    n = 1280 + 5120 * 5120 + 5120 + 3584 * 5120 + 3584
    assert v["trained_parameters"] == n == 44_574_464 and v["gradient_bytes"] == 2 * n


@pytest.mark.parametrize("mode", VS.MODES)
@pytest.mark.parametrize("family", ["gemma4", "mistral3"])
def test_gemma4_and_pixtral_projector_saves(family, mode):
    """Gemma 4 (3×6 patches padded to 36; its embedder's norm has no scale, so
    embedding_projection's input needs no gradient: its input alone) and Mistral 3's Pixtral
    (one 56×84 image, 4×6 patches: RMSNorm, patch merger, two linears; no block mask saved:
    no tower block is in the graph), the tower frozen and the projector trained."""
    from dataclasses import replace
    from test_vision import _gemma4
    from test_vision_mistral3 import DATA
    from test_vision_saves_gemma4 import GRID, _gemma4_image
    from test_vision_saves_pixtral import _pixtral_image
    data = _gemma4() if family == "gemma4" else DATA
    torch, model = _sdpa_model(data, mode, "Gemma4ForConditionalGeneration"
                               if family == "gemma4" else None)
    spec = translate(data, "c", family).vision
    ledger = VB.walk(spec)
    _freeze(model, ledger)
    dtype, ac = _precision(torch, mode)
    if family == "gemma4":  # 3×6 patches padded to 36
        grid, call = GRID, _gemma4_image(torch, model, dtype, ac)
    else:  # one 56×84 image: 4×6 patches
        grid, call = (4, 6), _pixtral_image(torch, model, [(56, 84)], dtype, ac)
    per, once = VS.bytes_per_image(replace(ledger, saves=VP.saves(ledger)),
                                   VB.values(spec, *grid), mode, "cpu")
    assert per + once == _saved_bytes(model, call)


def test_the_first_screen_says_the_projector_trains(capsys, tmp_path):
    """The vision tower line names the choice, the projector's parameters (transformers'
    count) and its backward in the step's FLOPs."""
    from cli_run import run
    from hf_examples import write_config
    proj, _ = _projector_numel("qwen2_5_vl")
    code, out, _ = run(capsys, "plan", "--config",
                       str(write_config(tmp_path, CONFIGS["qwen2_5_vl"])), "--gpu", "H100",
                       "--ctx", "256", "--train-projector", "--image", "112x112")
    first = out.split("\n\n")[0]
    assert code == 0 and "tower frozen and projector trained (--train-projector" in first
    assert f"the projector's {proj:,} parameters' gradients" in first
    assert "the projector's backward" in first and "none in the frozen tower" in first
