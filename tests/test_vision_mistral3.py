"""Mistral 3's vision tower (issue 41): a mistral3 config.json (Pixtral's ViT, the patch
merger and Mistral3MultiModalProjector beside a Mistral language model), counted against
transformers 5.23's own objects: AutoModelForImageTextToText on the meta device (every
tower and projector parameter by name, the language model beside it), the Pixtral image
processor on the CPU (each image's resized size) and FlopCounterMode over
get_image_features on the CPU (the encoder's matmul FLOPs for one image).

The image tokens are PixtralProcessor's [IMG] placeholders (processing_pixtral.py, read
there; it needs a tokenizer file, so the rule is written out): the image processor gets
patch_size = patch_size · spatial_merge_size, and each of the H/(p·s) rows of the resized
image becomes W/(p·s) [IMG] tokens, which the projector's rows fill; the [IMG_BREAK] after
each row ([IMG_END] after the last) are text tokens beside them, as docs/architectures.md
counts image tokens.
"""
import json

import numpy as np
import pytest

from accounting import analyze
from accounting.analysis import images as I
from accounting.architecture.hf_config import translate
from accounting.ledger.builder import vision as VB
from cli_run import refused_in_one_line, run
from hf_examples import write_config
from vlm_contract import contract_json

TEXT = {"model_type": "mistral", "vocab_size": 256, "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "sliding_window": None}
# mistralai/Mistral-Small-3.1-24B-Instruct-2503's keys, small sizes
DATA = {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
        "image_token_index": 10, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
        "vision_feature_layer": -1, "multimodal_projector_bias": False, "text_config": TEXT,
        "vision_config": {"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 224,
                          "patch_size": 14, "head_dim": 16, "hidden_act": "silu",
                          "rope_theta": 10000.0}}
TOWER = ("model.vision_tower.", "model.multi_modal_projector.")


def _model(data=DATA, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                               if k != "architectures"})
    cfg._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    with torch.device(device):
        return transformers.AutoModelForImageTextToText.from_config(cfg).eval()


@pytest.mark.parametrize("change", [{}, {"multimodal_projector_bias": True,
                                         "tie_word_embeddings": False}])
def test_parameters_equal_transformers_by_name(change):
    """Tower, merger and projector by state-dict key and size; the language model is the
    rest (its LM head tied by the wrapper's tie_word_embeddings, default true)."""
    data = {**DATA, **change}
    hf = translate(data, "config.json", "mistral3")
    ledger, sizes = VB.walk(hf.vision), VB.values(hf.vision)
    ours = {p.key(i) if p.per_layer else p.name: p.numel(sizes)
            for p in ledger.params for i in range(p.count(sizes))}
    theirs = {n: p.numel() for n, p in _model(data).named_parameters()}
    tower = {n: c for n, c in theirs.items() if n.startswith(TOWER)}
    assert ours == tower
    assert analyze(hf.config).param_count == sum(theirs.values()) - sum(tower.values())


@pytest.mark.parametrize("size", [(1024, 1024), (448, 448), (300, 1000), (2000, 3000),
                                  (20, 30)])
def test_image_tokens_follow_the_processor(size):
    """Mistral-Small-3.1's processor (preprocessor_config.json: longest_edge 1,540 = its
    vision_config.image_size, patch 14, merge 2): PixtralImageProcessorPil resizes; the
    tokens are PixtralProcessor's [IMG] placeholders, (W/28)·(H/28)."""
    transformers = pytest.importorskip("transformers")
    data = {**DATA, "vision_config": {**DATA["vision_config"], "image_size": 1540}}
    s = translate(data, "c", "m3").vision
    proc = transformers.PixtralImageProcessorPil(size={"longest_edge": 1540},
                                                 patch_size={"height": 28, "width": 28})
    h, w = (int(x) for x in proc(images=[np.zeros((*size, 3), dtype=np.uint8)],
                                 return_tensors="np")["image_sizes"][0])
    row = I.image_row(s, size)
    assert row.resized == (h, w)
    assert row.grid == (h // 14, w // 14)
    assert row.tokens == (w // 28) * (h // 28)


def test_tokens_at_the_done_when_sizes_by_hand():
    """448²: 16 rows of 16 [IMG] = 256; 1024² is rounded up to 1,036² (37 units of 28):
    37 rows of 37 = 1,369 (and 37 break/end text tokens beside them)."""
    data = {**DATA, "vision_config": {**DATA["vision_config"], "image_size": 1540}}
    s = translate(data, "c", "m3").vision
    assert I.image_row(s, (448, 448)).tokens == 16 * 16
    assert I.image_row(s, (1024, 1024)).tokens == 37 * 37


@pytest.mark.parametrize("grid", [(6, 10), (4, 4)])
def test_encoder_flops_equal_flop_counter(grid):
    """One image of grid patches through get_image_features (tower, norm, merger,
    projector) on the CPU under FlopCounterMode = the vision ledger's matmul FLOPs."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    s = translate(DATA, "c", "m3").vision
    model = _model(device="cpu")
    H, W = grid[0] * 14, grid[1] * 14
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model.model.get_image_features(pixel_values=torch.zeros(1, 3, H, W),
                                             image_sizes=torch.tensor([[H, W]]))
    values = VB.values(s, *grid)
    assert sum(r.flops(values) * r.count(values) for r in VB.walk(s).matmuls) == \
        counter.get_total_flops()
    assert out.pooler_output[0].shape[0] == grid[0] * grid[1] // 4


def test_the_contract_on_a_config_json(tmp_path, capsys):
    """--config FILE --image 448x448 --format json: .parameters.total the whole model
    (transformers' count), .parameters.vision the tower and projector, .workload.image_tokens
    the processor's, a vision encoder among the executed components."""
    d = contract_json(capsys, tmp_path, DATA, _model(), TOWER)
    # image_size 224: fitted within 224, 8 rows of 8 [IMG]
    assert d["workload"]["image_tokens"] == 8 * 8


def test_a_feature_layer_list_is_refused(tmp_path, capsys):
    refused_in_one_line(capsys, "--config", str(write_config(
        tmp_path, {**DATA, "vision_feature_layer": [-1, -2]})), "--no-verify",
        expected="vision_feature_layer")
