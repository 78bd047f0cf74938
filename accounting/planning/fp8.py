"""fp8 training: what the float8 libraries keep beyond a bf16 run, and how a step's FLOPs
split between the GPU's fp8 and bf16 peaks. The precisions are in precisions.py
(fp8-torchao, fp8-te); what a linear layer saves for the backward pass is the ledger's
(accounting/ledger/trace.py Trace._fp8_linear), so activations, recomputation and the
many-GPU split follow from it as from any other op.

torchao float8 (torchao/float8/float8_linear.py, config.py; checked on the CPU with
Float8LinearConfig(emulate=True) by tests/test_fp8.py): dynamic scaling, tensorwise (the
default recipe) or rowwise: every scale is computed from the tensor being cast, in the
pass that casts it; no amax history, no fp8 weight copy kept between passes, so nothing
persistent beyond the bf16 run. Its fp8 copies (input, weight, grad_output, each with an
fp32 scale: one element tensorwise, one per row rowwise) live one matmul at a time.
With FSDP2, Float8LinearConfig(enable_fsdp_float8_all_gather=True) casts each weight
shard to fp8 before the all-gather (torchao/float8/fsdp_utils.py
WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather): 1 byte an element on the wire
instead of bf16's 2 (accounting/planning/parallel/comms.py reads FSDP_FP8_ALL_GATHER_BYTES).

Transformer Engine, DelayedScaling (transformer_engine/common/recipe/__init__.py:
amax_history_len = 1024; transformer_engine/pytorch/module/base.py set_meta_tensor:
num_gemms·3 forward tensors (input, weight, output) and num_gemms·2 backward (grad_output,
grad_input), one DelayedScalingRecipeState per direction, holding scale [n] and
amax_history [1024, n], float32 (transformer_engine/pytorch/quantization.py
DelayedScalingRecipeState.__init__). te.Linear keeps an fp8 copy of its weight and of its
transpose (module/linear.py _Linear.forward: weight_fp8, weight_t_fp8, cached across
micro-batches when Megatron-LM passes is_first_microbatch; Hopper's fp8 GEMM takes only
the TN layout, so the backward's dgrad reads the transposed copy). Current scaling
(Float8CurrentScaling) and blockwise scaling keep no amax history; TE is read from its
source here (it needs a GPU), not run.
"""
from __future__ import annotations

from fractions import Fraction

from accounting.ledger import records as R
from accounting.ledger.autocast import TE, TORCHAO  # noqa: F401 (the libraries' names)
from accounting.ledger.symbols import Expr
from accounting.units import DTYPE_BYTES, FP32, FP8_E4M3

AMAX_HISTORY_LEN = 1024  # DelayedScaling.amax_history_len's default
FORWARD_TENSORS, BACKWARD_TENSORS = 3, 2  # per GEMM: input, weight, output; grad_output, grad_input
# bytes of one te.Linear's DelayedScaling state: scale [n] and amax_history [1024, n] per
# direction, float32: (3 + 2)·(1 + 1024)·4 = 20,500
TE_SCALING_BYTES = (FORWARD_TENSORS + BACKWARD_TENSORS) * (1 + AMAX_HISTORY_LEN) * DTYPE_BYTES[FP32]
TE_WEIGHT_COPIES = 2  # weight_fp8 and weight_t_fp8
FP8_BYTES = DTYPE_BYTES[FP8_E4M3]
FSDP_FP8_ALL_GATHER_BYTES = FP8_BYTES  # torchao's fp8 all-gather: one byte a weight element


def linear_records(lg) -> tuple[R.Matmul, ...]:
    """The forward records of the linear layers that run in fp8."""
    return tuple(r for r in lg.forward if r.fp8)


def weight_names(lg) -> frozenset[str]:
    """The parameters (state-dict names) the fp8 linear layers read."""
    return frozenset(r.weight for r in linear_records(lg))


def linear_modules(lg, values: dict[str, int]) -> int:
    """fp8 linear layers in the model (one te.Linear each; a block's counted per block)."""
    return sum(r.count(values) for r in linear_records(lg))


def matmul_flops(lg, values: dict[str, int]) -> int:
    """FLOPs of one training step's fp8 GEMMs: each fp8 linear layer's forward, its two
    gradient GEMMs (grad-input, grad-weight: both fp8 in torchao's and TE's default
    recipes) and its recomputation, if any."""
    fwd = [r for r in lg.forward if r.fp8]
    again = [r for r in lg.recomputed if r.fp8]
    bwd = [g for r in fwd for g in r.gradients()]
    return sum(r.count(values) * r.flops(values) for r in (*fwd, *bwd, *again))


def effective_peak(total_flops: int, fp8_flops: int, fp8_peak: Fraction,
                   bf16_peak: Fraction) -> Fraction:
    """The one rate (FLOP/s) at which the step's FLOPs take as long as its fp8 GEMMs at the
    fp8 peak plus everything else at the bf16 peak: total / (f8/P8 + (total − f8)/P16)."""
    if total_flops <= 0:
        return fp8_peak
    return Fraction(total_flops) / (Fraction(fp8_flops) / fp8_peak
                                    + Fraction(total_flops - fp8_flops) / bf16_peak)


def te_state(lg, values: dict[str, int], delayed: bool = True) -> list[tuple[str, str, Expr, str]]:
    """Transformer Engine's persistent fp8 state, as (name, formula, bytes, note): the fp8
    copies of each te.Linear's weight and transpose, and (`delayed`: DelayedScaling) its
    scales and amax history; current scaling keeps none."""
    names = weight_names(lg)
    n = sum((Expr.of(1, p.shape).times(*((p.repeat,) if p.repeat else ()))
             for p in lg.params if p.name in names), Expr())
    k, modules = TE_WEIGHT_COPIES * FP8_BYTES, linear_modules(lg, values)
    out = [("fp8 weight copies (Transformer Engine: weight and transpose, e4m3)",
             f"{k}·N_fp8", n.scale(k),
             "the linear layers' weights (N_fp8), cast once per step and cached across "
             "micro-batches (te.Linear weight_fp8, weight_t_fp8)")]
    return out if not delayed else out + [
            ("fp8 scaling state (DelayedScaling: scales, amax history)",
             f"{TE_SCALING_BYTES:,}·{modules}", Expr.of(TE_SCALING_BYTES * modules),
             f"per te.Linear: 5 scales and a {AMAX_HISTORY_LEN}-step amax history of 5 "
             f"tensors, fp32")]
