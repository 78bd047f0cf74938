"""A literature comparison (accounting/literature/compare.py) as tables for people, and as data.

Formatting only: every number comes from the Comparison; ratios are exact Fractions rounded
for display, FLOPs exact integers (the first table shows them in SI units to fit a screen).
"""
from __future__ import annotations

from fractions import Fraction

from accounting.literature.compare import Comparison
from accounting.literature.terms import Estimate
from accounting.tables.data import fraction
from accounting.architecture.presets import note
from accounting.tables.table import Table
from accounting.units import decimal, grouped, percent, si

RATIO_PLACES = 4


def ratio(value, exact) -> Fraction:
    return Fraction(value) / Fraction(exact)


def ratio_text(value, exact) -> str:
    return decimal(ratio(value, exact), RATIO_PLACES)


def flops_text(n) -> str:
    """An exact count: grouped digits when integral, else 2 decimals (a Fraction)."""
    n = Fraction(n)
    return grouped(n.numerator) if n.denominator == 1 else decimal(n, 2)


def _signed(n) -> str:
    text = flops_text(abs(Fraction(n)))
    return ("−" if n < 0 else "+") + text if n else "0"


def summary_table(c: Comparison) -> Table:
    """The answer: each formula's forward and training FLOPs beside the exact ones."""
    x = c.exact
    cfg = x.config
    rows = [("exact (ledger), executed attention", si(x.forward, "FLOPs"), si(x.training, "FLOPs"),
             "1.0000", ratio_text(x.training, x.training_useful), ""),
            ("exact (ledger), causal pairs only", si(x.forward_useful, "FLOPs"),
             si(x.training_useful, "FLOPs"), ratio_text(x.training_useful, x.training), "1.0000", "")]
    for e in c.estimates:
        rows.append((e.name, si(e.forward, "FLOPs"), si(e.training, "FLOPs"),
                     ratio_text(e.training, x.training), ratio_text(e.training, x.training_useful),
                     ", ".join(e.misfits)))
    return Table(f"{cfg.name}: the literature's FLOP formulas beside the exact count "
                 f"(T = {grouped(x.seq)}, B = {grouped(x.batch)})",
                 ("formula", "forward", "training", "÷ exact", "÷ exact (causal)", "does not fit"),
                 tuple(rows), align="lrrrrl",
                 notes=(f"{cfg.name}: {note(cfg)}; {cfg.architecture}.",
                        "training = forward + backward. exact: the ledger's matmul FLOPs "
                        "(executed: the full T×T attention scores the model computes, then "
                        "masks; causal: only the T(T+1)/2 query-key pairs). ÷ exact: the "
                        "formula's training FLOPs over the exact ones (exact fractions rounded "
                        f"to {RATIO_PLACES} decimals). Megatron's eq. (3) and Korthikanti's "
                        "hardware FLOPs include recomputation, which the model does not run.",
                        "Each formula is evaluated as its paper writes it; 'does not fit' names "
                        "the assumptions this architecture breaks. Reconciliations below."))


def reconciliation_table(c: Comparison, e: Estimate) -> Table:
    x = c.exact
    rows = [("the formula, as written", "", flops_text(e.forward), flops_text(e.training))]
    rows += [(t.label, t.kind, _signed(t.forward), _signed(t.training)) for t in e.terms]
    rows.append(("= exact matmul FLOPs (executed)", "", flops_text(x.forward), flops_text(x.training)))
    notes = [f"Formula: {e.source}.", f"Evaluated with {e.evaluated_with}."]
    details = [f"{t.label}: {t.detail}" for t in e.terms if t.detail]
    if details:
        notes.append("Terms: " + "; ".join(details) + ".")
    notes += list(e.notes)
    return Table(f"{e.name}: term by term", ("term", "kind", "forward FLOPs", "training FLOPs"),
                 tuple(rows), align="llrr", notes=tuple(notes))


def non_matmul_table(c: Comparison) -> Table:
    x = c.exact
    total = sum(x.non_matmul.values())
    rows = [(k, grouped(v), percent(Fraction(v, x.forward))) for k, v in x.non_matmul.items()]
    rows.append(("total non-matmul", grouped(total), percent(Fraction(total, x.forward))))
    rows.append(("all forward FLOPs (matmul + non-matmul)", grouped(x.forward + total), ""))
    chin = c.estimate("chinchilla")
    softmax = next((t for t in chin.terms if t.label.startswith("softmax")), None)
    notes = ["Left out by every formula above (they count matmuls, as MFU does); Chinchilla's "
             "Appendix F alone counts a softmax"
             + (f", as 3·heads·T² per layer: {grouped(-softmax.forward)} FLOPs against the "
                f"ledger's softmax {grouped(x.non_matmul.get('softmax', 0))}" if softmax else "")
             + ". Forward pass only (the ledger does not count backward non-matmul FLOPs); "
               "share: of the forward matmul FLOPs."]
    return Table("Non-matmul FLOPs of the forward pass (not in the exact matmul count)",
                 ("operation group", "FLOPs", "share"), tuple(rows), align="lrr",
                 notes=tuple(notes))


def conventions_table(c: Comparison) -> Table:
    x = c.exact
    rows = []
    for cv in c.conventions():
        rows.append((cv.name, cv.kind, "ledger" if cv.exact else "formula", grouped(cv.flops)
                     if isinstance(cv.flops, int) else flops_text(cv.flops),
                     si(Fraction(cv.flops, x.tokens), "FLOPs"), ratio_text(cv.flops, x.training)))
    return Table(f"MFU conventions: FLOPs of one training step of B·T = {grouped(x.tokens)} tokens",
                 ("convention", "counts", "from", "FLOPs per step", "per token", "÷ exact model"),
                 tuple(rows), align="lllrrr",
                 notes=("Model FLOPs: the forward + backward a step needs, no recomputation (the "
                        "numerator of MFU, PaLM Appendix B); hardware FLOPs: what the GPU runs, "
                        "recomputation included (HFU). MFU = tokens/s × model FLOPs per token / "
                        "peak FLOP/s, so a run at MFU u by the exact count reports u × (÷ exact "
                        "model) under another convention.",))


def tables(c: Comparison) -> list[Table]:
    return [summary_table(c), *(reconciliation_table(c, e) for e in c.estimates),
            non_matmul_table(c), conventions_table(c)]


# ---- machine-readable --------------------------------------------------------------------

def _num(v):
    v = Fraction(v)
    return v.numerator if v.denominator == 1 else fraction(v)


def to_dict(c: Comparison) -> dict:
    x = c.exact
    return {
        "workload": {"seq": x.seq, "batch": x.batch, "tokens": x.tokens},
        "exact": {"forward": x.forward, "forward_useful": x.forward_useful,
                  "training": x.training, "training_useful": x.training_useful,
                  "non_matmul_forward": x.non_matmul, "parameters": x.params},
        "formulas": [{
            "key": e.key, "name": e.name, "source": e.source, "evaluated_with": e.evaluated_with,
            "forward": _num(e.forward), "training": _num(e.training),
            "training_over_exact": fraction(ratio(e.training, x.training)),
            "training_over_exact_useful": fraction(ratio(e.training, x.training_useful)),
            "does_not_fit": list(e.misfits), "notes": list(e.notes),
            "terms": [{"label": t.label, "kind": t.kind, "forward": _num(t.forward),
                       "training": _num(t.training), "detail": t.detail} for t in e.terms],
        } for e in c.estimates],
        "mfu_conventions": [{"name": cv.name, "kind": cv.kind, "from_ledger": cv.exact,
                             "flops_per_step": _num(cv.flops),
                             "over_exact_model_flops": fraction(ratio(cv.flops, x.training))}
                            for cv in c.conventions()],
    }


CSV_COLUMNS = ("formula", "item", "kind", "forward_flops", "training_flops")


def csv_rows(c: Comparison) -> list[dict]:
    """Long form: per formula its value, each term, and the exact count they add up to."""
    x = c.exact
    rows = []
    for e in c.estimates:
        rows.append({"formula": e.key, "item": "formula", "kind": "estimate",
                     "forward_flops": e.forward, "training_flops": e.training})
        rows += [{"formula": e.key, "item": t.label, "kind": t.kind, "forward_flops": t.forward,
                  "training_flops": t.training} for t in e.terms]
        rows.append({"formula": e.key, "item": "exact", "kind": "exact",
                     "forward_flops": x.forward, "training_flops": x.training})
    return rows
