"""Narrow terminals (issue 23): wrapped text never breaks inside a symbol (d_ff, d_model,
h_kv) or a number (17,592,186,044,416). Was: textwrap broke long words at the width, 'd_f'
on one line and 'f' on the next. The property is checked against the unwrapped text: every
symbol and number the wrapped text shows is one the full-width text holds.
"""
from __future__ import annotations

import re

import pytest

from accounting import analyze, get_preset
from accounting.present import views
from accounting.tables import render
from accounting.tables.table import Table

# a symbol or a number: word characters, joined by a comma or point between them
RUN = re.compile(r"\w+(?:[,.]\w+)*")


def runs(text: str) -> set[str]:
    return set(RUN.findall(text))


@pytest.mark.parametrize("preset", ["meta-llama/Llama-3.2-1B", "deepseek-ai/DeepSeek-V3"])
@pytest.mark.parametrize("width", [40, 47, 53, 61, 70, 85, 100])
def test_no_symbol_or_number_is_split(preset, width):
    tables = views.tables(analyze(get_preset(preset)))
    full = runs(render.text(tables))
    wrapped = render.text(tables, width)
    split = sorted(runs(wrapped) - full)
    assert not split, f"pieces of symbols or numbers at width {width}: {split[:10]}"
    assert max(len(line) for line in wrapped.splitlines()) <= width


def test_a_formula_breaks_after_an_operator():
    formula = "2·B·T·d_model·d_ff + 2·B·h_kv·T·d_model·d_k"
    note = "note: 2·B·T·d_model·d_ff·d_model·d_ff·d_model·d_ff·V, 17,592,186,044,416 FLOPs"
    t = Table("t", ["formula", "n"], [[formula, "1"]], notes=[note])
    text = render.text([t], 30)
    assert all(len(line) <= 30 for line in text.splitlines()), text
    assert runs(text) <= runs(" ".join(["t formula n 1", formula, note])), text
    assert "d_model·\nd_ff" in text or "d_ff·\nd_model" in text or "·\n" in text, text
