"""Hugging Face config.json in, for Gemma 4 (model_type gemma4_text, and the vision-language
gemma4 counted for its language model; issue 31): sliding and full-attention layers with
head shapes of their own, K = V on the full layers, a weightless RMSNorm on V, and a
128-expert mixture beside the dense MLP in every layer (Gemma 4 26B-A4B). Counted against
hand algebra written here from transformers 5.23.0's models/gemma4/modeling_gemma4.py,
transformers' own Gemma4ForCausalLM (meta device: parameters; CPU: the cache it builds)
and the published config.json (../shared/frontier/, when present).

What modeling_gemma4.py builds (read there): Gemma4TextAttention: q_proj (d → h·d_h),
k_proj (d → h_kv·d_h), v_proj likewise except on a full layer with attention_k_eq_v
(value_states = key_states), o_proj (h·d_h → d), q_norm and k_norm (d_h weights), v_norm
(no weight); a full layer's d_h is global_head_dim and, with attention_k_eq_v, its h_kv
num_global_key_value_heads (Gemma4TextConfig.per_layer_config). Gemma4TextDecoderLayer:
input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
post_feedforward_layernorm (d each), Gemma4TextMLP (gate, up, down: 3·d·f); with
enable_moe_block Gemma4TextRouter (proj E×d, scale d, per_expert_scale E),
Gemma4TextExperts (gate_up_proj E×2f_e×d, down_proj E×d×f_e) and three more norms
(post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2); layer_scalar is a buffer.
Gemma4TextModel: embed_tokens (tied lm_head by default), norm.
"""
import json
from pathlib import Path

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, F, L, H, KV, HD = 96, 32, 48, 6, 4, 2, 8
GHD, GKV, E, K, FE, W = 16, 1, 4, 2, 8, 16
DATA = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "vocab_size": V,
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
        "global_head_dim": GHD, "num_global_key_value_heads": GKV, "attention_k_eq_v": True,
        "enable_moe_block": True, "num_experts": E, "top_k_experts": K,
        "moe_intermediate_size": FE, "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0, "sliding_window": W, "max_position_embeddings": 512,
        "final_logit_softcapping": 30.0, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25,
                                               "rope_theta": 1000000.0,
                                               "rope_type": "proportional"},
                            "sliding_attention": {"rope_theta": 10000.0,
                                                  "rope_type": "default"}},
        "torch_dtype": "float32"}
FRONTIER = Path(__file__).resolve().parents[2] / "shared" / "frontier"
LOCAL, GLOBAL = 5, 1  # no layer_types: layer i slides unless (i + 1) % 6 == 0


def spec(data=DATA):
    return translate(data, "config.json", "gemma4-tiny").config


def _transformers_model(data=DATA, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Gemma4TextConfig(**{k: v for k, v in data.items()
                                           if k not in ("architectures", "model_type",
                                                        "torch_dtype")})
    with torch.device(device):
        return transformers.Gemma4ForCausalLM(cfg)


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("local",) * 5 + ("global",) and c.sliding_window == W
    assert (c.global_head_dim, c.global_kv_heads, c.global_k_eq_v) == (GHD, GKV, True)
    assert c.v_norm and c.mlp_beside_moe and c.layer_scalar and not c.norm_offset
    assert (c.num_experts, c.experts_per_token, c.moe_d_ff) == (E, K, FE)


def hand_params(active: bool = False) -> int:
    local = D * H * HD + 2 * D * KV * HD + H * HD * D + 2 * HD  # q, k, v, o, q/k_norm
    glob = D * H * GHD + D * GKV * GHD + H * GHD * D + 2 * GHD  # no v_proj (K = V)
    experts = (K if active else E) * 3 * FE * D
    block = 7 * D + 3 * D * F + (D * E + D + E) + experts  # norms, MLP, router, experts
    return V * D + D + LOCAL * local + GLOBAL * glob + L * block  # tied head


def hand_forward_flops(T: int) -> int:
    """Matmul FLOPs of one sequence: the eager core computes all T×T scores (the window is
    a mask), 2·T·h·d_h per key for QKᵀ and again for the weighted values."""
    local = 2 * T * D * (H * HD + 2 * KV * HD) + 2 * T * H * HD * D + 2 * 2 * H * T * T * HD
    glob = 2 * T * D * (H * GHD + GKV * GHD) + 2 * T * H * GHD * D + 2 * 2 * H * T * T * GHD
    block = 3 * 2 * T * D * F + 2 * T * D * E + 3 * 2 * T * K * D * FE
    return LOCAL * local + GLOBAL * glob + L * block + 2 * T * D * V


def test_parameters_equal_hand_algebra_and_transformers():
    model = _transformers_model()
    a = analyze(spec(), 8, 1)
    assert a.param_count == hand_params() == sum(p.numel() for p in model.parameters())
    assert a.active_param_count == hand_params(active=True)


@pytest.mark.parametrize("T", [40, 300])  # below and beyond the window of 16
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


def _held(model, T: int, B: int) -> int:
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    return sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values))


@pytest.mark.parametrize("T,B", [(12, 2), (40, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """transformers' cache after a CPU forward of T tokens (fp32): per sliding layer K and V
    of h_kv·d_h for min(T, W − 1) tokens (DynamicSlidingWindowLayer keeps W − 1 between
    steps), per full layer K and V (V = v_norm(K), stored apart) of h_kvG·d_hG for T; the
    plan counts min(T, W) on a sliding layer (the cache while a step attends)."""
    held = _held(_transformers_model(device="cpu").eval(), T, B)
    kept = min(T, W - 1)
    assert held == B * 2 * (LOCAL * KV * HD * kept + GLOBAL * GKV * GHD * T) * 4
    path = write_config(tmp_path, DATA)
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", str(T), "--batch",
                         str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    planned = json.loads(out)["inference"]["kv_cache_bytes"]
    assert planned == B * 2 * (LOCAL * KV * HD * min(T, W) + GLOBAL * GKV * GHD * T) * 4
    if T < W:
        assert planned == held


def test_verify_agrees_with_transformers(tmp_path, capsys):
    """--verify at T = 40 (beyond the window): every counter, transformers' own model on the
    meta device (batched_mm experts) and its expert implementations on the CPU."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "40")
    hf = x["transformers"]
    assert hf["agrees"] and hf["model_type"] == "gemma4_text"


def test_the_wrapper_counts_its_language_model(tmp_path, capsys):
    """model_type gemma4 (Gemma4Config): text_config read as gemma4_text (.parameters.language);
    the vision tower counted beside it since issue 41 (tests/test_vision.py checks it)."""
    data = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "text_config": {k: v for k, v in DATA.items() if k not in ("architectures",
                                                                       "torch_dtype")},
            "vision_config": {"model_type": "gemma4_vision", "hidden_size": 16},
            "audio_config": None, "image_token_id": 258880, "tie_word_embeddings": True,
            "torch_dtype": "float32"}
    data["text_config"]["model_type"] = "gemma4_text"
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify",
                         "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    assert p["language"] == hand_params() and p["total"] == p["language"] + p["vision"]


@pytest.mark.parametrize("change,expected", [
    # per-layer embeddings and KV sharing are read since issue 41 (test_hf_gemma4_small.py);
    # transformers' own refusals stay refusals
    ({"num_kv_shared_layers": L}, "must be below num_hidden_layers"),
    ({"num_kv_shared_layers": 1}, "an earlier layer of its kind"),  # the only full layer
    ({"use_bidirectional_attention": "all"}, "without the causal mask"),
    ({"enable_moe_block": True, "num_experts": None}, "enable_moe_block needs"),
])
def test_refused_in_one_line(tmp_path, capsys, change, expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, DATA, change)),
                        "--no-verify", expected=expected)


def test_last_layer_full_as_transformers_forces_it():
    """Gemma4TextConfig.__post_init__ makes the last layer full attention whatever
    layer_types says (a warning): transformers' model then has K = V there (no v_proj)."""
    data = dict(DATA, layer_types=["sliding_attention"] * L, num_hidden_layers=L)
    model = _transformers_model(data)
    assert model.model.layers[-1].self_attn.v_proj is None
    assert spec(data).layer_types[-1] == "global"
    assert analyze(spec(data), 8, 1).param_count == sum(p.numel() for p in model.parameters())


FULL = FRONTIER / "gemma-4-26B-A4B.json"


@pytest.mark.skipif(not FULL.exists(), reason="the published config.json is not here")
def test_published_config_counts(capsys):
    """gemma-4-26B-A4B's config.json as published: transformers 5.23's language model on the
    meta device, 25,233,141,760 (../shared/frontier/README.md); active by hand: the total
    less the E − k = 120 unchosen experts' 3·704·2816 weights in each of 30 layers (the
    model card's "3.8B active"); KV cache at 4,096 tokens in bf16 by hand: 25 sliding layers
    × K and V × 8 heads × 256 × 1,024 tokens, and 5 full layers × K and V × 2 heads × 512 ×
    4,096 tokens, 2 bytes each."""
    code, out, err = run(capsys, "--config", str(FULL), "--no-verify", "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    # the vision tower and embedder, 572,792,112 in transformers' whole model (the docs' table,
    # measured on the meta device), counted beside the language model since issue 41
    assert p["language"] == 25_233_141_760 and p["vision"] == 572_792_112
    assert p["total"] == 25_233_141_760 + 572_792_112
    assert p["active_per_token"] == 25_233_141_760 - 120 * 3 * 704 * 2816 * 30
    code, out, err = run(capsys, "plan", "--config", str(FULL), "--ctx", "4096", "--format",
                         "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == \
        (25 * 2 * 8 * 256 * 1024 + 5 * 2 * 2 * 512 * 4096) * 2


def test_flags_are_written_back_as_gemma4_keys(tmp_path, capsys):
    """--num-layers 12 --global-head-dim 32 on the config.json: written back as layer_types
    (the pattern continued: 10 sliding, 2 full) and global_head_dim, transformers builds that
    model and agrees; its parameters by the hand algebra at that size."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--num-layers",
                       "12", "--global-head-dim", "32", "--ctx", "20")
    assert x["transformers"]["agrees"]
    total = next(r for r in x["transformers"]["parameters"] if r["component"] == "total")
    glob = D * H * 32 + D * GKV * 32 + H * 32 * D + 2 * 32
    local = D * H * HD + 2 * D * KV * HD + H * HD * D + 2 * HD
    block = 7 * D + 3 * D * F + (D * E + D + E) + E * 3 * FE * D
    expected = V * D + D + 10 * local + 2 * glob + 12 * block
    assert total["analytic"] == total["transformers"] == expected


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
