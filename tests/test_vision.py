"""Vision towers (issue 41): small vision-language config.json files of the four families
the tool reads (qwen2_vl, qwen2_5_vl, gemma3, llava), counted against transformers' own
objects: AutoModelForImageTextToText on the meta device (every parameter of the tower and
projector by name, the language model beside it), transformers' image processors on the
CPU (the image tokens), and FlopCounterMode over the tower's forward on the CPU (the
encoder's matmul FLOPs per image); one window count by hand.
"""
import json
from pathlib import Path

import numpy as np
import pytest

from accounting import analyze
from accounting.analysis import images as I
from accounting.ledger.builder import vision as VB
from accounting.architecture.hf_config import translate
from cli_run import refused_in_one_line, run
from hf_examples import write_config

TEXT = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096}
CONFIGS = {
    # Qwen2.5-VL-7B-Instruct's keys (flat, as the Hub file), small sizes
    "qwen2_5_vl": {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        **TEXT, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "sliding_window": 4096,
        "use_sliding_window": False, "max_window_layers": 2, "tie_word_embeddings": False,
        "hidden_act": "silu", "image_token_id": 200, "video_token_id": 201,
        "vision_start_token_id": 202, "vision_end_token_id": 203, "vision_token_id": 204,
        "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
        "attention_dropout": 0.0, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "vision_config": {"depth": 4, "hidden_act": "silu", "hidden_size": 32,
                          "intermediate_size": 48, "num_heads": 2, "in_chans": 3,
                          "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
                          "spatial_patch_size": 14, "window_size": 112,
                          "fullatt_block_indexes": [1, 3], "tokens_per_second": 2,
                          "temporal_patch_size": 2}},
    # Qwen2-VL-7B-Instruct's keys, small sizes
    "qwen2_vl": {
        "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
        **TEXT, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "hidden_act": "silu", "image_token_id": 200, "video_token_id": 201,
        "vision_start_token_id": 202, "vision_end_token_id": 203, "bos_token_id": 0,
        "eos_token_id": 1, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "vision_config": {"depth": 3, "embed_dim": 32, "mlp_ratio": 4, "num_heads": 2,
                          "in_chans": 3, "hidden_size": 64, "patch_size": 14,
                          "spatial_merge_size": 2, "temporal_patch_size": 2}},
    # Qwen3-VL-30B-A3B-Instruct's keys, small sizes (three deepstack mergers)
    "qwen3_vl_moe": {
        "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
        "image_token_id": 200, "video_token_id": 201, "vision_start_token_id": 202,
        "vision_end_token_id": 203, "tie_word_embeddings": False,
        "text_config": {"model_type": "qwen3_vl_moe_text", **TEXT, "head_dim": 16,
                        "moe_intermediate_size": 32, "num_experts": 4,
                        "num_experts_per_tok": 2, "decoder_sparse_step": 1,
                        "mlp_only_layers": [], "norm_topk_prob": True, "rms_norm_eps": 1e-6,
                        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [2, 3, 3],
                                         "rope_type": "default"}, "rope_theta": 5000000},
        "vision_config": {"deepstack_visual_indexes": [0, 2, 3], "depth": 4,
                          "hidden_act": "gelu_pytorch_tanh", "hidden_size": 32,
                          "in_channels": 3, "intermediate_size": 48, "model_type": "qwen3_vl_moe",
                          "num_heads": 2, "num_position_embeddings": 64, "out_hidden_size": 64,
                          "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}},
    # google/gemma-3-4b-it's keys, small sizes (16 tokens per image from 8×8 patches)
    "gemma3": {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "mm_tokens_per_image": 16, "boi_token_index": 250, "eoi_token_index": 251,
        "image_token_index": 252,
        "text_config": {"model_type": "gemma3_text", **TEXT, "head_dim": 16,
                        "sliding_window": 8},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32,
                          "intermediate_size": 48, "num_hidden_layers": 2,
                          "num_attention_heads": 2, "image_size": 112, "patch_size": 14,
                          "vision_use_head": False}},
    # llava-hf/llava-1.5-7b-hf's keys, small sizes
    "llava": {
        "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
        "image_token_index": 250, "projector_hidden_act": "gelu", "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "text_config": {"model_type": "llama", **TEXT},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32,
                          "intermediate_size": 48, "num_hidden_layers": 2,
                          "num_attention_heads": 2, "image_size": 56, "patch_size": 14,
                          "projection_dim": 16}},
}
TOWER = ("model.visual.", "model.vision_tower.", "model.multi_modal_projector.")
FRONTIER = Path(__file__).resolve().parents[2] / "shared" / "frontier"


def _kw(data):
    return {k: v for k, v in data.items() if k != "architectures"}


def _model(data, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**_kw(data))
    for sub in ("vision_config", "text_config"):
        if getattr(cfg, sub, None) is not None:
            getattr(cfg, sub)._attn_implementation = "eager"
    cfg._attn_implementation = "eager"
    with torch.device(device):
        return transformers.AutoModelForImageTextToText.from_config(cfg).eval()


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_parameters_equal_transformers_by_name(family):
    """Every parameter of the tower and projector, by its state-dict key and size, equals
    transformers' AutoModelForImageTextToText on the meta device; the language model's
    count is the rest."""
    data = CONFIGS[family]
    hf = translate(data, "config.json", family)
    assert hf.vision is not None and family.startswith(hf.vision.family)
    ledger, sizes = VB.walk(hf.vision), VB.values(hf.vision)
    ours = {p.key(i) if p.per_layer else p.name: p.numel(sizes)
            for p in ledger.params for i in range(p.count(sizes))}
    theirs = {n: p.numel() for n, p in _model(data).named_parameters()}
    tower = {n: c for n, c in theirs.items() if n.startswith(TOWER)}
    assert ours == tower
    assert analyze(hf.config).param_count == sum(theirs.values()) - sum(tower.values())


def test_the_contract_on_a_config_json(tmp_path, capsys):
    """--config FILE --format json: .parameters.total the whole model (transformers' count),
    .parameters.vision the tower and projector; with --image 1024x1024 .workload.image_tokens
    (an int) and a "vision encoder" entry in .components.executed."""
    data = CONFIGS["qwen2_5_vl"]
    theirs = {n: p.numel() for n, p in _model(data).named_parameters()}
    path = str(write_config(tmp_path, data))
    code, out, err = run(capsys, "--config", path, "--format", "json", "--no-verify")
    assert code == 0, err
    d = json.loads(out)
    assert d["parameters"]["total"] == sum(theirs.values())
    assert d["parameters"]["vision"] == sum(c for n, c in theirs.items() if n.startswith(TOWER))
    assert d["parameters"]["language"] + d["parameters"]["vision"] == d["parameters"]["total"]
    assert d["parameters"]["memory_bytes"]["bf16"] == 2 * d["parameters"]["total"]
    code, out, err = run(capsys, "--config", path, "--format", "json", "--no-verify", "--image",
                         "1024x1024")
    assert code == 0, err
    d = json.loads(out)
    tokens = d["workload"]["image_tokens"]
    # Qwen2.5-VL's preprocessor_config.json (max_pixels 12,845,056): smart_resize keeps
    # 1,036×1,036 (37·28 a side), 74·74 patches, one token per 2×2
    assert isinstance(tokens, int) and tokens == 74 * 74 // 4
    executed = d["components"]["executed"]
    assert executed["flops"]["vision encoder"] == executed["vision encoder"]["flops"] > 0
    assert d["matmul_flops"]["executed"] == sum(executed["flops"].values())


@pytest.mark.parametrize("size", [(1024, 1024), (448, 448), (300, 1000), (20, 30), (4000, 3000)])
@pytest.mark.parametrize("family, pixels", [
    ("qwen2_5_vl", (3136, 12845056)),  # Qwen2.5-VL's preprocessor_config.json (the default)
    ("qwen2_5_vl", (3136, 28 * 28 * 1280)),  # Qwen2VLImageProcessor's class defaults
    ("qwen3_vl_moe", (65536, 16777216))])  # Qwen3-VL's: patch 16 (the default)
def test_qwen_image_tokens_equal_the_processor(size, family, pixels):
    """image_grid_thw of transformers' Qwen2VLImageProcessor (PIL backend, the CPU) on an
    image of that size, with the family's patch size and pixel bounds; tokens = patches /
    merge² (the processors' placeholders)."""
    transformers = pytest.importorskip("transformers")
    spec = translate(CONFIGS[family], "c", "q").vision
    proc = transformers.Qwen2VLImageProcessorPil(min_pixels=pixels[0], max_pixels=pixels[1],
                                                 patch_size=spec.patch)
    out = proc(images=[np.zeros((*size, 3), dtype=np.uint8)], return_tensors="np")
    t, gh, gw = (int(x) for x in out["image_grid_thw"][0])
    row = I.image_row(spec, size, None if pixels == spec.pixels else pixels)
    assert (t, row.grid, row.tokens) == (1, (gh, gw), gh * gw // 4)


@pytest.mark.parametrize("family, grid", [("qwen2_5_vl", (12, 20)), ("qwen2_5_vl", (10, 6)),
                                          ("qwen2_vl", (12, 8)), ("qwen3_vl_moe", (6, 10))])
def test_qwen_encoder_flops_equal_flop_counter(family, grid):
    """The tower's forward on the CPU (eager attention, per image and per window) under
    torch's FlopCounterMode, against the vision ledger's matmuls for that grid."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    s = translate(CONFIGS[family], "c", family).vision
    model = _model(CONFIGS[family], "cpu")
    gh, gw = grid
    pixels = torch.zeros(gh * gw, s.channels * s.temporal_patch * s.patch ** 2)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.model.visual(pixels, grid_thw=torch.tensor([[1, gh, gw]]))  # deepstack included
    values = VB.values(s, gh, gw)
    assert sum(r.flops(values) * r.count(values) for r in VB.walk(s).matmuls) == \
        counter.get_total_flops()


@pytest.mark.parametrize("family", ["gemma3", "llava"])
def test_fixed_resolution_towers_tokens_and_flops(family):
    """get_image_features on one image at the tower's size (the CPU, FlopCounterMode): its
    FLOPs and its token count equal the row the tool gives any image (each is resized)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    s = translate(CONFIGS[family], "c", family).vision
    model = _model(CONFIGS[family], "cpu")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model.model.get_image_features(
            pixel_values=torch.zeros(1, 3, s.image_size, s.image_size))
    features = out.pooler_output
    features = features[0] if isinstance(features, (list, tuple)) else features[0]
    row = I.image_row(s, (500, 700))
    assert row.resized == (s.image_size, s.image_size)
    assert (row.flops, row.tokens) == (counter.get_total_flops(), features.shape[0])


def test_window_pairs_by_hand():
    """Qwen2.5-VL's windows (window_size 112 / merge 2 / patch 14 = 4 merged units a side)
    over a 10×6-patch image: 5×3 merged units, one window of 4×3 units and one of 1×3, each
    unit 4 patches: (12·4)² + (3·4)² = 2,304 + 144."""
    s = translate(CONFIGS["qwen2_5_vl"], "c", "q").vision
    assert s.window == 4 and VB.window_pairs(s, 10, 6) == 48 ** 2 + 12 ** 2


def test_images_flags(tmp_path, capsys):
    path = str(write_config(tmp_path, CONFIGS["gemma3"]))
    code, out, err = run(capsys, "--config", path, "--format", "json", "--no-verify",
                         "--images", "3")
    assert code == 0, err
    d = json.loads(out)
    assert d["workload"]["image_tokens"] == 3 * 16 and d["workload"]["images"] == 3
    code, out, err = run(capsys, "--config", path, "--no-verify", "--image", "640x480")
    assert code == 0 and "vision tower:  counted" in out.split("\n\n")[0]


@pytest.mark.parametrize("argv, expected", [
    (("--image", "big"), "HxW"),
    (("--image", "10x3000"), "aspect ratio"),
    (("--images", "2"), "give --image HxW too"),  # Qwen sizes each image itself
    (("--image", "1024x1024", "--ctx", "100"), "do not fit"),
    (("--min-pixels", "5000", "--max-pixels", "4000"), "above --max-pixels"),
])
def test_image_refusals(tmp_path, capsys, argv, expected):
    path = str(write_config(tmp_path, CONFIGS["qwen2_5_vl"]))
    refused_in_one_line(capsys, "--config", path, "--no-verify", *argv, expected=expected)


def test_images_on_a_language_model_are_refused(capsys):
    refused_in_one_line(capsys, "gpt2-small", "--image", "448x448", expected="vision-language")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Qwen3.5-27B", "Qwen3.5-35B-A3B"])
def test_frontier_qwen3_5_whole_model(name):
    """The published config.json (../shared/frontier/, read there, never copied): the whole
    model's parameters, tower and language model, against transformers'
    AutoModelForImageTextToText on the meta device."""
    path = FRONTIER / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} is not here")
    data = json.loads(path.read_text())
    hf = translate(data, str(path), name)
    theirs = {n: p.numel() for n, p in _model(data).named_parameters()}
    tower = sum(c for n, c in theirs.items() if n.startswith(TOWER))
    assert I.workload(hf.vision, None, None).params == tower
    assert analyze(hf.config).param_count == sum(theirs.values()) - tower


# ---- Kimi-K2.5 (MoonViT): transformers' names beside the remote code's vt_* keys ----------
def _kimi():
    import copy
    from test_hf_kimi import K25
    data = copy.deepcopy(K25)
    data.pop("auto_map")
    data["text_config"].pop("quantization_config")  # from_config builds the dense model
    data["vision_config"].update({"hidden_size": 32, "intermediate_size": 48,
                                  "num_attention_heads": 2, "num_hidden_layers": 1,
                                  "pos_emb_height": 8, "pos_emb_width": 8, "pos_emb_time": 4})
    data["projection_hidden_size"] = 32
    return data


def test_kimi_k25_tower_by_name_and_flops():
    """Kimi_K25ForConditionalGeneration on the CPU: every tower and projector parameter by
    name; get_image_features on a 6×10-patch image under FlopCounterMode (the encoder and
    the 2×2-merging projector), and its 15 tokens."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    data = _kimi()
    s = translate(data, "c", "k25").vision
    cfg = transformers.AutoConfig.for_model(**data)
    cfg.vision_config._attn_implementation = "eager"
    model = transformers.Kimi_K25ForConditionalGeneration(cfg).eval()
    theirs = {n: p.numel() for n, p in model.named_parameters()
              if n.startswith(("model.vision_tower", "model.mm_projector"))}
    sizes = VB.values(s)
    assert {p.key(i) if p.per_layer else p.name: p.numel(sizes)
            for p in VB.walk(s).params for i in range(p.count(sizes))} == theirs
    gh, gw = 6, 10
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model.model.get_image_features(pixel_values=torch.zeros(gh * gw, 3, 14, 14),
                                             image_grid_thw=torch.tensor([[1, gh, gw]]))
    values = VB.values(s, gh, gw)
    assert sum(r.flops(values) * r.count(values) for r in VB.walk(s).matmuls) == \
        counter.get_total_flops()
    assert out.pooler_output[0].shape[0] == gh * gw // 4 == 15


@pytest.mark.parametrize("size, padded", [
    # 1024 // 14 = 73 patches a side, within 16,384 and 512: no scaling; padded to 28·37
    ((1024, 1024), (1036, 1036)),
    ((448, 448), (448, 448)),  # 32 patches a side, a multiple of 2
    # 8000 // 14 = 571 a side: scale = min(√(16384/571²), 512·14/8000) = 0.22417, int(8000·s)
    # = 1793, padded to 28·65 = 1820
    ((8000, 8000), (1820, 1820)),
])
def test_kimi_navit_resize_by_hand(size, padded):
    """Kimi_K25ImageProcessor's navit_resize (torchvision-only, not importable here): by hand."""
    assert I.navit_resize(*size, 14, 2, 16384, 512) == padded
    s = translate(_kimi(), "c", "k25").vision
    row = I.image_row(s, size)
    assert row.tokens == (padded[0] // 14) * (padded[1] // 14) // 4


@pytest.mark.parametrize("name", ["Kimi-K2.5-small"])
def test_frontier_kimi_k25_tower(name):
    """The published vision_config (remote-code keys only): transformers builds its defaults,
    K2.5's sizes; the tower counted equals transformers' (meta device)."""
    path = FRONTIER / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} is not here")
    data = json.loads(path.read_text())
    data.pop("auto_map", None)
    data["text_config"].pop("quantization_config", None)
    hf = translate(data, str(path), name)
    tower = sum(p.numel() for n, p in _model(data).named_parameters()
                if n.startswith(("model.vision_tower", "model.mm_projector")))
    assert I.workload(hf.vision, None, None).params == tower == 471_143_920


# ---- Llama 4: tiles of 336², a global tile beside several ------------------------------------
def _llama4():
    import copy
    from test_hf_llama4 import MULTIMODAL
    data = copy.deepcopy(MULTIMODAL)
    # 4×4 patches a tile; intermediate_size = 4·hidden_size (the pixel shuffle's width);
    # fc2 is projector_output_dim square, so projector_input_dim equals it
    data["vision_config"].update({"image_size": 56, "patch_size": 14, "intermediate_size": 64,
                                  "projector_input_dim": 32, "projector_output_dim": 32})
    return data


def test_llama4_tower_by_name_and_flops():
    """Llama4ForConditionalGeneration on the CPU: the tower and projector by name; three tiles
    through get_image_features under FlopCounterMode (the tower and adapter: the projector's
    linear_1, run in forward, added by hand: 2·tiles·(side/2)²·vision_output_dim·hidden)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    data = _llama4()
    hf = translate(data, "c", "l4")
    s = hf.vision
    cfg = transformers.AutoConfig.for_model(**_kw(data))
    cfg.vision_config._attn_implementation = "eager"
    model = transformers.Llama4ForConditionalGeneration(cfg).eval()
    theirs = {n: p.numel() for n, p in model.named_parameters()}
    tower = {n: c for n, c in theirs.items() if n.startswith(("vision_model.", "multi_modal_projector."))}
    sizes = VB.values(s)
    assert {p.key(i) if p.per_layer else p.name: p.numel(sizes)
            for p in VB.walk(s).params for i in range(p.count(sizes))} == tower
    assert analyze(hf.config).param_count == sum(theirs.values()) - sum(tower.values())
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.get_image_features(pixel_values=torch.zeros(3, 3, 56, 56))
    values = VB.values(s, 4, 4)
    projector = 2 * 3 * 4 * 32 * 32
    assert 3 * sum(r.flops(values) * r.count(values) for r in VB.walk(s).matmuls) == \
        counter.get_total_flops() + projector


@pytest.mark.parametrize("size, tiles", [
    ((1024, 1024), (4, 4)),  # 4·336/1024 = 1.3125 ≥ 1 needs 4 a side: 16 tiles, the most
    ((448, 448), (2, 2)),  # 672/448 = 1.5, the smallest upscale, smallest area 2×2
    ((336, 336), (1, 1)),  # scale 1: one tile, no global tile
    ((300, 1000), (1, 3)),  # min(336/300, 1008/1000) = 1.008, the smallest upscale ≥ 1
])
def test_llama4_tiles_by_hand(size, tiles):
    """get_best_fit's canvas for 336-pixel tiles, at most 16 (by hand, the rule as
    image_processing_llama4.py writes it); tokens 144 per tile and the global one."""
    assert I.llama4_tiles(*size, 336, 16) == tiles
    n = tiles[0] * tiles[1]
    data = _llama4()
    data["vision_config"].update({"image_size": 336, "hidden_size": 16, "intermediate_size": 64})
    row = I.image_row(translate(data, "c", "l4").vision, size)
    assert row.tiles == n + (n > 1) and row.tokens == row.tiles * 144


def test_a_tower_transformers_cannot_run_is_counted_not_run(capsys, tmp_path):
    """test_hf_llama4's multimodal file: intermediate_size 32 ≠ 4·16, so the pixel shuffle's
    width does not meet the adapter's fc1; transformers builds it (its parameters counted)
    and cannot run an image through it: --image refused in one line."""
    from test_hf_llama4 import MULTIMODAL
    path = str(write_config(tmp_path, MULTIMODAL))
    code, out, err = run(capsys, "--config", path, "--no-verify", "--format", "json")
    assert code == 0 and json.loads(out)["parameters"]["vision"] > 0
    refused_in_one_line(capsys, "--config", path, "--no-verify", "--image", "336x336",
                        expected="cannot run an image")


# ---- Gemma 4: every image padded to its soft-token budget ---------------------------------
def _gemma4():
    from test_hf_gemma4 import DATA
    text = {k: v for k, v in DATA.items() if k not in ("architectures", "torch_dtype")}
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "text_config": {**text, "model_type": "gemma4_text"}, "audio_config": None,
            "image_token_id": 258880, "tie_word_embeddings": True, "torch_dtype": "float32",
            "vision_soft_tokens_per_image": 4,
            "vision_config": {"model_type": "gemma4_vision", "hidden_size": 32,
                              "intermediate_size": 48, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "num_key_value_heads": 2,
                              "head_dim": 16, "patch_size": 16, "pooling_kernel_size": 3,
                              "position_embedding_size": 64}}


def test_gemma4_tower_by_name_and_flops():
    """Gemma4ForConditionalGeneration on the CPU: the tower and embedder by name; one image
    of 3×6 patches padded to the budget of 4 soft tokens (36 patches) through
    get_image_features under FlopCounterMode: the padded encoder, the pooler's one-hot
    matmul, the embedder on the image's 2 soft tokens."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    data = _gemma4()
    s = translate(data, "c", "g4").vision
    cfg = transformers.AutoConfig.for_model(**_kw(data))
    cfg.vision_config._attn_implementation = "eager"
    model = transformers.Gemma4ForConditionalGeneration(cfg).eval()
    theirs = {n: p.numel() for n, p in model.named_parameters()
              if n.startswith(("model.vision_tower", "model.embed_vision"))}
    sizes = VB.values(s)
    assert {p.key(i) if p.per_layer else p.name: p.numel(sizes)
            for p in VB.walk(s).params for i in range(p.count(sizes))} == theirs
    gh, gw = 3, 6
    real = [[x, y] for y in range(gh) for x in range(gw)]
    positions = torch.tensor([real + [[-1, -1]] * (36 - len(real))])
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model.model.get_image_features(pixel_values=torch.zeros(1, 36, 768),
                                             image_position_ids=positions)
    values = VB.values(s, gh, gw)
    assert sum(r.flops(values) * r.count(values) for r in VB.walk(s).matmuls) == \
        counter.get_total_flops()
    assert out.pooler_output[0].shape[0] == 2


@pytest.mark.parametrize("size", [(1024, 1024), (448, 448), (300, 1000), (40, 2000)])
def test_gemma4_tokens_equal_the_processor(size):
    """num_soft_tokens_per_image of transformers' Gemma4ImageProcessorPil (the CPU) with the
    published budget of 280 soft tokens."""
    transformers = pytest.importorskip("transformers")
    data = {**_gemma4(), "vision_soft_tokens_per_image": 280}
    s = translate(data, "c", "g4").vision
    out = transformers.Gemma4ImageProcessorPil()(
        images=[np.zeros((*size, 3), dtype=np.uint8)], return_tensors="np")
    assert I.image_row(s, size).tokens == int(out["num_soft_tokens_per_image"][0])


@pytest.mark.parametrize("command", [("plan", "--gpu", "H100", "--ctx", "64"),
                                     ("serve", "--gpu", "H100", "--ctx", "64")])
def test_plan_and_serve_say_the_tower_is_counted(tmp_path, capsys, command):
    """plan and serve count the tower (tests/test_vision_serve.py checks the bytes): their
    first screen says so with its count (the tower's, as
    test_parameters_equal_transformers_by_name checks it); a language model's first screen
    says nothing of a tower."""
    data = CONFIGS["qwen2_5_vl"]
    tower = I.workload(translate(data, "c", "q").vision, None, None).params
    code, out, err = run(capsys, *command, "--config", str(write_config(tmp_path, data)))
    assert code == 0, err
    first = out.split("\n\n")[0]
    assert "vision tower:" in first and "counted" in first and f"{tower:,} parameters" in first
    code, out, err = run(capsys, *command, "gpt2-small")
    assert code == 0 and "vision tower" not in out


def test_the_projector_maps_into_the_text_width_as_read():
    """A gemma3 text_config without hidden_size: transformers builds Gemma3TextConfig's
    default width, and the projector's matrix maps into it (meta device, by name)."""
    data = {**CONFIGS["gemma3"], "text_config": {
        k: v for k, v in CONFIGS["gemma3"]["text_config"].items() if k != "hidden_size"}}
    hf = translate(data, "c", "g3")
    sizes = VB.values(hf.vision)
    ours = {p.name: p.numel(sizes) for p in VB.walk(hf.vision).params if p.repeat is None}
    theirs = {n: p.numel() for n, p in _model(data).named_parameters()}
    name = "model.multi_modal_projector.mm_input_projection_weight"
    assert ours[name] == theirs[name] == 32 * hf.config.d_model


@pytest.mark.parametrize("ratio", [float("inf"), 10**9, -1, "4"])
def test_a_bad_mlp_ratio_is_refused_in_one_line(capsys, tmp_path, ratio):
    data = {**CONFIGS["qwen2_vl"],
            "vision_config": {**CONFIGS["qwen2_vl"]["vision_config"], "mlp_ratio": ratio}}
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify",
                        expected="mlp_ratio")
