"""Evaluate the records for one workload: rows, totals, shares and closed forms.

Everything here is derived from the records in matmuls.py, elementwise.py and params.py;
nothing restates a formula. All counts are ints, shares are exact Fractions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

from accounting import elementwise, matmuls, params
from accounting.config import ModelConfig
from accounting.errors import UsageError
from accounting.matmuls import EXECUTED, FORWARD, PHASES, USEFUL
from accounting.symbols import Poly, sizes
from accounting.units import FLOPS_PER_MAC


@dataclass(frozen=True)
class MatmulRow:
    record: matmuls.Matmul
    count: int  # instances in the pass: L for a per-layer matmul, else 1
    flops_each: int  # executed FLOPs of one instance
    useful_flops_each: int

    @property
    def flops(self) -> int:
        return self.count * self.flops_each

    @property
    def useful_flops(self) -> int:
        return self.count * self.useful_flops_each

    def flops_for(self, counting: str) -> int:
        return self.flops if counting == EXECUTED else self.useful_flops


@dataclass(frozen=True)
class ElementwiseRow:
    record: elementwise.Elementwise
    count: int
    flops_each: int

    @property
    def flops(self) -> int:
        return self.count * self.flops_each


@dataclass(frozen=True)
class ParamRow:
    record: params.Param
    count: int
    numel_each: int

    @property
    def numel(self) -> int:
        return self.count * self.numel_each


def check_workload(seq: int, batch: int) -> None:
    for flag, value in (("--ctx", seq), ("--batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise UsageError(f"{flag} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class Analysis:
    config: ModelConfig
    seq: int
    batch: int = 1
    phase: str = "forward"
    counting: str = EXECUTED
    values: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_workload(self.seq, self.batch)
        if self.phase not in PHASES:
            raise UsageError(f"unknown pass {self.phase!r}; choose forward, backward or train")
        if self.counting not in (EXECUTED, USEFUL):
            raise UsageError(f"unknown count {self.counting!r}; choose executed or useful")
        object.__setattr__(self, "values", sizes(self.config, self.seq, self.batch))

    # ---- rows -------------------------------------------------------------------------
    @cached_property
    def matmul_rows(self) -> tuple[MatmulRow, ...]:
        v = self.values
        return tuple(MatmulRow(r, r.count(v), r.flops(v, EXECUTED), r.flops(v, USEFUL))
                     for r in matmuls.matmuls(self.phase))

    @cached_property
    def elementwise_rows(self) -> tuple[ElementwiseRow, ...]:
        """Non-matmul FLOPs of the forward pass (empty for a backward-only analysis)."""
        if FORWARD not in PHASES[self.phase]:
            return ()
        v = self.values
        return tuple(ElementwiseRow(r, r.count(v), r.flops(v)) for r in elementwise.FORWARD_ELEMENTWISE)

    @cached_property
    def param_rows(self) -> tuple[ParamRow, ...]:
        v = self.values
        return tuple(ParamRow(r, r.count(v), r.numel(v)) for r in params.PARAMS)

    # ---- totals -----------------------------------------------------------------------
    def matmul_flops(self, counting: str | None = None, phase: str | None = None) -> int:
        counting = counting or self.counting
        return sum(r.flops_for(counting) for r in self.matmul_rows
                   if phase is None or r.record.phase == phase)

    @property
    def elementwise_flops(self) -> int:
        return sum(r.flops for r in self.elementwise_rows)

    def component_flops(self, counting: str | None = None) -> dict[str, int]:
        counting = counting or self.counting
        out = {c: 0 for c in matmuls.COMPONENTS}
        for r in self.matmul_rows:
            out[r.record.component] += r.flops_for(counting)
        return out

    def component_shares(self, counting: str | None = None) -> dict[str, Fraction]:
        flops = self.component_flops(counting)
        total = sum(flops.values())
        return {c: Fraction(f, total) for c, f in flops.items()}

    def component_flops_per_layer(self, counting: str | None = None) -> dict[str, int]:
        """One block's matmul FLOPs by component (the LM head is not in a block)."""
        counting = counting or self.counting
        out = {c: 0 for c in matmuls.COMPONENTS if c != matmuls.LM_HEAD}
        for r in self.matmul_rows:
            if r.record.per_layer:
                out[r.record.component] += (r.flops_each if counting == EXECUTED else r.useful_flops_each)
        return out

    def elementwise_by_component(self) -> dict[str, int]:
        out = {c: 0 for c in elementwise.COMPONENTS}
        for r in self.elementwise_rows:
            out[r.record.component] += r.flops
        return out

    # ---- parameters and memory --------------------------------------------------------
    @property
    def param_count(self) -> int:
        return sum(r.numel for r in self.param_rows)

    def params_by_component(self) -> dict[str, int]:
        out = {c: 0 for c in params.COMPONENTS}
        for r in self.param_rows:
            out[r.record.component] += r.numel
        return out

    def param_memory_bytes(self) -> dict[str, int]:
        return params.memory_bytes(self.param_count)

    # ---- closed forms -----------------------------------------------------------------
    def matmul_polynomial(self, counting: str | None = None, component: str | None = None,
                          phase: str | None = None) -> Poly:
        """Matmul FLOPs of this pass as a polynomial in B and T, from the records."""
        counting = counting or self.counting
        total = Poly()
        for r in matmuls.matmuls(phase or self.phase):
            if component is not None and r.component != component:
                continue
            factors = r.factors if counting == EXECUTED else r.useful_factors()
            total = total + Poly.of_factors(FLOPS_PER_MAC * r.count(self.values), factors, self.values)
        return total

    def elementwise_polynomial(self) -> Poly:
        total = Poly()
        for r in self.elementwise_rows:
            total = total + Poly.of_factors(r.record.per_element * r.record.copies * r.count,
                                            r.record.elements, self.values)
        return total

    def ratio_to_context_length(self, counting: str | None = None) -> Fraction:
        """Matmul FLOPs at T = seq over those at T = context_length (same batch)."""
        poly = self.matmul_polynomial(counting)
        return Fraction(poly.evaluate(self.batch, self.seq),
                        poly.evaluate(self.batch, self.config.context_length))

    def crossover(self, counting: str | None = None) -> "Crossover":
        """Where the attention core's forward FLOPs overtake the feed-forward's."""
        diff = (self.matmul_polynomial(counting, matmuls.ATTN_CORE, "forward")
                - self.matmul_polynomial(counting, matmuls.FFN, "forward"))
        # diff = B·(a·T² + b·T): zero at T = -b/a, positive beyond it (a > 0).
        a, b = diff.coefficient(1, 2), diff.coefficient(1, 1)
        assert a > 0 and set(diff.terms) <= {(1, 2), (1, 1)}, diff
        equal_at = -b / a
        first = max(int(equal_at // 1) + 1, 1)
        return Crossover(equal_at=equal_at, first_seq=first)


@dataclass(frozen=True)
class Crossover:
    equal_at: Fraction  # T where attention core = feed-forward (may be non-integer)
    first_seq: int  # smallest integer T with attention core > feed-forward


def analyze(config: ModelConfig, seq: int | None = None, batch: int = 1,
            phase: str = "forward", counting: str = EXECUTED) -> Analysis:
    """The full accounting of one workload; seq defaults to the config's context_length."""
    return Analysis(config, config.context_length if seq is None else seq, batch, phase, counting)
