"""Wall time of `python -m accounting report`, against the same report without cross-checks.

    python benchmarks/bench_report.py [--runs 5] [--one-core]

Goal (issue 12): the fully verified report (every cross-check run) in at most 12 s on a
2-core machine. Peer measured in the same run, run by run alternately: the same report
with --no-verify (sweeps, formulas, figures, Markdown: everything but the checks), so the
ratio is what the cross-checks add. --one-core adds the verified report with
ACCOUNTING_WORKERS=0 (every check in the main process, one after another). Each run writes
into a fresh temporary folder; peak RSS as in runner.py.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from accounting.tables import render  # noqa: E402
from accounting.tables.table import Table  # noqa: E402
from benchmarks.runner import interleaved, machine, python  # noqa: E402

GOAL_S = 12.0


def table(runs: int, one_core: bool) -> Table:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp))
        cases = [("report --no-verify (peer)", python("-m", "accounting", "report", "--no-verify",
                                                      "--out", out), {}),
                 ("report (every cross-check)", python("-m", "accounting", "report", "--out", out),
                  {})]
        if one_core:
            cases.append(("report, one core", cases[1][1], {"ACCOUNTING_WORKERS": "0"}))
        results = interleaved(cases, runs)
    peer = results[0]
    rows = []
    for r in results:
        goal = "" if r is peer else ("met" if r.median <= GOAL_S else "MISSED")
        if r.label.endswith("one core"):
            goal = "(for comparison)"
        rows.append((r.label, f"{r.median:.2f}", f"{min(r.walls):.2f}", f"{max(r.walls):.2f}",
                     f"{r.median / peer.median:.2f}×", r.cpu_median, r.peak_mb, r.tree_mb,
                     r.exits, goal))
    return Table(f"python -m accounting report (median of {runs} runs, {machine()})",
                 ("command", "median s", "min s", "max s", "÷ peer", "CPU s", "peak RSS MB",
                  "tree RSS MB", "exit", f"goal ≤ {GOAL_S:g} s"), tuple(rows), align="lrrrrrrrll",
                 notes=("tree RSS MB: the largest sum over the report and its workers, sampled "
                        "every 10 ms (pages shared after the fork counted in each: an upper "
                        "bound).",))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--one-core", action="store_true")
    ns = p.parse_args()
    sys.stdout.write(render.text([table(ns.runs, ns.one_core)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
