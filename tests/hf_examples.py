"""Small Hugging Face config.json objects, one per supported model_type, written as
transformers writes them (save_pretrained: architectures, token ids, torch_dtype and
transformers_version beside the sizes), with what each means derived by hand from
transformers' modeling files (5.23.0) — never from the tool's translation table.

Shared by tests/test_hf_config.py (the translation, the ledger and model/) and
tests/test_hf_crosscheck.py (transformers' own model).
"""
from __future__ import annotations

import json

CONFIGS = {
    # GPT-2: n_inner null = 4·n_embd (GPT2MLP); gelu_new = the tanh approximation.
    "gpt2": {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1, "bos_token_id": 0, "embd_pdrop": 0.1, "eos_token_id": 0,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
        "n_ctx": 32, "n_embd": 48, "n_head": 4, "n_inner": None, "n_layer": 2, "n_positions": 32,
        "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
        "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
        "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": "float32",
        "transformers_version": "4.46.0", "use_cache": True, "vocab_size": 97},
    # Llama with every switch on: biases on q/k/v/o (attention_bias) and the MLP (mlp_bias),
    # head_dim 24 ≠ 64/4, GQA 4/2.
    "llama": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": 24, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
        "max_position_embeddings": 64, "mlp_bias": True, "model_type": "llama",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.46.0",
        "use_cache": True, "vocab_size": 101},
    # Mistral without a window, multi-query (one KV head); head_dim absent: 64/8.
    "mistral": {
        "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
        "intermediate_size": 128, "max_position_embeddings": 128, "model_type": "mistral",
        "num_attention_heads": 8, "num_hidden_layers": 3, "num_key_value_heads": 1,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.42.0.dev0", "use_cache": True, "vocab_size": 103},
    # Qwen2: Q/K/V biases with no key; sliding_window is unread while use_sliding_window is
    # false; tied head.
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 1, "hidden_act": "silu", "hidden_size": 56, "initializer_range": 0.02,
        "intermediate_size": 112, "max_position_embeddings": 64, "max_window_layers": 2,
        "model_type": "qwen2", "num_attention_heads": 7, "num_hidden_layers": 2,
        "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 64, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.40.1", "use_cache": True, "use_mrope": False,
        "use_sliding_window": False, "vocab_size": 107},
    # Qwen3: per-head QK-norm with no key; head_dim 32 ≠ 64/4.
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": 32, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
        "max_position_embeddings": 64, "max_window_layers": 2, "model_type": "qwen3",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
        "use_cache": True, "use_sliding_window": False, "vocab_size": 109},
    # OLMo-2: norms after the sublayers and QK-norm over the full projections, no keys.
    "olmo2": {
        "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
        "intermediate_size": 80, "max_position_embeddings": 64, "model_type": "olmo2",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "pad_token_id": 1, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000,
        "tie_word_embeddings": False, "torch_dtype": "float32",
        "transformers_version": "4.47.0.dev0", "use_cache": True, "vocab_size": 113},
    # transformers 5 writes RoPE as rope_parameters and the dtype as "dtype"
    "llama (transformers 5 format)": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1,
        "dtype": "bfloat16", "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64,
        "intermediate_size": 128, "max_position_embeddings": 256, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
        "num_key_value_heads": 4, "rms_norm_eps": 1e-05,
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
        "tie_word_embeddings": True, "transformers_version": "5.0.0", "use_cache": True,
        "vocab_size": 97},
}

# What each means, by hand from transformers' modeling_<type>.py:
# (V, d, L, h, h_kv, head_dim, d_ff, context, biases (qkv, out, mlp), tied, extras)
SHAPES = {
    "gpt2": dict(V=97, d=48, L=2, h=4, kv=4, hd=12, f=192, ctx=32, bias=(True, True, True),
                 tied=True, norm="layernorm", mlp="gelu_tanh", positions="learned", qk="none",
                 placement="pre", eps=1e-5),
    "llama": dict(V=101, d=64, L=2, h=4, kv=2, hd=24, f=96, ctx=64, bias=(True, True, True),
                  tied=False, norm="rmsnorm", mlp="swiglu", positions="rope", qk="none",
                  placement="pre", eps=1e-5, theta=10000.0),
    "mistral": dict(V=103, d=64, L=3, h=8, kv=1, hd=8, f=128, ctx=128, bias=(False, False, False),
                    tied=False, norm="rmsnorm", mlp="swiglu", positions="rope", qk="none",
                    placement="pre", eps=1e-5, theta=1e6),
    "qwen2": dict(V=107, d=56, L=2, h=7, kv=1, hd=8, f=112, ctx=64, bias=(True, False, False),
                  tied=True, norm="rmsnorm", mlp="swiglu", positions="rope", qk="none",
                  placement="pre", eps=1e-6, theta=1e6),
    "qwen3": dict(V=109, d=64, L=2, h=4, kv=2, hd=32, f=96, ctx=64, bias=(False, False, False),
                  tied=False, norm="rmsnorm", mlp="swiglu", positions="rope", qk="head",
                  placement="pre", eps=1e-6, theta=1e6),
    "olmo2": dict(V=113, d=64, L=2, h=4, kv=2, hd=16, f=80, ctx=64, bias=(False, False, False),
                  tied=False, norm="rmsnorm", mlp="swiglu", positions="rope", qk="full",
                  placement="post", eps=1e-6, theta=500000.0),
    "llama (transformers 5 format)": dict(
        V=97, d=64, L=2, h=4, kv=4, hd=16, f=128, ctx=256, bias=(False, False, False), tied=True,
        norm="rmsnorm", mlp="swiglu", positions="rope", qk="none", placement="pre", eps=1e-5,
        theta=500000.0),
}


def params_by_hand(name: str) -> int:
    """Embedding V·d (+ positions·d for GPT-2); per block Q (d·h·hd), K and V (d·kv·hd
    each), O (h·hd·d), the MLP (2 matrices d·f for GPT-2, 3 for the gated ones), their
    biases, the norms (LayerNorm: weight and bias; RMSNorm: weight), QK-norm (per head:
    hd each for q and k; full: h·hd and kv·hd); the final norm; an untied head V·d."""
    s = SHAPES[name]
    V, d, L, h, kv, hd, f = (s[k] for k in ("V", "d", "L", "h", "kv", "hd", "f"))
    qkv_b, out_b, mlp_b = s["bias"]
    norm = 2 * d if s["norm"] == "layernorm" else d
    gated = s["mlp"] != "gelu_tanh"
    block = d * h * hd + 2 * d * kv * hd + h * hd * d
    block += (h * hd + 2 * kv * hd) * qkv_b + d * out_b
    block += (3 if gated else 2) * d * f + ((2 if gated else 1) * f + d) * mlp_b
    block += 2 * norm + {"none": 0, "head": 2 * hd, "full": (h + kv) * hd}[s["qk"]]
    embed = V * d + (s["ctx"] * d if s["positions"] == "learned" else 0)
    return embed + L * block + norm + (0 if s["tied"] else V * d)


def forward_matmul_flops_by_hand(name: str, T: int, B: int) -> int:
    """2 FLOPs per multiply-add: per block the Q, K, V, O projections, QKᵀ and scores·V
    (B·h·T²·hd each, GQA or not), the MLP matrices; the LM head 2·B·T·d·V."""
    s = SHAPES[name]
    V, d, L, h, kv, hd, f = (s[k] for k in ("V", "d", "L", "h", "kv", "hd", "f"))
    gated = s["mlp"] != "gelu_tanh"
    proj = 2 * B * T * d * (h * hd + 2 * kv * hd) + 2 * B * T * h * hd * d
    core = 2 * 2 * B * h * T * T * hd
    mlp = (3 if gated else 2) * 2 * B * T * d * f
    return L * (proj + core + mlp) + 2 * B * T * d * V


def kv_elements_by_hand(name: str, T: int, B: int) -> int:
    """K and V of every block: 2·L·B·T·h_kv·hd elements."""
    s = SHAPES[name]
    return 2 * s["L"] * B * T * s["kv"] * s["hd"]


DELETE = object()  # in write_config's changes: remove the key


def write_config(tmp_path, data: dict, changes: dict | None = None,
                 folder: str | None = "tiny-model"):
    """data with `changes` applied (a value of DELETE removes its key), written as
    tmp_path/folder/config.json (a config.json is named by its folder, as checkpoints
    ship; folder=None: tmp_path/config.json). Shared by the Hugging Face test modules."""
    data = dict(data)
    for k, v in (changes or {}).items():
        if v is DELETE:
            data.pop(k, None)
        else:
            data[k] = v
    where = tmp_path if folder is None else tmp_path / folder
    where.mkdir(exist_ok=True)
    p = where / "config.json"
    p.write_text(json.dumps(data, indent=2))
    return p
