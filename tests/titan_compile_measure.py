"""torch.compile of a torchtitan TP block on the CPU (issue 44, Table 4's rows): what
AOTAutograd's min-cut partitioner (torch/_functorch/partitioners.py, torch 2.13) saves of a
block whose tensor-parallel collectives sit inside its activation-checkpoint region, and
which collectives its backward graph runs. One rank of 4 on torch's fake process group
(tests/titan_fake_tp.py, with the saved-tensor walk), in a fresh interpreter
(tests/test_titan_tp.py runs it):

    python tests/titan_compile_measure.py   # prints one JSON object

The block is torchtitan's Llama block under apply_tp's plan (parallelize_llama.py at
9dec370: SequenceParallel norms, each sublayer's input all-gathered once, Colwise
wq/wk/wv/w1/w3, Rowwise(output_layouts=Shard(1)) wo/w2) written on each rank's local
tensors with torch's functional collectives, the ops DTensor's plan dispatches to
(all_gather_into_tensor, reduce_scatter_tensor, each with its autograd): a DTensor block
inside torch.utils.checkpoint does not compile on the fake backend in torch 2.13
(AOTAutograd hands a DeviceMesh to save_from_forward: "expected all
tensors_saved_with_vc_check to be Tensors"). Without the checkpoint it does, and
"dtensor_none" is tests/titan_tp_measure.py's DTensor block (apply_tp's own plan) compiled
so: the check that this block stands for it. Its norm is
the stack ledger's fused RMSNorm (tests/test_stack_implementations.py _FusedRMSNorm);
torchtitan 9dec370 compiles its plain "rmsnorm" (fused_rmsnorm is refused with compile),
whose compiled partition saves the same bytes (its input and fp32 rstd; measured alike
with that norm in place). Compiled as torchtitan does it, inside a non-reentrant checkpoint
(ptd_checkpoint_wrapper(preserve_rng_state=False), then torch.compile(fullgraph=True)),
with the partitioner inductor uses and the graphs run as traced (tests/test_compile_memory.py
does the same for the block without TP):

  * "none", "selective" (torchtitan's per-op SAC policy, tests/test_compile_memory.py
    _titan_policy: reduce_scatter_tensor in its save list) and "full": the bytes the
    compiled forward saves beyond the block's input and parameters (saved_tensors_hooks,
    every storage once), and the functional collectives of the forward and backward
    graphs. The block's ops are tests/test_stack_implementations.py _titan_block's (the
    torchtitan stack's ledger), so the plan's per-block bytes under --compile are held to
    these (tests/test_titan_tp.py).
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from titan_fake_tp import TP, fake_mesh, freqs_cis, rope, saved_storages

H, A, KV, D, FF, T, B = 64, 16, 8, 8, 96, 32, 2  # tests/titan_tp_measure.py's "gqa" shape


def _weights():
    g = torch.Generator().manual_seed(0)
    a, kv, f = A // TP, KV // TP, FF // TP

    def p(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16).requires_grad_()
    return dict(n1=p(H), n2=p(H), wq=p(a * D, H), wk=p(kv * D, H), wv=p(kv * D, H),
                wo=p(H, a * D), w1=p(f, H), w3=p(f, H), w2=p(H, f))


def _block(w, fc, group):
    """tests/test_stack_implementations.py _titan_block's ops (the torchtitan stack's ledger:
    its fused RMSNorm's saved input and rstd, RoPE, repeat_kv's copies, SDPA) on one TP
    rank: the norms on the sequence shard, each sublayer's input gathered, a/tp and g/tp
    heads, d_ff/tp columns, the row-parallel outputs reduce-scattered."""
    from test_stack_implementations import _FusedRMSNorm
    a, kv, rep = A // TP, KV // TP, A // KV

    def gather(x):  # PrepareModuleInput: Shard(1) -> Replicate()
        return funcol.all_gather_tensor_autograd(x, gather_dim=1, group=group)

    def scatter(x):  # RowwiseParallel(output_layouts=Shard(1))
        return funcol.reduce_scatter_tensor_autograd(x, "sum", scatter_dim=1, group=group)

    def block(x):
        y = gather(_FusedRMSNorm.apply(x, w["n1"]))
        q = rope((y @ w["wq"].t()).view(B, T, a, D), fc, T, D)
        k = rope((y @ w["wk"].t()).view(B, T, kv, D), fc, T, D)
        v = (y @ w["wv"].t()).view(B, T, kv, D)
        k = k.unsqueeze(3).expand(B, T, kv, rep, D).reshape(B, T, a, D)
        v = v.unsqueeze(3).expand(B, T, kv, rep, D).reshape(B, T, a, D)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + scatter(o.transpose(1, 2).contiguous().view(B, T, a * D) @ w["wo"].t())
        z = gather(_FusedRMSNorm.apply(x, w["n2"]))
        return x + scatter((F.silu(z @ w["w1"].t()) * (z @ w["w3"].t())) @ w["w2"].t())
    return block


def _collectives(gm) -> list[list]:
    return [[n.target._opname, list(n.meta["val"].shape)] for n in gm.graph.nodes
            if n.op == "call_function" and getattr(n.target, "namespace", "") == "_c10d_functional"
            and n.target._opname != "wait_tensor"]


def measure(group, recompute: str) -> dict:
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch.utils.checkpoint import checkpoint
    from test_compile_memory import _titan_policy  # torchtitan's per-op SAC policy
    torch._dynamo.reset()
    w, fc = _weights(), freqs_cis(D, T)
    block = _block(w, fc, group)

    def fn(x):
        if recompute == "none":
            return block(x)
        return checkpoint(block, x, use_reentrant=False, preserve_rng_state=False,
                          **({"context_fn": _titan_policy} if recompute == "selective" else {}))
    graphs = {}
    backend = aot_autograd(fw_compiler=lambda gm, _: graphs.setdefault("forward", gm),
                           bw_compiler=lambda gm, _: graphs.setdefault("backward", gm),
                           partition_fn=min_cut_rematerialization_partition)
    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(B, T // TP, H, dtype=torch.bfloat16, requires_grad=True)
    compiled(x).sum().backward()  # compiled outside the hooks
    seen = saved_storages(lambda: compiled(x), [x, fc, *w.values()])
    return {"saved": sum(v[0] for v in seen.values()), "tensors": sorted(seen.values()),
            "forward": _collectives(graphs["forward"]),
            "backward": _collectives(graphs["backward"])}


def measure_dtensor(mesh) -> int:
    """The bytes the DTensor block of tests/titan_tp_measure.py (apply_tp's own plan over
    torchtitan's modules) saves compiled without checkpointing, where DTensor compiles: the
    check that the functional-collective block above stands for it."""
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    import titan_tp_measure as TPM
    torch._dynamo.reset()
    blk, fc, x = TPM.build_block(mesh, H, A, KV, D, FF, T, B)
    backend = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm,
                           partition_fn=min_cut_rematerialization_partition)
    compiled = torch.compile(blk, backend=backend, fullgraph=True)
    compiled(x, fc).sum().backward()  # compiled outside the hooks
    seen = saved_storages(lambda: compiled(x, fc), [x, fc, *blk.parameters()])
    return sum(v[0] for v in seen.values())


def main() -> None:
    with fake_mesh() as mesh:
        group = mesh.get_group()
        out = {r: measure(group, r) for r in ("none", "selective", "full")}
        out["dtensor_none"] = measure_dtensor(mesh)
        out["rng_state_bytes"] = torch.get_rng_state().nbytes
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
