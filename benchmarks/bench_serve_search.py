"""Wall time of `serve --search` (issue 40), median of N runs, each a fresh interpreter
(start-up, imports and the first read of the measured-kernel tables included): layout
searches over up to 64 GPUs.

Goal (issue 40): a search over ≤ 64 GPUs under 5 s (median).

    python benchmarks/bench_serve_search.py [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.runner import byte_compile  # noqa: E402

L70 = "tests/data/serving/Llama-3.1-70B.json"
SLA = ("--isl", "4096", "--osl", "1024", "--ttft", "3", "--tpot", "0.05")
CASES = (
    (("serve", "--config", L70, "--gpu", "H100", "--search", "--max-gpus", "64", *SLA), 5.0),
    (("serve", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--search", "--max-gpus", "64",
      *SLA), 5.0),
    (("serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--search", "--max-gpus", "64",
      *SLA), 5.0),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    n = p.parse_args().runs
    byte_compile()
    print(f"python -m accounting serve --search: median of {n} runs, {os.cpu_count()} CPUs")
    print(f"{'case':<110} {'median':>8} {'min':>8} {'max':>8}  goal")
    missed = 0
    for case, goal in CASES:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "accounting", *case], check=True,
                           stdout=subprocess.DEVNULL, cwd=ROOT)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        missed += med > goal
        print(f"{' '.join(case):<110} {med:>7.3f}s {min(times):>7.3f}s {max(times):>7.3f}s  "
              f"≤ {goal:g} s {'met' if med <= goal else 'MISSED'}")
    print("every goal met" if not missed else f"{missed} goal(s) missed")


if __name__ == "__main__":
    main()
