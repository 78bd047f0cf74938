"""Evaluate the ledger for one workload: rows, totals, shares and closed forms.

Everything here reduces the records of accounting/ledger/ledger.py (built from the spec by
accounting/ledger/builder/); nothing restates a formula. Counts are ints, shares exact Fractions.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

from accounting.analysis import arguments as A
from accounting.ledger import records as R
from accounting.architecture.config import ModelConfig
from accounting.runtime import names
from accounting.runtime.errors import UsageError
from accounting.ledger.ledger import Ledger, check_seq, coalesce, ledger
from accounting.ledger.records import EXECUTED, FORWARD, PHASES, USEFUL
from accounting.ledger.symbols import Expr
from accounting.units import BYTES_PER_ELEMENT

MAX_WORKLOAD = 10**15  # far past any real run; keeps every count a quick exact int


@dataclass(frozen=True)
class MatmulRow:
    record: R.Matmul
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
    record: R.Elementwise
    count: int
    flops_each: int

    @property
    def flops(self) -> int:
        return self.count * self.flops_each


@dataclass(frozen=True)
class ParamRow:
    record: R.Param
    count: int
    numel_each: int

    @property
    def numel(self) -> int:
        return self.count * self.numel_each


def check_workload(seq: int, batch: int, config: ModelConfig | None = None) -> None:
    for flag, value in ((names.arg("seq"), seq), (names.arg("batch"), batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise UsageError(f"{flag} must be a positive integer, got {value!r}")
        if value > MAX_WORKLOAD:
            raise UsageError(f"{flag} must be at most 10^15, got {value:.3e}")
    if config is not None:
        check_seq(config, seq)


@dataclass(frozen=True)
class Analysis:
    config: ModelConfig
    seq: int
    batch: int = 1
    phase: str = FORWARD
    counting: str = EXECUTED
    values: dict = field(init=False, repr=False, compare=False)
    ledger: Ledger = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", A.config(self.config))  # a preset name: looked up
        for f in ("seq", "batch"):  # numpy's integers as Python ints (exact arithmetic)
            value = getattr(self, f)
            if hasattr(value, "__index__") and not isinstance(value, (bool, int)):
                object.__setattr__(self, f, operator.index(value))
        check_workload(self.seq, self.batch, self.config)
        if self.phase not in PHASES:
            raise UsageError(f"unknown pass {self.phase!r}; choose forward, backward or train")
        if self.counting not in (EXECUTED, USEFUL):
            raise UsageError(f"unknown count {self.counting!r}; choose executed or useful")
        lg = ledger(self.config)
        object.__setattr__(self, "ledger", lg)
        object.__setattr__(self, "values", lg.values(self.seq, self.batch))

    # ---- rows -------------------------------------------------------------------------
    @cached_property
    def matmul_rows(self) -> tuple[MatmulRow, ...]:
        v = self.values
        return tuple(MatmulRow(r, r.count(v), r.flops(v, EXECUTED), r.flops(v, USEFUL))
                     for r in self.ledger.matmuls(self.phase))

    @cached_property
    def elementwise_rows(self) -> tuple[ElementwiseRow, ...]:
        """Non-matmul FLOPs of the forward pass, one row per operation (the same operation
        in sibling modules merged); empty for a backward-only analysis."""
        if FORWARD not in PHASES[self.phase]:
            return ()
        v = self.values
        return tuple(ElementwiseRow(r, r.count(v), r.flops(v)) for r in coalesce(self.ledger.elementwise))

    @cached_property
    def param_rows(self) -> tuple[ParamRow, ...]:
        v = self.values
        return tuple(ParamRow(r, r.count(v), r.numel(v)) for r in self.ledger.params)

    # ---- arguments --------------------------------------------------------------------
    def _counting(self, counting: str | None) -> str:
        """A method's counting: 'executed', 'useful', or None (this analysis' own)."""
        return A.counting(counting, f"this analysis' own, {self.counting!r}") or self.counting

    def _part(self, phase: str | None) -> tuple[str, ...]:
        """The record phases a method's `phase` selects within this analysis' pass."""
        if A.phase(phase, "the whole pass") is None:
            return PHASES[self.phase]
        if not set(PHASES[phase]) <= set(PHASES[self.phase]):
            raise UsageError(f"phase {phase!r} is not part of this analysis' pass "
                             f"({self.phase!r}); choose {', '.join(PHASES[self.phase])} or None, "
                             f"or analyze(..., phase='train') for both passes")
        return PHASES[phase]

    # ---- totals -----------------------------------------------------------------------
    def matmul_flops(self, counting: str | None = None, phase: str | None = None) -> int:
        """Matmul FLOPs of this pass, or of one of its parts (phase 'forward' or 'backward'
        of a 'train' analysis); counting 'executed' or 'useful' (None: the analysis' own)."""
        counting, part = self._counting(counting), self._part(phase)
        return sum(r.flops_for(counting) for r in self.matmul_rows if r.record.phase in part)

    @property
    def elementwise_flops(self) -> int:
        return sum(r.flops for r in self.elementwise_rows)

    @property
    def components(self) -> tuple[str, ...]:
        """The matmul components this model's tables list (R.components_of)."""
        return R.components_of({r.record.component for r in self.matmul_rows})

    def component_flops(self, counting: str | None = None) -> dict[str, int]:
        counting = self._counting(counting)
        out = {c: 0 for c in self.components}
        for r in self.matmul_rows:
            out[r.record.component] += r.flops_for(counting)
        return out

    def component_shares(self, counting: str | None = None) -> dict[str, Fraction]:
        flops = self.component_flops(counting)
        total = sum(flops.values())
        return {c: Fraction(f, total) for c, f in flops.items()}

    def component_flops_per_layer(self, counting: str | None = None) -> dict[str, int]:
        """One block's matmul FLOPs by component (the LM head is not in a block)."""
        counting = self._counting(counting)
        out = {c: 0 for c in R.components_of(self.components, R.BLOCK_COMPONENTS)}
        for r in self.matmul_rows:
            if r.record.per_layer:
                out[r.record.component] += (r.flops_each if counting == EXECUTED else r.useful_flops_each)
        return out

    def elementwise_by_component(self) -> dict[str, int]:
        out = {c: 0 for c in self.ledger.elementwise_components}
        for r in self.elementwise_rows:
            out[r.record.component] += r.flops
        return out

    # ---- parameters and memory --------------------------------------------------------
    @property
    def param_count(self) -> int:
        return sum(r.numel for r in self.param_rows)

    def params_by_component(self) -> dict[str, int]:
        out = {c: 0 for c in self.ledger.param_components}
        for r in self.param_rows:
            out[r.record.component] += r.numel
        return out

    @property
    def active_param_count(self) -> int:
        """Parameters one token runs through: all of them, less the E − k routed experts it
        skips in each MoE layer (Mixtral's "12.9B active" of 46.7B; the embedding table and
        LM head included, as there)."""
        c = self.config
        if c.num_experts is None:
            return self.param_count
        E, k = c.num_experts, c.experts_per_token
        skipped = sum(r.numel // E * (E - k) for r in self.param_rows if r.record.routed_expert)
        return self.param_count - skipped

    def flops_per_token(self, counting: str | None = None) -> Fraction:
        """Matmul FLOPs of this pass per token (B·T tokens), exact."""
        return Fraction(self.matmul_flops(self._counting(counting)), self.batch * self.seq)

    def param_memory_bytes(self) -> dict[str, int]:
        return {dtype: self.param_count * b for dtype, b in BYTES_PER_ELEMENT.items()}

    # ---- closed forms -----------------------------------------------------------------
    def matmul_expr(self, counting: str | None = None, component: str | None = None,
                    phase: str | None = None) -> Expr:
        """Matmul FLOPs of this pass (or of `phase`: any pass, symbolic) as an expression in
        every symbol; of one component (None: all)."""
        counting, component = self._counting(counting), A.component(component)
        phase = A.phase(phase, "this analysis' pass") or self.phase
        return sum((r.expr(counting) for r in self.ledger.matmuls(phase)
                    if component is None or r.component == component), Expr())

    def matmul_polynomial(self, counting: str | None = None, component: str | None = None,
                          phase: str | None = None) -> Expr:
        """Matmul FLOPs of this pass as a polynomial in B and T."""
        return self.matmul_expr(counting, component, phase).partial(self.values)

    def elementwise_polynomial(self) -> Expr:
        if not self.elementwise_rows:
            return Expr()
        return sum((r.expr() for r in self.ledger.elementwise), Expr()).partial(self.values)

    def ratio_to_context_length(self, counting: str | None = None) -> Fraction:
        """Matmul FLOPs at T = seq over those at T = context_length (same batch)."""
        e = self.matmul_expr(self._counting(counting))  # each T on its own branch (a sliding window's P_W)
        return Fraction(e.evaluate(self.values),
                        e.evaluate(self.ledger.values(self.config.context_length, self.batch)))

    def crossover(self, counting: str | None = None) -> Crossover | None:
        """Where the attention core's forward FLOPs overtake the feed-forward's; None where
        they never do on this closed form's branch (no T² term: every layer local, T ≥ W)
        or it is not a polynomial in B and T alone (an expert capacity; chunked layers
        beyond one chunk, where P_C depends on T mod C)."""
        counting = self._counting(counting)
        w, chunk = self.config.sliding_window, self.config.attention_chunk
        # With a window, P_W is W·T − W(W−1)/2 for T ≥ W and T(T+1)/2 below: solve on each
        # branch, keep a root inside its own branch.
        branches = ((1, lambda x: x <= w), (w, lambda x: x >= w)) if w else ((self.seq, None),)
        if "P_C" in self.matmul_expr(counting, R.ATTN_CORE, FORWARD).symbols():
            # chunked layers (Llama 4): P_C = T(T+1)/2 up to C, beyond it a form per T mod C
            if self.seq > chunk or w:
                return None
            branches = ((self.seq, lambda x: x <= chunk),)
        for seq, inside in branches:
            v = {**self.values, "T": seq}
            diff = (self.matmul_expr(counting, R.ATTN_CORE, FORWARD)
                    - self.matmul_expr(counting, R.FFN, FORWARD)).partial(v)
            # diff = B·(a·T² + b·T + c): zero at its positive root, positive beyond it.
            if not diff.symbols() <= {"B", "T"} or \
                    not set(diff.terms) <= {("B", "T", "T"), ("B", "T"), ("B",)}:
                return None
            a, b = Fraction(diff.coefficient(B=1, T=2)), Fraction(diff.coefficient(B=1, T=1))
            c = Fraction(diff.coefficient(B=1))  # a window's −W(W−1)/2 on its upper branch
            if a <= 0:
                continue
            equal_at = _positive_root(a, b, c)
            if equal_at is None or not (inside is None or inside(equal_at)):
                continue
            first = max(int(equal_at // 1), 1)
            while a * first * first + b * first + c <= 0:  # exact: the first T past the root
                first += 1
            return Crossover(equal_at=equal_at, first_seq=first)
        return None


def _positive_root(a: Fraction, b: Fraction, c: Fraction) -> Fraction | None:
    """The larger root of a·T² + b·T + c (a > 0): exact when c = 0, else to within 1e-20
    (an irrational root, from an integer square root)."""
    if c == 0:
        return -b / a
    d = b * b - 4 * a * c
    if d < 0:
        return None
    scale = 10**20
    root = Fraction(math.isqrt(d.numerator * d.denominator * scale * scale), d.denominator * scale)
    return (-b + root) / (2 * a)


@dataclass(frozen=True)
class Crossover:
    equal_at: Fraction  # T where attention core = feed-forward (may be non-integer; an
    #                     irrational root, with a window's constant term, to within 1e-20)
    first_seq: int  # smallest integer T with attention core > feed-forward


def analyze(config: ModelConfig | str, seq: int | None = None, batch: int = 1,
            phase: str = FORWARD, counting: str = EXECUTED) -> Analysis:
    """The full accounting of one workload: config a ModelConfig or a preset name, seq
    tokens per sequence (None: the config's context_length), batch sequences, phase
    'forward', 'backward' or 'train', counting 'executed' or 'useful' (the attention core's
    full T×T, or its T(T+1)/2 causal pairs, in totals and shares)."""
    config = A.config(config)
    seq = A.count(seq, "seq", "the config's context_length")
    batch = A.count(batch, "batch")
    phase, counting = A.phase(phase), A.counting(counting)
    return Analysis(config, config.context_length if seq is None else seq, batch, phase, counting)
