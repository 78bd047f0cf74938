"""Hugging Face config.json in, for Arcee (AFM-4.5B; model_type arcee): a small config
written as AFM-4.5B's config.json is, read into the spec and counted against hand algebra
written here from transformers 5.23.0's modeling_arcee.py, transformers' own ArceeForCausalLM
(meta device for parameters, the CPU for the cache) and the full cross-check.

What modeling_arcee.py builds (read there): the llama layout (ArceeDecoderLayer: RMSNorm
before attention and before the MLP, q/k/v/o_proj with bias=attention_bias, RoPE) with
ArceeMLP = down_proj(act_fn(up_proj(x))): two matrices, no gate, hidden_act "relu2"
(ReLUSquaredActivation, relu(x)²) by default; an untied lm_head by default.
"""
import json

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, F, L, H, KV, DK = 256, 64, 160, 2, 4, 2, 16
CONFIGS = {
    # AFM-4.5B-like (arcee-ai/AFM-4.5B-Base's keys, small sizes)
    "afm": {
        "architectures": ["ArceeForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1, "head_dim": DK,
        "hidden_act": "relu2", "hidden_size": D, "initializer_range": 0.02,
        "intermediate_size": F, "max_position_embeddings": 128, "mlp_bias": False,
        "model_type": "arcee", "num_attention_heads": H, "num_hidden_layers": L,
        "num_key_value_heads": KV, "pad_token_id": None, "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 2.0,
                         "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 64, "rope_type": "yarn"},
        "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "use_cache": True, "vocab_size": V},
}
DATA = CONFIGS["afm"]


def params_by_hand(bias: bool = False) -> int:
    """nn.Linear(in, out) = in·out (+ out with a bias): q (D → h·d_k), k and v (D → h_kv·d_k),
    o (h·d_k → D); up_proj D·F and down_proj F·D (+ F + D with mlp_bias); two RMSNorms of D
    per block, the final one; the embedding and an untied head, V·D each."""
    block = D * (H + 2 * KV) * DK + H * DK * D + 2 * D * F + 2 * D
    return 2 * V * D + L * (block + (F + D if bias else 0)) + D


def forward_matmul_flops_by_hand(T: int, B: int = 1) -> int:
    """2·m·n·p per matmul: Q, K, V, QKᵀ and scores·V over T×T (the eager core), o_proj, the
    MLP's two matrices, the head."""
    layer = (2 * B * T * D * (H + 2 * KV) * DK + 2 * 2 * B * H * T * T * DK
             + 2 * B * T * H * DK * D + 2 * 2 * B * T * D * F)
    return L * layer + 2 * B * T * D * V


def _meta_model(data):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(
            **{k: v for k, v in data.items() if k != "architectures"}))


def test_the_config_means_what_transformers_builds():
    c = translate(DATA, "t", "afm").config
    assert (c.num_layers, c.num_heads, c.kv_heads, c.d_k, c.d_ff, c.mlp) == \
        (L, H, KV, DK, F, "relu2")
    m = _meta_model(DATA)
    assert type(m).__name__ == "ArceeForCausalLM"
    mlp = m.model.layers[0].mlp
    assert not hasattr(mlp, "gate_proj") and type(mlp.act_fn).__name__ == "ReLUSquaredActivation"


@pytest.mark.parametrize("bias", [False, True])
def test_parameters_equal_transformers(bias):
    data = {**DATA, "mlp_bias": bias}
    c = translate(data, "t", "afm").config
    assert analyze(c).param_count == params_by_hand(bias)
    assert sum(p.numel() for p in _meta_model(data).parameters()) == params_by_hand(bias)


@pytest.mark.parametrize("T,B", [(8, 1), (24, 2)])
def test_forward_matmul_flops_by_hand(T, B):
    c = translate(DATA, "t", "afm").config
    assert analyze(c, seq=T, batch=B).matmul_flops("executed") == \
        forward_matmul_flops_by_hand(T, B)


def test_cache_bytes_equal_transformers_cache(tmp_path, capsys):
    """transformers' cache after a CPU forward of T tokens (fp32): K and V of h_kv·d_k per
    layer and token."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    T, B = 6, 2
    cfg = transformers.ArceeConfig(**{k: v for k, v in DATA.items()
                                      if k not in ("architectures", "model_type", "torch_dtype")})
    model = transformers.ArceeForCausalLM(cfg).eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values))
    assert held == B * 2 * KV * DK * L * T * 4
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         str(T), "--batch", str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


def test_verify_agrees_with_transformers(capsys, tmp_path):
    T = 8
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", str(T),
                       "--pass", "train")
    tf = x["transformers"]
    assert tf["agrees"] and tf["model_type"] == "arcee"
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand()
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(T)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward


@pytest.mark.parametrize("changes, expected", [
    ({"hidden_act": "silu"}, "hidden_act"),  # ArceeMLP has no gate: not SwiGLU
    ({"rope_scaling": {"rope_type": "su", "factor": 2.0}}, "rope_scaling"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
])
def test_what_the_spec_cannot_mean_is_refused_in_one_line(capsys, tmp_path, changes, expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, DATA, changes)),
                        "--no-verify", expected=expected)
