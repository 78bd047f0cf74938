"""Wall time of the analytic plan (`python -m accounting plan MODEL ...`), median of N runs,
each a fresh interpreter (start-up and imports included), for the recipes of issue 28:
the course default, a Hugging Face preset's default (transformers' implementation in
bf16-mixed), 8-bit AdamW, Adafactor, Muon, bf16-master, and JSON output.

Goal (issue 28): the analytic plan under 0.5 s median.

    python benchmarks/bench_plan.py [--runs 7]
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

GOAL_S = 0.5
LLAMA = ("plan", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx", "8192")
CASES = (
    ("plan", "gpt2-xl", "--gpu", "H100"),
    LLAMA,
    LLAMA + ("--optimizer", "adamw8bit"),
    LLAMA + ("--optimizer", "adafactor", "--precision", "bf16"),
    LLAMA + ("--optimizer", "muon", "--precision", "bf16-master"),
    LLAMA + ("--recompute", "full", "--format", "json"),
    ("plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--ctx", "32768", "--recompute", "selective"),
    ("plan", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--ctx", "4096"),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7)
    n = p.parse_args().runs
    byte_compile()
    print(f"python -m accounting plan ...: median of {n} runs, {os.cpu_count()} CPUs; "
          f"goal ≤ {GOAL_S} s")
    print(f"{'case':<96} {'median':>8} {'min':>8} {'max':>8}  goal")
    worst = 0.0
    for case in CASES:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "accounting", *case], check=True,
                           stdout=subprocess.DEVNULL, cwd=ROOT)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        worst = max(worst, med)
        print(f"{' '.join(case[1:]):<96} {med:>7.3f}s {min(times):>7.3f}s {max(times):>7.3f}s  "
              f"{'met' if med <= GOAL_S else 'MISSED'}")
    print(f"slowest median {worst:.3f} s: goal {'met' if worst <= GOAL_S else 'MISSED'}")
    baseline = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        baseline.append(time.perf_counter() - t0)
    print(f"(bare interpreter start-up, for reference: {statistics.median(baseline):.3f} s)")
    # the same plans in this process, once imported: the analytic work and its rendering
    import contextlib
    import io
    from accounting.cli.main import main as cli
    for case in CASES:
        times = []
        for _ in range(n):
            from accounting.ledger.ledger import ledger, unfolded_ledger
            ledger.cache_clear()
            unfolded_ledger.cache_clear()
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                cli(list(case))
            times.append(time.perf_counter() - t0)
        print(f"in process, ledgers uncached: {' '.join(case[1:]):<80} "
              f"{statistics.median(times):.3f}s")


if __name__ == "__main__":
    main()
