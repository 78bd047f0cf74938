"""The regions of a symbolic run (Trace's context managers, split from trace.py): module
scopes and repeated blocks, no_grad and parameters read only under it, ops outside the model,
and the regions run under torch.utils.checkpoint, whole or with a selective policy. Each
sets Trace's state for the ops run inside it and restores it after."""
from __future__ import annotations

from contextlib import contextmanager

from accounting.ledger.trace_values import Sym


class Regions:
    """Mixed into Trace (trace.py), whose fields these set: path, repeat, _untrained,
    _no_grad, _region and its matmuls, recomputed, sac_mms."""

    @contextmanager
    def scope(self, name: str):
        self.path.append(name)
        try:
            yield
        finally:
            self.path.pop()

    @contextmanager
    def block(self, symbol: str = "L"):
        """Inside: records repeat in every block of a kind (the symbol counts them: "L" when
        every block is alike), with block-relative module paths."""
        outer, self.path, self.repeat = self.path, [], symbol
        try:
            yield
        finally:
            self.path, self.repeat = outer, None

    @contextmanager
    def untrained(self):
        """Parameters read only under no_grad: no .grad, so AdamW keeps no state for them."""
        outer, self._untrained = self._untrained, True
        yield  # (a trace whose builder raises is dropped: nothing to restore)
        self._untrained = outer

    @contextmanager
    def no_grad(self):
        """torch.no_grad(): its ops save nothing and its matmuls have no backward."""
        outer, self._no_grad = self._no_grad, True
        try:
            yield
        finally:
            self._no_grad = outer

    @contextmanager
    def outside(self, name: str):
        """Ops that run outside the model's modules (the loss)."""
        outer, self.path = self.path, [name]
        try:
            yield
        finally:
            self.path = outer

    @contextmanager
    def recomputed_region(self, name: str, inputs: tuple[Sym, ...]):
        """torch.utils.checkpoint(fn, *inputs, use_reentrant=False): the inputs are kept
        until the backward pass; what fn's ops would save is not (they run again). The
        recomputation stops once the last tensor fn saves is recovered (non-reentrant
        checkpoint's early stop): an op saves its inputs before it computes and its outputs
        after, so a final op that saves only its inputs (the block's last matmul) does not
        run again."""
        for x in inputs:
            self._saves(x, f"checkpoint ({name}: kept to recompute it)")
        outer, self._region = self._region, name
        self._region_matmuls, self._region_last_save = [], 0.0
        try:
            yield
        finally:
            self.recomputed += [r for tick, r in self._region_matmuls
                                if tick < self._region_last_save]
            self._region = outer

    @contextmanager
    def policy_region(self, name: str, inputs: tuple[Sym, ...]):
        """torch.utils.checkpoint with a selective-checkpoint policy (torchtitan's per-op
        SAC, torchtitan/models/llama3/infra/parallelize.py _get_custom_policy): as
        recomputed_region, but the outputs the policy marks MUST_SAVE are kept — here every
        odd mm's output (mm_output) and the attention kernel's outputs (fused_attention)."""
        with self.recomputed_region(name, inputs):
            outer, self.sac_mms = self.sac_mms, 0
            try:
                yield
            finally:
                self.sac_mms = outer
