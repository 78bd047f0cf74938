"""What fits in a memory budget: the largest batch at a context length, and the longest
context at a batch size. Exact integer arithmetic on the memory model's byte counts.

What must fit is the step's peak (model scope: the larger of two moments, each a·B + b at
a fixed T) or the course's sum (course scope, a·B + b), so the largest batch is the least
floor((usable − b) / a) over the pieces. In T they have T² terms (the attention scores), so
the longest context is found by binary search on the exact integer bytes (they only grow
with T).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.runtime.errors import UsageError
from accounting.planning.memory import MemoryModel


@dataclass(frozen=True)
class Budget:
    capacity: int  # bytes of GPU memory
    margin: Fraction  # share of the capacity reserved (CUDA context, fragmentation, temporaries)
    held: int = 0  # bytes outside the model's ledger (a vision tower's, planning/vision_train.py)

    def __post_init__(self) -> None:
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity <= 0:
            raise UsageError(f"GPU memory must be a positive number of bytes, got {self.capacity!r}")
        if not 0 <= self.margin < 1:
            raise UsageError(f"--margin must be in [0, 1) (a share of the memory), got {self.margin}")

    @property
    def reserved(self) -> int:
        """Bytes held back: the margin's share of the capacity, rounded up to a byte."""
        return -(-self.capacity * self.margin.numerator // self.margin.denominator)

    @property
    def usable(self) -> int:
        return self.capacity - self.reserved - self.held


@dataclass(frozen=True)
class BatchFit:
    seq: int
    budget: Budget
    per_sequence: int  # a
    fixed: int  # b
    largest: int  # 0: not even batch 1 fits
    # the exact bytes at `largest` where they are not on the line a·B + b (a trained Pixtral
    # tower's block mask, S² at S = B·Σ N: planning/vision_train.py); None: on the line
    exact: int | None = None

    @property
    def fits(self) -> bool:
        return self.largest > 0

    @property
    def bytes_at_largest(self) -> int | None:
        if not self.fits:
            return None
        return self.exact if self.exact is not None else \
            self.per_sequence * self.largest + self.fixed

    @property
    def shortfall(self) -> int:
        """Bytes missing for batch 1 (0 when it fits)."""
        return max(self.per_sequence + self.fixed - self.budget.usable, 0)


def largest_batch(model: MemoryModel, seq: int, budget: Budget) -> BatchFit:
    """The largest batch whose fit_bytes (the step's peak, or the course's sum) fits: each
    piece a·B + b of the peak bounds B by floor((usable − b) / a)."""
    lines = model.fit_lines(seq)
    # a piece that does not grow with B (a ≤ 0) bounds nothing beyond batch 1
    bounds = [((budget.usable - b) // a if budget.usable - b >= a else 0) if a > 0 else 0
              for a, b in lines if a > 0 or a + b > budget.usable]
    largest = min(bounds, default=0)
    if largest and model.fit_bytes(largest, seq) > budget.usable:
        # a piece that grows faster than linearly in B (Liger's chunk rows, --loss
        # fused-linear: a power of two of B·T/⌈V/H⌉) exceeds its line at B = 1: the largest
        # batch whose exact bytes fit, by bisection (they only grow with B)
        lo, hi = 0, largest
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if model.fit_bytes(mid, seq) <= budget.usable else (lo, mid)
        largest = lo
    a, b = max(lines, key=lambda ab: ab[0] * max(largest, 1) + ab[1])  # the binding piece
    exact = model.fit_bytes(largest, seq) if largest and model.vision_forward is not None \
        else None
    return BatchFit(seq, budget, a, b, largest, exact)


@dataclass(frozen=True)
class ContextFit:
    batch: int
    budget: Budget
    longest: int  # 0: not even T = 1 fits
    bytes_at_longest: int | None
    bytes_at_next: int  # at longest + 1: over the budget (or, at the table's limit, what it would need)
    table_limit: int | None = None  # a learned position table caps T here (and it fits)

    @property
    def fits(self) -> bool:
        return self.longest > 0

    @property
    def shortfall(self) -> int:
        return 0 if self.fits else self.bytes_at_next - self.budget.usable


def longest_context(model: MemoryModel, batch: int, budget: Budget) -> ContextFit:
    usable, need = budget.usable, model.fit_bytes
    if need(batch, 1) > usable:
        return ContextFit(batch, budget, 0, None, need(batch, 1))
    c = model.config
    if c.positions == "learned" and need(batch, c.context_length) <= usable:
        limit = c.context_length  # the model cannot run longer sequences
        return ContextFit(batch, budget, limit, need(batch, limit), need(batch, limit + 1),
                          table_limit=limit)
    lo, hi = 1, 2  # need(lo) fits; find hi that does not
    while need(batch, hi) <= usable:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # invariant: lo fits, hi does not
        mid = (lo + hi) // 2
        if need(batch, mid) <= usable:
            lo = mid
        else:
            hi = mid
    return ContextFit(batch, budget, lo, need(batch, lo), need(batch, lo + 1))
