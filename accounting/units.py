"""Units and conventions, each named once.

Counts are Python ints everywhere; the helpers here only *format* them. Rounding for
display is exact integer arithmetic, so that the same integer always prints the same string.
"""
from __future__ import annotations

from fractions import Fraction

# A multiply-add is two floating-point operations (CS336 ch. 3: "AB needs 2mnp FLOPs").
# fvcore counts one per multiply-add (a MAC); FlopCounterMode counts FLOPs.
FLOPS_PER_MAC = 2

GB = 10**9  # decimal gigabyte
GiB = 2**30  # binary gibibyte

# Bytes per parameter for the dtypes users ask about.
BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1}

_SI = ((10**24, "Y"), (10**21, "Z"), (10**18, "E"), (10**15, "P"), (10**12, "T"),
       (10**9, "G"), (10**6, "M"), (10**3, "k"))


def decimal(value: int | Fraction, places: int) -> str:
    """Exact value rounded half-even to `places` decimals, in exact integer arithmetic."""
    q = round(Fraction(value) * 10**places)  # Fraction rounds half-even, exactly
    sign, digits = ("-" if q < 0 else ""), str(abs(q))
    if places == 0:
        return sign + digits
    digits = digits.rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def grouped(n: int) -> str:
    """1234567 -> '1,234,567' (exact)."""
    return f"{n:,}"


def si(n: int | Fraction, unit: str = "", places: int = 3) -> str:
    """4513336524800 -> '4.513 T' + unit; exact input, rounded only for display."""
    for scale, prefix in _SI:
        if abs(n) >= scale:
            return f"{decimal(Fraction(n) / scale, places)} {prefix}{unit}"
    return f"{decimal(Fraction(n), 0 if isinstance(n, int) else places)} {unit}".rstrip()


def percent(share: Fraction, places: int = 2) -> str:
    return f"{decimal(share * 100, places)}%"


def gigabytes(n_bytes: int, places: int = 2) -> str:
    return f"{decimal(Fraction(n_bytes, GB), places)} GB"


def gibibytes(n_bytes: int, places: int = 2) -> str:
    return f"{decimal(Fraction(n_bytes, GiB), places)} GiB"


def rounded_percents(shares: list[Fraction], places: int = 2) -> list[str]:
    """Percentages that add up to exactly 100 at `places` decimals (largest remainder).

    The exact shares sum to 1; rounding each alone can show 99.99% or 100.01%.
    """
    unit = Fraction(1, 100 * 10**places)
    floors = [int(s // unit) for s in shares]
    total = sum(shares, Fraction(0))
    missing = int(round(total / unit)) - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] / unit - floors[i]), i))
    for i in order[:max(missing, 0)]:
        floors[i] += 1
    return [f"{decimal(Fraction(f) * unit * 100, places)}%" for f in floors]
