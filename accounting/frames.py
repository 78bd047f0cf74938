"""pandas views for notebooks: the per-record ledger and a sweep over configs × lengths.

pandas is imported here only, so `import accounting` stays light.
"""
from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

import pandas as pd

from accounting import records as R
from accounting.analysis import analyze
from accounting.config import ModelConfig, get_preset
from accounting.export import ledger_rows


def _config(c: ModelConfig | str) -> ModelConfig:
    return get_preset(c) if isinstance(c, str) else c


def matmul_frame(config: ModelConfig | str, seq: int | None = None, batch: int = 1,
                 phase: str = "forward", include_non_matmul: bool = False) -> pd.DataFrame:
    """One row per matmul (and, optionally, per non-matmul op) with exact integer FLOPs.

    `share` is the row's fraction of the pass's matmul FLOPs (executed count), as a float;
    the integer columns are exact (dtype object keeps Python ints past 2**63).
    """
    a = analyze(_config(config), seq, batch, phase)
    rows = [r for r in ledger_rows(a) if include_non_matmul or r["kind"] == "matmul"]
    df = pd.DataFrame(rows)
    total = a.matmul_flops("executed")
    df["share"] = [float(Fraction(f, total)) if k == "matmul" else float("nan")
                   for f, k in zip(df["flops"], df["kind"])]
    for col in ("flops_each", "flops", "useful_flops", "count"):
        df[col] = df[col].astype(object)
    return df


def sweep(configs: Iterable[ModelConfig | str], seqs: Iterable[int], batch: int = 1,
          phase: str = "forward") -> pd.DataFrame:
    """Long form: one row per (model, seq, component) with executed and useful matmul FLOPs,
    their shares of the pass total, and the parameter counts (total, and active per token:
    less for a mixture of experts). Plot-ready (`share` floats).

    Each config's closed forms are evaluated over all the contexts at once
    (accounting/grid.py): the same exact ints as analyze() at every point
    (tests/test_grid.py); shares are the exact ratios rounded once to float."""
    from accounting.grid import component_grids
    seqs = [int(t) for t in seqs]
    cols: dict[str, list] = {k: [] for k in SWEEP_COLUMNS}
    n = len(R.COMPONENTS)
    for c in configs:
        config = _config(c)
        if not seqs:
            continue
        flops = {}
        for k in (R.EXECUTED, R.USEFUL):
            grids = component_grids(config, seqs, (batch,), phase, k, R.COMPONENTS)
            flops[k] = [grids[comp][:, 0].tolist() for comp in R.COMPONENTS]
        totals = {k: [sum(x) for x in zip(*flops[k])] for k in flops}
        first = analyze(config, seqs[0], batch, phase)
        params, active = first.param_count, first.active_param_count
        ex, us = flops[R.EXECUTED], flops[R.USEFUL]
        te, tu = totals[R.EXECUTED], totals[R.USEFUL]
        rows = len(seqs) * n
        cols["model"] += [config.name] * rows
        cols["seq"] += [t for t in seqs for _ in range(n)]
        cols["batch"] += [batch] * rows
        cols["pass"] += [phase] * rows
        cols["component"] += list(R.COMPONENTS) * len(seqs)
        # int / int is the exact ratio rounded once (= float(Fraction(a, b)))
        cols["flops"] += [ex[j][i] for i in range(len(seqs)) for j in range(n)]
        cols["share"] += [ex[j][i] / te[i] for i in range(len(seqs)) for j in range(n)]
        cols["useful_flops"] += [us[j][i] for i in range(len(seqs)) for j in range(n)]
        cols["useful_share"] += [us[j][i] / tu[i] for i in range(len(seqs)) for j in range(n)]
        cols["total_flops"] += [t for t in te for _ in range(n)]
        cols["params"] += [params] * rows
        cols["active_params"] += [active] * rows
        cols["d_model"] += [config.d_model] * rows
        cols["num_layers"] += [config.num_layers] * rows
    df = pd.DataFrame(cols)
    for col in ("flops", "useful_flops", "total_flops", "params", "active_params"):
        df[col] = df[col].astype(object)
    df["component"] = pd.Categorical(df["component"], categories=list(R.COMPONENTS), ordered=True)
    return df


SWEEP_COLUMNS = ("model", "seq", "batch", "pass", "component", "flops", "share", "useful_flops",
                 "useful_share", "total_flops", "params", "active_params", "d_model",
                 "num_layers")


def sweep_by_analysis(configs: Iterable[ModelConfig | str], seqs: Iterable[int], batch: int = 1,
                      phase: str = "forward") -> pd.DataFrame:
    """sweep() the slow way, one analyze() per point (what sweep() did before issue 12):
    kept as the reference tests/test_grid.py compares it with, and bench_sweep.py's peer."""
    rows = []
    seqs = list(seqs)
    for c in configs:
        config = _config(c)
        for seq in seqs:
            a = analyze(config, seq, batch, phase)
            flops = {k: a.component_flops(k) for k in (R.EXECUTED, R.USEFUL)}
            shares = {k: a.component_shares(k) for k in flops}
            for comp in R.COMPONENTS:
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
    df["component"] = pd.Categorical(df["component"], categories=list(R.COMPONENTS), ordered=True)
    return df


def formulas_frame(configs: Iterable[ModelConfig | str] | ModelConfig | str,
                   seqs: Iterable[int] | int | None = None, batch: int = 1) -> pd.DataFrame:
    """The literature's formulas beside the exact count (accounting/literature.py), one row
    per (model, seq, formula): forward and training FLOPs (exact ints or Fractions, dtype
    object), the exact counts, and `ratio` = formula training / exact training (executed),
    `ratio_useful` (over the causal count) and `error` = ratio − 1 as floats for plotting.
    seqs defaults to each config's context_length."""
    from accounting.literature import compare
    if isinstance(configs, (str, ModelConfig)):
        configs = [configs]
    if isinstance(seqs, int):
        seqs = [seqs]
    rows = []
    for c in configs:
        config = _config(c)
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
    from accounting.literature import compare
    cmp = compare(_config(config), seq, batch)
    rows = [{"formula": e.key, "term": t.label, "kind": t.kind, "forward": t.forward,
             "training": t.training} for e in cmp.estimates for t in e.terms]
    df = pd.DataFrame(rows, columns=["formula", "term", "kind", "forward", "training"])
    for col in ("forward", "training"):
        df[col] = df[col].astype(object)
    return df
