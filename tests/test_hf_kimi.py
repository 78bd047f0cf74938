"""Kimi-K2 (model_type kimi_k2) and Kimi-K2.5 (kimi_k25), issue 31: K2 is DeepSeek-V3's
architecture under Moonshot's own model_type (auto_map: modeling_deepseek.py), which
transformers 5.23 builds as deepseek_v3; K2.5 wraps K2's language model (text_config) with a
MoonViT tower and stores its routed experts in INT4 (compressed-tensors pack-quantized,
group 32). Checked here: parameters by hand algebra written in this file, against
transformers' DeepseekV3ForCausalLM and Kimi_K25ForConditionalGeneration (meta device); the
--verify cross-check on small configs; serve's stored bytes of K2.5's INT4 checkpoint by hand
(compressed-tensors' pack-quantized layout); the full-size files in ../shared/frontier.
"""
import copy
import json
from pathlib import Path

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

K2 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                 "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    "aux_loss_alpha": 0.001, "first_k_dense_replace": 1, "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 96, "kv_lora_rank": 16,
    "max_position_embeddings": 64, "model_type": "kimi_k2", "moe_intermediate_size": 16,
    "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 8, "n_shared_experts": 1,
    "norm_topk_prob": True, "num_attention_heads": 4, "num_experts_per_tok": 2,
    "num_hidden_layers": 2, "num_key_value_heads": 4, "num_nextn_predict_layers": 0,
    "q_lora_rank": 24, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "rms_norm_eps": 1e-6,
    "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid",
    "seq_aux": True, "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16", "v_head_dim": 8, "vocab_size": 96}
V, D, F, L = 96, 64, 96, 2  # layer 0 dense (first_k_dense_replace 1), layer 1 MoE
h, r_q, r_kv, nope, rope, dv = 4, 24, 16, 8, 8, 8
E, k, d_e = 8, 2, 16

INT4 = {  # Kimi-K2.5's text_config.quantization_config, as published
    "config_groups": {"group_0": {
        "input_activations": None, "output_activations": None, "targets": ["Linear"],
        "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                    "group_size": 32, "num_bits": 4, "observer": "minmax",
                    "observer_kwargs": {}, "strategy": "group", "symmetric": True,
                    "type": "int"}}},
    "format": "pack-quantized",
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "kv_cache_scheme": None, "quant_method": "compressed-tensors",
    "quantization_status": "compressed"}

K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"], "dtype": "bfloat16",
    "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"},
    "ignore_index": -100, "media_placeholder_token_id": 95, "model_type": "kimi_k25",
    "pad_token_id": 94, "tie_word_embeddings": False, "use_unified_vision_chunk": True,
    "video_placeholder": "<|kimi_k25_video_placeholder|>",
    "text_config": {**K2, "quantization_config": INT4, "tf_legacy_loss": False},
    "vision_config": {"init_pos_emb_height": 8, "init_pos_emb_width": 8, "init_pos_emb_time": 4,
                      "merge_kernel_size": [2, 2], "patch_size": 14, "text_hidden_size": 64,
                      "vt_hidden_size": 32, "vt_intermediate_size": 48,
                      "vt_num_attention_heads": 2, "vt_num_hidden_layers": 1}}


def params_by_hand(tied: bool = False) -> int:
    """DeepSeek-V3's layers (tests/test_hf_deepseek_v32.py's algebra, no indexer): latent
    attention q_a_proj D·r_q, q_a_layernorm r_q, q_b_proj r_q·h·(nope + rope),
    kv_a_proj_with_mqa D·(r_kv + rope), kv_a_layernorm r_kv, kv_b_proj r_kv·h·(nope + v),
    o_proj h·v·D and two norms per layer; layer 0's dense MLP 3·D·F; layer 1's router E·D,
    E experts and one shared expert 3·D·d_e each; embedding, final norm, head (untied)."""
    attn = (D * r_q + r_q + r_q * h * (nope + rope) + D * (r_kv + rope) + r_kv
            + r_kv * h * (nope + dv) + h * dv * D + 2 * D)
    return (1 if tied else 2) * V * D + D + L * attn + 3 * D * F + E * D + (E + 1) * 3 * D * d_e


def test_kimi_k2_is_deepseek_v3_to_the_parameter():
    torch = pytest.importorskip("torch")
    hf = translate(K2, "t", "k2")
    assert analyze(hf.config).param_count == params_by_hand() == 74_640  # DeepSeek-V3.2 test's 80,336 less two indexers of 2,848
    assert any("kimi_k2" in n and "deepseek_v3" in n for n in hf.notes)
    transformers = pytest.importorskip("transformers")
    data = {kk: v for kk, v in K2.items() if kk not in ("architectures", "auto_map")}
    with torch.device("meta"):  # what transformers 5.23 builds: no kimi_k2 type of its own
        m = transformers.DeepseekV3ForCausalLM(
            transformers.AutoConfig.for_model(**{**data, "model_type": "deepseek_v3"}))
    assert sum(p.numel() for p in m.parameters()) == params_by_hand()


def test_kimi_k25_counts_the_language_model_and_names_the_tower():
    torch = pytest.importorskip("torch")
    hf = translate(K25, "t", "k25")
    assert analyze(hf.config).param_count == params_by_hand()
    said = " ".join(hf.notes)
    assert "vision tower" in said and "counted beside it" in said and "group 32" in said
    transformers = pytest.importorskip("transformers")
    data = copy.deepcopy(K25)
    data.pop("auto_map")
    data["text_config"].pop("quantization_config")  # from_config builds the dense model
    for tie in (False, True):
        data["tie_word_embeddings"] = tie
        with torch.device("meta"):
            m = transformers.Kimi_K25ForConditionalGeneration(
                transformers.AutoConfig.for_model(**data))
        lm = sum(p.numel() for n, p in m.named_parameters()
                 if not n.startswith(("model.vision_tower", "model.mm_projector")))
        assert lm == params_by_hand(tied=tie)
    # the top-level key ties the head (Kimi_K25Config: default True), not text_config's
    both = {**K25, "tie_word_embeddings": True,
            "text_config": {**K25["text_config"], "tie_word_embeddings": True}}
    assert analyze(translate(both, "t", "k").config).param_count == params_by_hand(tied=True)


def test_kimi_k25_refuses_a_tie_that_contradicts_the_top_level(capsys, tmp_path):
    data = {k: v for k, v in K25.items() if k != "tie_word_embeddings"}  # default: tied
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify",
                        expected="tie_word_embeddings True (absent: Kimi_K25Config default)")


@pytest.mark.parametrize("data", [K2, K25], ids=["kimi_k2", "kimi_k25"])
def test_the_cross_check_agrees(capsys, tmp_path, data):
    pytest.importorskip("transformers")
    T, B = 12, 1
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, data)), "--ctx", str(T),
                       "--batch", str(B))
    params = {r["component"]: r["transformers"] for r in x["transformers"]["parameters"]}
    assert params["total"] == params_by_hand()


def int4_bytes_by_hand(experts_params: int, matrices: int, total: int, group: int = 32) -> int:
    """compressed-tensors pack-quantized int4 (compressors/quantized_compressors/
    pack_quantized.py): weight_packed 8 values per int32 (½ byte each), weight_scale one bf16
    per `group` inputs, weight_shape an int64[2] per matrix; every other parameter bf16 (the
    ignore list: attention, shared experts, the dense MLP, lm_head; the router is no Linear)."""
    return experts_params // 2 + experts_params // group * 2 + matrices * 16 \
        + (total - experts_params) * 2


def test_serve_reads_k25s_int4_experts(capsys, tmp_path):
    data = copy.deepcopy(K25)  # group 8: the small experts' down_proj is 16 inputs wide
    data["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"][
        "group_size"] = 8
    code, out, err = run(capsys, "serve", "--config", str(write_config(tmp_path, data)),
                         "--gpu-mem", "1TB", "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["assumptions"]["weights"] == "compressed-tensors"
    expert = E * 3 * D * d_e  # layer 1's routed experts: the only quantized matrices
    # vLLM pads the embedding and the head to a multiple of 64 rows (VocabParallelEmbedding,
    # DEFAULT_VOCAB_PADDING_SIZE): 96 -> 128, 2·32·D parameters more, bf16
    padded = params_by_hand() + 2 * (128 - V) * D
    # the vision tower beside it (issue 41: serve counts it, bf16, whole at TP 1; its count is
    # transformers', tests/test_vision.py test_kimi_k25_tower_by_name_and_flops)
    tower = plan["vision"]
    assert tower["weights_bytes_per_gpu"] == 2 * tower["parameters"]
    assert plan["weights_bytes_per_gpu"] - tower["weights_bytes_per_gpu"] == \
        int4_bytes_by_hand(expert, E * 3, padded, 8)


FRONTIER = Path(__file__).resolve().parents[2] / "shared" / "frontier"


def _frontier(name: str) -> dict:
    path = FRONTIER / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared frontier configs)")
    return json.loads(path.read_text())


@pytest.mark.parametrize("name, expected", [
    # ../shared/frontier/README.md: transformers 5.23's DeepseekV3ForCausalLM on the meta
    # device (the checkpoint's 1,026,470,731,056 adds fp8 scales)
    ("Kimi-K2-Instruct.json", 1_026_408_209_408), ("Kimi-K2-Instruct-small.json", 19_905_682_432),
    ("Kimi-K2.5.json", 1_026_408_209_408), ("Kimi-K2.5-small.json", 19_905_682_432)])
def test_full_size(name, expected):
    assert analyze(translate(_frontier(name), "t", "k").config).param_count == expected


def test_full_size_k25_int4_checkpoint_bytes(capsys):
    """Kimi-K2.5 as stored: 60 MoE layers × 384 experts × 3 matrices of 7168·2048 in int4,
    the other 11,722,185,728 parameters in bf16 (163,840 rows: a multiple of vLLM's 64): 594,206,365,696 bytes (594.2 GB) of the
    language model, and the vision tower's 471,143,920 parameters (transformers' count,
    tests/test_vision.py test_frontier_kimi_k25_tower) in bf16 beside it (issue 41)."""
    _frontier("Kimi-K2.5.json")
    code, out, err = run(capsys, "serve", "--config", str(FRONTIER / "Kimi-K2.5.json"),
                         "--gpu-mem", "2TB", "--format", "json")
    assert code == 0, err
    matrices = 60 * 384 * 3
    expected = int4_bytes_by_hand(matrices * 7168 * 2048, matrices, 1_026_408_209_408)
    assert json.loads(out)["weights_bytes_per_gpu"] == expected + 2 * 471_143_920
    assert expected == 594_206_365_696
