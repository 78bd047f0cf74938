"""A checkpoint match as the answer's line, the JSON object (the issue's contract:
.checkpoint.tensors, .parameters, .bytes, .agrees) and the stderr line of a disagreement."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from accounting.checkpoint.match import Match
from accounting.units import GB, decimal


def _gb(n: int) -> str:
    return f"{decimal(Fraction(n, GB), 2)} GB" if n >= 10**7 else f"{n:,} bytes"


def line(m: Match, label_width: int = 14) -> str:
    """'checkpoint:    agrees: 291 tensors, 8,030,261,248 parameters, 16.06 GB stored (BF16)'."""
    dtypes = ", ".join(f"{d} {_gb(b)}" for d, b in m.bytes_by_dtype)
    head = f"{'checkpoint:':<{label_width + 1}}"
    if m.agrees:
        return (f"{head}agrees: {m.tensors:,} tensors, {m.parameters:,} parameters, "
                f"{m.bytes:,} bytes stored ({dtypes}) in {m.files:,} "
                f"{'GGUF' if m.checkpoint is not None and m.checkpoint.gguf_arch else 'safetensors'} "
                f"header{'s' if m.files != 1 else ''}")
    return (f"{head}DIFFERS from the ledger in {len(m.differences)} way"
            f"{'s' if len(m.differences) != 1 else ''}: " + "; ".join(m.differences))


def summary(m: Match) -> str:
    """The stderr line of a disagreement (exit 1, as the cross-check's)."""
    return (f"checkpoint {m.source} DISAGREES with the ledger: " + "; ".join(m.differences))


def to_dict(m: Match) -> dict:
    return {"source": m.source, "files": m.files, "tensors": m.tensors,
            "parameters": m.parameters, "bytes": m.bytes,
            "bytes_by_dtype": dict(m.bytes_by_dtype), "agrees": m.agrees,
            "ledger_tensors": m.expected_tensors, "ledger_parameters": m.expected_parameters,
            "differences": list(m.differences)}


def with_line(table, m: Match, label_width: int = 14):
    """The answer block with the checkpoint's line added last."""
    return replace(table, notes=tuple(table.notes) + (line(m, label_width),))
