"""The fp8-block GEMM question of docs/timing.md: each aiconfigurator-core fp8 and fp8_block
GEMM table against its own bf16 rows (the test accounting/timing/tables.py applies before
reading one), and the H200's measured GEMMs (tests/data/fp8_gemm_h200.json, written by
benchmarks/gpu_fp8_recipes.py: CUDA-graph replay, weights past L2) beside vLLM 0.24.0's
fp8_block table and the rows the planner reads instead. Regenerate with

    python benchmarks/fp8_tables.py --update     # rewrite the block in docs/timing.md
    python benchmarks/fp8_tables.py              # print it

tests/test_timing_tables.py checks that the block is what this prints (where
aiconfigurator-core is installed).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "timing.md"
MEASURED = ROOT / "tests" / "data" / "fp8_gemm_h200.json"
START, END = "<!-- fp8-tables -->\n", "<!-- end fp8-tables -->\n"
ENGINES = (("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TRT-LLM"))
ROWS_M = (4, 32, 128, 1024, 4096)


def ratio_table() -> str:
    from accounting.timing import tables
    head = "| system | " + " | ".join(f"{name} fp8 | {name} fp8_block" for _, name in ENGINES)
    lines = [head + " |", "|---|" + "---:|" * (2 * len(ENGINES))]
    systems = sorted(p.name for p in (tables.root() / "data").iterdir() if (p / "gemm").is_dir())
    for system in systems:
        cells = []
        for eng, _ in ENGINES:
            for dtype in ("fp8", "fp8_block"):
                r = tables.fp8_ratio(system, dtype, eng)
                cells.append("–" if r is None else f"{r:.2f}" + (
                    " (not read)" if r > tables.FP8_PLAUSIBLE_RATIO else ""))
        if any(c != "–" for c in cells):
            lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def measured_table() -> str:
    from accounting.timing import tables
    data = json.loads(MEASURED.read_text())
    eager = tables._gemm_rows("h200_sxm", "fp8_block", "vllm")[0]
    grid, src, kernel = tables.gemm("h200_sxm", "fp8_block", "vllm")
    lines = ["| m × n × k | bf16 measured | fp8 block measured | vLLM 0.24.0 fp8_block table "
             "| planner reads | planner / measured |", "|---|---:|---:|---:|---:|---:|"]
    for r in data["rows"]:
        block = r.get("fp8_block_1x128_128x128_c_us")
        if r["m"] not in ROWS_M or block is None:
            continue
        m, n, k = r["m"], r["n"], r["k"]
        t_eager = eager(m, n, k).seconds * 1e6
        t = grid(m, n, k).seconds * 1e6
        lines.append(f"| {m:,} × {n:,} × {k:,} | {r['bf16_us']:.1f} µs | {block:.1f} µs | "
                     f"{t_eager:.1f} µs | {t:.1f} µs | {t / block:.2f} |")
    return ("\n".join(lines) + f"\n\nPlanner reads: {src} ({kernel.split(';')[0]}). Measured: "
            f"{MEASURED.relative_to(ROOT)} ({data['info']['device']}, torch "
            f"{data['info']['torch']}; fp8 block: torch._scaled_mm with 1×128 activation and "
            "128×128 weight scales, refused below M = 4).\n")


def block() -> str:
    return (ratio_table() + "\nMedian over the shapes with M ≤ 64 both tables measured of the "
            "fp8 (fp8_block) GEMM time over the same engine's bf16 time; a table past "
            "4 is not read.\n\n" + measured_table())


BLOCKS = ((START, END, block),)

if __name__ == "__main__":
    from benchmarks.doc_blocks import main
    main(__file__, DOC, BLOCKS)
