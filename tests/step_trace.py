"""The allocations and frees of model/'s training steps, in program order, without memory:
FakeTensorMode (torch._subclasses.fake_tensor) gives every op its output's size and dtype,
a dispatch mode notes each new storage and a weakref finalizer its free. The protocol is
benchmarks/gpu_fp8_recipes.py's on the H200: TransformerLM.from_config, fp32 parameters,
AdamW(foreach=True, lr 1e-4, weight_decay 0.1), bf16 autocast over the forward and
F.cross_entropy, zero_grad(set_to_none=True), two steps (the second after
reset_peak_memory_stats: the "step2" mark).

`offload`: torch.autograd.graph.save_on_cpu as torch 2.13's autograd/graph.py runs it on
one stream: pack_to_cpu copies each saved tensor to a host tensor (the device tensor is
freed when the forward drops it), unpack_from_cpu brings it back with tensor.to(device): a
new device tensor of its size. Fake tensors have no host copy, so the hooks here drop the
device tensor and make a new one of its size and dtype: the same device allocations.

CPU autocast, not CUDA's: F.cross_entropy is on the CPU's fp32 list (the logits' float32
copy, then log_softmax in float32) where CUDA runs log_softmax in bf16 and casts its result
(accounting/planning/cuda_peak.py LOSS). AdamW's bias corrections read each step counter
with .item(), which a fake tensor has no value for: they are given 1 (no memory)."""
from __future__ import annotations

import weakref
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

MARK = "step2"


class Events(TorchDispatchMode):
    """("a", key, bytes) when a storage is made, ("f", key) when it goes."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, int] = {}
        self.events: list[tuple] = []
        self.count = 0

    def _add(self, t) -> None:
        s = t.untyped_storage()
        if s._cdata in self.live or not s.nbytes():
            return
        self.count += 1
        self.live[s._cdata] = self.count
        self.events.append(("a", self.count, s.nbytes()))
        weakref.finalize(s, self._gone, s._cdata)

    def _gone(self, cdata) -> None:
        key = self.live.pop(cdata, None)
        if key is not None:
            self.events.append(("f", key))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._add(t)
        return out


def trace(config, T: int, B: int, offload: bool = False) -> list[tuple]:
    """The events of two steps of `config` at T tokens, batch B (the "step2" mark between)."""
    from unittest import mock

    import torch.optim.adam as adam
    from model import TransformerLM
    config = replace(config, attention="sdpa")
    V = config.vocab_size
    ev = Events()
    with mock.patch.object(adam, "_get_value", lambda x: 1.0), \
            mock.patch.object(torch.nn.init, "trunc_normal_", lambda t, *a, **k: t), \
            FakeTensorMode(), ev:
        model = TransformerLM.from_config(config, device="cpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
        ids, targets = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))

        def pack(t):
            return t.shape, t.dtype

        def unpack(packed):
            return torch.empty(packed[0], dtype=packed[1])

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                if offload:
                    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                        loss = F.cross_entropy(model(ids).reshape(-1, V), targets.reshape(-1))
                else:
                    loss = F.cross_entropy(model(ids).reshape(-1, V), targets.reshape(-1))
            loss.backward()
            del loss
            opt.step()
        step()
        ev.events.append(("mark", MARK))
        step()
    return ev.events


def replay(events):
    """The allocator (accounting/planning/allocator.py Replay) after the events, its peaks
    reset at the mark (reset_peak_memory_stats), and the reserved bytes at the mark."""
    from accounting.planning.allocator import Replay
    r, at_mark = Replay(), None
    for e in events:
        if e[0] == "a":
            r.alloc(e[1], e[2])
        elif e[0] == "f":
            if e[1] in r.at:
                r.free(e[1])
        else:
            at_mark = r.reserved
            r.reset_peaks()
    return r, at_mark
