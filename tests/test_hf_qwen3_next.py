"""Hugging Face config.json in, for Qwen3-Next (model_type qwen3_next; issue 31): gated
DeltaNet layers 3:1 with gated full attention, experts with a gated shared expert. Counted
against hand algebra written here from transformers 5.23.0's modeling_qwen3_next.py,
transformers' own Qwen3NextForCausalLM (meta device: parameters; CPU: the cache it builds)
and its published config.json (../shared/frontier/, when present).

What modeling_qwen3_next.py builds (read there): Qwen3NextGatedDeltaNet: conv1d (2·h_k·d_k +
h_v·d_v channels, width K, no bias), in_proj_qkvz (d → 2·h_k·d_k + 2·h_v·d_v), in_proj_ba
(d → 2·h_v), dt_bias and A_log (h_v), norm (d_v, gated RMSNorm), out_proj (h_v·d_v → d);
torch_chunk_gated_delta_rule with chunk 64: per chunk K_β·Kᵀ and Q·Kᵀ (C×d_k×C), two unit
lower-triangular solves, and a scan of W·S, Q·S (C×d_k×d_v), A·V_new (C×C×d_v) and the
state update Kᵀ·V_new (d_k×C×d_v). Qwen3NextAttention: q_proj d → 2·h·d_h (query and gate),
k/v_proj d → h_kv·d_h, o_proj, q_norm/k_norm (d_h). Qwen3NextSparseMoeBlock: gate (E×d),
experts (3·E·d_e·d), shared_expert (3·d·d_s), shared_expert_gate (d → 1). Qwen3NextRMSNorm
(1 + w) before each sublayer and at the end; untied lm_head.
"""
import json
import math
from pathlib import Path

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, run
from hf_examples import write_config

V, D, L, H, KV, HD = 96, 32, 4, 4, 2, 8
HK, HV, DK, DV, K, C = 2, 4, 4, 4, 4, 64
E, TOPK, DE, DS = 4, 2, 8, 8
DATA = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "vocab_size": V,
        "hidden_size": D, "intermediate_size": 48, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
        "partial_rotary_factor": 0.25, "full_attention_interval": 4,
        "linear_num_key_heads": HK, "linear_num_value_heads": HV, "linear_key_head_dim": DK,
        "linear_value_head_dim": DV, "linear_conv_kernel_dim": K, "num_experts": E,
        "num_experts_per_tok": TOPK, "moe_intermediate_size": DE,
        "shared_expert_intermediate_size": DS, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 10000000, "tie_word_embeddings": False,
        "use_sliding_window": False, "torch_dtype": "float32"}
FRONTIER = Path(__file__).resolve().parents[2] / "shared" / "frontier"
D_CONV, D_QKVZ = 2 * HK * DK + HV * DV, 2 * HK * DK + 2 * HV * DV


def spec():
    return translate(DATA, "config.json", "qwen3-next-tiny").config


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("linear_attention",) * 3 + ("global",)
    assert c.rotary_dim == 2 and c.norm_offset and c.attn_output_gate
    assert c.num_shared_experts == 1 and c.shared_expert_gate and c.linear_chunk == 64


def hand_params(active: bool = False) -> int:
    linear = D_CONV * K + D * D_QKVZ + D * 2 * HV + 2 * HV + DV + HV * DV * D
    attn = D * 2 * H * HD + 2 * D * KV * HD + H * HD * D + 2 * HD
    moe = E * D + 3 * (TOPK if active else E) * DE * D + 3 * D * DS + D
    return 2 * V * D + D + 3 * linear + attn + L * (2 * D + moe)


def hand_forward_flops(T: int) -> int:
    n = math.ceil(T / C)
    linear = (2 * T * D * D_QKVZ + 2 * T * D * 2 * HV + 2 * T * D_CONV * K
              + 2 * 2 * HV * n * C * C * DK + 2 * HV * n * (C * (C - 1) // 2) * (DV + DK)
              + 2 * 2 * HV * n * C * DK * DV + 2 * HV * n * C * C * DV
              + 2 * HV * (n - 1) * C * DK * DV + 2 * T * HV * DV * D)
    attn = 2 * T * D * 2 * H * HD + 2 * 2 * T * D * KV * HD + 2 * 2 * H * T * T * HD \
        + 2 * T * H * HD * D
    moe = 2 * T * D * E + 3 * 2 * T * TOPK * D * DE + 3 * 2 * T * D * DS + 2 * T * D
    return 3 * linear + attn + L * moe + 2 * T * D * V


def test_parameters_equal_hand_algebra_and_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3NextConfig(**{k: v for k, v in DATA.items()
                                           if k not in ("architectures", "model_type", "torch_dtype")})
    with torch.device("meta"):
        model = transformers.Qwen3NextForCausalLM(cfg)
    a = analyze(spec(), 8, 1)
    assert a.param_count == hand_params() == sum(p.numel() for p in model.parameters())
    assert a.active_param_count == hand_params(active=True)


@pytest.mark.parametrize("T", [100, 300])  # 2 and 5 chunks of 64, padded
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


@pytest.mark.parametrize("T,B", [(70, 2), (5, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """plan's .inference.kv_cache_bytes against the bytes of the tensors in transformers'
    cache after a CPU forward of T tokens (fp32 model): K and V of the attention layer, the
    conv window and the (float32) recurrent state of each gated DeltaNet layer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3NextConfig(**{k: v for k, v in DATA.items()
                                           if k not in ("architectures", "model_type", "torch_dtype")})
    model = transformers.Qwen3NextForCausalLM(cfg).eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    # by hand: K and V (T tokens, h_kv·d_h each) of one layer; per DeltaNet layer a
    # d_conv × K window and an h_v × d_k × d_v state, 4 bytes each
    assert held == B * (2 * KV * HD * T + 3 * (D_CONV * K + HV * DK * DV)) * 4
    path = write_config(tmp_path, DATA)
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", str(T), "--batch",
                         str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


@pytest.mark.parametrize("T", [70, 5])  # two chunks, the last partial; one chunk, T < C
def test_verify_agrees_with_transformers(tmp_path, capsys, T):
    """--verify at T = 70 (two chunks) and 5 (one): every counter and transformers' own
    model (its conv less the K − 1 dropped outputs, its final state update subtracted, each
    a stated row)."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", str(T))
    hf = x["transformers"]
    assert hf["agrees"] and hf["model_type"] == "qwen3_next"
    claims = " ".join(c["claim"] for c in hf["checks"])
    assert "final state" in claims or "after the last chunk" in claims
    assert "depthwise conv1d" in claims


FULL = FRONTIER / "Qwen3-Next-80B-A3B-Thinking.json"


@pytest.mark.skipif(not FULL.exists(), reason="the published config.json is not here")
def test_published_config_counts(capsys):
    """Qwen3-Next-80B-A3B-Thinking's config.json as published: transformers 5.23's count on
    the meta device, 79,674,391,296 (../shared/frontier/README.md); active per token by hand:
    the total less the E − k = 502 unchosen experts' 3·512·2048 weights in each of 48 layers."""
    code, out, err = run(capsys, "--config", str(FULL), "--no-verify", "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    assert p["total"] == 79_674_391_296
    assert p["active_per_token"] == 79_674_391_296 - 502 * 3 * 512 * 2048 * 48


@pytest.mark.parametrize("T,B", [(5, 2), (70, 1), (128, 3)])  # T < C, a partial chunk, 2 whole
def test_prefill_runs_the_final_state_update(tmp_path, capsys, T, B):
    """plan's prefill FLOPs: the forward's (hand algebra above, N_c − 1 state updates) and
    the last state update a prefill computes for its cache (transformers'
    torch_chunk_gated_delta_rule returns it: one more Kᵀ·V_new, d_k × C × d_v per value
    head, in each of the three gated DeltaNet layers), by hand."""
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         str(T), "--batch", str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    final = 3 * 2 * B * HV * DK * C * DV
    assert json.loads(out)["inference"]["prefill_flops"] == B * hand_forward_flops(T) + final


def test_shared_expert_of_any_width():
    """shared_expert_intermediate_size 12, no multiple of moe_intermediate_size 8: one shared
    MLP 12 wide (shared_d_ff), as Qwen3NextSparseMoeBlock builds it. Parameters against
    transformers' model on the meta device and by hand (3·d·12 per layer in place of 3·d·8);
    forward FLOPs by hand (3·2·T·d·12 per layer)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = {**DATA, "shared_expert_intermediate_size": 12}
    c = translate(data, "config.json", "qwen3-next-odd").config
    assert (c.num_shared_experts, c.shared_d_ff, c.shared_expert_d_ff) == (1, 12, 12)
    cfg = transformers.Qwen3NextConfig(**{k: v for k, v in data.items()
                                           if k not in ("architectures", "model_type", "torch_dtype")})
    with torch.device("meta"):
        model = transformers.Qwen3NextForCausalLM(cfg)
    width = 3 * D * (12 - DS) * L
    assert analyze(c, 8, 1).param_count == hand_params() + width == \
        sum(p.numel() for p in model.parameters())
    T = 100
    assert analyze(c, T, 1, "forward").matmul_flops() == hand_forward_flops(T) + 2 * T * width
