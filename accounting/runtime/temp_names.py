"""The names of write_atomic's temporary files (accounting/runtime/safe_io.py), and the
clean-up of those a killed run left behind."""
from __future__ import annotations

import os
import stat
from pathlib import Path

# Our temporary files: '.<name>.accounting-<pid>-<random>.tmp' beside the target, the name
# cut (at a character) so that the whole fits the file system's limit (was: the first 100
# characters, so that a legal 252-byte name got a temporary name too long to create). One
# left by a run that could not clean up (SIGKILL, a power cut) is recognisable: the next
# write to the same target removes those whose process has ended (issue 23).
MARK, SUFFIX = ".accounting-", ".tmp"
_RANDOM = 8  # characters tempfile.mkstemp adds


def stem(target: Path, name_max: int = 255) -> str:
    """'.<name>.accounting-': what every temporary name for `target` starts with, the name
    cut so that a whole temporary name fits `name_max` bytes (the folder's NAME_MAX)."""
    room = name_max - len(os.fsencode(f".{MARK}{2**22}-{SUFFIX}")) - _RANDOM
    name = target.name
    while name and len(os.fsencode(name)) > room:
        name = name[:-1]
    return f".{name}{MARK}"


def remove_stale(folder: Path, stem: str) -> None:
    """Remove our temporary files for this target whose process has ended: regular files of
    this user named stem + '<pid>-<random>.tmp'. Best effort: what cannot be read or
    removed stays."""
    try:
        entries = [e for e in os.scandir(folder)
                   if e.name.startswith(stem) and e.name.endswith(SUFFIX)]
    except OSError:
        return
    for e in entries:
        pid = e.name[len(stem):].split("-", 1)[0]
        try:
            st = e.stat(follow_symlinks=False)
            if not (pid.isdigit() and stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()) \
                    or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            os.unlink(e.path)
        except (OSError, ValueError):
            continue


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process (or no such number)
        return True
    return True
