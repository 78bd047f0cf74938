"""Hugging Face config.json in, for Nemotron-H (model_type nemotron_h; issue 31): blocks of one
sublayer each, Mamba-2 (M), attention without RoPE (*) or a squared-ReLU MLP (-), read from
hybrid_override_pattern; counted against hand algebra written here from transformers
5.23.0's modeling_nemotron_h.py, transformers' own NemotronHForCausalLM (meta device:
parameters; CPU: the cache it builds) and the published config.json (../shared/frontier/).

What modeling_nemotron_h.py builds (read there): NemotronHBlock: norm (d) and mixer.
NemotronHMamba2Mixer: conv1d (d_xbc = h·p + 2·G·n channels, width K, use_conv_bias),
in_proj (d → 2·h·p + 2·G·n + h, use_bias), dt_bias, A_log, D (h), norm (h·p, grouped gated
RMSNorm), out_proj (h·p → d); mamba2_chunk_scan with chunk_size C: per chunk C·Bᵀ (C×n×C)
and M·x (C×C×p) per head, the chunk states Bᵀ·x (p×C×n), their exchange across the N + 1
states ((N+1)×(N+1)×p·n per head), the output C·state (C×n×p). NemotronHAttention: q/k/v/o
without biases, no RoPE. NemotronHMLP: up_proj, down_proj, relu². norm_f; untied lm_head.
"""
import json
import math
from pathlib import Path

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, run
from hf_examples import write_config

V, D, H, KV, HD, F = 96, 32, 4, 2, 8, 48
MH, MP, N, G, K, C = 4, 4, 3, 2, 4, 16
DATA = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": V,
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": 4,
        "hybrid_override_pattern": "M*-M", "num_attention_heads": H, "num_key_value_heads": KV,
        "head_dim": HD, "mamba_num_heads": MH, "mamba_head_dim": MP, "ssm_state_size": N,
        "n_groups": G, "conv_kernel": K, "chunk_size": C, "use_conv_bias": True,
        "use_bias": False, "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu",
        "layer_norm_epsilon": 1e-5, "max_position_embeddings": 512, "time_step_min": 0.001,
        "tie_word_embeddings": False, "torch_dtype": "float32", "expand": 2}
FRONTIER = Path(__file__).resolve().parents[2] / "shared" / "frontier"
XBC = MH * MP + 2 * G * N


def spec():
    return translate(DATA, "config.json", "nemotron-h-tiny").config


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("mamba", "global", "mlp", "mamba") and c.block == "single"
    assert c.positions == "none" and c.mlp == "relu2" and c.mamba_chunk == C


def hand_params() -> int:
    mamba = XBC * K + XBC + D * (2 * MH * MP + 2 * G * N + MH) + 3 * MH + MH * MP + MH * MP * D
    attn = 2 * D * H * HD + 2 * D * KV * HD
    mlp = 2 * D * F
    return 2 * V * D + D + 4 * D + 2 * mamba + attn + mlp


def hand_forward_flops(T: int) -> int:
    n = math.ceil(T / C)
    mamba = (2 * T * D * (2 * MH * MP + 2 * G * N + MH) + 2 * T * XBC * K
             + 2 * MH * n * C * C * N + 2 * MH * n * C * C * MP + 2 * MH * n * C * MP * N
             + 2 * MH * (n + 1) * (n + 1) * MP * N + 2 * MH * n * C * N * MP
             + 2 * T * MH * MP * D)
    attn = 2 * T * D * H * HD * 2 + 2 * 2 * T * D * KV * HD + 2 * 2 * H * T * T * HD
    mlp = 2 * 2 * T * D * F
    return 2 * mamba + attn + mlp + 2 * T * D * V


def test_parameters_equal_hand_algebra_and_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.NemotronHConfig(**{k: v for k, v in DATA.items()
                                           if k not in ("architectures", "model_type", "torch_dtype")})
    with torch.device("meta"):
        model = transformers.NemotronHForCausalLM(cfg)
    assert analyze(spec(), 8, 1).param_count == hand_params() == \
        sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("T", [40, 100])  # 3 and 7 chunks of 16, padded
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


@pytest.mark.parametrize("T,B", [(20, 2), (3, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """plan's .inference.kv_cache_bytes against the tensors of transformers' cache after a
    CPU forward (fp32 model): K and V of the attention block; per Mamba-2 block a d_xbc × K
    conv window and an h × p × n SSM state."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.NemotronHConfig(**{k: v for k, v in DATA.items()
                                           if k not in ("architectures", "model_type", "torch_dtype")})
    model = transformers.NemotronHForCausalLM(cfg).eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    assert held == B * (2 * KV * HD * T + 2 * (XBC * K + MH * MP * N)) * 4
    path = write_config(tmp_path, DATA)
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", str(T), "--batch",
                         str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


def test_verify_agrees_with_transformers(tmp_path, capsys):
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "40")
    assert x["transformers"]["agrees"] and x["transformers"]["model_type"] == "nemotron_h"


FULL = FRONTIER / "Nemotron-H-56B-Base-8K.json"


@pytest.mark.skipif(not FULL.exists(), reason="the published config.json is not here")
def test_published_config_counts(capsys):
    """Nemotron-H-56B-Base-8K as published: transformers 5.23's count on the meta device,
    56,324,350,464 (../shared/frontier/README.md; NVIDIA's name: 56B)."""
    code, out, err = run(capsys, "--config", str(FULL), "--no-verify", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["parameters"]["total"] == 56_324_350_464
