"""The third counter: transformers' own model of a config.json, against the ledger and
the tool's model/, and against hand algebra (tests/hf_examples.py) for every supported
model_type. Needs transformers (the [hf] extra; CI installs it)."""
import dataclasses

import pytest

pytest.importorskip("transformers")

from accounting import analyze  # noqa: E402
from accounting.crosscheck import cross_check, views  # noqa: E402
from accounting.architecture.hf_config import translate  # noqa: E402
from cli_run import agreeing_check, run  # noqa: E402
from hf_examples import (CONFIGS, SHAPES, forward_matmul_flops_by_hand,  # noqa: E402
                         kv_elements_by_hand, params_by_hand, write_config)

BYTES = {"float32": 4, "bfloat16": 2}


def write(tmp_path, name: str):
    return write_config(tmp_path, CONFIGS[name], folder=None)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_three_ways_each_model_type(capsys, tmp_path, name):
    T, B = 8, 2
    x = agreeing_check(capsys, "--config", str(write(tmp_path, name)), "--ctx", str(T),
                       "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    assert tf["model_type"] == name.split(" ")[0] and tf["agrees"]
    # transformers' counts against hand algebra, not only against the ledger
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(name)
    dtype = CONFIGS[name].get("dtype") or CONFIGS[name]["torch_dtype"]
    assert tf["kv_cache_bytes"]["transformers"] == kv_elements_by_hand(name, T, B) * BYTES[dtype]
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(name, T, B)
    assert flops[("forward", "total")] == forward
    assert flops[("backward", "total")] == 2 * forward  # dX and dW: each the forward's size
    assert flops[("forward", "not in any component")] == 0
    rows = {(r["scope"], r["component"]): r for r in x["components"]}
    assert rows[("forward", "total")]["torch"] == rows[("forward", "total")]["transformers"] == forward
    blocks = [c for c in x["layers"] if c["counter"] == "transformers"]
    assert [c["agreeing"] for c in blocks] == [SHAPES[name]["L"]] * 2


def test_the_text_output_shows_the_column_and_explains_the_differences(capsys, tmp_path):
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "gpt2")), "--ctx", "16", "--verify")
    assert code == 0
    matmul = out.split("Cross-check: matmul FLOPs")[1].split("\n\n")[0]
    header = matmul.splitlines()[2]
    assert header.split()[:6] == ["pass", "component", "analytic", "fvcore", "×2", "torch"]
    assert "transformers" in header
    assert "transformer.h.{i}.attn.c_attn (= attn.q_proj + attn.k_proj + attn.v_proj)" in matmul
    table = out.split("Cross-check: transformers' GPT2LMHeadModel")[1].split("\n\n")[0]
    assert "attn.c_attn is one fused matmul for the ledger's attn.q_proj, attn.k_proj, " \
           "attn.v_proj (Conv1D)" in table
    assert "aten.addmm" in table and "LayerNorm is one fused aten.native_layer_norm" in table
    assert "RoPE" not in table  # GPT-2 has learned positions
    total = next(line for line in table.splitlines() if line.startswith("parameters: total"))
    assert total.split()[2:] == [f"{params_by_hand('gpt2'):,}"] * 2 + ["yes"]
    assert "Result: analytic, fvcore, FlopCounterMode and transformers' GPT2LMHeadModel agree " \
           "exactly." in out


@pytest.mark.parametrize("field,wrong,component", [
    ("qkv_bias", False, "attention projections"),   # Qwen2's Q/K/V biases have no key
    ("head_dim", 16, None),                          # head_dim 32 read as 64/4
])
def test_a_wrong_translation_is_caught_with_its_size(field, wrong, component):
    # the ledger and our model/ built from a wrong translation agree with each other; the
    # model transformers builds from the config.json itself does not
    name = {"qkv_bias": "qwen2", "head_dim": "qwen3"}[field]
    good = translate(CONFIGS[name], "t", name)
    bad = dataclasses.replace(good, config=dataclasses.replace(good.config, **{field: wrong}))
    result = cross_check(analyze(bad.config, 8, 1, "train"), hf=bad)
    assert not result.agrees
    s = SHAPES[name]
    if field == "qkv_bias":  # (h + 2·h_kv)·hd bias parameters per block, nothing else
        missing = s["L"] * (s["h"] + 2 * s["kv"]) * s["hd"]
        assert result.disagreements() == [
            f"transformers parameters {component}: analytic {_attn_params(s) - missing:,}, "
            f"transformers {_attn_params(s):,}",
            f"transformers parameters total: analytic {params_by_hand(name) - missing:,}, "
            f"transformers {params_by_hand(name):,}"]
    else:  # Q and O, K and V and the attention core all scale with head_dim
        assert any(d.startswith("forward attention projections") for d in result.disagreements())
        blocks = [c for c in result.layers if c.counter == "transformers"]
        assert all(c.agreeing == 0 for c in blocks)


def _attn_params(s) -> int:
    """Q, K, V, O weights and Q/K/V biases of all blocks, by hand (Qwen2)."""
    d, h, kv, hd, L = s["d"], s["h"], s["kv"], s["hd"], s["L"]
    return L * (2 * d * h * hd + 2 * d * kv * hd + (h + 2 * kv) * hd)


def test_a_disagreement_exits_1_naming_its_size(capsys, tmp_path, monkeypatch):
    from accounting.architecture import hf_config
    qwen2 = hf_config.TYPES["qwen2"]
    wrong = dataclasses.replace(qwen2, fixed={**qwen2.fixed, "qkv_bias": False})
    monkeypatch.setitem(hf_config.TYPES, "qwen2", wrong)
    code, out, err = run(capsys, "--config", str(write(tmp_path, "qwen2")), "--ctx", "8", "--verify")
    s = SHAPES["qwen2"]
    missing = s["L"] * (s["h"] + 2 * s["kv"]) * s["hd"]
    assert code == 1 and "cross-check DISAGREES" in err
    assert f"NO: transformers +{missing:,}" in out


def test_flags_rewrite_the_config_or_say_why_transformers_did_not_run(capsys):
    code, out, _ = run(capsys, "meta-llama/Llama-3.2-1B", "--num-layers", "1", "--ctx", "16",
                       "--verify")
    assert code == 0 and "transformers' LlamaForCausalLM agree exactly" in out
    assert "forward  transformers                         1/1" in out
    code, out, _ = run(capsys, "Qwen/Qwen3-0.6B", "--num-layers", "1", "--qk-norm", "none",
                       "--ctx", "16", "--verify")
    assert code == 0
    assert "transformers' model not run: qk_norm is fixed by model_type qwen3" in out


def test_the_llama_3_1_8b_kv_cache_by_hand():
    # 2 (K and V) · 32 layers · 8 KV heads · 128 · T = 8,192 · 2 bytes (bfloat16, its
    # torch_dtype) = 1,073,741,824 bytes = 1 GiB, measured on past_key_values
    from accounting.architecture.presets import PRESETS, hf_source
    name = "meta-llama/Llama-3.1-8B"
    result = cross_check(analyze(PRESETS[name], 8192), hf=hf_source(name))
    assert result.agrees, views.summary(result)
    assert result.hf.kv_bytes == (2 * 32 * 8 * 128 * 8192 * 2,) * 2 == (1 << 30,) * 2
    assert result.hf.params[-1].transformers == 8_030_261_248  # tests/test_presets.py


def test_the_fused_attention_kernel_against_eager_transformers(capsys):
    # forward: the fused kernel's two matmuls are eager attention's; backward: the kernel
    # recomputes QKᵀ, so transformers' eager model is not run for it, and the output says why
    args = ["meta-llama/Llama-3.2-1B", "--attention", "sdpa", "--num-layers", "1", "--ctx", "16",
            "--verify"]
    code, out, _ = run(capsys, *args)
    assert code == 0 and "transformers' LlamaForCausalLM agree exactly" in out
    code, out, _ = run(capsys, *args, "--pass", "train")
    assert code == 0 and "transformers' model not run: the tool's model runs the fused " \
                         "attention kernel (--attention sdpa), whose backward recomputes" in out
