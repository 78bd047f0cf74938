"""Whether optional heavy dependencies are importable, found without importing them
(importing torch takes a second; the analytic path must stay instant), and whether the
environment lets them load at all: an unusable one is a UsageError naming it (exit 2), not
whatever the library does when it cannot load (issue 23)."""
from __future__ import annotations

import os
from importlib.util import find_spec

from accounting.runtime.errors import UsageError, shorten
from accounting.units import GiB

# The address space (ulimit -v, RLIMIT_AS) the cross-check needs: torch's shared libraries
# are mapped whole, numpy's OpenBLAS reserves buffers per thread. Measured with
# `ulimit -v N; python -m accounting gpt2-small --verify` (torch 2.x, 2 CPUs): it answers
# from about 1.0 GiB; below, the run ended with exit 3 (ImportError: failed to map segment
# from shared object), exit 1 (OpenBLAS gives up and calls exit(1)), an abort (no memory
# for a thread's local data) or exit 2 (MemoryError), depending on the limit. Doubled for
# machines with more threads.
TORCH_ADDRESS_SPACE_BYTES = 2 * GiB


def missing(alternative: str = "or pass --no-verify") -> str | None:
    """Name of the first missing dependency of the cross-check, or None. An address-space
    limit below what torch needs to load raises UsageError (address_space_problem, its
    message ending with `alternative`)."""
    for module in ("torch", "fvcore", "einops"):
        if find_spec(module) is None:
            return module
    problem = address_space_problem(alternative=alternative)
    if problem:
        raise UsageError(problem)
    return None


def address_space_problem(need: int = TORCH_ADDRESS_SPACE_BYTES,
                          alternative: str = "or pass --no-verify") -> str | None:
    """Why torch cannot load under this process's address-space limit, or None."""
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):  # no such limit here
        return None
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    return (f"the address-space limit (ulimit -v) is {soft // 2**20:,} MiB, less than the "
            f"{need // 2**30} GiB the cross-check's torch needs to load; raise it (ulimit -v "
            f"unlimited)" + (f" {alternative}" if alternative else ""))


def import_matplotlib():
    """matplotlib, imported for the report's figures (drawn on the Agg canvas: no display is
    used). matplotlib reads MPLBACKEND on import and refuses a name it does not know with a
    ValueError (was: exit 3, 'internal error'): a UsageError naming the variable instead.
    ImportError (matplotlib not installed) is the caller's to word."""
    backend = os.environ.get("MPLBACKEND")
    # matplotlib logs two warnings on import when its config folder cannot be made (an
    # unwritable or missing HOME: "mkdir -p failed ...", "Matplotlib created a temporary
    # cache directory ...", matplotlib/__init__.py _get_config_or_cache_dir) and uses a
    # temporary one it removes at exit: an answer needs nothing from that folder, and a run
    # that ends in an error must print its one line alone (issue 45)
    import logging
    log = logging.getLogger("matplotlib")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        import matplotlib
    except ValueError:
        if backend is None:
            raise
        raise UsageError(f"MPLBACKEND={shorten(backend, 60)} is not a backend matplotlib knows; "
                         "unset it (the report draws its figures into files, without a "
                         "display) or name one, e.g. MPLBACKEND=agg") from None
    finally:
        log.setLevel(level)
    return matplotlib
