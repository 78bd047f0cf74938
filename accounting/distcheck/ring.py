"""Context parallelism on torch.distributed: torch's ring attention run on a gloo group of
cp CPU processes, its exchanged bytes recorded.

torch.distributed.tensor.experimental.context_parallel swaps the CUDA attention kernels
(aten._scaled_dot_product_flash / efficient / cudnn_attention and their backwards) for
ring versions (_context_parallel/_attention.py); on the CPU SDPA dispatches to
_scaled_dot_product_flash_attention_for_cpu, which it does not swap, so the context manager
itself needs CUDA. Its ring is a function of the kernel it is given,
_templated_ring_attention(_backward)(group, seq_dim, op, q, k, v, ...): this harness
calls it directly with the CPU flash kernel (same outputs: out and logsumexp forward;
dq, dk, dv backward) and records every buffer its rotaters exchange
(_AllToAllRotater / _AllGatherRotater.exchange_buffers):

  forward   cp − 1 rotations of the rank's K and V shard (cat(k, v), flattened);
  backward  cp − 1 rotations of K and V again, and cp rotations of the gradient of K and V
            (the last brings each home), in float32 (_cp_options.convert_to_f32, default);

and checks the ring's output and gradients against full attention on one process.

    ring_case(cp, heads, kv_heads, seq, d_k, dtype) -> per rank: bytes and calls by kind
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import weakref

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from accounting.distcheck.gloo import _end, _port


class _Live(TorchDispatchMode):
    """The bytes of the storages the ops under it create and are still alive, at their
    peak (each op's outputs; a kernel's own scratch is not seen), and what made them."""

    def __init__(self):
        super().__init__()
        self.sizes: dict[int, tuple[int, str]] = {}
        self.total = self.peak = 0
        self.at_peak: list = []

    def _gone(self, key):
        self.total -= self.sizes.pop(key)[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                try:
                    s = t.untyped_storage()
                    key = s.data_ptr()
                except RuntimeError:  # a wrapper subclass (a collective's async result)
                    continue
                if key and key not in self.sizes:
                    self.sizes[key] = (s.nbytes(), f"{func} {str(t.dtype)[6:]}")
                    self.total += s.nbytes()
                    weakref.finalize(s, self._gone, key)
        if self.total > self.peak:
            self.peak, self.at_peak = self.total, sorted(self.sizes.values())
        return out


def _ops():
    aten = torch.ops.aten

    def forward(query, key, value, is_causal=False, **_):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0,
                                                                    is_causal)
        return out, lse

    def backward(query, key, value, out, logsumexp, is_causal=False, grad_out=None, **_):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, query, key, value, out, logsumexp, 0.0, is_causal)
    return forward, backward


def _worker(rank: int, cp: int, port: int, shape: dict, out_dir: str) -> None:
    from torch.distributed.tensor.experimental._context_parallel import _attention as A
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=cp)
    A._cp_options.rotate_method = getattr(A._RotateMethod, shape["rotate"])
    A._cp_options.enable_load_balance = True  # torch's default: round-robin chunks
    sent: list[list] = []
    phase = ["forward"]
    gather, rotate = A._AllGatherRotater.exchange_buffers, A._AllToAllRotater.exchange_buffers

    def gathering(self, buf):
        if self._aggregated_buffer is None:  # one all-gather of the shard; later calls index it
            sent.append([phase[0], "all-gather", buf.numel() * buf.element_size(),
                         str(buf.dtype).removeprefix("torch.")])
        return gather(self, buf)

    def rotating(self, buf):
        sent.append([phase[0], "rotate", buf.numel() * buf.element_size(),
                     str(buf.dtype).removeprefix("torch.")])
        return rotate(self, buf)
    A._AllGatherRotater.exchange_buffers = gathering
    A._AllToAllRotater.exchange_buffers = rotating
    try:
        b, h, t, d = shape["batch"], shape["heads"], shape["seq"], shape["d_k"]
        dtype = getattr(torch, shape["dtype"])
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(b, h, t, d, generator=g, dtype=dtype) for _ in range(3))
        dout = torch.randn(b, h, t, d, generator=g, dtype=dtype)
        # the rank's shard: chunks r and 2·cp − 1 − r of 2·cp (torch's round-robin load
        # balancing of the causal mask's work)
        c = t // (2 * cp)
        sl = list(range(rank * c, (rank + 1) * c)) + list(range((2 * cp - 1 - rank) * c,
                                                                (2 * cp - rank) * c))
        fwd, bwd = _ops()
        group = dist.group.WORLD
        out, lse = A._templated_ring_attention(group, 2, fwd, q[:, :, sl], k[:, :, sl],
                                               v[:, :, sl], is_causal=True)[:2]
        phase[0] = "backward"
        args = [x[:, :, sl].contiguous() for x in (dout, q, k, v)]
        # What the backward allocates beyond its inputs, at its peak: the least of three runs.
        # A collective's buffer is freed when gloo's thread lets go of its work, which a busy
        # machine can delay past the next allocation (a peak a few buffers higher, once in
        # many runs); the least is the ring's own, with every buffer freed when the ring
        # is done with it. Only the first run's collectives are recorded.
        peaks = []
        for run in range(3):
            with _Live() as live:
                dq, dk, dv = A._templated_ring_attention_backward(
                    group, 2, bwd, args[0], "grad_out", *args[1:], out, lse, is_causal=True)[:3]
            peaks.append((live.peak, live.at_peak))
            phase[0] = "repeat"
            dist.barrier()
        sent = [x for x in sent if x[0] != "repeat"]
        peak, at_peak = min(peaks, key=lambda x: x[0])
        # against full attention on the whole sequence
        qf, kf, vf = (x.clone().requires_grad_() for x in (q, k, v))
        full = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
        full.backward(dout)
        tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
        agrees = all(torch.allclose(a.float(), e[:, :, sl].float(), **tol)
                     for a, e in ((out, full), (dq, qf.grad), (dk, kf.grad), (dv, vf.grad)))
        errs = [float((a.float() - e[:, :, sl].float()).abs().max().detach())
                for a, e in ((out, full), (dq, qf.grad), (dk, kf.grad), (dv, vf.grad))]
        Path(out_dir, f"{rank}.json").write_text(json.dumps(
            {"rank": rank, "sent": sent, "agrees_with_full_attention": agrees, "errs": errs,
             "kv_shard_bytes": 2 * k[:, :, sl].numel() * k.element_size(),
             "backward_peak_bytes": peak, "backward_peak_what": at_peak}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def ring_case(cp: int, heads: int = 2, seq: int = 16, d_k: int = 8, batch: int = 1,
              dtype: str = "float32", rotate: str = "ALL_GATHER") -> list[dict]:
    """Each rank's record: `sent` as [phase, 'all-gather' or 'rotate', bytes of the rank's
    buffer, dtype] per collective; torch's rotate_method ALL_GATHER (its default) or
    ALL_TO_ALL for K and V (the gradients always rotate)."""
    from accounting.runtime import fork
    shape = {"heads": heads, "seq": seq, "d_k": d_k, "batch": batch, "dtype": dtype,
             "rotate": rotate}
    with tempfile.TemporaryDirectory() as d:
        with fork.signals_held():
            group = mp.start_processes(_worker, args=(cp, _port(), shape, d), nprocs=cp,
                                       start_method="fork", join=False)
        try:
            while not group.join():
                pass
        finally:
            _end(group.processes)
        return [json.loads(Path(d, f"{r}.json").read_text()) for r in range(cp)]
