"""LLaVA-OneVision's vision tower (issue 41): SigLIP, anyres tiling, unpadding and newline
tokens, counted against transformers 5.23's own objects: AutoModelForImageTextToText on the
meta device (every tower and projector parameter by name, image_newline too, the language
model beside it), LlavaOnevisionImageProcessorPil on the CPU (the tiles each image runs the
tower on) and, on the CPU, get_image_features under FlopCounterMode and the model's own
pack_image_features (the features, newlines included, that get_image_features packs for the
image: what LlavaOnevisionProcessor counts as its <image> tokens).
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

TEXT = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 4096}
SIDE = 56  # the tile (vision image_size); 4×4 patches of 14
PINS = [[SIDE * i, SIDE * j] for i in range(1, 7) for j in range(1, 7)]  # the default's shape
# llava-hf/llava-onevision-qwen2-0.5b-ov-hf's keys, small sizes
DATA = {"architectures": ["LlavaOnevisionForConditionalGeneration"],
        "model_type": "llava_onevision", "image_token_index": 250, "video_token_index": 251,
        "projector_hidden_act": "gelu", "vision_feature_layer": -1,
        "vision_feature_select_strategy": "full", "vision_aspect_ratio": "anyres_max_9",
        "image_grid_pinpoints": PINS, "text_config": TEXT,
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32,
                          "intermediate_size": 48, "num_hidden_layers": 2,
                          "num_attention_heads": 2, "image_size": SIDE, "patch_size": 14,
                          "vision_use_head": False}}
TOWER = ("model.vision_tower.", "model.multi_modal_projector.", "model.image_newline")


def _model(data=DATA, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                               if k != "architectures"})
    cfg._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    with torch.device(device):
        return transformers.AutoModelForImageTextToText.from_config(cfg).eval()


def test_parameters_equal_transformers_by_name():
    hf = translate(DATA, "config.json", "ov")
    ledger, sizes = VB.walk(hf.vision), VB.values(hf.vision)
    ours = {p.key(i) if p.per_layer else p.name: p.numel(sizes)
            for p in ledger.params for i in range(p.count(sizes))}
    theirs = {n: p.numel() for n, p in _model().named_parameters()}
    tower = {n: c for n, c in theirs.items() if n.startswith(TOWER)}
    assert ours == tower
    assert analyze(hf.config).param_count == sum(theirs.values()) - sum(tower.values())


@pytest.mark.parametrize("size", [(448, 448), (1024, 1024), (300, 1000), (200, 130),
                                  (40, 600)])
def test_tiles_tokens_and_flops_equal_transformers(size):
    """The image processor's tiles for the image; the model's own get_image_features on
    them (FlopCounterMode: the tower and projector on every tile; its packed rows, unpadded,
    newlines included) = the tool's row."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    s = translate(DATA, "c", "ov").vision
    proc = transformers.LlavaOnevisionImageProcessorPil(
        size={"height": SIDE, "width": SIDE}, crop_size={"height": SIDE, "width": SIDE},
        image_grid_pinpoints=PINS)
    out = proc(images=[np.full((*size, 3), 128, dtype=np.uint8)], return_tensors="np")
    pixels = torch.tensor(out["pixel_values"], dtype=torch.float32)
    row = I.image_row(s, size)
    assert row.tiles == pixels.shape[1]
    model = _model(device="cpu")
    sizes = torch.tensor([size])
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        feats = model.model.get_image_features(pixel_values=pixels, image_sizes=sizes,
                                               vision_feature_layer=-1,
                                               vision_feature_select_strategy="full")
    assert row.flops == counter.get_total_flops()
    packed = feats.pooler_output  # get_image_features packs: unpadded rows and newlines
    rows = sum(t.shape[0] for t in packed) if isinstance(packed, (list, tuple)) \
        else packed.shape[0]
    assert row.tokens == rows


def test_tokens_at_the_done_when_sizes_by_hand():
    """At the published sizes (384 tiles, 27×27 patches, anyres_max_9): 448² picks 768²
    (2×2 tiles: 54×54 features, no unpadding, no downsampling) → 2,916 + 54 newlines + the
    base 729 = 3,699."""
    data = {**DATA, "image_grid_pinpoints": None,
            "vision_config": {**DATA["vision_config"], "image_size": 384}}
    s = translate(data, "c", "ov").vision
    assert I.select_best_resolution(448, 448, s.pinpoints) == (768, 768)
    assert I.image_row(s, (448, 448)).tokens == 54 * 54 + 54 + 729


def test_the_contract_on_a_config_json(tmp_path, capsys):
    d = contract_json(capsys, tmp_path, DATA, _model(), TOWER)
    assert d["workload"]["image_tokens"] == I.image_row(translate(DATA, "c", "ov").vision,
                                                        (448, 448)).tokens


def test_the_pooling_head_is_refused(tmp_path, capsys):
    data = {**DATA, "vision_config": {k: v for k, v in DATA["vision_config"].items()
                                      if k != "vision_use_head"}}
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify",
                        expected="vision_use_head")
