"""Measurements of torchtitan's tensor parallelism on the CPU, one TP rank of 4 on torch's fake
process group (torch.testing._internal.distributed.fake_pg: nothing is communicated; every
local op runs on real CPU tensors, so each tensor has the shape and bytes it has on a GPU
rank; tests/titan_fake_tp.py, with the saved-tensor walk). Run in a fresh interpreter by
tests/test_titan_tp.py (one process group per process):

    python tests/titan_tp_measure.py   # prints one JSON object

  * "loss": torchtitan's loss (train.py at 9dec370: F.cross_entropy(pred.flatten(0, 1)
    .float(), labels), `del pred` before the backward) on vocab-sharded logits under torch's
    loss_parallel, and the same loss on one rank's unsharded logits (no TP), each measured
    with torch's MemTracker (torch/distributed/_tools/mem_tracker.py: every storage an op
    makes, live bytes and their peak): the peak of the forward and of the whole step.
  * "block": a torchtitan block (tests/test_stack_implementations.py _titan_block's ops,
    its norms and sublayers as modules so that apply_tp's plan can name them) parallelized
    as torchtitan's apply_tp does it (parallelize_llama.py at 9dec370: SequenceParallel on
    the norms, PrepareModuleInput gathering each sublayer's input, Colwise wq/wk/wv/w1/w3,
    Rowwise(output_layouts=Shard(1)) wo/w2): the bytes its forward saves, every storage
    once (saved_tensors_hooks), the block's input, parameters and freqs_cis left out; and
    with torchao installed the same block under torchtitan's float8 TP (its linears
    torchao's Float8Linear, emulated on the CPU; Float8ColwiseParallel,
    Float8RowwiseParallel, PrepareFloat8ModuleInput), a Float8TrainingTensor counted by its
    fp8 data's storage.
"""
from __future__ import annotations

import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               loss_parallel, parallelize_module)

from test_stack_implementations import _FusedRMSNorm  # aten::_fused_rms_norm's CUDA saves
from titan_fake_tp import TP, fake_mesh, freqs_cis, rope, saved_storages
B, T, V, D = 2, 32, 1000, 16  # the loss: 2 sequences of 32 tokens, V/tp = 250, LM head input 16


def _peak(mt: MemTracker) -> int:
    return mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


def loss(mesh) -> dict:
    """Peak live bytes of torchtitan's loss step from the LM head's matmul on: its logits made
    inside the tracker (bf16, as the head's output), nothing else holding them."""
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, V, (B * T,), generator=g)
    out = {}
    for name, cols in (("loss_parallel", V // TP), ("plain", V // TP)):
        h = torch.randn(B * T, D, dtype=torch.bfloat16, generator=g, requires_grad=True)
        w = torch.randn(cols, D, dtype=torch.bfloat16, generator=g, requires_grad=True)
        mt = MemTracker()
        with mt:
            local = h @ w.t()
            if name == "loss_parallel":
                with loss_parallel():
                    pred = DTensor.from_local(local, mesh, [Shard(-1)], run_check=False)
                    del local
                    lv = F.cross_entropy(pred.float(), labels)
                    forward = _peak(mt)
                    del pred
                    lv.backward()
            else:  # one rank's logits as if unsharded: the F.cross_entropy rule (peak.py)
                pred, labels_local = local, labels % cols
                del local
                lv = F.cross_entropy(pred.float(), labels_local)
                forward = _peak(mt)
                del pred
                lv.backward()
        out[name] = {"forward_peak": forward, "peak": _peak(mt)}
    out["logits_fp32"] = B * T * (V // TP) * 4  # one fp32 tensor the size of the rank's logits
    return out


def build_block(mesh, h: int, a: int, g: int, d: int, f: int, t: int, b: int,
                float8: bool = False):
    """(the parallelized block, its freqs_cis, an input sequence shard). `float8`: its
    linears torchao's Float8Linear (emulated on the CPU) under torchtitan's float8 TP
    styles (Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput)."""
    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h))

        def forward(self, x):
            return _FusedRMSNorm.apply(x, self.weight)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk = nn.Linear(h, a * d, bias=False), nn.Linear(h, g * d, bias=False)
            self.wv, self.wo = nn.Linear(h, g * d, bias=False), nn.Linear(a * d, h, bias=False)

        def forward(self, y, fc):  # local heads: view(bs, seqlen, -1, head_dim), as torchtitan
            q = rope(self.wq(y).view(b, t, -1, d), fc, t, d)
            k = rope(self.wk(y).view(b, t, -1, d), fc, t, d)
            v = self.wv(y).view(b, t, -1, d)
            rep = q.shape[2] // k.shape[2]  # repeat_kv: unsqueeze, expand, reshape
            k = k.unsqueeze(3).expand(*k.shape[:3], rep, d).reshape(b, t, -1, d)
            v = v.unsqueeze(3).expand(*v.shape[:3], rep, d).reshape(b, t, -1, d)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            return self.wo(o.transpose(1, 2).contiguous().view(b, t, -1))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w3 = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
            self.w2 = nn.Linear(f, h, bias=False)

        def forward(self, y):
            return self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.attention = Norm(), Attention()
            self.ffn_norm, self.feed_forward = Norm(), FeedForward()

        def forward(self, x, fc):
            x = x + self.attention(self.attention_norm(x), fc)
            return x + self.feed_forward(self.ffn_norm(x))

    blk = Block().to(torch.bfloat16)  # FSDP2's MixedPrecisionPolicy(param_dtype=bf16)
    colwise, rowwise, prepare = ColwiseParallel, RowwiseParallel, PrepareModuleInput
    if float8:  # torchtitan's apply_tp with enable_float8 (parallelize_llama.py at 9dec370)
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel,
                                                           Float8RowwiseParallel,
                                                           PrepareFloat8ModuleInput)
        convert_to_float8_training(blk, config=Float8LinearConfig(emulate=True))
        colwise, rowwise, prepare = Float8ColwiseParallel, Float8RowwiseParallel, \
            PrepareFloat8ModuleInput
    parallelize_module(blk, mesh, {
        "attention_norm": SequenceParallel(),
        "attention": prepare(input_layouts=(Shard(1), None),
                             desired_input_layouts=(Replicate(), None)),
        "attention.wq": colwise(), "attention.wk": colwise(),
        "attention.wv": colwise(), "attention.wo": rowwise(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": colwise(), "feed_forward.w3": colwise(),
        "feed_forward.w2": rowwise(output_layouts=Shard(1))})
    fc = freqs_cis(d, t)

    # the block's input: the embedding's (or the previous block's) sequence shard
    x = torch.randn(b, t // TP, h, dtype=torch.bfloat16, requires_grad=True)
    return blk, fc, x


def block(mesh, *shape, float8: bool = False) -> dict:
    blk, fc, x = build_block(mesh, *shape, float8=float8)
    seen = saved_storages(lambda: blk(x, fc), [*blk.parameters(), fc, x])
    return {"saved": sum(v[0] for v in seen.values()), "tensors": len(seen)}


def main() -> None:
    with fake_mesh() as mesh:
        shapes = {"gqa": (64, 16, 8, 8, 96, 32, 2),  # 4 query heads, 2 KV heads a rank
                  "one_kv_head": (64, 8, 4, 8, 96, 32, 2)}  # 2 query heads, 1 KV head a rank
        out = {"loss": loss(mesh), "block": {k: block(mesh, *s) for k, s in shapes.items()}}
        try:  # torchao's Float8Linear, emulated (the hf extra installs torchao)
            import torchao.float8  # noqa: F401
        except ImportError:
            pass
        else:
            out["block"]["float8"] = block(mesh, *shapes["gqa"], float8=True)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
