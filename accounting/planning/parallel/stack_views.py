"""The rows and the table a named stack (stacks.py) adds to a many-GPU plan: which stack and
engine, the model-state subtotal, and what one block saves. Formatting only."""
from __future__ import annotations

from accounting.planning.parallel.plan import ParallelPlan
from accounting.tables.table import Table
from accounting.units import gibibytes, gigabytes, grouped


def _gb(n: int) -> str:
    return f"{gigabytes(n)} = {gibibytes(n)}"


def engine(p: ParallelPlan) -> str | None:
    """The named stack's engine for the layout's sharding stage (None: torch's)."""
    return None if p.stack.stack.torch_engines else p.stack.stack.engines.get(p.layout.zero)


def summary_rows(p: ParallelPlan) -> list[tuple[str, str]]:
    """Rows for the plan's first screen (none for the torch stack, whose plan is unchanged)."""
    s = p.stack
    if s.stack.torch_engines:
        return []
    z = p.layout.sharding
    settings = ""
    if s.stack.megatron_core:
        settings = (f"; {s.kernel} attention; "
                    + (f"dropout {s.dropout} (1-byte masks kept)" if s.dropout else "no dropout"))
    return [("stack", f"{s.name}: {s.stack.title}; engine: {s.stack.engines.get(z, '')}"
             + settings),
            ("model states per GPU", f"{grouped(p.model_states)} bytes = {_gb(p.model_states)} "
                                     "(parameters, gradients, master copy, moments)"),
            ("one block's activations", f"{grouped(p.per_layer_activation_bytes)} bytes per "
                                        f"micro-batch of {p.layout.micro_batch} on this GPU")]


def checked_note(p: ParallelPlan) -> str | None:
    s = p.stack
    if s.stack.torch_engines:
        return None
    return (f"Stack {s.name}: checked against {s.stack.checked}. Communication and step time are "
            f"counted as torch's engines move them (formula).")


def per_layer_table(p: ParallelPlan) -> Table:
    rows = tuple((n, grouped(b)) for n, b in p.per_layer)
    rows += (("one block, one micro-batch, this GPU", grouped(p.per_layer_activation_bytes)),)
    return Table(f"Activations one block saves ({p.stack.name} stack)", ("tensor", "bytes"), rows,
                 align="lr", notes=(f"Micro-batch b = {p.layout.micro_batch}, T = {p.seq:,}, TP "
                                    f"rank 0 of {p.layout.tp}"
                                    + (" with sequence parallelism" if p.layout.sp else "")
                                    + f", recomputation {p.layout.recompute}.",))


def formulas_tables(estimates) -> list[Table]:
    """--compare-formulas: the literature's memory formulas beside the plan, then each one's
    reconciliation (formula + Σ terms = the plan's exact bytes)."""
    def num(x) -> str:
        from fractions import Fraction
        x = Fraction(x)
        return grouped(x.numerator) if x.denominator == 1 else f"{float(x):,.2f}"
    rows = tuple((e.name, e.quantity, e.source, num(e.formula), grouped(e.exact),
                  num(e.exact - e.formula)) for e in estimates)
    out = [Table("Memory formulas of the literature beside the plan",
                 ("formula", "quantity", "as written", "formula (bytes)", "this plan (bytes)",
                  "difference"), rows, align="lllrrr",
                 notes=("Model states: the most loaded GPU's parameters, gradients and optimizer "
                        "state; activations: one transformer layer, one micro-batch, TP rank 0. "
                        "Each difference is itemized below; no term is a remainder.",))]
    for e in estimates:
        if e.terms:
            out.append(Table(f"{e.name}: {e.quantity}", ("term", "bytes", "what"),
                             tuple((t.label, num(t.bytes), t.detail) for t in e.terms),
                             align="lrl", notes=(f"Evaluated with {e.evaluated_with}. Formula "
                                                 f"{num(e.formula)} + terms = {grouped(e.exact)}.",)))
    return out


def formulas_dict(estimates) -> list[dict]:
    from accounting.tables.data import fraction
    from fractions import Fraction
    return [{"key": e.key, "name": e.name, "source": e.source, "quantity": e.quantity,
             "formula_bytes": fraction(Fraction(e.formula)), "exact_bytes": e.exact,
             "evaluated_with": e.evaluated_with,
             "terms": [{"label": t.label, "bytes": fraction(Fraction(t.bytes)), "detail": t.detail}
                       for t in e.terms]} for e in estimates]
