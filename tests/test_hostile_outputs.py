"""Issue 23's softer defects of files and outputs, one test each: a legal long file name,
temporary files left by a killed run, duplicate keys in a config file, -o /dev/stdout on a
pipe, the training pass's JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accounting.cli.main import main
from accounting.runtime import temp_names

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--vocab-size", "100", "--context-length", "64", "--num-layers", "2", "--d-model",
        "64", "--num-heads", "4", "--no-verify"]


# ---- temporary names ---------------------------------------------------------------------------
@pytest.mark.parametrize("char,count", [("日", 84), ("é", 126), ("x", 255)])
def test_a_legal_long_name_is_written(capsys, tmp_path, char, count):
    """Was: exit 2 'File name too long' for a 252-byte name (84 three-byte characters): the
    temporary name kept 100 characters of it plus 13, 312 bytes. Linux allows 255 bytes per
    name (NAME_MAX, <linux/limits.h>), whatever the characters."""
    name = char * count
    assert len(name.encode()) <= os.pathconf(tmp_path, "PC_NAME_MAX")
    assert main(TINY + ["--brief", "-o", str(tmp_path / name)]) == 0, capsys.readouterr().err
    assert os.listdir(tmp_path) == [name]
    assert (tmp_path / name).read_text().startswith("Answer: custom")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_temporary_files_of_a_killed_run_are_removed_by_the_next_write(capsys, tmp_path):
    """Was: a run killed between creating its temporary file and renaming it (SIGKILL, a
    power cut) left '.out.txt.XXXXXXXX.tmp' for good. Ours are named recognisably; the next
    write to the same target removes those whose process has ended, and nothing else."""
    target = tmp_path / "out.txt"
    stem = temp_names.stem(target)
    dead, alive = _dead_pid(), os.getppid()
    stale = tmp_path / f"{stem}{dead}-abcdefgh.tmp"
    running = tmp_path / f"{stem}{alive}-abcdefgh.tmp"  # a write in progress elsewhere
    other = tmp_path / f"{temp_names.stem(tmp_path / 'other.txt')}{dead}-abcdefgh.tmp"
    mine_looking = tmp_path / ".out.txt.notes.tmp"  # the user's own file
    for p in (stale, running, other, mine_looking):
        p.write_text("x")
    assert main(TINY + ["--brief", "-o", str(target)]) == 0, capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == sorted(["out.txt", running.name, other.name,
                                                    mine_looking.name])


def test_a_killed_write_leaves_a_recognisable_temporary_file(tmp_path):
    """SIGKILL right after the temporary file is written (before the rename): the old file
    is whole, the leftover is ours by name, and the next run cleans it."""
    script = ("import os, signal, sys\n"
              "from accounting.runtime import safe_io\n"
              "real = os.replace\n"
              "os.replace = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)\n"
              "from accounting.cli.main import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    target = tmp_path / "out.txt"
    target.write_text("previous\n")
    r = subprocess.run([sys.executable, "-c", script, *TINY, "-o", str(target)],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60)
    assert r.returncode < 0  # killed
    left = sorted(os.listdir(tmp_path))
    assert len(left) == 2 and target.read_text() == "previous\n", left
    assert left[0].startswith(".out.txt.accounting-") and left[0].endswith(".tmp"), left
    r = subprocess.run([sys.executable, "-m", "accounting", *TINY, "-o", str(target)],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert os.listdir(tmp_path) == ["out.txt"]


# ---- duplicate keys ----------------------------------------------------------------------------
@pytest.mark.parametrize("text,key", [
    ('{"vocab_size": 100, "vocab_size": 200, "context_length": 64, "num_layers": 2, '
     '"d_model": 64, "num_heads": 4}', "vocab_size"),
    ('{"model_type": "llama", "hidden_size": 64, "hidden_size": 128}', "hidden_size"),
    ('{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, '
     '"num_heads": 4, "rope_scaling": {"factor": 2, "factor": 4}}', "factor"),
])
def test_duplicate_keys_are_refused(capsys, tmp_path, text, key):
    """Was: the last value silently won (the README promises nothing is dropped silently);
    a JSON object's names SHOULD be unique (RFC 8259 §4) and readers differ on which wins."""
    path = tmp_path / "c.json"
    path.write_text(text)
    assert main(["--config", str(path), "--no-verify"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"has the key '{key}' twice" in err, err


# ---- -o /dev/stdout ----------------------------------------------------------------------------
@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="no /dev/stdout")
def test_o_dev_stdout_on_a_pipe():
    """Was, on a pipe: '-o /dev/stdout is a symbolic link to a file that does not exist
    (/proc/.../fd/pipe:[...])'. It is standard output: written there, as '-' is."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    dash = subprocess.run([sys.executable, "-m", "accounting", *TINY, "--brief", "-o", "-"],
                          capture_output=True, env=env, timeout=60)
    r = subprocess.run([sys.executable, "-m", "accounting", *TINY, "--brief", "-o", "/dev/stdout"],
                       capture_output=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert r.stdout == dash.stdout and r.stdout.startswith(b"Answer: custom")
    e = subprocess.run([sys.executable, "-m", "accounting", *TINY, "--brief", "-o", "/dev/stderr"],
                       capture_output=True, env=env, timeout=60)
    assert e.returncode == 2 and b"is an open stream of this process" in e.stderr, e.stderr


# ---- the training pass's JSON ------------------------------------------------------------------
def test_train_json_labels_its_non_matmul_flops(capsys):
    """Was: 'non_matmul_flops' of the forward pass beside the training pass's matmul FLOPs,
    unmarked. The ledger counts forward non-matmul ops only: the JSON says whose they are,
    and they are the same number as the forward analysis' (one forward pass in each)."""
    assert main(TINY + ["--pass", "train", "--format", "json"]) == 0
    train = json.loads(capsys.readouterr().out)
    assert main(TINY + ["--format", "json"]) == 0
    forward = json.loads(capsys.readouterr().out)
    assert train["non_matmul_pass"] == "forward" == forward["non_matmul_pass"]
    assert train["non_matmul_flops"] == forward["non_matmul_flops"]
    assert "all_flops" not in train  # no train total that mixes the two
