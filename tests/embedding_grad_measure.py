"""The vocab-parallel embedding's gradient under FSDP2 × TP, measured on the CPU: one rank of
8 (dp 2 × tp 4) on torch's fake process group (nothing is communicated; every local op runs
on real CPU tensors, so each has the shape and bytes it has on a GPU rank). Run in a fresh
interpreter by tests/test_embedding_grad.py (one process group per process):

    python tests/embedding_grad_measure.py   # prints one JSON object

The embedding is torchtitan's tok_embeddings as its apply_tp parallelizes it
(parallelize_llama.py at 9dec370: RowwiseParallel(input_layouts=Replicate(),
output_layouts=Shard(1))) under fully_shard with torchtitan's
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32). Its output (sequence-sharded,
bf16) goes into an fp32 sum of squares, standing for the blocks above it.

  * "backward": one backward with gradient sync (no pipelining): every op's outputs
    (shape, dtype) in order, and the live bytes after it over the live bytes before the
    backward (torch's FSDPMemTracker: every storage an op makes, freed when it dies).
  * "no_sync": three micro-batches, the first two under set_requires_gradient_sync(False)
    (as torch's PipelineStage runs every backward but the last): FSDP2's accumulated
    gradient after each (its DTensor placements, local shape, dtype), and the parameter's
    sharded gradient after the last.
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode

DP, TP, V, D, B, T = 2, 4, 4096, 64, 2, 32
CPU = torch.device("cpu")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, D)

    def forward(self, x):
        return self.tok_embeddings(x)


def _model(mesh) -> Model:
    torch.manual_seed(0)
    m = Model()
    parallelize_module(m, mesh["tp"], {"tok_embeddings": RowwiseParallel(
        input_layouts=Replicate(), output_layouts=Shard(1))})
    fully_shard(m, mesh=mesh["dp"], mp_policy=MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    return m


def _ops(log: list, current=None):
    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else [out]
            log.append({"op": str(func),
                        "outputs": [[list(o.shape), str(o.dtype).removeprefix("torch.")]
                                    for o in outs if isinstance(o, torch.Tensor)],
                        "live": current() if current else None})
            return out
    return Log()


def backward(mesh) -> dict:
    m = _model(mesh)
    x = torch.randint(0, V, (B, T))
    mt = FSDPMemTracker(m)
    log: list = []
    with mt:
        y = m(x).float().pow(2).sum()
        before = mt.get_tracker_snapshot("current")[CPU]["Total"]
        with _ops(log, lambda: mt.get_tracker_snapshot("current")[CPU]["Total"] - before):
            y.backward()
    return {"ops": log}


def no_sync(mesh) -> dict:
    m = _model(mesh)
    x = torch.randint(0, V, (B, T))
    m.set_requires_gradient_sync(False)
    out = {"accumulated": []}
    (fsdp_param,) = m._get_fsdp_state()._fsdp_param_group.fsdp_params
    for i in range(3):
        if i == 2:
            m.set_requires_gradient_sync(True)
        m(x).float().pow(2).sum().backward()
        acc = fsdp_param.unsharded_accumulated_grad
        out["accumulated"].append(None if acc is None else {
            "placements": [str(p) for p in acc.placements],
            "local_shape": list(acc.to_local().shape),
            "dtype": str(acc.dtype).removeprefix("torch.")})
    g = m.tok_embeddings.weight.grad
    out["sharded_grad"] = {"local_shape": list(g.to_local().shape),
                           "dtype": str(g.dtype).removeprefix("torch.")}
    return out


def main() -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=DP * TP)
    try:
        mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"))
        out = {"shape": {"dp": DP, "tp": TP, "V": V, "d": D, "b": B, "T": T},
               "backward": backward(mesh), "no_sync": no_sync(mesh)}
    finally:
        dist.destroy_process_group()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
