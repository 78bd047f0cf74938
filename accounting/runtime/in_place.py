"""Writing a file in place, and telling two names of one file apart (for -o, issue 32): a
target with other hard links, or owned by another user than this process, keeps its inode
when the answer is written into it (safe_io.write_atomic renames a new file over any
other target). Pure Python, os only."""
from __future__ import annotations

import os
from pathlib import Path


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two names are one file (links, hard links and relative names alike)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def write_in_place(target: Path, payload: bytes) -> None:
    """Write payload into the target itself (its inode: every hard link and its owner
    kept), the space reserved first so that a full disk fails before any byte changes."""
    fd = os.open(target, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if payload and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, len(payload))
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.ftruncate(fd, len(payload))
        os.fsync(fd)
    finally:
        os.close(fd)
