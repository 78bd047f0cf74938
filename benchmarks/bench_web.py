"""Time to an answer on the web page (python -m accounting web): a page load in Chromium,
from navigation to the answer block on screen, median of N runs (the first, cold: presets
read, modules imported, reported apart), and the server's share (the HTML over HTTP).

    python benchmarks/bench_web.py [--runs 5]
"""
from __future__ import annotations

import argparse
import statistics
import time
import urllib.request

from web_browser import browser_page, served

CASES = (
    ("gpt2-xl at 16k (FLOPs and where they go)", "?model=gpt2-xl&ctx=16384"),
    ("Llama-3.1-8B training plan (H100, bf16-mixed, T = 8,192)",
     "?question=plan&model=meta-llama/Llama-3.1-8B&ctx=8192&gpu=H100&precision=bf16-mixed"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ns = ap.parse_args()
    with served() as base, browser_page() as page:
        print("| question | cold page (s) | page, median (s) | server only, median (s) |")
        print("| --- | ---: | ---: | ---: |")
        for title, query in CASES:
            times = []
            for _ in range(ns.runs + 1):
                page.goto("about:blank")
                t = time.perf_counter()
                page.goto(base + query)
                page.wait_for_selector("#answer")
                times.append(time.perf_counter() - t)
            server = []
            for _ in range(ns.runs):
                t = time.perf_counter()
                with urllib.request.urlopen(base + query, timeout=120) as r:
                    r.read()
                server.append(time.perf_counter() - t)
            print(f"| {title} | {times[0]:.3f} | {statistics.median(times[1:]):.3f} | "
                  f"{statistics.median(server):.3f} |")


if __name__ == "__main__":
    main()
