"""Hugging Face config.json in, for Phi-3.5-MoE (model_type phimoe; issue 31): LayerNorm with
bias, biased attention and LM head, 16 experts routed by SparseMixer. Counted against hand
algebra written here from transformers 5.23.0's models/phimoe/modeling_phimoe.py,
transformers' own PhimoeForCausalLM (meta device: parameters; CPU: its cache) and the model
card's published figures.

What modeling_phimoe.py builds (read there): PhimoeAttention: q_proj, k_proj, v_proj,
o_proj (bias=attention_bias), head_dim hidden_size // num_attention_heads;
PhimoeDecoderLayer: input_layernorm and post_attention_layernorm, nn.LayerNorm (weight and
bias); PhimoeSparseMoeBlock: router (an nn.Linear d → E, no bias), PhimoeExperts
(gate_up_proj E×2f×d, down_proj E×d×f); PhimoeModel: embed_tokens, norm (LayerNorm);
PhimoeForCausalLM: lm_head (bias=lm_head_bias). sparsemixer picks two experts (its top_k
argument is unused).
"""
import json

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, F, L, H, KV, E = 96, 32, 24, 2, 4, 2, 4
HD = D // H
DATA = {"architectures": ["PhimoeForCausalLM"], "model_type": "phimoe", "vocab_size": V,
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "num_local_experts": E,
        "num_experts_per_tok": 2, "attention_bias": True, "lm_head_bias": True,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "sliding_window": None, "router_jitter_noise": 0.01, "input_jitter_noise": 0.01,
        "hidden_act": "silu", "tie_word_embeddings": False, "router_aux_loss_coef": 0.0,
        "output_router_logits": False, "original_max_position_embeddings": 4096,
        "hidden_dropout": 0.0, "attention_dropout": 0.0, "torch_dtype": "float32"}


def spec(data=DATA):
    return translate(data, "config.json", "phimoe-tiny").config


def hand_params(v=V, d=D, f=F, layers=L, h=H, kv=KV, e=E, active=False) -> int:
    hd = d // h
    attn = (d * h * hd + h * hd) + 2 * (d * kv * hd + kv * hd) + (h * hd * d + d)
    block = attn + 2 * 2 * d + d * e + (2 if active else e) * 3 * f * d
    return v * d + layers * block + 2 * d + (d * v + v)  # embedding, blocks, norm, biased head


def hand_forward_flops(T: int) -> int:
    attn = 2 * T * D * (H * HD + 2 * KV * HD) + 2 * T * H * HD * D + 2 * 2 * H * T * T * HD
    moe = 2 * T * D * E + 3 * 2 * T * 2 * D * F  # router, two experts per token
    return L * (attn + moe) + 2 * T * D * V


def test_read_as_written():
    c = spec()
    assert c.norm == "layernorm" and c.qkv_bias and c.out_bias and c.lm_head_bias
    assert (c.num_experts, c.experts_per_token, c.router) == (E, 2, "sparsemixer")
    assert not c.norm_topk_prob and c.expert_d_ff == F


def test_parameters_equal_hand_algebra_and_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.PhimoeConfig(**{k: v for k, v in DATA.items()
                                       if k not in ("architectures", "model_type", "torch_dtype",
                                                    "hidden_dropout")})
    with torch.device("meta"):
        model = transformers.PhimoeForCausalLM(cfg)
    a = analyze(spec(), 8, 1)
    assert a.param_count == hand_params() == sum(p.numel() for p in model.parameters())
    assert a.active_param_count == hand_params(active=True)


@pytest.mark.parametrize("T", [16, 100])
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


def test_cache_bytes(tmp_path, capsys):
    """K and V of h_kv·d_h per layer and token, fp32, against transformers' DynamicCache
    after a CPU forward of T tokens."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    T, B = 12, 2
    cfg = transformers.PhimoeConfig(**{k: v for k, v in DATA.items()
                                       if k not in ("architectures", "model_type", "torch_dtype",
                                                    "hidden_dropout")})
    model = transformers.PhimoeForCausalLM(cfg).eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values))
    assert held == B * L * 2 * KV * HD * T * 4
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         str(T), "--batch", str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


def test_verify_agrees_with_transformers(tmp_path, capsys):
    """--verify: every counter on model/ (the sparsemixer op for op) and transformers' own
    PhimoeForCausalLM (batched_mm experts on meta; its other expert implementations shrunk
    on the CPU)."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "16")
    assert x["transformers"]["agrees"] and x["transformers"]["model_type"] == "phimoe"


def test_sparsemixer_always_picks_two(tmp_path, capsys):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, DATA,
                                                             {"num_experts_per_tok": 1})),
                        "--no-verify", expected="sparsemixer always picks")


def test_phi_3_5_moe_published_counts():
    """Phi-3.5-MoE-instruct's sizes (its config.json: vocab 32,064, hidden 4,096, 32 layers,
    32 heads, 8 K/V heads, 16 experts of 6,400, attention and LM-head biases): the model
    card's "42B total (41.9B), 6.6B active"; the hand algebra above at that size
    (transformers 5.23's PhimoeForCausalLM on the meta device: 41,873,153,344 too, 20 s,
    run once and not here)."""
    data = dict(DATA, vocab_size=32064, hidden_size=4096, intermediate_size=6400,
                num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                num_local_experts=16, max_position_embeddings=131072, sliding_window=131072)
    a = analyze(spec(data), 8, 1)
    size = dict(v=32064, d=4096, f=6400, layers=32, h=32, kv=8, e=16)
    assert a.param_count == hand_params(**size) == 41_873_153_344
    assert a.active_param_count == hand_params(**size, active=True) == 6_640_999_744


@pytest.mark.parametrize("T", [16, 100])
def test_the_literature_formulas_close(T):
    """Every literature formula's terms close on the exact count (no unexplained term): the
    reconciliation knows this family's parameters (accounting/literature/)."""
    from accounting.literature.compare import compare
    from accounting.literature.terms import UNEXPLAINED
    cmp = compare(spec(), T, 2)
    for e in cmp.estimates:
        assert not [t for t in e.terms if t.kind == UNEXPLAINED], (e.key, e.terms)
        assert e.forward + sum(t.forward for t in e.terms) == cmp.exact.forward, e.key
        assert e.training + sum(t.training for t in e.terms) == cmp.exact.training, e.key
