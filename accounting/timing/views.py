"""Rendering of a predicted step (planning/kernel_time.py): the answer's line and the breakdown
table. Formatting only."""
from __future__ import annotations

from fractions import Fraction

from accounting.tables.table import Table
from accounting.timing import ops as O


def _ms(s: Fraction) -> str:
    return f"{float(s) * 1e3:,.2f} ms" if s < 1 else f"{float(s):,.3f} s"


def source_words(pred) -> str:
    if pred.source == "kernels":
        return "timed op by op from measured kernels (" + "; ".join(
            x for x in pred.timed.sources if x.startswith("aiconfigurator"))[:160] + ")"
    return (f"timed op by op by the roofline ({float(O.ROOFLINE_DERATE):g} of the dense peak, "
            f"{float(O.BANDWIDTH_DERATE):g} of the bandwidth: no measured kernel table for "
            f"{pred.timed.machine.name})")


def answer_line(pred) -> str:
    return (f"{_ms(pred.step_seconds)} per step, {float(pred.tokens_per_second):,.0f} tokens/s, "
            f"MFU {float(pred.mfu):.3f} ({pred.source}: {pred.timed.machine.name})")


def step_table(pred) -> Table:
    parts = pred.timed.by_category()
    total = pred.step_seconds
    rows = tuple((c, _ms(s), f"{float(s / total):.1%}" if total else "–")
                 for c, s in parts.items() if s or c in (O.GEMMS, O.ATTENTION, O.MEMORY,
                                                        O.OPTIMIZER))
    rows += (("step", _ms(total), "100.0%"),)
    notes = [f"Predicted, not given: {source_words(pred)}.",
             f"tokens/s = B·T / step = {float(pred.tokens_per_second):,.0f}; MFU = the step's "
             f"forward and backward matmul FLOPs (executed, no recomputation, no optimizer) / "
             f"(step × {float(pred.peak_flops) / 1e12:,.0f} TFLOP/s dense bf16 peak) = "
             f"{float(pred.mfu):.4f}.",
             "Rules (accounting/timing/ops.py): GEMMs forward and both gradients from the GEMM "
             "table at their (m, n, k), interpolated; a fused attention kernel's forward from "
             "the context-attention table, its backward 2.5 × (FlashAttention-2, Algorithm 2), "
             "× 1.5 for torch's FlashAttention-2 against the tables' FlashAttention-3; "
             "memory-bound ops as bytes moved at the measured bandwidth share plus a per-kernel "
             "latency; AdamW's foreach ops by the bytes each moves. Give --mfu to override."]
    share = pred.timed.roofline_share
    if 0 < share < 1:
        notes.append(f"{float(share):.0%} of the GEMM and attention time by the roofline (batched "
                     f"GEMMs, which no table measures), the rest from the tables.")
    notes += [f"Outside the table: {n}" for n in pred.timed.notes[:6]]
    return Table("Step time, predicted op by op", ("part", "time", "share"), rows, align="lrr",
                 notes=tuple(notes))
