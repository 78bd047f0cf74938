"""Render tables as terminal text or Markdown. Rendering never computes a number.

text(tables) writes every line whole (files, pipes, the README: byte-stable). With a width
(a terminal's), a table wider than it wraps the text of its widest left-aligned columns
(formulas, notes, descriptions) onto continuation lines, and notes and titles wrap at
word boundaries: nothing is cut off, and numbers (right-aligned columns) never wrap. A
table too wide even so (many number columns) is set as records, one field a line.
"""
from __future__ import annotations

import re
import textwrap

from accounting.tables.table import Table

MIN_COLUMN = 12  # a wrapped column keeps at least this many characters
GAP = "  "


_LABEL = re.compile(r"^[^ :]{1,20}(?: [^ :]{1,20}){0,2}: +")  # "largest:       ..."


# Where a word longer than the line may break: after an operator or a separator, never
# inside a symbol (d_ff, T_max, QKᵀ) or a number (2,471,493,632; 3.35). Was: textwrap broke
# long words at the width, 'd_f' on one line and 'f' on the next (issue 23).
_BREAK_AFTER = frozenset("·×*/,;)]=")


_PUNCTUATION = _BREAK_AFTER | frozenset(".:!?'\"")


def _pieces(word: str) -> list[str]:
    """A word cut after each run of break characters ('),' stays whole: no line starts
    with a comma); a comma or point between digits is part of its number."""
    out, start = [], 0
    for i, ch in enumerate(word):
        if ch in _BREAK_AFTER and i + 1 < len(word) and word[i + 1] not in _PUNCTUATION \
                and not (ch in ",." and i and word[i - 1].isdigit() and word[i + 1].isdigit()):
            out.append(word[start:i + 1])
            start = i + 1
    return out + [word[start:]]


def unbreakable(text: str) -> int:
    """The columns `text` needs at least: its widest symbol or number, after the indent of
    its continuation lines when it starts with a label (_wrap)."""
    label = _LABEL.match(text)
    return max((len(p) for w in text.split() for p in _pieces(w)), default=0) + \
        (label.end() if label else 0)


class _Wrapper(textwrap.TextWrapper):
    def _split(self, text):
        room = self.width - len(self.subsequent_indent)
        return [p for chunk in super()._split(text)
                for p in (_pieces(chunk) if len(chunk) > room else (chunk,))]


def _wrap(text: str, width: int) -> list[str]:
    """Lines of at most `width`; a word longer than that breaks after an operator or a
    separator, never inside a symbol or a number (one longer than the line overflows it);
    a note that starts with an aligned label ('parameters:    ...') continues under its
    value."""
    label = _LABEL.match(text)
    indent = " " * label.end() if label and label.end() <= width // 2 else ""
    return _Wrapper(width, break_on_hyphens=False, replace_whitespace=False,
                    drop_whitespace=True, subsequent_indent=indent,
                    break_long_words=False).wrap(text) or [""]


def _fit(widths: list[int], align: str, width: int, least: list[int] | None = None) -> list[int]:
    """Narrow the widest left-aligned columns until the row fits `width` (or none can);
    none below MIN_COLUMN or its widest unbreakable symbol (`least`)."""
    widths = list(widths)
    least = [max(MIN_COLUMN, n) for n in (least or [0] * len(widths))]
    while sum(widths) + len(GAP) * (len(widths) - 1) > width:
        shrinkable = [i for i, a in enumerate(align) if a == "l" and widths[i] > least[i]]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda j: widths[j])
        over = sum(widths) + len(GAP) * (len(widths) - 1) - width
        others = sorted((widths[j] for j in shrinkable if j != i), reverse=True)
        floor = max(least[i], others[0] if others else least[i], widths[i] - over)
        widths[i] = floor if floor < widths[i] else widths[i] - 1
    return widths


def _text_table(t: Table, width: int | None = None) -> list[str]:
    titles = [t.title] if width is None or len(t.title) <= width else _wrap(t.title, width)
    lines = titles + ["=" * max(len(x) for x in titles)]
    if t.columns:
        natural = [max(len(c), *(len(r[i]) for r in t.rows)) if t.rows else len(c)
                   for i, c in enumerate(t.columns)]
        align = t.alignment()
        least = [max(unbreakable(c), *(unbreakable(r[i]) for r in t.rows)) if t.rows
                 else unbreakable(c) for i, c in enumerate(t.columns)]
        widths = natural if width is None else _fit(natural, align, width, least)
        if width is not None and sum(widths) + len(GAP) * (len(widths) - 1) > width:
            return lines + _records(t, width)

        def fmt(cells) -> list[str]:
            parts = [[c] if len(c) <= w else _wrap(c, w) for c, w in zip(cells, widths)]
            out = []
            for k in range(max(len(p) for p in parts)):
                row = [p[k] if k < len(p) else "" for p in parts]
                out.append(GAP.join(c.ljust(w) if a == "l" else c.rjust(w)
                                    for c, w, a in zip(row, widths, align)).rstrip())
            return out
        lines.extend(fmt(t.columns))
        lines.append(GAP.join("-" * w for w in widths))
        for r in t.rows:
            lines.extend(fmt(r))
    for note in t.notes:
        lines.extend([note] if width is None or len(note) <= width else _wrap(note, width))
    return lines


def _records(t: Table, width: int) -> list[str]:
    """A table as records: each row's first cell, then 'column: value' per other cell."""
    label = max(len(c) for c in t.columns[1:]) + 2
    out = []
    for r in t.rows:
        out.extend(_wrap(r[0], width) if len(r[0]) > width else [r[0]])
        for c, v in zip(t.columns[1:], r[1:]):
            if not v:
                continue
            head = f"  {c + ':':<{label}} "
            indent = " " * len(head)
            if len(head) + unbreakable(v) > width:  # a symbol or number that cannot fit
                out.append(head.rstrip())  # beside the label: the value goes under it
                head = indent = "    "
            body = _wrap(v, max(width - len(head), MIN_COLUMN)) if len(head) + len(v) > width else [v]
            out.append(head + body[0])
            out.extend(indent + b for b in body[1:])
    for note in t.notes:
        out.extend([note] if len(note) <= width else _wrap(note, width))
    return out


def text(tables: list[Table], width: int | None = None) -> str:
    """Terminal text; `width`: fit a terminal that many columns wide (None: full lines)."""
    return "\n\n".join("\n".join(_text_table(t, width)) for t in tables) + "\n"


def _md_text(s: str) -> str:
    """Text as Markdown shows it: a config's name such as '<img src=x onerror=...>' stays
    text, never raw HTML in a rendered page (issue 32). Every HTML tag, comment and
    declaration opens with '<': that one character as an entity suffices ('>' alone, as in
    'core > FFN', opens nothing and stays readable in the source)."""
    return s.replace("<", "&lt;")


def _md_cell(s: str) -> str:
    return _md_text(s).replace("|", "\\|")


def markdown_table(t: Table, heading: str = "##") -> list[str]:
    lines = [f"{heading} {_md_text(t.title)}", ""] if heading else []
    if t.columns:
        lines.append("| " + " | ".join(_md_cell(c) for c in t.columns) + " |")
        lines.append("|" + "|".join(":---" if a == "l" else "---:" for a in t.alignment()) + "|")
        lines.extend("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in t.rows)
        lines.append("")
    for n in t.notes:  # each note its own paragraph
        lines.extend([_md_text(n), ""])
    return lines


def markdown(tables: list[Table], title: str | None = None) -> str:
    lines = [f"# {_md_text(title)}", ""] if title else []
    for t in tables:
        lines.extend(markdown_table(t))
    return "\n".join(lines).rstrip("\n") + "\n"
