"""Trace's ops that are one library kernel doing several things (accounting/ledger/trace.py):
a unit triangular solve (torch.linalg.solve_triangular), the
fused attention kernel (F.scaled_dot_product_attention) and an fp8 linear layer (torchao's
Float8Linear, Transformer Engine's te.Linear). A mixin of Trace: each uses its
bookkeeping (_tick, _autocast, _reads, _saves, name)."""
from __future__ import annotations

from dataclasses import replace

from accounting.ledger import autocast as AC, records as R
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
                        mask: Sym | None = None, mask_flag: str | None = "[T≥W]") -> Sym:
        """F.scaled_dot_product_attention(q, k, v, is_causal=True): one kernel, its two
        matmuls' records, no separate non-matmul op; saves q, k, v, the output and the
        per-row log-sum-exp (float32)."""
        self._tick += 1
        for r in records:
            self.matmuls.append(r)
            if self._region is not None:
                self._region_matmuls.append((self._tick, r))
        (q, k, v, mask), dtype = self._autocast("sdpa", q, k, v, mask)
        if mask is not None and mask.dtype == R.BOOL:  # torch converts a bool attn_mask to
            # an additive one of the query's dtype (attention.cpp convert_boolean_attn_mask)
            mask = self.name(Sym(mask.shape, dtype), "attention mask (additive, per call)",
                             saved_if=mask_flag)  # (transformers' sliding or chunked
            # layers only: their masks from T = W, or T = C_a, on)
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

    def _fp8_linear(self, x: Sym, w: Sym, record: R.Matmul) -> str:
        """A linear layer under fp8 training: its three GEMMs in fp8. What it saves:
        torchao's Float8Linear its input as it reaches the module (cast to the autocast
        dtype under CUDA autocast) and the weight parameter itself, no copy
        (torchao/float8/float8_linear.py: Float8Linear.forward, input.to(autocast dtype);
        matmul_with_hp_or_float8_args.forward, ctx.save_for_backward(input_hp, weight_hp_t));
        Transformer Engine's te.Linear an fp8 copy of its input (1 byte an element; the
        transposed copy inputmat_t, or inputmat under sequence parallelism: one of them)
        and the parameter (transformer_engine/pytorch/module/linear.py _Linear.forward,
        ctx.save_for_backward(saved_inputmat, saved_inputmat_t, weight, ..., weight_t_fp8)):
        its fp8 weight copies are TE's cached workspaces, held across micro-batches and
        counted as model state (accounting/planning/fp8.py), not here."""
        self.matmuls.append(record)
        if self._region is not None:
            self._region_matmuls.append((self._tick, record))
        desc = f"fp8 linear ({record.name})"
        if self.fp8 == AC.TORCHAO and self.autocast != "cuda":
            # Float8Linear casts its input to the GPU's autocast dtype only (torch.
            # is_autocast_enabled(), torch.get_autocast_gpu_dtype()); under the CPU's
            # autocast its input stays as it came, its output in the autocast dtype
            x2, dtype = x, (AC.LOW_DTYPE if self.autocast else x.dtype)
        else:
            (x2,), dtype = self._autocast("bmm", x)  # autocast's bf16 copy of the input only
        self._reads(desc, x2, w)
        saved = self.cast(x2, AC.FP8_SAVED_DTYPE) if self.fp8 == AC.TE else x2
        if self.fp8 == AC.TE and self.megatron:
            # Megatron fuses the linears that read one input into one TE module (linear_qkv:
            # Q, K, V; linear_fc1: SwiGLU's gate and up), which quantizes that input once
            saved = self._fp8_inputs.setdefault(x2.storage, saved)
        if w.grad:
            self._saves(saved, desc)
        name = self.tied.get(w.param, w.param)
        self.params = [replace(p, matmul_weight=True) if p.name == name else p
                       for p in self.params]
        return dtype
