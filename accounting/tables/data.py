"""Exact values as data: a Fraction as JSON, rows as CSV text. Every stage's export uses
these two; they know nothing of any stage."""
from __future__ import annotations

import csv
import io
from fractions import Fraction


def fraction(f: Fraction) -> dict:
    """An exact ratio in JSON: numerator and denominator, plus a float for convenience."""
    return {"numerator": f.numerator, "denominator": f.denominator, "approx": float(f)}


def csv_text(rows: list[dict], columns: tuple[str, ...]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()
