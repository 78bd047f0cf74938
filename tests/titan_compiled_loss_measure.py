"""torchtitan's compiled loss under loss_parallel (issue 44): cross_entropy_loss
(components/loss.py at e7c0cae, verbatim below) under torch.compile, on one TP rank of 4's
vocab-sharded bf16 logits (a DTensor, Shard(-1)) inside torch's loss_parallel(), on torch's
fake process group, in a fresh interpreter (tests/test_compiled_whole_loss.py runs it):

    python tests/titan_compiled_loss_measure.py   # prints one JSON object

For each shape: the bytes the compiled graph saves for the backward (saved-tensor hooks,
every storage once), and the buffers each graph allocates, replayed from inductor's output
code (torch._inductor.utils.run_and_get_code: `bufN = empty_strided_cpu(...)`, `del bufN`,
a buffer reused under another name) for the bytes live at once at its peak. inductor's
buffers are allocated outside the dispatcher, where a TorchDispatchMode or torch's
MemTracker does not see them."""
from __future__ import annotations

import json
import re

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import loss_parallel
from torch.testing._internal.distributed.fake_pg import FakeStore

TP = 4
SHAPES = ((2, 32, 1000), (1, 48, 2000))  # B, T, V (V/tp columns on this rank)


def cross_entropy_loss(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


_NEW = re.compile(r"^(buf\d+) = empty_strided_cpu\(\(([^)]*)\), \([^)]*\), torch\.(\w+)\)")
_REUSE = re.compile(r"^(buf\d+) = (buf\d+); del (buf\d+)\s+# reuse")
_DEL = re.compile(r"^del (buf\d+)$")


def live_peak(code: str) -> tuple[int, list[int]]:
    """(the peak of the bytes of the buffers a graph's `call` holds at once, every
    buffer's bytes) from its output code."""
    body = code[code.index("def call(self, args):"):]
    live, peak, sizes = {}, 0, []
    for line in (s.strip() for s in body.splitlines()):
        if m := _NEW.match(line):
            n = 1
            for d in filter(None, (x.strip() for x in m.group(2).split(","))):
                n *= int(d)
            live[m.group(1)] = n * torch.empty((), dtype=getattr(torch, m.group(3))).element_size()
            sizes.append(live[m.group(1)])
        elif m := _REUSE.match(line):
            live[m.group(1)] = live.pop(m.group(2))
        elif m := _DEL.match(line):
            live.pop(m.group(1), None)
        elif line.startswith("return"):
            break
        peak = max(peak, sum(live.values()))
    return peak, sizes


def measure(mesh, B: int, T: int, V: int) -> dict:
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    fn = torch.compile(cross_entropy_loss)
    g = torch.Generator().manual_seed(0)
    local = torch.randn(B, T, V // TP, generator=g).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, V, (B, T), generator=g)
    saved = {}

    def pack(t):
        if t.dim():
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def step():
        with loss_parallel():
            pred = DTensor.from_local(local, mesh, [Shard(-1)], run_check=False)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = fn(pred, labels)
            del pred
            loss.backward()
    forward, backward = run_and_get_code(step)[1]
    (fp, fs), (bp, bs) = live_peak(forward), live_peak(backward)
    return {"shape": [B, T, V], "logits_fp32": B * T * (V // TP) * 4,
            "saved": sorted(saved.values()), "forward_peak": fp, "forward_buffers": fs,
            "backward_peak": bp, "backward_buffers": bs}


def main() -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=TP)
    mesh = init_device_mesh("cpu", (TP,))
    print(json.dumps([measure(mesh, *s) for s in SHAPES]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
