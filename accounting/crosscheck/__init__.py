"""Cross-check the analytic counts against counters run on the real model (meta device).

    from accounting import analyze, get_preset
    from accounting.crosscheck import cross_check
    result = cross_check(analyze(get_preset("gpt2-xl"), seq=16384))
    result.agrees, result.tables(), result.to_dict(), result.summary()

Counters: fvcore's FlopCountAnalysis (with an exact aten::einsum handle, the stock one
kept for comparison where it can run), torch's FlopCounterMode (forward and backward),
and an op counter (TorchDispatchMode) for the non-matmul FLOPs. Imports torch and
fvcore: accounting.cli imports this package only for --verify.
"""
from __future__ import annotations

from accounting.analysis import Analysis
from accounting.crosscheck.compare import (Check, ComponentRow, CrossCheck, LayerCheck,
                                           LayerMismatch, NonMatmulRow, compare)
from accounting.crosscheck.measure import Measurement, measure


def cross_check(analysis: Analysis, fvcore: bool = True, stock: bool = True) -> CrossCheck:
    """Run the model for `analysis`'s workload under every counter and compare."""
    m = measure(analysis.config, analysis.seq, analysis.batch, analysis.phase,
                fvcore=fvcore, stock=stock)
    return compare(analysis, m)


__all__ = ["cross_check", "compare", "measure", "Measurement", "CrossCheck", "ComponentRow",
           "LayerCheck", "LayerMismatch", "NonMatmulRow", "Check"]
