"""`python -m accounting.distcheck` keeps the CLI's exit-status contract (issue 23): its --json
target is checked before the checks run (about 25 s of work) and written whole or not at
all; Ctrl-C to the process group ends it with one line, its worker processes with it.

Expectations from the contract (README "Exit status"; accounting/cli/args.py EXIT_STATUS):
bad input is exit 2 with one line on stderr, before any work; an interrupt is 130 and the
one line 'accounting: interrupted'; no process of the run outlives it.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accounting.distcheck import __main__ as distcheck

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_work(monkeypatch):
    """The checks themselves must not start: any call fails the test."""
    from accounting.distcheck import fake, gloo

    def forbidden(*args, **kwargs):
        raise AssertionError("the checks ran before the --json target was checked")
    monkeypatch.setattr(gloo, "run_group", forbidden)
    monkeypatch.setattr(fake, "run_cases", forbidden)


def _targets(tmp_path: Path) -> dict[str, str]:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    return {"a folder": str(tmp_path / "dir"), "/dev/full": "/dev/full",
            "a missing folder": str(tmp_path / "missing" / "out.json"),
            "a FIFO": str(tmp_path / "fifo"), "a trailing slash": str(tmp_path / "new") + "/"}


@pytest.mark.parametrize("what", ["a folder", "/dev/full", "a missing folder", "a FIFO",
                                  "a trailing slash"])
def test_json_target_is_checked_before_any_work(capsys, tmp_path, no_work, what):
    """Was: the checks ran (25 s), then open() raised: a raw traceback and exit 1 (a folder,
    /dev/full, a missing folder), or the run hung on the FIFO waiting for a reader."""
    target = _targets(tmp_path)[what]
    before = sorted(os.listdir(tmp_path))
    code = distcheck.main(["--json", target])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, err)
    assert err.count("\n") == 1 and err.startswith("accounting: error: ") and "--json" in err, err
    # "before any work" is the no_work fixture (the checks raise if they start), not a
    # wall-clock bound (a 2 s bound failed under load)
    assert sorted(os.listdir(tmp_path)) == before
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)


def test_bad_arguments_are_one_line(capsys, no_work):
    assert distcheck.main(["--only", "neither"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("accounting: error: "), err


def test_json_is_written_whole(capsys, tmp_path, monkeypatch):
    """The measurements land in the file atomically (no temporary entry left), the previous
    file replaced only by the whole new one."""
    from accounting.distcheck import compare, fake, gloo
    one = {"case": {"rank": 0, "world": 2, "label": "canned"}, "flops": {}}
    monkeypatch.setattr(gloo, "run_group", lambda cases: [one])
    monkeypatch.setattr(fake, "run_cases", lambda cases: [one])
    monkeypatch.setattr(compare, "compare", lambda m: [])
    target = tmp_path / "m.json"
    target.write_text("previous")
    assert distcheck.main(["--json", str(target)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok  rank  0 of 2: canned: 0/0 quantities agree\n")
    assert json.loads(target.read_text()) == [one, one]
    assert os.listdir(tmp_path) == ["m.json"]


def test_json_on_stdout_is_the_json_alone(capsys, monkeypatch):
    """--json -: the text report went to stdout too, before the JSON (issue 32): not JSON."""
    from accounting.distcheck import compare, fake, gloo
    one = {"case": {"rank": 0, "world": 2, "label": "canned"}, "flops": {}}
    monkeypatch.setattr(gloo, "run_group", lambda cases: [one])
    monkeypatch.setattr(fake, "run_cases", lambda cases: [one])
    monkeypatch.setattr(compare, "compare", lambda m: [])
    assert distcheck.main(["--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == [one, one]


def _session(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            rest = text[text.rindex(")") + 2:].split()
            if int(rest[3]) == sid and rest[0] != "Z":
                pids.append(int(entry))
    return pids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, fork")
@pytest.mark.parametrize("only,workers", [("gloo", 4), ("fake", 1)])
def test_ctrl_c_to_the_group_prints_one_line(tmp_path, only, workers):
    """Was: 'accounting: interrupted' two to five times (each forked rank inherited the
    handler python -m accounting.distcheck starts with, accounting/runtime/startup.py), and
    no --json guarantee. Now: once the ranks run, Ctrl-C to the group gives exit 130, the one
    line, no process left, and the --json target as it was."""
    pytest.importorskip("torch.distributed")
    (tmp_path / "m.json").write_text("previous")
    p = subprocess.Popen([sys.executable, "-m", "accounting.distcheck", "--only", only, "--json",
                          "m.json"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    end = time.monotonic() + 60
    while time.monotonic() < end and p.poll() is None and len(_session(p.pid)) < 1 + workers:
        time.sleep(0.01)
    assert p.poll() is None, p.communicate()[1][-2000:]
    time.sleep(0.5)  # inside the ranks' work
    os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(timeout=30)
        left = _session(p.pid)
        _, err = p.communicate(timeout=30)
    finally:
        for pid in _session(p.pid):
            os.kill(pid, signal.SIGKILL)
    assert p.returncode == 130, err[-2000:]
    assert err == b"accounting: interrupted\n", err[-3000:]
    assert not left, left
    assert sorted(os.listdir(tmp_path)) == ["m.json"]
    assert (tmp_path / "m.json").read_text() == "previous"
