"""One rule for the tables of named records (the weight schemes, the optimizers, the
training stacks): a name is registered once; a second record of that name is a bug."""
from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")


def registrar(table: dict[str, T], what: str) -> Callable[[T], T]:
    """register(record) for `table`, keyed by record.name, refusing a duplicate name."""
    def register(record: T) -> T:
        if record.name in table:
            raise ValueError(f"{what} {record.name!r} registered twice")
        table[record.name] = record
        return record
    return register
