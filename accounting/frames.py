"""pandas views for notebooks: the per-record ledger and a sweep over configs × lengths.

pandas is imported here only, so `import accounting` stays light.
"""
from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

import pandas as pd

from accounting.analysis import arguments as A
from accounting.ledger import records as R
from accounting.analysis.workload import analyze
from accounting.ledger.ledger import ledger
from accounting.architecture.config import ModelConfig
from accounting.present.export import ledger_rows


def _config(c: ModelConfig | str) -> ModelConfig:
    return A.config(c)  # a preset name looked up; anything else a TypeError naming it


def matmul_frame(config: ModelConfig | str, seq: int | None = None, batch: int = 1,
                 phase: str = R.FORWARD, include_non_matmul: bool = False) -> pd.DataFrame:
    """One row per matmul (and, optionally, per non-matmul op) with exact integer FLOPs.

    `share` is the row's fraction of the pass's matmul FLOPs (executed count), as a float;
    the integer columns are exact (dtype object keeps Python ints past 2**63).
    """
    a = analyze(_config(config), seq, batch, phase)
    include_non_matmul = A.flag(include_non_matmul, "include_non_matmul")
    rows = [r for r in ledger_rows(a) if include_non_matmul or r["kind"] == "matmul"]
    df = pd.DataFrame(rows)
    total = a.matmul_flops("executed")
    df["share"] = [float(Fraction(f, total)) if k == "matmul" else float("nan")
                   for f, k in zip(df["flops"], df["kind"])]
    for col in ("flops_each", "flops", "useful_flops", "count"):
        df[col] = df[col].astype(object)
    return df


def sweep(configs: Iterable[ModelConfig | str], seqs: Iterable[int], batch: int = 1,
          phase: str = R.FORWARD) -> pd.DataFrame:
    """Long form: one row per (model, seq, component) with executed and useful matmul FLOPs,
    their shares of the pass total, and the parameter counts (total, and active per token:
    less for a mixture of experts). Plot-ready (`share` floats).

    Each config's closed forms are evaluated over all the contexts at once
    (accounting/analysis/grid.py): the same exact ints as analyze() at every point
    (tests/test_grid.py); shares are the exact ratios rounded once to float."""
    import numpy as np

    from accounting.analysis.grid import as_ints, component_grids
    configs = A.configs(configs)
    seqs = as_ints(A.iterable(seqs, "seqs"), "--ctx")
    batch, phase = A.count(batch, "batch"), A.phase(phase)
    # the components these models have (the recurrent mixing only with a hybrid among them)
    comps = R.components_of({r.component for c in configs for r in ledger(_config(c)).forward})
    n, T = len(comps), len(seqs)
    models: list[tuple] = []  # (config, its analysis at the first T): what is constant per model
    counts: dict[str, list] = {k: [] for k in ("flops", "share", "useful_flops", "useful_share",
                                              "total_flops")}
    for c in configs:
        config = _config(c)
        if not T:
            continue
        models.append((config, analyze(config, seqs[0], batch, phase)))
        for k, flops_col, share_col in ((R.EXECUTED, "flops", "share"),
                                         (R.USEFUL, "useful_flops", "useful_share")):
            grids = component_grids(config, seqs, (batch,), phase, k, comps)
            m, total, share = _shares([grids[comp][:, 0] for comp in comps])
            counts[flops_col].append(m.ravel())  # row-major: per T, every component
            counts[share_col].append(share.ravel())
            if k == R.EXECUTED:
                counts["total_flops"].append(np.repeat(total, n))

    def per_model(value, dtype):  # one value per model, repeated over its T × n rows
        return np.repeat(np.array([value(c, a) for c, a in models], dtype=dtype), T * n)

    def stacked(col, dtype):  # exact Python ints (object) or float shares
        parts = counts[col]
        return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype=dtype)

    cols = {
        # pandas' string dtype, as it infers for names (even for no rows)
        "model": pd.array(per_model(lambda c, a: c.name, object), dtype="str"),
        "seq": np.tile(np.repeat(np.array(seqs, dtype=np.int64), n), len(models)),
        "batch": per_model(lambda c, a: batch, np.int64),
        "pass": pd.array(per_model(lambda c, a: phase, object), dtype="str"),
        "component": pd.Categorical.from_codes(np.tile(np.arange(n, dtype=np.int8),
                                                       T * len(models)),
                                               categories=list(comps), ordered=True),
        "flops": stacked("flops", object),
        "share": stacked("share", np.float64),
        "useful_flops": stacked("useful_flops", object),
        "useful_share": stacked("useful_share", np.float64),
        "total_flops": stacked("total_flops", object),
        "params": per_model(lambda c, a: a.param_count, object),
        "active_params": per_model(lambda c, a: a.active_param_count, object),
        "d_model": per_model(lambda c, a: c.d_model, np.int64),
        "num_layers": per_model(lambda c, a: c.num_layers, np.int64),
    }
    return pd.DataFrame(cols)


def _shares(columns: list):
    """(T × n matrix of the components' FLOPs, the per-T totals, each entry's exact share
    rounded once to float). Below 2**53 every int converts to float exactly and IEEE
    division rounds once, so numpy's float division equals Python's int / int (correctly
    rounded); past it the ints are divided in Python."""
    import numpy as np
    wide = any(c.dtype == object for c in columns) or \
        sum(int(c.max()) for c in columns) >= 2**53
    m = np.stack([c.astype(object) if wide else c for c in columns], axis=1)
    total = m.sum(axis=1)
    if not wide:
        return m, total, m / total[:, None]
    share = np.array([[x / t for x in row] for row, t in zip(m.tolist(), total.tolist())],
                     dtype=np.float64)
    return m, total, share



def sweep_by_analysis(configs: Iterable[ModelConfig | str], seqs: Iterable[int], batch: int = 1,
                      phase: str = R.FORWARD) -> pd.DataFrame:
    """sweep() the slow way, one analyze() per point (what sweep() did before issue 12):
    kept as the reference tests/test_grid.py compares it with, and bench_sweep.py's peer."""
    rows = []
    seqs = A.iterable(seqs, "seqs")
    for config in A.configs(configs):
        for seq in seqs:
            a = analyze(config, seq, batch, phase)
            flops = {k: a.component_flops(k) for k in (R.EXECUTED, R.USEFUL)}
            shares = {k: a.component_shares(k) for k in flops}
            for comp in a.components:
                rows.append({
                    "model": config.name, "seq": seq, "batch": batch, "pass": phase,
                    "component": comp, "flops": flops["executed"][comp],
                    "share": float(shares["executed"][comp]),
                    "useful_flops": flops["useful"][comp],
                    "useful_share": float(shares["useful"][comp]),
                    "total_flops": a.matmul_flops("executed"), "params": a.param_count,
                    "active_params": a.active_param_count,
                    "d_model": config.d_model, "num_layers": config.num_layers,
                })
    df = pd.DataFrame(rows)
    for col in ("flops", "useful_flops", "total_flops", "params", "active_params"):
        df[col] = df[col].astype(object)
    present = R.components_of(set(df["component"]) if len(df) else set())
    df["component"] = pd.Categorical(df["component"], categories=list(present), ordered=True)
    return df


def formulas_frame(configs: Iterable[ModelConfig | str] | ModelConfig | str,
                   seqs: Iterable[int] | int | None = None, batch: int = 1) -> pd.DataFrame:
    """The literature's formulas beside the exact count (accounting/literature/compare.py), one row
    per (model, seq, formula): forward and training FLOPs (exact ints or Fractions, dtype
    object), the exact counts, and `ratio` = formula training / exact training (executed),
    `ratio_useful` (over the causal count) and `error` = ratio − 1 as floats for plotting.
    seqs defaults to each config's context_length."""
    from accounting.analysis.grid import as_ints
    from accounting.literature.compare import compare
    configs = A.configs(configs)
    if seqs is not None:
        seqs = [A.count(seqs, "seqs")] if hasattr(seqs, "__index__") else \
            as_ints(A.iterable(seqs, "seqs"), "--ctx")
    batch = A.count(batch, "batch")
    rows = []
    for config in configs:
        for seq in (seqs if seqs is not None else [config.context_length]):
            cmp = compare(config, seq, batch)
            x = cmp.exact
            for e in cmp.estimates:
                r = Fraction(e.training) / x.training
                rows.append({
                    "model": config.name, "seq": seq, "batch": batch, "formula": e.key,
                    "name": e.name, "forward": e.forward, "training": e.training,
                    "exact_forward": x.forward, "exact_training": x.training,
                    "exact_training_useful": x.training_useful, "ratio": float(r),
                    "ratio_useful": float(Fraction(e.training) / x.training_useful),
                    "error": float(r - 1), "does_not_fit": ", ".join(e.misfits),
                })
    df = pd.DataFrame(rows)
    for col in ("forward", "training", "exact_forward", "exact_training", "exact_training_useful"):
        df[col] = df[col].astype(object)
    return df


def formula_terms_frame(config: ModelConfig | str, seq: int | None = None,
                        batch: int = 1) -> pd.DataFrame:
    """Each formula's reconciliation, one row per term (forward and training FLOPs to add
    to the formula to reach the exact count), for one workload."""
    from accounting.literature.compare import compare
    config = _config(config)
    seq = A.count(seq, "seq", "the config's context_length")
    cmp = compare(config, seq, A.count(batch, "batch"))
    rows = [{"formula": e.key, "term": t.label, "kind": t.kind, "forward": t.forward,
             "training": t.training} for e in cmp.estimates for t in e.terms]
    df = pd.DataFrame(rows, columns=["formula", "term", "kind", "forward", "training"])
    for col in ("forward", "training"):
        df[col] = df[col].astype(object)
    return df
