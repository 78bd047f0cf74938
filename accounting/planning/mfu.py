"""MFU and HFU under a named FLOP-counting convention, and a throughput converted into each.

A utilization is FLOPs per second over the peak; which FLOPs is a convention, and the
stacks differ:

  executed  every matmul as the model runs it, attention over the full T×T score matrix
            (the ledger's executed count; what an unfused or masked kernel computes).
  causal    the attention core (QKᵀ and scores·V, forward and backward) over its causal
            pairs only, T(T+1)/2 per head and sequence (the ledger's useful count: a
            sliding window's or a chunk's pairs where the layer has one), every other
            matmul as executed. MaxText (calculate_tflops_training_per_device:
            `causal_attention_flops = noncausal_attention_flops / 2`) and NeMo / Megatron-
            Bridge's flops formulas (`(0.5 if causal_self_attn else 1)`) halve the full count;
            T(T+1)/2 is the exact half plus the diagonal. torchtitan does not
            (models/utils.py: "we follow the convention and do not account for sparsity in
            causal attention": 6·N + 12·l·h·d_k·T per token, the executed attention).
  6N        6 FLOPs per parameter a token passes through, per token (Kaplan et al. 2020,
            §2.1; Hoffmann et al. 2022): 2·N forward, 4·N backward, no attention term; N the
            active parameters (a mixture of experts: the k routed experts, not all E).

MFU counts the model's forward and backward pass; HFU (hardware FLOPs utilization,
Chowdhery et al. 2022, PaLM, appendix B; Korthikanti et al. 2022, §6) adds the forward
work recomputation runs again: the ledger's recomputed matmuls under the same counting
(every block's forward with full recomputation, the attention cores with selective), and
under 6N 2·N per token with full recomputation (nothing with selective: 6N has no
attention term). Narayanan et al. 2021's X is such a hardware rate: their §5.1 end-to-end
estimate 8·T·P/(n·X) (their text, with recomputation; eq. (4) of the paper is 8TP/(nX)
too, and 6TP/(nX) without recomputation is their text beside it) counts 8 FLOPs per
parameter and token. The optimizer step is in no convention's numerator.

Everything here is per sequence of T tokens (all linear in the batch), exact ints.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from accounting.analysis.workload import analyze
from accounting.ledger.ledger import ledger
from accounting.ledger.records import BACKWARD, EXECUTED, FORWARD, USEFUL
from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig

CAUSAL, SIX_N = "causal", "6N"
CONVENTIONS = {
    EXECUTED: "executed: every matmul as run, attention over the full T×T scores",
    CAUSAL: "causal: the attention core over its T(T+1)/2 causal pairs (MaxText, NeMo halve "
            "it), the other matmuls as run",
    SIX_N: "6N: 6 FLOPs per active parameter per token (Kaplan et al. 2020), no attention term",
}
COMPUTE, END_TO_END = "compute", "end-to-end"
SCOPES = {
    COMPUTE: "the rate each GPU computes at on its stage: every FLOP it executes (recomputation "
             "included) at MFU·peak; the pipeline bubble and the communication on the "
             "critical path are added",
    END_TO_END: "a figure measured over whole steps (as papers report it): step time = the "
                "convention's FLOPs of the step / (n·peak·MFU); the bubble and the "
                "communication are inside the figure, not added again",
}


def check_convention(name: str) -> str:
    if name not in CONVENTIONS:
        raise UsageError(f"--mfu-convention must be one of {', '.join(CONVENTIONS)}, got {name!r}")
    return name


def check_scope(name: str) -> str:
    if name not in SCOPES:
        raise UsageError(f"--mfu-scope must be one of {', '.join(SCOPES)}, got {name!r}")
    return name


@dataclass(frozen=True)
class ConventionFlops:
    """One convention's FLOPs of one sequence of T tokens: forward + backward (what MFU
    counts) and the recomputed forward work (what HFU adds)."""
    convention: str
    model: int
    recomputed: int

    def per_step(self, sequences: int, hfu: bool = False) -> int:
        return sequences * (self.model + (self.recomputed if hfu else 0))


@lru_cache(maxsize=256)
def sequence_flops(config: ModelConfig, seq: int, recompute: str = "none") -> tuple[ConventionFlops, ...]:
    """Every convention's counts for one sequence of `seq` tokens, in CONVENTIONS' order."""
    fwd, bwd = analyze(config, seq, 1, FORWARD), analyze(config, seq, 1, BACKWARD)
    v = fwd.values
    again = ledger(config, recompute=recompute).recomputed
    out = []
    for counting in (EXECUTED, USEFUL):
        model = fwd.matmul_flops(counting) + bwd.matmul_flops(counting)
        rec = sum(r.count(v) * r.flops(v, counting) for r in again)
        out.append(ConventionFlops(EXECUTED if counting == EXECUTED else CAUSAL, model, rec))
    n = fwd.active_param_count
    out.append(ConventionFlops(SIX_N, 6 * n * seq, 2 * n * seq if recompute == "full" else 0))
    return tuple(out)


def convention_flops(config: ModelConfig, seq: int, recompute: str, convention: str) -> ConventionFlops:
    return next(c for c in sequence_flops(config, seq, recompute) if c.convention == convention)


@dataclass(frozen=True)
class Utilization:
    """One convention's MFU and HFU at a throughput."""
    convention: str
    model_flops_per_token: Fraction
    hardware_flops_per_token: Fraction
    mfu: Fraction
    hfu: Fraction


def utilizations(config: ModelConfig, seq: int, recompute: str, tokens_per_second: Fraction,
                 gpus: int, peak_flops: Fraction) -> tuple[Utilization, ...]:
    """A throughput (tokens/s of the whole job, n GPUs at `peak_flops` each) as MFU and HFU
    under every convention: u = FLOPs per token · tokens/s / (n · peak)."""
    rate = Fraction(tokens_per_second) / (gpus * Fraction(peak_flops))
    out = []
    for c in sequence_flops(config, seq, recompute):
        m, h = Fraction(c.model, seq), Fraction(c.model + c.recomputed, seq)
        out.append(Utilization(c.convention, m, h, m * rate, h * rate))
    return tuple(out)


def end_to_end_seconds(config: ModelConfig, seq: int, recompute: str, convention: str,
                       sequences: int, gpus: int, peak_flops: Fraction, utilization: Fraction,
                       hfu: bool) -> Fraction:
    """A step of `sequences` sequences at an end-to-end utilization: the convention's FLOPs
    (with the recomputed ones for an HFU) / (n · peak · u)."""
    flops = convention_flops(config, seq, recompute, convention).per_step(sequences, hfu)
    return Fraction(flops) / (gpus * Fraction(peak_flops) * Fraction(utilization))
