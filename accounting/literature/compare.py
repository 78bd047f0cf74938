"""The literature's FLOP formulas evaluated for one config and workload, beside the exact
ledger, with a term-by-term reconciliation.

Each formula of accounting/literature/formulas.py is evaluated with its paper's own conventions (the
symbols it defines, mapped from the config below); where the paper's assumptions do not fit
the architecture (Kaplan's and Megatron's two-matrix MLP for a gated one, d_attn = d_model,
multi-head K/V for grouped-query attention) it is still evaluated as written, and a term
says what does not fit. Every term is an exact integer computed from the ledger's records
(components' matmul FLOPs, parameter tensors) minus the formula's own part, so that

    formula + Σ terms = the exact matmul FLOPs (executed count)

for the forward pass and for training (forward + backward); a difference the terms do not
explain would appear as an "unexplained" term (tests assert there is none). The exact count
is matmul FLOPs, what MFU counts; the non-matmul FLOPs (norms, softmax, activations, bias
and residual adds, ...) are listed once beside it, since every formula but Chinchilla's
leaves them all out.

Here: the comparison and the MFU conventions. exact.py reduces the ledger, terms.py holds
Term and Estimate and the builders of terms, estimates.py maps each formula (FORMULAS).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.literature.estimates import FORMULAS
from accounting.literature.exact import Exact, exact_counts
from accounting.literature.terms import Estimate, Number
from accounting.ledger import records as R
from accounting.architecture.config import ModelConfig

# ---- MFU conventions ----------------------------------------------------------------------

@dataclass(frozen=True)
class Convention:
    name: str
    kind: str  # "model" or "hardware"
    flops: Number  # per training step of B·T tokens
    exact: bool  # from the ledger (else a formula)


@dataclass(frozen=True)
class Comparison:
    exact: Exact
    estimates: tuple[Estimate, ...]

    @property
    def config(self) -> ModelConfig:
        return self.exact.config

    def estimate(self, key: str) -> Estimate:
        return next(e for e in self.estimates if e.key == key)

    def conventions(self) -> list[Convention]:
        """Model FLOPs (MFU's numerator) and hardware FLOPs (with recomputation) of one
        training step, exact and as the formulas count them."""
        x = self.exact
        core = x.components[R.ATTN_CORE]
        e = {k: self.estimate(k).training for k in ("palm", "nanogpt", "6N", "korthikanti-model",
                                                    "megatron", "korthikanti-hardware")}
        return [
            Convention("exact, executed attention (what FLOP counters measure)", "model",
                       x.training, True),
            Convention("exact, causal attention pairs only (useful)", "model",
                       x.training_useful, True),
            Convention("PaLM 6N + 12·L·H·Q·T", "model", e["palm"], False),
            Convention("nanoGPT estimate_mfu", "model", e["nanogpt"], False),
            Convention("6N", "model", e["6N"], False),
            Convention("Korthikanti et al. model FLOPs", "model", e["korthikanti-model"], False),
            Convention("exact + full recomputation (every block's forward again)", "hardware",
                       x.training + x.block_forward, True),
            Convention("Megatron-LM eq. (3), full recomputation", "hardware", e["megatron"], False),
            Convention("exact + selective recomputation (QKᵀ, scores·V again)", "hardware",
                       x.training + core, True),
            Convention("Korthikanti et al. eq., selective recomputation", "hardware",
                       e["korthikanti-hardware"], False),
        ]


def compare(config: ModelConfig, seq: int | None = None, batch: int = 1) -> Comparison:
    """Every formula of FORMULAS for `config` at T = seq (default: context_length), B = batch."""
    x = exact_counts(config, seq, batch)
    return Comparison(x, tuple(f.evaluate(x) for f in FORMULAS))
