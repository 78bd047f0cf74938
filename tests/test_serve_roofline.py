"""`serve`'s TPOT where no measured table times the GPU (a card aiconfigurator-core does not
cover, or the package absent): the roofline fallback of timing/ops.py must read each weight
matrix once per decode step. It timed a GEMM by its FLOPs alone, so a decode step at batch 1
came out 60× under the time to read the weights (0.20 ms for Llama-3.1-8B on an A100-40GB,
0.08 ms on an H100 without the tables), with exit 0.

Expected values: a physical lower bound by hand algebra. Llama-3.1-8B has 8,030,261,248
parameters (its published count); a decode step reads all but the embedding table
(128,256 × 4,096 = 525,336,576 parameters, of which it reads one row), bf16: at least
(8,030,261,248 − 525,336,576) × 2 = 15,009,849,344 bytes per step at the datasheet bandwidth
(A100 40GB: 1,555 GB/s; H100 SXM: 3.35 TB/s)."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from accounting.cli.main import main

WEIGHT_BYTES = (8_030_261_248 - 128_256 * 4_096) * 2


def _tpot(argv: list[str]) -> tuple[float, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv + ["--format", "json"]) == 0
    d = json.loads(out.getvalue())
    return d["tpot_seconds"]["approx"], d["timing_source"]


def test_a_gpu_without_tables_reads_the_weights_each_decode_step():
    tpot, source = _tpot(["serve", "meta-llama/Llama-3.1-8B", "--gpu", "A100-40GB",
                          "--ctx", "2048", "--concurrency", "1"])
    assert source == "roofline"
    assert tpot >= WEIGHT_BYTES / 1.555e12  # 9.65 ms


@pytest.fixture
def no_tables(monkeypatch):
    """aiconfigurator-core not installed: root() is None, and every lookup cached from root()
    by an earlier test in this process is cleared (before and after), so none survives."""
    from accounting.timing import tables

    def clear():
        for value in vars(tables).values():
            if hasattr(value, "cache_clear"):
                value.cache_clear()
    clear()
    monkeypatch.setattr(tables, "root", lambda: None)
    yield
    monkeypatch.undo()
    clear()


def test_without_the_tables_the_decode_step_reads_the_weights(no_tables):
    tpot, source = _tpot(["serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100",
                          "--ctx", "2048", "--concurrency", "1"])
    assert source == "roofline"
    assert tpot >= WEIGHT_BYTES / 3.35e12  # 4.48 ms


@pytest.mark.parametrize("gpu", ["A100-40GB", "H100"])
def test_the_roofline_label_does_not_claim_measured_tables(gpu, no_tables):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["serve", "meta-llama/Llama-3.1-8B", "--gpu", gpu, "--ctx", "2048",
                     "--concurrency", "1"]) == 0
    ttft = next(line for line in out.getvalue().splitlines() if line.startswith("TTFT"))
    assert "roofline" in ttft and "measured tables" not in ttft.replace("no measured", "")
