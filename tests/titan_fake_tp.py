"""What tests/titan_tp_measure.py and tests/titan_compile_measure.py share: one TP rank of 4
on torch's fake process group (torch/testing/_internal/distributed/fake_pg.py: nothing is
communicated; every local op runs on real CPU tensors, so each tensor has the shape and bytes
it has on a GPU rank), torchtitan's freqs_cis and apply_rotary_emb (models/llama3/model/
model.py at 9dec370), and the saved-tensor measurement: every storage autograd saves in a
forward (saved_tensors_hooks), each once, the ones the caller owns left out. Imported by
the two measurement scripts, each run in a fresh interpreter (one process group a process)."""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed.fake_pg import FakeStore

TP = 4


@contextmanager
def fake_mesh():
    """Rank 0 of TP on the fake process group: its one-dimensional CPU device mesh."""
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=TP)
    try:
        yield init_device_mesh("cpu", (TP,))
    finally:
        dist.destroy_process_group()


def freqs_cis(d: int, t: int):
    """torchtitan's precompute_freqs_cis for head dim d and t positions: complex64."""
    freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
    angles = torch.outer(torch.arange(t).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def rope(x, fc, t: int, d: int):
    """torchtitan's apply_rotary_emb on x (b, t, heads, d)."""
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_ * fc.view(1, t, 1, d // 2)).flatten(3).type_as(x)


def storage_of(x):
    """The storage holding a tensor's bytes: a DTensor's local tensor's, a
    Float8TrainingTensor's fp8 data's (torchao: its `_data`)."""
    x = x._local_tensor if isinstance(x, DTensor) else x
    return (x._data if hasattr(x, "_data") else x).untyped_storage()


def saved_storages(forward, owned) -> dict:
    """{storage pointer: [bytes, shape, dtype]} of every storage autograd saves in forward()
    (saved_tensors_hooks), each once, the storages of the tensors `owned` (the block's
    input, parameters, freqs_cis) left out; then the backward of forward()'s output's sum
    (the saved tensors were usable)."""
    skip = {storage_of(t).data_ptr() for t in owned}
    seen = {}

    def pack(z):
        s = storage_of(z)
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = [s.nbytes(), list(z.shape), str(z.dtype)]
        return z
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda z: z):
        y = forward()
    y.sum().backward()
    return seen
