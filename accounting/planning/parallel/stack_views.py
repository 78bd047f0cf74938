"""The rows and the table a named stack (stacks.py) adds to a many-GPU plan: which stack and
engine, the model-state subtotal, and what one block saves. Formatting only."""
from __future__ import annotations

from accounting.planning.parallel.plan import ParallelPlan
from accounting.planning.parallel.stacks import TORCH
from accounting.present.table import Table
from accounting.units import gibibytes, gigabytes, grouped


def _gb(n: int) -> str:
    return f"{gigabytes(n)} = {gibibytes(n)}"


def summary_rows(p: ParallelPlan) -> list[tuple[str, str]]:
    """Rows for the plan's first screen (none for the torch stack, whose plan is unchanged)."""
    s = p.stack
    if s.name == TORCH:
        return []
    z = p.layout.sharding
    settings = ""
    if s.name == "megatron":
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
    if s.name == TORCH:
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
