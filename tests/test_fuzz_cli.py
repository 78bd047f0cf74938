"""A seeded, bounded property-based run over the CLI's argument space and config files.

Every example runs main(argv) in process, in a fresh scratch folder of hostile targets
(tests/cli_fuzz.py: an existing output file, a FIFO, a folder, links, a device node when
root), with stdout in UTF-8, ASCII or Latin-1 and with or without a terminal width (1 and 0 columns included), with warnings made errors or
not (PYTHONWARNINGS=error as a filter: issue 23), and is judged against the exit-status contract: 0 an answer, 1 only with a disagreement, 2 bad
input with exactly one stderr line, never anything else, never an exception out of
main(), never past the hang bound, and a failed run changes no file (bytes, permissions,
kind) and leaves no temporary entry. The cross-check is not the subject here (--no-verify,
or sizes it refuses before running); benchmarks/fuzz_cli.py is the long run in fresh
processes, with closed and full outputs and Ctrl-C.
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import tempfile
import time
import warnings
from pathlib import Path

import cli_fuzz as F
import pytest
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from accounting.cli.main import main

ENCODINGS = ("utf-8", "utf-8", "ascii", "latin-1")
WIDTHS = (None, None, "40", "100", "junk", "1", "0")


class _Alarm:
    fired = False


def run_in_process(argv: list[str], cwd: Path, encoding: str, columns: str | None,
                   warnings_as_errors: bool = False) -> F.Result:
    """main(argv) with stdout in `encoding` (strict), a hang bound by SIGALRM; with
    warnings_as_errors, every warning raised as an error (what PYTHONWARNINGS=error does)."""
    raw_out, raw_err = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(raw_out, encoding=encoding, errors="strict", newline="")
    err = io.TextIOWrapper(raw_err, encoding="utf-8", errors="strict", newline="")
    alarm = _Alarm()

    def on_alarm(signum, frame):
        alarm.fired = True
        raise TimeoutError("hang bound")
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    old_cwd, old_columns = os.getcwd(), os.environ.pop("COLUMNS", None)
    if columns is not None:
        os.environ["COLUMNS"] = columns
    escaped, rc = "", None
    start = time.perf_counter()
    try:
        os.chdir(cwd)
        signal.setitimer(signal.ITIMER_REAL, F.HANG_SECONDS)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            if warnings_as_errors:
                warnings.simplefilter("error")
            rc = main(argv)
    except BaseException as e:  # noqa: BLE001 - anything out of main() is a defect
        escaped = f"{type(e).__name__}: {e}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        os.chdir(old_cwd)
        os.environ.pop("COLUMNS", None)
        if old_columns is not None:
            os.environ["COLUMNS"] = old_columns
    out.flush()
    err.flush()
    return F.Result(None if alarm.fired else rc, raw_out.getvalue(), raw_err.getvalue(),
                    time.perf_counter() - start, escaped)


@seed(11)
@settings(max_examples=800, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(argv=F.argvs(), config=F.config_texts(), encoding=st.sampled_from(ENCODINGS),
       columns=st.sampled_from(WIDTHS), strict=st.sampled_from((False, False, False, True)))
def test_cli_keeps_the_exit_status_contract(argv, config, encoding, columns, strict):
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        root = Path(tmp)
        F.make_scratch(root, config)
        before = F.snapshot(root)
        result = run_in_process(argv, root, encoding, columns, strict)
        after = F.snapshot(root)
    verdict = F.judge(argv, result, before, after, config=config)
    event(f"{verdict.outcome} ({argv[0] if argv and argv[0] in ('plan', 'report') else 'main'})")
    assert not verdict.defects, (verdict.defects, argv, result.rc, result.escaped,
                                 result.stderr[-400:])
    assert verdict.outcome in (F.ANSWER, F.ERROR), verdict.outcome
    if result.rc == 2:
        line = result.stderr.decode()
        assert line.startswith("accounting: error: ") and len(line) <= 700, line[:300]
    if result.rc == 0 and F._output_target(argv) in (None, "-"):
        result.stdout.decode(encoding)  # what reached stdout is in its encoding


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--help"], ["report", "--help"]])
def test_help_in_ascii(argv, tmp_path):
    """--help holds × and ·: an ASCII stdout gets them spelled x and *."""
    result = run_in_process(argv, tmp_path, "ascii", None)
    assert result.rc == 0 and not result.escaped
    text = result.stdout.decode("ascii")
    assert "usage: python -m accounting" in text
