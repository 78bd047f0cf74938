"""The report's sections on OpenAI's GPT-2 beside the course architecture, and on the
literature's FLOP formulas beside the exact count. Formatting and wording only: every
number comes from ReportData (accounting.analyze, accounting.literature.compare.compare).
"""
from __future__ import annotations

from fractions import Fraction

from accounting.ledger import records as R
from accounting.literature.views import ratio_text
from accounting.tables.render import markdown_table
from accounting.reporting.data import COMPONENTS, LONG_SEQ, REFERENCE_SEQ, ReportData
from accounting.reporting.figures_index import FIGURES, FIGURES_DIR, FORMULA_CSV
from accounting.tables.table import Table
from accounting.units import (BYTES_PER_ELEMENT, FP32, decimal, gigabytes, grouped, percent,
                              rounded_percents, si)

FIGURE = "formula_error_vs_context"


def _table(t: Table) -> list[str]:
    return markdown_table(t, heading="")


def _figure(name: str) -> list[str]:
    spec = FIGURES[name]
    return [f"![{spec.caption}]({FIGURES_DIR}/{name}.png)", "",
            f"*Figure: {spec.caption}.* ([SVG]({FIGURES_DIR}/{name}.svg))", ""]


def _signed_percent(x: Fraction) -> str:
    return ("+" if x > 0 else "−" if x < 0 else "") + f"{decimal(abs(x) * 100, 2)}%"


def pairs(d: ReportData):
    """(course preset, real GPT-2) of the same size, smallest first."""
    return list(zip(d.models, d.real))


# ---- section 7: the real GPT-2 ------------------------------------------------------------

def real_section(d: ReportData) -> list[str]:
    course, real = d.models[0], d.real[0]
    limit = real.context_length
    rows = []
    for c, r in pairs(d):
        a, b = d.reference[c.name], d.real_reference[r.name]
        nc, nr = a.param_count, b.param_count
        rows.append((r.name, grouped(nr), c.name, grouped(nc),
                     _signed_percent(Fraction(nr - nc, nc)),
                     gigabytes(b.param_memory_bytes()[FP32]), gigabytes(a.param_memory_bytes()[FP32])))
    sizes = Table("", ("real GPT-2", "real parameters", "course preset", "course parameters",
                       "real vs course", "real fp32", "course fp32"), tuple(rows),
                  align="lrlrrrr")
    by = {r.name: d.real_reference[r.name].params_by_component() for r in d.real}
    components = list(by[d.real[0].name])
    ct = Table("", ("component", *(r.name for r in d.real)),
               tuple((k, *(grouped(by[r.name][k]) for r in d.real)) for k in components)
               + (("**total**", *(f"**{grouped(d.real_reference[r.name].param_count)}**"
                                  for r in d.real)),))
    flops_rows = []
    for c, r in pairs(d):
        for m, a in ((c, d.reference[c.name]), (r, d.real_reference[r.name])):
            shares = rounded_percents(list(a.component_shares().values()))
            mm, ew = a.matmul_flops(), a.elementwise_flops
            flops_rows.append((m.name, grouped(mm), si(mm, "FLOPs"), *shares, grouped(ew),
                               percent(Fraction(ew, mm + ew))))
    ft = Table("", ("model", "forward matmul FLOPs", "", *COMPONENTS, "non-matmul FLOPs",
                    "non-matmul share"), tuple(flops_rows))
    xl_c, xl_r = d.models[-1], d.real[-1]
    fc, fr = d.reference[xl_c.name].matmul_flops(), d.real_reference[xl_r.name].matmul_flops()
    head_c = d.reference[xl_c.name].component_flops()[R.LM_HEAD]
    head_r = d.real_reference[xl_r.name].component_flops()[R.LM_HEAD]
    same_head = ("the same LM head FLOPs (a tied head is still a matmul)" if head_c == head_r
                 else f"LM head FLOPs {grouped(head_r)} against {grouped(head_c)}")
    return [f"## 7. The real GPT-2 beside the course architecture", "",
            (f"OpenAI's GPT-2 as released ({real.architecture}) against the course "
             f"architecture at the same four sizes ({course.architecture}). Forward pass at "
             f"T = {grouped(REFERENCE_SEQ)}, B = 1. The real GPT-2 cannot run "
             f"T = {grouped(LONG_SEQ)}: its learned position table holds {grouped(limit)} "
             f"positions, so sections 5 and 6 go past {grouped(limit)} tokens with the course "
             "presets only."), "",
            f"Parameters and the memory to load them in {FP32} ({BYTES_PER_ELEMENT[FP32]} bytes each, "
            "GB = 10⁹ bytes):", "",
            *_table(sizes),
            "The real GPT-2's parameters per component (the course presets' are in section 2):",
            "", *_table(ct),
            (f"Forward FLOPs at T = {grouped(REFERENCE_SEQ)} (matmul FLOPs, executed count, "
             "with each model's component shares adding to 100.00%; non-matmul FLOPs under the "
             "convention of section 10, and their share of all forward FLOPs):"), "",
            *_table(ft),
            (f"At the largest size, {xl_r.name}'s forward pass costs {si(fr, 'FLOPs')} against "
             f"{si(fc, 'FLOPs')} for {xl_c.name} ({_signed_percent(Fraction(fr - fc, fc))}), "
             f"with {same_head}: the difference is the feed-forward (two d_model×4·d_model "
             "matrices instead of three)."), ""]


# ---- section 8: the literature's formulas --------------------------------------------------

def _formula_table(d: ReportData, models) -> Table:
    cmps = [d.literature[m.name] for m in models]
    rows = [("exact training matmul FLOPs", *(si(c.exact.training, "FLOPs") for c in cmps)),
            ("exact, causal pairs only", *(ratio_text(c.exact.training_useful, c.exact.training)
                                           for c in cmps))]
    for i, e in enumerate(cmps[0].estimates):
        rows.append((e.name, *(ratio_text(c.estimates[i].training, c.exact.training) for c in cmps)))
    return Table("", ("formula (training FLOPs ÷ exact)", *(m.name for m in models)), tuple(rows))


def _worst_errors(d: ReportData, models) -> dict[str, Fraction]:
    """Each model-FLOPs formula's largest |formula ÷ exact − 1| over `models` at T = 1,024
    (the recomputation formulas count hardware FLOPs, so they are left out here)."""
    worst: dict[str, Fraction] = {}
    for m in models:
        c = d.literature[m.name]
        for e in c.estimates:
            if e.key in ("megatron", "korthikanti-hardware"):
                continue
            err = abs(Fraction(e.training, c.exact.training) - 1)
            worst[e.name] = max(worst.get(e.name, Fraction(0)), err)
    return worst


def _within(err: Fraction) -> str:
    return "exact" if err == 0 else f"within {decimal(err * 100, 2)}%"


def closest_and_furthest(d: ReportData) -> str:
    """Which model-FLOPs formulas come closest to and furthest from the exact count, per
    family, at T = 1,024 — worded from the data."""
    parts = []
    for label, models in (("for OpenAI's GPT-2", d.real), ("for the course presets", d.models)):
        worst = _worst_errors(d, models)
        order = sorted(worst, key=lambda k: (worst[k], k))
        a, b, z = order[0], order[1], order[-1]
        parts.append(f"{label} the closest model-FLOPs formulas are {a} ({_within(worst[a])}) "
                     f"and {b} ({_within(worst[b])}), the furthest {z} (off by up to "
                     f"{decimal(worst[z] * 100, 2)}%)")
    return f"At T = {grouped(REFERENCE_SEQ)}: " + "; ".join(parts) + "."


def _long_context(d: ReportData) -> str:
    s = d.formula_sweeps[d.models[-1].name]
    i, j = s.seqs.index(REFERENCE_SEQ), s.seqs.index(LONG_SEQ)
    moves = []
    for k, name in s.names.items():
        r1, r2 = s.ratios(k)[i], s.ratios(k)[j]
        moves.append((abs(r2 - r1), name, r1, r2))
    moves.sort(key=lambda m: (-m[0], m[1]))
    parts = [f"{name} from {decimal(r1, 4)} to {decimal(r2, 4)}" for _, name, r1, r2 in moves[:3]]
    return (f"As the context grows to {grouped(LONG_SEQ)} ({d.models[-1].name}), the ratios move "
            f"most for " + ", ".join(parts[:-1]) + f" and {parts[-1]}: formulas without a T² "
            "term fall behind the attention core, and those that count the full T×T scores "
            "stay with the executed count (the causal count falls to "
            f"{decimal(s.useful_ratios()[j], 4)} of it).")


def _terms_table(d: ReportData, model) -> Table:
    c = d.literature[model.name]
    rows = []
    for e in c.estimates:
        rows.append((f"**{e.name}**", "formula", grouped(e.training) if isinstance(e.training, int)
                     else str(e.training), ""))
        for t in e.terms:
            rows.append(("", t.label, ("+" if t.training > 0 else "−") + grouped(abs(t.training)),
                         t.kind))
    rows.append(("**exact**", "training matmul FLOPs (executed)", grouped(c.exact.training), ""))
    return Table("", ("formula", "term", "training FLOPs", "kind"), tuple(rows), align="llrl")


def literature_section(d: ReportData) -> list[str]:
    xl_c, xl_r = d.models[-1], d.real[-1]
    notes = [
        ("- **Chinchilla (Hoffmann et al. 2022, Appendix F)** is evaluated as printed (embeddings "
         "as a one-hot matmul, final logits, softmax as 3·heads·T², full T×T attention). As "
         "printed it does not reproduce the paper's own Table A4 ratios to 6·N·D; without the "
         "embedding and final-logit terms it reproduces all six (tests/test_formulas.py)."),
        ("- **Megatron-LM (Narayanan et al. 2021, eq. 3)** counts hardware FLOPs with full "
         "activation recomputation (4 passes of every layer, 3 of the logit layer) and an "
         "h → 4h → h MLP; without recomputation it is Korthikanti et al.'s model FLOPs."),
        ("- **Korthikanti et al. 2022**'s hardware FLOPs with selective recomputation, "
         "72·B·s·l·h²·(1 + s/(3h) + V/(12·h·l)), add 12·B·s²·l·h to the model FLOPs — three "
         "times the 4·B·s²·l·h forward of QKᵀ and scores·V that selective recomputation "
         "reruns. Its Table 5 HFU figures follow the formula as written "
         "(tests/test_formulas.py)."),
        ("- **PaLM (Chowdhery et al. 2022, Appendix B)**: 6N + 12·L·H·Q·T per token, N all "
         "parameters; **nanoGPT**'s estimate_mfu is the same with N less the position table, "
         "Q = n_embd // n_head and T = block_size (1,024 for GPT-2 whatever the batch length)."),
        ("- **Kaplan et al. 2020 (Table 1)**: 2N + 2·n_layer·n_ctx·d_attn per token with "
         "non-embedding N = 2·d_model·n_layer·(2·d_attn + d_ff), training 3× forward: no LM "
         "head, two MLP matrices, and about half the T×T scores (what a causal kernel needs)."),
    ]
    return [f"## 8. The literature's FLOP formulas beside the exact count", "",
            (f"Each formula of `accounting/literature/formulas.py` is evaluated as its paper writes it, for "
             f"each model at T = {grouped(REFERENCE_SEQ)}, B = 1, and divided by the exact "
             "training matmul FLOPs (forward + backward, executed count: the full T×T scores "
             "the model computes, then masks). `python -m accounting MODEL --compare-formulas` "
             "prints the same for any config and workload, with each difference reconciled "
             "term by term."), "",
            "The course presets:", "", *_table(_formula_table(d, d.models)),
            "OpenAI's GPT-2:", "", *_table(_formula_table(d, d.real)),
            closest_and_furthest(d), "", *_figure(FIGURE),
            (_long_context(d) + f" The numbers behind the figure: "
             f"[`{FIGURES_DIR}/{FORMULA_CSV}`]({FIGURES_DIR}/{FORMULA_CSV})."), "",
            *notes, "",
            (f"Every difference, term by term (training FLOPs to add to the formula to reach the "
             f"exact count; each term an exact integer from the ledger), for {xl_c.name}:"), "",
            *_table(_terms_table(d, xl_c)),
            f"And for {xl_r.name}:", "", *_table(_terms_table(d, xl_r))]
