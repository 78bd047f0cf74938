"""Hub config.json files as they are written (issue 24): count-free keys of real files
accepted (SmolLM2-135M, distilgpt2), a llama with hidden_act "gelu" (the gated exact GELU,
geglu_erf) counted three ways, Mixtral's num_experts alias read, keys in no list judged by
building transformers' model with and without them (--strict: refused), and the supported
model_types stated once.
"""
import json

import pytest

from accounting import analyze
from accounting.runtime.errors import UsageError
from accounting.architecture.hf_config import TYPES, translate
from accounting.architecture.loaders import config_from_json
from cli_run import agreeing_check, run

# HuggingFaceTB/SmolLM2-135M's config.json, verbatim as two public GitHub copies quote it
# (find_string ids 38454145828, a SmolLMV2-Base README "SmolLMv2 Configuration Used", and
# 62458357273, a TinyStories fine-tuning README; the same keys and values as the LlamaConfig
# printouts ids 15017815005 and 32455597214, which add only _name_or_path, head_dim, mlp_bias
# and report "Total Parameters: 134,515,008").
SMOLLM2_135M = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
    "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
    "is_llama_config": True, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False,
    "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "vocab_size": 49152}

# distilbert/distilgpt2's config.json as saved by transformers 4.50 (with _num_labels, as the
# Hub file has it): SUPREME10-UI/SUPREME10-UI distilgpt2/config.json at commit
# e230da788c28ad6d5071fc4d76a5bbc9a77c4568, verbatim.
DISTILGPT2 = {
    "_num_labels": 1, "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "id2label": {"0": "LABEL_0"}, "initializer_range": 0.02, "label2id": {"LABEL_0": 0},
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_inner": None, "n_layer": 6, "n_positions": 1024,
    "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
    "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
    "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
    "summary_type": "cls_index", "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "torch_dtype": "float32", "transformers_version": "4.50.3", "use_cache": True,
    "vocab_size": 50257}


def smollm2_by_hand() -> int:
    """LlamaForCausalLM (modeling_llama.py): embed_tokens V·d (tied: lm_head shares it);
    per layer q_proj, o_proj d·d, k_proj, v_proj d·(h_kv·d/h), gate/up/down 3·d·f, two
    RMSNorm gains d; the final norm d."""
    V, d, L, h, kv, f = 49152, 576, 30, 9, 3, 1536
    hd = d // h  # 64
    layer = 2 * d * d + 2 * d * kv * hd + 3 * d * f + 2 * d
    return V * d + L * layer + d


def distilgpt2_by_hand() -> int:
    """GPT2LMHeadModel (modeling_gpt2.py): wte V·d, wpe P·d, per block ln_1, ln_2 (2·d
    each), c_attn d·3d + 3d, attn.c_proj d·d + d, mlp.c_fc d·4d + 4d, mlp.c_proj 4d·d + d;
    ln_f 2·d; lm_head tied to wte."""
    V, P, d, L = 50257, 1024, 768, 6
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    return V * d + P * d + L * block + 2 * d


def _write(tmp_path, data: dict, name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


@pytest.mark.parametrize("data,by_hand,published,free", [
    (SMOLLM2_135M, smollm2_by_hand, 134_515_008, ("is_llama_config", "rope_interleaved")),
    (DISTILGPT2, distilgpt2_by_hand, 81.9e6, ("_num_labels",))])
def test_hub_files_read_as_written(capsys, tmp_path, data, by_hand, published, free):
    n = by_hand()
    assert n == published if isinstance(published, int) else round(n / 1e6, 1) * 1e6 == published
    assert n == (134_515_008 if data is SMOLLM2_135M else 81_912_576)
    code, out, err = run(capsys, "--config", _write(tmp_path, data), "--no-verify", "--strict")
    assert code == 0, err
    accepted = next(line for line in out.splitlines() if line.startswith("Accepted as count-free"))
    assert all(k in accepted for k in free)
    assert analyze(config_from_json(_write(tmp_path, data))).param_count == n


def test_hub_files_parameters_in_transformers():
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    for data, by_hand in ((SMOLLM2_135M, smollm2_by_hand), (DISTILGPT2, distilgpt2_by_hand)):
        assert sum(p.numel() for p in build(data).parameters()) == by_hand()


# ---- llama with hidden_act "gelu": a gated MLP with the exact (erf) GELU ------------------
GELU_LLAMA = {"model_type": "llama", "vocab_size": 96, "hidden_size": 64,
              "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 64, "hidden_act": "gelu"}


def _gelu_llama_params() -> int:
    """LlamaForCausalLM: untied embed_tokens and lm_head V·d each; per layer q, o d·d, k, v
    d·h_kv·d_k, LlamaMLP gate/up/down 3·d·f, two gains d; the final norm d."""
    V, d, L, kv, dk, f = 96, 64, 2, 2, 16, 80
    return 2 * V * d + L * (2 * d * d + 2 * d * kv * dk + 3 * d * f + 2 * d) + d


def _gelu_llama_matmul_flops(T: int, B: int = 1) -> int:
    """2 FLOPs per multiply-add: per layer and token the projections (2·d² + 2·d·h_kv·d_k)
    and the three MLP matrices (3·d·f), the attention core 2·h·T²·d_k per sequence (the full
    T×T scores, executed), and the LM head d·V per token."""
    V, d, L, h, kv, dk, f = 96, 64, 2, 4, 2, 16, 80
    per_token = L * (2 * d * d + 2 * d * kv * dk + 3 * d * f) + d * V
    return 2 * (B * T * per_token + L * 2 * B * h * T * T * dk)


def test_llama_gelu_is_the_gated_exact_gelu(tmp_path):
    c = config_from_json(_write(tmp_path, GELU_LLAMA))
    assert (c.mlp, c.mlp_kind.gated, c.mlp_kind.activation) == ("geglu_erf", True, "gelu")
    L, f = 2, 80
    for T in (8, 24):
        a = analyze(c, T)
        assert a.param_count == _gelu_llama_params()
        assert a.matmul_flops() == _gelu_llama_matmul_flops(T)
        # per layer, token and d_ff element: the exact GELU 0.5·x·(1 + erf(x/√2)) is 5 ops
        # (0.5·x, x/√2, erf, + 1, the product), the gate's product one more
        assert a.elementwise_by_component()["GELU (erf) and gating"] == L * T * f * (5 + 1)
    import torch
    from model import TransformerLM
    from model.layers import GatedMLP, gelu
    m = TransformerLM.from_config(c, device="meta")
    assert sum(p.numel() for p in m.parameters()) == _gelu_llama_params()
    ffn = m.layers[0].ffn
    assert isinstance(ffn, GatedMLP) and ffn.act is gelu
    x = torch.linspace(-3, 3, 11)
    torch.testing.assert_close(gelu(x), torch.nn.functional.gelu(x))  # exact, not tanh


def test_llama_gelu_in_transformers_and_the_cross_check(capsys, tmp_path):
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    model = build(GELU_LLAMA)
    act = model.model.layers[0].mlp.act_fn
    # ACT2FN["gelu"]: GELUActivation, nn.functional.gelu without approximation (exact erf)
    assert type(act).__name__ == "GELUActivation"
    assert sum(p.numel() for p in model.parameters()) == _gelu_llama_params()
    path = _write(tmp_path, GELU_LLAMA)
    for T in (8, 24):
        x = agreeing_check(capsys, "--config", path, "--ctx", str(T), "--pass", "train")
        flops = {(r["pass"], r["component"]): r["flops"]
                 for r in x["transformers"]["matmul_flops"]}
        forward = _gelu_llama_matmul_flops(T)
        assert flops[("forward", "total")] == forward
        assert flops[("backward", "total")] == 2 * forward  # dX and dW of every matmul
    # one aten.gelu in transformers, five ops in the tool's model: said, not hidden
    assert any("the exact GELU is one aten.gelu" in n for n in x["transformers"]["notes"])


# ---- Mixtral's num_experts: its own alias, not the shared MoE refusal ----------------------
MIXTRAL = {"model_type": "mixtral", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 64, "num_experts_per_tok": 2}


def test_mixtral_reads_num_experts_as_transformers_does():
    c = translate({**MIXTRAL, "num_experts": 4}, "f.json", "f").config
    assert c.num_experts == 4
    # a type that does not build experts still refuses the key, in its own words
    with pytest.raises(UsageError, match="mixture-of-experts key"):
        translate({**MIXTRAL, "model_type": "mistral", "num_experts": 4}, "f.json", "f")
    with pytest.raises(UsageError, match="contradictory keys"):
        translate({**MIXTRAL, "num_experts": 4, "num_local_experts": 8}, "f.json", "f")


def test_mixtral_num_experts_in_transformers():
    pytest.importorskip("transformers")
    from transformers import AutoConfig
    # MixtralConfig.attribute_map: num_experts is num_local_experts
    assert AutoConfig.for_model("mixtral", num_experts=4).num_local_experts == 4
    from accounting.crosscheck.hf_counter import build
    experts = build({**MIXTRAL, "num_experts": 4}).model.layers[0].mlp.experts
    assert experts.gate_up_proj.shape[0] == 4


# ---- keys in no list: judged by transformers' model, or refused with --strict --------------
TINY_LLAMA = {"model_type": "llama", "vocab_size": 96, "hidden_size": 64,
              "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 64}


def test_strict_refuses_an_unknown_key_without_building(capsys, tmp_path):
    path = _write(tmp_path, {**TINY_LLAMA, "neftune_noise_alpha": 0.0})
    code, _, err = run(capsys, "--config", path, "--no-verify", "--strict")
    assert code == 2 and "unknown key(s) 'neftune_noise_alpha'" in err
    assert len(err.strip().splitlines()) == 1


def test_an_unknown_key_transformers_ignores_is_accepted_with_a_note(capsys, tmp_path):
    pytest.importorskip("transformers")
    # neftune_noise_alpha: a training setting of SmolVLM's text config; LlamaForCausalLM
    # never reads it. qwen2's attention_bias: Qwen2Attention fixes bias=True on q/k/v_proj
    # and False on o_proj (modeling_qwen2.py), whatever the key says
    for data, key in (({**TINY_LLAMA, "neftune_noise_alpha": 0.0}, "neftune_noise_alpha"),
                      ({**TINY_LLAMA, "model_type": "qwen2", "attention_bias": True},
                       "attention_bias")):
        code, out, err = run(capsys, "--config", _write(tmp_path, data), "--no-verify")
        assert code == 0, err
        note = next(line for line in out.splitlines() if "judged count-free" in line)
        assert key in note and "with and without" in note


def test_an_unknown_key_that_changes_what_transformers_builds_is_refused(capsys, tmp_path):
    pytest.importorskip("transformers")
    # LlamaConfig keeps sliding_window (an attribute no field declares) and transformers'
    # DynamicCache reads it: every layer's cache becomes a DynamicSlidingWindowLayer. The
    # llama row does not read it, so the tool would count a full cache: refused
    path = _write(tmp_path, {**TINY_LLAMA, "sliding_window": 8})
    code, _, err = run(capsys, "--config", path, "--no-verify")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "sliding_window = 8 changes what transformers' LlamaForCausalLM builds" in err
    assert "DynamicSlidingWindowLayer" in err


def test_without_transformers_an_unknown_key_is_refused_saying_why(monkeypatch):
    from accounting.cli import args
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    with pytest.raises(UsageError, match=r"needs transformers.*install the hf extra"):
        translate({**TINY_LLAMA, "neftune_noise_alpha": 0.0}, "f.json", "f",
                  judge=args.judge_keys)


def test_the_judging_builds_keep_every_layer_a_key_can_name():
    pytest.importorskip("transformers")
    from accounting.crosscheck import hf_keys
    t = TYPES["llama"]
    big = {**TINY_LLAMA, "num_hidden_layers": 80}
    # no integer in the unknown key: 2 layers; an integer k: layers up to k + 1 (k and one
    # below it); a list of any length (issue 32: it may be per layer, one entry off), or
    # k ≥ L: every layer
    assert hf_keys.kept_layers({**big, "x": True}, ("x",), t) == 2
    assert hf_keys.kept_layers({**big, "x": 5}, ("x",), t) == 7
    assert hf_keys.kept_layers({**big, "x": [5]}, ("x",), t) is None
    assert hf_keys.kept_layers({**big, "x": {"y": [True] * 81}}, ("x",), t) is None
    assert hf_keys.kept_layers({**big, "x": [True] * 80}, ("x",), t) is None
    assert hf_keys.kept_layers({**big, "x": 79}, ("x",), t) is None
    # the widths stay (on meta they cost nothing): a width-setting key cannot coincide
    shrunk = hf_keys.shrink(big, t, 2)
    assert shrunk == {**big, "num_hidden_layers": 2}
    # a row's per-layer key counts too: qwen2's max_window_layers 28 keeps 30 layers
    q = {**big, "model_type": "qwen2", "max_window_layers": 28,
         "layer_types": ["full_attention"] * 80}
    n = hf_keys.kept_layers({**q, "x": True}, ("x",), TYPES["qwen2"])
    assert n == 30 and len(hf_keys.shrink(q, TYPES["qwen2"], n)["layer_types"]) == 30


def test_a_difference_is_named():
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_keys import probe, difference
    a, b = probe(TINY_LLAMA), probe({**TINY_LLAMA, "mlp_bias": True})
    assert difference(a, a) is None
    assert difference(a, b) == \
        "the parameters: model.layers.0.mlp.gate_proj.bias ((96,)) is added"


def test_a_judged_key_survives_flags_written_back(tmp_path):
    pytest.importorskip("transformers")
    # --num-layers on a config with a judged key: the rewritten config.json for transformers'
    # model keeps the key (judged once, when the file was read) and means the flags' config
    import dataclasses
    from accounting.cli.args import judge_keys
    from accounting.architecture.hf_config import for_transformers
    h = translate({**TINY_LLAMA, "neftune_noise_alpha": 0.0}, "f.json", "f", judge=judge_keys)
    assert h.judged == ("neftune_noise_alpha",)
    data, why = for_transformers(h, dataclasses.replace(h.config, num_layers=1))
    assert why == "" and data["num_hidden_layers"] == 1 and data["neftune_noise_alpha"] == 0.0
