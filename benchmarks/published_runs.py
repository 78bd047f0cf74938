"""The published-runs table of docs/timing.md: each measured training throughput of
accounting/published.py beside the planner's prediction for the same run (no --mfu:
the step timed op by op from aiconfigurator-core's measured kernels), the ratio, and the
median and worst ratio. Regenerate with

    python benchmarks/published_runs.py --update     # rewrite the block in docs/timing.md
    python benchmarks/published_runs.py              # print it

tests/test_timing_docs.py checks that the block is what this prints (where
aiconfigurator-core is installed).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "timing.md"
START, END = "<!-- published-runs -->\n", "<!-- end published-runs -->\n"


def table() -> str:
    from accounting.timing import tables
    from accounting.published import RUNS, predict
    rows, ratios = [], []
    sources = {}
    for r in RUNS:
        p, src, problem = predict(r)
        ref = sources.setdefault(r.source, len(sources) + 1)
        if p is None:
            rows.append(f"| {r.name} | {r.stack} | {r.gpus} × {r.gpu} | {r.measured:,.0f} | – | – "
                        f"| not planned: {problem} | [{ref}] |")
            continue
        ratios.append(p / r.measured)
        rows.append(f"| {r.name} | {r.stack} | {r.gpus} × {r.gpu} | {r.measured:,.0f} | "
                    f"{p:,.0f} | {p / r.measured:.2f} | {src}{'; ' + r.note if r.note else ''} "
                    f"| [{ref}] |")
    head = ("| run | stack | GPUs | measured tokens/s/GPU | predicted | predicted / measured "
            "| time from; note | source |\n|---|---|---|---:|---:|---:|---|---|\n")
    worst = max(ratios, key=lambda x: abs(x - 1)) if ratios else float("nan")
    summary = (f"\n{len(ratios)} runs planned: median ratio {statistics.median(ratios):.2f}, "
               f"worst {worst:.2f} (aiconfigurator-core {tables.package_version()}). "
               "A compiled run (torch.compile) is expected faster than the prediction, which "
               "plans eager PyTorch.\n\n")
    refs = "".join(f"[{n}] {s}\n\n" for s, n in sources.items())
    return head + "\n".join(rows) + "\n" + summary + refs


H200_START, H200_END = "<!-- h200-checks -->\n", "<!-- end h200-checks -->\n"


def h200_table() -> str:
    from accounting.published import H200_SOURCE, h200_predictions
    rows = [f"| {name} | {measured * 1e3:,.2f} ms | {predicted * 1e3:,.2f} ms | "
            f"{predicted / measured:.2f} |" for name, measured, predicted in h200_predictions()]
    return ("| case | measured | predicted | predicted / measured |\n|---|---:|---:|---:|\n"
            + "\n".join(rows) + f"\n\nMeasured: {H200_SOURCE}.\n")


KERNEL_START, KERNEL_END = "<!-- h200-kernels -->\n", "<!-- end h200-kernels -->\n"


def kernel_table() -> str:
    from accounting.published import KERNEL_SOURCE, kernel_predictions
    gemms, sdpa = kernel_predictions()
    g = "\n".join(f"| {m:,} × {n:,} × {k:,} | {ms:.3f} ms | {t:.3f} ms | {t / ms:.2f} |"
                  for m, n, k, ms, t in gemms)
    a = "\n".join(f"| {b}, {t:,}, {h}, {d} | {fwd:.3f} ms | {f:.3f} ms | {f / fwd:.2f} | "
                  f"{both:.3f} ms | {pb:.3f} ms | {pb / both:.2f} |"
                  for b, t, h, d, fwd, f, both, pb in sdpa)
    return ("| bf16 GEMM m × n × k | measured | table | table / measured |\n"
            "|---|---:|---:|---:|\n" + g + "\n\n"
            "| causal SDPA B, T, h, d | forward measured | table | ratio | forward + backward "
            "measured | table × 3.5 | ratio |\n|---|---:|---:|---:|---:|---:|---:|\n" + a
            + f"\n\nMeasured: {KERNEL_SOURCE}.\n")


DONE_START, DONE_END = "<!-- done-when -->\n", "<!-- end done-when -->\n"


def done_when_table() -> str:
    """Issue 39's done-when case (Llama-3.1-8B, 8 H100, FSDP, T 8k, b 2): the predicted step
    by kind beside torchtitan's measured figure, and what the run's published hardware
    (HBM2e at 2.4 TB/s, a 500 W limit: a peak between the SXM's and the NVL's) does to it,
    as arithmetic on the breakdown (the card's measured tables stay the SXM's)."""
    from fractions import Fraction
    from accounting.planning.gpus import get_gpu
    from accounting.published import (H100_NVL_BF16_TFLOPS, TT_H100_BANDWIDTH_TBS, TT_H100_MFU,
                                      done_when)
    run, st, util = done_when()
    bd = {k: Fraction(v["numerator"], v["denominator"]) for k, v in st["breakdown_seconds"].items()}
    step = Fraction(st["seconds"]["numerator"], st["seconds"]["denominator"])
    tokens = run.ctx * run.batch // run.gpus  # per GPU per step
    sxm = get_gpu(run.gpu)
    slow_memory = (bd["memory-bound"] + bd["optimizer"]) * (sxm.bandwidth_tbs / TT_H100_BANDWIDTH_TBS - 1)
    slow_peak = (bd["GEMMs"] + bd["attention"]) * (sxm.peak_tflops["bf16"] / H100_NVL_BF16_TFLOPS - 1)
    rows = [("predicted, H100-SXM's tables and bandwidth", step),
            (f"memory-bound ops and the update at the run's {float(TT_H100_BANDWIDTH_TBS):g} TB/s "
             f"(HBM2e) instead of {float(sxm.bandwidth_tbs):g}", step + slow_memory),
            (f"and GEMMs and attention at H100 NVL's {float(H100_NVL_BF16_TFLOPS):g} TFLOP/s "
             f"(the lower end of torchtitan's 'between SXM and NVL')", step + slow_memory + slow_peak)]
    out = ["| case | step | tokens/s/GPU | predicted / measured |", "|---|---:|---:|---:|"]
    for name, t in rows:
        out.append(f"| {name} | {float(t):.3f} s | {float(tokens / t):,.0f} | "
                   f"{float(tokens / t) / run.measured:.2f} |")
    out.append(f"| measured (torchtitan, Table 1) | {tokens / run.measured:.3f} s | "
               f"{run.measured:,.0f} | 1.00 |")
    parts = ", ".join(f"{k} {float(v) * 1e3:,.0f} ms" for k, v in bd.items() if v)
    mfu = next(u for u in util if u["convention"] == "executed")
    return ("\n".join(out) + f"\n\nBreakdown of the predicted step: {parts} (data-parallel "
            f"communication {float(st['data_parallel_seconds']['approx']) * 1e3:,.0f} ms, "
            f"{float(st['exposed_data_parallel_seconds']['approx']) * 1e3:,.0f} ms of it exposed "
            f"by FSDP2's prefetch rule). Predicted MFU {st['mfu']['approx']:.3f} (executed "
            f"FLOPs over the SXM's peak); at the measured throughput "
            f"{mfu['measured_mfu']['approx']:.3f}, torchtitan's own figure "
            f"{float(TT_H100_MFU):.0%} (its footnote: computed with the SXM's peak).\n")


# in the order the page holds them
BLOCKS = ((H200_START, H200_END, h200_table), (KERNEL_START, KERNEL_END, kernel_table),
          (START, END, table), (DONE_START, DONE_END, done_when_table))

if __name__ == "__main__":
    from benchmarks.doc_blocks import main
    main(__file__, DOC, BLOCKS)
