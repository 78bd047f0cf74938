"""The CLI run in this process as the tests call it: main(argv), its exit status and what
it printed (pytest's capsys). Shared by the test modules that drive the CLI."""
from __future__ import annotations

import json

from accounting.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def agreeing_check(capsys, *argv) -> dict:
    """The cross-check of `argv --verify --format json`, which must exit 0 and agree."""
    code, out, err = run(capsys, *argv, "--verify", "--format", "json")
    assert code == 0, err
    x = json.loads(out)["cross_check"]
    assert x["agrees"], x["disagreements"]
    return x


def refused_in_one_line(capsys, *argv, expected: str) -> str:
    """`argv` must be bad input: exit 2, nothing on stdout, one line on stderr (no traceback)
    holding `expected`. Returns the line."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "", (code, err[-500:])
    # progress lines of a long run ('[what] i/N ...', accounting/runtime/progress.py) aside
    err = "".join(line for line in err.splitlines(keepends=True) if not line.startswith("["))
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err
    return err
