"""The soft items and a new user's first hour of issue 32, each a regression test that failed
before its fix: what the CLI said or accepted, not a count. (Written on the branch that
duplicated tests/test_hostile_soft.py's fixes; kept where they add a case, with that
implementation's wording.)"""
from __future__ import annotations

import json

import pytest

from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from accounting.architecture.hf_config import translate
from accounting.architecture.presets import PRESETS
from cli_run import refused_in_one_line, run
from hf_examples import CONFIGS


@pytest.mark.parametrize("ctx", ["8_0", "1,02", "10,24", "1_0_24", "1,024_000"])
def test_a_misplaced_separator_is_refused(capsys, ctx):
    refused_in_one_line(capsys, "gpt2-small", "--no-verify", "--ctx", ctx,
                        expected=f"must be a positive integer, got '{ctx}'")


@pytest.mark.parametrize("ctx,value", [("1,024", 1024), ("1024", 1024),
                                       ("1,048,576", 1048576)])
def test_grouped_separators_still_read(capsys, ctx, value):
    code, out, err = run(capsys, "gpt2-small", "--no-verify", "--ctx", ctx, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["workload"]["seq"] == value


@pytest.mark.parametrize("argv,named", [(["--list", "gpt2-xl"], "'gpt2-xl'"),
                                        (["--list", "--ctx", "8"], "--ctx"),
                                        (["plan", "--list", "--gpus", "8"], "--gpus")])
def test_list_refuses_what_it_would_ignore(capsys, argv, named):
    refused_in_one_line(capsys, *argv, expected=f"{named} would be ignored")


def test_list_with_its_own_flags(capsys, tmp_path):
    code, _, err = run(capsys, "--list", "--format", "json", "-o", str(tmp_path / "l.json"))
    assert code == 0, err


def test_help_names_every_preset(capsys):
    code, out, _ = run(capsys, "--help")
    text = " ".join(out.split()).replace("- ", "-")  # argparse wraps at hyphens
    assert code == 0
    for name in PRESETS:
        if not name.startswith(("gpt2-", "openai-community/")):
            assert name in text, name


def test_markdown_shows_a_name_as_text_not_html(capsys, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(dict(vocab_size=100, context_length=64, num_layers=2, d_model=64,
                                 num_heads=4, name="<img src=x onerror=alert(1)>")))
    code, out, err = run(capsys, "--config", str(p), "--no-verify", "--format", "markdown")
    assert code == 0, err
    assert "<img" not in out and "&lt;img src=x onerror=alert(1)>" in out


def test_search_with_tokens_prints_days(capsys):
    code, out, _ = run(capsys, "plan", "gpt2-xl", "--gpus", "8", "--search", "--gpu", "H100",
                       "--tokens", "1000000000000")
    header = next(line for line in out.splitlines() if line.startswith("#"))
    first = next(line for line in out.splitlines() if line.startswith("1 "))
    assert code == 0 and "1,000,000,000,000 tokens" in header and first.endswith(" days")
    code, out, _ = run(capsys, "plan", "gpt2-xl", "--gpus", "8", "--search", "--gpu", "H100",
                       "--tokens", "1000000000000", "--format", "json")
    best = json.loads(out)["ranked"][0]
    assert best["time_to_train"]["tokens"] == 10**12


def test_temperature_floor_without_nope_layers_is_refused():
    base = dict(vocab_size=10, context_length=8, num_layers=4, d_model=8, num_heads=2, d_ff=16)
    with pytest.raises(UsageError, match=r"temperature_floor \(--temperature-floor\) scales the queries of the NoPE"):
        ModelConfig(**base, temperature_floor=8)
    c = ModelConfig(**base, temperature_floor=8, nope_layers=(3,))
    d = c.with_overrides(num_layers=2)  # NoPE layer 3 cut away: the floor goes with it
    assert d.nope_layers == () and d.temperature_floor is None


def test_equal_numbers_are_one_setting():
    data = {**CONFIGS["llama"], "rope_theta": 500000,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}
    assert translate(data, "c", "t").config.rope_theta == 500000
    with pytest.raises(UsageError, match="contradictory"):
        translate({**data, "rope_parameters": {"rope_type": "default", "rope_theta": 4e5}},
                  "c", "t")


@pytest.mark.parametrize("folder", ["y" * 230, "tab\tname", "esc\x1bname"])
def test_a_config_json_is_not_refused_for_its_folders_name(capsys, tmp_path, folder):
    """A config.json is named by its folder; a long one or one with a control character was
    refused as the spec's name ("name must be at most 200 printable characters")."""
    where = tmp_path / folder
    where.mkdir()
    (where / "config.json").write_text(json.dumps(CONFIGS["llama"]))
    code, out, err = run(capsys, "--config", str(where / "config.json"), "--no-verify")
    assert code == 0, err
    assert out.startswith("Answer: ") and "\t" not in out.splitlines()[0]


@pytest.mark.parametrize("name", ["steps", "tokens", "position"])
def test_plan_keeps_the_clis_bounds(name):
    """plan() took steps, tokens and positions of 10^30, which the CLI refuses past 10^15."""
    from accounting.planning.plan import plan
    with pytest.raises(UsageError, match=rf"{name} must be at most 10\^15"):
        plan("gpt2-small", 64, gpu="H100", **{name: 10**30})
    plan("gpt2-small", 64, gpu="H100", **{name: 10**15})
