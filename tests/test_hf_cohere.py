"""Hugging Face config.json in, for Cohere (Command R, Command R+, Aya 23; model_type cohere):
each small config, written as transformers writes it, read into the spec and counted against
hand algebra written here from transformers 5.23.0's modeling_cohere.py, the tool's model/
and transformers' own CohereForCausalLM (meta device); the full cross-check agrees; the
full-size Command R and Command R+ parameter counts by hand; what the spec cannot mean is
refused in one line.

What modeling_cohere.py builds (read there): CohereDecoderLayer has ONE input_layernorm whose
output feeds self_attn and mlp, both added to the block input (no post_attention_layernorm);
CohereLayerNorm is mean-centred with a weight of hidden_size and no bias; CohereAttention has
q/k/v/o_proj with bias=attention_bias and, with use_qk_norm, q_norm = CohereLayerNorm((heads,
head_dim)) and k_norm = CohereLayerNorm((kv_heads, head_dim)); CohereMLP is gate/up/down_proj
without biases, act(gate)·up; CohereForCausalLM multiplies the logits by logit_scale and
ties lm_head to embed_tokens (tie_word_embeddings, true by default).
"""
import pytest

from accounting import analyze
from cli_run import agreeing_check, refused_in_one_line, run
from accounting.architecture.hf_config import translate
from hf_examples import DELETE, write_config

V, D, L, H = 96, 64, 2, 4  # every small config: vocab, hidden_size, layers, query heads
CONFIGS = {
    # Command R-like (c4ai-command-r-v01's keys): multi-head, no QK-norm, tied, 1/16 logits
    "command-r": {
        "architectures": ["CohereForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 5, "eos_token_id": 255001,
        "hidden_act": "silu", "hidden_size": D, "initializer_range": 0.02,
        "intermediate_size": 176, "layer_norm_eps": 1e-05, "logit_scale": 0.0625,
        "max_position_embeddings": 64, "model_type": "cohere", "num_attention_heads": H,
        "num_hidden_layers": L, "num_key_value_heads": H, "pad_token_id": 0,
        "rope_theta": 8000000.0, "torch_dtype": "float16", "transformers_version": "4.40.0",
        "use_cache": True, "use_qk_norm": False, "vocab_size": V},
    # Command R+-like: grouped (2 K/V heads), the per-head QK-norm, model_max_length
    "command-r-plus": {
        "architectures": ["CohereForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 5, "eos_token_id": 255001,
        "hidden_act": "silu", "hidden_size": D, "initializer_range": 0.02,
        "intermediate_size": 176, "layer_norm_eps": 1e-05,
        "logit_scale": 0.8333333333333334, "max_position_embeddings": 64,
        "model_max_length": 128, "model_type": "cohere", "num_attention_heads": H,
        "num_hidden_layers": L, "num_key_value_heads": 2, "pad_token_id": 0,
        "rope_theta": 75000000.0, "torch_dtype": "bfloat16", "use_cache": True,
        "use_qk_norm": True, "vocab_size": V},
    # transformers 5's own spelling, defaults left out (tied, no biases, no QK-norm), plus
    # what the releases do not use: attention biases, an untied head, head_dim 8 (h·d_k = 32
    # is not hidden_size), QK-norm over 8-wide heads
    "cohere (biased, untied, head_dim)": {
        "model_type": "cohere", "hidden_size": D, "intermediate_size": 96,
        "max_position_embeddings": 64, "num_attention_heads": H, "num_hidden_layers": L,
        "num_key_value_heads": 1, "head_dim": 8, "attention_bias": True,
        "tie_word_embeddings": False, "use_qk_norm": True, "vocab_size": V,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
}
# What each means (read from modeling_cohere.py): K/V heads, head dim, MLP width, attention
# biases, QK-norm, tied head, logit_scale, bytes per cached element (torch_dtype).
SHAPES = {
    "command-r": dict(kv=H, dk=16, f=176, bias=0, qk=0, tied=True, scale=0.0625, bytes=2),
    "command-r-plus": dict(kv=2, dk=16, f=176, bias=0, qk=1, tied=True,
                           scale=0.8333333333333334, bytes=2),
    "cohere (biased, untied, head_dim)": dict(kv=1, dk=8, f=96, bias=1, qk=1, tied=False,
                                              scale=0.0625, bytes=4),
}


def params_by_hand(name: str) -> int:
    """nn.Linear(in, out, bias) = in·out (+ out): q, k, v, o_proj (bias=attention_bias on
    all four), gate/up/down_proj; CohereLayerNorm: its weight only, D per norm, one per
    block and the final one; the per-head QK-norm (heads + kv_heads)·head_dim."""
    s = SHAPES[name]
    kv, dk, f = s["kv"], s["dk"], s["f"]
    attn = D * (H + 2 * kv) * dk + H * dk * D + s["bias"] * ((H + 2 * kv) * dk + D) \
        + s["qk"] * (H + kv) * dk
    block = attn + 3 * D * f + D
    return V * D + L * block + D + (0 if s["tied"] else V * D)


def forward_matmul_flops_by_hand(name: str, T: int, B: int = 1) -> int:
    """2·m·n·p per matmul: the Q, K, V projections, QKᵀ and scores·V over the full T×T the
    eager attention computes (masked after), o_proj, the three MLP matrices, the head."""
    s = SHAPES[name]
    kv, dk, f = s["kv"], s["dk"], s["f"]
    per_layer = (2 * B * T * D * (H + 2 * kv) * dk + 2 * 2 * B * H * T * T * dk
                 + 2 * B * T * H * dk * D + 3 * 2 * B * T * D * f)
    return L * per_layer + 2 * B * T * D * V


def norm_flops_by_hand(T: int, B: int = 1) -> int:
    """The tool's LayerNorm without bias on one row of D: mean (D), x − mean (D), square
    (D), mean (D), + eps (1), sqrt (1), divide (D), × weight (D) = 6·D + 2; one norm per
    block (shared) and the final one."""
    return (L + 1) * B * T * (6 * D + 2)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_means_what_transformers_builds(name):
    c = translate(CONFIGS[name], "t", name).config
    s = SHAPES[name]
    assert (c.kv_heads, c.d_k, c.d_ff, c.qkv_bias, c.out_bias, c.mlp_bias) == \
        (s["kv"], s["dk"], s["f"], bool(s["bias"]), bool(s["bias"]), False)
    assert (c.norm, c.block, c.norm_placement, c.positions, c.mlp) == \
        ("layernorm_nobias", "parallel_shared_norm", "pre", "rope", "swiglu")
    assert c.qk_norm == ("per_head" if s["qk"] else "none")
    assert (c.tie_embeddings, c.logit_scale) == (s["tied"], s["scale"])
    assert c.rope_theta == CONFIGS[name].get("rope_theta", 10000.0)


def test_absent_keys_take_cohere_configs_defaults():
    # CohereConfig: logit_scale 0.0625, tie_word_embeddings True, use_qk_norm False,
    # layer_norm_eps 1e-5, default_theta 500,000, num_key_value_heads = heads
    c = translate({"model_type": "cohere", "hidden_size": D, "intermediate_size": 96,
                   "max_position_embeddings": 64, "num_attention_heads": H,
                   "num_hidden_layers": L, "vocab_size": V}, "t", "n").config
    assert (c.logit_scale, c.tie_embeddings, c.qk_norm, c.norm_eps, c.rope_theta,
            c.kv_heads) == (0.0625, True, "none", 1e-5, 500000.0, H)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameters_three_ways_and_flops_at_two_lengths(name):
    torch = pytest.importorskip("torch")
    c = translate(CONFIGS[name], "t", name).config
    assert analyze(c).param_count == params_by_hand(name)
    from model import TransformerLM
    assert sum(p.numel() for p in TransformerLM.from_config(c, device="meta").parameters()) \
        == params_by_hand(name)
    for T, B in ((8, 1), (24, 2)):
        a = analyze(c, seq=T, batch=B)
        assert a.matmul_flops("executed") == forward_matmul_flops_by_hand(name, T, B)
        assert a.elementwise_by_component()["LayerNorm (no bias)"] == norm_flops_by_hand(T, B)
        assert a.elementwise_by_component()["logit scale"] == B * T * V  # one × per logit
    transformers = pytest.importorskip("transformers")
    data = {k: v for k, v in CONFIGS[name].items() if k != "architectures"}
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert type(m).__name__ == "CohereForCausalLM"
    assert sum(p.numel() for p in m.parameters()) == params_by_hand(name)
    # what transformers built means the same: one norm per block, a weight and no bias;
    # QK-norm weights (heads, head_dim); RoPE frequencies for the whole head
    s = SHAPES[name]
    layer = m.model.layers[0]
    norms = [n for n, mod in layer.named_children() if "Norm" in type(mod).__name__]
    assert norms == ["input_layernorm"]
    assert [n for n, _ in layer.input_layernorm.named_parameters()] == ["weight"]
    if s["qk"]:
        assert tuple(layer.self_attn.q_norm.weight.shape) == (H, s["dk"])
        assert tuple(layer.self_attn.k_norm.weight.shape) == (s["kv"], s["dk"])
    assert 2 * m.model.rotary_emb.inv_freq.numel() == s["dk"]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_cross_check_agrees_with_every_counter(capsys, tmp_path, name):
    pytest.importorskip("transformers")
    T, B = 12, 1
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, CONFIGS[name])),
                       "--ctx", str(T), "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(name)
    s = SHAPES[name]  # past_key_values: K and V per layer, [B, kv_heads, T, head_dim]
    assert tf["kv_cache_bytes"]["transformers"] == L * 2 * B * s["kv"] * T * s["dk"] * s["bytes"]
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(name, T, B)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward
    assert flops[("forward", "not in any component")] == 0
    blocks = [c for c in x["layers"] if c["counter"] == "transformers"]
    assert [c["agreeing"] for c in blocks] == [L] * 2


def test_the_tools_norms_compute_transformers_cohere_layer_norm():
    """model/'s LayerNormNoBias and the per-head QK-norm equal transformers' own
    CohereLayerNorm on the same weights (the op form differs: rsqrt and multiply there)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.cohere.modeling_cohere import CohereLayerNorm
    from model.layers import LayerNormNoBias
    torch.manual_seed(0)
    for shape, tool in (((16,), LayerNormNoBias(16)), ((4, 8), LayerNormNoBias(8, heads=4))):
        theirs = CohereLayerNorm(shape, eps=1e-5)
        with torch.no_grad():
            tool.weight.copy_(torch.rand(shape) + 0.5)
            theirs.weight.copy_(tool.weight)
        x = torch.randn((2, 5) + shape) * 3 + 1
        assert [n for n, _ in tool.named_parameters()] == ["weight"]
        torch.testing.assert_close(tool(x), theirs(x))


# ---- the full-size models ---------------------------------------------------------------------
# Their config.json sizes: c4ai-command-r-v01 (35B: hidden 8192, 40 layers, 64 heads, 64 K/V
# heads, intermediate 22528, vocab 256000, logit_scale 0.0625, rope_theta 8e6) and
# c4ai-command-r-plus (104B: hidden 12288, 64 layers, 96 heads, 8 K/V heads, intermediate
# 33792, vocab 256000, logit_scale 0.8333…, rope_theta 7.5e7), as a public Cohere config table
# lists them (found with the search tool; the Hugging Face repos are gated). Command R+'s
# config.json sets use_qk_norm true (the key transformers added for it); that table says
# false, so both readings are counted here: the QK-norm is 64·(96 + 8)·128 = 851,968
# parameters, 0.0008% of the total.
COMMAND_R = {"model_type": "cohere", "hidden_size": 8192, "intermediate_size": 22528,
             "num_hidden_layers": 40, "num_attention_heads": 64, "num_key_value_heads": 64,
             "max_position_embeddings": 8192, "vocab_size": 256000, "logit_scale": 0.0625,
             "layer_norm_eps": 1e-05, "rope_theta": 8000000.0, "use_qk_norm": False,
             "tie_word_embeddings": True}
COMMAND_R_PLUS = {**COMMAND_R, "hidden_size": 12288, "intermediate_size": 33792,
                  "num_hidden_layers": 64, "num_attention_heads": 96, "num_key_value_heads": 8,
                  "logit_scale": 0.8333333333333334, "rope_theta": 75000000.0,
                  "use_qk_norm": True}


@pytest.mark.parametrize("data, expected", [
    # 256000·8192 + 40·(4·8192² + 3·8192·22528 + 8192) + 8192
    (COMMAND_R, 2_097_152_000 + 40 * (268_435_456 + 553_648_128 + 8192) + 8192),
    # 256000·12288 + 64·(2·12288² + 2·12288·1024 + 3·12288·33792 + 12288 + 104·128) + 12288
    (COMMAND_R_PLUS, 3_145_728_000 + 64 * (301_989_888 + 25_165_824 + 1_245_708_288 + 12288
                                           + 13_312) + 12288),
    ({**COMMAND_R_PLUS, "use_qk_norm": False},
     3_145_728_000 + 64 * (301_989_888 + 25_165_824 + 1_245_708_288 + 12288) + 12288),
], ids=["command-r-v01", "command-r-plus", "command-r-plus without QK-norm"])
def test_command_r_and_r_plus_full_size(data, expected):
    torch = pytest.importorskip("torch")
    c = translate(data, "t", "full").config
    assert analyze(c).param_count == expected
    assert round(expected / 1e9) == (35 if data is COMMAND_R else 104)  # the model cards' sizes
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert sum(p.numel() for p in m.parameters()) == expected


@pytest.mark.parametrize("name, changes, expected", [
    ("command-r", {"logit_scale": None}, "logit_scale"),
    ("command-r", {"use_qk_norm": "yes"}, "use_qk_norm must be true or false"),
    ("command-r", {"rope_scaling": {"rope_type": "su"}}, "rope_scaling"),
    ("command-r-plus", {"num_key_value_heads": 3}, "num_key_value_heads"),
    ("command-r", {"hidden_size": DELETE}, "hidden_size"),
])
def test_what_the_spec_cannot_mean_is_refused_in_one_line(capsys, tmp_path, name, changes,
                                                          expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, CONFIGS[name], changes)),
                        "--no-verify", expected=expected)


def test_flags_are_written_back_as_cohere_keys():
    from dataclasses import replace
    from accounting.architecture.hf_config import for_transformers
    r = translate(CONFIGS["command-r"], "t", "r")
    data, why = for_transformers(r, replace(r.config, qk_norm="per_head"))
    assert why == "" and data["use_qk_norm"] is True
    data, why = for_transformers(r, replace(r.config, qk_norm="head"))  # Qwen3's: not Cohere's
    assert data is None and "cannot be written" in why
