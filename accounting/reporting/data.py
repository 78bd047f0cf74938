"""The report's numbers, assembled from the library API; nothing here restates a formula.

Every count comes from accounting.analyze (ints, exact Fractions for shares) and every
cross-check from accounting.crosscheck.cross_check. Rendering lives in markdown.py and
figures.py; this module only decides *which* workloads the report covers.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from accounting.ledger import records as R
from accounting.analysis.workload import Analysis, Crossover, analyze
from accounting.architecture.presets import PRESETS
from accounting.architecture.config import ModelConfig
from accounting.literature.compare import Comparison, compare

# The report's models are the presets: Transformers without recurrent layers. Their tables
# and figures show the components these have; a hybrid model's recurrent mixing (issue 31)
# is in the CLI's and the plan's tables, not drawn here.
COMPONENTS = tuple(c for c in R.COMPONENTS if c != R.RECURRENT)

# GPT-2's four shapes on the CS336 architecture: small, medium, large, xl
MODELS: tuple[ModelConfig, ...] = tuple(PRESETS[n] for n in ("gpt2-small", "gpt2-medium",
                                                             "gpt2-large", "gpt2-xl"))
# OpenAI's GPT-2 as released, the same four sizes (real[i] is the size of MODELS[i])
REAL_MODELS: tuple[ModelConfig, ...] = tuple(
    PRESETS[f"openai-community/{n}"] for n in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"))
REFERENCE_SEQ = 1024  # every preset's context_length: the question's T
LONG_MODEL = "gpt2-xl"
LONG_SEQ = 16384  # CS336 problem (e): GPT-2 XL at 16,384 tokens
SWEEP_STEP = 128  # sweep spacing in tokens: 121 points, smooth curves on a log2 axis


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    out, p = [], 1
    while p <= hi:
        if p >= lo:
            out.append(p)
        p *= 2
    return tuple(out)


def sweep_seqs(lo: int = REFERENCE_SEQ, hi: int = LONG_SEQ, step: int = SWEEP_STEP) -> tuple[int, ...]:
    """Every `step` tokens from lo to hi, with every power of two in between included."""
    return tuple(sorted(set(range(lo, hi + 1, step)) | set(powers_of_two(lo, hi)) | {hi}))


CHECK_SEQS = powers_of_two(REFERENCE_SEQ, LONG_SEQ)  # 1024, 2048, ..., 16384


def real_check_seqs(config: ModelConfig, seqs: tuple[int, ...] = CHECK_SEQS) -> tuple[int, ...]:
    """The cross-check contexts a model allows: a learned position table ends at its length."""
    if config.positions != "learned":
        return seqs
    return tuple(s for s in seqs if s <= config.context_length)


@dataclass(frozen=True)
class SweepSeries:
    """One model's forward matmul FLOPs (executed count, B = 1) over the context sweep."""

    config: ModelConfig
    seqs: tuple[int, ...]
    flops: dict[str, tuple[int, ...]]  # component -> FLOPs at each seq
    totals: tuple[int, ...]
    crossover: Crossover  # executed count
    crossover_useful: Crossover  # only the T(T+1)/2 causal pairs counted
    crossover_share: Fraction  # attention core's (= feed-forward's) share at crossover.equal_at

    def shares(self, component: str) -> tuple[Fraction, ...]:
        return tuple(Fraction(f, t) for f, t in zip(self.flops[component], self.totals))

    def at(self, seq: int) -> int:
        return self.seqs.index(seq)


def sweep_series(config: ModelConfig, seqs: tuple[int, ...]) -> SweepSeries:
    runs = [analyze(config, seq) for seq in seqs]
    flops = {c: tuple(a.component_flops()[c] for a in runs) for c in COMPONENTS}
    a = runs[0]
    x = a.crossover(R.EXECUTED)
    # The closed forms evaluated at the (possibly fractional) crossover length, B = 1.
    share = (Fraction(a.matmul_polynomial(component=R.ATTN_CORE).at(B=1, T=x.equal_at))
             / a.matmul_polynomial().at(B=1, T=x.equal_at))
    return SweepSeries(config, seqs, flops, tuple(a.matmul_flops() for a in runs),
                       x, a.crossover(R.USEFUL), share)


@dataclass(frozen=True)
class FormulaSweep:
    """Each literature formula's training FLOPs over the exact training matmul FLOPs
    (executed count, B = 1) across the context sweep, for one model."""

    config: ModelConfig
    seqs: tuple[int, ...]
    names: dict[str, str]  # formula key -> display name, in FORMULAS order
    training: dict[str, tuple[int, ...]]  # formula key -> training FLOPs at each seq
    exact: tuple[int, ...]  # exact training matmul FLOPs (executed) at each seq
    exact_useful: tuple[int, ...]  # ... causal pairs only

    def ratios(self, key: str) -> tuple[Fraction, ...]:
        return tuple(Fraction(f, e) for f, e in zip(self.training[key], self.exact))

    def useful_ratios(self) -> tuple[Fraction, ...]:
        return tuple(Fraction(u, e) for u, e in zip(self.exact_useful, self.exact))


def formula_sweep(config: ModelConfig, seqs: tuple[int, ...]) -> FormulaSweep:
    runs = [compare(config, seq) for seq in seqs]
    keys = [e.key for e in runs[0].estimates]
    return FormulaSweep(config, seqs, {e.key: e.name for e in runs[0].estimates},
                        {k: tuple(r.estimate(k).training for r in runs) for k in keys},
                        tuple(r.exact.training for r in runs),
                        tuple(r.exact.training_useful for r in runs))


@dataclass(frozen=True)
class Check:
    """One cross-check: the analytic count against the counters run on the real model."""

    config: ModelConfig
    seq: int
    result: object  # accounting.crosscheck's CrossCheck (crosscheck/result.py)


@dataclass(frozen=True)
class ReportData:
    models: tuple[ModelConfig, ...]
    reference: dict[str, Analysis]  # model name -> forward pass at REFERENCE_SEQ
    long: Analysis  # LONG_MODEL at LONG_SEQ
    sweep: dict[str, SweepSeries]  # model name -> sweep
    check_seqs: tuple[int, ...]  # the course presets' cross-check (and share-table) contexts
    checks: tuple[Check, ...]  # empty when the cross-check was skipped
    verified: bool
    real: tuple[ModelConfig, ...] = ()  # OpenAI's GPT-2, the same sizes as `models`
    real_reference: dict = field(default_factory=dict)  # name -> forward at REFERENCE_SEQ
    literature: dict = field(default_factory=dict)  # name -> Comparison at REFERENCE_SEQ
    formula_sweeps: dict = field(default_factory=dict)  # course model name -> FormulaSweep

    @property
    def agrees(self) -> bool:
        return all(c.result.agrees for c in self.checks)


# A step runner: step(label, work, outcome, seconds=None) runs work(), reports progress
# (with `seconds` as the step's time when the work ran elsewhere), returns its value.
Step = Callable[[str, Callable[[], object], Callable[[object], str]], object]


def _quiet(label, work, outcome, seconds=None):
    return work()


def step_count(verify: bool, models: tuple[ModelConfig, ...] = MODELS,
               check_seqs: tuple[int, ...] = CHECK_SEQS,
               real: tuple[ModelConfig, ...] = REAL_MODELS) -> int:
    """How many steps assemble() reports (for the [i/N] counter)."""
    checks = sum(len(real_check_seqs(c, check_seqs)) for c in models + real)
    return 2 * len(models) + 1 + (checks if verify else 0)


def check_workloads(models: tuple[ModelConfig, ...] = MODELS,
                    check_seqs: tuple[int, ...] = CHECK_SEQS,
                    real: tuple[ModelConfig, ...] = REAL_MODELS) -> list[tuple[ModelConfig, int]]:
    """Every (model, context) the report cross-checks, in the report's order."""
    return [(c, seq) for c in models + real for seq in real_check_seqs(c, check_seqs)]


def assemble(verify: bool, step: Step = _quiet, models: tuple[ModelConfig, ...] = MODELS,
             seqs: tuple[int, ...] | None = None,
             check_seqs: tuple[int, ...] = CHECK_SEQS,
             real: tuple[ModelConfig, ...] = REAL_MODELS, checks: bool = True) -> ReportData:
    """All the numbers of the report; `verify` runs the cross-check (torch, fvcore).
    checks=False leaves the cross-checks to add_checks() (the report started them in
    worker processes, reporting/checks.py, and draws its figures meanwhile)."""
    seqs = sweep_seqs() if seqs is None else seqs
    reference = {c.name: analyze(c, REFERENCE_SEQ) for c in models}
    long = analyze(PRESETS[LONG_MODEL], LONG_SEQ)
    sweep, formula_sweeps = {}, {}
    for c in models:
        sweep[c.name] = step(f"sweep {c.name}: {len(seqs)} contexts {seqs[0]:,}..{seqs[-1]:,}",
                             lambda c=c: sweep_series(c, seqs), lambda s: "done")
    for c in models:
        formula_sweeps[c.name] = step(f"formulas {c.name}: {len(seqs)} contexts",
                                      lambda c=c: formula_sweep(c, seqs), lambda s: "done")
    real_reference = {c.name: analyze(c, REFERENCE_SEQ) for c in real}
    literature: dict[str, Comparison] = step(
        f"formulas at T = {REFERENCE_SEQ:,}: {len(models) + len(real)} models",
        lambda: {c.name: compare(c, REFERENCE_SEQ) for c in models + real}, lambda s: "done")
    d = ReportData(models, reference, long, sweep, check_seqs, (), verify,
                   real, real_reference, literature, formula_sweeps)
    if verify and checks:
        from accounting.reporting.checks import PendingChecks
        workloads = check_workloads(models, check_seqs, real)
        with PendingChecks(workloads) as pending:
            return add_checks(d, pending, step, workloads)
    return d


def add_checks(d: ReportData, pending, step: Step = _quiet,
               workloads: list[tuple[ModelConfig, int]] | None = None) -> ReportData:
    """d with its cross-checks from `pending` (reporting/checks.PendingChecks), one progress
    step each as they finish, each with its own run time; kept in the report's order."""
    from dataclasses import replace
    workloads = check_workloads(d.models, d.check_seqs, d.real) if workloads is None else workloads
    got = {}
    for (c, seq), result, seconds in pending.completed():
        got[(c, seq)] = step(f"cross-check {c.name} T={seq}", lambda r=result: r,
                             lambda r: "agrees" if r.agrees else "DISAGREES",
                             seconds=seconds)
    return replace(d, checks=tuple(Check(c, seq, got[(c, seq)]) for c, seq in workloads))


SWEEP_CSV_COLUMNS = ("model", "seq", "component", "flops", "total_flops", "share")


def sweep_csv(d: ReportData) -> str:
    """The numbers behind the sweep figures: exact FLOPs, shares rounded to 6 decimals."""
    from accounting.units import decimal
    lines = [",".join(SWEEP_CSV_COLUMNS)]
    for c in d.models:
        s = d.sweep[c.name]
        for k in COMPONENTS:
            shares = s.shares(k)
            for i, seq in enumerate(s.seqs):
                lines.append(f"{c.name},{seq},{k},{s.flops[k][i]},{s.totals[i]},{decimal(shares[i], 6)}")
    return "\n".join(lines) + "\n"


FORMULA_CSV_COLUMNS = ("model", "seq", "formula", "training_flops", "exact_training_flops", "ratio")


def formula_csv(d: ReportData) -> str:
    """The numbers behind the formula-error figure: exact FLOPs, ratios to 6 decimals."""
    from accounting.units import decimal
    lines = [",".join(FORMULA_CSV_COLUMNS)]
    for c in d.models:
        s = d.formula_sweeps[c.name]
        for k in s.training:
            for i, seq in enumerate(s.seqs):
                lines.append(f"{c.name},{seq},{k},{s.training[k][i]},{s.exact[i]},"
                             f"{decimal(Fraction(s.training[k][i], s.exact[i]), 6)}")
    return "\n".join(lines) + "\n"
