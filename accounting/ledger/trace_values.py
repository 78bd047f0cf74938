"""The values a symbolic run (accounting/ledger/trace.py) passes between ops: a tensor's
shape, dtype and storage (Sym), and a storage the memory ledger lists (Named)."""
from __future__ import annotations

from dataclasses import dataclass, field

from accounting.units import FP32


class Storage:
    """Identity of a tensor's memory: views share it, ops make new ones."""
    __slots__ = ()


@dataclass(eq=False)
class Sym:
    """A symbolic tensor: its elements (a flat tuple of symbols), dtype, storage."""
    shape: tuple[str, ...]
    dtype: str = FP32
    grad: bool = True  # requires a gradient
    contiguous: bool = True
    storage: Storage = field(default_factory=Storage)
    param: str = ""  # the parameter's state-dict name, for a parameter


@dataclass
class Named:
    """A storage the memory ledger lists: saved for backward, or an item of the course's list."""
    label: str
    shape: tuple[str, ...]
    dtype: str
    repeat: str | None
    course: str = ""
    block_input: bool = False
    weight_copy: bool = False
    savers: list[str] = field(default_factory=list)
    saved_in: str = ""
    readers: list[str] = field(default_factory=list)
    storages: str | None = None  # the symbol of separate storages it is (a loop's N_c)
