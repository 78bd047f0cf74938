"""The report's files under figures/: names and captions, defined once (no matplotlib here).

figures.py draws each of these; markdown.py links and captions them.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.reporting.data import LONG_SEQ, REFERENCE_SEQ
from accounting.units import grouped

FIGURES_DIR = "figures"
FORMATS = ("png", "svg")
SWEEP_CSV = "context_sweep.csv"  # the numbers behind the sweep figures
FORMULA_CSV = "formula_sweep.csv"  # the numbers behind the formula-error figure


@dataclass(frozen=True)
class FigureInfo:
    name: str  # file stem under figures/
    caption: str

    def files(self) -> tuple[str, ...]:
        return tuple(f"{self.name}.{ext}" for ext in FORMATS)


FIGURES: dict[str, FigureInfo] = {f.name: f for f in (
    FigureInfo("shares_by_model", "Component shares of the forward matmul FLOPs for each model "
               f"at T = {grouped(REFERENCE_SEQ)} and T = {grouped(LONG_SEQ)}"),
    FigureInfo("share_vs_context", "Stacked component shares against context length, one panel "
               "per model; dashed line: attention core = feed-forward"),
    FigureInfo("flops_vs_context", "Forward matmul FLOPs per component against context length "
               "(log-log), one panel per model"),
    FigureInfo("attention_core_share", "Attention-core and feed-forward shares against context "
               "length for all four models; markers: where the attention core overtakes the "
               "feed-forward"),
    FigureInfo("formula_error_vs_context", "Each literature formula's training FLOPs against "
               "the exact count (executed attention), as the context grows, one panel per "
               "course preset; grey: the exact count of the causal pairs only"),
)}
