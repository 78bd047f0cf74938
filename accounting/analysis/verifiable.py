"""Whether the cross-check can run a workload, decided before torch is imported.

The cross-check builds the real model on the meta device and runs it: no memory is used,
but every tensor still needs a storage size torch can compute in int64 (elements × bytes
per element < 2^63; past that torch fails with C++ frames in its message), and the run
takes about 0.1 s per block on a 2-core machine (fvcore traces every op). The largest
tensor comes from the ledger: every parameter, every operand and result of a matmul,
every tensor a non-matmul op reads, every kept activation and buffer.
"""
from __future__ import annotations

from accounting.architecture.config import ModelConfig
from accounting.ledger.ledger import ledger
from accounting.ledger.records import TRAIN
from accounting.ledger.symbols import product

MAX_ELEMENTS = 2**60  # 8-byte elements (int64 ids, float64) stay below 2^63 bytes
MAX_LAYERS = 1024  # with --verify: about two minutes
DEFAULT_MAX_LAYERS = 256  # when the cross-check runs by default: at most about half a minute


def largest_tensor(config: ModelConfig, seq: int, batch: int) -> tuple[int, str]:
    """(elements, what) of the largest tensor the model's run holds at this workload."""
    lg = ledger(config)
    v = lg.values(seq, batch)
    best = (batch * seq, "the token ids [B, T]")
    shapes = [(p.shape, f"parameter {p.name}") for p in lg.params]
    for m in lg.matmuls(TRAIN):
        shapes += [(m.batch + m.m + m.n, f"an operand of {m.name}"),
                   (m.batch + m.n + m.p, f"an operand of {m.name}"),
                   (m.batch + m.m + m.p, f"the result of {m.name}")]
    shapes += [(e.elements, f"the input of {e.name}") for e in lg.elementwise]
    shapes += [(a.shape, f"activation {a.name}") for a in lg.activations]
    shapes += [(b.shape, f"buffer {b.name}") for b in lg.buffers]
    for shape, what in shapes:
        n = product(shape, v)
        if n > best[0]:
            best = (n, f"{what} [{', '.join(shape)}]")
    return best


def problem(config: ModelConfig, seq: int, batch: int, explicit: bool) -> str | None:
    """Why the cross-check cannot (or, by default, should not) run; None when it can."""
    layers = MAX_LAYERS if explicit else DEFAULT_MAX_LAYERS
    if config.num_layers > layers:
        return (f"the cross-check runs every block of the model, about 0.1 s each: at most "
                f"{layers:,} layers{' by default (--verify allows 1,024)' if not explicit else ''}"
                f", and this config has {config.num_layers:,}")
    n, what = largest_tensor(config, seq, batch)
    if n >= MAX_ELEMENTS:
        return (f"at T = {seq:,}, B = {batch:,}, {what} has {n:.3e} elements, more than torch "
                f"can size (2^60 here; elements × bytes must stay below 2^63)")
    return None
