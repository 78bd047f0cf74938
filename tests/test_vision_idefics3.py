"""Idefics3 and SmolVLM's vision tower (issue 41): SigLIP, the pixel-shuffle connector and
image splitting, counted against transformers 5.23's own objects: AutoModelForImageTextToText
on the meta device (every tower and connector parameter by name, the language model beside
it), Idefics3ImageProcessorPil on the CPU (the tiles each image is split into: the tower runs
once per tile) and FlopCounterMode over get_image_features on the CPU (one tile's matmul
FLOPs). The <image> tokens per tile are the processor's image_seq_len, (image_size/p)²/r²
(processing_idefics3.py's docstring and Idefics3Model's own image_seq_len, read there).
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

TEXT = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 4096}
# HuggingFaceTB/SmolVLM-Instruct's and Idefics3-8B-Llama3's keys, small sizes
DATA = {"architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3",
        "image_token_id": 250, "scale_factor": 2, "text_config": TEXT,
        "vision_config": {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                          "num_attention_heads": 2, "image_size": 56, "patch_size": 14}}
TOWER = ("model.vision_model.", "model.connector.")


def _model(data=DATA, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                               if k != "architectures"})
    cfg._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    with torch.device(device):
        return transformers.AutoModelForImageTextToText.from_config(cfg).eval()


@pytest.mark.parametrize("model_type", ["idefics3", "smolvlm"])
def test_parameters_equal_transformers_by_name(model_type):
    data = {**DATA, "model_type": model_type}
    hf = translate(data, "config.json", model_type)
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
    """Idefics3-8B's processor (size longest_edge 4·364, max_image_size 364, the published
    vision image_size 364): the tiles it cuts, with return_row_col_info."""
    transformers = pytest.importorskip("transformers")
    data = {**DATA, "vision_config": {**DATA["vision_config"], "image_size": 364}}
    s = translate(data, "c", "i3").vision
    proc = transformers.Idefics3ImageProcessorPil()
    assert proc.size["longest_edge"] == 4 * 364 and proc.max_image_size["longest_edge"] == 364
    out = proc(images=[[np.full((*size, 3), 128, dtype=np.uint8)]], return_row_col_info=True,
               return_tensors="np")
    rows, cols = out["rows"][0][0], out["cols"][0][0]
    assert I.idefics3_tiles(*size, 4 * 364, 364) == (rows, cols)
    row = I.image_row(s, size)
    assert row.tiles == out["pixel_values"].shape[1]
    assert row.tokens == row.tiles * (364 // 14) ** 2 // 4  # image_seq_len 169 per tile


def test_tokens_at_the_done_when_sizes_by_hand():
    """At Idefics3-8B's sizes both 448² and 1024² are scaled to 1,456² (4 × 364): 16 tiles
    and the global one, 17 × 169 = 2,873 <image> tokens."""
    data = {**DATA, "vision_config": {**DATA["vision_config"], "image_size": 364}}
    s = translate(data, "c", "i3").vision
    assert I.image_row(s, (448, 448)).tokens == I.image_row(s, (1024, 1024)).tokens == 17 * 169


def test_encoder_flops_equal_flop_counter():
    """One tile of image_size² through get_image_features (tower and connector) on the CPU
    under FlopCounterMode = the vision ledger's matmul FLOPs for one tile."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    s = translate(DATA, "c", "i3").vision
    model = _model(device="cpu")
    side = 56 // 14
    with torch.no_grad(), FlopCounterMode(display=False) as counter:  # (zeros: "padding")
        out = model.model.get_image_features(pixel_values=torch.ones(1, 1, 3, 56, 56))
    values = VB.values(s, side, side)
    assert sum(r.flops(values) * r.count(values) for r in VB.walk(s).matmuls) == \
        counter.get_total_flops()
    assert out.pooler_output[0].shape[-2] == s.tokens_per_image == 4


def test_the_contract_on_a_config_json(tmp_path, capsys):
    d = contract_json(capsys, tmp_path, DATA, _model(), TOWER)
    # 448 → 224 (4·56), 4×4 tiles of 56² and the global one, 4 tokens each
    assert d["workload"]["image_tokens"] == 17 * 4


def test_a_scale_factor_that_does_not_divide_the_grid_is_refused(tmp_path, capsys):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, {**DATA, "scale_factor": 3})),
                        "--no-verify", expected="scale_factor")
