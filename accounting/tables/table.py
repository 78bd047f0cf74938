"""A plain table of strings: what every human-readable view is made of."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    align: str = ""  # one 'l' or 'r' per column; default: first left, rest right
    notes: tuple[str, ...] = ()  # lines printed under the table

    def alignment(self) -> str:
        return self.align or ("l" + "r" * (len(self.columns) - 1))
