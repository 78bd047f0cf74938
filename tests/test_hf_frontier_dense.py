"""Hugging Face config.json in, for the 2025 dense model_types issue 31 added: smollm3
(NoPE by layer), glm4 (GLM-4-0414: four norms per block), olmo3 (3:1 sliding windows),
seed_oss (separate Q/K/V and output biases) and exaone4 (post norms, per-head QK-norm, RoPE
only on the sliding layers). Each small config, written as transformers writes it, is read
into the spec and counted against hand algebra written here from transformers 5.23.0's
modeling_<type>.py, the tool's model/ and transformers' own model (meta device); the full
cross-check agrees (one per family); full-size counts by hand; refusals in one line.

What each modeling file builds (read there):
  smollm3: LlamaAttention's projections (bias=attention_bias on all four), use_rope =
    no_rope_layers[i] (1: RoPE, 0: none); LlamaMLP; two RMSNorms per block; tied head.
  glm4: q/k/v_proj with bias=attention_bias, o_proj without; gate_up_proj (2·f rows) and
    down_proj; input_layernorm, post_self_attn_layernorm, post_attention_layernorm,
    post_mlp_layernorm (four per block); RoPE on int(head_dim·partial_rotary_factor) dims.
  olmo3: OLMo-2's block (q_norm over heads·head_dim, k_norm over kv_heads·head_dim,
    post_attention_layernorm and post_feedforward_layernorm on the sublayer outputs);
    sliding_window on the layers layer_types marks sliding.
  seed_oss: q/k/v_proj bias=attention_bias, o_proj bias=attention_out_bias, head_dim given.
  exaone4: q_norm/k_norm of head_dim, post_attention_layernorm / post_feedforward_layernorm
    on the sublayer outputs; RoPE only where the layer slides (sliding_window set).
"""
import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line
from hf_examples import DELETE, write_config

V, D, F = 96, 64, 96  # every small config: vocab, hidden_size, intermediate_size
CONFIGS = {
    'smollm3': {
        "architectures": ["SmolLM3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": 128012,
        "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
        "intermediate_size": 96,
        "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention"],
        "max_position_embeddings": 64, "max_window_layers": 28, "mlp_bias": False,
        "model_type": "smollm3", "no_rope_layer_interval": 4, "no_rope_layers": [1, 1, 1, 0],
        "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 2,
        "pad_token_id": None, "pretraining_tp": 2, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 5000000.0, "sliding_window": None, "torch_dtype": "bfloat16",
        "transformers_version": "4.54.0.dev0", "use_cache": False, "use_sliding_window": False,
        "vocab_size": 96},
    'glm4': {
        "architectures": ["Glm4ForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
        "eos_token_id": [151329, 151336, 151338], "head_dim": 16, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
        "max_position_embeddings": 64, "model_type": "glm4", "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0,
        "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.3", "use_cache": True, "vocab_size": 96},
    'olmo3': {
        "architectures": ["Olmo3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "eos_token_id": 100257, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        "max_position_embeddings": 64, "model_type": "olmo3", "num_attention_heads": 4,
        "num_hidden_layers": 4, "num_key_value_heads": 4, "pad_token_id": 1,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000, "sliding_window": 6,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.57.0", "use_cache": True, "vocab_size": 96},
    'seed_oss': {
        "architectures": ["SeedOssForCausalLM"], "attention_bias": True,
        "attention_dropout": 0.1, "attention_out_bias": False, "bos_token_id": 0,
        "pad_token_id": 1, "eos_token_id": 2, "head_dim": 24, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
        "max_position_embeddings": 64, "mlp_bias": False, "model_type": "seed_oss",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "residual_dropout": 0.1, "rms_norm_eps": 1e-06,
        "rope_scaling": {"rope_type": "default"}, "rope_theta": 10000000.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.55.0", "use_cache": True, "vocab_size": 96},
    'exaone4': {
        "architectures": ["Exaone4ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
        "initializer_range": 0.02, "intermediate_size": 96,
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        "max_position_embeddings": 64, "model_type": "exaone4", "num_attention_heads": 4,
        "num_hidden_layers": 4, "num_key_value_heads": 2, "pad_token_id": 0,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 16.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 1000000, "sliding_window": 6, "sliding_window_pattern": "LLLG",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.54.0.dev0", "use_cache": True, "vocab_size": 96},
}
# What each means (read from the modeling files above): layers, query / K/V heads, head
# dim, Q/K/V bias, output bias, QK-norm weights per layer, norms per block, tied head, the
# layers without RoPE, the sliding layers (window W), RoPE's rotated dims per head.
SHAPES = {
    "smollm3": dict(L=4, h=4, kv=2, dk=16, qkv_b=0, o_b=0, qk=0, norms=2, tied=True,
                    nope=(3,), local=(), rot=16),
    "glm4": dict(L=2, h=4, kv=2, dk=16, qkv_b=1, o_b=0, qk=0, norms=4, tied=False, nope=(),
                 local=(), rot=8),
    # OLMo-2's QK-norm: h·d_k + h_kv·d_k weights
    "olmo3": dict(L=4, h=4, kv=4, dk=16, qkv_b=0, o_b=0, qk=4 * 16 + 4 * 16, norms=2,
                  tied=False, nope=(), local=(0, 1, 2), rot=16),
    "seed_oss": dict(L=2, h=4, kv=2, dk=24, qkv_b=1, o_b=0, qk=0, norms=2, tied=False,
                     nope=(), local=(), rot=24),
    # per-head QK-norm: d_k weights each for Q and K
    "exaone4": dict(L=4, h=4, kv=2, dk=16, qkv_b=0, o_b=0, qk=2 * 16, norms=2, tied=False,
                    nope=(3,), local=(0, 1, 2), rot=16),
}
WINDOW = 6  # olmo3's and exaone4's sliding_window


def params_by_hand(name: str) -> int:
    """nn.Linear(in, out, bias) = in·out (+ out): q (D → h·d_k), k, v (D → h_kv·d_k), o
    (h·d_k → D), the gated MLP's three D·F matrices; RMSNorm D weights each, `norms` per
    block and the final one; the embedding, and the head unless tied."""
    s = SHAPES[name]
    h, kv, dk = s["h"], s["kv"], s["dk"]
    attn = D * (h + 2 * kv) * dk + h * dk * D + s["qkv_b"] * (h + 2 * kv) * dk + s["o_b"] * D
    block = attn + s["qk"] + 3 * D * F + s["norms"] * D
    return V * D + s["L"] * block + D + (0 if s["tied"] else V * D)


def forward_matmul_flops_by_hand(name: str, T: int, B: int = 1) -> int:
    """2·m·n·p per matmul: Q, K, V, QKᵀ and scores·V over the full T×T (the eager core
    computes every pair and masks; a sliding window masks more, it computes the same),
    o_proj, the MLP's three matrices, the head."""
    s = SHAPES[name]
    h, kv, dk = s["h"], s["kv"], s["dk"]
    layer = (2 * B * T * D * (h + 2 * kv) * dk + 2 * 2 * B * h * T * T * dk
             + 2 * B * T * h * dk * D + 3 * 2 * B * T * D * F)
    return s["L"] * layer + 2 * B * T * D * V


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_means_what_transformers_builds(name):
    c = translate(CONFIGS[name], "t", name).config
    s = SHAPES[name]
    assert (c.num_layers, c.num_heads, c.kv_heads, c.d_k) == (s["L"], s["h"], s["kv"], s["dk"])
    assert (c.qkv_bias, c.out_bias, c.mlp_bias, c.tie_embeddings) == \
        (bool(s["qkv_b"]), bool(s["o_b"]), False, s["tied"])
    assert c.nope_layers == s["nope"]
    assert tuple(i for i, k in enumerate(c.layer_kinds) if k.local) == s["local"]
    assert (c.rotary_dim or c.d_k) == s["rot"]
    if s["local"]:
        assert c.sliding_window == WINDOW
    placement = {"glm4": "sandwich", "olmo3": "post", "exaone4": "post"}.get(name, "pre")
    qk = {"olmo3": "full", "exaone4": "head"}.get(name, "none")
    assert (c.norm_placement, c.qk_norm) == (placement, qk)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameters_three_ways_and_flops_at_two_lengths(name):
    torch = pytest.importorskip("torch")
    c = translate(CONFIGS[name], "t", name).config
    expected = params_by_hand(name)
    assert analyze(c).param_count == expected
    from model import TransformerLM
    assert sum(p.numel() for p in TransformerLM.from_config(c, device="meta").parameters()) \
        == expected
    for T, B in ((8, 1), (24, 2)):
        assert analyze(c, seq=T, batch=B).matmul_flops("executed") == \
            forward_matmul_flops_by_hand(name, T, B)
    transformers = pytest.importorskip("transformers")
    data = {k: v for k, v in CONFIGS[name].items() if k != "architectures"}
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert type(m).__name__ == CONFIGS[name]["architectures"][0]
    assert sum(p.numel() for p in m.parameters()) == expected
    # what transformers built means the same: RoPE where the spec has it, the windows
    s, layers = SHAPES[name], m.model.layers
    if name == "smollm3":
        assert [bool(l.self_attn.use_rope) for l in layers] == \
            [i not in s["nope"] for i in range(s["L"])]
    if name == "olmo3":
        assert [l.self_attn.sliding_window for l in layers] == \
            [WINDOW if i in s["local"] else None for i in range(s["L"])]
    if name == "exaone4":  # RoPE only where it slides (Exaone4Attention.is_sliding)
        assert [l.self_attn.is_sliding for l in layers] == \
            [i not in s["nope"] for i in range(s["L"])]
    if name == "glm4":
        assert sorted(n for n, _ in layers[0].named_children() if "norm" in n) == [
            "input_layernorm", "post_attention_layernorm", "post_mlp_layernorm",
            "post_self_attn_layernorm"]
    rope = m.model.rotary_emb  # OLMo-3: one table per layer kind (full_attention_inv_freq, …)
    freqs = [b for n, b in rope.named_buffers() if n.endswith("inv_freq") and "original" not in n]
    assert {2 * f.numel() for f in freqs} == {s["rot"]}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_cross_check_agrees_with_every_counter(capsys, tmp_path, name):
    pytest.importorskip("transformers")
    T, B = 12, 1
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, CONFIGS[name])),
                       "--ctx", str(T), "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(name)
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(name, T, B)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward
    # past_key_values: K and V per layer, [B, kv_heads, T, head_dim] in bfloat16 (T ≤ W: a
    # sliding layer's cache holds all T here)
    s = SHAPES[name]
    assert tf["kv_cache_bytes"]["transformers"] == s["L"] * 2 * B * s["kv"] * T * s["dk"] * 2 \
        or T > WINDOW


# ---- the full-size models ---------------------------------------------------------------------
# SmolLM3-3B (HuggingFaceTB/SmolLM3-3B config.json: hidden 2048, intermediate 11008, 36
# layers, 16 heads, 4 K/V heads, vocab 128256, tied, every 4th layer NoPE); GLM-4-9B-0414
# (THUDM/GLM-4-9B-0414: hidden 4096, intermediate 13696, 40 layers, 32 heads, 2 K/V heads,
# head_dim 128, vocab 151552, Q/K/V biases, untied); Seed-OSS-36B (ByteDance-Seed/Seed-OSS-36B
# config.json: hidden 5120, intermediate 27648, 64 layers, 80 heads, 8 K/V heads, head_dim
# 128, vocab 155136, Q/K/V biases, untied).
SMOLLM3_3B = {"model_type": "smollm3", "vocab_size": 128256, "hidden_size": 2048,
              "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
              "num_key_value_heads": 4, "max_position_embeddings": 65536, "pad_token_id": None}
GLM4_9B = {"model_type": "glm4", "vocab_size": 151552, "hidden_size": 4096,
           "intermediate_size": 13696, "num_hidden_layers": 40, "num_attention_heads": 32,
           "num_key_value_heads": 2, "head_dim": 128, "attention_bias": True,
           "partial_rotary_factor": 0.5, "max_position_embeddings": 32768, "pad_token_id": None}
SEED_OSS_36B = {"model_type": "seed_oss", "vocab_size": 155136, "hidden_size": 5120,
                "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 80,
                "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 524288,
                "pad_token_id": None}


@pytest.mark.parametrize("data, expected, published", [
    # 128256·2048 + 36·(2048·24·128 + 2048·2048 + 3·2048·11008 + 2·2048) + 2048 (tied)
    (SMOLLM3_3B, 262_668_288 + 36 * (6_291_456 + 4_194_304 + 67_633_152 + 4096) + 2048, 3),
    # 2·151552·4096 + 40·(4096·36·128 + 4096·4096 + 36·128 + 3·4096·13696 + 4·4096) + 4096
    (GLM4_9B, 1_241_513_984 + 40 * (18_874_368 + 16_777_216 + 4608 + 168_296_448 + 16_384)
     + 4096, 9),
    # 2·155136·5120 + 64·(5120·96·128 + 10240·5120 + 96·128 + 3·5120·27648 + 2·5120) + 5120
    (SEED_OSS_36B, 1_588_592_640 + 64 * (62_914_560 + 52_428_800 + 12_288 + 424_673_280
                                         + 10_240) + 5120, 36),
], ids=["SmolLM3-3B", "GLM-4-9B-0414", "Seed-OSS-36B"])
def test_full_size(data, expected, published):
    torch = pytest.importorskip("torch")
    assert analyze(translate(data, "t", "full").config).param_count == expected
    assert round(expected / 1e9) == published  # the model cards' sizes
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert sum(p.numel() for p in m.parameters()) == expected


@pytest.mark.parametrize("name, changes, expected", [
    ("smollm3", {"no_rope_layers": [1, 1, 0]}, "no_rope_layers must list 4"),
    ("smollm3", {"no_rope_layers": [1, 1, 2, 0]}, "no_rope_layers"),
    ("glm4", {"partial_rotary_factor": 0.45}, "partial_rotary_factor"),
    ("olmo3", {"sliding_window": None}, "no window"),
    ("olmo3", {"rope_parameters": {"full_attention": {"rope_type": "su"}}}, "rope_parameters"),
    ("exaone4", {"layer_types": DELETE}, "sliding_window_pattern must be a positive integer"),
    ("seed_oss", {"head_dim": DELETE, "hidden_size": DELETE}, "hidden_size"),
])
def test_what_the_spec_cannot_mean_is_refused_in_one_line(capsys, tmp_path, name, changes,
                                                          expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, CONFIGS[name], changes)),
                        "--no-verify", expected=expected)


def test_defaults_and_derived_layers():
    # SmolLM3Config: no_rope_layers absent -> every 4th layer NoPE (int((i + 1) % 4 != 0))
    data = {**CONFIGS["smollm3"], "num_hidden_layers": 8}
    del data["no_rope_layers"], data["layer_types"]
    assert translate(data, "t", "n").config.nope_layers == (3, 7)
    # Olmo3Config: layer_types absent -> sliding unless (i + 1) % 4 == 0
    data = {k: v for k, v in CONFIGS["olmo3"].items() if k != "layer_types"}
    kinds = translate({**data, "num_hidden_layers": 8}, "t", "n").config.layer_kinds
    assert [k.local for k in kinds] == [True, True, True, False] * 2
    # Exaone4Config: an int pattern makes layer_types; the global layers lose RoPE
    data = {**CONFIGS["exaone4"], "sliding_window_pattern": 2}
    del data["layer_types"]
    c = translate(data, "t", "n").config
    assert [k.local for k in c.layer_kinds] == [True, False] * 2 and c.nope_layers == (1, 3)
    # without a window EXAONE 4 runs RoPE everywhere
    data = {**CONFIGS["exaone4"], "sliding_window": None,
            "layer_types": ["full_attention"] * 4}
    c = translate(data, "t", "n").config
    assert c.nope_layers == () and c.sliding_window is None
    # GLM-4-0414: partial_rotary_factor absent -> 0.5 (Glm4Config.__post_init__)
    data = {k: v for k, v in CONFIGS["glm4"].items() if k != "partial_rotary_factor"}
    assert translate(data, "t", "n").config.rotary_dim == 8
