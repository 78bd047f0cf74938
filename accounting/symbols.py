"""Shape symbols, shared by the records, their formulas and the model's einops strings.

A record's shape is a tuple of these names; evaluating it against a config gives ints,
expanding it as a polynomial in the workload variables B and T gives closed forms.
"""
from __future__ import annotations

from collections import Counter
from fractions import Fraction

from accounting.config import ModelConfig

SYMBOLS: dict[str, str] = {
    "B": "batch size (model code: batch)",
    "T": "sequence length analysed (model code: seq, queries, keys)",
    "P": "causal query-key pairs a causal kernel needs, T·(T+1)/2",
    "L": "num_layers",
    "V": "vocab_size (model code: vocab)",
    "d_model": "model width",
    "d_ff": "SwiGLU inner width",
    "h": "num_heads (model code: heads)",
    "d_k": "head dimension d_model/h; d_v = d_k",
    "d_k/2": "RoPE rotation pairs per head",
}

# Order in which symbols are written in a monomial: workload first, then model sizes.
_ORDER = {s: i for i, s in enumerate(("B", "h", "T", "P", "L", "d_model", "d_k", "d_k/2", "d_ff", "V"))}
_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def sizes(config: ModelConfig, seq: int, batch: int) -> dict[str, int]:
    """Integer value of every symbol for one workload."""
    return {
        "B": batch, "T": seq, "P": seq * (seq + 1) // 2, "L": config.num_layers,
        "V": config.vocab_size, "d_model": config.d_model, "d_ff": config.d_ff,
        "h": config.num_heads, "d_k": config.d_k, "d_k/2": config.d_k // 2,
    }


def product(factors: tuple[str, ...], values: dict[str, int]) -> int:
    out = 1
    for f in factors:
        out *= values[f]
    return out


def monomial(coefficient: int, factors: tuple[str, ...]) -> str:
    """(2, ('B','T','d_model','d_model')) -> '2·B·T·d_model²'."""
    powers = Counter(factors)
    parts = [] if coefficient == 1 and powers else [str(coefficient)]
    for s in sorted(powers, key=lambda s: _ORDER.get(s, len(_ORDER))):
        parts.append(s + (str(powers[s]).translate(_SUPERSCRIPT) if powers[s] > 1 else ""))
    return "·".join(parts)


def dims(factors: tuple[str, ...]) -> str:
    """('B','T') -> 'B·T' (one flattened dimension)."""
    return "·".join(factors) if factors else "1"


class Poly:
    """A polynomial in the workload variables B and T with exact rational coefficients.

    Terms map (power of B, power of T) to a coefficient. Used for closed forms only;
    integer totals are computed directly from the records.
    """

    __slots__ = ("terms",)

    def __init__(self, terms: dict[tuple[int, int], Fraction] | None = None):
        self.terms = {k: Fraction(v) for k, v in (terms or {}).items() if v}

    @classmethod
    def of_symbol(cls, symbol: str, values: dict[str, int]) -> "Poly":
        if symbol == "B":
            return cls({(1, 0): 1})
        if symbol == "T":
            return cls({(0, 1): 1})
        if symbol == "P":  # T(T+1)/2
            return cls({(0, 2): Fraction(1, 2), (0, 1): Fraction(1, 2)})
        return cls({(0, 0): values[symbol]})

    @classmethod
    def of_factors(cls, coefficient: int, factors: tuple[str, ...], values: dict[str, int]) -> "Poly":
        out = cls({(0, 0): coefficient})
        for f in factors:
            out = out * cls.of_symbol(f, values)
        return out

    def __add__(self, other: "Poly") -> "Poly":
        terms = dict(self.terms)
        for k, v in other.terms.items():
            terms[k] = terms.get(k, 0) + v
        return Poly(terms)

    def __sub__(self, other: "Poly") -> "Poly":
        return self + Poly({k: -v for k, v in other.terms.items()})

    def __mul__(self, other: "Poly") -> "Poly":
        terms: dict[tuple[int, int], Fraction] = {}
        for (b1, t1), v1 in self.terms.items():
            for (b2, t2), v2 in other.terms.items():
                k = (b1 + b2, t1 + t2)
                terms[k] = terms.get(k, 0) + v1 * v2
        return Poly(terms)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __repr__(self) -> str:
        return f"Poly({self})"

    def coefficient(self, b_power: int, t_power: int) -> Fraction:
        return self.terms.get((b_power, t_power), Fraction(0))

    def __call__(self, batch: int, seq: int) -> Fraction:
        return sum((v * batch**b * seq**t for (b, t), v in self.terms.items()), Fraction(0))

    def evaluate(self, batch: int, seq: int) -> int:
        """Exact integer value; refuses a non-integer (it would mean a wrong formula)."""
        value = self(batch, seq)
        if value.denominator != 1:
            raise ArithmeticError(f"polynomial {self} is not integral at B={batch}, T={seq}")
        return value.numerator

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for (b, t), v in sorted(self.terms.items(), key=lambda kv: (-kv[0][0], -kv[0][1])):
            coeff = f"{v.numerator:,}" if v.denominator == 1 else f"({v.numerator:,}/{v.denominator:,})"
            var = "·".join(s + (str(p).translate(_SUPERSCRIPT) if p > 1 else "")
                           for s, p in (("B", b), ("T", t)) if p)
            parts.append(f"{coeff}·{var}" if var else coeff)
        return " + ".join(parts).replace("+ -", "− ")
