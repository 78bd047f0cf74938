"""Kimi Linear (model_type kimi_linear, issue 31): Kimi Delta Attention (KDA) layers 3:1 with
latent attention without RoPE, DeepSeek-V3's experts. Counted against hand algebra written
here from transformers 5.23.0's modeling_kimi_linear.py, transformers' own
KimiLinearForCausalLM (meta device: parameters; CPU: the cache it builds, its torch
chunk_kimi_delta_attention against model/kda.py's rule), and the tool's model/.

What modeling_kimi_linear.py builds (read there): KimiLinearDeltaAttention: q_proj, k_proj,
v_proj (d → h·d_h each), conv1d (3·h·d_h channels, width K, no bias, SiLU), forget_gate
(f_a_proj d → d_h, f_b_proj d_h → h·d_h, dt_bias h·d_h, A_log h), b_proj (d → h), g_a_proj
(d → d_h), g_b_proj (d_h → h·d_h), o_norm (d_h, sigmoid-gated RMSNorm), o_proj (h·d_h → d);
the chunked rule, chunk 64. KimiLinearAttention: q_proj (q_lora_rank null) d → H·(nope +
rope), kv_a_proj_with_mqa d → r_kv + rope, kv_a_layernorm r_kv, kv_b_proj r_kv → H·(nope +
v), o_proj H·v → d; no rotary embedding. KimiLinearMoE (DeepSeek-V3's): gate E×d,
experts 3·E·d_e·d, shared_experts 3·d·d_e; layer 0 a dense MLP (first_k_dense_replace 1).
"""
import json
import math
from pathlib import Path

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, F, L = 96, 32, 48, 5
H, R_KV, NOPE, ROPE, DV = 4, 16, 8, 4, 8  # latent attention (layer 4)
HK, DH, K, C = 2, 8, 4, 64  # KDA (layers 0-3): heads, head width, conv width, chunk
E, TOPK, DE = 4, 2, 8  # experts (layers 1-4), one shared expert of DE
# layer 4 full attention: what KimiLinearConfig's default layout (i > 0, i % 4 == 0) makes
# of 5 layers too, so the default sweep may drop either layer list
DATA = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
        "vocab_size": V, "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": H, "model_max_length": 4096,
        "q_lora_rank": None, "kv_lora_rank": R_KV, "qk_nope_head_dim": NOPE,
        "qk_rope_head_dim": ROPE, "v_head_dim": DV, "mla_use_nope": True,
        "linear_attn_config": {"head_dim": DH, "num_heads": HK, "short_conv_kernel_size": K,
                               "kda_layers": [1, 2, 3, 4], "full_attn_layers": [5]},
        "moe_intermediate_size": DE, "num_experts": E, "num_experts_per_token": TOPK,
        "num_shared_experts": 1, "moe_renormalize": True, "num_expert_group": 1,
        "topk_group": 1, "routed_scaling_factor": 2.446, "first_k_dense_replace": 1,
        "moe_router_activation_func": "sigmoid", "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "torch_dtype": "float32", "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2}
D_CONV = 3 * HK * DH


def spec():
    return translate(DATA, "config.json", "kimi-linear-tiny").config


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("kda",) * 4 + ("global",) and c.positions == "none"
    assert (c.linear_key_heads, c.linear_value_heads, c.linear_key_head_dim, c.conv_kernel,
            c.linear_chunk) == (HK, HK, DH, K, 64)
    assert c.dense_layers == (0,) and c.q_lora_rank is None and c.router == "sigmoid"


def kda_params() -> int:
    return (3 * D * HK * DH + D_CONV * K + D * DH + DH * HK * DH + HK * DH + HK + D * HK
            + D * DH + DH * HK * DH + DH + HK * DH * D)


def hand_params(active: bool = False) -> int:
    mla = D * H * (NOPE + ROPE) + D * (R_KV + ROPE) + R_KV + R_KV * H * (NOPE + DV) + H * DV * D
    moe = E * D + 3 * (TOPK if active else E) * D * DE + 3 * D * DE
    return 2 * V * D + D + 4 * kda_params() + mla + L * 2 * D + 3 * D * F + 4 * moe


def hand_forward_flops(T: int) -> int:
    """2mnp per matmul. KDA (fla's chunk_kda, chunk C, n = ⌈T/C⌉ chunks, P = C(C−1)/2): the
    nine projections, the conv, (K_β⊙e^G)(K⊙e^−G)ᵀ and (Q⊙e^G)(K⊙e^−G)ᵀ (C×d×C per chunk
    and head), two unit triangular solves (P·d each), W·S and Q·S (C×d×d), A·V_new (C×C×d),
    n − 1 state updates (d×C×d). Latent attention over all T² pairs (executed)."""
    n, pairs = math.ceil(T / C), C * (C - 1) // 2
    proj = 2 * T * (3 * D * HK * DH + D * DH + DH * HK * DH + D * HK + D * DH + DH * HK * DH
                    + HK * DH * D)
    rule = (2 * 2 * HK * n * C * C * DH + 2 * HK * n * pairs * 2 * DH
            + 2 * 2 * HK * n * C * DH * DH + 2 * HK * n * C * C * DH
            + 2 * HK * (n - 1) * C * DH * DH)
    kda = proj + 2 * T * D_CONV * K + rule
    mla = (2 * T * D * H * (NOPE + ROPE) + 2 * T * D * (R_KV + ROPE) + 2 * T * R_KV * H * (NOPE + DV)
           + 2 * H * T * T * (NOPE + ROPE) + 2 * H * T * T * DV + 2 * T * H * DV * D)
    moe = 2 * T * D * E + 2 * T * TOPK * 3 * D * DE + 2 * T * 3 * D * DE
    return 4 * kda + mla + 2 * T * 3 * D * F + 4 * moe + 2 * T * D * V


def test_parameters_equal_hand_algebra_transformers_and_the_model():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    a = analyze(spec(), 8, 1)
    assert a.param_count == hand_params() == 43_608 and a.active_param_count == hand_params(True)
    data = {k: v for k, v in DATA.items() if k not in ("architectures", "torch_dtype")}
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert type(m).__name__ == "KimiLinearForCausalLM"
    assert sum(p.numel() for p in m.parameters()) == hand_params()
    assert sum(p.numel() for p in m.model.layers[0].self_attn.parameters()) == kda_params()
    from model import TransformerLM
    assert sum(p.numel() for p in TransformerLM.from_config(spec(), device="meta").parameters()) \
        == hand_params()


@pytest.mark.parametrize("T", [100, 300])  # 2 and 5 chunks of 64, padded
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


def test_the_rule_computes_transformers_kda():
    """model/kda.py's chunk_kda (fla's factored form, unit triangular solves) against
    transformers' chunk_kimi_delta_attention and its token-by-token
    recurrent_kimi_delta_attention, on the same float64 inputs (Q, K L2-normalised inside)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.kimi_linear import modeling_kimi_linear as M
    from model.kda import chunk_kda
    torch.manual_seed(0)
    B, T, h, d = 2, 37, 3, 8
    q, k, v = (torch.randn(B, T, h, d, dtype=torch.float64) for _ in range(3))
    g = -0.1 * torch.rand(B, T, h, d, dtype=torch.float64)  # log-decays per key channel
    beta = torch.rand(B, T, h, dtype=torch.float64)
    ours = chunk_kda(q, k, v, g, beta, 16).double()
    chunked, _ = M.chunk_kimi_delta_attention(q, k, v, g, beta, chunk_size=16,
                                              use_qk_l2norm_in_kernel=True)
    step, _ = M.recurrent_kimi_delta_attention(q, k, v, g, beta, None, False,
                                               use_qk_l2norm_in_kernel=True)
    assert torch.allclose(ours, chunked.double(), atol=1e-5)
    assert torch.allclose(ours, step.double(), atol=1e-5)


@pytest.mark.parametrize("T,B", [(70, 2), (5, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """plan's .inference.kv_cache_bytes against the tensors in transformers' cache after a
    CPU forward of T tokens (fp32 model): the latent and RoPE key of the MLA layer per token,
    and per KDA layer the conv window (3·h·d_h × K) and the float32 h × d_h × d_h state."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = {k: v for k, v in DATA.items() if k not in ("architectures", "torch_dtype")}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**data)).eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    assert held == B * ((R_KV + ROPE) * T + 4 * (D_CONV * K + HK * DH * DH)) * 4
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         str(T), "--batch", str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


def test_verify_agrees_with_transformers(tmp_path, capsys):
    """--verify at T = 70 (two chunks): fvcore and FlopCounterMode on model/, the op counter's
    non-matmul FLOPs, and transformers' own model, its torch path's other form of the rule
    (elementwise scores, dense C × C products) a stated row."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "70")
    hf = x["transformers"]
    assert hf["agrees"] and hf["model_type"] == "kimi_linear"
    claims = " ".join(c["claim"] for c in hf["checks"])
    assert "chunk_kimi_delta_attention" in claims and "depthwise conv1d" in claims


def hf_rule_backward_flops(B: int, T: int, h: int, dk: int, dv: int, chunk: int) -> int:
    """Backward matmul FLOPs of transformers' chunk_kimi_delta_attention (hand algebra from
    its code, every input requiring grad; 2mnp per dA and per dB): attn @ v_beta and
    attn @ (k_beta·e^g) over n chunks, both operands with a gradient; per chunk
    (q·e^g) @ S and k_cumdecay @ S (S_0 zeros without a gradient: the first chunk's dA only),
    attn_intra @ v_new (both), the state update kᵀ @ v_new (both; the last one is off the
    loss's path: n − 1 of them)."""
    n = -(-T // chunk)
    ut = 2 * 2 * n * chunk * chunk * (dv + dk)
    scan = (2 * (2 * chunk * dk * dv + (n - 1) * 2 * 2 * chunk * dk * dv)
            + 2 * 2 * n * chunk * chunk * dv + (n - 1) * 2 * 2 * dk * chunk * dv)
    return B * h * (ut + scan)


def ledger_rule_backward_flops(B: int, T: int, h: int, dk: int, dv: int, chunk: int) -> int:
    """The same for the ledger's fla form (model/kda.py, hand algebra): the two
    C × d_k × C products a dA and a dB each; each unit triangular solve of d columns another
    solve (C(C−1)/2·2·d) and dA = −dB·Xᵀ (2·C²·d); the scan's products as transformers'."""
    n, pairs = -(-T // chunk), chunk * (chunk - 1) // 2
    products = 2 * 2 * 2 * n * chunk * chunk * dk
    solves = n * sum(2 * pairs * d + 2 * chunk * chunk * d for d in (dv, dk))
    scan = hf_rule_backward_flops(1, T, 1, dk, dv, chunk) - 2 * 2 * n * chunk * chunk * (dv + dk)
    return B * h * (products + solves + scan)


@pytest.mark.parametrize("B,T", [(1, 70), (2, 200), (1, 30)])  # 2, 4 and 1 chunks of 64
def test_transformers_kda_backward_equals_hand_algebra(B, T):
    """FlopCounterMode over the backward of transformers' chunk_kimi_delta_attention (CPU,
    inputs requiring grad) against the hand algebra above; hf_recurrent's backward row is
    the difference from the ledger's fla form, hand algebra too."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.kimi_linear import modeling_kimi_linear as M
    from accounting.crosscheck.hf_recurrent import kda_backward_surplus
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, T, HK, DH, requires_grad=True) for _ in range(3))
    g = (-0.1 * torch.rand(B, T, HK, DH)).requires_grad_()
    beta = torch.rand(B, T, HK, requires_grad=True)
    out, _ = M.chunk_kimi_delta_attention(q, k, v, g, beta, chunk_size=C,
                                          use_qk_l2norm_in_kernel=True)
    with FlopCounterMode(display=False) as fc:
        out.sum().backward()
    assert fc.get_total_flops() == hf_rule_backward_flops(B, T, HK, DH, DH, C)
    surplus = kda_backward_surplus(analyze(spec(), T, B, "train"))
    assert sorted(surplus) == [0, 1, 2, 3]
    assert set(surplus.values()) == {hf_rule_backward_flops(B, T, HK, DH, DH, C)
                                     - ledger_rule_backward_flops(B, T, HK, DH, DH, C)}


@pytest.mark.parametrize("T,B", [(70, 1), (200, 2)])
def test_train_verify_agrees_with_transformers(tmp_path, capsys, T, B):
    """--pass train --verify (issue 31): transformers' backward of its torch form of KDA, its
    difference from the ledger's a stated row, agrees at two and four chunks."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", str(T),
                       "--batch", str(B), "--pass", "train")
    claims = " ".join(c["claim"] for c in x["transformers"]["checks"])
    assert "Kimi Delta Attention backward" in claims


def test_refuses_what_it_cannot_express(tmp_path, capsys):
    extra = {**DATA, "linear_attn_config": {**DATA["linear_attn_config"],
                                            "gate_lower_bound": -5.0}}
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, extra)), "--no-verify",
                        expected="linear_attn_config")
    rope = {**DATA, "mla_use_nope": False}
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, rope)), "--no-verify",
                        expected="mla_use_nope")


# moonshotai/Kimi-Linear-48B-A3B-Instruct's config.json, its count-relevant keys as published
# (https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct/blob/main/config.json),
# written here: MLA at the 1-indexed layers 4, 8, …, 24 and 27, KDA at the other 20
PUBLISHED = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
    "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839, "dtype": "bfloat16",
    "first_k_dense_replace": 1, "head_dim": 72, "hidden_act": "silu", "hidden_size": 2304,
    "initializer_range": 0.02, "intermediate_size": 9216, "kv_lora_rank": 512,
    "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128,
                           "kda_layers": [i for i in range(1, 28)
                                          if i not in (4, 8, 12, 16, 20, 24, 27)],
                           "num_heads": 32, "short_conv_kernel_size": 4},
    "mla_use_nope": True, "model_max_length": 1048576, "moe_intermediate_size": 1024,
    "moe_layer_freq": 1, "moe_renormalize": True, "moe_router_activation_func": "sigmoid",
    "num_attention_heads": 32, "num_expert_group": 1, "num_experts": 256,
    "num_experts_per_token": 8, "num_hidden_layers": 27, "num_key_value_heads": 32,
    "num_nextn_predict_layers": 0, "num_shared_experts": 1, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "rope_theta": 10000.0, "routed_scaling_factor": 2.446,
    "tie_word_embeddings": False, "topk_group": 1, "use_cache": True, "use_grouped_topk": True,
    "v_head_dim": 128, "vocab_size": 163840}


def test_published_config_counts(capsys, tmp_path):
    """The published file, read as written (--strict: no key judged), against transformers'
    model of the same file on the meta device; the model card's "48B total, 3B activated"
    is the count without the embedding table and the untied LM head (2·163,840·2,304)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, PUBLISHED)),
                         "--no-verify", "--strict", "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    data = {k: v for k, v in PUBLISHED.items() if k != "architectures"}
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert p["total"] == sum(x.numel() for x in m.parameters())
    embeddings = 2 * 163_840 * 2_304
    assert (p["total"] - embeddings) // 10**9 == 48
    assert round(p["active_per_token"] / 1e9) == 3 == round((p["active_per_token"] - embeddings) / 1e9)


def test_full_size_from_transformers_defaults():
    """KimiLinearConfig's defaults are Kimi-Linear-48B-A3B's sizes (hidden 2304, 27 layers,
    256 experts top-8, KDA 32 heads of 128; full attention at layers 4, 8, …, 24): the tool's
    count against transformers' model on the meta device, and the published "48B total, 3B
    active" (huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct) to the nearest billion."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.KimiLinearConfig()
    data = {"model_type": "kimi_linear", "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads,
            "model_max_length": cfg.max_position_embeddings, "kv_lora_rank": cfg.kv_lora_rank,
            "qk_nope_head_dim": cfg.qk_nope_head_dim, "qk_rope_head_dim": cfg.qk_rope_head_dim,
            "v_head_dim": cfg.v_head_dim, "moe_intermediate_size": cfg.moe_intermediate_size,
            "num_experts": cfg.num_local_experts, "num_experts_per_token": cfg.num_experts_per_tok,
            "num_shared_experts": cfg.n_shared_experts}
    a = analyze(translate(data, "t", "kimi-linear-48b").config)
    with torch.device("meta"):
        m = transformers.KimiLinearForCausalLM(cfg)
    assert a.param_count == sum(p.numel() for p in m.parameters()) == 49_133_074_464
    # the published "48B" is the count without the embedding table and the untied LM head
    # (2·163,840·2,304 = 754,974,720): 48,378,099,744; "3B active": 3,494,852,640 with them,
    # 2,739,877,920 without (3B to the nearest billion either way)
    assert (a.param_count - 2 * 163_840 * 2_304) // 10**9 == 48
    assert round(a.active_param_count / 1e9) == 3 == round((a.active_param_count - 754_974_720) / 1e9)
