"""Trace's ops that are one library kernel doing several things (accounting/ledger/trace.py):
a unit triangular solve (torch.linalg.solve_triangular) and the
fused attention kernel (F.scaled_dot_product_attention). A mixin of Trace: each uses its
bookkeeping (_tick, _autocast, _reads, _saves, name)."""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace_values import Sym
from accounting.units import FP32


class KernelOps:
    # ---- multi-op kernels -----------------------------------------------------------------
    def read_in_place(self, x: Sym, label: str, saved_if: str, by: str) -> None:
        """x, read in place by the op `by` where a size is 1 (saved_if: that 0/1 symbol):
        autograd then keeps x's whole storage (elsewhere the op saves a copy)."""
        self.name(x, label, saved_if=saved_if)
        self._saves(x, by)

    def solve(self, a: Sym, b: Sym, record: R.Matmul, label: str) -> Sym:
        """torch.linalg.solve_triangular(a, b, upper=False, unitriangular=True): FLOPs the
        record's; saves a and its result (linalg_solve_triangular_backward takes both)."""
        self._tick += 1
        self.matmuls.append(record)
        if self._region is not None:
            self._region_matmuls.append((self._tick, record))
        desc = f"linalg_solve_triangular ({record.name})"
        (a2, b2), dtype = self._autocast("solve", a, b)
        self._reads(desc, a2, b2)
        y = self.name(Sym(b.shape, dtype, a.grad or b.grad), label)
        if a2.grad or b2.grad:
            self._saves(a2, desc)
            self._saves(y, desc, after=True)
        return y

    def fused_attention(self, q: Sym, k: Sym, v: Sym, records: tuple[R.Matmul, R.Matmul],
                        out_shape: tuple[str, ...], lse_shape: tuple[str, ...],
                        mask: Sym | None = None) -> Sym:
        """F.scaled_dot_product_attention(q, k, v, is_causal=True): one kernel, its two
        matmuls' records, no separate non-matmul op; saves q, k, v, the output and the
        per-row log-sum-exp (float32)."""
        self._tick += 1
        for r in records:
            self.matmuls.append(r)
            if self._region is not None:
                self._region_matmuls.append((self._tick, r))
        (q, k, v, mask), dtype = self._autocast("sdpa", q, k, v, mask)
        desc = "fused attention kernel"
        self._reads(desc, q, k, v)
        # the kernel lays its output out as q is laid out (heads-major, or a permuted view)
        out = self.name(Sym(out_shape, dtype, contiguous=q.contiguous),
                        "attention output (fused kernel)", "attention-weighted values")
        lse = self.name(Sym(lse_shape, FP32), "log-sum-exp per query row")
        for x in (q, k, v) + ((mask,) if mask is not None else ()):
            self._saves(x, desc)
        for x in (out, lse):
            self._saves(x, desc, after=True)
            if self.sac_mms is not None:  # the policy's save list has SDPA's outputs
                self._saves(x, f"SAC policy: {desc}", after=True)
        return out
