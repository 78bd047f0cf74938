"""The exact side of the literature comparison: reductions of the ledger (components'
matmul FLOPs, parameter groups, what a formula's assumptions leave out) that the terms of
terms.py and estimates.py are computed from."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

from accounting.ledger import records as R
from accounting.analysis.workload import Analysis, analyze
from accounting.ledger.builder import NORM_PARAMS
from accounting.architecture.config import ModelConfig


@dataclass(frozen=True)
class Exact:
    """The ledger's counts for one workload, in the pieces the formulas are compared on."""
    forward_analysis: Analysis = field(repr=False)

    @property
    def config(self) -> ModelConfig:
        return self.forward_analysis.config

    @property
    def seq(self) -> int:
        return self.forward_analysis.seq

    @property
    def batch(self) -> int:
        return self.forward_analysis.batch

    @property
    def tokens(self) -> int:
        return self.seq * self.batch

    @cached_property
    def components(self) -> dict[str, int]:
        return self.forward_analysis.component_flops(R.EXECUTED)

    @cached_property
    def components_useful(self) -> dict[str, int]:
        return self.forward_analysis.component_flops(R.USEFUL)

    @property
    def forward(self) -> int:
        return sum(self.components.values())

    @property
    def forward_useful(self) -> int:
        return sum(self.components_useful.values())

    @cached_property
    def training(self) -> int:
        """Forward + backward matmul FLOPs, from the ledger's backward records."""
        a = self.forward_analysis
        return analyze(a.config, a.seq, a.batch, "train").matmul_flops(R.EXECUTED)

    @cached_property
    def training_useful(self) -> int:
        a = self.forward_analysis
        return analyze(a.config, a.seq, a.batch, "train").matmul_flops(R.USEFUL)

    @cached_property
    def backward_factor(self) -> Fraction:
        """training / forward: 3 when every matmul has two gradient matmuls of its size."""
        return Fraction(self.training, self.forward)

    @cached_property
    def kernel_recompute(self) -> int:
        """The fused attention kernel's backward runs QKᵀ again: those records' FLOPs (every
        other attention and MLP matmul has exactly two gradient matmuls of its size)."""
        return sum(r.flops for r in self.forward_analysis.matmul_rows
                   if r.record.recompute_in_backward)

    @property
    def recurrent(self) -> bool:
        """The model has recurrent layers (issue 31), which no formula of the literature has."""
        return R.RECURRENT in self.components

    @cached_property
    def non_matmul(self) -> dict[str, int]:
        return self.forward_analysis.elementwise_by_component()

    @cached_property
    def block_forward(self) -> int:
        """Forward matmul FLOPs of all blocks (what full recomputation runs again)."""
        return sum(r.flops for r in self.forward_analysis.matmul_rows if r.record.per_layer)

    # ---- parameter groups ------------------------------------------------------------------
    def _numel(self, keep: Callable[[R.Param], bool]) -> int:
        return sum(r.numel for r in self.forward_analysis.param_rows if keep(r.record))

    @cached_property
    def params(self) -> int:
        return self.forward_analysis.param_count

    @cached_property
    def matmul_weights(self) -> int:
        """Parameters a matmul reads (a tied token table is the LM head's weight)."""
        return self._numel(lambda p: p.matmul_weight)

    @cached_property
    def token_table_lookup_only(self) -> int:
        """The token embedding table when untied: read by index only, no FLOPs."""
        return self._numel(lambda p: p.component == R.EMBEDDING and not p.matmul_weight)

    @cached_property
    def token_table(self) -> int:
        return self._numel(lambda p: p.component == R.EMBEDDING)

    @cached_property
    def position_table(self) -> int:
        return self._numel(lambda p: p.component == R.POSITION_EMBEDDING)

    @cached_property
    def head_weight_untied(self) -> int:
        return self._numel(lambda p: p.component == R.LM_HEAD and p.matmul_weight)

    @cached_property
    def biases(self) -> int:
        """Bias vectors of the attention, MLP and LM-head linears (Phi-3.5-MoE's lm_head_bias;
        norm biases are norm parameters);
        of the routed experts' biases (gpt-oss) the k of E a token runs: the other E − k are
        in inactive_experts."""
        c = self.forward_analysis.config
        total = 0
        for r in self.forward_analysis.param_rows:
            p = r.record
            if p.component in (R.ATTN_PROJ, R.FFN, R.LM_HEAD) and not p.matmul_weight:
                total += r.numel * c.experts_per_token // c.num_experts if p.routed_expert \
                    else r.numel
        return total

    @cached_property
    def attention_sinks(self) -> int:
        """gpt-oss's sink logits (the attention core's parameters): in N, read by no matmul."""
        return self._numel(lambda p: p.component == R.ATTN_CORE)

    @cached_property
    def norm_params(self) -> int:
        return self._numel(lambda p: p.component in NORM_PARAMS.values())

    @property
    def tied(self) -> bool:
        return bool(self.forward_analysis.ledger.tied)

    @cached_property
    def inactive_experts(self) -> int:
        """Parameters of the routed experts a token does not run (E − k of E per MoE layer)."""
        a = self.forward_analysis
        return a.param_count - a.active_param_count

    @property
    def capacity_padding(self) -> int:
        """Forward FLOPs of an expert capacity's padded rows (E·C run, B·T·k routed)."""
        return self.components[R.FFN] - self.components_useful[R.FFN]


def exact_counts(config: ModelConfig, seq: int | None = None, batch: int = 1) -> Exact:
    return Exact(analyze(config, seq, batch, "forward"))

