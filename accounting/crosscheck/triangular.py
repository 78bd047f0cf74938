"""The unit lower-triangular solve's FLOPs for the counters that do not know it (issue 31).

torch.linalg.solve_triangular (the gated delta rule's UT system, model/delta.py) has no
formula in FlopCounterMode (torch 2.13) and no handle in fvcore. Forward substitution of
an n×n unit lower-triangular A against k right-hand columns, x_i = b_i − Σ_{j<i} a_ij·x_j,
is n(n−1)/2·k multiply-adds (no divisions: the diagonal is 1); n(n+1)/2·k with a
diagonal. We count a multiply-add as 2 FLOPs, as for every matmul (the 2mnp rule), and
register that formula for FlopCounterMode (so the op counter, which reads its registry,
counts it too) and as an fvcore handle (in multiply-adds, fvcore's unit). The backward
runs a solve of the same size (dB) and one dense product dA = −dB·Xᵀ, which
FlopCounterMode counts with its own matmul formula.
"""
from __future__ import annotations

import math

import torch
from torch.utils import flop_counter

SOLVE = torch.ops.aten.linalg_solve_triangular
JIT_NAME = "aten::linalg_solve_triangular"


def solve_macs(a_shape, b_shape, unitriangular: bool, left: bool = True) -> int:
    """Multiply-adds of solving A·X = B (left) for A (..., n, n), B (..., n, k)."""
    n = a_shape[-1]
    k = b_shape[-1] if left else b_shape[-2]
    lead = b_shape[:-2] if len(b_shape) >= len(a_shape) else a_shape[:-2]
    pairs = n * (n - 1) // 2 if unitriangular else n * (n + 1) // 2
    return math.prod(lead) * pairs * k


def _solve_flop(a_shape, b_shape, *args, upper=False, left=True, unitriangular=False,
                out_shape=None, **kwargs) -> int:
    return 2 * solve_macs(a_shape, b_shape, unitriangular, left)


def register_solve_formula() -> None:
    """Teach FlopCounterMode the solve (once; the registry refuses duplicates)."""
    if SOLVE not in flop_counter.flop_registry:
        flop_counter.register_flop_formula(SOLVE)(_solve_flop)


def fvcore_solve_handle(inputs, outputs) -> int:
    """fvcore's handle: multiply-adds (inputs: A, B, upper, left, unitriangular)."""
    a, b = (list(x.type().sizes()) for x in inputs[:2])
    left, unit = (x.toIValue() for x in inputs[3:5])
    return solve_macs(a, b, bool(unit), bool(left))
