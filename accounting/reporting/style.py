"""Colours and line styles shared by every figure and the notebook: defined once here.

Component colours are from the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal
Design"), chosen to stay distinct under the common colour-vision deficiencies. Pure
Python, so the notebook can import it without pulling in anything else.
"""
from __future__ import annotations

from accounting.ledger import records as R

# One colour per matmul component, the same in every figure.
COMPONENT_COLOURS: dict[str, str] = {
    R.ATTN_PROJ: "#0072B2",  # Okabe-Ito blue
    R.ATTN_CORE: "#D55E00",  # vermillion
    R.FFN: "#009E73",  # bluish green
    R.LM_HEAD: "#CC79A7",  # reddish purple
}
TOTAL_COLOUR = "#000000"  # the sum of the components, where drawn

# Models are told apart by line style (colour stays the component's), smallest lightest
# dash pattern to the largest solid line.
MODEL_LINESTYLES: tuple[str, ...] = (":", "-.", "--", "-")
MODEL_MARKERS: tuple[str, ...] = ("v", "s", "D", "o")


def model_linestyle(index: int) -> str:
    return MODEL_LINESTYLES[index % len(MODEL_LINESTYLES)]


def model_marker(index: int) -> str:
    return MODEL_MARKERS[index % len(MODEL_MARKERS)]


# One (colour, line style) per literature formula (accounting/literature/compare.py keys), Okabe-Ito
# colours; formulas counting hardware FLOPs (with recomputation) are dashed.
FORMULA_STYLES: dict[str, tuple[str, str]] = {
    "6N": ("#000000", "-"),
    "6N-nonembed": ("#000000", ":"),
    "kaplan": ("#E69F00", "-"),  # orange
    "chinchilla": ("#56B4E9", "-"),  # sky blue
    "megatron": ("#0072B2", "--"),  # blue, dashed: recomputation
    "korthikanti-model": ("#0072B2", "-"),
    "korthikanti-hardware": ("#CC79A7", "--"),  # reddish purple, dashed: recomputation
    "palm": ("#D55E00", "-"),  # vermillion
    "nanogpt": ("#009E73", ":"),  # bluish green, dotted (on top of PaLM where they coincide)
}
USEFUL_COLOUR = "#999999"  # the exact count over the causal pairs only
