"""The report's cross-check section: a compact table over every model × context, built
from each result's to_dict() (exact ints), and the full tables of the largest workload.

Formatting only: the comparison itself is accounting.crosscheck's.
"""
from __future__ import annotations

from accounting.ledger.records import FORWARD
from accounting.tables.render import markdown_table
from accounting.reporting.data import Check, ReportData
from accounting.tables.table import Table
from accounting.units import gibibytes, grouped

TOTAL = "total"


def _row(d: dict, component: str = TOTAL) -> dict:
    return next(r for r in d["components"] if r["scope"] == FORWARD and r["component"] == component)


def _non_matmul_total(d: dict) -> dict | None:
    return next((r for r in d["non_matmul"] if r["where"] == TOTAL), None)


def _stock(d: dict, row: dict) -> str:
    """fvcore's stock einsum handle against the analytic count, or why it did not run."""
    if row["fvcore_stock_skipped"] or row["fvcore_stock"] is None:
        skipped = [e for e in d["einsum_calls"] if e["stock_flops_each"] is None]
        worst = max((e["stock_operand_bytes"] for e in skipped), default=None)
        return "not run" + (f" (operands {gibibytes(worst, 1)})" if worst else "")
    return f"{row['fvcore_stock'] - row['analytic']:+,}"


def _blocks(d: dict) -> str:
    layers = d["layers"]
    ok = all(c["agreeing"] == c["layers"] for c in layers)
    n = layers[0]["layers"] if layers else 0
    return (f"{n}/{n} × {len(layers)} counters" if ok else
            "; ".join(f"{c['counter']} {c['agreeing']}/{c['layers']}" for c in layers))


def summary_table(checks: tuple[Check, ...]) -> Table:
    rows = []
    for c in checks:
        d = c.result.to_dict()
        total = _row(d)
        nm = _non_matmul_total(d)
        rows.append((c.config.name, grouped(c.seq), grouped(total["analytic"]),
                     grouped(total["fvcore"]) if total["fvcore"] is not None else "n/a",
                     grouped(total["torch"]),
                     "n/a" if nm is None else
                     f"{grouped(nm['analytic'])} / "
                     + ("unknown op" if nm["measured"] is None else grouped(nm["measured"])),
                     _blocks(d), _stock(d, total),
                     "agrees" if c.result.agrees else "**DISAGREES**"))
    return Table("", ("model", "T", "analytic matmul FLOPs", "fvcore ×2", "FlopCounterMode",
                      "non-matmul: analytic / op counter", "blocks agreeing",
                      "fvcore stock einsum − analytic", "verdict"),
                 tuple(rows), align="lrrrrrrrl")


def _claims(checks: tuple[Check, ...]) -> list[str]:
    """The consistency claims every run checks, with how many runs they held in."""
    seen: dict[str, list[int]] = {}
    for c in checks:
        for k in c.result.to_dict()["checks"]:
            held = seen.setdefault(k["claim"], [0, 0])
            held[0] += bool(k["holds"])
            held[1] += 1
    return [f"- {claim}: holds in {ok} of {n} runs." for claim, (ok, n) in seen.items()]


def runs_text(d: ReportData) -> str:
    """'the 4 models gpt2-small, … at T = 1,024, …, 16,384 and …': the runs, grouped by the
    contexts each model was checked at (a learned position table limits the real GPT-2)."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for c in dict.fromkeys(c.config for c in d.checks):
        groups.setdefault(tuple(k.seq for k in d.checks if k.config == c), []).append(c.name)
    parts = [f"{', '.join(names)} at T = {', '.join(grouped(s) for s in seqs)}"
             for seqs, names in groups.items()]
    return "; ".join(parts)


def section(d: ReportData) -> list[str]:
    checks = d.checks
    agree = sum(c.result.agrees for c in checks)
    verdict = (f"**Verdict: all {len(checks)} runs agree**" if agree == len(checks) else
               f"**Verdict: {len(checks) - agree} of {len(checks)} runs DISAGREE**")
    lines = [f"The model in `model/` is run on PyTorch's meta device (shapes, no data) for "
             f"{runs_text(d)}, under fvcore's "
             "`FlopCountAnalysis`, `torch.utils.flop_counter.FlopCounterMode` and an op "
             "counter (a `TorchDispatchMode` over the same forward pass, for the non-matmul "
             "FLOPs), and every count is compared with the analytic one to the last FLOP "
             "(`accounting.crosscheck.cross_check`). " + verdict + ".", "",
             *markdown_table(summary_table(checks), heading=""),
             ("A run agrees when, for every component (attention projections, attention core, "
             "feed-forward, LM head) and the total, the analytic, fvcore ×2 and FlopCounterMode "
             "matmul FLOPs are equal; every block matches the per-block count for each counter; "
             "the non-matmul FLOPs match the op counter operator by operator; and the "
             "consistency checks hold. `fvcore stock einsum − analytic`: what fvcore's own "
             "`aten::einsum` handle would have reported (it is replaced by an exact one for "
             "the comparison); not run where it would allocate the operands as dense float64 "
             "arrays beyond the cap."), ""]
    claims = _claims(checks)
    if claims:
        lines += ["Consistency checks in every run:", "", *claims, ""]
    worst = max(checks, key=lambda c: (c.seq, c.config.num_layers * c.config.d_model))
    lines += [(f"### The full cross-check of the largest run: {worst.config.name} at "
              f"T = {grouped(worst.seq)}"), ""]
    from accounting.crosscheck import views as crosscheck_views  # imports torch: only here
    for t in crosscheck_views.tables(worst.result):
        lines += markdown_table(Table(f"{t.title}", t.columns, t.rows, t.align, t.notes),
                                heading="####")
    return lines


def how_counted(d: ReportData) -> list[str]:
    """The fvcore paragraph of 'How counted', with the stock handle's error from the runs."""
    if not d.verified:
        return [("- **fvcore** counts one per multiply-add (FLOPs = 2 × its number); the "
                "cross-check, skipped in this draft, doubles it before comparing.")]
    ran = [(c, _row(c.result.to_dict())) for c in d.checks]
    ran = [(c, r) for c, r in ran if not r["fvcore_stock_skipped"] and r["fvcore_stock"] is not None]
    unit = d.checks[0].result.to_dict()["conventions"]["fvcore_unit"]
    text = (f"- **fvcore** counts {unit}. Its stock `aten::einsum` handle "
            "(`fvcore.nn.jit_handles.einsum_flop_jit`) parses the count `numpy.einsum_path` "
            "prints with four significant digits, so it rounds, and it allocates every operand "
            "as a dense float64 array; the cross-check replaces it with an exact handle "
            "(`accounting/crosscheck/fvcore_einsum.py`) and reports the stock figure beside it.")
    if ran:
        c, r = max(ran, key=lambda cr: (cr[0].config.num_layers * cr[0].config.d_model, -cr[0].seq))
        text += (f" For {c.config.name} at T = {grouped(c.seq)} the stock handle's total is "
                 f"{grouped(r['fvcore_stock'])} against the exact {grouped(r['analytic'])} "
                 f"({r['fvcore_stock'] - r['analytic']:+,} FLOPs).")
    return [text, ("- **FlopCounterMode** counts FLOPs (2 per multiply-add) of `aten.mm`/`bmm`; "
            "no conversion.")]
