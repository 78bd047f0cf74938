"""The one output path (accounting/tables/output.py): every subcommand's --format switch,
terminal width, JSON without NaN and -o go through it, so they cannot drift apart again
(the parallel plan's copy had lost the terminal width and allow_nan=False)."""
from __future__ import annotations

import json

import pytest

from accounting.tables import output
from accounting.tables.table import Table
from cli_run import run

PARALLEL = ("plan", "meta-llama/Llama-3.1-8B", "--gpus", "64", "--tp", "4", "--pp", "2",
            "--zero", "3", "--sp", "--ctx", "8192", "--batch", "512", "--gpu", "H100",
            "--precision", "bf16-mixed", "--recompute", "selective")
SEARCH = ("plan", "openai-community/gpt2-xl", "--gpus", "64", "--search", "--batch", "1024",
          "--gpu", "A100", "--precision", "bf16-mixed")
SINGLE = ("plan", "gpt2-xl", "--gpu", "H100", "--precision", "bf16-mixed", "--batch", "64",
          "--ctx", "4096")
ANALYSIS = ("gpt2-xl", "--ctx", "16384", "--no-verify")


@pytest.mark.parametrize("argv", [PARALLEL, SEARCH, SINGLE, ANALYSIS, ("--list",),
                                  ("plan", "--list")])
def test_text_fits_columns_for_every_subcommand(monkeypatch, capsys, argv):
    # regression: the parallel plan printed 539-character lines whatever COLUMNS said
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, *argv)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize("argv", [PARALLEL, SEARCH])
def test_a_file_gets_whole_lines_whatever_columns_says(monkeypatch, capsys, tmp_path, argv):
    code, piped, _ = run(capsys, *argv)  # COLUMNS unset (conftest): whole lines
    assert code == 0 and max(len(line) for line in piped.splitlines()) > 200
    monkeypatch.setenv("COLUMNS", "60")
    target = tmp_path / "plan.txt"
    code, out, _ = run(capsys, *argv, "-o", str(target))
    assert code == 0 and out == "" and target.read_text(encoding="utf-8") == piped


@pytest.mark.parametrize("argv,module", [(PARALLEL, "accounting.planning.parallel.export.to_dict"),
                                         (SEARCH, "accounting.planning.parallel.export.search_dict"),
                                         (SINGLE, "accounting.planning.export.to_dict")])
def test_json_refuses_nan_in_every_subcommand(monkeypatch, capsys, argv, module):
    # regression: the parallel plan's json.dumps had no allow_nan=False, so a NaN would have
    # printed as the non-JSON token NaN with exit 0. A NaN is a bug: exit 3, nothing printed.
    monkeypatch.setattr(module, lambda *a, **k: {"x": float("nan")})
    code, out, err = run(capsys, *argv, "--format", "json")
    assert (code, out) == (3, "") and "internal error: ValueError" in err


def test_list_in_markdown_is_markdown_for_both_commands(capsys):
    # regression: `plan --list --format markdown` printed the text table
    for argv in (("--list",), ("plan", "--list")):
        code, out, _ = run(capsys, *argv, "--format", "markdown")
        assert code == 0 and out.startswith("## Presets\n\n| name |")


def test_formats_without_data_of_their_own_print_the_text():
    t = [Table("T", ("a", "b"), (("x", "1"),))]
    text = output.text("text", None, lambda: t)
    assert output.text("csv", None, lambda: t) == output.text("json", None, lambda: t) == text
    assert output.text("json", None, lambda: t, data=lambda: {"n": 10**30}) == \
        '{\n  "n": 1000000000000000000000000000000\n}\n'  # exact integers, indented
    assert output.text("csv", None, lambda: t, csv=lambda: "a,b\n") == "a,b\n"


def test_json_text_is_strict():
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError):
            output.json_text({"x": bad})
    assert json.loads(output.json_text({"é": [1, 2]})) == {"é": [1, 2]}
    assert "é" in output.json_text({"é": 1})  # ensure_ascii=False: UTF-8 as is


def test_the_data_is_built_only_for_its_format():
    built = []
    output.text("text", None, lambda: [Table("T")], data=lambda: built.append("json"),
                csv=lambda: built.append("csv") or "")
    assert built == []
