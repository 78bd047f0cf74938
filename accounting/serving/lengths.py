"""Request lengths as a distribution, for `serve --search --isl SPEC --osl SPEC` (issue 40).

A SPEC is one of
    4096                  fixed: every request that long (the plain integer, as before)
    uniform:A,B           integers uniform on [A, B], both ends included
    normal:MEAN,SD[,LO,HI] a normal rounded to the nearest integer and clipped to [LO, HI]
                          (default [1, MEAN + 4·SD]: a length is at least one token)
    list:L1,L2,...        an empirical list (e.g. a trace's lengths, or ShareGPT-like
                          percentiles written out), each entry one request, equally likely
    file:PATH             the same list, one length a line (blank lines and # comments skipped)
The random kinds are drawn SAMPLES times from Python's Mersenne Twister seeded with --seed
(random.Random(seed): the same seed gives the same draws on every platform and version,
docs.python.org/3/library/random.html "Reproducibility"), so a search is deterministic. The
lists are taken as they are (not resampled). Everything downstream reads the sorted sample
through `points` (at most POINTS equal-mass groups, each at its longest member: a group's
prefill time is then never under-counted) and `mean`, `quantile` (exact ratios and
integers: the analytic core stays exact).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from accounting.runtime.errors import UsageError

SAMPLES = 4096  # draws of a random kind (the quantiles' resolution: 1/4096)
POINTS = 16  # equal-mass groups the search evaluates a prefill at (16 serve plans a shape)
MAX_LENGTH = 10**7  # tokens: far over any model's context (the planner refuses beyond it)
KINDS = ("fixed", "uniform", "normal", "list", "file")
RANDOM = ("uniform", "normal")  # the kinds --seed draws


@dataclass(frozen=True)
class Lengths:
    spec: str  # as the user wrote it (shown back)
    kind: str
    values: tuple[int, ...]  # the sorted sample (fixed: one value)

    @property
    def fixed(self) -> bool:
        return len(set(self.values)) == 1

    @cached_property
    def mean(self) -> Fraction:
        return Fraction(sum(self.values), len(self.values))

    @cached_property
    def second_moment(self) -> Fraction:
        return Fraction(sum(v * v for v in self.values), len(self.values))

    @property
    def squared_cv(self) -> Fraction:
        """Var / mean²: the service time's variability in the queueing formulas."""
        m = self.mean
        return (self.second_moment - m * m) / (m * m)

    @property
    def representative(self) -> int:
        """The length a worker's plan is evaluated at: the mean, rounded up (the decode step
        reads the batch's KV, linear in the sum of its sequences' lengths, so the step at the
        mean length is the mean step; the pool holds the batch's total tokens, paged)."""
        return -(-self.mean.numerator // self.mean.denominator)

    @property
    def longest(self) -> int:
        return self.values[-1]

    def quantile(self, p: Fraction) -> int:
        """The p-quantile of the sample (nearest rank: the smallest value with at least a
        fraction p of the sample at or below it); p in (0, 1]."""
        n = len(self.values)
        rank = max(1, -(-(Fraction(p) * n).numerator // (Fraction(p) * n).denominator))
        return self.values[min(rank, n) - 1]

    @cached_property
    def points(self) -> tuple[tuple[int, Fraction], ...]:
        """(length, probability): the distinct values when there are at most POINTS of them,
        else POINTS equal-mass groups of the sorted sample, each at its longest member."""
        n = len(self.values)
        distinct = sorted(set(self.values))
        if len(distinct) <= POINTS:
            return tuple((v, Fraction(self.values.count(v), n)) for v in distinct)
        out = []
        for g in range(POINTS):
            lo, hi = g * n // POINTS, (g + 1) * n // POINTS
            if hi > lo:
                out.append((self.values[hi - 1], Fraction(hi - lo, n)))
        return tuple(out)


def fixed(n: int) -> Lengths:
    return Lengths(str(n), "fixed", (n,))


def _ints(text: str, flag: str, count: tuple[int, ...] | None) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag}: expected integers after the kind, got {text[:40]!r}") \
            from None
    if count is not None and len(vals) not in count:
        raise UsageError(f"{flag}: expected {' or '.join(map(str, count))} numbers, got "
                         f"{len(vals)} ({text[:40]!r})")
    return vals


def _check(vals, flag: str) -> tuple[int, ...]:
    if not vals:
        raise UsageError(f"{flag}: the list of lengths is empty")
    for v in vals:
        if not 1 <= v <= MAX_LENGTH:
            raise UsageError(f"{flag}: a length must be 1 to {MAX_LENGTH:,} tokens, got {v:,}")
    return tuple(sorted(vals))


def parse(text: str, flag: str, seed: int = 0) -> Lengths:
    """A SPEC (module docstring) as Lengths; UsageError naming the flag on anything else."""
    text = text.strip()
    if text.isdigit():
        return Lengths(text, "fixed", _check([int(text)], flag))
    kind, sep, rest = text.partition(":")
    if not sep or kind not in KINDS[1:]:
        raise UsageError(f"{flag}: expected N, uniform:A,B, normal:MEAN,SD[,LO,HI], "
                         f"list:L1,L2,... or file:PATH, got {text[:40]!r}")
    rng = random.Random(seed)
    if kind == "uniform":
        a, b = _ints(rest, flag, (2,))
        if not 1 <= a <= b:
            raise UsageError(f"{flag}: uniform:A,B needs 1 <= A <= B, got {a},{b}")
        vals = [rng.randint(a, b) for _ in range(SAMPLES)]
    elif kind == "normal":
        v = _ints(rest, flag, (2, 4))
        mean, sd = v[0], v[1]
        lo, hi = (v[2], v[3]) if len(v) == 4 else (1, mean + 4 * sd)
        if sd < 0 or not 1 <= lo <= hi:
            raise UsageError(f"{flag}: normal:MEAN,SD,LO,HI needs SD >= 0 and 1 <= LO <= HI")
        vals = [min(hi, max(lo, round(rng.gauss(mean, sd)))) for _ in range(SAMPLES)]
    elif kind == "list":
        vals = _ints(rest, flag, None)
    else:
        vals = _read(rest, flag)
    return Lengths(text, kind, _check(vals, flag))


def _read(path: str, flag: str) -> list[int]:
    from accounting.runtime.errors import shorten
    try:
        with open(path, encoding="utf-8") as f:
            lines = [ln.split("#")[0].strip() for ln in f]
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{flag}: cannot read {shorten(path)} ({getattr(e, 'strerror', e)}); "
                         f"give a text file of one length a line") from None
    try:
        return [int(x) for x in lines if x]
    except ValueError:
        raise UsageError(f"{flag}: {shorten(path)} holds a line that is not an integer "
                         f"length") from None
