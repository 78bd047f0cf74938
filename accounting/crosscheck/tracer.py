"""Make torch's jit tracer skip Python source locations, in a throwaway worker process only.

torch 2.13's tracer records, for every graph node it creates, the Python source range of
the call (tracer::recordSourceLocation -> pythonRecordSourceLocation, which walks the
interpreter's frames and builds a SourceRange). On the meta device that is about half of
fvcore's trace of GPT-2 XL at 16k: Python meta kernels (torch/_meta_registrations.py
registers the torch._refs decompositions as the Meta kernels of elementwise ops) read
`.shape`, which under tracing records an aten::size node per dimension, each with its
source range, all dead-code-eliminated afterwards. fvcore reads node kinds, scopes and
shapes, never source ranges, so its counts cannot depend on them (tests/test_crosscheck.py
compares the counts with and without).

torch offers no switch for it; tracer::setRecordSourceLocation (exported from
libtorch_cpu) takes a function pointer, and the Python one it replaces is not exported,
so the change cannot be undone: call skip_source_locations() only in a process that ends
after its trace (accounting/runtime/fork.py's child).
"""
from __future__ import annotations

import ctypes
import os

_SETTER = "_ZN5torch3jit6tracer23setRecordSourceLocationEPFvPNS0_4NodeEE"
_NODE_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_callback = None  # kept alive: the tracer calls it for every node


def skip_source_locations() -> bool:
    """Replace the tracer's source-location recorder with a no-op, for the rest of this
    process. False (nothing changed) where the symbol is not found."""
    global _callback
    if _callback is not None:  # done before (a worker forked from a process that had)
        return True
    import torch
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        setter = getattr(ctypes.CDLL(path), _SETTER)
    except (OSError, AttributeError):
        return False
    setter.argtypes, setter.restype = [_NODE_CALLBACK], None
    _callback = _NODE_CALLBACK(lambda node: None)
    setter(_callback)
    return True


def active() -> bool:
    """Whether this process's tracer calls the Python no-op above for every node. A signal
    handler that raises while it runs cannot leave it: ctypes prints "Exception ignored on
    calling ctypes callback function" and goes on (a worker's SIGTERM, a user's Ctrl-C lost),
    so the trace runs with the run's signals held (measure._fvcore)."""
    return _callback is not None
