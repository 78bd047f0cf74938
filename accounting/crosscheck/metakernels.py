"""Let the meta device run torch's C++ meta kernels, in a throwaway worker process only.

torch 2.13 registers, at import (torch/_meta_registrations.py, activate_meta), the Python
decompositions of torch._refs as the Meta kernels of some 1,300 operators, overriding the
C++ (structured) meta kernels that ATen still builds ("Meta (inactive)" in
torch._C._dispatch_dump). On the meta device every aten.mul, add, exp, amax, ... then runs
Python: a bare forward of GPT-2 XL at 16k takes about 0.25 s where the C++ kernels take
0.04 s, and that Python is half of fvcore's jit trace.

use_cpp_meta_kernels() destroys torch's Python Meta library and registers the same Python
kernels again, in a library of its own, for exactly the operators that have no C++ Meta
kernel (aten.where.self, for one), so every operator keeps a Meta kernel. Shapes and
dtypes are the same by construction of both kernels; tests/test_crosscheck_workers.py
checks that fvcore's traced graph (every node's kind, scope, output shapes and dtypes) and
every count of the three counters are the same either way. It cannot be undone in
place: call it only in a process that ends after its counting (accounting/runtime/fork.py's
children, the report's pool workers), never in the caller's.
"""
from __future__ import annotations

_kept: list = []  # the replacement library: destroyed (unregistered) if collected


def use_cpp_meta_kernels() -> int:
    """Switch this process to the C++ meta kernels where ATen has them; the number of
    operators that keep their Python meta kernel (no C++ one), -1 if torch's library is
    not where torch 2.13 keeps it (nothing changed), -2 if this process switched before."""
    import torch
    if _kept:  # switched already (a worker forked from a process that had switched)
        return -2
    try:
        import torch._meta_registrations as registrations
        from torch._decomp import global_decomposition_table as tables
        library = registrations._meta_lib_dont_use_me_use_register_meta
        registered = {key.rsplit("/", 1)[0].replace("/", "::", 1) for key in library._op_impls}
    except (ImportError, AttributeError):
        return -1
    # the kernel activate_meta() registered for each operator: meta > post_autograd > pre_autograd
    kernels: dict = {}
    for kind in ("meta", "post_autograd", "pre_autograd"):
        for op, fn in tables[kind].items():
            if isinstance(op, torch._ops.OpOverload) and op.name() in registered:
                kernels.setdefault(op, fn)
    library._destroy()
    again = torch.library.Library("aten", "IMPL", "Meta")
    python = 0
    for op, fn in kernels.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta"):
            again.impl(op, fn)
            python += 1
    _kept.append(again)
    return python


def operators_without_meta(names) -> list[str]:
    """Those of `names` ('aten::mul.Tensor', ...) with no Meta kernel at all."""
    import torch
    return [n for n in names if not torch._C._dispatch_has_kernel_for_dispatch_key(n, "Meta")]
