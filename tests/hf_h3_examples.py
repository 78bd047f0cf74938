"""Hugging Face config.json objects of deepseek_v2 and gpt_oss (issue 24), written as
transformers and the checkpoints write them, and what each means derived by hand from
transformers 5.23.0's modeling_deepseek_v2.py and modeling_gpt_oss.py — never from the
tool's tables or builder. Shared by tests/test_hf_deepseek_v2_gpt_oss.py.
"""
from __future__ import annotations

_V2_COMMON = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_dropout": 0.0, "aux_loss_alpha": 0.001,
    "bos_token_id": 0, "eos_token_id": 1, "hidden_act": "silu", "initializer_range": 0.02,
    "model_type": "deepseek_v2", "moe_layer_freq": 1, "norm_topk_prob": False,
    "pretraining_tp": 1, "rms_norm_eps": 1e-06, "rope_theta": 10000, "scoring_func": "softmax",
    "seq_aux": True, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 0.707,
                     "mscale_all_dim": 0.707, "original_max_position_embeddings": 16,
                     "type": "yarn"},
}
_OSS_COMMON = {
    "architectures": ["GptOssForCausalLM"], "attention_dropout": 0.0, "eos_token_id": 69,
    "hidden_act": "silu", "initializer_range": 0.02, "model_type": "gpt_oss",
    "output_router_logits": False, "pad_token_id": 70, "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 4.0,
                     "original_max_position_embeddings": 16, "rope_type": "yarn",
                     "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.55.0.dev0", "use_cache": True,
}

CONFIGS = {
    # V2-Lite's shape in small: q_lora_rank null (a plain q_proj), one dense layer first,
    # 8 experts in 4 groups (group_limited_greedy, top 2 groups), top-2, 2 shared experts
    "deepseek_v2": {**_V2_COMMON,
        "attention_bias": False, "first_k_dense_replace": 1, "hidden_size": 32,
        "intermediate_size": 48, "kv_lora_rank": 12, "max_position_embeddings": 64,
        "moe_intermediate_size": 16, "n_group": 4, "n_routed_experts": 8, "n_shared_experts": 2,
        "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 3,
        "num_key_value_heads": 4, "q_lora_rank": None, "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4, "routed_scaling_factor": 16.0, "topk_group": 2,
        "topk_method": "group_limited_greedy", "v_head_dim": 6, "vocab_size": 71},
    # V2's shape in small: a query latent with attention_bias (q_a_proj, kv_a_proj_with_mqa
    # and o_proj biased; q_b_proj and kv_b_proj not), greedy top-3 (n_group given, not read),
    # every layer MoE, one shared expert
    "deepseek_v2 (query latent, greedy)": {**_V2_COMMON,
        "attention_bias": True, "first_k_dense_replace": 0, "hidden_size": 32,
        "intermediate_size": 40, "kv_lora_rank": 10, "max_position_embeddings": 64,
        "moe_intermediate_size": 12, "n_group": 2, "n_routed_experts": 6, "n_shared_experts": 1,
        "num_attention_heads": 2, "num_experts_per_tok": 3, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "q_lora_rank": 14, "qk_nope_head_dim": 6,
        "qk_rope_head_dim": 2, "routed_scaling_factor": 1.0, "topk_group": 1,
        "topk_method": "greedy", "v_head_dim": 8, "vocab_size": 67},
    # gpt-oss-20b's keys in small: GQA (2 KV heads of head_dim 8), sliding/full/sliding
    # with a window of 4, 8 experts of width 16, top-2, mxfp4 quantization_config
    "gpt_oss": {**_OSS_COMMON,
        "attention_bias": True, "experts_per_token": 2, "head_dim": 8, "hidden_size": 32,
        "initial_context_length": 16, "intermediate_size": 16,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "max_position_embeddings": 64, "num_attention_heads": 4, "num_experts_per_tok": 2,
        "num_hidden_layers": 3, "num_key_value_heads": 2, "num_local_experts": 8,
        "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                           "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"],
                                "quant_method": "mxfp4"},
        "sliding_window": 4, "vocab_size": 71},
    # gpt_oss with transformers' defaults: layer_types absent (the even layers slide),
    # attention_bias absent (true), multi-head (4 KV heads), window 3, 4 layers, top-1
    "gpt_oss (defaults)": {
        "model_type": "gpt_oss", "head_dim": 6, "hidden_size": 24, "intermediate_size": 20,
        "max_position_embeddings": 64, "num_attention_heads": 4, "num_experts_per_tok": 1,
        "num_hidden_layers": 4, "num_key_value_heads": 4, "num_local_experts": 3,
        "sliding_window": 3, "vocab_size": 53},
}


def _v2(c: dict):
    d, h, L, V = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"], c["vocab_size"]
    nope, rope, v, r_kv, r_q = (c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"],
                                c["kv_lora_rank"], c["q_lora_rank"])
    E, k, f_e, s = (c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"],
                    c["n_shared_experts"])
    bias = c["attention_bias"]
    return d, h, L, V, nope, rope, v, r_kv, r_q, E, k, f_e, s, bias


def params_by_hand(c: dict, active: bool = False) -> int:
    """Parameters of transformers' model of `c`, from its modeling file's constructors
    (active: a token's k routed experts instead of all E, as Mixtral's "12.9B active")."""
    if c["model_type"] == "deepseek_v2":
        d, h, L, V, nope, rope, v, r_kv, r_q, E, k, f_e, s, bias = _v2(c)
        # DeepseekV2Attention: q_proj (no bias) or q_a_proj (+bias) q_a_layernorm q_b_proj;
        # kv_a_proj_with_mqa (+bias), kv_a_layernorm, kv_b_proj (no bias), o_proj (+bias)
        q = d * h * (nope + rope) if r_q is None else \
            d * r_q + bias * r_q + r_q + r_q * h * (nope + rope)
        attn = q + d * (r_kv + rope) + bias * (r_kv + rope) + r_kv + r_kv * h * (nope + v) \
            + h * v * d + bias * d
        dense = 3 * d * c["intermediate_size"]  # DeepseekV2MLP: gate, up, down
        # DeepseekV2Moe: gate.weight (E, d); experts gate_up_proj (E, 2f, d), down_proj
        # (E, d, f); shared_experts: DeepseekV2MLP of s·f
        moe = E * d + (k if active else E) * 3 * d * f_e + 3 * d * s * f_e
        n_dense = min(c["first_k_dense_replace"], L)
        return 2 * V * d + L * (attn + 2 * d) + n_dense * dense + (L - n_dense) * moe + d
    # gpt_oss: GptOssAttention q/k/v/o (+bias when attention_bias, default true), sinks (h);
    # GptOssTopKRouter weight (E, d) and bias (E); GptOssExperts gate_up_proj (E, d, 2f) and
    # its bias (E, 2f), down_proj (E, f, d) and its bias (E, d); two RMSNorms per layer
    d, h, hkv, hd = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                     c["head_dim"])
    L, V, E, k, f = (c["num_hidden_layers"], c["vocab_size"], c["num_local_experts"],
                     c["num_experts_per_tok"], c["intermediate_size"])
    bias = c.get("attention_bias", True)
    attn = 2 * d * h * hd + 2 * d * hkv * hd + bias * (h * hd + 2 * hkv * hd + d) + h
    expert = d * 2 * f + 2 * f + f * d + d
    return 2 * V * d + L * (attn + E * d + E + (k if active else E) * expert + 2 * d) + d


def forward_matmul_flops_by_hand(c: dict, T: int, B: int) -> int:
    """2 FLOPs per multiply-add; the executed attention core (all T×T scores, the mask and
    any window applied after); B·T·k expert rows (dropless)."""
    rows = B * T
    if c["model_type"] == "deepseek_v2":
        d, h, L, V, nope, rope, v, r_kv, r_q, E, k, f_e, s, _ = _v2(c)
        q = d * h * (nope + rope) if r_q is None else d * r_q + r_q * h * (nope + rope)
        proj = q + d * (r_kv + rope) + r_kv * h * (nope + v) + h * v * d
        core = h * T * (nope + rope) + h * T * v  # per query row: QKᵀ and scores·V
        n_dense = min(c["first_k_dense_replace"], L)
        mlp = n_dense * 3 * d * c["intermediate_size"] \
            + (L - n_dense) * (E * d + k * 3 * d * f_e + 3 * d * s * f_e)
        return 2 * rows * (L * (proj + core) + mlp + d * V)
    d, h, hkv, hd = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                     c["head_dim"])
    L, V, E, k, f = (c["num_hidden_layers"], c["vocab_size"], c["num_local_experts"],
                     c["num_experts_per_tok"], c["intermediate_size"])
    proj = 2 * d * h * hd + 2 * d * hkv * hd
    core = 2 * h * T * hd
    return 2 * rows * (L * (proj + core + E * d + k * 3 * d * f) + d * V)


def kv_bytes_by_hand(c: dict, T: int, B: int) -> int:
    """past_key_values after the prefill, in the torch_dtype (bfloat16: 2 bytes, none:
    float32): DeepSeek-V2 caches the normed latent (kv_lora_rank) and the RoPE key per token
    and layer; gpt_oss K and V of its KV heads, a sliding layer only the last W − 1 tokens
    (DynamicSlidingWindowLayer)."""
    L, size = c["num_hidden_layers"], 2 if c.get("torch_dtype") == "bfloat16" else 4
    if c["model_type"] == "deepseek_v2":
        return size * B * T * L * (c["kv_lora_rank"] + c["qk_rope_head_dim"])
    W = c["sliding_window"]
    sliding = c.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention"
                                       for i in range(L)]
    per_token = 2 * c["num_key_value_heads"] * c["head_dim"] * size * B
    return sum(per_token * (min(T, W - 1) if t == "sliding_attention" else T) for t in sliding)


# The released checkpoints' config.json (the Hub's, keys as shipped; gpt-oss's 24/36
# layer_types lists written as their alternation).
_ALTERNATE = ["sliding_attention", "full_attention"]
RELEASED = {
    "deepseek-ai/DeepSeek-V2-Lite": {**_V2_COMMON,
        "attention_bias": False, "first_k_dense_replace": 1, "hidden_size": 2048,
        "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
        "moe_intermediate_size": 1408, "n_group": 1, "n_routed_experts": 64,
        "n_shared_experts": 2, "num_attention_heads": 16, "num_experts_per_tok": 6,
        "num_hidden_layers": 27, "num_key_value_heads": 16, "q_lora_rank": None,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "routed_scaling_factor": 1.0,
        "topk_group": 1, "topk_method": "greedy", "v_head_dim": 128, "vocab_size": 102400,
        "bos_token_id": 100000, "eos_token_id": 100001,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                         "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                         "type": "yarn"}},
    "deepseek-ai/DeepSeek-V2": {**_V2_COMMON,
        "attention_bias": False, "first_k_dense_replace": 1, "hidden_size": 5120,
        "intermediate_size": 12288, "kv_lora_rank": 512, "max_position_embeddings": 163840,
        "moe_intermediate_size": 1536, "n_group": 8, "n_routed_experts": 160,
        "n_shared_experts": 2, "num_attention_heads": 128, "num_experts_per_tok": 6,
        "num_hidden_layers": 60, "num_key_value_heads": 128, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "routed_scaling_factor": 16.0,
        "topk_group": 3, "topk_method": "group_limited_greedy", "v_head_dim": 128,
        "vocab_size": 102400, "bos_token_id": 100000, "eos_token_id": 100001,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                         "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                         "type": "yarn"}},
    "openai/gpt-oss-20b": {**_OSS_COMMON,
        "attention_bias": True, "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64,
        "hidden_size": 2880, "initial_context_length": 4096, "intermediate_size": 2880,
        "layer_types": _ALTERNATE * 12, "max_position_embeddings": 131072,
        "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
        "num_key_value_heads": 8, "num_local_experts": 32, "pad_token_id": 199999,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn",
                         "truncate": False},
        "sliding_window": 128, "vocab_size": 201088,
        "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                           "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"],
                                "quant_method": "mxfp4"}},
}
RELEASED["openai/gpt-oss-120b"] = {**RELEASED["openai/gpt-oss-20b"],
                                   "layer_types": _ALTERNATE * 18, "num_hidden_layers": 36,
                                   "num_local_experts": 128}
# What their authors publish (total, active), rounded as published: DeepSeek-V2's paper
# (236B total, 21B active; V2-Lite 15.7B, 2.4B active, both without the input embedding),
# OpenAI's gpt-oss model card (20.91B / 3.61B and 116.83B / 5.13B, active without the
# embedding table, the unembedding counted).
PUBLISHED = {
    "deepseek-ai/DeepSeek-V2-Lite": ((15.7, 1), (2.4, 1)),
    "deepseek-ai/DeepSeek-V2": ((236, 0), (21, 0)),
    "openai/gpt-oss-20b": ((20.91, 2), (3.61, 2)),
    "openai/gpt-oss-120b": ((116.83, 2), (5.13, 2)),
}
