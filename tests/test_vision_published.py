"""Published vision-language configs at full size (issue 41): the whole model's parameters
(tower and language model) against transformers 5.23's AutoModelForImageTextToText on the
meta device, and the image tokens of a 1024×1024 and a 448×448 image. The config values are
the model cards' config.json as published (Qwen2.5-VL-7B-Instruct's flat file; Gemma 3 27B's;
Qwen3-VL-30B-A3B-Instruct's; Llama 4 Scout's vision_config beside test_hf_llama4's text
config), written here; none is shipped.
"""
import sys
from pathlib import Path

import pytest

from accounting import analyze
from accounting.analysis import images as I
from accounting.architecture.hf_config import translate

sys.path.insert(0, str(Path(__file__).parent))
from test_hf_llama4 import SCOUT  # noqa: E402

QWEN2_5_VL_7B = {"model_type": "qwen2_5_vl", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
  "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 128000,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": False,
  "max_window_layers": 28, "tie_word_embeddings": False, "hidden_act": "silu", "image_token_id": 151655,
  "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
  "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16", "attention_dropout": 0.0,
  "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
  "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
    "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
    "spatial_patch_size": 14, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31],
    "tokens_per_second": 2, "temporal_patch_size": 2}}
GEMMA_3_27B = {"model_type": "gemma3", "mm_tokens_per_image": 256, "boi_token_index": 255999, "eoi_token_index": 256000,
  "image_token_index": 262144, "initializer_range": 0.02, "eos_token_id": [1, 106],
  "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
     "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
     "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
  "torch_dtype": "bfloat16",
  "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
     "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}}
QWEN3_VL_30B_A3B = {"architectures": ["Qwen3VLMoeForConditionalGeneration"], "image_token_id": 151655, "model_type": "qwen3_vl_moe",
 "text_config": {"attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
   "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
   "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 262144, "mlp_only_layers": [],
   "model_type": "qwen3_vl_moe_text", "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
   "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
   "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
   "rope_theta": 5000000, "use_cache": True, "vocab_size": 151936},
 "tie_word_embeddings": False, "transformers_version": "4.57.0.dev0", "video_token_id": 151656,
 "vision_config": {"deepstack_visual_indexes": [8, 16, 24], "depth": 27, "hidden_act": "gelu_pytorch_tanh",
   "hidden_size": 1152, "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 4304,
   "model_type": "qwen3_vl_moe", "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048,
   "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
 "vision_end_token_id": 151653, "vision_start_token_id": 151652}
SCOUT_VISION = {"attention_dropout": 0.0, "hidden_act": "gelu", "hidden_size": 1408, "image_size": 336, "initializer_range": 0.02,
  "intermediate_size": 5632, "model_type": "llama4_vision_model", "multi_modal_projector_bias": False, "norm_eps": 1e-05,
  "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 34, "patch_size": 14, "pixel_shuffle_ratio": 0.5,
  "projector_dropout": 0.0, "projector_input_dim": 4096, "projector_output_dim": 4096, "rope_theta": 10000,
  "vision_feature_layer": -1, "vision_feature_select_strategy": "default", "vision_output_dim": 4096}
LLAMA_4_SCOUT = {"architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 200080,
                 "eoi_token_index": 200081, "image_token_index": 200092, "model_type": "llama4",
                 "text_config": {**SCOUT, "model_type": "llama4_text"},
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                 "vision_config": SCOUT_VISION}
TOWER = ("model.visual.", "model.vision_tower.", "model.multi_modal_projector.",
         "vision_model.", "multi_modal_projector.")
# transformers 5.23 on the meta device, measured: (whole model, tower and projector)
MEASURED = {"Qwen2.5-VL-7B": (8_292_166_656, 676_550_144),
            "Gemma-3-27B": (27_432_406_640, 423_060_336),
            "Qwen3-VL-30B-A3B": (31_070_754_032, 538_631_408),
            "Llama-4-Scout": (108_641_793_536, 871_932_416)}
CONFIGS = {"Qwen2.5-VL-7B": QWEN2_5_VL_7B, "Gemma-3-27B": GEMMA_3_27B,
           "Qwen3-VL-30B-A3B": QWEN3_VL_30B_A3B, "Llama-4-Scout": LLAMA_4_SCOUT}
# image tokens at 1024×1024 and 448×448, each by its processor's rule worked by hand:
# Qwen2.5-VL (patch 14, merge 2, max_pixels 12,845,056): 1024 → round(1024/28)·28 = 1,036,
# 74² patches, 1,369 tokens; 448 = 16·28: 32², 256. Gemma 3: every image 896², 256 tokens.
# Qwen3-VL (patch 16, merge 2, min_pixels 65,536): 1024 = 32·32: 64², 1,024; 448 → round(448/32)
# = 14, 448: 28², 196. Llama 4: 4×4 tiles and a global one, 17 × 144; 2×2 and one, 5 × 144.
TOKENS = {"Qwen2.5-VL-7B": (1369, 256), "Gemma-3-27B": (256, 256),
          "Qwen3-VL-30B-A3B": (1024, 196), "Llama-4-Scout": (17 * 144, 5 * 144)}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_whole_model_parameters_and_image_tokens(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = CONFIGS[name]
    hf = translate(data, name, name)
    w = I.workload(hf.vision, ["1024x1024", "448x448"], None)
    language = analyze(hf.config).param_count
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(
            transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                                 if k != "architectures"}))
    named = {n: p.numel() for n, p in model.named_parameters()}
    tower = sum(c for n, c in named.items() if n.startswith(TOWER))
    assert (language + w.params, w.params) == (sum(named.values()), tower) == MEASURED[name]
    assert tuple(r.tokens for r in w.images) == TOKENS[name]
