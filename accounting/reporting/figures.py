"""The report's figures, drawn with matplotlib's Agg canvas (no pyplot, no display).

DRAW maps each figure of figures_index.FIGURES to a function from ReportData to a
matplotlib Figure. save() writes PNG and SVG with fixed metadata and a fixed SVG hash
salt, and the log axes take their logarithms in decimal arithmetic (LOG2, LOG10, below),
so the same data and the same matplotlib version give the same bytes on every machine.
Colours come from style.py (one colour per component, in every figure).
"""
from __future__ import annotations

import functools
import math
from decimal import Context, Decimal
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.scale import InvertedLogTransform, LogScale, LogTransform
from matplotlib.ticker import NullLocator, PercentFormatter

from accounting.ledger import records as R
from accounting.reporting import style
from accounting.reporting.data import COMPONENTS, LONG_SEQ, REFERENCE_SEQ, ReportData, powers_of_two
from accounting.reporting.figures_index import FIGURES
from accounting.reporting.fmt import model_title, seq_text
from accounting.units import decimal, grouped

# Same look everywhere; 'svg.hashsalt' fixes the ids matplotlib would otherwise randomise.
RC = {
    "font.family": "DejaVu Sans",  # ships with matplotlib: the same glyphs on every machine
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
    "xtick.labelsize": 9, "ytick.labelsize": 9, "figure.titlesize": 13,
    "axes.spines.top": False, "axes.spines.right": False,
    "axes.grid": True, "grid.color": "#d9d9d9", "grid.linewidth": 0.6,
    "svg.hashsalt": "accounting-report", "svg.fonttype": "path",
    "path.simplify": False,
}
DPI = 100
# No date in either file; PNG keeps matplotlib's version-only "Software" text, SVG its
# version-only "Creator": both say which matplotlib drew the bytes, neither when.
PNG_METADATA = {}
SVG_METADATA = {"Date": None}


def save(name: str, data: ReportData, folder: Path) -> tuple[str, ...]:
    """Draw figure `name` and write its files into folder; returns the file names."""
    info = FIGURES[name]
    with matplotlib.rc_context(RC):
        fig = DRAW[name](data)
        FigureCanvasAgg(fig)
        for file in info.files():
            ext = file.rsplit(".", 1)[1]
            fig.savefig(folder / file, format=ext, dpi=DPI,
                        metadata=PNG_METADATA if ext == "png" else SVG_METADATA)
            # The layout, computed for the first file (PNG, Agg's text metrics), is kept
            # for the next: both files place every artist alike, and constrained layout
            # (about a third of drawing a figure) runs once, not once per file.
            fig.set_layout_engine("none")
    return info.files()


# ---- log axes, the same bytes on every CPU ------------------------------------------------
# matplotlib's log scale takes np.log10 / np.log2 of every point, and numpy computes those
# with SIMD code chosen at run time for the CPU: with AVX-512 (its SVML kernels) np.log10
# differs in the last bit from the code other CPUs run (NPY_DISABLE_CPU_FEATURES shows it
# on one machine), enough to move a few antialiased pixels of flops_vs_context.png
# (61 pixels, by at most 2/255), so a clone on another CPU regenerated different bytes.
# The same log scale (ticks, labels, limits: LogScale's own), with the logarithms taken in
# decimal arithmetic (libmpdec: integer code, the same result everywhere), rounded once
# to a float.

_DECIMAL = Context(prec=40)


def _log(x: float, base: int) -> float:
    if math.isnan(x):
        return x
    if x <= 0:
        return -math.inf
    if math.isinf(x):
        return x
    return _decimal_log(x, base)


@functools.lru_cache(maxsize=1 << 16)
def _decimal_log(x: float, base: int) -> float:
    """The logarithm of a finite positive x, memoized: every draw transforms the same data
    and tick positions again (a third of the report's CPU time was spent here, uncached);
    the result is a function of (x, base) alone."""
    d = Decimal(x)
    return float(_DECIMAL.log10(d) if base == 10 else _DECIMAL.divide(_DECIMAL.ln(d),
                                                                    _DECIMAL.ln(Decimal(base))))


def _power(base: int, y: float) -> float:
    if math.isnan(y) or math.isinf(y):
        return y if y > 0 or math.isnan(y) else 0.0
    if y * math.log10(base) > 309:  # beyond the largest float
        return math.inf
    if y * math.log10(base) < -330:  # below the smallest subnormal
        return 0.0
    return float(_DECIMAL.power(Decimal(base), Decimal(y)))


def _elementwise(f, values):
    a = np.asarray(values, dtype=float)
    out = np.array([f(v) for v in a.ravel().tolist()], dtype=float).reshape(a.shape)
    if isinstance(values, np.ma.MaskedArray):
        out = np.ma.array(out, mask=np.ma.getmaskarray(values))
    return out


class _DecimalLogTransform(LogTransform):
    def transform_non_affine(self, values):
        out = _elementwise(lambda v: _log(v, self.base), values)
        if self._clip:  # as LogTransform: non-positive values drawn at -1000 decades
            out[np.asarray(values) <= 0] = -1000
        return out

    def inverted(self):
        return _DecimalInvertedLogTransform(self.base)


class _DecimalInvertedLogTransform(InvertedLogTransform):
    def transform_non_affine(self, values):
        return _elementwise(lambda y: _power(self.base, y), values)

    def inverted(self):
        return _DecimalLogTransform(self.base)


class DecimalLogScale(LogScale):
    """LogScale (name 'log', its locators and formatters) with the decimal transform."""

    def __init__(self, base: int):
        super().__init__(None, base=base)  # axis: unused (required before matplotlib 3.11)
        self._transform = _DecimalLogTransform(base)


LOG2, LOG10 = DecimalLogScale(2), DecimalLogScale(10)


# ---- shared pieces ------------------------------------------------------------------------

def _seq_label(seq: int) -> str:
    return grouped(seq)


def _context_axis(ax, seqs) -> None:
    """log2 axis with a labelled tick at every power of two."""
    ax.set_xscale(LOG2)
    ticks = powers_of_two(seqs[0], seqs[-1])
    ax.set_xticks(ticks, [_seq_label(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(seqs[0], seqs[-1])


def _component_handles():
    from matplotlib.patches import Patch
    return [Patch(facecolor=style.COMPONENT_COLOURS[c], label=c) for c in COMPONENTS]


def _percent(share) -> str:
    return f"{decimal(share * 100, 1)}%"


# ---- figures ------------------------------------------------------------------------------

def shares_by_model(data: ReportData) -> Figure:
    """Stacked horizontal bars: component shares for each model at T = 1,024 and 16,384."""
    fig = Figure(figsize=(10, 5.4), layout="constrained")
    ax = fig.add_subplot()
    rows = []
    for c in data.models:
        s = data.sweep[c.name]
        for seq in (REFERENCE_SEQ, LONG_SEQ):
            i = s.at(seq)
            rows.append((f"{c.name}\nT = {_seq_label(seq)}", {k: s.shares(k)[i] for k in COMPONENTS}))
    rows.reverse()  # smallest model at the top
    y = list(range(len(rows)))
    left = [0.0] * len(rows)
    for comp in COMPONENTS:
        widths = [float(r[1][comp]) for r in rows]
        ax.barh(y, widths, left=left, height=0.72, color=style.COMPONENT_COLOURS[comp],
                edgecolor="white", linewidth=0.8, label=comp)
        for yi, (lo, w, r) in enumerate(zip(left, widths, rows)):
            if w >= 0.045:  # label segments wide enough to hold the text
                ax.text(lo + w / 2, yi, _percent(r[1][comp]), ha="center", va="center",
                        fontsize=8.5, color="white", fontweight="bold")
        left = [lo + w for lo, w in zip(left, widths)]
    ax.set_yticks(y, [r[0] for r in rows])
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.set_xlabel("share of forward-pass matmul FLOPs (executed count, %)")
    ax.grid(axis="y", visible=False)
    ax.set_axisbelow(True)
    ax.set_title("Where the forward FLOPs go, by model size and context length")
    fig.legend(handles=_component_handles(), loc="outside lower center", ncols=4, frameon=False)
    return fig


def share_vs_context(data: ReportData) -> Figure:
    """One stacked-share panel per model over the context sweep."""
    fig = Figure(figsize=(10, 7.6), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    for ax, c in zip(axes.flat, data.models):
        s = data.sweep[c.name]
        ax.stackplot(s.seqs, *[[float(x) for x in s.shares(k)] for k in COMPONENTS],
                     colors=[style.COMPONENT_COLOURS[k] for k in COMPONENTS],
                     edgecolor="white", linewidth=0.5)
        x = s.crossover.equal_at
        ax.axvline(float(x), color="black", linestyle="--", linewidth=1)
        ax.annotate(f"core = FFN\nT = {seq_text(x)}", (float(x), 0.97),
                    xytext=(4, 0), textcoords="offset points", ha="left", va="top",
                    fontsize=8.5, color="black",
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none",
                          "alpha": 0.85})
        _context_axis(ax, s.seqs)
        ax.set_ylim(0, 1)
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
        ax.set_title(model_title(c))
        ax.grid(False)
    for ax in axes[1]:
        ax.set_xlabel("context length T (tokens, log₂ scale)")
    for ax in axes[:, 0]:
        ax.set_ylabel("share of forward matmul FLOPs (%)")
    fig.suptitle("Component shares of the forward pass as the context grows")
    fig.legend(handles=_component_handles(), loc="outside lower center", ncols=4, frameon=False)
    return fig


def flops_vs_context(data: ReportData) -> Figure:
    """Absolute FLOPs per component, log-log, one panel per model (shared y axis)."""
    fig = Figure(figsize=(10, 7.6), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    for ax, c in zip(axes.flat, data.models):
        s = data.sweep[c.name]
        for k in COMPONENTS:
            ax.plot(s.seqs, [float(f) for f in s.flops[k]], color=style.COMPONENT_COLOURS[k],
                    linewidth=2, label=k)
        ax.plot(s.seqs, [float(f) for f in s.totals], color=style.TOTAL_COLOUR, linewidth=1.2,
                linestyle="--", label="total")
        _context_axis(ax, s.seqs)
        ax.set_yscale(LOG10)
        ax.set_title(model_title(c))
    for ax in axes[1]:
        ax.set_xlabel("context length T (tokens, log₂ scale)")
    for ax in axes[:, 0]:
        ax.set_ylabel("forward matmul FLOPs (B = 1, log scale)")
    fig.suptitle("Forward-pass matmul FLOPs per component (executed count)")
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=style.COMPONENT_COLOURS[k], linewidth=2, label=k)
               for k in COMPONENTS]
    handles.append(Line2D([], [], color=style.TOTAL_COLOUR, linewidth=1.2, linestyle="--", label="total"))
    fig.legend(handles=handles, loc="outside lower center", ncols=5, frameon=False)
    return fig


def attention_core_share(data: ReportData) -> Figure:
    """Attention-core share (and the feed-forward's) against T, all models, crossovers marked."""
    fig = Figure(figsize=(10, 6.4), layout="constrained")
    ax = fig.add_subplot()
    core, ffn = R.ATTN_CORE, R.FFN
    from matplotlib.lines import Line2D
    model_handles = []
    for i, c in enumerate(data.models):
        s = data.sweep[c.name]
        ls = style.model_linestyle(i)
        ax.plot(s.seqs, [float(x) for x in s.shares(core)], color=style.COMPONENT_COLOURS[core],
                linestyle=ls, linewidth=2.2)
        ax.plot(s.seqs, [float(x) for x in s.shares(ffn)], color=style.COMPONENT_COLOURS[ffn],
                linestyle=ls, linewidth=1.4, alpha=0.9)
        # The crossover: attention core = feed-forward, where the two curves meet.
        x, y = float(s.crossover.equal_at), float(s.crossover_share)
        ax.plot([x], [y], marker=style.model_marker(i), color="black", markersize=7,
                linestyle="none", zorder=5)
        ax.plot([x, x], [0, y], color="black", linestyle=":", linewidth=0.9, zorder=4)
        ax.text(x, 0.012, seq_text(s.crossover.equal_at), ha="center", va="bottom", fontsize=8.5,
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"}, zorder=6)
        model_handles.append(Line2D([], [], color="#444444", linestyle=ls, linewidth=2,
                                    marker=style.model_marker(i), markerfacecolor="black",
                                    label=c.name))
    _context_axis(ax, data.sweep[data.models[0].name].seqs)
    ax.set_ylim(0, 0.75)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.set_xlabel("context length T (tokens, log₂ scale)")
    ax.set_ylabel("share of forward matmul FLOPs (%)")
    ax.set_title("The attention core overtakes the feed-forward as the context grows\n"
                 "(markers, dotted lines and labels: the context length where their shares are equal)")
    comp = [Line2D([], [], color=style.COMPONENT_COLOURS[core], linewidth=2.2, label=f"{core} (thick)"),
            Line2D([], [], color=style.COMPONENT_COLOURS[ffn], linewidth=1.4, label=f"{ffn} (thin)")]
    first = ax.legend(handles=comp, loc="upper left", title="component (colour)", frameon=True)
    ax.add_artist(first)
    ax.legend(handles=model_handles, loc="upper center", title="model (line style, marker)",
              frameon=True, ncols=2)
    return fig


def formula_error_vs_context(data: ReportData) -> Figure:
    """Each formula's training FLOPs / exact − 1 against T, one panel per course preset."""
    from matplotlib.lines import Line2D
    fig = Figure(figsize=(10, 8.2), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    names = {}
    for ax, c in zip(axes.flat, data.models):
        s = data.formula_sweeps[c.name]
        names = s.names
        ax.axhline(0, color="black", linewidth=0.8)
        ax.plot(s.seqs, [float(r - 1) for r in s.useful_ratios()], color=style.USEFUL_COLOUR,
                linewidth=2.4, linestyle="-.")
        for k in s.names:
            colour, ls = style.FORMULA_STYLES[k]
            ax.plot(s.seqs, [float(r - 1) for r in s.ratios(k)], color=colour, linestyle=ls,
                    linewidth=1.8)
        _context_axis(ax, s.seqs)
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
        ax.set_title(model_title(c))
    for ax in axes[1]:
        ax.set_xlabel("context length T (tokens, log₂ scale)")
    for ax in axes[:, 0]:
        ax.set_ylabel("formula ÷ exact − 1 (training FLOPs)")
    fig.suptitle("The literature's FLOP formulas against the exact count as the context grows")
    handles = [Line2D([], [], color=style.FORMULA_STYLES[k][0], linestyle=style.FORMULA_STYLES[k][1],
                      linewidth=1.8, label=n) for k, n in names.items()]
    handles.append(Line2D([], [], color=style.USEFUL_COLOUR, linestyle="-.", linewidth=2.4,
                          label="exact, causal pairs only"))
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    return fig


DRAW = {"shares_by_model": shares_by_model, "share_vs_context": share_vs_context,
        "flops_vs_context": flops_vs_context, "attention_core_share": attention_core_share,
        "formula_error_vs_context": formula_error_vs_context}
assert DRAW.keys() == FIGURES.keys()
