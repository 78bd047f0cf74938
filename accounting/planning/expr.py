"""Sums of monomials in the shape symbols, with int coefficients: the closed forms of
memory, KV-cache bytes and decode FLOPs.

symbols.Poly is a polynomial in the workload variables B and T only (model sizes folded
into its coefficients); an Expr keeps every size symbolic (``4·B·T·d_model + 2·B·h·T²``)
so that a formula can be printed as written and evaluated for any config.
"""
from __future__ import annotations

from accounting.symbols import Poly, monomial, product


class Expr:
    """Σ coefficient·Π factors; factors are symbol names (see symbols.SYMBOLS)."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[tuple[str, ...], int] | None = None):
        merged: dict[tuple[str, ...], int] = {}
        for factors, c in (terms or {}).items():
            key = tuple(sorted(factors))
            merged[key] = merged.get(key, 0) + c
        self.terms = {k: v for k, v in merged.items() if v}

    @classmethod
    def of(cls, coefficient: int, factors: tuple[str, ...] = ()) -> Expr:
        return cls({tuple(factors): coefficient})

    def __add__(self, other: Expr) -> Expr:
        terms = dict(self.terms)
        for k, v in other.terms.items():
            terms[k] = terms.get(k, 0) + v
        return Expr(terms)

    def scale(self, k: int) -> Expr:
        return Expr({f: c * k for f, c in self.terms.items()})

    def times(self, *factors: str) -> Expr:
        """Every term multiplied by the given symbols (e.g. times("L") for all layers)."""
        return Expr({f + factors: c for f, c in self.terms.items()})

    def substitute(self, symbol: str, factors: tuple[str, ...]) -> Expr:
        """Each occurrence of `symbol` replaced by the product of `factors` (() for 1)."""
        out: dict[tuple[str, ...], int] = {}
        for f, c in self.terms.items():
            new: list[str] = []
            for s in f:
                new.extend(factors if s == symbol else (s,))
            key = tuple(sorted(new))
            out[key] = out.get(key, 0) + c
        return Expr(out)

    def split(self, symbol: str) -> tuple[Expr, Expr]:
        """(terms containing `symbol`, terms without it)."""
        return (Expr({f: c for f, c in self.terms.items() if symbol in f}),
                Expr({f: c for f, c in self.terms.items() if symbol not in f}))

    def evaluate(self, values: dict[str, int]) -> int:
        return sum(c * product(f, values) for f, c in self.terms.items())

    def poly(self, values: dict[str, int]) -> Poly:
        """The same sum as a polynomial in B and T (every other symbol from `values`)."""
        total = Poly()
        for f, c in self.terms.items():
            total = total + Poly.of_factors(c, f, values)
        return total

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def __bool__(self) -> bool:
        return bool(self.terms)

    def __repr__(self) -> str:
        return f"Expr({self})"

    def __str__(self) -> str:
        if not self.terms:
            return "0"

        def key(item):
            f, _ = item
            return (-f.count("B"), -(f.count("T") + f.count("t")), -len(f), monomial(1, f))
        return " + ".join(monomial(c, f) for f, c in sorted(self.terms.items(), key=key))


def grouped(parts: list[tuple[int, Expr]], prefix: str = "") -> str:
    """'4·(…) + 8·B·T' from (bytes per element, element count) pairs; `prefix` (e.g. 'L·')
    multiplies each group."""
    out = []
    for size, e in parts:
        if not e:
            continue
        bare = len(e.terms) == 1 and set(e.terms.values()) == {1}  # a single monomial, no coefficient
        body = f"{prefix}{e}" if bare else f"{prefix}({e})" if prefix or size != 1 else str(e)
        out.append(body if size == 1 else f"{size}·{body}")
    return " + ".join(out) if out else "0"
