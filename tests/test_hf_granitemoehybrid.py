"""Hugging Face config.json in, for IBM Granite 4.0-H (model_type granitemoehybrid; issue 31):
Mamba-2 and attention layers (layer_types), each followed by a mixture of experts beside a
shared MLP, with Granite's multipliers; counted against hand algebra written here from
transformers 5.23.0's modeling_granitemoehybrid.py, transformers' own
GraniteMoeHybridForCausalLM (meta device: parameters; CPU: the cache it builds) and the
published figures.

What modeling_granitemoehybrid.py builds (read there): embed_tokens (× embedding_multiplier
in GraniteMoeHybridModel.forward); per layer input_layernorm (d), a mixer,
post_attention_layernorm (d), block_sparse_moe and shared_mlp, each sublayer's output ×
residual_multiplier before its residual add. GraniteMoeHybridMambaLayer: conv1d (d_xbc =
h·p + 2·G·n channels, width K, mamba_conv_bias), in_proj (d → 2·h·p + 2·G·n + h,
mamba_proj_bias), dt_bias, A_log, D (h), norm (h·p, grouped gated RMSNorm), out_proj
(h·p → d), h·p = mamba_expand·d. GraniteMoeHybridAttention: q/k/v/o (attention_bias), no
RoPE with position_embedding_type "nope", scores × attention_multiplier.
GraniteMoeHybridMoE: router (weight (E, d): the top-k of the logits, softmax over the k),
experts gate_up_proj (E, 2·f_e, d) and down_proj (E, d, f_e), f_e = intermediate_size.
GraniteMoeHybridMLP (shared_mlp): input_linear (d → 2·f_s), SiLU gate, output_linear
(f_s → d), f_s = shared_intermediate_size. norm; lm_head tied; logits / logits_scaling.
"""
import json
import math

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, run
from hf_examples import write_config

V, D, H, KV = 96, 32, 4, 2
HD = D // H
MH, MP, N, G, K, C = 8, 8, 3, 2, 4, 16  # MH·MP = mamba_expand·D = 64
E, TOPK, FE, FS = 8, 2, 16, 24
DATA = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
        "attention_bias": False, "attention_dropout": 0.0, "attention_multiplier": 0.015625,
        "embedding_multiplier": 12, "hidden_act": "silu", "hidden_size": D,
        "intermediate_size": FE, "layer_types": ["mamba", "attention", "mamba"],
        "logits_scaling": 2, "mamba_chunk_size": C, "mamba_conv_bias": True, "mamba_d_conv": K,
        "mamba_d_head": MP, "mamba_d_state": N, "mamba_expand": 2, "mamba_n_groups": G,
        "mamba_n_heads": MH, "mamba_proj_bias": False, "max_position_embeddings": 512,
        "normalization_function": "rmsnorm", "num_attention_heads": H,
        "num_experts_per_tok": TOPK, "num_hidden_layers": 3, "num_key_value_heads": KV,
        "num_local_experts": E, "output_router_logits": False, "position_embedding_type": "nope",
        "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 10000, "router_aux_loss_coef": 0.0, "shared_intermediate_size": FS,
        "tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True,
        "vocab_size": V}
XBC = MH * MP + 2 * G * N


def spec(data=DATA):
    return translate(data, "config.json", "granite-h-tiny").config


def _transformers_model(device: str, data=DATA):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GraniteMoeHybridConfig(**{k: v for k, v in data.items() if k not in (
        "architectures", "model_type", "torch_dtype")})
    with torch.device(device):
        return transformers.GraniteMoeHybridForCausalLM(cfg)


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("mamba", "global", "mamba") and c.block == "sequential"
    assert c.positions == "none" and c.mlp == "swiglu" and c.mamba_chunk == C
    assert (c.num_experts, c.moe_d_ff, c.num_shared_experts, c.shared_d_ff) == (E, FE, 1, FS)
    assert c.router_topk_first and c.router == "softmax" and not c.norm_topk_prob
    assert (c.embedding_multiplier, c.residual_multiplier, c.logit_scale) == (12, 0.22, 0.5)


def hand_params() -> int:
    mamba = XBC * K + XBC + D * (2 * MH * MP + 2 * G * N + MH) + 3 * MH + MH * MP + MH * MP * D
    attn = 2 * D * H * HD + 2 * D * KV * HD
    moe = E * D + 3 * E * FE * D + 3 * D * FS  # router, experts, shared_mlp
    return V * D + D + 3 * (2 * D + moe) + 2 * mamba + attn


def test_parameters_equal_hand_algebra_and_transformers():
    model = _transformers_model("meta")
    a = analyze(spec(), 8, 1)
    assert a.param_count == hand_params() == sum(p.numel() for p in model.parameters())
    assert a.active_param_count == hand_params() - 3 * (E - TOPK) * 3 * FE * D


def hand_forward_flops(T: int) -> int:
    n = math.ceil(T / C)
    mamba = (2 * T * D * (2 * MH * MP + 2 * G * N + MH) + 2 * T * XBC * K
             + 2 * MH * n * C * C * N + 2 * MH * n * C * C * MP + 2 * MH * n * C * MP * N
             + 2 * MH * (n + 1) * (n + 1) * MP * N + 2 * MH * n * C * N * MP
             + 2 * T * MH * MP * D)
    attn = 2 * T * D * H * HD * 2 + 2 * 2 * T * D * KV * HD + 2 * 2 * H * T * T * HD
    # router; T·k slots through gate, up and down; the shared MLP on every token
    moe = 2 * T * D * E + 3 * 2 * T * TOPK * D * FE + 3 * 2 * T * D * FS
    return 2 * mamba + attn + 3 * moe + 2 * T * D * V


@pytest.mark.parametrize("T", [40, 100])  # 3 and 7 chunks of 16, padded
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


def test_multipliers_add_one_op_per_element():
    """GraniteMoeHybridModel: inputs_embeds × embedding_multiplier (T·d); each layer's two
    sublayer outputs × residual_multiplier (2·L·T·d); the logits / logits_scaling (T·V)."""
    T = 40
    plain = spec({**DATA, "embedding_multiplier": 1.0, "residual_multiplier": 1.0,
                  "logits_scaling": 1.0})
    assert (plain.embedding_multiplier, plain.residual_multiplier, plain.logit_scale) == \
        (1.0, 1.0, 1.0)  # 1.0 is still a multiply transformers runs
    rows = analyze(spec(), T, 1, "forward").elementwise_by_component()
    assert rows["embedding multiplier"] == T * D
    assert rows["residual multiplier"] == 2 * 3 * T * D
    assert rows["logit scale"] == T * V


def test_cache_bytes_equal_transformers_cache(tmp_path, capsys):
    """plan's .inference.kv_cache_bytes against the tensors of transformers' cache after a
    CPU forward (fp32): K and V of the attention layer; per Mamba-2 layer a d_xbc × K conv
    window and an h × p × n SSM state."""
    torch = pytest.importorskip("torch")
    T, B = 20, 2
    model = _transformers_model("cpu").eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    assert held == B * (2 * KV * HD * T + 2 * (XBC * K + MH * MP * N)) * 4
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         str(T), "--batch", str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


def test_verify_agrees_with_transformers(tmp_path, capsys):
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "40")
    assert x["transformers"]["agrees"] and x["transformers"]["model_type"] == "granitemoehybrid"


def test_rope_and_dense_variants_equal_transformers():
    """position_embedding_type rope (RoPE buffers, no parameters) and num_local_experts 0
    (shared_mlp alone, GraniteMoeHybridDecoderLayer) counted as transformers builds them."""
    for change in ({"position_embedding_type": "rope"}, {"num_local_experts": 0}):
        data = {**DATA, **change}
        model = _transformers_model("meta", data)
        assert analyze(spec(data), 8, 1).param_count == sum(p.numel() for p in model.parameters())
    assert spec({**DATA, "position_embedding_type": "rope"}).positions == "rope"
    assert spec({**DATA, "num_local_experts": 0}).num_experts is None


# The published configs' keys that change a count (huggingface.co/ibm-granite/granite-4.0-h-
# small and granite-4.0-h-tiny, config.json): 40 layers, 4 of them attention (the indices
# change no count), no RoPE, tied head, vocabulary 100,352.
BIG = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
       "vocab_size": 100352, "num_hidden_layers": 40, "tie_word_embeddings": True,
       "layer_types": ["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"]
       + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4,
       "position_embedding_type": "nope", "mamba_d_state": 128, "mamba_d_conv": 4,
       "mamba_expand": 2, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_chunk_size": 256,
       "mamba_conv_bias": True, "mamba_proj_bias": False, "attention_bias": False,
       "hidden_act": "silu", "torch_dtype": "bfloat16"}
SMALL_H = {**BIG, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "mamba_n_heads": 128, "num_local_experts": 72, "num_experts_per_tok": 10,
           "intermediate_size": 768, "shared_intermediate_size": 1536}
TINY_H = {**BIG, "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 4,
          "mamba_n_heads": 48, "num_local_experts": 64, "num_experts_per_tok": 6,
          "intermediate_size": 512, "shared_intermediate_size": 1024}


@pytest.mark.parametrize("data,total_b,active_b", [(SMALL_H, 32, 9), (TINY_H, 7, 1)],
                         ids=["granite-4.0-h-small", "granite-4.0-h-tiny"])
def test_published_sizes(tmp_path, capsys, data, total_b, active_b):
    """IBM's model cards: Granite-4.0-H-Small "32B total, 9B active", Granite-4.0-H-Tiny "7B
    total, 1B active" (rounded); the total equal to transformers' model on the meta device."""
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify",
                         "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    assert p["total"] == sum(t.numel() for t in _transformers_model("meta", data).parameters())
    assert round(p["total"] / 1e9) == total_b
    # active per token, the tied embedding table counted once (Small 8.80B, Tiny 1.47B)
    assert round(p["active_per_token"] / 1e9) == active_b


def test_lora_on_named_layers_equals_peft(tmp_path, capsys):
    """PEFT's LoRA (r 4) on transformers' model: shared_mlp's input_linear (one adapter of
    d → 2·f_s: the spec's fused w1 and w3) and output_linear, Mamba-2's in_proj, q_proj;
    trainable parameters as PEFT counts them."""
    peft = pytest.importorskip("peft")
    targets = ["input_linear", "output_linear", "in_proj", "q_proj"]
    pm = peft.get_peft_model(_transformers_model("cpu"), peft.LoraConfig(r=4, target_modules=targets))
    theirs = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         "64", "--lora-rank", "4", "--lora-targets", ",".join(targets),
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["finetune"]["trainable_parameters"] == theirs
