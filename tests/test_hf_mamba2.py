"""Hugging Face config.json in, for Mamba-2 (model_type mamba2; issue 41): Mamba-2 blocks
only, read into the spec and counted against hand algebra written here from transformers
5.23.0's modeling_mamba2.py, transformers' own Mamba2ForCausalLM (meta device: parameters;
CPU: the cache it builds) and the full cross-check.

What modeling_mamba2.py builds (read there): backbone.embeddings (V·d); per layer
Mamba2Block = norm (Mamba2RMSNorm, d) and mixer (Mamba2Mixer): intermediate_size = expand·d
= h·p (validate_architecture), conv1d (d_xbc = h·p + 2·G·n channels, depthwise, width K,
use_conv_bias), in_proj (d → 2·h·p + 2·G·n + h, use_bias), dt_bias, A_log, D (h each), norm
(MambaRMSNormGated, h·p), out_proj (h·p → d, use_bias); mamba2_chunk_scan with chunk_size C
(the same algebra as Nemotron-H's mixer: per chunk C·Bᵀ and M·x per head, the chunk states,
their exchange across the N + 1 states, the output C·state); backbone.norm_f; lm_head, untied
by default.
"""
import json
import math

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, L = 96, 32, 2
MH, MP, N, G, K, C = 8, 8, 4, 2, 4, 16  # heads, head dim (h·p = 2·D), state, groups, conv, chunk
CONFIGS = {
    # mistralai/Mamba-Codestral-7B-v0.1's keys, small sizes
    "codestral": {
        "architectures": ["Mamba2ForCausalLM"], "bos_token_id": 0, "chunk_size": C,
        "conv_kernel": K, "eos_token_id": 0, "expand": 2, "head_dim": MP, "hidden_act": "silu",
        "hidden_size": D, "initializer_range": 0.1, "layer_norm_epsilon": 1e-05,
        "model_type": "mamba2", "n_groups": G, "num_heads": MH, "num_hidden_layers": L,
        "pad_token_id": 0, "rescale_prenorm_residual": False, "residual_in_fp32": True,
        "rms_norm": True, "state_size": N, "tie_word_embeddings": False,
        "time_step_floor": 0.0001, "time_step_limit": [0.0, float("inf")],
        "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": 256,
        "torch_dtype": "float32", "use_bias": False, "use_cache": True,
        "use_conv_bias": True, "vocab_size": V},
}
DATA = CONFIGS["codestral"]
XBC = MH * MP + 2 * G * N


def _kw(data):
    return {k: v for k, v in data.items() if k not in ("architectures", "model_type", "torch_dtype")}


def hand_params() -> int:
    """conv1d XBC·K + XBC (bias); in_proj D·(2·h·p + 2·G·n + h); dt_bias, A_log, D: 3·h; the
    gated norm h·p; out_proj h·p·D; the block's norm D. Embeddings and an untied head V·D
    each, norm_f D."""
    mamba = XBC * K + XBC + D * (2 * MH * MP + 2 * G * N + MH) + 3 * MH + MH * MP + MH * MP * D
    return 2 * V * D + D + L * (mamba + D)


def hand_forward_flops(T: int) -> int:
    """2·m·n·p per matmul; the chunked scan over n = ⌈T/C⌉ chunks of C (padded) as
    test_hf_nemotron_h writes it; the head."""
    n = math.ceil(T / C)
    mamba = (2 * T * D * (2 * MH * MP + 2 * G * N + MH) + 2 * T * XBC * K
             + 2 * MH * n * C * C * N + 2 * MH * n * C * C * MP + 2 * MH * n * C * MP * N
             + 2 * MH * (n + 1) * (n + 1) * MP * N + 2 * MH * n * C * N * MP
             + 2 * T * MH * MP * D)
    return L * mamba + 2 * T * D * V


def test_read_as_written():
    c = translate(DATA, "config.json", "m2").config
    assert c.layer_types == ("mamba",) * L and c.block == "single" and c.positions == "none"
    assert (c.mamba_heads, c.mamba_head_dim, c.ssm_state, c.mamba_groups, c.mamba_chunk) == \
        (MH, MP, N, G, C)


def test_parameters_equal_hand_algebra_and_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**_kw(DATA)))
    assert analyze(translate(DATA, "c", "m2").config, 8, 1).param_count == hand_params() == \
        sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("T", [40, 100])  # 3 and 7 chunks of 16, padded
def test_forward_flops_equal_hand_algebra(T):
    c = translate(DATA, "c", "m2").config
    assert analyze(c, T, 1, "forward").matmul_flops() == hand_forward_flops(T)


@pytest.mark.parametrize("T,B", [(20, 2), (3, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """plan's .inference.kv_cache_bytes against transformers' cache after a CPU forward (fp32
    model): per block a d_xbc × K conv window and an h × p × n SSM state, whatever T."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**_kw(DATA))).eval()
    with torch.no_grad():
        # Mamba2CausalLMOutput names its cache cache_params (not past_key_values)
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).cache_params
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    assert held == B * L * (XBC * K + MH * MP * N) * 4
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         str(T), "--batch", str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


def test_verify_agrees_with_transformers(tmp_path, capsys):
    """transformers' Mamba2ForCausalLM runs (its forward asks the cache for no length, unlike
    a DynamicCache model without attention) and returns its cache as cache_params."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "40",
                       "--pass", "train")
    tf = x["transformers"]
    assert tf["agrees"] and tf["model_type"] == "mamba2"
    assert {r["component"]: r["transformers"] for r in tf["parameters"]}["total"] == hand_params()
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    assert flops[("forward", "total")] == hand_forward_flops(40)


@pytest.mark.parametrize("changes, expected", [
    ({"expand": 3}, "expand"),  # 3·32 ≠ 8·8: Mamba2Config.validate_architecture refuses it
    ({"time_step_limit": [0.0, 1.0]}, "time_step_limit"),  # an upper clamp the spec lacks
    ({"hidden_act": "gelu"}, "hidden_act"),
])
def test_what_the_spec_cannot_mean_is_refused_in_one_line(capsys, tmp_path, changes, expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, DATA, changes)),
                        "--no-verify", expected=expected)
