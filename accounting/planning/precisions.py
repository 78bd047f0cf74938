"""Precision recipes: the dtype of the parameters, gradients and optimizer state a training
step holds, whether the optimizer keeps an fp32 master copy, and the autocast policy the
activations follow. Each is checked on a real CPU step (tests/test_recipes_reality.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.runtime.errors import UsageError
from accounting.ledger.autocast import TE, TORCHAO
from accounting.units import BF16, DTYPE_BYTES, FP8, FP32

BF16_MIXED = "bf16-mixed"  # the other precision is FP32 (all-fp32), named by its dtype
BF16_PURE = BF16  # bf16 parameters, gradients and optimizer state
BF16_MASTER = "bf16-master"
FP8_TORCHAO, FP8_TE, FP8_TE_CURRENT = "fp8-torchao", "fp8-te", "fp8-te-current"
FP8_TORCHAO_FSDP = "fp8-torchao-fsdp"
# Precision.fp8 names the float8 library (ledger/autocast.py TORCHAO, TE): which linear
# layers run in fp8 and what each saves for the backward pass (ledger/trace.py _fp8_linear)


@dataclass(frozen=True)
class Precision:
    name: str
    param_dtype: str  # what the model's parameters are stored in
    grad_dtype: str  # .grad, the parameter's dtype in torch
    state_dtype: str  # the optimizer's floating-point state (torch.optim: zeros_like(param))
    master: bool  # the optimizer keeps an fp32 copy of every trained parameter
    autocast: str | None  # the device whose torch.autocast policies the activations follow
    compute: str  # which datasheet peak applies: FP32 or BF16 (a dtype name)
    inference_bytes: int  # weights and KV cache at inference
    assumptions: str
    fp8: str | None = None  # TORCHAO or TE: the linear layers' matmuls in fp8 (None: none)
    delayed_scaling: bool = False  # TE's DelayedScaling: an amax history kept per tensor
    fsdp_fp8_gather: bool = False  # FSDP2 all-gathers the fp8 linear weights in fp8 (torchao)

    @property
    def master_bytes(self) -> int:
        """Bytes of each parameter as the model holds it (the name the many-GPU plans use)."""
        return DTYPE_BYTES[self.param_dtype]

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype]

    @property
    def moment_bytes(self) -> int:
        """Bytes of each element of the optimizer's floating-point state (one of AdamW's m, v)."""
        return DTYPE_BYTES[self.state_dtype]

    @property
    def activation_dtype(self) -> str:
        """The dtype of the residual stream: the parameters' (autocast keeps it fp32)."""
        return self.param_dtype

    @property
    def message_bytes(self) -> int:
        """Bytes per element of the activations the TP and PP collectives move: 2 under
        autocast (Megatron-LM's convention; torch sends some fp32 tensors there: formula
        only) or with bf16 parameters, else 4."""
        return _B16 if self.autocast or self.param_dtype == BF16 else DTYPE_BYTES[FP32]


_B16 = DTYPE_BYTES[BF16]
_B32 = DTYPE_BYTES[FP32]
PRECISIONS: dict[str, Precision] = {
    FP32: Precision(FP32, FP32, FP32, FP32, False, None, FP32, _B32,
                    "all-fp32 (the course's assumption): weights, gradients, optimizer state "
                    "and activations are 4 bytes each; FP32 peak"),
    BF16_MIXED: Precision(BF16_MIXED, FP32, FP32, FP32, False, "cuda", BF16, _B16,
                          "bf16 mixed precision, torch.autocast('cuda', dtype=torch.bfloat16): "
                          "fp32 master weights, gradients and optimizer state (4 B each); each "
                          "activation in the dtype autocast gives it (accounting/ledger/autocast.py: "
                          "matmuls in bf16 with their inputs cast to bf16 copies, which they "
                          "save, the weights' bf16 copies included; exp, pow, sum and the loss in "
                          "fp32; norms in fp32 as the model computes them); bf16 Tensor Core "
                          "peak; inference in bf16. The CPU's autocast policies are checked on a "
                          "real step (tests/test_memory_reality.py); CUDA's are PyTorch's "
                          "documented ones, not measured here"),
    BF16_PURE: Precision(BF16_PURE, BF16, BF16, BF16, False, None, BF16, _B16,
                         "pure bf16 (model.to(torch.bfloat16), no autocast): parameters, "
                         "gradients, optimizer state and activations in bf16 (2 B each; norms "
                         "still compute in fp32 as the model writes them); bf16 peak"),
    BF16_MASTER: Precision(BF16_MASTER, BF16, BF16, FP32, True, None, BF16, _B16,
                           "bf16 parameters and gradients with an fp32 master copy and fp32 "
                           "optimizer state held by the optimizer: 2 + 2 + 4 + 8 = 16 bytes per "
                           "AdamW parameter, DeepSpeed's and Megatron-LM's layout (Megatron "
                           "megatron/core/optimizer/optimizer.py Float16OptimizerWithFloat16Params: "
                           "fp32_from_float16_groups; DeepSpeed runtime/bf16_optimizer.py: "
                           "fp32_groups_flat_partition); activations in bf16; bf16 peak"),
    # ---- fp8 training: the linear layers' three GEMMs (forward, grad-input, grad-weight) in
    # fp8 at the GPU's dense fp8 peak; the attention core, the MoE experts' grouped_mm and
    # every other op in bf16 (accounting/planning/fp8.py: the rules, the scaling state, the
    # time split) ---------------------------------------------------------------------------
    FP8_TORCHAO: Precision(FP8_TORCHAO, FP32, FP32, FP32, False, "cuda", FP8, _B16,
                           "torchao float8 training (torchao.float8.convert_to_float8_training, "
                           "Float8LinearConfig's default recipe: dynamic tensorwise scaling, "
                           "e4m3 forward, e5m2 gradients) under bf16 mixed precision: every "
                           "nn.Linear a Float8Linear; fp32 parameters, gradients and optimizer "
                           "state; a Float8Linear saves its bf16 input and the fp32 weight "
                           "parameter itself (torchao/float8/float8_linear.py "
                           "matmul_with_hp_or_float8_args.forward: ctx.save_for_backward("
                           "input_hp, weight_hp_t)), so no bf16 weight copy; its fp8 casts "
                           "(and their one-element fp32 scales) are made again in the backward "
                           "pass and live one matmul at a time; no scaling state is kept. "
                           "Linear GEMMs at the fp8 peak, the rest at the bf16 peak",
                           fp8=TORCHAO),
    FP8_TORCHAO_FSDP: Precision(FP8_TORCHAO_FSDP, FP32, FP32, FP32, False, "cuda", FP8, _B16,
                                "fp8-torchao with Float8LinearConfig(enable_fsdp_float8_all_"
                                "gather=True) under FSDP2 (--zero 2 or 3): each Float8Linear "
                                "weight shard is cast to fp8 before the all-gather "
                                "(torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor"
                                ".fsdp_pre_all_gather), so the gathered weights are 1 byte an "
                                "element on the wire and in memory; its scale is the amax of "
                                "the whole weight, one fp32 all-reduce per weight at each "
                                "all-gather (hp_tensor_to_float8_dynamic(reduce_amax=True)); "
                                "the rest as fp8-torchao",
                                fp8=TORCHAO, fsdp_fp8_gather=True),
    FP8_TE: Precision(FP8_TE, BF16, BF16, FP32, True, None, FP8, _B16,
                      "Transformer Engine fp8 training (te.Linear under te.fp8_autocast with "
                      "DelayedScaling: HYBRID format, amax history per tensor) over "
                      "Megatron-LM's bf16 parameters and gradients with an fp32 master copy "
                      "and fp32 moments (bf16-master): each te.Linear saves its input as fp8 "
                      "(1 byte an element) and the parameter, and keeps fp8 copies of its "
                      "weight and of the weight's transpose across micro-batches (TE "
                      "module/linear.py _Linear.forward); its scaling state is counted per "
                      "linear layer (accounting/planning/fp8.py). Linear GEMMs at the fp8 "
                      "peak, the rest at the bf16 peak; the LM head stays bf16 (Megatron's "
                      "output layer is not a TE module)",
                      fp8=TE, delayed_scaling=True),
    FP8_TE_CURRENT: Precision(FP8_TE_CURRENT, BF16, BF16, FP32, True, None, FP8, _B16,
                              "Transformer Engine fp8 training with current scaling "
                              "(Float8CurrentScaling: each tensor's scale from its own amax "
                              "as it is cast, no amax history: TE's "
                              "Float8CurrentScalingRecipeState keeps no buffer) over "
                              "Megatron-LM's bf16 parameters, fp32 master copy and moments; "
                              "what te.Linear saves and its cached fp8 weight copies as "
                              "fp8-te; linear GEMMs at the fp8 peak, the LM head bf16",
                              fp8=TE),
}


def get_precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise UsageError(f"unknown precision {name!r}; choose {', '.join(PRECISIONS)}") from None
