"""An Analysis as tables for people (terminal, Markdown). Formatting only, no new counts."""
from __future__ import annotations

from collections import Counter
from fractions import Fraction

from accounting.ledger import records as R
from accounting.architecture.presets import note
from accounting.analysis.workload import Analysis, analyze
from accounting.ledger.symbols import Expr, fold_layers, monomial, validity
from accounting.tables.table import Table
from accounting.units import (
    BYTES_PER_ELEMENT,
    FLOPS_PER_MAC,
    decimal,
    gibibytes,
    gigabytes,
    grouped,
    percent,
    rounded_percents,
    si,
)

COUNTING_NOTE = {
    R.EXECUTED: "executed: the attention core over the full T×T scores, as the model "
                      "computes them before masking (what FLOP counters measure)",
    R.USEFUL: "useful: the attention core over only the T(T+1)/2 unmasked query-key "
                    "pairs a causal kernel needs",
}


def _useful_extra(a: Analysis) -> str:
    c, v = a.config, a.values
    out = ""
    if "P_W" in v:
        out += (f" A local layer's window keeps P_W = Σᵢ min(i+1, W) = {grouped(v['P_W'])} pairs "
                f"(W = {grouped(v['W'])}; W·T − W(W−1)/2 once T ≥ W).")
    if "C" in v:
        out += (f" Experts under capacity factor {c.moe_capacity_factor:g} run E·C = "
                f"{grouped(v['E'] * v['C'])} rows (C = ⌈c·B·T·k/E⌉ = {grouped(v['C'])}), "
                f"of which B·T·k = {grouped(v['B'] * v['T'] * v['k'])} are routed slots (useful).")
    if c.num_experts is not None and "C" not in v:
        out += (" Experts (dropless): each token runs its k experts, so the expert matmuls "
                "have B·T·k rows whatever the router decides: exact, not an expectation.")
    if any(r.record.useful and r.record.component == R.ATTN_CORE for r in a.matmul_rows):
        out += " V zero-padded from d_v to d_k for the fused kernel: useful work counts d_v."
    return out


def _count(repeat: str | None, count: int) -> str:
    return f"{repeat} = {count}" if repeat else str(count)


def model_table(a: Analysis) -> Table:
    c = a.config
    rows = [
        ("model", f"{c.name} ({note(c)})"),
        ("architecture", c.architecture),
        ("vocab_size V", grouped(c.vocab_size)),
        ("context_length", grouped(c.context_length)
         + ("  (the learned position table's length)" if c.positions == "learned" else "")),
        ("num_layers L", str(c.num_layers)),
        ("d_model", grouped(c.d_model)),
        ("num_heads h", str(c.num_heads)),
    ]
    if c.kv_heads != c.num_heads:
        rows.append(("num_kv_heads h_kv", f"{c.kv_heads} (g = h/h_kv = {c.group_size} query heads each)"))
    rows += [
        ("d_k = d_model/h" if c.head_dim is None else "d_k = head_dim", str(c.d_k)),
        ("d_ff", grouped(c.d_ff)),
    ]
    if c.positions == "rope":
        rows.append(("rope_theta", f"{c.rope_theta:g}"))
    rows += [
        ("analysed: T (tokens)", grouped(a.seq) + ("" if a.seq <= c.context_length else
                                                   "  (beyond context_length: this architecture "
                                                   "at T tokens)")),
        ("analysed: B (batch)", grouped(a.batch)),
        ("analysed: pass", a.phase),
        ("attention-core count", COUNTING_NOTE[a.counting]),
    ]
    return Table("Model and workload", ("setting", "value"), tuple(rows), align="ll")


def params_table(a: Analysis) -> Table:
    by = a.params_by_component()
    total = a.param_count
    terms: dict[str, Counter] = {c: Counter() for c in by}
    for r in a.param_rows:  # equal shapes collapse: 4·L·d_model², not four terms
        terms[r.record.component][tuple(sorted(((r.record.repeat,) if r.record.per_layer else ()) + r.record.shape))] += 1
    tied = "tied: the token embedding table" if a.ledger.tied else ""
    kinds = tuple(g for g, _ in a.ledger.groups)
    folded = {comp: fold_layers(Expr(dict(terms[comp])), kinds) for comp in by}
    rows = [(comp, " + ".join(monomial(k, f) for f, k in folded[comp].terms.items())
             or (tied if comp == R.LM_HEAD else ""), grouped(n), percent_of(n, total))
            for comp, n in by.items()]
    rows.append(("total", "", grouped(total), "100.00%"))
    notes = tuple(f"{alias} is {target} (tied): one parameter, counted once."
                  for alias, target in a.ledger.tied)
    c = a.config
    if c.num_experts is not None:
        active = a.active_param_count
        rows.append(("active per token", f"all but E − k = {c.num_experts - c.experts_per_token} "
                     "routed experts per MoE layer", grouped(active), percent_of(active, total)))
        notes += ("Active: what one token runs through (its top-k routed experts, the shared "
                  "ones, everything else; the embedding and LM head included, as in Mixtral's "
                  "\"12.9B active\").",)
    return Table("Parameters", ("component", "tensors", "parameters", "share"), tuple(rows),
                 align="llrr", notes=notes)


def percent_of(n: int, total: int) -> str:
    return percent(Fraction(n, total)) if total else "-"


def memory_table(a: Analysis) -> Table:
    rows = []
    for dtype, n_bytes in a.param_memory_bytes().items():
        rows.append((dtype, str(BYTES_PER_ELEMENT[dtype]), grouped(n_bytes), gigabytes(n_bytes),
                     gibibytes(n_bytes)))
    return Table("Memory to hold the parameters", ("dtype", "bytes/param", "bytes", "GB (1e9)",
                                                   "GiB (2^30)"), tuple(rows), align="lrrrr")


def matmul_table(a: Analysis) -> Table:
    train = a.phase == R.TRAIN
    cols = ("matmul", "component") + (("pass",) if train else ()) + (
        "count", "shapes", "FLOPs each", "FLOPs (all)", "useful FLOPs (all)")
    rows = []
    for r in a.matmul_rows:
        m = r.record
        rows.append((m.name, m.component) + ((m.phase,) if train else ()) + (
            _count(m.repeat, r.count), m.shapes, m.formula(),
            grouped(r.flops), grouped(r.useful_flops)))
    rows.append(("total", "") + (("",) if train else ()) + ("", "", "",
                grouped(a.matmul_flops("executed")), grouped(a.matmul_flops("useful"))))
    return Table(f"Matmuls ({a.phase} pass)", cols, tuple(rows),
                 align="ll" + ("l" if train else "") + "rllrr",
                 notes=(f"FLOPs = {FLOPS_PER_MAC}·m·n·p for A (m×n) @ B (n×p), batch dims included "
                        "(the 2mnp rule: one multiply and one add per term). "
                        "Shapes in matmul orientation; a weight W (out×in) appears as Wᵀ.",
                        "useful FLOPs count only the T(T+1)/2 causal query-key pairs "
                        "(P = T·(T+1)/2) in the attention core; elsewhere equal to FLOPs."
                        + _useful_extra(a)))


def component_percents(a: Analysis, counting: str) -> dict[str, str]:
    """Each component's share of the matmul FLOPs as printed: the exact fractions rounded
    together so that the column adds to 100.00% (largest remainder). The component table
    and the answer block (summary.py) both print these, so they cannot disagree."""
    shares = a.component_shares(counting)
    return dict(zip(shares, rounded_percents(list(shares.values()))))


def component_table(a: Analysis) -> Table:
    ex, us = a.component_flops("executed"), a.component_flops("useful")
    ex_pct, us_pct = component_percents(a, "executed"), component_percents(a, "useful")
    rows = [(c, grouped(ex[c]), si(ex[c], "FLOPs"), ex_pct[c], grouped(us[c]), us_pct[c])
            for c in a.components]
    total_ex, total_us = sum(ex.values()), sum(us.values())
    rows.append(("total", grouped(total_ex), si(total_ex, "FLOPs"), "100.00%", grouped(total_us), "100.00%"))
    dominant = max(a.components, key=lambda c: (ex if a.counting == "executed" else us)[c])
    return Table(f"Matmul FLOPs by component ({a.phase} pass)",
                 ("component", "FLOPs (executed)", "", "share", "useful FLOPs", "useful share"),
                 tuple(rows), align="lrrrrr",
                 notes=(f"Largest share ({a.counting}): {dominant}. Shares are exact fractions "
                        "rounded so that each column adds to 100.00%.",))


def elementwise_table(a: Analysis) -> Table:
    if not a.elementwise_rows:
        return Table("Non-matmul FLOPs", notes=("Not counted for a backward-only pass.",))
    rows = []
    for r in a.elementwise_rows:
        e = r.record
        rows.append((e.component, e.name, e.op, e.module,
                     _count(e.repeat, r.count), e.formula(), grouped(r.flops)))
    rows.append(("total", "", "", "", "", "", grouped(a.elementwise_flops)))
    notes = [f"Convention: {R.CONVENTION}."]
    if a.phase == R.TRAIN:
        notes.append("Forward pass only: the backward pass's non-matmul FLOPs are not counted.")
    return Table("Non-matmul FLOPs (forward pass)",
                 ("component", "operation", "op", "where", "count", "FLOPs each", "FLOPs (all)"),
                 tuple(rows), align="llllrlr", notes=tuple(notes))


def totals_table(a: Analysis) -> Table:
    mm = a.matmul_flops()
    rows = [("matmul FLOPs", grouped(mm), si(mm, "FLOPs"))]
    if a.phase == R.FORWARD:
        ew = a.elementwise_flops
        rows += [("non-matmul FLOPs", grouped(ew), si(ew, "FLOPs")),
                 ("all FLOPs", grouped(mm + ew), si(mm + ew, "FLOPs"))]
        notes = (f"Non-matmul FLOPs are {percent_of(ew, mm + ew)} of all FLOPs.",)
    else:
        notes = ("All-FLOPs total given for the forward pass only (backward non-matmul "
                 "FLOPs are not counted).",)
    return Table(f"Totals ({a.phase} pass, {a.counting} attention count)", ("", "FLOPs (exact)", "≈"),
                 tuple(rows), align="lrr", notes=notes)


def closed_form_table(a: Analysis) -> Table:
    c = a.config
    mm = a.matmul_polynomial()
    valid = validity(a.matmul_expr(), a.values)
    lines = [f"Matmul FLOPs ({a.phase}, {a.counting} attention count): {mm}"
             + (f"  (valid for {valid})" if valid else "")]
    if a.phase == R.FORWARD:
        lines.append(f"Non-matmul FLOPs (forward): {a.elementwise_polynomial()}")
    if a.seq != c.context_length:  # at the default length the ratio is 1: nothing to say
        ratio = a.ratio_to_context_length()
        e = a.matmul_expr()
        lines.append(f"At T = {grouped(a.seq)} vs T = context_length = {grouped(c.context_length)} "
                     f"(B = {grouped(a.batch)}): {decimal(ratio, 3)}× the matmul FLOPs "
                     f"({grouped(e.evaluate(a.values))} / "
                     f"{grouped(e.evaluate(a.ledger.values(c.context_length, a.batch)))}).")
    for counting in ("executed", "useful"):
        x = a.crossover(counting)
        if x is None:
            why = ("an expert capacity C = ⌈c·B·T·k/E⌉ is not a polynomial in T"
                   if c.moe_capacity_factor is not None else
                   "chunked layers' useful pairs P_C depend on T mod C past one chunk"
                   if counting == "useful" and any(k.chunked for k in c.layer_kinds) else
                   "with sliding windows the attention core grows only linearly in T past W")
            lines.append(f"Attention core overtakes feed-forward ({counting} count, forward): "
                         f"never on a closed form in T ({why}).")
            continue
        eq = grouped(x.equal_at.numerator) if x.equal_at.denominator == 1 else decimal(x.equal_at, 2)
        lines.append(f"Attention core overtakes feed-forward ({counting} count, forward): "
                     f"equal at T = {eq}, larger from T = {grouped(x.first_seq)}"
                     + (" (this run is past it)." if a.seq >= x.first_seq else "."))
    return Table("Closed forms", notes=tuple(lines))


def header_table(a: Analysis) -> Table:
    """One line: which model, and which architecture, this is."""
    c = a.config
    return Table(f"{c.name}: {note(c)}", notes=(f"Architecture: {c.architecture}.",))


def presets_table() -> Table:
    """The presets with what they are, their architecture and parameter count."""
    from accounting.architecture.presets import PRESETS
    rows = tuple((name, note(c), c.architecture, grouped(analyze(c).param_count))
                 for name, c in PRESETS.items())
    return Table("Presets", ("name", "what it is", "architecture", "parameters"), rows,
                 align="lllr", notes=("Give a name as MODEL; any flag overrides a field of it.",))


def tables(a: Analysis, brief: bool = False) -> list[Table]:
    if brief:  # the answers without the ledgers
        return [header_table(a), component_table(a), totals_table(a), closed_form_table(a)]
    return [model_table(a), params_table(a), memory_table(a), matmul_table(a),
            component_table(a), elementwise_table(a), totals_table(a), closed_form_table(a)]
