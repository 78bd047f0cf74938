"""Issue 39, Must 1: the MoE, MLA and gated-DeltaNet kernel tables, and the fp8-block GEMM
question (accounting/timing/tables.py, layer_tables.py).

Expected values are rows read here straight from aiconfigurator-core's parquet files with
pyarrow (not through the lookup code), and the collector's own record: aiconfigurator's
collector/vllm/collect_gemm.py at d5bad971c (the vLLM 0.24.0 collection) timed fp8_block
GEMMs eagerly (`use_cuda_graph=gemm_type != "fp8_block"`), every other dtype from a CUDA
graph. Skipped, saying why, where aiconfigurator-core is not installed.
"""
from __future__ import annotations

import pytest

from accounting.timing import tables

needs_tables = pytest.mark.skipif(
    not tables.available(), reason="aiconfigurator-core is not installed (pip install -e '.[time]')")


def _rows(system: str, op: str, engine: str, version: str, table: str) -> list[dict]:
    import pyarrow.parquet as pq
    path = tables.root() / "data" / system / op / engine / version / f"{table}.parquet"
    return pq.read_table(path).to_pylist()


def _gemm_row(rows, dtype, m, n, k, kernel=None):
    hits = [r["latency"] for r in rows if r["gemm_dtype"] == dtype and (r["m"], r["n"], r["k"])
            == (m, n, k) and (kernel is None or r["kernel_source"] == kernel)]
    return min(hits) if hits else None


@needs_tables
def test_vllms_eager_fp8_block_table_is_replaced_by_sglangs_deepgemm_rows():
    """H200, DeepSeek-V3's MoE-free MLP shape at decode (m 32, n 2,048, k 7,168): vLLM
    0.24.0's fp8_block row is several times its own bf16 row (an fp8 GEMM reads half the
    bytes: the eager timing's launch gaps), so the planner reads SGLang 0.5.14's DeepGEMM
    row at that point and says why in the source."""
    vllm = _rows("h200_sxm", "gemm", "vllm", "0.24.0", "gemm_perf")
    eager, bf16 = _gemm_row(vllm, "fp8_block", 32, 2048, 7168), _gemm_row(vllm, "bfloat16", 32, 2048, 7168)
    assert eager > tables.FP8_PLAUSIBLE_RATIO * bf16  # 86.6 µs against 12.1 µs
    sglang = _rows("h200_sxm", "gemm", "sglang", "0.5.14", "gemm_perf")
    grid, src, kernel = tables.gemm("h200_sxm", "fp8_block", "vllm")
    assert src.engine == "sglang" and "in place of vllm 0.24.0's fp8_block table" in kernel
    row = _gemm_row(sglang, "fp8_block", 32, 2048, 7168, kernel.split(";")[0])
    assert grid(32, 2048, 7168).seconds == pytest.approx(row * 1e-3)


@needs_tables
def test_a_plausible_fp8_table_is_read_as_it_is():
    """vLLM 0.24.0's per-tensor fp8 table on H200 (CUTLASS scaled-mm, graph-replayed) is
    within the test's bound: its own row is the lookup."""
    vllm = _rows("h200_sxm", "gemm", "vllm", "0.24.0", "gemm_perf")
    grid, src, kernel = tables.gemm("h200_sxm", "fp8", "vllm")
    assert src.engine == "vllm" and ";" not in kernel
    assert grid(32, 2048, 7168).seconds == pytest.approx(
        _gemm_row(vllm, "fp8", 32, 2048, 7168, kernel) * 1e-3)
