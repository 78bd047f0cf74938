"""Speed of sweeps: exact matmul FLOPs over many (config, T, B) points.

    python benchmarks/bench_sweep.py [--runs 5]

Goals (issue 12): the vectorised closed forms (accounting.analysis.grid.flops_grid) evaluate at
least 10^6 (config, T, B) total-FLOPs points per second on grids of contexts × batches;
`accounting.sweep` of 4 presets × 1,000 contexts (a DataFrame) takes at most 0.35 s in a
fresh process, pandas' import included. Peers measured in the same run: analyze() in a
loop (points per second; the figures are its multiples), the same DataFrame built by one
analyze() per point (frames.sweep_by_analysis, what sweep did before), and a fresh
interpreter that only imports pandas (the floor of any DataFrame sweep). Medians of
--runs runs; peak RSS is this process's (in-process rows) or the child's (fresh rows).
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from accounting import analyze, get_preset  # noqa: E402
from accounting.tables import render
from accounting.analysis.grid import flops_grid  # noqa: E402
from accounting.tables.table import Table  # noqa: E402
from benchmarks.runner import interleaved, machine, python  # noqa: E402

PRESETS = ("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl")
GRID_SEQS = tuple(range(128, 128 * 1001, 128))  # 1,000 contexts, 128 .. 128,000
GRID_BATCHES = tuple(range(1, 251))  # 250 batch sizes
LOOP_SEQS = tuple(range(1024, 1024 + 50 * 64, 64))  # analyze() is slow: 50 × 4 batches
LOOP_BATCHES = (1, 2, 4, 8)
FRAME_SEQS = tuple(range(1024, 1024 + 1000 * 16, 16))  # 4 presets × 1,000 contexts
POINTS_GOAL = 1_000_000
FRESH_GOAL_S = 0.35


def _median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _rss_mb() -> str:
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6:.0f}"


def in_process(runs: int) -> Table:
    configs = [get_preset(n) for n in PRESETS]
    loop_points = len(configs) * len(LOOP_SEQS) * len(LOOP_BATCHES)
    grid_points = len(configs) * len(GRID_SEQS) * len(GRID_BATCHES)
    loop = _median_time(lambda: [analyze(c, t, b).matmul_flops() for c in configs
                                 for t in LOOP_SEQS for b in LOOP_BATCHES], runs)
    grid = _median_time(lambda: [flops_grid(c, GRID_SEQS, GRID_BATCHES) for c in configs], runs)
    train = _median_time(lambda: [flops_grid(c, GRID_SEQS, GRID_BATCHES, "train")
                                  for c in configs], runs)
    from accounting.frames import sweep, sweep_by_analysis
    old = _median_time(lambda: sweep_by_analysis(PRESETS, FRAME_SEQS), runs)
    new = _median_time(lambda: sweep(PRESETS, FRAME_SEQS), runs)
    peer = loop_points / loop
    rows = [
        ("analyze(c, T, B).matmul_flops() in a loop (peer)", f"{loop_points:,}", f"{loop:.3f}",
         f"{peer:,.0f}", "1.0×", ""),
        ("flops_grid(c, seqs, batches), forward", f"{grid_points:,}", f"{grid:.3f}",
         f"{grid_points / grid:,.0f}", f"{grid_points / grid / peer:,.0f}×",
         "met" if grid_points / grid >= POINTS_GOAL else "MISSED"),
        ("flops_grid(..., 'train')", f"{grid_points:,}", f"{train:.3f}",
         f"{grid_points / train:,.0f}", f"{grid_points / train / peer:,.0f}×",
         "met" if grid_points / train >= POINTS_GOAL else "MISSED"),
        ("DataFrame by analyze() per point (sweep before, peer)", f"{len(PRESETS) * len(FRAME_SEQS):,}",
         f"{old:.3f}", f"{len(PRESETS) * len(FRAME_SEQS) / old:,.0f}", "1.0×", ""),
        ("accounting.sweep (closed forms)", f"{len(PRESETS) * len(FRAME_SEQS):,}", f"{new:.3f}",
         f"{len(PRESETS) * len(FRAME_SEQS) / new:,.0f}", f"{old / new:,.1f}×", ""),
    ]
    return Table(f"Sweeps in-process (median of {runs} runs, {machine()}; peak RSS "
                 f"{_rss_mb()} MB)",
                 ("evaluation", "(config, T, B) points", "median s", "points/s", "× peer",
                  f"goal ≥ {POINTS_GOAL:,}/s"), tuple(rows), align="lrrrrl",
                 notes=(f"Grid: {len(PRESETS)} CS336 presets × {len(GRID_SEQS):,} contexts "
                        f"({GRID_SEQS[0]:,}..{GRID_SEQS[-1]:,}) × {len(GRID_BATCHES)} batch sizes, "
                        "total matmul FLOPs (executed), exact integers; the loop: "
                        f"{len(LOOP_SEQS)} contexts × {len(LOOP_BATCHES)} batch sizes.",
                        "DataFrame: 4 presets × 1,000 contexts, one row per component "
                        "(16,000 rows); equal frames (tests/test_grid.py)."))


FRESH = ("import accounting; accounting.sweep({presets!r}, range(1024, 1024 + 1000 * 16, 16))")
NO_TEARDOWN = "; import os; os._exit(0)"  # end without the interpreter's teardown


def fresh(runs: int) -> Table:
    code = FRESH.format(presets=list(PRESETS))
    pandas, sweep_, pandas_quick, sweep_quick = interleaved([
        ("python -c 'import pandas' (floor)", python("-c", "import pandas"), {}),
        ("python -c 'import accounting; accounting.sweep(4 presets, 1,000 contexts)'",
         python("-c", code), {}),
        ("  the floor, ending with os._exit (no teardown)",
         python("-c", "import pandas" + NO_TEARDOWN), {}),
        ("  the sweep, ending with os._exit (no teardown)", python("-c", code + NO_TEARDOWN), {}),
    ], runs)
    rows = []
    for r in (pandas, sweep_, pandas_quick, sweep_quick):
        goal = "met" if r.median <= FRESH_GOAL_S else "MISSED"
        rows.append((r.label, f"{r.median:.3f}", f"{min(r.walls):.3f}", f"{max(r.walls):.3f}",
                     f"{r.median / pandas.median:.2f}×", r.cpu_median, r.peak_mb, r.exits,
                     goal if r in (sweep_, sweep_quick) else ""))
    return Table(f"The DataFrame sweep in a fresh process (median of {runs} runs, {machine()})",
                 ("command", "median s", "min s", "max s", "÷ floor", "CPU s", "peak RSS MB", "exit",
                  f"goal ≤ {FRESH_GOAL_S:g} s"), tuple(rows), align="lrrrrrrll",
                 notes=("Each run a fresh interpreter (start-up and imports included); floor: "
                        "the pandas import alone, which any DataFrame sweep pays.",
                        "No teardown: the same two runs ending with os._exit(0) once the sweep "
                        "has returned: the time to the DataFrame; the difference is the "
                        "interpreter's teardown at exit (numpy's and pandas' modules), which any "
                        "script that imports pandas pays. The goal is judged on both readings.",
                        "The project's .pyc files are written first, as an install writes them "
                        "(benchmarks/runner.py, byte_compile)."))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    ns = p.parse_args()
    sys.stdout.write(render.text([in_process(ns.runs), fresh(ns.runs)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
