"""Hugging Face config.json in, for the mixture-of-experts model_types issue 31 added: olmoe
(OLMoE), qwen2_moe (Qwen1.5-MoE, Qwen2-57B-A14B: the sigmoid-gated shared expert), glm4_moe
(GLM-4.5 and GLM-4.5-Air) and minimax_m2 (MiniMax-M2). Each small config, written as
transformers writes it, is read into the spec and counted against hand algebra written here
from transformers 5.23.0's modeling_<type>.py, the tool's model/ and transformers' own model
(meta device), total and active; the full cross-check agrees (one per family, the shrunk
expert implementations included); full-size counts beside the published ones; refusals.

What each modeling file builds (read there):
  olmoe: q/k/v/o_proj (bias=attention_bias), q_norm over hidden_size and k_norm over
    kv_heads·head_dim (on the projections, before the head split); OlmoeTopKRouter (a bare
    (E, D) weight, softmax, top-k), OlmoeExperts gate_up_proj (E, 2·intermediate, D) and
    down_proj (E, D, intermediate); no shared expert.
  qwen2_moe: q/k/v_proj with bias (qkv_bias), o_proj without; dense layers (mlp_only_layers,
    decoder_sparse_step) of intermediate_size; MoE layers of moe_intermediate_size experts
    plus shared_expert (one MLP of shared_expert_intermediate_size) × sigmoid(
    shared_expert_gate(x)), shared_expert_gate = nn.Linear(D, 1, bias=False).
  glm4_moe: q/k/v_proj with bias=attention_bias, o_proj without; q_norm/k_norm of head_dim
    when use_qk_norm; layers below first_k_dense_replace dense (intermediate_size), then
    Glm4MoeMoE: Glm4MoeTopkRouter ((E, D) weight, sigmoid, + e_score_correction_bias buffer,
    groups), experts of moe_intermediate_size, shared_experts of n_shared·moe_intermediate.
  minimax_m2: q/k/v/o_proj without bias, q_norm over heads·head_dim and k_norm over
    kv_heads·head_dim, RoPE on rotary_dim dims; MiniMaxM2TopKRouter ((E, D) weight, sigmoid,
    + a buffer for the choice, renormalised), experts of intermediate_size.
"""
import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from accounting.architecture.hf_schema import UNSUPPORTED
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import DELETE, write_config

V, D = 96, 64  # every small config: vocab, hidden_size
CONFIGS = {
    'olmoe': {
        "architectures": ["OlmoeForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "clip_qkv": None, "eos_token_id": 50279,
        "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
        "intermediate_size": 32, "max_position_embeddings": 64, "model_type": "olmoe",
        "norm_topk_prob": False, "num_attention_heads": 4, "num_experts": 8,
        "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 4,
        "output_router_logits": False, "pad_token_id": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "rope_theta": 10000.0, "router_aux_loss_coef": 0.01,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 96},
    'qwen2_moe': {
        "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151643,
        "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
        "intermediate_size": 96, "max_position_embeddings": 64, "max_window_layers": 2,
        "model_type": "qwen2_moe", "moe_intermediate_size": 16, "norm_topk_prob": False,
        "num_attention_heads": 4, "num_experts": 6, "num_experts_per_tok": 2,
        "num_hidden_layers": 3, "num_key_value_heads": 2, "output_router_logits": False,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 64, "sliding_window": 64,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.40.0.dev0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 96, "mlp_only_layers": [1]},
    'glm4_moe': {
        "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True,
        "attention_dropout": 0.0, "pad_token_id": 0, "eos_token_id": [1, 2], "head_dim": 24,
        "hidden_act": "silu", "hidden_size": 64, "partial_rotary_factor": 0.5,
        "initializer_range": 0.02, "intermediate_size": 96, "max_position_embeddings": 64,
        "model_type": "glm4_moe", "moe_intermediate_size": 16, "norm_topk_prob": True,
        "num_attention_heads": 4, "n_group": 2, "topk_group": 1, "n_routed_experts": 8,
        "n_shared_experts": 1, "routed_scaling_factor": 2.5, "num_experts_per_tok": 2,
        "first_k_dense_replace": 1, "num_hidden_layers": 3, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 1000000,
        "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.54.0", "use_cache": True, "use_qk_norm": True,
        "vocab_size": 96},
    'minimax_m2': {
        "architectures": ["MiniMaxM2ForCausalLM"], "attn_type_list": [1, 1], "head_dim": 16,
        "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 24,
        "max_position_embeddings": 64, "model_type": "minimax_m2", "mtp_transformer_layers": 1,
        "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "num_local_experts": 8, "num_mtp_modules": 3,
        "qk_norm_type": "per_layer", "rms_norm_eps": 1e-06, "rope_theta": 5000000,
        "rotary_dim": 8, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
        "scoring_func": "sigmoid", "shared_intermediate_size": 0, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.46.1", "use_cache": True,
        "use_mtp": True, "use_qk_norm": True, "use_routing_bias": True, "vocab_size": 96},
    'ernie4_5_moe': {
        "architectures": ["Ernie4_5_MoeForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 96,
        "max_position_embeddings": 64, "model_type": "ernie4_5_moe",
        "moe_intermediate_size": 16, "moe_k": 2, "moe_layer_end_index": -1,
        "moe_layer_interval": 1, "moe_layer_start_index": 1, "moe_norm_min": 1e-12,
        "moe_num_experts": 8, "moe_num_shared_experts": 2, "num_attention_heads": 4,
        "num_hidden_layers": 3, "num_key_value_heads": 2, "pad_token_id": 0,
        "rms_norm_eps": 1e-05, "rope_theta": 500000, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "use_bias": False, "use_cache": False, "vocab_size": 96,
        "head_dim": 16},

}
# What each means (read from the modeling files above): layers, query / K/V heads, head dim,
# Q/K/V biases, QK-norm weights per layer, the MoE layers, experts E, top-k, expert width,
# shared width (0: none), the shared gate (D weights), dense MLP width, RoPE's rotated dims.
SHAPES = {
    # OLMo-2's QK-norm: D + kv_heads·head_dim weights
    "olmoe": dict(L=2, h=4, kv=4, dk=16, qkv_b=0, qk=64 + 4 * 16, moe=(0, 1), E=8, k=2,
                  de=32, ds=0, gate=0, f=32, rot=16),
    "qwen2_moe": dict(L=3, h=4, kv=2, dk=16, qkv_b=1, qk=0, moe=(0, 2), E=6, k=2, de=16,
                      ds=64, gate=1, f=96, rot=16),
    # per-head QK-norm (use_qk_norm): head_dim weights each for Q and K
    "glm4_moe": dict(L=3, h=4, kv=2, dk=24, qkv_b=1, qk=2 * 24, moe=(1, 2), E=8, k=2, de=16,
                     ds=16, gate=0, f=96, rot=12),
    "minimax_m2": dict(L=2, h=4, kv=2, dk=16, qkv_b=0, qk=4 * 16 + 2 * 16, moe=(0, 1), E=8,
                       k=2, de=24, ds=0, gate=0, f=24, rot=8),
    # ERNIE 4.5: layer 0 dense (moe_layer_start_index 1), two shared experts, the router's
    # correction bias a (frozen) parameter of E, a tied head
    "ernie4_5_moe": dict(L=3, h=4, kv=2, dk=16, qkv_b=0, qk=0, moe=(1, 2), E=8, k=2, de=16,
                         ds=32, gate=0, f=96, rot=16, rb=1, tied=True),
}


def params_by_hand(name: str, active: bool = False) -> int:
    """nn.Linear(in, out, bias) = in·out (+ out): q, k, v, o_proj; the QK-norm weights; two
    RMSNorms per block (D each) and the final one; a MoE layer: the router (E·D), E experts
    of 3·D·d_e (gate_up_proj and down_proj; active: k of them), the shared MLP 3·D·d_s and
    its gate (D); a dense layer 3·D·f; the embedding and the untied head (V·D each)."""
    s = SHAPES[name]
    h, kv, dk = s["h"], s["kv"], s["dk"]
    attn = D * (h + 2 * kv) * dk + h * dk * D + s["qkv_b"] * (h + 2 * kv) * dk
    experts = s["k"] if active else s["E"]
    moe = (s["E"] * D + experts * 3 * D * s["de"] + 3 * D * s["ds"] + s["gate"] * D
           + s.get("rb", 0) * s["E"])
    dense = 3 * D * s["f"]
    blocks = sum(attn + s["qk"] + 2 * D + (moe if i in s["moe"] else dense)
                 for i in range(s["L"]))
    return (1 if s.get("tied") else 2) * V * D + blocks + D


def forward_matmul_flops_by_hand(name: str, T: int, B: int = 1) -> int:
    """2·m·n·p per matmul: Q, K, V, QKᵀ and scores·V over the full T×T, o_proj; a MoE
    layer: the router (B·T × D × E), B·T·k expert rows through 3 matrices (dropless), the
    shared MLP on B·T rows and its gate (B·T × D × 1); a dense layer's 3 matrices; the head."""
    s = SHAPES[name]
    h, kv, dk = s["h"], s["kv"], s["dk"]
    n = B * T
    attn = 2 * n * D * (h + 2 * kv) * dk + 2 * 2 * B * h * T * T * dk + 2 * n * h * dk * D
    moe = (2 * n * D * s["E"] + 2 * n * s["k"] * 3 * D * s["de"] + 2 * n * 3 * D * s["ds"]
           + 2 * n * D * s["gate"])
    dense = 2 * n * 3 * D * s["f"]
    return sum(attn + (moe if i in s["moe"] else dense) for i in range(s["L"])) + 2 * n * D * V


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_means_what_transformers_builds(name):
    c = translate(CONFIGS[name], "t", name).config
    s = SHAPES[name]
    assert (c.num_layers, c.num_heads, c.kv_heads, c.d_k) == (s["L"], s["h"], s["kv"], s["dk"])
    assert (c.num_experts, c.experts_per_token, c.expert_d_ff) == (s["E"], s["k"], s["de"])
    assert tuple(i for i, k in enumerate(c.layer_kinds) if k.moe) == s["moe"]
    assert c.num_shared_experts * c.expert_d_ff == s["ds"]
    assert c.shared_expert_gate == bool(s["gate"]) and (c.rotary_dim or c.d_k) == s["rot"]
    router = {"glm4_moe": ("sigmoid", True), "minimax_m2": ("sigmoid", True),
              "ernie4_5_moe": ("softmax", True)}
    assert (c.router, c.router_bias) == router.get(name, ("softmax", False))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameters_three_ways_and_flops_at_two_lengths(name):
    torch = pytest.importorskip("torch")
    c = translate(CONFIGS[name], "t", name).config
    a = analyze(c)
    assert (a.param_count, a.active_param_count) == \
        (params_by_hand(name), params_by_hand(name, active=True))
    from model import TransformerLM
    assert sum(p.numel() for p in TransformerLM.from_config(c, device="meta").parameters()) \
        == params_by_hand(name)
    for T, B in ((8, 1), (24, 2)):
        assert analyze(c, seq=T, batch=B).matmul_flops("executed") == \
            forward_matmul_flops_by_hand(name, T, B)
    transformers = pytest.importorskip("transformers")
    data = {k: v for k, v in CONFIGS[name].items() if k != "architectures"}
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert type(m).__name__ == CONFIGS[name]["architectures"][0]
    assert sum(p.numel() for p in m.parameters()) == params_by_hand(name)
    s = SHAPES[name]
    if s["gate"]:  # Qwen2MoeSparseMoeBlock.shared_expert_gate: D → 1, no bias
        layer = m.model.layers[s["moe"][0]].mlp
        assert tuple(layer.shared_expert_gate.weight.shape) == (1, D)
        assert layer.shared_expert_gate.bias is None


def test_the_shared_expert_gate_computes_transformers_qwen2_moe_block():
    """model/moe.py's gated shared expert equals Qwen2MoeSparseMoeBlock on the same weights
    (router, experts, shared expert and gate copied over; eager experts, CPU float32)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
    from model import TransformerLM
    data = {k: v for k, v in CONFIGS["qwen2_moe"].items() if k != "architectures"}
    hf_config = transformers.AutoConfig.for_model(**data)
    torch.manual_seed(0)
    theirs = Qwen2MoeSparseMoeBlock(hf_config).float()
    for p in theirs.parameters():
        torch.nn.init.normal_(p, std=0.2)
    mine = TransformerLM.from_config(translate(CONFIGS["qwen2_moe"], "t", "q").config).layers[0].ffn
    de = SHAPES["qwen2_moe"]["de"]
    with torch.no_grad():
        mine.router.weight.copy_(theirs.gate.weight)
        gate, up = theirs.experts.gate_up_proj[:, :de], theirs.experts.gate_up_proj[:, de:]
        mine.experts.w1.copy_(gate), mine.experts.w3.copy_(up)
        mine.experts.w2.copy_(theirs.experts.down_proj)
        mine.shared.w1.weight.copy_(theirs.shared_expert.gate_proj.weight)
        mine.shared.w3.weight.copy_(theirs.shared_expert.up_proj.weight)
        mine.shared.w2.weight.copy_(theirs.shared_expert.down_proj.weight)
        mine.shared_gate.weight.copy_(theirs.shared_expert_gate.weight)
        x = torch.randn(2, 5, D)
        torch.testing.assert_close(mine(x), theirs(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_cross_check_agrees_with_every_counter(capsys, tmp_path, name):
    pytest.importorskip("transformers")
    T, B = 12, 1
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, CONFIGS[name])),
                       "--ctx", str(T), "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(name)
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(name, T, B)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward


# ---- the full-size models ---------------------------------------------------------------------
# Sizes from each model's config.json on the Hub (the class defaults of transformers 5.23.0's
# Glm4MoeConfig and MiniMaxM2Config are GLM-4.5-Air's and MiniMax-M2's own): OLMoE-1B-7B-0924
# (allenai), Qwen1.5-MoE-A2.7B and Qwen2-57B-A14B (Qwen), GLM-4.5-Air and GLM-4.5 (zai-org),
# MiniMax-M2 (MiniMaxAI). Published: OLMoE "6.9B total, 1.3B active" (arXiv 2409.02060);
# Qwen1.5-MoE "14.3B total, 2.7B activated" (Qwen blog, 2024-03); Qwen2-57B-A14B "57B, 14B
# activated" (arXiv 2407.10671, Table 1); GLM-4.5-Air "106B total, 12B active" and GLM-4.5
# "355B total, 32B active" (arXiv 2508.06471); MiniMax-M2 "230B total, 10B active" (model
# card). The active figures of GLM and MiniMax leave out the embedding and the head.
OLMOE = {"model_type": "olmoe", "vocab_size": 50304, "hidden_size": 2048,
         "intermediate_size": 1024, "num_hidden_layers": 16, "num_attention_heads": 16,
         "num_experts": 64, "num_experts_per_tok": 8, "max_position_embeddings": 4096}
QWEN15_MOE = {"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 2048,
              "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
              "num_key_value_heads": 16, "moe_intermediate_size": 1408,
              "shared_expert_intermediate_size": 5632, "num_experts": 60,
              "num_experts_per_tok": 4, "max_position_embeddings": 8192}
QWEN2_57B = {**QWEN15_MOE, "hidden_size": 3584, "intermediate_size": 18944,
             "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480,
             "num_experts": 64, "num_experts_per_tok": 8}
GLM45_AIR = {"model_type": "glm4_moe", "vocab_size": 151552, "hidden_size": 4096,
             "intermediate_size": 10944, "num_hidden_layers": 46, "num_attention_heads": 96,
             "num_key_value_heads": 8, "head_dim": 128, "attention_bias": True,
             "moe_intermediate_size": 1408, "n_routed_experts": 128, "num_experts_per_tok": 8,
             "n_shared_experts": 1, "first_k_dense_replace": 1, "routed_scaling_factor": 1.0,
             "max_position_embeddings": 131072, "num_nextn_predict_layers": 1}
GLM45 = {**GLM45_AIR, "hidden_size": 5120, "intermediate_size": 12288, "num_hidden_layers": 92,
         "moe_intermediate_size": 1536, "n_routed_experts": 160, "first_k_dense_replace": 3,
         "use_qk_norm": True, "routed_scaling_factor": 2.5}
MINIMAX_M2 = {"model_type": "minimax_m2", "vocab_size": 200064, "hidden_size": 3072,
              "intermediate_size": 1536, "num_hidden_layers": 62, "num_attention_heads": 48,
              "num_key_value_heads": 8, "head_dim": 128, "rotary_dim": 64,
              "num_local_experts": 256, "num_experts_per_tok": 8,
              "max_position_embeddings": 196608}
# ERNIE-4.5-21B-A3B-PT (baidu): 28 layers, the first dense, 64 experts top-6 and 2 shared of
# 1536, tied; published "21B total, 3B activated" (ERNIE 4.5 technical report, Table 1)
ERNIE_21B = {"model_type": "ernie4_5_moe", "vocab_size": 103424, "hidden_size": 2560,
             "intermediate_size": 12288, "num_hidden_layers": 28, "num_attention_heads": 20,
             "num_key_value_heads": 4, "head_dim": 128, "moe_intermediate_size": 1536,
             "moe_num_experts": 64, "moe_k": 6, "moe_num_shared_experts": 2,
             "moe_layer_start_index": 1, "moe_layer_interval": 1, "tie_word_embeddings": True,
             "max_position_embeddings": 131072, "pad_token_id": 0}


def _moe_total(V, D, L, attn, norms, router, expert, k_or_e, shared, dense, n_dense, tied=False):
    """V·D (+ V·D) + D + L·(attn + norms) + (L − n_dense)·(router + k_or_e·expert + shared)
    + n_dense·dense: the sum written out once for the table below."""
    return V * D * (1 if tied else 2) + D + L * (attn + norms) \
        + (L - n_dense) * (router + k_or_e * expert + shared) + n_dense * dense


@pytest.mark.parametrize("data, total, active, published", [
    # attn 4·2048² + QK-norm 2·2048; router 64·2048; expert 3·2048·1024
    (OLMOE, _moe_total(50304, 2048, 16, 4 * 2048**2 + 2 * 2048, 2 * 2048, 64 * 2048,
                       3 * 2048 * 1024, 64, 0, 0, 0),
     _moe_total(50304, 2048, 16, 4 * 2048**2 + 2 * 2048, 2 * 2048, 64 * 2048,
                3 * 2048 * 1024, 8, 0, 0, 0), (6.9, 1.3)),
    # attn 2048·48·128 + 2048² + 48·128 (Q/K/V biases); shared 3·2048·5632 + gate 2048
    (QWEN15_MOE, _moe_total(151936, 2048, 24, 2048 * 48 * 128 + 2048**2 + 48 * 128, 2 * 2048,
                            60 * 2048, 3 * 2048 * 1408, 60, 3 * 2048 * 5632 + 2048, 0, 0),
     _moe_total(151936, 2048, 24, 2048 * 48 * 128 + 2048**2 + 48 * 128, 2 * 2048, 60 * 2048,
                3 * 2048 * 1408, 4, 3 * 2048 * 5632 + 2048, 0, 0), (14.3, 2.7)),
    (QWEN2_57B, _moe_total(151936, 3584, 28, 3584 * 36 * 128 + 3584**2 + 36 * 128, 2 * 3584,
                           64 * 3584, 3 * 3584 * 2560, 64, 3 * 3584 * 20480 + 3584, 0, 0),
     _moe_total(151936, 3584, 28, 3584 * 36 * 128 + 3584**2 + 36 * 128, 2 * 3584, 64 * 3584,
                3 * 3584 * 2560, 8, 3 * 3584 * 20480 + 3584, 0, 0), (57.4, 14.2)),
    # attn 4096·112·128 + 96·128·4096 + 112·128; 1 dense layer 3·4096·10944; shared 3·4096·1408
    (GLM45_AIR, _moe_total(151552, 4096, 46, 4096 * 112 * 128 + 96 * 128 * 4096 + 112 * 128,
                           2 * 4096, 128 * 4096, 3 * 4096 * 1408, 128, 3 * 4096 * 1408,
                           3 * 4096 * 10944, 1),
     _moe_total(151552, 4096, 46, 4096 * 112 * 128 + 96 * 128 * 4096 + 112 * 128, 2 * 4096,
                128 * 4096, 3 * 4096 * 1408, 8, 3 * 4096 * 1408, 3 * 4096 * 10944, 1),
     (106.9, 13.4)),
    # + QK-norm 2·128; 3 dense layers 3·5120·12288
    (GLM45, _moe_total(151552, 5120, 92, 5120 * 112 * 128 + 96 * 128 * 5120 + 112 * 128 + 256,
                       2 * 5120, 160 * 5120, 3 * 5120 * 1536, 160, 3 * 5120 * 1536,
                       3 * 5120 * 12288, 3),
     _moe_total(151552, 5120, 92, 5120 * 112 * 128 + 96 * 128 * 5120 + 112 * 128 + 256,
                2 * 5120, 160 * 5120, 3 * 5120 * 1536, 8, 3 * 5120 * 1536, 3 * 5120 * 12288, 3),
     (352.8, 33.6)),
    # attn 3072·64·128 + 48·128·3072, QK-norm (48 + 8)·128; expert 3·3072·1536
    (MINIMAX_M2, _moe_total(200064, 3072, 62, 3072 * 64 * 128 + 48 * 128 * 3072 + 56 * 128,
                            2 * 3072, 256 * 3072, 3 * 3072 * 1536, 256, 0, 0, 0),
     _moe_total(200064, 3072, 62, 3072 * 64 * 128 + 48 * 128 * 3072 + 56 * 128, 2 * 3072,
                256 * 3072, 3 * 3072 * 1536, 8, 0, 0, 0), (228.7, 11.0)),
    # attn 2560·28·128 + 20·128·2560; router 64·2560 + its frozen bias 64; 2 shared of 1536
    (ERNIE_21B, _moe_total(103424, 2560, 28, 2560 * 28 * 128 + 20 * 128 * 2560, 2 * 2560,
                           64 * 2560 + 64, 3 * 2560 * 1536, 64, 3 * 2560 * 3072,
                           3 * 2560 * 12288, 1, tied=True),
     _moe_total(103424, 2560, 28, 2560 * 28 * 128 + 20 * 128 * 2560, 2 * 2560, 64 * 2560 + 64,
                3 * 2560 * 1536, 6, 3 * 2560 * 3072, 3 * 2560 * 12288, 1, tied=True),
     (21.8, 3.4)),
], ids=["OLMoE-1B-7B", "Qwen1.5-MoE-A2.7B", "Qwen2-57B-A14B", "GLM-4.5-Air", "GLM-4.5",
        "MiniMax-M2", "ERNIE-4.5-21B-A3B"])
def test_full_size(data, total, active, published):
    torch = pytest.importorskip("torch")
    a = analyze(translate(data, "t", "full").config)
    assert (a.param_count, a.active_param_count) == (total, active)
    assert (round(total / 1e9, 1), round(active / 1e9, 1)) == published
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert sum(p.numel() for p in m.parameters()) == total


@pytest.mark.parametrize("name, changes, expected", [
    ("olmoe", {"clip_qkv": 8.0}, "clip_qkv"),
    ("qwen2_moe", {"layer_types": ["sliding_attention"] * 3}, "no window"),
    ("glm4_moe", {"n_group": 8}, "n_group 8 leaves 1 expert per group"),
    ("minimax_m2", {"scoring_func": "softmax"}, "scoring_func"),
    ("minimax_m2", {"attn_type_list": [0, 1]}, "attn_type_list"),
    ("minimax_m2", {"rotary_dim": 8, "partial_rotary_factor": 0.25}, "disagree"),
    ("ernie4_5_moe", {"use_bias": True}, "use_bias"),
    ("ernie4_5_moe", {"moe_layer_start_index": 5}, "leave no MoE layer"),
])
def test_what_the_spec_cannot_mean_is_refused_in_one_line(capsys, tmp_path, name, changes,
                                                          expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, CONFIGS[name], changes)),
                        "--no-verify", expected=expected)


def test_qwen2_moe_shared_expert_of_any_width():
    """shared_expert_intermediate_size 40, no multiple of moe_intermediate_size 16 (it was
    refused): one shared MLP 40 wide (shared_d_ff), as Qwen2MoeSparseMoeBlock builds it;
    the count equals transformers' model on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = {**CONFIGS["qwen2_moe"], "shared_expert_intermediate_size": 40}
    c = translate(data, "t", "q").config
    assert (c.num_shared_experts, c.shared_d_ff) == (1, 40)
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(
            **{k: v for k, v in data.items() if k != "architectures"}))
    assert analyze(c).param_count == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("model_type, expected", [
    # every issue-31 family is read now (cohere2 the last: tests/test_hf_cohere2.py), and
    # issue 41's apertus (tests/test_hf_apertus.py): UNSUPPORTED is empty; a new row names
    # the missing feature
    *UNSUPPORTED.items(),
    # a model_type transformers 5.23 has (models/bloom: ALiBi, a fused query_key_value)
    # that the table does not read, and one no library has: refused as not supported
    ("bloom", None), ("no_such_model", None),
])
def test_the_families_the_spec_cannot_express_are_refused_with_the_reason(capsys, tmp_path,
                                                                          model_type, expected):
    data = {**CONFIGS["olmoe"], "model_type": model_type}
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    if expected is None:
        assert f"model_type '{model_type}' is not supported; supported: " in err
    else:
        assert f"model_type {model_type} is not supported: it " in err and expected in err


def test_qwen2_moe_windows_and_dense_layers_as_its_config_derives_them():
    # Qwen2MoeConfig.__post_init__: sliding iff use_sliding_window, i < max_window_layers and
    # i even; decoder_sparse_step 2: the experts on odd layers ((i + 1) % 2 == 0)
    data = {**CONFIGS["qwen2_moe"], "use_sliding_window": True, "sliding_window": 8,
            "max_window_layers": 2, "mlp_only_layers": [], "decoder_sparse_step": 2}
    c = translate(data, "t", "n").config
    assert [k.local for k in c.layer_kinds] == [True, False, False]
    assert [k.moe for k in c.layer_kinds] == [False, True, False]
    assert translate({**data, "num_experts": 0}, "t", "n").config.num_experts is None


def test_flags_are_written_back_as_the_families_keys():
    from dataclasses import replace
    from accounting.architecture.hf_config import for_transformers
    q = translate(CONFIGS["qwen2_moe"], "t", "q")
    data, why = for_transformers(q, replace(q.config, num_shared_experts=2))
    assert why == "" and data["shared_expert_intermediate_size"] == 2 * 16
    g = translate(CONFIGS["glm4_moe"], "t", "g")
    data, why = for_transformers(g, replace(g.config, qk_norm="none"))
    assert why == "" and data["use_qk_norm"] is False
    data, why = for_transformers(g, replace(g.config, dense_layers=(0, 1)))
    assert why == "" and data["first_k_dense_replace"] == 2
    e = translate(CONFIGS["ernie4_5_moe"], "t", "e")
    data, why = for_transformers(e, replace(e.config, dense_layers=(0, 1)))
    assert why == "" and (data["moe_layer_start_index"], data["moe_layer_end_index"]) == (2, 2)


def test_ernie_router_statics_are_frozen_as_transformers_builds_them(capsys, tmp_path):
    """Ernie4_5_MoeStatics.e_score_correction_bias is an nn.Parameter with requires_grad=False
    (transformers 5.23 modeling_ernie4_5_moe.py): in the total, not trained. The plan's
    trained parameters must equal transformers' own requires_grad count on the meta device,
    and the gradient and the AdamW moments cover exactly those (fp32: 4 bytes each)."""
    import json
    import torch
    import transformers
    cfg = dict(CONFIGS["ernie4_5_moe"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg))
    seen, total, trained, tensors = set(), 0, 0, 0
    for p in m.parameters():  # tied weights once
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
            trained += p.numel() if p.requires_grad else 0
            tensors += p.requires_grad  # torch.optim.AdamW keeps a step counter per trained one
    assert total - trained == 8 * 2  # 8 experts in each of the 2 MoE layers (layers 1 and 2)
    code, out, err = run(capsys, "plan", "--config", str(path), "--precision", "fp32",
                         "--ctx", "32", "--format", "json")
    assert code == 0, err
    j = json.loads(out)
    assert (j["parameters"]["count"], j["parameters"]["trainable"]) == (total, trained)
    items = {i["name"]: i["bytes"] for i in j["training_memory"]["items"]}
    grads = [b for n, b in items.items() if "gradient" in n]
    moments = [b for n, b in items.items() if "moment" in n]
    counters = [b for n, b in items.items() if "step counter" in n]
    assert grads == [4 * trained] and moments == [4 * trained, 4 * trained]
    # the step counters follow the tool's tensors: its experts keep w1 and w3 apart (model/moe.py)
    # where transformers fuses them (experts.gate_up_proj): one tensor more per MoE layer (2),
    # and none for the two frozen statics
    assert counters == [4 * (tensors + 2)]


@pytest.mark.parametrize("model_type, changes", [
    ("qwen2_moe", {"shared_expert_intermediate_size": 40}),
    ("qwen3_next", {"shared_expert_intermediate_size": 40})])
def test_a_shared_expert_of_its_own_width_counts_as_transformers_builds_it(model_type, changes):
    """shared_expert_intermediate_size 40, no multiple of the experts' 16: one shared MLP 40
    wide (the spec's shared_d_ff; it was refused before the spec had that width), its
    parameter count equal to transformers' model on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import test_hf_qwen3_next
    base = CONFIGS["qwen2_moe"] if model_type == "qwen2_moe" else test_hf_qwen3_next.DATA
    data = {**base, **changes, "moe_intermediate_size": 16}
    c = translate(data, "t", "shared-40").config
    assert (c.num_shared_experts, c.shared_d_ff, c.shared_expert_d_ff) == (1, 40, 40)
    inner = {k: v for k, v in data.items() if k not in ("architectures", "torch_dtype")}
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**inner))
    assert analyze(c, 8, 1).param_count == sum(p.numel() for p in m.parameters())
