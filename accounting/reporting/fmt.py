"""Display strings shared by the report's text and its figures (formatting only)."""
from __future__ import annotations

from fractions import Fraction

from accounting.units import decimal, grouped


def seq_text(x: int | Fraction) -> str:
    """An exact, possibly fractional, token count: 4608 -> '4,608', 9215/2 -> '4,607.5'."""
    x = Fraction(x)
    if x.denominator == 1:
        return grouped(x.numerator)
    whole, frac = decimal(x, 1).split(".")
    return f"{int(whole):,}.{frac}"


def model_title(config) -> str:
    return f"{config.name} (L = {config.num_layers}, d_model = {grouped(config.d_model)})"
