"""FLOPs of one training step (forward, backward, recomputation, the AdamW update) and the
time to train at a given utilization of a peak. FLOP counts are exact ints; time is a
Fraction of seconds, rounded only for display.

Forward and backward matmul FLOPs come from the analytic ledger (accounting.analysis.workload):
its backward records are one gradient matmul per operand of each forward matmul, each the
size of the forward one, so backward = 2 × forward exactly — the rule the course (after
Kaplan et al. 2020 and Hoffmann et al. 2022) assumes, here derived. Non-matmul FLOPs
(norms, softmax, SiLU, ...) are left out of the step total, as MFU accounting does; the
forward pass's are reported beside it.
"""
from __future__ import annotations

import numbers
import operator
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from accounting.analysis.mtp import mtp
from accounting.analysis.workload import analyze
from accounting.architecture.config import ModelConfig
from accounting.runtime import names
from accounting.runtime.errors import UsageError, shorten
from accounting.ledger.symbols import Expr
from accounting.ledger.ledger import ledger
from accounting.ledger.records import BACKWARD, FORWARD
# AdamW's op table is the AdamW record's (optimizers.py); read here for the FLOPs
from accounting.planning.optimizers import (  # noqa: F401 (re-exported)
    ADAMW_OPS,
    DEFAULT_OPTIMIZER,
    PARAMETER,
    TENSOR,
    AdamWOp,
)
from accounting.planning.memory import (
    parameter_count,
    tensor_count,
    values,
)

ADAMW_CONVENTION = (
    "AdamW update: the tensor ops of torch.optim.AdamW (single-tensor and foreach paths run "
    "the same ops), 1 FLOP per element for each elementwise op and for sqrt, 3 for each fused "
    "op (lerp_, addcmul_, addcdiv_); the bias corrections 1 − βᵗ are Python floats, computed "
    "once per tensor, and not counted. That is 14 FLOPs per parameter, as the course's "
    "Algorithm 1 written out op by op also gives (m: 3, v: 4, update: 5, weight decay: 2), "
    "plus 1 per parameter tensor for its step counter"
)


def adamw_flops_expr(config: ModelConfig) -> Expr:
    """AdamW update FLOPs: 14·N + (parameter tensors)."""
    per_param = sum(o.flops_per_element for o in ADAMW_OPS if o.per == PARAMETER)
    per_tensor = sum(o.flops_per_element for o in ADAMW_OPS if o.per == TENSOR)
    return parameter_count(config).scale(per_param) + tensor_count(config).scale(per_tensor)


def adamw_formula(config: ModelConfig) -> str:
    """'14·N + (9·L + 3)': per-parameter and per-tensor FLOPs from ADAMW_OPS."""
    per_param = sum(o.flops_per_element for o in ADAMW_OPS if o.per == PARAMETER)
    per_tensor = sum(o.flops_per_element for o in ADAMW_OPS if o.per == TENSOR)
    n = tensor_count(config)
    tensors = f"({n})" if per_tensor == 1 else f"{per_tensor}·({n})"
    return f"{per_param}·N + {tensors}"


def adamw_flops(config: ModelConfig) -> int:
    return adamw_flops_expr(config).evaluate(values(config, 1, 1))


def optimizer_flops(config: ModelConfig, optimizer: str = DEFAULT_OPTIMIZER, trainable=None) -> int:
    """The update's FLOPs over the trained tensors (accounting/planning/optimizers.py); for
    AdamW over every parameter, adamw_flops (14·N + tensors) exactly."""
    from accounting.planning import training_state as TS
    from accounting.planning.optimizers import get_optimizer
    return TS.update_flops(get_optimizer(optimizer), TS.tensors(config, trainable))


@dataclass(frozen=True)
class StepFlops:
    config: ModelConfig
    seq: int
    batch: int
    forward: int  # matmul FLOPs, executed count (full T×T attention, as the model runs it)
    backward: int
    recompute: int  # the blocks' forward again (0 without recomputation)
    adamw: int  # the optimizer's update (AdamW's unless another optimizer is planned)
    forward_non_matmul: int  # not in the total; reported for scale
    forward_formula: str  # the forward matmul FLOPs as a polynomial in B and T
    backward_formula: str
    # multi-token prediction (accounting/analysis/mtp.py): its modules' forward and backward
    # matmul FLOPs and their AdamW update; 0 without MTP modules
    mtp: int = 0
    mtp_adamw: int = 0
    # issue 41: a vision-language model's tower in the step (planning/vision_flops.py's
    # TowerFlops: its forward, backward and recomputed matmuls and its update over the
    # step's images); None: no tower
    vision: object = None

    @property
    def total(self) -> int:
        return self.forward + self.backward + self.recompute + self.adamw + self.mtp \
            + self.mtp_adamw + (self.vision.total if self.vision is not None else 0)

    @property
    def model_flops(self) -> int:
        """Forward + backward + optimizer: what MFU counts (recomputation excluded), the MTP
        modules' included (training runs them)."""
        return self.forward + self.backward + self.adamw + self.mtp + self.mtp_adamw \
            + (self.vision.model_flops if self.vision is not None else 0)


def step_flops(config: ModelConfig, seq: int, batch: int, recompute: str = "none",
               optimizer: str = DEFAULT_OPTIMIZER, trainable=None) -> StepFlops:
    fwd = analyze(config, seq, batch, FORWARD)
    bwd = analyze(config, seq, batch, BACKWARD)
    # The matmuls a checkpointed region runs again in the backward pass (the ledger's):
    # every block's forward (full), or every attention core (selective).
    v = fwd.values
    again = sum(r.count(v) * r.flops(v) for r in ledger(config, recompute=recompute).recomputed)
    m = mtp(config, seq, batch)
    # AdamW on the MTP modules' own parameters: 14 per element (ADAMW_OPS) and one step
    # counter per tensor, as on the model's (the tensors: the block's, W_eh and three norms)
    per_param = sum(o.flops_per_element for o in ADAMW_OPS if o.per == PARAMETER)
    mtp_adamw = 0 if m is None else m.modules * (per_param * m.params_each + _mtp_tensors(config))
    return StepFlops(config, seq, batch, fwd.matmul_flops(), bwd.matmul_flops(), again,
                     optimizer_flops(config, optimizer, trainable), fwd.elementwise_flops,
                     str(fwd.matmul_polynomial()), str(bwd.matmul_polynomial()),
                     0 if m is None else m.train_flops, mtp_adamw)


def _mtp_tensors(config: ModelConfig) -> int:
    """Parameter tensors of one MTP module: one block of the last layer's kind, W_eh, and
    three norms of ln_final's tensors."""
    lg = ledger(config)
    last = lg.group_of(config.num_layers - 1)
    return (sum(1 for p in lg.params if p.repeat == last) + 1
            + 3 * sum(1 for p in lg.params if p.module == "ln_final"))


# A user's decimal: digits, an optional fraction and exponent, or a ratio 'p/q'. Bounded
# before Fraction() sees it: '1e999999999' would be expanded into a billion-digit integer.
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?$|^[+-]?\d+/\d+$", re.ASCII)
MAX_NUMBER_CHARS, MAX_EXPONENT = 100, 100
MAX_BITS = 2000  # an int or Fraction passed by code: about 600 digits


def exact(value, what: str) -> Fraction:
    """A user number as an exact Fraction: a decimal string or float as written ("19.5" is
    39/2, not the nearest binary double). At most 100 characters, exponent within ±100."""
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real, Decimal)):
        # a wrong type from code is a TypeError, as the API's docstrings say (issue 32)
        raise TypeError(f"{what} must be a number (an int, a float, a Fraction, a Decimal or "
                        f"a decimal string), got {shorten(value)} ({type(value).__name__})")
    if isinstance(value, numbers.Integral):  # numpy's integers too, as A.count takes them
        value = operator.index(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, Fraction):
        value = float(value)  # numpy's floats: read as the float they hold (repr below)
    if isinstance(value, (int, Fraction)):  # from code: bounded in size, not in spelling
        f = Fraction(value)
        if max(f.numerator.bit_length(), f.denominator.bit_length()) > MAX_BITS:
            raise UsageError(f"{what} is too large or too precise (more than {MAX_BITS} bits)")
        return f
    if isinstance(value, float):
        value = float.__repr__(value)
    text = str(value).strip()  # (no '_': '0.5_0' is no decimal a user writes, issue 32)
    m = _DECIMAL.match(text) if len(text) <= MAX_NUMBER_CHARS else None
    if m is None:
        raise UsageError(f"{what} must be a number (digits, a decimal point, an exponent; at "
                         f"most {MAX_NUMBER_CHARS} characters), got {shorten(value)}")
    if m.group(1) is not None and abs(int(m.group(1))) > MAX_EXPONENT:
        raise UsageError(f"{what}: the exponent must be within ±{MAX_EXPONENT}, got "
                         f"{shorten(value)}")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise UsageError(f"{what} must be a number, got {shorten(value)}") from None


def check_mfu(mfu) -> Fraction:
    u = exact(mfu, names.arg("mfu"))
    if not 0 < u <= 1:
        raise UsageError(f"{names.arg('mfu')} must be in (0, 1] (a fraction of the peak, e.g. "
                         f"0.5), got {mfu}")
    return u


@dataclass(frozen=True)
class TrainingTime:
    steps: int
    tokens: int  # steps · B · T
    requested_tokens: int | None  # when given as --tokens
    flops_per_step: int
    peak_flops: Fraction  # FLOP/s
    mfu: Fraction

    @property
    def total_flops(self) -> int:
        return self.steps * self.flops_per_step

    @property
    def seconds(self) -> Fraction:
        return Fraction(self.total_flops) / (self.peak_flops * self.mfu)

    @property
    def seconds_per_step(self) -> Fraction:
        return Fraction(self.flops_per_step) / (self.peak_flops * self.mfu)

    @property
    def days(self) -> Fraction:
        return self.seconds / 86400


def training_time(flops: StepFlops, peak_flops: Fraction, mfu, steps: int | None = None,
                  tokens: int | None = None) -> TrainingTime:
    """Time for `steps` steps, or for the whole steps that cover `tokens` tokens."""
    if (steps is None) == (tokens is None):
        raise UsageError("give exactly one of --steps and --tokens")
    for flag, n in (("--steps", steps), ("--tokens", tokens)):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
            raise UsageError(f"{flag} must be a positive integer, got {n!r}")
    per_step_tokens = flops.batch * flops.seq
    if steps is None:
        steps = -(-tokens // per_step_tokens)  # whole steps: ceil(tokens / (B·T))
    return TrainingTime(steps, steps * per_step_tokens, tokens, flops.total,
                        exact(peak_flops, "peak FLOP/s"), check_mfu(mfu))
