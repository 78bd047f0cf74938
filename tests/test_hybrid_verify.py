"""--verify on a hybrid model with no attention layer (found by tests/test_fuzz_cli.py's
hybrid seeds): transformers 5.23's forward fails on every input there (its cache's
get_seq_length raises when every layer is recurrent; checked here on transformers itself),
so the cross-check says transformers' model is not run and why, and agrees on the tool's
own counters (exit 0), instead of a disagreement (exit 1)."""
import json

import pytest

from cli_fuzz import HYBRID_SEEDS
from cli_run import run

SEEDS = dict(HYBRID_SEEDS)
ALL_RECURRENT = {"lfm2": {**SEEDS["lfm2"], "layer_types": ["conv"] * 3},
                 "nemotron_h": {**SEEDS["nemotron_h"], "hybrid_override_pattern": "M-M-"}}


@pytest.mark.parametrize("name", sorted(ALL_RECURRENT))
def test_transformers_fails_without_attention_layers(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**ALL_RECURRENT[name])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    with pytest.raises(ValueError, match="get_seq_length"):
        model(input_ids=torch.zeros((1, 8), dtype=torch.long, device="meta"), use_cache=True)


def test_verify_says_why_and_agrees(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ALL_RECURRENT["lfm2"]))
    code, out, err = run(capsys, "--config", str(path), "--ctx", "8", "--verify", "--format",
                         "json")
    assert code == 0, err
    x = json.loads(out)["cross_check"]
    assert x["agrees"] and "get_seq_length" in x["transformers"]["skipped"]


def test_a_huge_exponent_is_refused_not_expanded(capsys):
    """The CLI fuzz's other finding (tests/test_fuzz_cli.py, seed 11): --lora-alpha 1e999999999
    was read by Fraction(), which expands a billion-digit integer (no exit in 10 s); now the
    plan's bounded reader refuses it in one line."""
    code, out, err = run(capsys, "plan", "gpt2-small", "--lora-alpha", "1e999999999")
    assert code == 2 and out == "" and "exponent" in err and len(err.splitlines()) == 1
