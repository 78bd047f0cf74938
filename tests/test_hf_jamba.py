"""Hugging Face config.json in, for Jamba (model_type jamba; issue 31): Mamba-1 layers (a
selective scan with a state per channel), attention every attn_layer_period layers, experts
every expert_layer_period layers; counted against hand algebra written here from
transformers 5.23.0's modeling_jamba.py and transformers' own JambaForCausalLM (meta
device: parameters; CPU: the cache it builds).

What modeling_jamba.py builds (read there): JambaMambaMixer: conv1d (d_i = mamba_expand·d
channels, width K, mamba_conv_bias), in_proj (d → 2·d_i, mamba_proj_bias), x_proj (d_i → r
+ 2·n, no bias), dt_proj (r → d_i, a bias), A_log (d_i × n), D (d_i), out_proj (d_i → d),
dt_layernorm (r), b_layernorm and c_layernorm (n); r = ⌈d/16⌉ for "auto". Its torch path:
dt_proj.weight @ dt (2·T·r·d_i), and mamba_selective_scan's loop, per token state·C (a
d_i×n by n×1 matmul: 2·d_i·n). JambaAttention: q/k/v/o without biases, no RoPE.
JambaMLP: gate/up/down; JambaSparseMoeBlock: router (E × d, no bias), experts of
intermediate_size. final_layernorm; untied lm_head.
"""
import json
from pathlib import Path

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, H, KV, F, L, E, TOPK = 96, 32, 4, 2, 48, 4, 4, 2
HD = D // H
DI, R, N, K = 2 * D, 2, 3, 4  # mamba_expand 2; mamba_dt_rank "auto": ⌈32/16⌉
DATA = {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "vocab_size": V,
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "num_experts": E,
        "num_experts_per_tok": TOPK, "expert_layer_period": 2, "expert_layer_offset": 1,
        "attn_layer_period": 2, "attn_layer_offset": 1, "mamba_d_state": N, "mamba_d_conv": K,
        "mamba_expand": 2, "mamba_dt_rank": "auto", "mamba_conv_bias": True,
        "mamba_proj_bias": False, "rms_norm_eps": 1e-6, "max_position_embeddings": 512,
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_mamba_kernels": True}
# layers 0 and 2: Mamba-1 and a dense MLP; 1 and 3: attention and experts


def spec(data=DATA):
    return translate(data, "config.json", "jamba-tiny").config


def transformers_model(data, device):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.JambaConfig(**{k: v for k, v in data.items() if k not in (
        "architectures", "model_type", "torch_dtype")})
    with torch.device(device):
        return transformers.JambaForCausalLM(cfg)


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("mamba1", "global", "mamba1", "global")
    assert c.dense_layers == (0, 2) and c.num_experts == E and c.positions == "none"
    assert (c.mamba_inner, c.mamba_dt_rank, c.ssm_state) == (DI, R, N)
    assert not c.norm_topk_prob


def hand_params() -> int:
    mamba = (DI * N + DI + DI * K + DI + D * 2 * DI + DI * (R + 2 * N) + R * DI + DI
             + DI * D + R + 2 * N)
    attn = 2 * D * H * HD + 2 * D * KV * HD
    mlp, moe = 3 * D * F, E * 3 * D * F + E * D
    return 2 * V * D + D + L * 2 * D + 2 * (mamba + mlp) + 2 * (attn + moe)


def test_parameters_equal_hand_algebra_and_transformers():
    model = transformers_model(DATA, "meta")
    assert analyze(spec(), 8, 1).param_count == hand_params() == \
        sum(p.numel() for p in model.parameters())


def hand_forward_flops(T: int) -> int:
    mamba = (2 * T * D * 2 * DI + 2 * T * DI * K + 2 * T * DI * (R + 2 * N) + 2 * T * R * DI
             + 2 * T * DI * N + 2 * T * DI * D)
    attn = 2 * T * D * H * HD * 2 + 2 * 2 * T * D * KV * HD + 2 * 2 * H * T * T * HD
    mlp = 3 * 2 * T * D * F
    moe = 2 * T * D * E + TOPK * T * 3 * 2 * D * F  # the router; each token's k experts
    return 2 * (mamba + mlp) + 2 * (attn + moe) + 2 * T * D * V


@pytest.mark.parametrize("T", [40, 100])
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


@pytest.mark.parametrize("T,B", [(20, 2), (3, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """plan's .inference.kv_cache_bytes against the tensors of transformers' cache after a
    CPU forward (fp32 model): K and V of the attention layers; per Mamba-1 layer a d_i × K
    conv window ([B, d_i, d_conv]) and a d_i × n SSM state ([B, d_i, d_state])."""
    torch = pytest.importorskip("torch")
    model = transformers_model(DATA, "cpu").eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    assert held == B * (2 * 2 * KV * HD * T + 2 * (DI * K + DI * N)) * 4
    path = write_config(tmp_path, DATA)
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", str(T), "--batch",
                         str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


def test_verify_agrees_with_transformers(tmp_path, capsys):
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "40")
    assert x["transformers"]["agrees"] and x["transformers"]["model_type"] == "jamba"


@pytest.mark.parametrize("change,expected", [
    ({"attn_layer_offset": 2}, "attn_layer_offset"),
    ({"mamba_dt_rank": 0}, "mamba_dt_rank"),
    ({"hidden_act": "gelu"}, "hidden_act")])
def test_bad_settings_are_refused_in_one_line(tmp_path, capsys, change, expected):
    path = write_config(tmp_path, {**DATA, **change})
    refused_in_one_line(capsys, "--config", str(path), "--no-verify", expected=expected)


# Jamba v0.1's sizes (https://huggingface.co/ai21labs/Jamba-v0.1, config.json; the model
# card: "52B total parameters, 12B active"), counted by transformers on the meta device here
JAMBA_V01 = {"model_type": "jamba", "vocab_size": 65536, "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "num_experts": 16, "num_experts_per_tok": 2,
             "expert_layer_period": 2, "expert_layer_offset": 1, "attn_layer_period": 8,
             "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
             "mamba_dt_rank": 256, "tie_word_embeddings": False,
             "max_position_embeddings": 262144}


def test_jamba_v01_sizes_equal_transformers_and_the_model_card(capsys, tmp_path):
    model = transformers_model(JAMBA_V01, "meta")
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, JAMBA_V01)),
                         "--no-verify", "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    assert p["total"] == sum(x.numel() for x in model.parameters())
    # the model card's rounded figures
    assert round(p["total"] / 1e9) == 52 and round(p["active_per_token"] / 1e9) == 12
