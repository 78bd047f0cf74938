"""Small Hugging Face config.json objects of the mixture-of-experts, latent-attention and
sliding-window model_types, written as transformers writes them, with what each means
derived by hand from transformers 5.23.0's modeling files — never from the tool's tables.

Shared by tests/test_hf_moe.py (the translation, the ledger, model/ and transformers' own
model). The hand algebra below is written independently of accounting/ledger/builder/.
"""
from __future__ import annotations

CONFIGS = {
    # Mixtral with a sliding window of 6 on every layer (MixtralModel: the mask; its cache:
    # DynamicSlidingWindowLayer); 4 experts, top-2; head_dim absent: 32/4.
    "mixtral": {
        "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
        "intermediate_size": 40, "max_position_embeddings": 64, "model_type": "mixtral",
        "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "num_local_experts": 4, "output_router_logits": False,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
        "router_jitter_noise": 0.0, "sliding_window": 6, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.46.0", "use_cache": True,
        "vocab_size": 67},
    # Qwen3-MoE with a dense layer among the MoE ones (mlp_only_layers [1]: Qwen3MoeMLP of
    # intermediate_size there), head_dim 12 ≠ 32/4, no renormalisation of the top-k weights.
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "decoder_sparse_step": 1, "eos_token_id": 2, "head_dim": 12,
        "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
        "intermediate_size": 56, "max_position_embeddings": 64, "max_window_layers": 3,
        "mlp_only_layers": [1], "model_type": "qwen3_moe", "moe_intermediate_size": 16,
        "norm_topk_prob": False, "num_attention_heads": 4, "num_experts": 8,
        "num_experts_per_tok": 3, "num_hidden_layers": 3, "num_key_value_heads": 2,
        "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
        "use_cache": True, "use_sliding_window": False, "vocab_size": 71},
    # DeepSeek-V3: latent attention with a query latent, one dense layer first, 8 experts in 4
    # groups (top 2 groups), top-2, 2 shared experts, yarn RoPE, the MTP key (not built).
    "deepseek_v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
        "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 32,
        "initializer_range": 0.02, "intermediate_size": 48, "kv_lora_rank": 12,
        "max_position_embeddings": 64, "model_type": "deepseek_v3", "moe_intermediate_size": 16,
        "moe_layer_freq": 1, "n_group": 4, "n_routed_experts": 8, "n_shared_experts": 2,
        "norm_topk_prob": True, "num_attention_heads": 4, "num_experts_per_tok": 2,
        "num_hidden_layers": 3, "num_key_value_heads": 4, "num_nextn_predict_layers": 1,
        "q_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 16,
                         "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
        "tie_word_embeddings": False, "topk_group": 2, "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": True,
        "v_head_dim": 6, "vocab_size": 73},
    # DeepSeek-V3 without the query latent (q_proj), n_group 1, no shared expert.
    "deepseek_v3 (no query latent)": {
        "architectures": ["DeepseekV3ForCausalLM"], "first_k_dense_replace": 0,
        "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 48, "kv_lora_rank": 12,
        "max_position_embeddings": 64, "model_type": "deepseek_v3", "moe_intermediate_size": 16,
        "n_group": 1, "n_routed_experts": 4, "n_shared_experts": 0, "num_attention_heads": 4,
        "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 4,
        "q_lora_rank": None, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "topk_group": 1,
        "torch_dtype": "float32", "v_head_dim": 8, "vocab_size": 61},
    # Mistral with a window of 5 on every layer.
    "mistral": {
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 40,
        "max_position_embeddings": 64, "model_type": "mistral", "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0, "sliding_window": 5, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": True,
        "vocab_size": 59},
    # Qwen2 with use_sliding_window: layers max_window_layers (1) and up slide, window 4.
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 1, "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 40,
        "max_position_embeddings": 64, "max_window_layers": 1, "model_type": "qwen2",
        "num_attention_heads": 4, "num_hidden_layers": 3, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 4,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.40.1",
        "use_cache": True, "use_sliding_window": True, "vocab_size": 53},
    # Qwen3 with explicit layer_types: layer 0 slides (window 5), layer 1 is global.
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "bos_token_id": 1,
        "eos_token_id": 2, "head_dim": 8, "hidden_act": "silu", "hidden_size": 32,
        "intermediate_size": 40, "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 64, "max_window_layers": 2, "model_type": "qwen3",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000, "sliding_window": 5,
        "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.51.0",
        "use_cache": True, "use_sliding_window": True, "vocab_size": 57},
}

# What each means, by hand from transformers' modeling files: sizes, which layers are MoE
# (the rest dense), which slide (window W), latent attention's sizes (mla), qk-norm per head.
SHAPES = {
    "mixtral": dict(V=67, d=32, L=2, h=4, kv=2, hd=8, f=40, moe=(0, 1), E=4, k=2, f_e=40,
                    shared=0, local=(0, 1), W=6, qk=False, tied=False, bytes=2),
    "qwen3_moe": dict(V=71, d=32, L=3, h=4, kv=2, hd=12, f=56, moe=(0, 2), E=8, k=3, f_e=16,
                      shared=0, local=(), W=None, qk=True, tied=False, bytes=2),
    "deepseek_v3": dict(V=73, d=32, L=3, h=4, f=48, moe=(1, 2), E=8, k=2, f_e=16, shared=2,
                        local=(), W=None, qk=False, tied=False, bytes=2,
                        mla=dict(r_q=16, r_kv=12, nope=8, rope=4, v=6)),
    "deepseek_v3 (no query latent)": dict(V=61, d=32, L=2, h=4, f=48, moe=(0, 1), E=4, k=2,
                                          f_e=16, shared=0, local=(), W=None, qk=False,
                                          tied=False, bytes=4,
                                          mla=dict(r_q=None, r_kv=12, nope=8, rope=4, v=8)),
    "mistral": dict(V=59, d=32, L=2, h=4, kv=1, hd=8, f=40, moe=(), local=(0, 1), W=5, qk=False,
                    tied=False, bytes=2),
    "qwen2": dict(V=53, d=32, L=3, h=4, kv=2, hd=8, f=40, moe=(), local=(1, 2), W=4, qk=False,
                  tied=True, bytes=2, qkv_bias=True),
    "qwen3": dict(V=57, d=32, L=2, h=4, kv=2, hd=8, f=40, moe=(), local=(0,), W=5, qk=True,
                  tied=False, bytes=4),
}


def _attention(s) -> tuple[int, int]:
    """(parameters, forward multiply-adds per token excluding the core) of one block's
    attention: Q, K, V, O (+ Q/K/V biases, per-head QK-norm), or latent attention's
    q_a_proj, q_a_layernorm, q_b_proj (or q_proj), kv_a_proj_with_mqa, kv_a_layernorm,
    kv_b_proj, o_proj (bias=False throughout here)."""
    d, h = s["d"], s["h"]
    if "mla" in s:
        m = s["mla"]
        qk = m["nope"] + m["rope"]
        q = d * m["r_q"] + m["r_q"] * h * qk if m["r_q"] else d * h * qk
        macs = q + d * (m["r_kv"] + m["rope"]) + m["r_kv"] * h * (m["nope"] + m["v"]) + h * m["v"] * d
        norms = (m["r_q"] or 0) + m["r_kv"]
        return macs + norms, macs
    kv, hd = s["kv"], s["hd"]
    macs = d * h * hd + 2 * d * kv * hd + h * hd * d
    extra = (h + 2 * kv) * hd * s.get("qkv_bias", False) + 2 * hd * s["qk"]
    return macs + extra, macs


def _mlp(s, i: int, active: bool = False) -> tuple[int, int]:
    """(parameters, forward multiply-adds per token) of block i's MLP: dense 3·d·f, or a
    router E·d, E experts of 3·d·f_e (k of them run) and the shared ones (one MLP of
    shared·f_e); `active`: only the k experts' parameters."""
    d = s["d"]
    if i not in s["moe"]:
        return 3 * d * s["f"], 3 * d * s["f"]
    E, k, f_e, shared = s["E"], s["k"], s["f_e"], s["shared"]
    macs = E * d + k * 3 * d * f_e + shared * 3 * d * f_e
    return E * d + ((k if active else E) + shared) * 3 * d * f_e, macs


def params_by_hand(name: str, active: bool = False) -> int:
    s = SHAPES[name]
    d, V = s["d"], s["V"]
    blocks = sum(_attention(s)[0] + _mlp(s, i, active)[0] + 2 * d for i in range(s["L"]))
    return V * d + blocks + d + (0 if s["tied"] else V * d)


def forward_matmul_flops_by_hand(name: str, T: int, B: int) -> int:
    """2 FLOPs per multiply-add: the projections and MLP per token (MoE: the router and k
    experts per token, dropless), the attention core over the full T×T scores (executed:
    the mask, causal or windowed, is applied to computed scores), the LM head."""
    s = SHAPES[name]
    d, h, N = s["d"], s["h"], B * T
    if "mla" in s:
        m = s["mla"]
        core = B * h * T * T * (m["nope"] + m["rope"] + m["v"])
    else:
        core = 2 * B * h * T * T * s["hd"]
    total = sum(N * (_attention(s)[1] + _mlp(s, i)[1]) + core for i in range(s["L"]))
    return 2 * (total + N * d * s["V"])


def kv_bytes_by_hand(name: str, T: int, B: int) -> int:
    """What transformers' cache holds after the prefill: K and V (h_kv·hd each), or latent
    attention's latent and RoPE key (r_kv + rope), per token and layer; a sliding layer
    keeps its last W − 1 tokens (DynamicSlidingWindowLayer)."""
    s = SHAPES[name]
    per = s["mla"]["r_kv"] + s["mla"]["rope"] if "mla" in s else 2 * s["kv"] * s["hd"]
    kept = sum(min(T, s["W"] - 1) if i in s["local"] else T for i in range(s["L"]))
    return per * kept * B * s["bytes"]
