"""The parameter counts of a config's ledger as closed forms (N, N_matmul, the tensor count):
below memory.py and the peak moments (peak_moments.py), which both read them."""
from __future__ import annotations

from accounting.architecture.config import ModelConfig
from accounting.ledger.ledger import ledger
from accounting.ledger.symbols import Expr


def param_expr(params) -> Expr:
    return sum((Expr.of(1, p.shape).times(*((p.repeat,) if p.repeat else ())) for p in params), Expr())


def parameter_count(config: ModelConfig) -> Expr:
    """N: every parameter tensor of the ledger (L copies of a per-layer one; a tied one once)."""
    return param_expr(ledger(config).params)


def matmul_weight_count(config: ModelConfig) -> Expr:
    """N_matmul: the weights a matmul reads (not a table only looked up, not the norms or biases)."""
    return param_expr(p for p in ledger(config).params if p.matmul_weight)


def tensor_count(config: ModelConfig) -> Expr:
    """Parameter tensors (AdamW keeps one step counter per tensor)."""
    return sum((Expr.of(1, (p.repeat,) if p.repeat else ()) for p in ledger(config).params), Expr())
