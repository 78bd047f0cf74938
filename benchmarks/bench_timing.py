"""Wall time of plans that time every op from measured kernels (issue 39), median of N
runs, each a fresh interpreter (start-up, imports and the first read of aiconfigurator-
core's tables included): one GPU, and `--search` over 4,096 GPUs.

Goals (issue 39): a plan with its time under 1 s; `--search` on 4,096 GPUs under 3 s.

    python benchmarks/bench_timing.py [--runs 5]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.runner import goals  # noqa: E402

CASES = (
    (("plan", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx", "8192", "--batch", "2",
      "--attention", "sdpa"), 1.0),
    (("plan", "gpt2-xl", "--gpu", "H200", "--precision", "bf16-mixed"), 1.0),
    (("serve", "meta-llama/Llama-3.1-8B", "--gpu", "H200", "--ctx", "8192"), 1.0),
    (("plan", "meta-llama/Llama-3.1-8B", "--gpus", "4096", "--search", "--gpu", "H100",
      "--ctx", "8192", "--batch", "4096", "--precision", "bf16-mixed", "--attention", "sdpa"),
     3.0),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    goals("Plans timed from measured kernels", CASES, p.parse_args().runs)


if __name__ == "__main__":
    main()
