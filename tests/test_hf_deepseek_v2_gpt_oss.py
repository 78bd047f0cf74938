"""deepseek_v2 and gpt_oss config.json files (issue 24): each read into the spec and counted
three ways — the ledger, the tool's model/ and transformers' own model — against hand
algebra written from transformers 5.23.0's modeling files (tests/hf_h3_examples.py);
malformed files refused in one line; the released checkpoints' configs at full size
(parameters by hand, by transformers, and as published).
"""
import json

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from accounting.architecture.loaders import config_from_json
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import DELETE, write_config
from hf_h3_examples import (CONFIGS, PUBLISHED, RELEASED, forward_matmul_flops_by_hand,
                            kv_bytes_by_hand, params_by_hand)


def write(tmp_path, name: str, changes: dict | None = None):
    return write_config(tmp_path, CONFIGS[name], changes)


# ---- (a) the translation means what transformers builds ----------------------------------

def test_deepseek_v2_means_what_transformers_builds(tmp_path):
    c = config_from_json(write(tmp_path, "deepseek_v2"))
    # DeepseekV2DecoderLayer: MoE from first_k_dense_replace (1) on; latent attention with a
    # plain q_proj (q_lora_rank null); DeepseekV2TopkRouter: softmax, group_limited_greedy by
    # each group's max, never renormalised, × routed_scaling_factor
    assert [k.moe for k in c.layer_kinds] == [False, True, True]
    assert (c.num_experts, c.experts_per_token, c.expert_d_ff, c.num_shared_experts) == (8, 2, 16, 2)
    assert (c.router, c.router_bias, c.router_groups, c.router_topk_groups) == ("softmax", False, 4, 2)
    assert (c.router_group_score, c.norm_topk_prob, c.routed_scaling_factor) == ("max", False, 16.0)
    assert (c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim,
            c.v_head_dim) == (None, 12, 8, 4, 6)
    assert not (c.qkv_bias or c.out_bias or c.router_topk_first or c.expert_bias)
    # greedy: n_group and topk_group are not read (DeepseekV2TopkRouter's other branch)
    g = config_from_json(write(tmp_path, "deepseek_v2 (query latent, greedy)"))
    assert (g.router_groups, g.router_topk_groups, g.q_lora_rank) == (1, 1, 14)
    assert g.qkv_bias and g.out_bias and all(k.moe for k in g.layer_kinds)


def test_gpt_oss_means_what_transformers_builds(tmp_path):
    c = config_from_json(write(tmp_path, "gpt_oss"))
    # GptOssAttention: biased q/k/v/o, 2 KV heads of head_dim 8, sinks; layer_types as given
    assert (c.num_kv_heads, c.d_k, c.qkv_bias, c.out_bias, c.attention_sinks) == (2, 8, True, True, True)
    assert [k.local for k in c.layer_kinds] == [True, False, True] and c.sliding_window == 4
    # GptOssMLP on every layer: biased router, top-k then softmax; biased experts of
    # intermediate_size with the clamped SwiGLU; no shared expert
    assert all(k.moe for k in c.layer_kinds)
    assert (c.num_experts, c.experts_per_token, c.expert_d_ff, c.num_shared_experts) == (8, 2, 16, 0)
    assert (c.router, c.router_topk_first, c.router_linear_bias, c.expert_bias) == ("softmax", True, True, True)
    assert (c.mlp, c.norm_topk_prob, c.router_bias, c.tie_embeddings) == ("swiglu_clamped", False, False, False)
    d = config_from_json(write(tmp_path, "gpt_oss (defaults)"))
    # GptOssConfig.__post_init__: the even layers slide; attention_bias defaults to true
    assert [k.local for k in d.layer_kinds] == [True, False, True, False]
    assert d.qkv_bias and d.out_bias and d.num_kv_heads == 4


# ---- (b) parameters: hand algebra = the ledger = model/ = transformers ----------------------

@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameters_by_hand(tmp_path, name):
    c = config_from_json(write(tmp_path, name))
    a = analyze(c)
    assert a.param_count == params_by_hand(CONFIGS[name])
    assert a.active_param_count == params_by_hand(CONFIGS[name], active=True)
    import torch  # noqa: F401  (model/ needs it)
    from model import TransformerLM
    m = TransformerLM.from_config(c, device="meta")
    assert sum(p.numel() for p in m.parameters()) == params_by_hand(CONFIGS[name])


def test_the_released_checkpoints_have_the_published_parameters():
    # full size: the ledger, transformers' model on the meta device and hand algebra agree,
    # and round to what DeepSeek and OpenAI publish (within one unit of the last digit given)
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    for name, data in RELEASED.items():
        a = analyze(translate(data, name, name).config)
        total, active = params_by_hand(data), params_by_hand(data, active=True)
        assert (a.param_count, a.active_param_count) == (total, active), name
        assert sum(p.numel() for p in build(data).parameters()) == total, name
        embedding = data["vocab_size"] * data["hidden_size"]  # published active: without it
        for value, (published, digits) in zip((total, active - embedding), PUBLISHED[name]):
            assert abs(value / 1e9 - published) < 10 ** -digits, (name, value, published)


# ---- (c) forward matmul FLOPs at two lengths; every counter, transformers' included ----------

@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("T,B", [(5, 1), (8, 2)])
def test_forward_matmul_flops_by_hand(tmp_path, name, T, B):
    a = analyze(config_from_json(write(tmp_path, name)), T, B)
    assert sum(r.flops for r in a.matmul_rows) == forward_matmul_flops_by_hand(CONFIGS[name], T, B)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_three_ways_each_config(capsys, tmp_path, name):
    pytest.importorskip("transformers")
    # T = 8 > every window (a sliding layer's cache keeps W − 1); B·T·k a multiple of E where
    # it can be (the tool's model on meta deals the slots evenly)
    T, B = 8, 2
    x = agreeing_check(capsys, "--config", str(write(tmp_path, name)), "--ctx", str(T),
                       "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(CONFIGS[name])
    assert tf["kv_cache_bytes"]["transformers"] == kv_bytes_by_hand(CONFIGS[name], T, B)
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(CONFIGS[name], T, B)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward
    assert flops[("forward", "not in any component")] == 0
    L = CONFIGS[name]["num_hidden_layers"]
    assert [c["agreeing"] for c in x["layers"] if c["counter"] == "transformers"] == [L, L]
    shrunk = [c for c in tf["checks"] if c["claim"].startswith("shrunk, CPU")]
    assert len(shrunk) == 4 and all(c["holds"] for c in shrunk)
    if name.startswith("gpt_oss"):  # the sinks: h per layer, the attention core's parameters
        assert params["attention core"] == L * CONFIGS[name]["num_attention_heads"]
        assert any(n.startswith("Attention sinks") for n in tf["notes"])


# ---- refused in one line ------------------------------------------------------------------

MALFORMED = [
    ("deepseek_v2", {"norm_topk_prob": True}, "norm_topk_prob = True means renormalised top-k "
                                              "weights, which transformers' DeepseekV2TopkRouter"),
    ("deepseek_v2", {"scoring_func": "sigmoid"}, "scoring_func = 'sigmoid' means a router"),
    ("deepseek_v2", {"topk_method": "noaux_tc"}, "topk_method must be one of greedy, "
                                                 "group_limited_greedy"),
    ("deepseek_v2", {"n_group": None}, "group_limited_greedy needs n_group and topk_group"),
    ("deepseek_v2", {"mlp_bias": True}, "mlp_bias = True means biases on the dense and "
                                        "shared-expert MLPs"),
    ("deepseek_v2", {"moe_layer_freq": 2}, "moe_layer_freq = 2 means MoE in only some layers"),
    ("deepseek_v2", {"num_key_value_heads": 2}, "num_key_value_heads = 2 means K and V repeated"),
    ("deepseek_v2", {"attention_bias": True}, "attention_bias = True means biases on "
                                              "kv_a_proj_with_mqa and o_proj but not on q_proj"),
    ("deepseek_v2", {"num_experts_per_tok": DELETE}, "missing num_experts_per_tok"),
    ("deepseek_v2", {"n_group": 3}, "router_groups 3 must divide num_experts 8"),
    ("gpt_oss", {"sliding_window": None}, "layers of sliding attention but no window"),
    ("gpt_oss", {"layer_types": ["full_attention"]}, "layer_types must list 3 entries"),
    ("gpt_oss", {"experts_per_token": 3}, "experts_per_token = 3 means a top-k transformers "
                                          "ignores"),
    ("gpt_oss", {"head_dim": None}, "head_dim must be a positive integer"),
    ("gpt_oss", {"quantization_config": {"quant_method": "gptq"}},
     "means a quantized checkpoint"),
    ("gpt_oss", {"swiglu_alpha": "x"}, "swiglu_alpha = 'x' is not a number"),
    ("gpt_oss", {"kv_lora_rank": 8}, "a multi-head latent attention key, which this model_type "
                                     "does not build (deepseek_v2 and deepseek_v3 do)"),
]


@pytest.mark.parametrize("name,changes,expected", MALFORMED,
                         ids=[f"{n}-{'-'.join(c)}" for n, c, _ in MALFORMED])
def test_malformed_configs_are_refused_in_one_line(capsys, tmp_path, name, changes, expected):
    refused_in_one_line(capsys, "--config", str(write(tmp_path, name, changes)), "--no-verify",
                        expected=expected)


def test_the_output_says_what_is_not_counted(capsys, tmp_path):
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "gpt_oss", {"swiglu_alpha": 2.0})),
                       "--no-verify")
    assert code == 0
    assert "swiglu_alpha = 2.0: the clamped SwiGLU's constants change no count" in out
    assert "quantization_config mxfp4: the checkpoint stores the experts' matrices in MXFP4" in out
    assert "2 of 3 layers attend a sliding window of 4 (layer_types)." in out
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "deepseek_v2 (query latent, greedy)")),
                       "--no-verify")
    assert code == 0 and "topk_method greedy: n_group 2 and topk_group 1 are not read" in out


def test_flags_are_written_back_as_the_keys_that_mean_them():
    from dataclasses import replace

    from accounting.architecture.hf_config import for_transformers
    h = translate(CONFIGS["deepseek_v2"], "t", "t")
    data, why = for_transformers(h, replace(h.config, router_groups=2, router_topk_groups=1))
    assert why == "" and (data["topk_method"], data["n_group"], data["topk_group"]) == \
        ("group_limited_greedy", 2, 1)
    data, why = for_transformers(h, replace(h.config, router_groups=1, router_topk_groups=1))
    assert why == "" and data["topk_method"] == "greedy"
    o = translate(CONFIGS["gpt_oss"], "t", "t")
    data, why = for_transformers(o, replace(o.config, layer_types=("global", "local", "local")))
    assert why == "" and data["layer_types"] == ["full_attention", "sliding_attention",
                                                 "sliding_attention"]
    data, why = for_transformers(o, replace(o.config, attention_sinks=False))
    assert data is None and "attention_sinks is fixed by model_type gpt_oss" in why
    assert json.dumps(data) == "null"
