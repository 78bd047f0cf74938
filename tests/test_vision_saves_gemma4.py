"""Gemma 4's trained tower's saved tensors (issue 41, Must 3;
accounting/ledger/builder/vision_saves_gemma4.py) against transformers' own tower on the
CPU: the tiny config of tests/test_vision.py (4 query heads, 2 K/V heads, 2 layers), one
image of 3×6 patches padded to the budget of 4 soft tokens (36 patches: the attention
masked), Gemma4ForConditionalGeneration.get_image_features in training mode (attention
"sdpa"), every storage autograd saves in the graph its output's backward walks
(tests/test_vision_train.py's walk), at fp32, bf16 and fp32 under bf16 autocast, with and
without standardize; and under gradient checkpointing (reentrant), where the rotary cos and
sin reach the layers inside a tuple the checkpoint's ctx holds (2·N·d_h in the residual
stream's dtype, added by hand as for Qwen's)."""
import pytest

from accounting.architecture.hf_config import translate
from accounting.ledger.builder import vision as VB
from accounting.ledger.builder import vision_saves as VS
from test_vision import _gemma4
from test_vision_train import _precision, _saved_bytes, _sdpa_model

GRID, PADDED = (3, 6), 36


def _gemma4_image(torch, model, dtype, ac):
    """Gemma 4's get_image_features on one image of GRID patches padded to PADDED (the
    padding's positions -1), in `ac`: its first image's features."""
    gh, gw = GRID
    real = [[x, y] for y in range(gh) for x in range(gw)]
    pos = torch.tensor([real + [[-1, -1]] * (PADDED - len(real))])
    px = torch.randn(1, PADDED, 3 * 16 * 16, dtype=dtype)

    def call():
        with ac:
            return model.model.get_image_features(pixel_values=px,
                                                  image_position_ids=pos).pooler_output[0]
    return call


def _measured(mode: str, standardize: bool = False, checkpointed: bool = False,
              clipped: bool = False):
    data = _gemma4()
    data["vision_config"] = {**data["vision_config"], "standardize": standardize,
                             "use_clipped_linears": clipped}
    torch, model = _sdpa_model(data, mode, "Gemma4ForConditionalGeneration", checkpointed)
    _, ac = _precision(torch, mode)
    call = _gemma4_image(torch, model, torch.float32, ac)  # fp32 pixels in every mode
    return translate(data, "c", "g4").vision, _saved_bytes(model, call)


@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("mode", VS.MODES)
def test_gemma4_tower_saves_equal_transformers(mode, standardize):
    spec, measured = _measured(mode, standardize)
    per, once = VS.bytes_per_image(VB.walk(spec), VB.values(spec, *GRID), mode, "cpu")
    assert per + once == measured


@pytest.mark.parametrize("mode", VS.MODES)
def test_gemma4_checkpointed_tower_equals_transformers(mode):
    spec, measured = _measured(mode, checkpointed=True)
    per, once = VS.bytes_per_image(VB.walk(spec), VB.values(spec, *GRID), mode, "cpu",
                                   checkpointed=True)
    rotary = 2 * PADDED * spec.head_dim * (2 if mode == "bf16" else 4)
    assert per + once == measured + rotary


def test_gemma4_cuda_attention_by_hand():
    """CUDA's masked sdpa (the memory-efficient kernel), read from PyTorch's source: the
    additive mask padded to a multiple of 8 columns, the log-sum-exp to 32 rows. The
    published budget, 280 soft tokens of 3×3 patches: N = 2,520, a multiple of 8 (the mask
    unpadded) but not of 32 (the log-sum-exp padded to 2,528 rows): bf16 parameters, per
    layer h·(2,528 − 2,520)·4 bytes more on CUDA. The tiny budget of 4 soft tokens: N = 36,
    the mask padded to 40 columns (bf16: 36·4·2 bytes more a layer), the log-sum-exp to 64
    rows (4 heads: 4·28·4 more)."""
    data = {**_gemma4(), "vision_soft_tokens_per_image": 280}
    spec = translate(data, "c", "g4").vision
    ledger, v = VB.walk(spec), VB.values(spec, 48, 48)
    assert v["N"] == 2520
    cpu, _ = VS.bytes_per_image(ledger, v, "bf16", "cpu")
    cuda, _ = VS.bytes_per_image(ledger, v, "bf16", "cuda")
    assert cuda - cpu == spec.depth * spec.heads * (2528 - 2520) * 4
    # a budget of 4 soft tokens: N = 36 patches, the mask padded to 40 columns
    small = VB.walk(translate(_gemma4(), "c", "g4").vision)
    v = VB.values(small.spec, *GRID)
    cpu, _ = VS.bytes_per_image(small, v, "bf16", "cpu")
    cuda, _ = VS.bytes_per_image(small, v, "bf16", "cuda")
    assert cuda - cpu == 2 * (36 * (40 - 36) * 2 + 4 * (64 - 36) * 4)


@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize("mode", VS.MODES)
def test_gemma4_clipped_tower_saves_equal_transformers(mode, checkpointed):
    """use_clipped_linears (Gemma4ClippableLinear: torch.clamp of each linear's input and
    output by its 0-dim buffers): transformers' tower's saves, measured as above, equal the
    ledger's, with and without gradient checkpointing."""
    spec, measured = _measured(mode, checkpointed=checkpointed, clipped=True)
    assert spec.clipped
    per, once = VS.bytes_per_image(VB.walk(spec), VB.values(spec, *GRID), mode, "cpu",
                                   checkpointed=checkpointed)
    rotary = 2 * PADDED * spec.head_dim * (2 if mode == "bf16" else 4) if checkpointed else 0
    assert per + once == measured + rotary
