"""Exact matmul FLOPs over grids of contexts × batches, from the ledger's closed forms.

analyze() builds every row of one workload; a sweep over many (T, B) needs only totals.
The ledger's expression of a pass (Σ records' Expr) is reduced once per branch to a
polynomial in B and T (Expr.partial: the config's sizes filled in, P = T(T+1)/2), then
evaluated on whole arrays of T and B. Exactness:

  * a closed form holds on one branch only where a symbol other than B, T is a function
    of T: a sliding window's P_W (W·T − W(W−1)/2 for T ≥ W, T(T+1)/2 below) and a RoPE
    table's T_max = max(T, context_length). Each T is evaluated on the form of its own
    branch (partial() at a representative T of that branch);
  * an MoE capacity factor keeps C = ⌈c·B·T·k/E⌉ (and E·C+1) symbolic: their values come
    from the ledger itself (Ledger.values) for each distinct B·T;
  * coefficients are exact rationals: the polynomial is scaled to integers, evaluated,
    and divided back exactly (a remainder would be an error, and raises);
  * int64 arrays where a bound on every term shows no overflow, Python ints (object
    arrays) otherwise.

tests/test_grid.py checks every value against analyze() on random points of random
architectures, windows and capacity factors included. numpy is imported on call.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from fractions import Fraction

from accounting.analysis import arguments as A
from accounting.analysis.workload import check_workload
from accounting.architecture.config import ModelConfig
from accounting.runtime.errors import UsageError
from accounting.ledger.ledger import ledger
from accounting.ledger.records import EXECUTED, FORWARD
from accounting.ledger.symbols import Expr

INT64_MAX = 2**63 - 1
WORKLOAD = frozenset({"B", "T", "C", "E·C+1"})


def matmul_expr(config: ModelConfig, phase: str = FORWARD, counting: str = EXECUTED,
                component: str | None = None) -> Expr:
    """The pass's matmul FLOPs in every symbol (Analysis.matmul_expr, without a workload)."""
    config, phase, counting = A.config(config), A.phase(phase), A.counting(counting)
    component = A.component(component)
    return sum((r.expr(counting) for r in ledger(config).matmuls(phase)
                if component is None or r.component == component), Expr())


def _branches(config: ModelConfig, symbols: set, seqs: Sequence[int]) -> list[tuple]:
    """Which closed form holds at each T (see the module docstring)."""
    window = "P_W" in symbols
    table = "T_max" in symbols
    chunk = "P_C" in symbols  # T ≤ C, or beyond it one branch per T mod C
    # the recurrent layers' chunks (N = (T + pad)/C): one branch per T mod C
    scans = [size for size, marks in ((config.linear_chunk, ("N_c", "N_c-1")),
                                      (config.mamba_chunk, ("N_m", "N_m+1")))
             if set(marks) & symbols]
    topk = "P_K" in symbols  # the indexer's k_I keys per query: a window's two branches
    if not (window or table or chunk or topk or scans):
        return [()] * len(seqs)
    c = config.attention_chunk
    return [((t >= config.sliding_window,) if window else ()) +
            ((t >= config.index_topk,) if topk else ()) +
            ((t >= config.index_topk,) if topk else ()) +
            ((t >= config.context_length,) if table else ()) +
            (((t > c, t % c if t > c else 0),) if chunk else ()) +
            tuple(t % size for size in scans) for t in seqs]


def _polynomials(config: ModelConfig, e: Expr, first_t: dict[tuple, int]) -> dict[tuple, Expr]:
    """Branch -> the polynomial in B, T (and C) holding there, from partial() at the first
    T of the grid on that branch."""
    lg = ledger(config)
    out: dict[tuple, Expr] = {}
    for key, t in first_t.items():
        branch = e
        if "T_max" in e.symbols() and t >= config.context_length:
            branch = e.substitute("T_max", ("T",))  # T_max = T on this branch
        out[key] = branch.partial(lg.values(t, 1))
    return out


def as_ints(values: Iterable, flag: str) -> list[int]:
    """Exact integers (numpy's included); a float or string is refused, not truncated."""
    values = list(values)
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        bad = next(v for v in values if not hasattr(v, "__index__"))
        raise UsageError(f"{flag} must be a positive integer, got {bad!r}") from None


def _validate(config: ModelConfig, seqs: Sequence[int], batches: Sequence[int]) -> None:
    """analyze()'s checks on every point: each is a bound (positive, at most 10^15, within
    a learned position table), so the grid's extremes are the only values that can fail."""
    for t in {min(seqs), max(seqs)}:
        for b in {min(batches), max(batches)}:
            check_workload(t, b, config)


def _bound(poly: Expr, seqs, batches, caps: dict) -> int:
    """An upper bound of |every term| and of their sum, over the grid."""
    biggest = {"B": max(batches), "T": max(seqs), **caps}
    return sum(abs(c) * math.prod(biggest[s] for s in f) for f, c in poly.terms.items()) + 1


def flops_grid(config: ModelConfig | str, seqs: Iterable[int], batches: Iterable[int] = (1,),
               phase: str = FORWARD, counting: str = EXECUTED,
               component: str | None = None):
    """Matmul FLOPs for every (T, B): a numpy array of shape (len(seqs), len(batches)),
    dtype int64 where no value can overflow it, else object (Python ints). Equal, point by
    point, to analyze(config, T, B, phase, counting).matmul_flops() (or its
    component_flops()[component]). config: a ModelConfig or a preset name; phase 'forward',
    'backward' or 'train'; counting 'executed' or 'useful'; component one of
    accounting.ledger.records.COMPONENTS or None (all)."""
    return component_grids(config, seqs, batches, phase, counting, (component,))[component]


def component_grids(config: ModelConfig, seqs: Iterable[int], batches: Iterable[int] = (1,),
                    phase: str = FORWARD, counting: str = EXECUTED,
                    components: Iterable[str | None] = (None,)) -> dict:
    """flops_grid for several components at once (None: all of them), the grid validated
    and its branches found once."""
    import numpy as np
    config, phase, counting = A.config(config), A.phase(phase), A.counting(counting)
    seqs = as_ints(A.iterable(seqs, "seqs"), "--ctx")
    batches = as_ints(A.iterable(batches, "batches"), "--batch")
    components = tuple(A.component(c) for c in A.iterable(components, "components"))
    if not seqs or not batches:
        return {c: np.zeros((len(seqs), len(batches)), dtype=np.int64) for c in components}
    _validate(config, seqs, batches)
    exprs = {c: matmul_expr(config, phase, counting, c) for c in components}
    symbols = set().union(*(e.symbols() for e in exprs.values()))
    keys = _branches(config, symbols, seqs)
    rows_of: dict[tuple, slice | list[int]] = {}  # branch -> its rows of the grid
    if len(set(keys)) == 1:
        rows_of[keys[0]] = slice(None)  # one closed form for the whole grid
    else:
        for i, k in enumerate(keys):
            rows_of.setdefault(k, []).append(i)
    first_t = {k: seqs[0] if isinstance(rows, slice) else seqs[rows[0]]
               for k, rows in rows_of.items()}
    lg = ledger(config)
    caps: dict[str, int] = {}
    cap_values = None
    if {"C", "E·C+1"} & symbols:  # C, E·C+1 for each distinct B·T, from the ledger itself
        by_product = {n: lg.values(n, 1) for n in {t * b for t in seqs for b in batches}}
        caps = {s: max(v[s] for v in by_product.values()) for s in ("C", "E·C+1")}
        cap_values = by_product
    out = {}
    for comp, e in exprs.items():
        polys = _polynomials(config, e, first_t)
        bound = max(_bound(p, seqs, batches, caps) for p in polys.values())
        scale = math.lcm(*{Fraction(c).denominator for p in polys.values()
                           for c in p.terms.values()})
        dtype = np.int64 if bound * scale <= INT64_MAX else object
        grid = np.zeros((len(seqs), len(batches)), dtype=dtype)
        B = np.array(batches, dtype=dtype)[None, :]
        all_seqs = np.array(seqs, dtype=dtype)
        for key, poly in polys.items():
            rows = rows_of[key]
            sym = {"B": B, "T": all_seqs[rows][:, None]}
            if cap_values is not None:
                for s in ("C", "E·C+1"):
                    sym[s] = np.array([[cap_values[t * b][s] for b in batches]
                                       for t in all_seqs[rows].tolist()], dtype=dtype)
            acc = np.zeros((len(sym["T"]), len(batches)), dtype=dtype)
            for factors, c in poly.terms.items():
                term = np.full((1, 1), int(Fraction(c) * scale), dtype=dtype)
                for s in factors:
                    term = term * sym[s]
                acc = acc + term
            if scale != 1:
                acc, r = np.divmod(acc, scale)
                if np.any(r != 0):
                    raise ArithmeticError(f"{config.name}: a closed form is not integral here")
            grid[rows, :] = acc
        out[comp] = grid
    return out
