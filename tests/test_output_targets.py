"""Output targets that lost a file (issue 32), each fixed:

- `report --out DIR` replaced DIR/figures/ as a whole: a user's DIR/figures/my_plot.png was
  deleted and the run exited 0. A figures/ folder holding anything the report does not
  write is now refused before any work (exit 2, one line), and the file stays.
- `-o` set to the `--config` file overwrote the input with the answer: refused.
- `-o` onto a hard-linked file replaced it with a new file (the link broken); run as root
  onto another user's file, the new file was root's. Such a target is now written in
  place once the whole answer is ready: the links and the owner stay.
"""
from __future__ import annotations

import json
import os

import pytest

from accounting.runtime.safe_io import write_atomic
from cli_run import refused_in_one_line, run

SENTINEL = b"the user's own plot\n"


def test_report_refuses_a_figures_folder_with_a_file_it_did_not_write(capsys, tmp_path):
    out = tmp_path / "rep"
    (out / "figures").mkdir(parents=True)
    mine = out / "figures" / "my_plot.png"
    mine.write_bytes(SENTINEL)
    refused_in_one_line(capsys, "report", "--no-verify", "--out", str(out),
                        expected="figures/ holds 'my_plot.png', which the report does not write")
    assert mine.read_bytes() == SENTINEL
    assert sorted(os.listdir(out)) == ["figures"]  # nothing written, no temporary entry


def test_report_files_beside_figures_are_not_touched_by_the_check(tmp_path):
    from accounting.cli.report import _no_foreign_figures, _own_figures
    out = tmp_path / "rep"
    (out / "figures").mkdir(parents=True)
    (out / "notes.txt").write_bytes(SENTINEL)  # beside figures/: the report leaves it
    for name in sorted(_own_figures())[:3]:  # a previous report's own files: accepted
        (out / "figures" / name).write_bytes(b"old")
    _no_foreign_figures(out, "rep")


def _config(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(dict(vocab_size=100, context_length=64, num_layers=2, d_model=64,
                                 num_heads=4)))
    return p


@pytest.mark.parametrize("how", ["same name", "relative", "symlink", "hard link"])
def test_o_refuses_the_config_file(capsys, tmp_path, monkeypatch, how):
    p = _config(tmp_path)
    before = p.read_bytes()
    monkeypatch.chdir(tmp_path)
    target = {"same name": str(p), "relative": "c.json"}.get(how)
    if how == "symlink":
        os.symlink(p, tmp_path / "l.json")
        target = str(tmp_path / "l.json")
    if how == "hard link":
        os.link(p, tmp_path / "h.json")
        target = str(tmp_path / "h.json")
    refused_in_one_line(capsys, "--config", str(p), "-o", target,
                        expected="is the --config file")
    assert p.read_bytes() == before


def test_o_keeps_a_hard_link(capsys, tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"old")
    os.link(a, b)
    code, _, err = run(capsys, "gpt2-small", "--no-verify", "-o", str(a))
    assert code == 0, err
    assert os.path.samefile(a, b) and os.stat(a).st_nlink == 2
    assert b.read_bytes().startswith(b"Answer") or b"gpt2" in b.read_bytes()
    assert b.read_bytes() == a.read_bytes() != b"old"
    assert [n for n in os.listdir(tmp_path) if n not in ("a.txt", "b.txt")] == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_o_as_root_keeps_another_users_file_theirs(tmp_path):
    p = tmp_path / "theirs.txt"
    p.write_bytes(b"old")
    os.chown(p, 4321, 4321)
    os.chmod(p, 0o640)
    write_atomic(p, "new answer\n")
    st = os.stat(p)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (4321, 4321, 0o640)
    assert p.read_bytes() == b"new answer\n"
    assert os.listdir(tmp_path) == ["theirs.txt"]


def test_o_in_place_writes_a_shorter_answer_whole(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"x" * 10_000)
    os.link(a, b)
    write_atomic(a, "short\n")
    assert b.read_bytes() == b"short\n"


def test_o_an_ordinary_file_is_still_replaced_atomically(tmp_path):
    p = tmp_path / "p.txt"
    p.write_bytes(b"old")
    inode = os.stat(p).st_ino
    write_atomic(p, "new\n")
    assert p.read_bytes() == b"new\n" and os.stat(p).st_ino != inode  # a rename, as before
