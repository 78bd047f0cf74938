"""The plan's throughput (and a measured one) as MFU and HFU under each FLOP-counting
convention (accounting/planning/mfu.py). Formatting only."""
from __future__ import annotations

from fractions import Fraction

from accounting.planning.mfu import CONVENTIONS, END_TO_END, SCOPES, utilizations
from accounting.planning.views import _dec, _num
from accounting.tables.table import Table
from accounting.units import TERA, grouped, percent


def utilization_table(p, measured: Fraction | None = None) -> Table:
    """`p` a ParallelPlan; `measured` tokens/s of the whole job, if given."""
    hw, lo = p.hardware, p.layout
    if hw is None or not hw.peak_flops or p.step_seconds is None:
        return Table("Utilization by convention", notes=("Not estimated: no peak FLOP/s.",))
    peak = hw.peak_flops
    rates = [("this plan", p.tokens_per_second)]
    if measured is not None:
        rates.append(("measured", Fraction(measured)))
    per = [(name, utilizations(p.config, p.seq, lo.recompute, r, lo.gpus, peak))
           for name, r in rates]
    cols = ["convention", "model FLOPs / token", "hardware FLOPs / token (+ recomputed)"]
    for name, _ in rates:
        cols += [f"MFU ({name})", f"HFU ({name})"]
    rows = []
    for i, u in enumerate(per[0][1]):
        row = [u.convention, grouped(round(u.model_flops_per_token)),
               grouped(round(u.hardware_flops_per_token))]
        for _, us in per:
            row += [percent(us[i].mfu), percent(us[i].hfu)]
        rows.append(tuple(row))
    given = (f"The plan: --mfu {_num(p.mfu, 4)} read as {'an HFU' if p.hfu else 'an MFU'} "
             f"under '{p.mfu_convention}', scope {p.mfu_scope} ({SCOPES[p.mfu_scope]}); "
             f"{_dec(p.tokens_per_second, 0)} tokens/s on {lo.gpus:,} GPUs at "
             f"{_num(peak / TERA)} TFLOP/s peak each.")
    if p.mfu_scope != END_TO_END:
        given += (" The compute-scope step includes the bubble and the communication, so its "
                  "end-to-end MFU is below the --mfu given.")
    notes = [given, "u = FLOPs per token · tokens/s / (n · peak); MFU without the recomputed "
             "forward work, HFU with it (recomputation: " + lo.recompute + "); the optimizer "
             "step is in no numerator.",
             *(f"{text}." for text in CONVENTIONS.values())]
    if measured is not None:
        notes.append(f"Measured: {_dec(Fraction(measured), 0)} tokens/s (--measured-tokens-per-s).")
    return Table("Utilization by convention (MFU and HFU)", tuple(cols), tuple(rows),
                 align="l" + "r" * (len(cols) - 1), notes=tuple(notes))
