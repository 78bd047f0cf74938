"""Hugging Face config.json in, for LFM2 (model_type lfm2; issue 31): short-convolution
layers beside attention layers, read into the spec and counted against hand algebra written
here from transformers 5.23.0's modeling_lfm2.py, and against transformers' own
Lfm2ForCausalLM: its parameters (meta device) and its cache (DynamicCache's layers after a
CPU forward: K and V of the attention layers, the conv windows of the conv layers).

What modeling_lfm2.py builds (read there): Lfm2ShortConv has conv = nn.Conv1d(d, d, K,
groups=d, padding=K − 1, bias=conv_bias), in_proj = Linear(d, 3d), out_proj = Linear(d, d);
forward: B, C, x = in_proj(h) chunked, C·conv(B·x)[..., :T], out_proj. Lfm2Attention has
q/k/v/out_proj without biases and q_layernorm/k_layernorm (RMSNorm over head_dim). Lfm2MLP
is w1, w3, w2 of width int(2·intermediate_size/3) (rounded up to block_multiple_of with
block_ffn_dim_multiplier). The final norm is embedding_norm; the head is tied by default.
"""
import json

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import run
from hf_examples import write_config

V, D, L, H, KV, K = 96, 64, 4, 4, 2, 3
DATA = {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "vocab_size": V,
        "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H,
        "num_key_value_heads": KV, "intermediate_size": 384, "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 32,
        "max_position_embeddings": 128, "norm_eps": 1e-05, "conv_L_cache": K,
        "conv_bias": False, "layer_types": ["conv", "conv", "full_attention", "conv"],
        "rope_theta": 1000000.0, "tie_embedding": True, "torch_dtype": "bfloat16"}
F = 256  # int(2·384/3) = 256, already a multiple of 32
DK = D // H


def spec():
    return translate(DATA, "config.json", "lfm2-small").config


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("conv", "conv", "global", "conv") and c.conv_kernel == K
    assert c.d_ff == F and c.tie_embeddings and c.qk_norm == "head"
    assert c.num_kv_heads == KV and c.conv_bias is False


def hand_params() -> int:
    # written from modeling_lfm2.py: embedding (tied head), per conv layer conv (d·1·K),
    # in_proj 3d·d, out_proj d·d; per attention layer q, o (d·d), k, v (KV·DK·d) and the two
    # head_dim norms; every layer two d norms and the 3·d·F MLP; the final norm
    conv = D * K + 3 * D * D + D * D
    attn = 2 * D * D + 2 * KV * DK * D + 2 * DK
    return V * D + 3 * conv + attn + L * (2 * D + 3 * D * F) + D


def hand_forward_flops(T: int) -> int:
    # 2mnp per matmul; the depthwise conv: one multiply-add per tap, T outputs per channel
    conv = 2 * T * D * 3 * D + 2 * T * D * K + 2 * T * D * D
    attn = 2 * T * D * D * 2 + 2 * 2 * T * D * KV * DK + 2 * 2 * H * T * T * DK
    return 3 * conv + attn + L * 3 * 2 * T * D * F + 2 * T * D * V


def test_parameters_equal_hand_algebra_and_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Lfm2Config(**{k: v for k, v in DATA.items()
                                      if k not in ("architectures", "model_type", "torch_dtype")})
    with torch.device("meta"):
        model = transformers.Lfm2ForCausalLM(cfg)
    theirs = sum(p.numel() for p in model.parameters())  # a tied weight once
    assert analyze(spec(), 8, 1).param_count == hand_params() == theirs


@pytest.mark.parametrize("T", [16, 256])
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


@pytest.mark.parametrize("T,B", [(7, 2), (1, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """plan's .inference.kv_cache_bytes (every layer's cache and state for one sequence of T
    tokens, × B) against the bytes of the tensors in transformers' DynamicCache after a CPU
    forward of T tokens (a float32 model: 4 bytes per cached element; the plan's elements
    compared at its own element size)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Lfm2Config(**{k: v for k, v in DATA.items()
                                      if k not in ("architectures", "model_type", "torch_dtype")})
    model = transformers.Lfm2ForCausalLM(cfg).eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    # by hand: K and V of the attention layer, T tokens; a d×K conv window per conv layer
    assert held == B * (2 * KV * DK * T + 3 * D * K) * 4
    path = write_config(tmp_path, {**DATA, "torch_dtype": "float32"})
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", str(T), "--batch",
                         str(B), "--format", "json")
    assert code == 0, err
    inference = json.loads(out)["inference"]
    if inference["bytes_per_element"] == 4:
        assert inference["kv_cache_bytes"] == held
    else:  # the plan's inference precision: the same elements at its element size
        assert inference["kv_cache_bytes"] * 4 == held * inference["bytes_per_element"]
    assert inference["recurrent_state_bytes"] == B * 3 * D * K * inference["bytes_per_element"]


def test_verify_agrees_with_transformers(tmp_path, capsys):
    """--verify: the tool's model/ (fvcore, FlopCounterMode, the op counter) and transformers'
    Lfm2ForCausalLM (meta device, FlopCounterMode) agree with the ledger, transformers' conv
    less the K − 1 outputs its torch fallback computes and drops (2·B·d·(K − 1)·K per conv
    layer, its own check row); parameters and the cache (K, V and conv states) equal."""
    from cli_run import agreeing_check
    path = write_config(tmp_path, DATA)
    x = agreeing_check(capsys, "--config", str(path), "--ctx", "32")
    hf = x["transformers"]
    assert hf["agrees"] and hf["model_type"] == "lfm2"
    rows = [c for c in hf["checks"] if "depthwise conv1d" in c["claim"]]
    B = 1
    assert rows and rows[0]["holds"]
    assert f"{2 * B * D * (K - 1) * K * 3:,} for the K − 1 dropped" in rows[0]["evidence"]
