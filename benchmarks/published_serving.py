"""The published serving runs of docs/serving_times.md: each measured mean TTFT and mean TPOT
of accounting/published_serving.py beside `serve`'s prediction for the same settings (no
--mfu: TTFT and TPOT op by op from aiconfigurator-core's measured kernels), the ratios, and
their median and worst. Regenerate with

    python benchmarks/published_serving.py --update     # rewrite the block in docs/serving_times.md
    python benchmarks/published_serving.py              # print it

tests/test_published_serving.py checks that the block is what this prints (where
aiconfigurator-core is installed).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "serving_times.md"
START, END = "<!-- published-serving -->\n", "<!-- end published-serving -->\n"


MIXED_LABEL = "TPOT with the others' prefills, concurrency above 1"


def _worst(ratios: list[float]) -> float:
    return max(ratios, key=lambda x: abs(x - 1))


def _summary(what: str, ratios: list[float]) -> str:
    if not ratios:
        return f"{what}: none"
    return (f"{what}: {len(ratios)} runs, median {statistics.median(ratios):.2f}, worst "
            f"{_worst(ratios):.2f}")


def table() -> str:
    from accounting.published_serving import SERVED_RUNS, predict
    from accounting.timing import tables
    rows, sources = [], {}
    ttft, tpot_clean, tpot_all, mixed = [], [], [], []
    for r in SERVED_RUNS:
        p = predict(r)
        ref = sources.setdefault(r.source, len(sources) + 1)
        head = (f"| {r.name} | {r.engine} {r.release} | {r.tp} × {r.gpu} | {r.weights} "
                f"| {r.prompt:,} / {r.output:,} | {r.concurrency} ")
        measured_ttft = "–" if r.ttft_ms is None else f"{r.ttft_ms:,.1f}"
        if p.tpot_ms is None:
            rows.append(head + f"| {measured_ttft} | – | – | {r.tpot_ms:.2f} | – | – | – "
                        f"| not planned: {p.problem} | [{ref}] |")
            continue
        t_ratio = p.tpot_ms / r.tpot_ms
        tpot_all.append(t_ratio)
        if r.ttft_ms is None:
            f_cell = "–"
        elif r.concurrency == 1:
            f_ratio = p.ttft_ms / r.ttft_ms
            ttft.append(f_ratio)
            f_cell = f"{f_ratio:.2f}"
        else:
            f_cell = "queued"
        m = p.mixed_tpot_ms(r)
        m_cell = "–" if r.concurrency == 1 else f"{m:.2f} ({m / r.tpot_ms:.2f})"
        if r.concurrency > 1:
            mixed.append(m / r.tpot_ms)
        if not r.note:
            tpot_clean.append(t_ratio)
        rows.append(head + f"| {measured_ttft} | {p.ttft_ms:,.1f} | {f_cell} | {r.tpot_ms:.2f} "
                    f"| {p.tpot_ms:.2f} | {t_ratio:.2f} | {m_cell} "
                    f"| {p.source}{'; ' + r.note if r.note else ''} | [{ref}] |")
    header = ("| run | engine | GPUs | weights | mean in / out tokens | concurrency "
              "| TTFT measured ms | predicted | ratio | TPOT measured ms | predicted | ratio "
              "| TPOT with the others' prefills (ratio) | time from; note | source |\n"
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
    engines = sorted({r.engine for r in SERVED_RUNS})
    summary = (f"\n{len(SERVED_RUNS)} published serving runs of {len(engines)} engines "
               f"({', '.join(engines)}); predicted / measured, aiconfigurator-core "
               f"{tables.package_version()}:\n\n"
               f"- {_summary('TPOT, every run', tpot_all)}\n"
               f"- {_summary('TPOT, dense bf16 runs without a note', tpot_clean)}\n"
               f"- {_summary(MIXED_LABEL, mixed)}\n"
               f"- {_summary('TTFT, concurrency 1', ttft)}\n\n")
    refs = "".join(f"[{n}] {s}\n\n" for s, n in sources.items())
    return header + "\n".join(rows) + "\n" + summary + refs


BLOCKS = ((START, END, table),)

if __name__ == "__main__":
    from benchmarks.doc_blocks import main
    main(__file__, DOC, BLOCKS)
