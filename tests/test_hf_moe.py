"""Hugging Face config.json in, for mixtures of experts (mixtral, qwen3_moe, deepseek_v3),
latent attention (deepseek_v3) and sliding windows (mistral, mixtral, qwen2, qwen3): each
read into the spec and counted three ways — the ledger, the tool's model/ and transformers'
own model — against hand algebra (tests/hf_moe_examples.py); malformed configs refused in
one line; the shipped checkpoints' configs at full size in transformers (parameters) and at
two layers through the whole cross-check.
"""
import json
import re

import pytest

from accounting import analyze
from cli_run import agreeing_check, run
from accounting.architecture.loaders import config_from_json
from accounting.architecture.own_format import read_json
from accounting.architecture.hf_config import PACKAGED, translate
from hf_examples import DELETE, write_config
from hf_moe_examples import (CONFIGS, SHAPES, forward_matmul_flops_by_hand, kv_bytes_by_hand,
                             params_by_hand)



def write(tmp_path, name: str, changes: dict | None = None, data: dict | None = None):
    return write_config(tmp_path, CONFIGS[name] if data is None else data, changes)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_means_what_transformers_builds(tmp_path, name):
    c = config_from_json(write(tmp_path, name))
    s = SHAPES[name]
    kinds = c.layer_kinds
    assert tuple(i for i, k in enumerate(kinds) if k.moe) == s["moe"]
    assert tuple(i for i, k in enumerate(kinds) if k.local) == s["local"]
    if s["local"]:
        assert c.sliding_window == s["W"]
    if s["moe"]:
        assert (c.num_experts, c.experts_per_token, c.expert_d_ff, c.num_shared_experts) == \
            (s["E"], s["k"], s["f_e"], s["shared"])
        assert c.router == ("sigmoid" if "mla" in s else "softmax")
        assert c.router_bias == ("mla" in s)  # DeepSeek-V3's e_score_correction_bias
    if "mla" in s:
        m = s["mla"]
        assert (c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim,
                c.v_head_dim) == (m["r_q"], m["r_kv"], m["nope"], m["rope"], m["v"])
    assert c.qk_norm == ("head" if s["qk"] else "none")
    a = analyze(c)
    assert a.param_count == params_by_hand(name)
    assert a.active_param_count == params_by_hand(name, active=True)
    import torch  # noqa: F401  (model/ needs it)
    from model import TransformerLM
    m = TransformerLM.from_config(c, device="meta")
    assert sum(p.numel() for p in m.parameters()) == params_by_hand(name)


def test_the_translation_says_how_it_read_the_rules(capsys, tmp_path):
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "qwen3_moe")), "--no-verify")
    table = out.split("Read from config.json")[1].split("\n\n")[0]
    assert code == 0
    rules = [re.split(r"\s{2,}", line.strip())[2:] for line in table.splitlines()
             if "the keys marked → (rule)" in line]
    assert rules == [["num_experts", "8"], ["dense_layers", "1"],
                     ["sliding_window", "null (no window)"], ["layer_types", "every layer global"]]
    marked = [line.split()[0] for line in table.splitlines() if "→ (rule)" in line
              and not line.startswith("(rule)")]
    assert marked == ["num_experts", "decoder_sparse_step", "mlp_only_layers", "use_sliding_window",
                      "sliding_window"]
    assert "1 of 3 layers keep a dense MLP of intermediate_size" in table
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "qwen2")), "--no-verify")
    assert "sliding window 4 on 2 of 3 layers (use_sliding_window true: layers 1 and up" in out
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "mistral", {"sliding_window": DELETE})),
                       "--no-verify")
    assert code == 0 and "sliding window 4,096" in out
    assert "sliding_window absent: transformers' MistralConfig default, a 4,096-token window" in out
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "deepseek_v3")), "--no-verify")
    # issue 31: the MTP module is read (mtp_layers) and counted beside the total
    assert "MTP modules:   1 module of" in out and "not in the total" in out
    assert "rope_scaling yarn: rescales RoPE's frequencies (changes no count)" in out


def test_the_shipped_deepseek_v3_config_says_what_it_counts(capsys):
    code, out, _ = run(capsys, "deepseek-ai/DeepSeek-V3", "--no-verify", "--ctx", "4096",
                       "--format", "json")
    p = json.loads(out)["parameters"]
    assert code == 0 and (p["total"], p["active_per_token"]) == (671_026_404_352, 37_552_282_624)
    code, out, _ = run(capsys, "--config", str(PACKAGED / "deepseek-ai/DeepSeek-V3.json"),
                       "--no-verify")
    assert "quantization_config fp8: the checkpoint stores most matrices in float8" in out
    assert "transformers' causal LM does not build them" in out  # the MTP line (issue 31)
    assert "Accepted as count-free: architectures, attention_dropout" not in out  # noted, not free
    assert "ep_size" in out.split("Accepted as count-free:")[1]


MALFORMED = [
    ("mixtral", {"num_experts_per_tok": 5}, "experts_per_token (top-k) 5 is more than num_experts 4"),
    ("mixtral", {"num_local_experts": DELETE}, "missing num_local_experts"),
    ("mixtral", {"num_local_experts": 0}, "num_local_experts must be a positive integer"),
    ("qwen3_moe", {"decoder_sparse_step": 0}, "decoder_sparse_step must be a positive integer"),
    ("qwen3_moe", {"mlp_only_layers": ["1"]}, "mlp_only_layers must list layer indices"),
    ("qwen3_moe", {"num_key_value_heads": None}, "num_key_value_heads must be a positive integer"),
    ("qwen3_moe", {"use_sliding_window": True, "sliding_window": None},
     "layers of sliding attention but no window"),
    ("deepseek_v3", {"qk_nope_head_dim": DELETE}, "missing qk_nope_head_dim"),
    ("deepseek_v3", {"kv_lora_rank": None}, "kv_lora_rank must be a positive integer"),
    ("deepseek_v3", {"num_key_value_heads": 2}, "num_key_value_heads = 2 means K and V repeated"),
    ("deepseek_v3", {"scoring_func": "softmax"}, "scoring_func = 'softmax' means a router "
                                                 "transformers' DeepseekV3 does not build"),
    ("deepseek_v3", {"topk_method": "greedy"}, "topk_method = 'greedy' means a routing"),
    ("deepseek_v3", {"moe_layer_freq": 2}, "moe_layer_freq = 2 means MoE in only some layers"),
    ("deepseek_v3", {"quantization_config": {"quant_method": "gptq", "bits": 4}},
     "quantization_config = {'quant_method': 'gptq', 'bits': 4} means a quantized checkpoint"),
    ("deepseek_v3", {"attention_bias": True, "q_lora_rank": None},
     "attention_bias = True means biases on kv_a_proj_with_mqa and o_proj but not on q_proj"),
    ("deepseek_v3", {"n_group": 3}, "router_groups 3 must divide num_experts 8, and "
                                    "router_topk_groups 2 be at most router_groups [in config.json"),
    ("deepseek_v3", {"n_group": 8, "topk_group": 8}, "n_group 8 leaves 1 expert per group"),
    ("deepseek_v3", {"topk_group": 1, "num_experts_per_tok": 3}, "top-3 cannot be chosen from 1 "
                                                                 "groups of 2 experts"),
    ("deepseek_v3", {"first_k_dense_replace": -1}, "first_k_dense_replace must be a non-negative"),
    ("deepseek_v3", {"sliding_window": 4}, "unknown key(s) 'sliding_window'"),
    # gemma3 wraps its language model in text_config: a flat file's experts are refused there
    ("mixtral", {"model_type": "gemma3"}, "(gemma3): num_local_experts = 4 is a "
                                          "mixture-of-experts key"),
    ("qwen3_moe", {"layer_types": ["full_attention"] * 3}, "unknown key(s) 'layer_types'"),
]


@pytest.mark.parametrize("name,changes,expected", MALFORMED,
                         ids=[f"{n}-{'-'.join(c)}" for n, c, _ in MALFORMED])
def test_malformed_configs_are_refused_in_one_line(capsys, tmp_path, name, changes, expected):
    # --strict: an unknown key is refused as such, not judged (tests/test_hf_hubconfigs.py)
    code, out, err = run(capsys, "--config", str(write(tmp_path, name, changes)), "--no-verify",
                         "--strict")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err


def test_every_new_type_names_every_module_the_ledger_has():
    from accounting.crosscheck.hf_compare import module_map
    from accounting.ledger.ledger import ledger
    for name in CONFIGS:
        h = translate(CONFIGS[name], "t", name)
        mm = module_map(ledger(h.config), h.type.names)
        assert mm.params and mm.block and mm.top
    h = translate(CONFIGS["deepseek_v3"], "t", "d")
    mm = module_map(ledger(h.config), h.type.names)
    assert mm.block["mlp.experts"][1] == ("ffn.experts",)
    assert mm.block["self_attn.kv_a_proj_with_mqa"][1] == ("attn.kv_a_proj",)
    assert mm.params["model.layers.2.mlp.shared_experts.up_proj"] == "feed-forward"


# ---- transformers' own model ----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_three_ways_each_config(capsys, tmp_path, name):
    pytest.importorskip("transformers")
    # T > every window here (the cache keeps W − 1 tokens of a sliding layer); B·T·k a
    # multiple of E (the tool's model on meta deals the slots evenly: one batched matmul)
    T, B = 8, 2
    x = agreeing_check(capsys, "--config", str(write(tmp_path, name)), "--ctx", str(T),
                       "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(name)
    assert tf["kv_cache_bytes"]["transformers"] == kv_bytes_by_hand(name, T, B)
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(name, T, B)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward
    assert flops[("forward", "not in any component")] == 0
    blocks = [c for c in x["layers"] if c["counter"] == "transformers"]
    assert [c["agreeing"] for c in blocks] == [SHAPES[name]["L"]] * 2
    shrunk = [c for c in tf["checks"] if c["claim"].startswith("shrunk, CPU")]
    if SHAPES[name]["moe"]:  # eager (2 routings), grouped_mm, batched_mm: all hold
        assert len(shrunk) == 4 and all(c["holds"] for c in shrunk)
        assert any("grouped_mm" in n and "no formula for aten._grouped_mm" in n
                   for n in tf["notes"])
    else:
        assert not shrunk


def test_the_grouped_mm_gap_is_the_experts_exactly():
    # transformers' default experts (grouped_mm) on CPU: FlopCounterMode misses exactly the
    # routed experts' matmuls, by hand: 2 FLOPs per multiply-add, B·T·k rows of 3·d·f_e per
    # MoE layer, and twice that in backward
    pytest.importorskip("transformers")
    from accounting.crosscheck import hf_experts
    x = hf_experts.check(CONFIGS["mixtral"], seq=8, batch=2)
    rows = 2 * 8 * 2  # B·T·k
    experts = 2 * rows * 3 * 32 * 48  # one layer of the shrunk width 48 (SHRINK), d_model 32
    assert x.experts == (experts, 2 * experts)
    grouped = next(r for r in x.runs if r.implementation == "grouped_mm")
    assert (grouped.forward, grouped.backward) == (x.ledger[0] - experts, x.ledger[1] - 2 * experts)
    eager = [r for r in x.runs if r.implementation == "eager"]
    assert {r.routing for r in eager} == {hf_experts.OWN, hf_experts.FORCED}
    assert all((r.forward, r.backward) == x.ledger for r in eager)


SHIPPED = ("Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3", "mistralai/Mixtral-8x7B-v0.1",
           "mistralai/Mistral-7B-v0.1")


def test_transformers_builds_the_shipped_configs_with_the_published_parameters():
    # full size, on the meta device: transformers' own parameter count of each shipped
    # config.json is the hand algebra of tests/test_presets.py (DeepSeek-V3's published
    # 671,026,419,200 counts its router biases, buffers in transformers: 58·256)
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    from test_presets import BUFFERS_COUNTED, PUBLISHED
    for name in SHIPPED:
        data, _ = read_json(PACKAGED / f"{name}.json")
        model = build(data)
        assert sum(p.numel() for p in model.parameters()) == \
            PUBLISHED[name][1] - BUFFERS_COUNTED.get(name, 0), name
        if name == "deepseek-ai/DeepSeek-V3":
            biases = [b for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")]
            assert len(biases) == 58 and sum(b.numel() for b in biases) == 58 * 256
            assert len(model.model.layers) == 61  # no MTP layer built


@pytest.mark.parametrize("name", SHIPPED[:3])
def test_the_shipped_moe_configs_at_two_layers_agree_with_transformers(capsys, tmp_path, name):
    # test_architectures' 256-token meta cross-check of every preset skips these (Qwen3-30B-A3B
    # 15 s, DeepSeek-V3 28 s, Mixtral 4–7 s there); here each shipped config.json, as shipped
    # but for its depth (two layers; DeepSeek-V3: one dense and one MoE), goes through every
    # counter, transformers' included (forward: the backward of each model_type runs above,
    # test_three_ways_each_config).
    pytest.importorskip("transformers")
    data, _ = read_json(PACKAGED / f"{name}.json")
    data = {**data, "num_hidden_layers": 2}
    if "first_k_dense_replace" in data:
        data["first_k_dense_replace"] = 1
    p = write(tmp_path, "mixtral", data=data)
    # T·k = E: the tool's model on meta deals the slots to the experts evenly, one batched
    # matmul (cheaper than a loop over mostly empty experts; the count is the same)
    E = next(data[k] for k in ("n_routed_experts", "num_experts", "num_local_experts") if k in data)
    T = E // data["num_experts_per_tok"]
    code, out, err = run(capsys, "--config", str(p), "--ctx", str(T), "--verify", "--format",
                         "json")
    assert code == 0, err
    x = json.loads(out)["cross_check"]
    assert x["agrees"], x["disagreements"]
    assert x["transformers"]["agrees"]


def test_flags_on_the_new_types_are_written_back_for_transformers():
    # the fields a rule derives are written as the keys that mean them, or refused with why
    from dataclasses import replace

    from accounting.architecture.hf_config import for_transformers
    from accounting.architecture.presets import PRESETS, hf_source
    ds = hf_source("deepseek-ai/DeepSeek-V3")
    c = replace(PRESETS["deepseek-ai/DeepSeek-V3"], num_layers=2, dense_layers=(0,))
    data, why = for_transformers(ds, c)
    assert why == "" and (data["num_hidden_layers"], data["first_k_dense_replace"]) == (2, 1)
    data, why = for_transformers(ds, replace(c, num_layers=3, dense_layers=(1,)))
    assert data is None and why == ("dense_layers as changed cannot be written as "
                                    "first_k_dense_replace of deepseek_v3")
    qm = hf_source("Qwen/Qwen3-30B-A3B")
    c = replace(PRESETS["Qwen/Qwen3-30B-A3B"], num_layers=3, dense_layers=(1,), sliding_window=8)
    data, why = for_transformers(qm, c)
    assert why == "" and (data["mlp_only_layers"], data["use_sliding_window"],
                          data["sliding_window"]) == ([1], True, 8)
    q3 = hf_source("Qwen/Qwen3-8B")
    c = replace(PRESETS["Qwen/Qwen3-8B"], num_layers=2, sliding_window=8,
                layer_types=("local", "global"))
    data, why = for_transformers(q3, c)
    assert why == "" and data["layer_types"] == ["sliding_attention", "full_attention"]
    assert translate(data, "t", "t").config.layer_types == ("local", "global")
