"""Hugging Face config.json in: each supported model_type read into the spec, checked
against what transformers' modeling files mean (by hand, tests/hf_examples.py) through
the ledger and the tool's own model/; malformed configs refused in one line; the table
is a registry that refuses duplicates. transformers' own model: tests/test_hf_crosscheck.py.
"""
import dataclasses
import json
import subprocess
import sys
from types import MappingProxyType

import pytest

from accounting import analyze
from cli_run import run
from accounting.architecture.loaders import config_from_json
from accounting.runtime.errors import UsageError
from accounting.architecture import hf_config
from accounting.architecture.hf_config import TYPES, HFType, for_transformers, register, translate
from accounting.architecture.presets import PRESETS, hf_source
from hf_examples import CONFIGS, DELETE, SHAPES, params_by_hand, write_config



def write(tmp_path, name: str, changes: dict | None = None, folder: str = "tiny-model"):
    return write_config(tmp_path, CONFIGS[name], changes, folder)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_model_type_means_what_transformers_builds(tmp_path, name):
    c = config_from_json(write(tmp_path, name))
    s = SHAPES[name]
    assert c.name == "tiny-model"  # a config.json is named by its folder, as checkpoints ship
    assert (c.vocab_size, c.d_model, c.num_layers, c.num_heads, c.kv_heads, c.d_k, c.d_ff,
            c.context_length) == (s["V"], s["d"], s["L"], s["h"], s["kv"], s["hd"], s["f"], s["ctx"])
    assert (c.qkv_bias, c.out_bias, c.mlp_bias) == s["bias"]
    assert (c.tie_embeddings, c.norm, c.mlp, c.positions, c.qk_norm, c.norm_placement,
            c.norm_eps) == (s["tied"], s["norm"], s["mlp"], s["positions"], s["qk"],
                            s["placement"], s["eps"])
    if c.positions == "rope":
        assert c.rope_theta == s["theta"]
    # two ways here: the ledger and the tool's model/ (transformers': test_hf_crosscheck.py)
    assert analyze(c).param_count == params_by_hand(name)
    import torch  # noqa: F401  (model/ needs it; the translation above does not)
    from model import TransformerLM
    m = TransformerLM.from_config(c, device="meta")
    assert sum(p.numel() for p in m.parameters()) == params_by_hand(name)


def test_cli_reads_a_config_json_and_says_what_it_read(capsys, tmp_path):
    p = write(tmp_path, "gpt2")
    code, out, err = run(capsys, "--config", str(p), "--no-verify")
    assert code == 0 and err == ""
    assert f"{params_by_hand('gpt2'):,}" in out  # 62,832: tests/hf_examples.py, by hand
    table = out.split("Read from config.json")[1].split("\n\n")[0]
    assert "n_inner" in table and "(absent)" not in table.split("n_inner")[1].split("\n")[0]
    assert "activation_function" in table and "gelu_tanh" in table
    # the dropouts are read into the spec (issue 41: counted in transformers' training plans)
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line.strip()}
    assert rows["resid_pdrop"] == ["0.1", "residual_dropout", "0.1"]
    assert rows["embd_pdrop"] == ["0.1", "embedding_dropout", "0.1"]
    assert "torch_dtype float32" in table and "Accepted as count-free: architectures" in table
    # a default taken for an absent key is shown as such
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "gpt2", {"n_inner": DELETE})),
                       "--no-verify")
    assert code == 0 and "(absent) null" in out


def test_the_analytic_path_imports_neither_torch_nor_transformers(tmp_path):
    p = write(tmp_path, "llama")
    code = ("import sys; from accounting.cli.main import main; "
            f"rc = main(['--config', {str(p)!r}, '--no-verify']); "
            "print(rc, sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules), "
            "file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip() == "0 []"


MALFORMED = [
    # wrong types
    ("llama", {"hidden_size": "64"}, "hidden_size must be a positive integer, got '64'"),
    ("llama", {"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or false"),
    ("llama", {"rope_theta": -1}, "rope_theta must be a positive number"),
    ("llama", {"num_hidden_layers": 0}, "num_hidden_layers must be a positive integer"),
    ("llama", {"num_key_value_heads": True}, "num_key_value_heads must be a positive integer"),
    ("llama", {"torch_dtype": 16}, "torch_dtype = 16 is not null or a torch dtype's name"),
    ("llama", {"model_type": 3}, "model_type 3 is not supported"),
    # missing keys (whose transformers default is some reference model's size)
    ("llama", {"hidden_size": DELETE}, "missing hidden_size"),
    ("qwen3", {"head_dim": DELETE}, "class default 128"),
    ("mistral", {"num_key_value_heads": DELETE}, "missing num_key_value_heads"),
    ("gpt2", {"n_positions": DELETE}, "missing n_positions"),
    # contradictory keys
    ("gpt2", {"hidden_size": 64}, "contradictory keys n_embd = 48, hidden_size = 64"),
    ("gpt2", {"n_ctx": 64}, "n_ctx = 64 means a context length transformers ignores"),
    ("llama (transformers 5 format)", {"rope_theta": 10000.0},
     "contradictory keys rope_theta = 10000.0, rope_parameters.rope_theta = 500000.0"),
    ("llama", {"num_key_value_heads": 3},
     "num_heads 4 is not divisible by num_kv_heads 3; each key/value head serves a whole group "
     "of query heads [in config.json: num_heads is num_attention_heads, num_kv_heads is "
     "num_key_value_heads]"),
    ("llama", {"hidden_size": 66}, "hidden_size 66 is not divisible by num_attention_heads 4"),
    ("llama", {"head_dim": 23}, "head_dim = 23 is odd; RoPE rotates pairs"),
    ("mistral", {"hidden_size": 60, "num_attention_heads": 8},
     "d_model 60 is not divisible by num_heads 8"),
    # sliding windows: bad values, and what transformers would not build as the spec means
    ("mistral", {"sliding_window": 0}, "sliding_window must be a positive integer or null, got 0"),
    ("mistral", {"layer_types": ["full_attention"] * 3},
     "means per-layer attention kinds, which transformers' Mistral ignores in its attention but "
     "not in its KV cache"),
    ("qwen2", {"use_sliding_window": True, "sliding_window": -4}, "sliding_window must be a "
                                                                  "positive integer or null"),
    ("qwen3", {"layer_types": ["full_attention", "sliding_attention"]},
     "layers of sliding attention but no window (sliding_window null, or use_sliding_window false)"),
    ("qwen3", {"layer_types": ["full_attention"], "use_sliding_window": True},
     "layer_types must list 2 entries (num_hidden_layers), each \"full_attention\" or "
     "\"sliding_attention\", got ['full_attention']"),
    ("qwen3", {"layer_types": ["full_attention", "chunked_attention"]}, "layer_types must list 2"),
    ("qwen2", {"max_window_layers": -1}, "max_window_layers must be a non-negative integer"),
    # keys that would change a count the tool cannot represent
    ("llama", {"num_local_experts": 8}, "num_local_experts = 8 is a mixture-of-experts key"),
    ("qwen2", {"num_experts": 60, "moe_intermediate_size": 1408}, "mixture-of-experts"),
    ("llama", {"kv_lora_rank": 512}, "kv_lora_rank = 512 is a multi-head latent attention key"),
    ("llama", {"quantization_config": {"quant_method": "gptq", "bits": 4}},
     "quantization_config = {'quant_method': 'gptq', 'bits': 4} is a quantized checkpoint"),
    ("llama", {"hidden_act": "relu"}, "hidden_act must be one of silu, swish, gelu_new"),
    ("gpt2", {"activation_function": "relu"}, "activation_function must be one of"),
    ("llama", {"rope_scaling": {"rope_type": "mrope", "mrope_section": [1, 2]}},
     "rope_scaling = {'rope_type': 'mrope'"),
    ("llama", {"partial_rotary_factor": 0.5}, "partial_rotary_factor = 0.5 means RoPE on only"),
    ("gpt2", {"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn = True means"),
    ("llama", {"is_encoder_decoder": True}, "is_encoder_decoder = True means an encoder-decoder"),
    # unknown keys: a decision, not an accident (--strict: refused without judging; judged
    # by transformers' model otherwise, tests/test_hf_hubconfigs.py)
    ("llama", {"foo_bar": 1}, "unknown key(s) 'foo_bar': the tool cannot tell whether it changes "
                              "a count"),
    ("gpt2", {"rms_norm_eps": 1e-6}, "unknown key(s) 'rms_norm_eps'"),
    ("mistral", {"attention_bias": True}, "unknown key(s) 'attention_bias'"),
    # (the whole list is generated from TYPES: tests/test_hf_hubconfigs.py checks it is one list)
    ("llama", {"model_type": "gemma"}, "model_type 'gemma' is not supported; supported: gpt2, "
                                       "llama, mistral, qwen2, qwen3, olmo2, "),
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
    assert "config.json" in err  # names the file


def test_count_free_keys_are_accepted(tmp_path):
    extra = {"max_length": 20, "temperature": 0.7, "id2label": {"0": "LABEL_0"},
             "label2id": {"LABEL_0": 0}, "problem_type": None, "tokenizer_class": "X",
             "return_dict": True, "output_hidden_states": False, "_name_or_path": "my/model",
             "attention_dropout": 0.1, "rope_scaling": {"type": "linear", "factor": 2.0}}
    h = hf_config.load(write(tmp_path, "llama", extra))
    assert h.config.name == "my/model"  # _name_or_path names it
    assert any("attention_dropout = 0.1: dropout is not counted" in n for n in h.notes)
    assert any("rope_scaling linear" in n for n in h.notes)
    assert analyze(h.config).param_count == params_by_hand("llama")


def test_the_table_is_a_registry_that_refuses_duplicates():
    with pytest.raises(ValueError, match="registered twice"):
        register(TYPES["llama"])
    twice = dataclasses.replace(TYPES["llama"], model_type="llama-twice",
                                free=frozenset({"rope_theta"}))
    with pytest.raises(ValueError, match="listed twice"):
        register(twice)
    shared = dataclasses.replace(TYPES["llama"], model_type="llama-shared",
                                 free=frozenset({"torch_dtype"}))
    with pytest.raises(ValueError, match="listed twice"):
        register(shared)
    both = dataclasses.replace(TYPES["llama"], model_type="llama-both",
                               fixed=MappingProxyType({**TYPES["llama"].fixed, "mlp_bias": False}))
    with pytest.raises(ValueError, match="set twice"):
        register(both)
    assert set(TYPES) == {"gpt2", "llama", "mistral", "qwen2", "qwen3", "olmo2", "mixtral",
                          "qwen3_moe", "deepseek_v3", "deepseek_v2", "gpt_oss", "gemma2", "gemma3_text", "granite",
                          "gpt_neox", "falcon", "phi3", "starcoder2",
                          "llama4_text", "llama4", "cohere",
                          # issue 31 (part A)
                          "olmoe", "qwen2_moe", "glm4_moe", "minimax_m2", "smollm3", "glm4", "olmo3",
                          "seed_oss", "exaone4", "deepseek_v32", "ernie4_5_moe",
                          # issue 31 (part B)
                          "lfm2", "qwen3_next", "nemotron_h",
                          # issue 31 (Kimi; kimi_k2 and kimi_k25 are WRAPPERS of deepseek_v3)
                          "kimi_linear",
                          # issue 31: the parallel hybrid and Mamba-1
                          "falcon_h1", "jamba",
                          # issue 31 (Qwen3.5)
                          "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe",
                          # issue 31: Gemma 4 and Phi-3.5-MoE
                          "gemma4_text", "phimoe",
                          # issue 31 (Mamba-2 hybrids with experts)
                          "granitemoehybrid",
                          # issue 31 follow-up: Command R7B / Command A
                          "cohere2",
                          # issue 41 (Must 4): the rows transformers 5.23 ships
                          "arcee", "mamba2", "apertus"}


def test_every_type_names_every_module_the_ledger_has():
    # the transformers name table holds names only; the map is derived from the ledger, and
    # a module the table lacks is a developer error naming it
    from accounting.crosscheck.hf_compare import module_map
    from accounting.ledger.ledger import ledger
    for name in CONFIGS:
        h = translate(CONFIGS[name], "t", name)
        mm = module_map(ledger(h.config), h.type.names)
        assert mm.params and mm.block and mm.top
    qwen3 = translate(CONFIGS["qwen3"], "t", "qwen3")
    names = qwen3.type.names
    lacking = dataclasses.replace(names, block=MappingProxyType(
        {k: v for k, v in names.block.items() if k != "attn.q_norm"}))
    with pytest.raises(AssertionError, match="attn.q_norm"):
        module_map(ledger(qwen3.config), lacking)


def test_flags_on_a_config_json_are_written_back_for_transformers():
    llama = hf_source("meta-llama/Llama-3.1-8B")
    c = PRESETS["meta-llama/Llama-3.1-8B"].with_overrides(num_layers=2, rope_theta=1000.0)
    data, why = for_transformers(llama, c)
    assert why == "" and data["num_hidden_layers"] == 2 and data["rope_theta"] == 1000.0
    assert llama.data["num_hidden_layers"] == 32  # the shipped one is untouched
    # the transformers-5 spelling is rewritten where it is
    v5 = translate(CONFIGS["llama (transformers 5 format)"], "t", "v5")
    data, why = for_transformers(v5, v5.config.with_overrides(rope_theta=7.0))
    assert why == "" and data["rope_parameters"]["rope_theta"] == 7.0 and "rope_theta" in data
    # a choice is written as a config.json value that means it
    gpt2 = hf_source("openai-community/gpt2")
    data, why = for_transformers(gpt2, gpt2.config.with_overrides(mlp="gelu", d_ff=100))
    assert why == "" and data["activation_function"] == "gelu" and data["n_inner"] == 100
    # what the model_type fixes has no key: transformers cannot build it
    qwen3 = hf_source("Qwen/Qwen3-0.6B")
    data, why = for_transformers(qwen3, qwen3.config.with_overrides(qk_norm="none"))
    assert data is None and why == "qk_norm is fixed by model_type qwen3 (no config.json key sets it)"
    data, why = for_transformers(qwen3, qwen3.config.with_overrides(qkv_bias=True))
    assert data is None and "differ" in why  # attention_bias sets Q/K/V and O biases together


def test_unknown_preset_near_miss_lists_the_new_checkpoints():
    with pytest.raises(UsageError, match="Qwen/Qwen3-8B"):
        from accounting import get_preset
        get_preset("Qwen/Qwen3-8")


def test_the_readme_shows_the_shipped_config_json_as_it_is():
    # the manual's "Your own model" shows a file going in; it must be the shipped file
    from pathlib import Path
    page = Path(__file__).resolve().parents[1] / "docs" / "architectures.md"
    readme = page.read_text(encoding="utf-8")
    section = readme.split("## Your own model")[1].split("\n## ")[0]
    shown = section.split("```json\n")[1].split("```")[0]
    assert shown == (hf_config.PACKAGED / "Qwen/Qwen2.5-0.5B.json").read_text(encoding="utf-8")
    assert "--config accounting/hf_configs/Qwen/Qwen2.5-0.5B.json" in section


def test_verify_without_transformers_runs_the_other_counters_and_says_so(capsys, tmp_path,
                                                                        monkeypatch):
    import accounting.crosscheck as xc
    real = xc.find_spec
    monkeypatch.setattr(xc, "find_spec", lambda n: None if n == "transformers" else real(n))
    p = write(tmp_path, "qwen3")
    code, out, _ = run(capsys, "--config", str(p), "--ctx", "8", "--verify")
    assert code == 0 and "transformers' model not run: transformers is not installed" in out
    assert "Cross-check: transformers'" not in out
    code, out, _ = run(capsys, "--config", str(p), "--ctx", "8", "--verify", "--format", "json")
    x = json.loads(out)["cross_check"]
    assert code == 0 and x["agrees"] and "not installed" in x["transformers"]["skipped"]


def test_a_config_transformers_cannot_build_is_a_disagreement(capsys, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from accounting.crosscheck import hf_counter

    def refuse(*args, **kwargs):
        raise ValueError("The hidden size (64) is not a multiple of\\nthe number of heads")
    monkeypatch.setattr(hf_counter, "measure", refuse)
    code, out, err = run(capsys, "--config", str(write(tmp_path, "llama")), "--ctx", "8", "--verify")
    assert code == 1 and "cross-check DISAGREES" in err and "Traceback" not in err
    assert "transformers' model not run: it could not be built (ValueError: The hidden size" in out


def test_the_pinned_transformers_is_the_one_the_tables_are_read_from():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    assert f'"transformers=={hf_config.TRANSFORMERS_VERSION}"' in (root / "pyproject.toml").read_text()
    import re
    extras = re.search(r"pip install -q -e '\.\[([\w,]+)\]'", (root / ".ci" / "run").read_text())
    assert extras and "hf" in extras.group(1).split(",")  # CI installs it (with dev, time)
