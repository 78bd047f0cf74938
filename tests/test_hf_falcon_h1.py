"""Hugging Face config.json in, for Falcon-H1 (model_type falcon_h1; issue 31): a parallel
hybrid, each layer a Mamba-2 mixer and grouped attention side by side on the same normed
input, summed, then a SwiGLU MLP, with muP multipliers; counted against hand algebra
written here from transformers 5.23.0's modeling_falcon_h1.py and transformers' own
FalconH1ForCausalLM (meta device: parameters; CPU: the cache it builds).

What modeling_falcon_h1.py builds (read there): FalconH1DecoderLayer: input_layernorm (d),
mamba, self_attn, pre_ff_layernorm (d), feed_forward. FalconH1Mixer: conv1d (d_xbc = h·p +
2·G·n channels, width K, mamba_conv_bias), in_proj (d → 2·h·p + 2·G·n + h, mamba_proj_bias),
dt_bias, A_log, D (h), the gated RMSNorm (h·p) only with mamba_rms_norm, out_proj (h·p → d,
projectors_bias); mamba2_chunk_scan as Nemotron-H's (tests/test_hf_nemotron_h.py).
FalconH1Attention: q/k/v/o without biases, RoPE. FalconH1MLP: gate/up/down. final_layernorm;
untied lm_head. The multipliers, one elementwise op each per layer whatever their value:
x·ssm_in (d), in_proj·mup_vector (d_zxbcdt), mamba·ssm_out (d), x·attention_in (d),
K·key_multiplier (h_kv·d_k), attention·attention_out (d), gate_proj·gate_multiplier (d_ff),
down_proj·down_multiplier (d); and the embeddings × embedding_multiplier, the logits ×
lm_head_multiplier.
"""
import json
import math

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, H, KV, HD, F, L = 96, 32, 4, 2, 8, 48, 2
MH, MP, N, G, K, C = 4, 4, 3, 2, 4, 16
DATA = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "vocab_size": V,
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
        "mamba_d_ssm": MH * MP, "mamba_n_heads": MH, "mamba_d_head": "auto",
        "mamba_n_groups": G, "mamba_d_state": N, "mamba_d_conv": K, "mamba_chunk_size": C,
        "mamba_rms_norm": False, "mamba_norm_before_gate": False, "mamba_conv_bias": True,
        "mamba_proj_bias": False, "projectors_bias": False, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float32",
        "embedding_multiplier": 2.0, "lm_head_multiplier": 0.5, "key_multiplier": 0.7,
        "attention_in_multiplier": 1.2, "attention_out_multiplier": 0.9,
        "ssm_in_multiplier": 1.1, "ssm_out_multiplier": 0.6, "mlp_multipliers": [1.5, 0.5],
        "ssm_multipliers": [0.9, 1.1, 0.8, 1.2, 1.3], "attn_layer_indices": None,
        "mamba_use_mlp": True}
NORMED = {**DATA, "mamba_rms_norm": True}  # the gated RMSNorm, gating first
XBC = MH * MP + 2 * G * N
ZXBCDT = 2 * MH * MP + 2 * G * N + MH


def spec(data=DATA):
    return translate(data, "config.json", "falcon-h1-tiny").config


def transformers_model(data, device):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.FalconH1Config(**{k: v for k, v in data.items() if k not in (
        "architectures", "model_type", "torch_dtype", "attn_layer_indices", "mamba_use_mlp")})
    with torch.device(device):
        return transformers.FalconH1ForCausalLM(cfg)


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("hybrid",) * L and c.block == "sequential"
    assert c.mamba_heads == MH and c.mamba_head_dim == MP and c.mamba_gate_only
    assert c.mup_multipliers and c.embedding_multiplier == 2.0 and c.logit_scale == 0.5
    assert not spec(NORMED).mamba_gate_only


def hand_params(norm: bool = False) -> int:
    mamba = (XBC * K + XBC + D * ZXBCDT + 3 * MH + MH * MP * D
             + (MH * MP if norm else 0))
    attn = 2 * D * H * HD + 2 * D * KV * HD
    mlp = 3 * D * F
    return 2 * V * D + D + L * (2 * D + mamba + attn + mlp)


@pytest.mark.parametrize("data,norm", [(DATA, False), (NORMED, True)])
def test_parameters_equal_hand_algebra_and_transformers(data, norm):
    model = transformers_model(data, "meta")
    assert analyze(spec(data), 8, 1).param_count == hand_params(norm) == \
        sum(p.numel() for p in model.parameters())


def hand_forward_flops(T: int) -> int:
    n = math.ceil(T / C)
    mamba = (2 * T * D * ZXBCDT + 2 * T * XBC * K
             + 2 * MH * n * C * C * N + 2 * MH * n * C * C * MP + 2 * MH * n * C * MP * N
             + 2 * MH * (n + 1) * (n + 1) * MP * N + 2 * MH * n * C * N * MP
             + 2 * T * MH * MP * D)
    attn = 2 * T * D * H * HD * 2 + 2 * 2 * T * D * KV * HD + 2 * 2 * H * T * T * HD
    mlp = 3 * 2 * T * D * F
    return L * (mamba + attn + mlp) + 2 * T * D * V


@pytest.mark.parametrize("T", [40, 100])  # 3 and 7 chunks of 16, padded
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


@pytest.mark.parametrize("T", [40, 100])
def test_mup_multipliers_counted_as_transformers_runs_them(T):
    """One multiply per element of each tensor the multipliers scale (module docstring's
    list from modeling_falcon_h1.py), in every layer; the embeddings' and logits' apart."""
    per_layer = T * (D + ZXBCDT + D + D + KV * HD + D + F + D)
    by = analyze(spec(), T, 1, "forward").elementwise_by_component()
    assert by["muP multipliers"] == L * per_layer
    assert by["embedding multiplier"] == T * D and by["logit scale"] == T * V


@pytest.mark.parametrize("T,B", [(20, 2), (3, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """plan's .inference.kv_cache_bytes against the tensors of transformers' cache after a
    CPU forward (fp32 model): every layer keeps K and V and a d_xbc × K conv window and an
    h × p × n SSM state."""
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
    assert held == B * L * (2 * KV * HD * T + XBC * K + MH * MP * N) * 4
    path = write_config(tmp_path, DATA)
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", str(T), "--batch",
                         str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


@pytest.mark.parametrize("data", [DATA, NORMED], ids=["gate-only", "gated-norm"])
def test_verify_agrees_with_transformers(tmp_path, capsys, data):
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, data)), "--ctx", "40")
    assert x["transformers"]["agrees"] and x["transformers"]["model_type"] == "falcon_h1"


@pytest.mark.parametrize("change,expected", [
    ({"mamba_rms_norm": True, "mamba_norm_before_gate": True}, "mamba_norm_before_gate"),
    ({"projectors_bias": True}, "projectors_bias"),
    ({"mamba_d_head": 3}, "mamba_d_head"),
    ({"mlp_multipliers": [1.0]}, "mlp_multipliers")])
def test_inexpressible_settings_are_refused_in_one_line(tmp_path, capsys, change, expected):
    path = write_config(tmp_path, {**DATA, **change})
    refused_in_one_line(capsys, "--config", str(path), "--no-verify", expected=expected)


# Falcon-H1-7B's sizes (https://huggingface.co/tiiuae/Falcon-H1-7B-Base; the model card
# names it 7B), as public copies of its config.json write them (no Hub access here: read
# from mlx-community's Falcon-H1-7B-Instruct config and a test suite's copy of the 7B's;
# mamba_rms_norm false as the Falcon-H1 files seen): counted by transformers on meta here
FALCON_H1_7B = {"model_type": "falcon_h1", "vocab_size": 130048, "hidden_size": 3072,
                "intermediate_size": 12288, "num_hidden_layers": 44, "num_attention_heads": 12,
                "num_key_value_heads": 2, "head_dim": 128, "mamba_d_ssm": 3072,
                "mamba_n_heads": 24, "mamba_d_head": 128, "mamba_n_groups": 1,
                "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2,
                "mamba_chunk_size": 128, "mamba_rms_norm": False, "tie_word_embeddings": False,
                "max_position_embeddings": 262144}


def test_seven_billion_sizes_equal_transformers(capsys, tmp_path):
    model = transformers_model(FALCON_H1_7B, "meta")
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, FALCON_H1_7B)),
                         "--no-verify", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["parameters"]["total"] == sum(p.numel() for p in model.parameters())
