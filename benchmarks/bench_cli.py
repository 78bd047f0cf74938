"""Wall time of the analytic CLI (`python -m accounting MODEL --no-verify`), median of N runs.

The goals (issues 3, 9, 10 and 13): at most 0.2 s median on a 2-core machine, for every
architecture, and for a Hugging Face config.json (`--config llama.json --no-verify`). Each run is a fresh
interpreter, as a user's shell would start it, so interpreter start-up is included.

    python benchmarks/bench_cli.py [--runs 15]
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

CASES = (
    ("gpt2-small", "--ctx", "1024"),
    ("gpt2-xl", "--ctx", "16384"),
    ("gpt2-xl", "--ctx", "16384", "--pass", "train", "--format", "json"),
    ("gpt2-xl", "--ctx", "10000000", "--batch", "10000"),
    ("openai-community/gpt2-xl",),
    ("meta-llama/Llama-3.1-8B", "--ctx", "8192", "--pass", "train"),
    # a Hugging Face config.json read through accounting/architecture/hf_config.py (issue 10)
    ("--config", "accounting/hf_configs/meta-llama/Llama-3.1-8B.json"),
    ("--config", "accounting/hf_configs/Qwen/Qwen3-8B.json", "--ctx", "8192", "--pass", "train"),
    ("--list",),
    ("gpt2-xl", "--compare-formulas"),
    ("openai-community/gpt2-xl", "--compare-formulas", "--format", "json"),
    ("meta-llama/Llama-3.1-8B", "--compare-formulas", "--ctx", "8192"),
    # the layer cap --help states (10,000): the analytic path stays instant at the bound
    # (was a 3 s wall-clock assert in tests/test_hostile_limits.py, which failed under load)
    ("--vocab-size", "100", "--context-length", "64", "--d-model", "64", "--num-heads", "4",
     "--d-ff", "128", "--num-layers", "10000", "--format", "json"),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=15)
    n = p.parse_args().runs
    byte_compile()  # as an installed copy has them (see benchmarks/runner.py)
    print(f"python -m accounting ... --no-verify: median of {n} runs, {os.cpu_count()} CPUs")
    print(f"{'case':<60} {'median':>9} {'min':>9} {'max':>9}")
    baseline = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        baseline.append(time.perf_counter() - t0)
    print(f"{'(bare interpreter start-up, for reference)':<60} {statistics.median(baseline):>8.3f}s "
          f"{min(baseline):>8.3f}s {max(baseline):>8.3f}s")
    for case in CASES:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "accounting", *case, "--no-verify"], check=True,
                           stdout=subprocess.DEVNULL, cwd=ROOT)
            times.append(time.perf_counter() - t0)
        print(f"{' '.join(case):<60} {statistics.median(times):>8.3f}s {min(times):>8.3f}s "
              f"{max(times):>8.3f}s")


if __name__ == "__main__":
    main()
