"""Which words a message uses for a user's argument: the command line's flag while a CLI
command runs (accounting/cli/main.py sets it around the run), the Python API's argument name
otherwise (issue 32: `analyze(cfg, seq=10**20)` said "--ctx must be ...", a flag a notebook
user never typed). The one table of which flag gives which argument. Pure Python."""
from __future__ import annotations

from contextlib import contextmanager
from types import MappingProxyType

# API argument -> the flag that gives it (accounting/cli/args.py, cli/plan.py)
FLAGS = MappingProxyType({
    "seq": "--ctx", "batch": "--batch", "mfu": "--mfu", "margin": "--margin",
    "peak_tflops": "--gpu-flops", "bandwidth_tbs": "--gpu-bw", "memory_bytes": "--gpu-mem",
    "position": "--position", "steps": "--steps", "tokens": "--tokens", "gpu": "--gpu NAME",
})

_command_line = [False]  # a list, not a ContextVar: the CLI's worker threads see it too


def arg(name: str) -> str:
    """How a message names the argument `name` (a key of FLAGS) in this run."""
    return FLAGS.get(name, name) if _command_line[0] else name


@contextmanager
def command_line():
    """Messages name flags while this is open (the CLI's run)."""
    old, _command_line[0] = _command_line[0], True
    try:
        yield
    finally:
        _command_line[0] = old
