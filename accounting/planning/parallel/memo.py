"""Memo tables keyed by objects' identities, for the frozen objects the layout search's
plans share (a config, a stage's tensor tuple, a States): id() is cheap where hashing a
frozen dataclass re-walks it. An id may be reused once its object is gone, so each entry
keeps its objects and a hit needs the very same ones (`is`); a table is emptied when it
outgrows its bound, so a long search holds no more than that."""
from __future__ import annotations

from typing import Callable, TypeVar

V = TypeVar("V")


def remembered(table: dict, key: tuple, owners: tuple, make: Callable[[], V],
               limit: int) -> V:
    """make(), remembered in `table` under `key` (which holds the owners' ids) for as long
    as the same `owners` objects are alive."""
    hit = table.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], owners)):
        return hit[1]
    if len(table) > limit:
        table.clear()
    value = make()
    table[key] = (owners, value)
    return value
