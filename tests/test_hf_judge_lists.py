"""A list in an unknown key is judged on every layer, or refused (issue 32). The judge
builds transformers' model with fewer layers where no key can name a later one; a list one
entry longer than the layers was cut away with them: a 6-layer llama with a 7-entry
`kv_sharing_modes` (transformers' cache_utils: a "reuse" layer gets a DynamicLayer it cannot
update, NotImplementedError at that layer) was "judged count-free … (2 of 6 layers)".
"""
import json

import pytest

from cli_run import refused_in_one_line, run
from hf_examples import CONFIGS

pytest.importorskip("transformers")

SIX = {**CONFIGS["llama"], "num_hidden_layers": 6}


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """transformers' first model build in this process, outside the captured runs (its
    imports may print warnings of the environment's own on stderr once)."""
    from accounting.crosscheck.hf_keys import probe
    probe(SIX)


def _write(tmp_path, data):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    return str(p)


@pytest.mark.parametrize("modes", [
    ["none"] * 5 + ["reuse", "none"],  # 7 entries: layer 5 reuses (zip stops at 6)
    ["none"] * 5 + ["reuse"],          # 6 entries, the last layer reuses
])
def test_a_list_is_judged_at_full_depth(capsys, tmp_path, modes):
    refused_in_one_line(capsys, "--config", _write(tmp_path, {**SIX, "kv_sharing_modes": modes}),
                        "--no-verify", expected="kv_sharing_modes")


def test_a_harmless_list_is_still_judged_count_free_on_every_layer(capsys, tmp_path):
    code, out, err = run(capsys, "--config", _write(tmp_path, {**SIX, "x_notes": [1, 2, 3]}),
                         "--no-verify")
    assert code == 0, err
    assert "judged count-free" in out and "(all layers" in out


def test_past_the_full_depth_bound_a_list_is_refused_at_once(capsys, tmp_path):
    from accounting.crosscheck.hf_keys import FULL_DEPTH_LAYERS
    big = {**SIX, "num_hidden_layers": FULL_DEPTH_LAYERS + 1, "x_notes": [1]}
    refused_in_one_line(capsys, "--config", _write(tmp_path, big), "--no-verify",
                        expected=f"needs transformers' model at all {FULL_DEPTH_LAYERS + 1} layers")


# ---- keys inside text_config: judged as a text file's are (issue 32) -------------------------
def _text_config_files():
    from test_hf_gemma import CONFIGS as GEMMA, GEMMA3_4B
    from test_hf_llama4 import MULTIMODAL
    gemma_text = {k: v for k, v in GEMMA["gemma3_text"].items() if k != "architectures"}
    return {"llama4": MULTIMODAL, "gemma3": {**GEMMA3_4B, "text_config": gemma_text}}


@pytest.mark.parametrize("name", ["llama4", "gemma3"])
def test_an_unknown_key_inside_text_config_is_judged(capsys, tmp_path, name):
    data = _text_config_files()[name]
    data = {**data, "text_config": {**data["text_config"], "my_note": "hello"}}
    path = _write(tmp_path, data)
    code, out, err = run(capsys, "--config", path, "--no-verify")
    assert code == 0, err
    assert "'my_note': not in the tool's table" in out and "judged count-free" in out
    refused_in_one_line(capsys, "--config", path, "--no-verify", "--strict",
                        expected="unknown key(s) 'my_note'")


def test_a_judged_text_config_key_survives_the_cross_check(capsys, tmp_path):
    from cli_run import agreeing_check
    from test_hf_llama4 import MULTIMODAL
    data = {**MULTIMODAL, "text_config": {**MULTIMODAL["text_config"], "my_note": "hello"}}
    x = agreeing_check(capsys, "--config", _write(tmp_path, data), "--num-layers", "2",
                       "--ctx", "6", "--pass", "forward")
    assert x["transformers"]["agrees"]


# ---- a broken or other transformers is not the config's fault (issue 32) ----------------------
def test_a_transformers_that_fails_to_import_is_named(monkeypatch):
    from accounting.cli import args
    from accounting.architecture.hf_config import translate

    import sys
    # an install that fails on import (None in sys.modules: ImportError), as a half-installed
    # one does; the judge's message is crosscheck.transformers_version's, as --verify's is
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())
    with pytest.raises(Exception) as e:
        translate({**SIX, "my_note": 1}, "f.json", "f", judge=args.judge_keys)
    assert "transformers is installed but cannot be imported (ModuleNotFoundError: import" \
        in str(e.value)
    assert "pass --strict" in str(e.value)


def test_another_transformers_version_is_named_when_the_build_fails(monkeypatch):
    import transformers
    from accounting.crosscheck import hf_keys
    from accounting.architecture.hf_config import TYPES

    def fails(data):
        raise AttributeError("module has no attribute 'LlamaForCausalLM'")
    monkeypatch.setattr(hf_keys, "probe", fails)
    monkeypatch.setattr(transformers, "__version__", "4.30.0")
    with pytest.raises(Exception) as e:
        hf_keys.judge({**SIX, "my_note": 1}, ("my_note",), TYPES["llama"], "f.json (llama)")
    assert "transformers 4.30.0 is installed, and the tool's tables are read from 5.23.0" in str(e.value)
