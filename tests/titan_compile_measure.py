"""torch.compile of a torchtitan TP block on the CPU (issue 44, Table 4's rows): what
AOTAutograd's min-cut partitioner (torch/_functorch/partitioners.py, torch 2.13) saves of a
block whose tensor-parallel collectives sit inside its activation-checkpoint region, and
which collectives its backward graph runs. One rank of 4 on torch's fake process group, in
a fresh interpreter (tests/test_titan_tp.py runs it):

    python tests/titan_compile_measure.py   # prints one JSON object

The block is torchtitan's Llama block under apply_tp's plan (parallelize_llama.py at
9dec370: SequenceParallel norms, each sublayer's input all-gathered once, Colwise
wq/wk/wv/w1/w3, Rowwise(output_layouts=Shard(1)) wo/w2) written on each rank's local
tensors with torch's functional collectives, the ops DTensor's plan dispatches to
(all_gather_into_tensor, reduce_scatter_tensor, each with its autograd): DTensor itself
does not compile on the fake backend in torch 2.13 (AOTAutograd hands a DeviceMesh to
save_from_forward: "expected all tensors_saved_with_vc_check to be Tensors"). Its norm is
torchtitan's plain RMSNorm (norm_type "rmsnorm": fused_rmsnorm is refused with compile at
9dec370). Compiled as torchtitan does it, inside a non-reentrant checkpoint
(ptd_checkpoint_wrapper(preserve_rng_state=False), then torch.compile(fullgraph=True)),
with the partitioner inductor uses and the graphs run as traced (tests/test_compile_memory.py
does the same for the block without TP):

  * "full": checkpointed; the bytes the compiled forward saves beyond the block's input and
    parameters (saved_tensors_hooks, every storage once), and the functional collectives
    of the forward and backward graphs;
  * "none": not checkpointed; the saved tensors' shapes (the gathered inputs among them).
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

TP = 4
H, A, KV, D, FF, T, B = 64, 16, 8, 8, 96, 32, 2  # tests/titan_tp_measure.py's "gqa" shape


def _weights():
    g = torch.Generator().manual_seed(0)
    a, kv, f = A // TP, KV // TP, FF // TP

    def p(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16).requires_grad_()
    return dict(n1=p(H), n2=p(H), wq=p(a * D, H), wk=p(kv * D, H), wv=p(kv * D, H),
                wo=p(H, a * D), w1=p(f, H), w3=p(f, H), w2=p(H, f))


def _block(w, group):
    a, kv = A // TP, KV // TP

    def norm(x, weight):  # torchtitan's RMSNorm (models/norms.py at 9dec370)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * weight

    def gather(x):  # PrepareModuleInput: Shard(1) -> Replicate()
        return funcol.all_gather_tensor_autograd(x, gather_dim=1, group=group)

    def scatter(x):  # RowwiseParallel(output_layouts=Shard(1))
        return funcol.reduce_scatter_tensor_autograd(x, "sum", scatter_dim=1, group=group)

    def block(x):
        y = gather(norm(x, w["n1"]))
        q = (y @ w["wq"].t()).view(B, T, a, D).transpose(1, 2)
        k = (y @ w["wk"].t()).view(B, T, kv, D).transpose(1, 2).repeat_interleave(a // kv, 1)
        v = (y @ w["wv"].t()).view(B, T, kv, D).transpose(1, 2).repeat_interleave(a // kv, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + scatter(o.transpose(1, 2).reshape(B, T, -1) @ w["wo"].t())
        z = gather(norm(x, w["n2"]))
        return x + scatter((F.silu(z @ w["w1"].t()) * (z @ w["w3"].t())) @ w["w2"].t())
    return block


def _collectives(gm) -> list[list]:
    return [[n.target._opname, list(n.meta["val"].shape)] for n in gm.graph.nodes
            if n.op == "call_function" and getattr(n.target, "namespace", "") == "_c10d_functional"
            and n.target._opname != "wait_tensor"]


def measure(group, checkpointed: bool) -> dict:
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch.utils.checkpoint import checkpoint
    torch._dynamo.reset()
    w = _weights()
    block = _block(w, group)

    def fn(x):
        if checkpointed:
            return checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)
        return block(x)
    graphs = {}
    backend = aot_autograd(fw_compiler=lambda gm, _: graphs.setdefault("forward", gm),
                           bw_compiler=lambda gm, _: graphs.setdefault("backward", gm),
                           partition_fn=min_cut_rematerialization_partition)
    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(B, T // TP, H, dtype=torch.bfloat16, requires_grad=True)
    owned = {t.untyped_storage().data_ptr() for t in [x, *w.values()]}
    seen = {}

    def pack(z):
        s = z.untyped_storage()
        if s.data_ptr() not in owned:
            seen[s.data_ptr()] = [s.nbytes(), list(z.shape), str(z.dtype)]
        return z
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda z: z):
        y = compiled(x)
    y.sum().backward()
    return {"saved": sum(v[0] for v in seen.values()), "tensors": sorted(seen.values()),
            "forward": _collectives(graphs["forward"]),
            "backward": _collectives(graphs["backward"])}


def main() -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=TP)
    try:
        group = init_device_mesh("cpu", (TP,)).get_group()
        out = {"full": measure(group, True), "none": measure(group, False),
               "rng_state_bytes": torch.get_rng_state().numel()}
    finally:
        dist.destroy_process_group()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
