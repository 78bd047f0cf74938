"""What one rank does, seen from below DTensor: its collectives and its matmul FLOPs.

Both are TorchDispatchModes that step aside for DTensor (return NotImplemented, as
torch.distributed.tensor.debug.CommDebugMode does): DTensor then desugars each op into the
rank's local ops and collectives, and those come back to the mode. So the FLOPs are the
rank's own (local shapes), and the collectives are the functional ones DTensor issues as
well as the c10d ones FSDP2, DDP's comm hook, ZeroRedundancyOptimizer and pipelining call.
CommDebugMode itself counts calls but not bytes; `Collectives` records both, and the checks
compare its call counts with CommDebugMode's where both see the op.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, _FlopCounterMode

# aten/c10d op name -> (collective, which argument holds the payload)
OPS = {
    "_c10d_functional.all_reduce": ("all-reduce", "input"),
    "_c10d_functional.all_reduce_": ("all-reduce", "input"),
    "_c10d_functional.all_gather_into_tensor": ("all-gather", "output"),
    "_c10d_functional.reduce_scatter_tensor": ("reduce-scatter", "input"),
    "_c10d_functional.all_to_all_single": ("all-to-all", "input"),
    "c10d.allreduce_": ("all-reduce", "input"),
    "c10d._allgather_base_": ("all-gather", "output"),
    "c10d.allgather_into_tensor_coalesced_": ("all-gather", "output"),
    "c10d._reduce_scatter_base_": ("reduce-scatter", "input"),
    "c10d.reduce_scatter_tensor_coalesced_": ("reduce-scatter", "input"),
    "c10d.broadcast_": ("broadcast", "input"),
    "c10d.send": ("send", "input"),
    "c10d.recv_": ("recv", "input"),
    "c10d.allgather_": ("all-gather", "output"),
}


# c10d ops that move no data of their own
NOT_COLLECTIVES = ("wait", "barrier", "monitored", "_wrap_tensor_autograd")


def _bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_bytes(t) for t in x)
    return 0


@dataclass(frozen=True)
class Call:
    op: str  # "all-reduce", ...
    phase: str
    bytes: int
    group: str  # the process group's name
    aten: str


class Collectives(TorchDispatchMode):
    """Every collective this rank issues, with its payload bytes (an all-gather's output, a
    reduce-scatter's input, an all-reduce's or broadcast's buffer, a message) and the phase
    the driver set (`phase`)."""

    def __init__(self):
        super().__init__()
        self.calls: list[Call] = []
        self.phase = "forward"
        self.unknown: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(t is DTensor or (isinstance(t, type) and issubclass(t, DTensor)) for t in types):
            return NotImplemented
        kwargs = kwargs or {}
        name = func._overloadpacket._qualified_op_name.replace("::", ".")
        if name in OPS:
            op, where = OPS[name]
            self.calls.append(Call(op, self.phase, self._payload(name, where, args), _group(name, args),
                                   name))
        elif "c10d" in name and not any(w in name for w in NOT_COLLECTIVES):
            self.unknown[name] += 1
        return func(*args, **kwargs)

    @staticmethod
    def _payload(name: str, where: str, args) -> int:
        if name.startswith("_c10d_functional."):
            x = args[0]
            if name.endswith("all_gather_into_tensor"):
                return _bytes(x) * int(args[1])  # group size
            return _bytes(x)
        if name in ("c10d._allgather_base_", "c10d._reduce_scatter_base_"):
            out, inp = args[0], args[1]
            return _bytes(out if where == "output" else inp)
        if name in ("c10d.allgather_into_tensor_coalesced_", "c10d.reduce_scatter_tensor_coalesced_"):
            return _bytes(args[0] if where == "output" else args[1])
        if name == "c10d.allgather_":
            return _bytes(args[0])
        return _bytes(args[0])


def _group(name: str, args) -> str:
    """The process group of a call: funcol passes its name; c10d ops a boxed ProcessGroup."""
    if name.startswith("_c10d_functional."):
        return [a for a in args if isinstance(a, str)][-1]  # after the reduce op's name
    for a in args:
        if isinstance(a, torch.ScriptObject):
            return dist.ProcessGroup.unbox(a).group_name
    return "?"


def _propagating() -> bool:
    """Inside DTensor's sharding propagation, which runs each op once more on fake tensors of
    the global shape to learn the output's metadata (ShardingPropagator.
    _propagate_tensor_meta_non_cached); that run computes nothing on the rank."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "_propagate_tensor_meta_non_cached":
            return True
        f = f.f_back
    return False


class _LocalFlops(_FlopCounterMode):
    """FlopCounterMode's mode, stepping aside for DTensor so that it counts local shapes, and
    not counting DTensor's global-shape shape propagation (which passes through the modes
    below the FakeTensorMode it enters)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(isinstance(t, type) and issubclass(t, DTensor) for t in types):
            return NotImplemented
        if func._overloadpacket in self.counter.flop_registry and _propagating():
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


class LocalFlopCounter(FlopCounterMode):
    """FlopCounterMode counting this rank's own FLOPs (its local shards' shapes), in total
    only: its module tracker is left out, because it trips over CommDebugMode's when both
    register module hooks (torch 2.13: an IndexError in CommDebugMode's tracker)."""

    def __init__(self):
        super().__init__(display=False)

    def __enter__(self):
        self.flop_counts.clear()
        self.mode = _LocalFlops(self)
        self.mode.__enter__()
        return self

    def __exit__(self, *args):
        mode, self.mode = self.mode, None
        return mode.__exit__(*args)
