"""InternVL's vision tower (issue 41): InternViT, the pixel-shuffle MLP projector and dynamic
tiling, counted against transformers 5.23's own objects: AutoModelForImageTextToText on the
meta device (every tower and projector parameter by name, the language model beside it),
GotOcr2ImageProcessorPil on the CPU with InternVLProcessor's crop_to_patches (the tiles each
image runs the tower on) and FlopCounterMode over get_image_features on the CPU (one tile's
matmul FLOPs). Tokens per tile: the processor's image_seq_length, (image_size/p)²/4 (256 at
448/14; the <img> </img> around them are text tokens; processing_internvl.py, read there).
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
# OpenGVLab/InternVL3-1B-hf's keys, small sizes
DATA = {"architectures": ["InternVLForConditionalGeneration"], "model_type": "internvl",
        "image_token_id": 250, "image_seq_length": 4, "downsample_ratio": 0.5,
        "projector_hidden_act": "gelu", "vision_feature_layer": -1,
        "vision_feature_select_strategy": "default", "text_config": TEXT,
        "vision_config": {"model_type": "internvl_vision", "hidden_size": 32,
                          "intermediate_size": 48, "num_hidden_layers": 2,
                          "num_attention_heads": 2, "image_size": [56, 56],
                          "patch_size": [14, 14], "norm_type": "layer_norm",
                          "use_qk_norm": False, "attention_bias": True,
                          "use_mean_pooling": True, "layer_scale_init_value": 0.1}}
TOWER = ("model.vision_tower.", "model.multi_modal_projector.")
# InternVL3-38B/78B's InternViT-6B: RMSNorm, QK-norm, no attention bias, a final LayerNorm
SIX_B = {"norm_type": "rms_norm", "use_qk_norm": True, "attention_bias": False,
         "use_mean_pooling": False}


def _model(data=DATA, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                               if k != "architectures"})
    cfg._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    with torch.device(device):
        return transformers.AutoModelForImageTextToText.from_config(cfg).eval()


def _with(vision: dict) -> dict:
    return {**DATA, "vision_config": {**DATA["vision_config"], **vision}}


@pytest.mark.parametrize("vision", [{}, SIX_B])
def test_parameters_equal_transformers_by_name(vision):
    data = _with(vision)
    hf = translate(data, "config.json", "internvl")
    ledger, sizes = VB.walk(hf.vision), VB.values(hf.vision)
    ours = {p.key(i) if p.per_layer else p.name: p.numel(sizes)
            for p in ledger.params for i in range(p.count(sizes))}
    theirs = {n: p.numel() for n, p in _model(data).named_parameters()}
    tower = {n: c for n, c in theirs.items() if n.startswith(TOWER)}
    assert ours == tower
    assert analyze(hf.config).param_count == sum(theirs.values()) - sum(tower.values())


@pytest.mark.parametrize("size", [(1024, 1024), (448, 448), (300, 1000), (2000, 3000),
                                  (30, 20), (5000, 700)])
def test_tiles_equal_the_processor(size):
    """The published tile size 448 (InternVL3's vision image_size): GotOcr2ImageProcessorPil
    with crop_to_patches (InternVLProcessor's default), 1 to 12 tiles and the thumbnail."""
    transformers = pytest.importorskip("transformers")
    s = translate(_with({"image_size": [448, 448]}), "c", "ivl").vision
    proc = transformers.GotOcr2ImageProcessorPil(size={"height": 448, "width": 448})
    out = proc(images=[np.full((*size, 3), 128, dtype=np.uint8)], crop_to_patches=True,
               return_tensors="np")
    row = I.image_row(s, size)
    assert row.tiles == int(out["num_patches"][0]) == out["pixel_values"].shape[0]
    assert row.tokens == row.tiles * 256


def test_tokens_at_the_done_when_sizes_by_hand():
    """448²: the 1×1 grid (1:1 exactly), 256. 1024²: every square grid ties at 1:1; a
    later one wins while the image's area exceeds half the grid's: 2×2 (1,048,576 >
    0.5·448²·4 = 401,408) and 3×3 (> 903,168), with the thumbnail 10 tiles: 10·256."""
    s = translate(_with({"image_size": [448, 448]}), "c", "ivl").vision
    assert I.image_row(s, (448, 448)).tokens == 256
    assert I.image_row(s, (1024, 1024)).tokens == 10 * 256


@pytest.mark.parametrize("vision", [{}, SIX_B])
def test_encoder_flops_equal_flop_counter(vision):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    data = _with(vision)
    s = translate(data, "c", "ivl").vision
    model = _model(data, device="cpu")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model.model.get_image_features(pixel_values=torch.ones(1, 3, 56, 56))
    values = VB.values(s, 4, 4)
    assert sum(r.flops(values) * r.count(values) for r in VB.walk(s).matmuls) == \
        counter.get_total_flops()
    assert out.pooler_output.shape[-2] == s.tokens_per_image == 4


def test_the_contract_on_a_config_json(tmp_path, capsys):
    d = contract_json(capsys, tmp_path, DATA, _model(), TOWER)
    # tiles of 56²: 448² ties at 1:1 up to 3×3 (200,704 > 0.5·56²·9), and the thumbnail:
    # 10 tiles of 4 tokens
    assert d["workload"]["image_tokens"] == 10 * 4


def test_a_mask_token_is_refused(tmp_path, capsys):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, _with(
        {"use_mask_token": True}))), "--no-verify", expected="use_mask_token")
