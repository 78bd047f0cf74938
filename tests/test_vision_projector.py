"""The projector trained on a frozen tower (issue 41; LLaVA's --tune_mm_mlp_adapter,
LLaMA-Factory's freeze_vision_tower with freeze_multi_modal_projector false): against
transformers' own models on the CPU (the tiny configs of tests/test_vision.py, attention
"sdpa"), every parameter of the tower requires_grad False and the projector's (the vision
ledger's projector parameters, by their state-dict keys) True. Independent sources: which
parameters autograd gives a .grad, the bytes of every storage autograd saves in the graph the
output's backward walks (tests/test_vision_train.py's walk), and FlopCounterMode's backward
FLOPs, each beside builder/vision_saves_projector.py and planning/vision_flops.py."""
import contextlib

import pytest

from accounting.architecture.hf_config import translate
from accounting.ledger.builder import vision as VB
from accounting.ledger.builder import vision_saves as VS
from accounting.ledger.builder import vision_saves_projector as VP
from test_vision_train import CONFIGS, _saved_bytes, _tower

TILED = ("llama4", "idefics3", "internvl")  # two tiles of image_size² each


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
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    ac = torch.autocast("cpu", torch.bfloat16) if mode == "autocast" else contextlib.nullcontext()
    tiles = 1
    if family == "kimi_k25":
        gh, gw = grid
        px = torch.randn(gh * gw, 3, spec.patch, spec.patch, dtype=dtype)

        def call():
            with ac:
                f = model.model.get_image_features(
                    pixel_values=px, image_grid_thw=torch.tensor([[1, gh, gw]])).pooler_output
            return sum(x.float().sum() for x in f)
    elif family == "llama4":
        gh = gw = spec.image_size // spec.patch
        px, tiles = torch.randn(2, 3, spec.image_size, spec.image_size, dtype=dtype), 2

        def call():
            with ac:
                h = model.get_image_features(pixel_values=px).last_hidden_state
                return model.multi_modal_projector(h.view(-1, h.size(-1)))
    elif grid is not None:  # Qwen: flattened patches and their grid
        gh, gw = grid
        px = torch.randn(gh * gw, spec.channels * spec.temporal_patch * spec.patch ** 2,
                         dtype=dtype)

        def call():
            with ac:
                out = model.model.visual(px, grid_thw=torch.tensor([[1, gh, gw]]))
            return sum((f.float().sum() for f in getattr(out, "deepstack_features", None) or ()),
                       out.pooler_output.float().sum())
    else:
        gh = gw = spec.image_size // spec.patch
        lead = (1, 2) if family == "idefics3" else (2,) if family in TILED else (1,)
        tiles = 2 if family in TILED else 1
        px = torch.randn(*lead, 3, spec.image_size, spec.image_size, dtype=dtype)

        def call():
            with ac:
                f = model.model.get_image_features(pixel_values=px).pooler_output
            return sum(x.float().sum() for x in f) if isinstance(f, (list, tuple)) else f
    return torch, model, spec, ledger, call, (gh, gw), tiles


FAMILIES = [("qwen2_5_vl", (8, 8)), ("qwen2_5_vl", (12, 20)), ("qwen2_vl", (8, 12)),
            ("qwen3_vl_moe", (8, 8)), ("gemma3", None), ("llava", None), ("llava_last", None),
            ("kimi_k25", (6, 10)), ("llama4", None), ("idefics3", None), ("internvl", None)]


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
    own model: the tower's parameters none)."""
    _, model, spec, ledger, call, _, _ = _setup(family, "fp32", grid)
    call().float().sum().backward()
    got = {n for n, p in model.named_parameters() if p.grad is not None}
    assert got == set(ledger.projector_params)
