"""Issue 45's soft items on the plan, the Python API and the report, each failing before
its fix: a node size that leaves a part-filled node was planned without a word; ModelConfig
refused numpy's integers that analyze() takes; a report whose matplotlib cannot make its
config folder printed matplotlib's two warnings before its one-line error."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import refused_in_one_line, run

ROOT = Path(__file__).resolve().parents[1]


def test_gpus_that_leave_a_part_filled_node_are_refused(capsys):
    refused_in_one_line(capsys, "plan", "gpt2-small", "--gpus", "8", "--gpus-per-node", "3",
                        "--gpu", "H100", expected="8 = 2 × 3 + 2")
    refused_in_one_line(capsys, "plan", "gpt2-small", "--gpus", "12", "--gpu", "H100",
                        expected="not a whole number of nodes of 8 GPUs")
    for gpus, per_node in (("6", "3"), ("2", "3"), ("4", None)):  # whole nodes, or one part
        extra = ["--gpus-per-node", per_node] if per_node else []
        code, _, err = run(capsys, "plan", "gpt2-small", "--gpus", gpus, *extra, "--gpu", "H100")
        assert code == 0, err


def test_model_config_takes_numpy_integers_as_analyze_does():
    np = pytest.importorskip("numpy")
    import accounting
    plain = dict(vocab_size=100, context_length=64, num_layers=2, d_model=64, num_heads=4,
                 d_ff=128, name="tiny")
    numpy = {**plain, "vocab_size": np.int64(100), "context_length": np.int32(64),
             "num_layers": np.uint8(2), "d_model": np.int16(64)}
    c = accounting.ModelConfig(**numpy)
    assert c == accounting.ModelConfig(**plain) and type(c.vocab_size) is int
    assert accounting.analyze(c, 64).param_count == \
        accounting.analyze(accounting.ModelConfig(**plain), np.int64(64)).param_count
    for junk in (np.bool_(True), np.float64(100.0)):  # as True and 100.0 are refused
        with pytest.raises(ValueError, match="vocab_size must be a positive integer"):
            accounting.ModelConfig(**{**plain, "vocab_size": junk})


def test_report_with_matplotlibs_folder_unmakeable_prints_one_line(tmp_path):
    pytest.importorskip("matplotlib")
    # a HOME under /proc cannot be made, even by root: matplotlib falls back to a temporary
    # folder and logs two warnings; the run's own error must be its one stderr line
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME",
                                                            "XDG_CACHE_HOME")}
    env.update(HOME="/proc/no-such-home", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "accounting", "report", "--no-verify", "--out",
                        "/proc/no-such-folder/report"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=300)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1, err
    assert err.startswith("accounting: error: --out") and "Matplotlib" not in err
