"""Render tables as terminal text or Markdown. Rendering never computes a number."""
from __future__ import annotations

from accounting.table import Table


def _text_table(t: Table) -> list[str]:
    lines = [t.title, "=" * len(t.title)]
    if t.columns:
        widths = [max(len(c), *(len(r[i]) for r in t.rows)) if t.rows else len(c)
                  for i, c in enumerate(t.columns)]
        align = t.alignment()

        def fmt(cells):
            return "  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                             for c, w, a in zip(cells, widths, align)).rstrip()
        lines.append(fmt(t.columns))
        lines.append("  ".join("-" * w for w in widths))
        lines.extend(fmt(r) for r in t.rows)
    lines.extend(t.notes)
    return lines


def text(tables: list[Table]) -> str:
    return "\n\n".join("\n".join(_text_table(t)) for t in tables) + "\n"


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|")


def markdown_table(t: Table, heading: str = "##") -> list[str]:
    lines = [f"{heading} {t.title}", ""] if heading else []
    if t.columns:
        lines.append("| " + " | ".join(_md_cell(c) for c in t.columns) + " |")
        lines.append("|" + "|".join(":---" if a == "l" else "---:" for a in t.alignment()) + "|")
        lines.extend("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in t.rows)
        lines.append("")
    for n in t.notes:  # each note its own paragraph
        lines.extend([n, ""])
    return lines


def markdown(tables: list[Table], title: str | None = None) -> str:
    lines = [f"# {title}", ""] if title else []
    for t in tables:
        lines.extend(markdown_table(t))
    return "\n".join(lines).rstrip("\n") + "\n"
