"""Hugging Face config.json in, for Cohere 2 (Command R7B, Command A; model_type cohere2): a
small config written as Command R7B's config.json is, read into the spec and counted against
hand algebra written here from transformers 5.23.0's modeling_cohere2.py, transformers' own
Cohere2ForCausalLM (meta device for parameters, the CPU for the cache) and the full
cross-check; the full-size Command R7B count by hand and on the meta device.

What modeling_cohere2.py builds (read there): Cohere's parallel block (Cohere2DecoderLayer:
ONE input_layernorm, a Cohere2LayerNorm with a weight and no bias, feeding self_attn and mlp,
both added to the block input), q/k/v/o_proj with bias=attention_bias and no QK-norm, a gated
MLP without biases, the head tied by default and the logits times logit_scale. Cohere2Config:
without layer_types, layer i is "sliding_attention" iff (i + 1) % sliding_window_pattern
(default 4); Cohere2Attention sets self.sliding_window = config.sliding_window on the sliding
layers (None elsewhere) and runs apply_rotary_pos_emb only where it is set: the global layers
have no RoPE (NoPE).
"""
import json

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, F, L, H, KV, DK, W = 256, 64, 96, 4, 4, 2, 16, 6  # vocab, hidden, MLP, layers, heads, K/V heads, head dim, window
LOCAL, GLOBAL = (0, 1, 2), (3,)  # sliding_window_pattern 4: layers 0-2 slide, layer 3 global
CONFIGS = {
    # Command R7B-like (c4ai-command-r7b-12-2024's keys, small sizes): grouped attention,
    # sliding_window_pattern 4, tied, logit_scale 0.25, and its keys no transformers module
    # reads (layer_switch, order_of_interleaved_layers, position_embedding_type, rotary_pct,
    # use_embedding_sharing, use_gated_activation, cache_implementation)
    "command-r7b": {
        "architectures": ["Cohere2ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 5, "cache_implementation": "hybrid",
        "eos_token_id": 255001, "head_dim": DK, "hidden_act": "silu", "hidden_size": D,
        "initializer_range": 0.02, "intermediate_size": F, "layer_norm_eps": 1e-05,
        "layer_switch": 4, "logit_scale": 0.25, "max_position_embeddings": 128,
        "model_type": "cohere2", "num_attention_heads": H, "num_hidden_layers": L,
        "num_key_value_heads": KV, "order_of_interleaved_layers": "local_attn_first",
        "pad_token_id": 0, "position_embedding_type": "rope_gptj", "rope_scaling": None,
        "rope_theta": 50000, "rotary_pct": 1.0, "sliding_window": W,
        "sliding_window_pattern": 4, "torch_dtype": "bfloat16", "use_cache": True,
        "use_embedding_sharing": True, "use_gated_activation": True, "vocab_size": V},
}
DATA = CONFIGS["command-r7b"]


def params_by_hand() -> int:
    """nn.Linear(in, out) = in·out: q (D → h·d_k), k and v (D → h_kv·d_k), o (h·d_k → D), the
    gated MLP's three D·F matrices; one Cohere2LayerNorm of D weights per block and the final
    one; the embedding, the head tied to it."""
    block = D * (H + 2 * KV) * DK + H * DK * D + 3 * D * F + D
    return V * D + L * block + D


def forward_matmul_flops_by_hand(T: int, B: int = 1) -> int:
    """2·m·n·p per matmul: Q, K, V, QKᵀ and scores·V over the full T×T (the eager core
    computes every pair and masks; a window masks more, it computes the same), o_proj, the
    MLP's three matrices, the head."""
    layer = (2 * B * T * D * (H + 2 * KV) * DK + 2 * 2 * B * H * T * T * DK
             + 2 * B * T * H * DK * D + 3 * 2 * B * T * D * F)
    return L * layer + 2 * B * T * D * V


def rope_flops_by_hand(T: int, B: int = 1) -> int:
    """The tool's RoPE per rotated layer: 4 multiplies, a subtract and an add per pair of
    each query and key head (3 per element of h·d_k + h_kv·d_k), on the sliding layers only."""
    return len(LOCAL) * B * T * 3 * (H + KV) * DK


def _meta_model(data):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(
            **{k: v for k, v in data.items() if k != "architectures"}))


def test_the_config_means_what_transformers_builds():
    c = translate(DATA, "t", "r7b").config
    assert (c.num_layers, c.num_heads, c.kv_heads, c.d_k, c.d_ff) == (L, H, KV, DK, F)
    assert (c.norm, c.block, c.qk_norm, c.tie_embeddings, c.logit_scale) == \
        ("layernorm_nobias", "parallel_shared_norm", "none", True, 0.25)
    assert tuple(i for i, k in enumerate(c.layer_kinds) if k.local) == LOCAL
    assert c.sliding_window == W and c.nope_layers == GLOBAL
    m = _meta_model(DATA)
    assert type(m).__name__ == "Cohere2ForCausalLM"
    # Cohere2Attention: the window (and with it RoPE) on exactly the spec's local layers
    assert [l.self_attn.sliding_window for l in m.model.layers] == \
        [W if i in LOCAL else None for i in range(L)]


def test_parameters_and_forward_flops_at_two_lengths():
    c = translate(DATA, "t", "r7b").config
    expected = params_by_hand()
    assert analyze(c).param_count == expected
    assert sum(p.numel() for p in _meta_model(DATA).parameters()) == expected
    for T, B in ((8, 1), (24, 2)):
        a = analyze(c, seq=T, batch=B)
        assert a.matmul_flops("executed") == forward_matmul_flops_by_hand(T, B)
    # RoPE on 3 of the 4 layers: the NoPE layer adds no rotation (a layer with RoPE everywhere
    # would count 4/3 of it)
    from dataclasses import replace
    T = 24
    with_rope = analyze(c, seq=T).elementwise_flops
    everywhere = analyze(replace(c, nope_layers=()), seq=T).elementwise_flops
    assert everywhere - with_rope == rope_flops_by_hand(T) // len(LOCAL)


@pytest.mark.parametrize("T,B", [(4, 2), (20, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """transformers' cache after a CPU forward of T tokens (fp32): per sliding layer K and V
    of h_kv·d_k for min(T, W − 1) tokens (DynamicSlidingWindowLayer keeps W − 1 between
    steps), the global layer K and V for T; the plan counts min(T, W) on a sliding layer
    (the cache while a step attends)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Cohere2Config(**{k: v for k, v in DATA.items()
                                        if k not in ("architectures", "model_type", "torch_dtype")})
    model = transformers.Cohere2ForCausalLM(cfg).eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values))
    assert held == B * 2 * KV * DK * (len(LOCAL) * min(T, W - 1) + len(GLOBAL) * T) * 4
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         str(T), "--batch", str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    planned = json.loads(out)["inference"]["kv_cache_bytes"]
    assert planned == B * 2 * KV * DK * (len(LOCAL) * min(T, W) + len(GLOBAL) * T) * 4
    if T < W:
        assert planned == held


@pytest.mark.parametrize("T", [4, 12])  # within the window, and beyond it
def test_verify_agrees_with_transformers(capsys, tmp_path, T):
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", str(T),
                       "--pass", "train")
    tf = x["transformers"]
    assert tf["agrees"] and tf["model_type"] == "cohere2"
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand()
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(T)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward


def test_layer_types_and_the_window_as_cohere2_derives_them():
    # Cohere2Config.__post_init__: an int pattern makes layer_types; layer_types wins
    data = {**DATA, "sliding_window_pattern": 2}
    c = translate(data, "t", "n").config
    assert [k.local for k in c.layer_kinds] == [True, False] * 2 and c.nope_layers == (1, 3)
    data = {**DATA, "layer_types": ["full_attention", "sliding_attention"] * 2}
    c = translate(data, "t", "n").config
    assert [k.local for k in c.layer_kinds] == [False, True] * 2 and c.nope_layers == (0, 2)
    # absent: sliding_window_pattern 4 (Cohere2Config pops it with default 4)
    data = {k: v for k, v in DATA.items() if k != "sliding_window_pattern"}
    assert translate(data, "t", "n").config.nope_layers == GLOBAL
    # every layer full_attention: Cohere2Attention has no window, so no RoPE on any layer
    data = {**DATA, "layer_types": ["full_attention"] * L}
    c = translate(data, "t", "n").config
    assert c.sliding_window is None and c.nope_layers == tuple(range(L))
    assert all(l.self_attn.sliding_window is None for l in _meta_model(data).model.layers)


@pytest.mark.parametrize("changes, expected", [
    ({"layer_types": ["full_attention"] * 3}, "layer_types must list 4"),
    ({"sliding_window_pattern": 0}, "sliding_window_pattern"),
    # sliding layers without a window: DynamicSlidingWindowLayer fails on None (cache_utils)
    ({"sliding_window": None}, "no window"),
    ({"rope_scaling": {"rope_type": "su", "factor": 2.0}}, "rope_scaling"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
])
def test_what_the_spec_cannot_mean_is_refused_in_one_line(capsys, tmp_path, changes, expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, DATA, changes)),
                        "--no-verify", expected=expected)


# Command R7B (CohereLabs/c4ai-command-r7b-12-2024 config.json, as its model card's module
# listing shows: Embedding(256000, 4096), q/o_proj 4096 → 4096, k/v_proj 4096 → 1024,
# gate/up_proj 4096 → 14336, 32 Cohere2DecoderLayer; tied; sliding_window 4096, pattern 4)
COMMAND_R7B = {"model_type": "cohere2", "vocab_size": 256000, "hidden_size": 4096,
               "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 132096,
               "sliding_window": 4096, "sliding_window_pattern": 4, "logit_scale": 0.25,
               "rope_theta": 50000, "pad_token_id": 0}


def test_full_size_command_r7b():
    # 256000·4096 + 32·(4096·48·128 + 4096·4096 + 3·4096·14336 + 4096) + 4096 (tied)
    expected = 1_048_576_000 + 32 * (25_165_824 + 16_777_216 + 176_160_768 + 4096) + 4096
    assert expected == 8_028_033_024
    c = translate(COMMAND_R7B, "t", "full").config
    assert analyze(c).param_count == expected and c.nope_layers == tuple(range(3, 32, 4))
    # the model card's "7 billion parameters" is the count without the 1.05 B embedding
    assert round((expected - 256000 * 4096) / 1e9) == 7
    assert sum(p.numel() for p in _meta_model(COMMAND_R7B).parameters()) == expected
