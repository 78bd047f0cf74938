"""Wall time of `serve --search` (issue 40), median of N runs, each a fresh interpreter
(start-up, imports and the first read of the measured-kernel tables included): layout
searches over up to 64 GPUs.

Goal (issue 40): a search over ≤ 64 GPUs under 5 s (median), also with length
distributions, a TTFT percentile and a request rate.

    python benchmarks/bench_serve_search.py [--runs 5]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.runner import goals  # noqa: E402

L70 = "tests/data/serving/Llama-3.1-70B.json"
SLA = ("--isl", "4096", "--osl", "1024", "--ttft", "3", "--tpot", "0.05")
CASES = (
    (("serve", "--config", L70, "--gpu", "H100", "--search", "--max-gpus", "64", *SLA), 5.0),
    (("serve", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--search", "--max-gpus", "64",
      *SLA), 5.0),
    (("serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--search", "--max-gpus", "64",
      *SLA), 5.0),
    # lengths as distributions (16 prefill points a layout), TTFT at p90, a request rate (the
    # wait for a server in every candidate): docs/serving_search.md
    (("serve", "--config", L70, "--gpu", "H100", "--search", "--max-gpus", "64", "--isl",
      "uniform:1024,8192", "--osl", "normal:1024,256", "--ttft", "3", "--tpot", "0.2",
      "--percentile", "90", "--request-rate", "10"), 5.0),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    goals("serve --search", CASES, p.parse_args().runs, 110)


if __name__ == "__main__":
    main()
