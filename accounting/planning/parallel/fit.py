"""Whether a layout's plan fits a GPU: the largest micro-batch whose step peaks within the
usable memory on every stage shown, and the shortfall or headroom at the chosen one."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.planning.fit import Budget
from accounting.planning.gpus import Hardware
from accounting.planning.parallel.layout import Layout


@dataclass(frozen=True)
class Fit:
    budget: Budget
    largest: int  # the largest micro-batch (dividing the per-rank batch) that fits; 0: none
    shortfall: int  # bytes missing at the chosen micro-batch (0 if it fits)
    headroom: int  # bytes left at the chosen micro-batch (0 if it does not fit)


def divisors_of(n: int) -> list[int]:
    """Every divisor of n, ascending (trial division to √n; n up to 10^12)."""
    small, large, i = [], [], 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def fit(plans, layout: Layout, hardware: Hardware | None, margin: Fraction,
         activations_at=None) -> Fit | None:
    if hardware is None or not hardware.memory_bytes:
        return None
    budget = Budget(hardware.memory_bytes, margin)
    per_rank = layout.global_batch // layout.dp
    largest = 0
    if per_rank <= 10**12:
        for b in reversed(divisors_of(per_rank)):
            if all(s.memory_at(b, per_rank, layout,
                               activations_at(s, b) if activations_at else None)
                   <= budget.usable for s in plans):
                largest = b
                break
    need = _need(plans, layout)
    return Fit(budget, largest, max(0, need - budget.usable), max(0, budget.usable - need))


def _need(plans, layout: Layout) -> int:
    """The worst GPU's peak at the layout's micro-batch."""
    return max(s.peak(layout.micro_batch) for s in plans)


def shortfall(plans, layout: Layout, hardware: Hardware | None, margin: Fraction) -> int:
    """Fit.shortfall without the search for the largest micro-batch (0 where no memory is
    known, as fit() gives no Fit then)."""
    if hardware is None or not hardware.memory_bytes:
        return 0
    return max(0, _need(plans, layout) - Budget(hardware.memory_bytes, margin).usable)
