"""Hugging Face config.json in, for Gemma 2 (gemma2), Gemma 3's language model (gemma3_text)
and IBM Granite 3 (granite), issue 24: each read into the spec and counted three ways — the
ledger, the tool's model/ and transformers' own model — against hand algebra written here
from transformers 5.23.0's modeling files (never from the tool's tables):

  * modeling_gemma2.py / modeling_gemma3.py: Gemma2DecoderLayer has four Gemma2RMSNorm
    (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
    post_feedforward_layernorm), each `output * (1.0 + self.weight.float())`: d weights, and
    one add over the d-vector per call; Gemma2TextScaledWordEmbedding multiplies by
    hidden_size**0.5; eager_attention_forward soft-caps the scores (÷ cap, tanh, × cap) and
    Gemma2ForCausalLM the logits likewise; Gemma3Attention adds q_norm/k_norm (head_dim
    weights each); Gemma2MLP is gated (gate_proj, up_proj, down_proj, no bias);
  * modeling_granite.py: LlamaForCausalLM's shapes, with `inputs_embeds *
    embedding_multiplier` (GraniteModel), `residual + hidden_states * residual_multiplier`
    twice per GraniteDecoderLayer, `logits / logits_scaling` (GraniteForCausalLM).
"""

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from accounting.architecture.loaders import config_from_json
from cli_run import agreeing_check, run
from hf_examples import DELETE, write_config

CONFIGS = {
    # Gemma 2 as its hub configs read (transformers 4.42): hidden_act beside
    # hidden_activation, cache_implementation; no layer_types, so layers 0 and 2 slide
    # ((i + 1) % 2, Gemma2Config.__post_init__), window 4; head_dim 16 ≠ 32/4.
    "gemma2": {
        "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
        "eos_token_id": [1, 107], "final_logit_softcapping": 30.0, "head_dim": 16,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 48,
        "max_position_embeddings": 64, "model_type": "gemma2", "num_attention_heads": 4,
        "num_hidden_layers": 3, "num_key_value_heads": 2, "pad_token_id": 0,
        "query_pre_attn_scalar": 16, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "sliding_window": 4, "torch_dtype": "bfloat16", "transformers_version": "4.42.4",
        "use_cache": True, "vocab_size": 67},
    # Gemma 3 1B's shape of file (transformers 4.50): sliding_window_pattern 3, so layers 0,
    # 1 and 3 slide and layer 2 is global ((i + 1) % 3); one KV head; no soft-caps.
    "gemma3_text": {
        "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid",
        "eos_token_id": [1, 106], "final_logit_softcapping": None, "head_dim": 8,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32, "initializer_range": 0.02,
        "intermediate_size": 40, "max_position_embeddings": 64, "model_type": "gemma3_text",
        "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 1,
        "pad_token_id": 0, "query_pre_attn_scalar": 8, "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": 5, "sliding_window_pattern": 3, "torch_dtype": "bfloat16",
        "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 71},
    # as transformers 5.23 writes Gemma3TextConfig(...).to_diff_dict(): RoPE per layer kind,
    # layer_types, the private _sliding_window_pattern; here with a final soft-cap, untied
    "gemma3_text (transformers 5)": {
        "transformers_version": "5.23.0", "vocab_size": 61, "hidden_size": 32,
        "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 2, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 64, "initializer_range": 0.02, "rms_norm_eps": 1e-06,
        "use_cache": True, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
        "tie_word_embeddings": False,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "linear", "factor": 8.0,
                                               "rope_theta": 1000000.0}},
        "attention_bias": False, "attention_dropout": 0.0, "query_pre_attn_scalar": 256,
        "sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"],
        "final_logit_softcapping": 15.0, "attn_logit_softcapping": None,
        "use_bidirectional_attention": False, "_sliding_window_pattern": 6,
        "model_type": "gemma3_text"},
    # Granite 3 (granite-3.0-2b's keys): the multipliers and logits_scaling
    "granite": {
        "architectures": ["GraniteForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.1, "attention_multiplier": 0.015625, "bos_token_id": 0,
        "embedding_multiplier": 12.0, "eos_token_id": 0, "hidden_act": "silu",
        "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 40,
        "logits_scaling": 8.0, "max_position_embeddings": 64, "mlp_bias": False,
        "model_type": "granite", "num_attention_heads": 4, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "pad_token_id": 0, "residual_multiplier": 0.22,
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.46.0",
        "use_cache": True, "vocab_size": 59},
}

# What each means, by hand from the modeling files (see the module's docstring).
SHAPES = {
    "gemma2": dict(V=67, d=32, L=3, h=4, kv=2, hd=16, f=48, local=(0, 2), W=4, gemma=True,
                   qk=False, tied=True, attn_cap=50.0, final_cap=30.0, bytes=2),
    "gemma3_text": dict(V=71, d=32, L=4, h=4, kv=1, hd=8, f=40, local=(0, 1, 3), W=5, gemma=True,
                        qk=True, tied=True, attn_cap=None, final_cap=None, bytes=2),
    "gemma3_text (transformers 5)": dict(V=61, d=32, L=2, h=2, kv=2, hd=16, f=48, local=(0,),
                                         W=3, gemma=True, qk=True, tied=False, attn_cap=None,
                                         final_cap=15.0, bytes=4),
    "granite": dict(V=59, d=32, L=2, h=4, kv=2, hd=8, f=40, local=(), W=None, gemma=False,
                    qk=False, tied=True, attn_cap=None, final_cap=None, bytes=2,
                    embedding=12.0, residual=0.22, logits_scaling=8.0),
}


def params_by_hand(s) -> int:
    d, V, h, kv, hd = s["d"], s["V"], s["h"], s["kv"], s["hd"]
    attn = d * h * hd + 2 * d * kv * hd + h * hd * d + (2 * hd if s["qk"] else 0)
    norms = (4 if s["gemma"] else 2) * d
    block = attn + 3 * d * s["f"] + norms
    return V * d + s["L"] * block + d + (0 if s["tied"] else V * d)


def forward_matmul_flops_by_hand(s, T: int, B: int) -> int:
    """2 FLOPs per multiply-add: Q, K, V, O and the gated MLP per token, QKᵀ and scores·V
    over the full T×T (executed; the window is a mask), the LM head."""
    d, h, kv, hd, N = s["d"], s["h"], s["kv"], s["hd"], B * T
    per_token = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * s["f"]
    core = 2 * B * h * T * T * hd
    return 2 * (s["L"] * (N * per_token + core) + N * d * s["V"])


def new_ops_by_hand(s, T: int, B: int) -> dict:
    """The forward non-matmul FLOPs of the features issue 24 adds, one per output element:
    RMSNorm per call on R rows of width w is x², mean, + eps, sqrt, ÷, · gain (4·R·w + 2·R)
    plus, with Gemma's (1 + w), the add over the w gains (w); the scalars' multiplies; a
    soft-cap's ÷ cap, tanh and × cap."""
    d, h, kv, hd, N, L, V = s["d"], s["h"], s["kv"], s["hd"], B * T, s["L"], s["V"]
    offset = 1 if s["gemma"] else 0
    rms = (4 * N * d + 2 * N + offset * d) * ((4 if s["gemma"] else 2) * L + 1)
    out = {"RMSNorm": rms}
    if s["qk"]:  # per head: Q's B·h·T rows and K's B·kv·T rows of head_dim
        out["QK-norm"] = L * sum(4 * r * hd + 2 * r + hd for r in (B * h * T, B * kv * T))
    out["embedding multiplier"] = N * d
    caps = (3 * L * B * h * T * T if s["attn_cap"] else 0) + (3 * N * V if s["final_cap"] else 0)
    if caps:
        out["tanh soft-capping"] = caps
    if not s["gemma"]:
        out["residual multiplier"] = 2 * L * N * d
        out["logit scale"] = N * V
    return out


def kv_bytes_by_hand(s, T: int, B: int) -> int:
    """transformers' cache after the prefill: K and V per token and layer; a sliding layer
    keeps its last W − 1 tokens (DynamicSlidingWindowLayer)."""
    kept = sum(min(T, s["W"] - 1) if i in s["local"] else T for i in range(s["L"]))
    return 2 * s["kv"] * s["hd"] * kept * B * s["bytes"]


def write(tmp_path, name: str, changes: dict | None = None):
    return write_config(tmp_path, CONFIGS[name], changes)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_means_what_transformers_builds(tmp_path, name):
    c, s = config_from_json(write(tmp_path, name)), SHAPES[name]
    assert tuple(i for i, k in enumerate(c.layer_kinds) if k.local) == s["local"]
    assert (c.sliding_window if s["local"] else None) == s["W"]
    assert (c.num_kv_heads, c.d_k, c.d_ff, c.tie_embeddings) == (s["kv"], s["hd"], s["f"], s["tied"])
    assert c.norm_placement == ("sandwich" if s["gemma"] else "pre")
    assert c.norm_offset is s["gemma"] and c.qk_norm == ("head" if s["qk"] else "none")
    assert (c.attn_softcap, c.final_softcap) == (s["attn_cap"], s["final_cap"])
    if s["gemma"]:  # Gemma2TextScaledWordEmbedding: hidden_size**0.5; gated GELU-tanh
        assert c.embedding_multiplier == s["d"] ** 0.5 and c.mlp == "geglu"
        assert (c.residual_multiplier, c.logit_scale) == (None, None)
    else:
        assert (c.embedding_multiplier, c.residual_multiplier, c.logit_scale) == \
            (s["embedding"], s["residual"], 1 / s["logits_scaling"])
        assert c.mlp == "swiglu" and c.norm_offset is False
    assert analyze(c).param_count == params_by_hand(s)
    import torch  # noqa: F401  (model/ needs it)
    from model import TransformerLM
    m = TransformerLM.from_config(c, device="meta")
    assert sum(p.numel() for p in m.parameters()) == params_by_hand(s)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("T,B", [(3, 1), (13, 2)])
def test_matmul_and_new_non_matmul_flops_equal_the_hand_algebra(tmp_path, name, T, B):
    s = SHAPES[name]
    a = analyze(config_from_json(write(tmp_path, name)), seq=T, batch=B)
    assert a.matmul_flops() == forward_matmul_flops_by_hand(s, T, B)
    by_component = a.elementwise_by_component()
    for component, flops in new_ops_by_hand(s, T, B).items():
        assert by_component[component] == flops, component
    absent = {"tanh soft-capping", "residual multiplier", "logit scale"} - set(new_ops_by_hand(s, T, B))
    assert not absent & {k for k, v in by_component.items() if v}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_three_ways_each_config(capsys, tmp_path, name):
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    s = SHAPES[name]
    model = build(CONFIGS[name])  # AutoModelForCausalLM.from_config on the meta device
    assert sum(p.numel() for p in model.parameters()) == params_by_hand(s)
    T, B = 8, 2  # T > every window (the cache keeps W − 1 tokens of a sliding layer)
    x = agreeing_check(capsys, "--config", str(write(tmp_path, name)), "--ctx", str(T),
                       "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    assert tf["agrees"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(s)
    assert tf["kv_cache_bytes"]["transformers"] == kv_bytes_by_hand(s, T, B)
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(s, T, B)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward
    assert flops[("forward", "not in any component")] == 0
    blocks = [c for c in x["layers"] if c["counter"] == "transformers"]
    assert [c["agreeing"] for c in blocks] == [s["L"]] * 2


# Full size, as shipped (hub config.json keys): transformers' own count on the meta device
# and the hand algebra of SHAPES' formula. Gemma 2 2B: 2,614,341,888; Gemma 3 1B:
# 999,885,952 (the model cards' 2.6B and 1B); Granite 3.1 2B: 2,533,531,648.
FULL = {
    "gemma-2-2b": ({**CONFIGS["gemma2"], "vocab_size": 256000, "hidden_size": 2304,
                    "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "query_pre_attn_scalar": 256, "sliding_window": 4096,
                    "max_position_embeddings": 8192},
                   dict(V=256000, d=2304, L=26, h=8, kv=4, hd=256, f=9216, gemma=True,
                        qk=False, tied=True), 2_614_341_888),
    "gemma-3-1b": ({**CONFIGS["gemma3_text"], "vocab_size": 262144, "hidden_size": 1152,
                    "intermediate_size": 6912, "num_hidden_layers": 26,
                    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                    "query_pre_attn_scalar": 256, "sliding_window": 512,
                    "sliding_window_pattern": 6, "max_position_embeddings": 32768},
                   dict(V=262144, d=1152, L=26, h=4, kv=1, hd=256, f=6912, gemma=True,
                        qk=True, tied=True), 999_885_952),
    # granite-3.1-2b's config.json sizes: 2,533,531,648 (the model card's 2.5B)
    "granite-3.1-2b": ({**CONFIGS["granite"], "vocab_size": 49155, "hidden_size": 2048,
                        "intermediate_size": 8192, "num_hidden_layers": 40,
                        "num_attention_heads": 32, "num_key_value_heads": 8,
                        "max_position_embeddings": 131072, "rope_theta": 5000000.0},
                       dict(V=49155, d=2048, L=40, h=32, kv=8, hd=64, f=8192, gemma=False,
                            qk=False, tied=True), 2_533_531_648),
}


@pytest.mark.parametrize("name", sorted(FULL))
def test_full_size_gemma_parameters(name):
    data, s, published = FULL[name]
    assert params_by_hand(s) == published
    c = translate(data, name, name).config
    assert analyze(c).param_count == published
    # global layers: Gemma 2 every other one, Gemma 3 1B layers 5, 11, 17, 23; Granite all
    assert sum(not k.local for k in c.layer_kinds) == {"gemma-2-2b": 13, "gemma-3-1b": 4,
                                                       "granite-3.1-2b": 40}[name]
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    assert sum(p.numel() for p in build(data).parameters()) == published


def test_the_output_says_what_it_read(capsys, tmp_path):
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "gemma2")), "--no-verify")
    assert code == 0
    assert "sliding window 4 on 2 of 3 layers (layer i slides unless (i + 1) is a multiple of 2" in out
    assert "query_pre_attn_scalar = 16: Gemma2Attention scales the scores by" in out
    assert "hidden_act = 'gelu_pytorch_tanh': unread by transformers' Gemma MLP" in out
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "granite")), "--no-verify")
    assert code == 0 and "attention_multiplier = 0.015625: GraniteAttention scales" in out
    assert "logit_scale = 1/logits_scaling" in out


@pytest.mark.parametrize("name,changes,words", [
    ("gemma2", {"head_dim": DELETE}, "missing head_dim"),
    ("gemma2", {"use_bidirectional_attention": True}, "use_bidirectional_attention = True means"),
    ("gemma2", {"attn_logit_softcapping": 0}, "attn_logit_softcapping must be a positive number or null"),
    ("gemma2", {"hidden_activation": "relu"}, "hidden_activation must be one of"),
    ("gemma2", {"layer_types": ["sliding_attention"]}, "layer_types must list 3 entries"),
    ("gemma3_text", {"rope_scaling": {"rope_type": "weird"}}, "rope_scaling = "),
    ("gemma3_text", {"sliding_window": None}, "layers of sliding attention but no window"),
    ("granite", {"logits_scaling": 0}, "logits_scaling must be a positive number"),
    ("granite", {"residual_multiplier": "x"}, "residual_multiplier must be a positive number"),
])
def test_bad_configs_are_refused_in_one_line(capsys, tmp_path, name, changes, words):
    code, out, err = run(capsys, "--config", str(write(tmp_path, name, changes)), "--no-verify")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert words in err, err


# Gemma 3 4B as shipped (transformers 4.50): text_config gives three sizes, the rest are
# Gemma3TextConfig's class defaults (vocab 262,208, 8 heads, 4 KV heads, head_dim 256).
GEMMA3_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
    "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
    "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16,
                      "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}}


def test_gemma3_counts_the_language_model_of_the_vision_language_config():
    s = dict(V=262208, d=2560, L=34, h=8, kv=4, hd=256, f=10240, gemma=True, qk=True, tied=True)
    hf = translate(GEMMA3_4B, "gemma-3-4b", "gemma-3-4b")
    assert hf.model_type == "gemma3_text" and analyze(hf.config).param_count == params_by_hand(s)
    assert params_by_hand(s) == 3_880_263_168
    assert sum(not k.local for k in hf.config.layer_kinds) == 5  # layers 5, 11, …, 29: 6·k − 1
    assert any("vision tower and the multimodal projector" in n for n in hf.notes)
    assert any("text_config omits vocab_size 262208, num_attention_heads 8" in n for n in hf.notes)
    assert any(n.startswith("gemma3's own keys") and "boi_token_index" in n and "vision_config" in n
               for n in hf.notes)  # listed, not dropped silently
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    full = build(GEMMA3_4B)  # Gemma3ForConditionalGeneration: the language model and vision
    assert type(full).__name__ == "Gemma3ForConditionalGeneration"
    lm = sum(p.numel() for n, p in full.named_parameters() if ".language_model." in f".{n}")
    assert lm == params_by_hand(s)  # the tied lm_head is the embedding: not a parameter again
    vision = sum(p.numel() for p in full.parameters()) - lm
    assert vision == 419_816_304
    # the tower and projector, counted beside the language model (issue 41)
    from accounting.analysis.images import workload
    assert workload(hf.vision, None, None).params == vision


def test_a_small_gemma3_goes_through_the_cross_check(capsys, tmp_path):
    pytest.importorskip("transformers")
    text = {k: v for k, v in CONFIGS["gemma3_text"].items() if k not in ("architectures",)}
    data = {**GEMMA3_4B, "text_config": text}
    s, T, B = SHAPES["gemma3_text"], 8, 1
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, data)), "--ctx", str(T))
    tf = x["transformers"]
    assert tf["class"] == "Gemma3ForCausalLM"
    assert {r["component"]: r["transformers"] for r in tf["parameters"]}["total"] == params_by_hand(s)
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    assert flops[("forward", "total")] == forward_matmul_flops_by_hand(s, T, B)


@pytest.mark.parametrize("changes,words", [
    ({"text_config": None}, "text_config must be the language model's config object"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings False contradicts text_config's True"),
    ({"vision_tower_frozen": True}, "unknown key(s) 'vision_tower_frozen'"),
    ({"quantization_config": {"bits": 4}}, "quantization_config"),
])
def test_bad_gemma3_configs_are_refused_in_one_line(capsys, tmp_path, changes, words):
    data = {**GEMMA3_4B, **changes}
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert words in err, err


def test_attention_soft_cap_needs_the_explicit_scores(capsys, tmp_path):
    code, _, err = run(capsys, "--config", str(write(tmp_path, "gemma2")), "--attention", "sdpa",
                       "--no-verify")
    assert code == 2 and "attn_softcap needs the explicit attention scores" in err


def test_flags_on_gemma_are_written_back_for_transformers(tmp_path):
    from dataclasses import replace

    from accounting.architecture.hf_config import for_transformers, load
    hf = load(write(tmp_path, "gemma2"))
    c = hf.config.with_overrides(num_layers=4)  # layer_types (local, global, local) repeated
    data, why = for_transformers(hf, c)
    assert why == "" and data["num_hidden_layers"] == 4
    assert data["layer_types"] == ["sliding_attention", "full_attention", "sliding_attention",
                                   "sliding_attention"]
    assert translate(data, "t", c.name).config == c
    data, why = for_transformers(hf, replace(hf.config, residual_multiplier=0.5))
    assert data is None and why
    data, why = for_transformers(hf, replace(hf.config, final_softcap=10.0))
    assert why == "" and data["final_logit_softcapping"] == 10.0
