"""Optimizers: the state each keeps per parameter tensor, where its step counter lives, and
the FLOPs of its update. One registry; every entry cites the library code it follows and
is checked against that optimizer's real state after a step on the CPU
(tests/test_optimizers_reality.py: the bytes of the tensors in optimizer.state, storages
counted once).

State is a function of one parameter tensor's real shape and of the precision's state dtype
(torch.optim makes zeros_like(param); under bf16-master the optimizer works on the fp32
master copy, so its state is fp32). Frozen tensors (trainable False) have no state.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from accounting.runtime.errors import UsageError
from accounting.units import DTYPE_BYTES, FP32, UINT8
from accounting.registry import registrar


@dataclass(frozen=True)
class State:
    """One kind of state tensor: the memory item it is summed into, its dtype, its elements."""
    item: str
    dtype: str
    numel: int

    @property
    def bytes(self) -> int:
        return DTYPE_BYTES[self.dtype] * self.numel


@dataclass(frozen=True)
class Optimizer:
    name: str  # the --optimizer value
    title: str
    source: str  # the library code the rules below follow
    step_counter: str | None  # "cpu" / "device": a 0-dim fp32 tensor per tensor; None: a Python int
    foreach_temporary: bool = False  # the update makes one state-sized tensor per parameter (√v)
    # bytes per element the update of one tensor allocates while it runs, tensor by tensor
    # (torchao's compiled per-tensor step: TorchaoAdamW8bit below)
    step_temporary: int = 0
    refuses_master: bool = False  # its state is not the fp32 moments a master-copy recipe keeps
    counter_label: str = "AdamW"  # whose step counters (Muon's are its AdamW part's)
    # its state is shaped like the parameter, elementwise: any FSDP row shard can step it
    elementwise: bool = False
    # its update is AdamW's m and v, counted by compute.adamw_formula (AdamW, fused or not)
    adamw_update: bool = False
    # tensors of this role keep no step counter (Muon's hidden matrices); None: every one does
    counterless_role: str | None = None
    # why ZeroRedundancyOptimizer (ZeRO-1) cannot wrap it; None: it can
    zero1_refusal: str | None = None

    def state(self, shape: tuple[int, ...], state_dtype: str, role: str = "") -> tuple[State, ...]:
        raise NotImplementedError

    def shared(self, shapes=None) -> tuple[State, ...]:
        """State held once per optimizer (bitsandbytes' maps), given the trained tensors'
        shapes (None: some tensor of every kind)."""
        return ()

    def update_flops(self, shape: tuple[int, ...], role: str = "") -> int:
        """FLOPs of one tensor's update (1 per elementwise op element, 3 per fused
        lerp_/addcmul_/addcdiv_, 2 per multiply-add of a matmul)."""
        raise NotImplementedError

    def update_bytes(self, precision) -> int:
        """Bytes each trained parameter's update moves in memory (the time model's optimizer
        step, timing/step.py): its parameter, gradient and two states read and written once
        (stated, not derived); AdamW's and the 8-bit AdamWs' own below."""
        return 2 * (precision.master_bytes + 2 * precision.moment_bytes) + precision.grad_bytes


# ---- AdamW -----------------------------------------------------------------------------------
PARAMETER, TENSOR = "parameter", "tensor"


@dataclass(frozen=True)
class AdamWOp:
    """One tensor op of torch.optim.AdamW's update (torch/optim/adam.py, _single_tensor_adam
    with decoupled weight decay; the foreach path runs the _foreach_ form of the same op)."""
    name: str
    op: str  # the aten op (in-place ops end in _)
    flops_per_element: int
    per: str  # PARAMETER: once per parameter element; TENSOR: once per parameter tensor
    counted_as: str = ""


ADAMW_OPS: tuple[AdamWOp, ...] = (
    AdamWOp("step ← step + 1", "add_", 1, TENSOR, "a 1-element float32 tensor per parameter tensor"),
    AdamWOp("weight decay: θ ← θ·(1 − lr·λ)", "mul_", 1, PARAMETER),
    AdamWOp("m ← m + (1 − β₁)·(g − m)", "lerp_", 3, PARAMETER, "subtract, multiply, add"),
    AdamWOp("v ← β₂·v", "mul_", 1, PARAMETER),
    AdamWOp("v ← v + (1 − β₂)·g·g", "addcmul_", 3, PARAMETER, "g·g, ·(1 − β₂), add"),
    AdamWOp("√v", "sqrt", 1, PARAMETER),
    AdamWOp("√v / √(1 − β₂ᵗ)", "div", 1, PARAMETER),
    AdamWOp("denominator + ε", "add_", 1, PARAMETER),
    AdamWOp("θ ← θ − (lr / (1 − β₁ᵗ))·m / denominator", "addcdiv_", 3, PARAMETER,
            "divide, multiply, add"),
)

# operands each per-parameter AdamW op reads besides the one it writes in place (torch/optim/
# adam.py _multi_tensor_adam: mul_, lerp_(m, g), mul_, addcmul_(v, g, g), sqrt, div, add_,
# addcdiv_(θ, m, denom)): the bytes its update moves (AdamW.update_bytes, timing's rate)
ADAMW_READS = {"mul_": 1, "lerp_": 2, "addcmul_": 2, "sqrt": 1, "div": 1, "add_": 1,
               "addcdiv_": 3}
ADAMW_FLOPS_PER_ELEMENT = 14  # ADAMW_OPS above, op by op


def adamw_op_bytes(precision) -> int:
    """Bytes per parameter of AdamW's per-parameter ops, each reading its operands
    (ADAMW_READS) and writing its result in the state's dtype."""
    b = precision.moment_bytes
    return sum((ADAMW_READS.get(o.op, 1) + 1) * b for o in ADAMW_OPS if o.per == PARAMETER)


class AdamW(Optimizer):
    """torch/optim/adamw.py (adam.py _init_group): state['exp_avg'], state['exp_avg_sq'] =
    zeros_like(p); state['step'] a 0-dim float32 tensor, on the CPU unless fused or
    capturable (then on p's device). The foreach path computes √v for every parameter at
    once (torch._foreach_sqrt(exp_avg_sqs)): one state-sized tensor per parameter at the
    update; fused=True does the whole update in one kernel per tensor list."""

    def state(self, shape, state_dtype, role=""):
        n = prod(shape)
        return (State("AdamW first moment m", state_dtype, n),
                State("AdamW second moment v", state_dtype, n))

    def update_flops(self, shape, role=""):
        return ADAMW_FLOPS_PER_ELEMENT * prod(shape) + 1  # + the step counter's add

    def update_bytes(self, precision) -> int:
        """AdamW's foreach ops one by one (ADAMW_OPS): each reads its operands and writes its
        result, in the state's dtype."""
        return adamw_op_bytes(precision)


# ---- SGD with momentum -----------------------------------------------------------------------
class SGD(Optimizer):
    """torch/optim/sgd.py with momentum > 0: state['momentum_buffer'] = clone(grad) on the
    first step (the gradient's dtype), buf.mul_(momentum).add_(grad) after; no step counter.
    The update: buf·μ (1), + g (1), θ.add_(buf, alpha=−lr) (2: multiply, add)."""

    def state(self, shape, state_dtype, role=""):
        return (State("optimizer state: SGD momentum buffer", state_dtype, prod(shape)),)

    def update_flops(self, shape, role=""):
        return 4 * prod(shape)


# ---- Adafactor -------------------------------------------------------------------------------
class Adafactor(Optimizer):
    """torch/optim/_adafactor.py (_init_group): a tensor of ≥ 2 dimensions keeps factored
    second moments, row_var = zeros(shape[:-1] + (1,)) and col_var = zeros(shape[:-2] + (1,
    shape[-1])); a 1-D tensor keeps variance = zeros_like(p); no first moment (beta1 None);
    state['step'] a 0-dim float32 tensor on the CPU. Update FLOPs of the single-tensor path
    (_single_tensor_adafactor), op by op under records.CONVENTION (a norm: square and add per
    input element, sqrt per output): with n elements, r = ∏shape[:-1] rows, c =
    ∏shape[:-2]·shape[-1] columns and b = ∏shape[:-2]: the norms of θ, of g over each row
    and column and of the update (8n + r + c + 2), the rows' and columns' square, divide
    and lerp (5(r + c)), the row mean (r) and its clamp (b), row·col (a matmul, 2n), its
    divide, clamp, rsqrt and product with g (4n), θ.add_(·, alpha) (2n), the step (1):
    16n + 6(r + c) + r + b + 3; a 1-D tensor: the two norms (4n + 2), g² (n), the
    variance's lerp (3n), clamp, rsqrt and product (3n), the update (2n), the step (1):
    13n + 3."""

    @staticmethod
    def _factors(shape):
        return prod(shape[:-1]), prod(shape[:-2]) * shape[-1], prod(shape[:-2])

    def state(self, shape, state_dtype, role=""):
        if len(shape) >= 2:
            rows, cols, _ = self._factors(shape)
            return (State("optimizer state: Adafactor factored second moment (row and column)",
                          state_dtype, rows + cols),)
        return (State("optimizer state: Adafactor second moment (1-D tensors)", state_dtype,
                      prod(shape)),)

    def update_flops(self, shape, role=""):
        n = prod(shape)
        if len(shape) >= 2:
            r, c, b = self._factors(shape)
            return 16 * n + 6 * (r + c) + r + b + 3
        return 13 * n + 3


# ---- Muon (with AdamW for what is not a hidden matrix) ------------------------------------
HIDDEN_MATRIX = "hidden matrix"  # role: a 2-D weight that is not an embedding or the LM head
MUON_NS_STEPS = 5  # torch.optim.Muon default ns_steps


class Muon(Optimizer):
    """torch/optim/_muon.py: Muon takes 2-D parameters only ("Muon is an optimizer for 2D
    parameters of neural network hidden layers. Other parameters, such as bias, and
    embedding, should be optimized by a standard method such as AdamW"): the recipe here is
    torch.optim.Muon over the hidden 2-D matrices and torch.optim.AdamW over the rest
    (embeddings, the LM head, norms, biases, stacked 3-D experts). Muon's state:
    state['momentum_buffer'] = zeros_like(grad); no step counter. Its update orthogonalises
    the momentum by 5 Newton-Schulz steps in bf16 (_zeropower_via_newtonschulz): with
    m = min(rows, cols), n = max, each step X·Xᵀ (2m²n), addmm(A, A, A) (2m³) and
    addmm(X, B, X) (2m²n) in matmul FLOPs (FlopCounterMode's count); per element the
    momentum lerp_ and the nesterov lerp (3 each), the norm (2, and its sqrt and clamp: 2
    per tensor), the divide by it (1), the weight decay (1) and the update (2): 12 per
    element. Its bf16 temporaries (one matrix at a time) are not modelled."""

    def state(self, shape, state_dtype, role=""):
        if role != HIDDEN_MATRIX:
            return ADAMW.state(shape, state_dtype)
        return (State("optimizer state: Muon momentum buffer (hidden matrices)", state_dtype,
                      prod(shape)),)

    @staticmethod
    def newton_schulz_flops(shape: tuple[int, ...]) -> int:
        """The orthogonalisation's matmul FLOPs (mm and addmm), 2 per multiply-add."""
        m, n = min(shape), max(shape)
        return MUON_NS_STEPS * (4 * m * m * n + 2 * m ** 3)

    def update_flops(self, shape, role=""):
        if role != HIDDEN_MATRIX:
            return ADAMW.update_flops(shape)
        return self.newton_schulz_flops(shape) + 12 * prod(shape) + 2


# ---- 8-bit AdamW ----------------------------------------------------------------------------
BNB_BLOCK = 256  # bitsandbytes/optim/optimizer.py Optimizer2State.init_state: blocksize = 256
MIN_8BIT_SIZE = 4096  # min_8bit_size default (bitsandbytes AdamW8bit; torchao follows it)
QMAP_ENTRIES = 256  # a 256-entry float32 code book per state (dynamic and unsigned dynamic)


class AdamW8bit(Optimizer):
    """bitsandbytes.optim.AdamW8bit (bitsandbytes/optim/optimizer.py Optimizer2State.
    init_state): a tensor of at least min_8bit_size = 4,096 elements keeps state1 and state2
    as uint8 (1 byte per element each) and absmax1, absmax2: one float32 scale per block of
    256 (⌈n/256⌉ each); a smaller one keeps state1 and state2 in float32 whatever the
    parameter's dtype; the two 256-entry float32 code books (qmap1, qmap2) are the
    optimizer's own, shared by every tensor; state['step'] is a Python int (no tensor).
    Update FLOPs: the blockwise kernel dequantizes m and v (1 each), runs AdamW's 14, and
    quantizes them again with a block max (2 each): 20 per element, read from the kernel
    (csrc/kernels.cu kOptimizerStatic8bit2StateBlockwise), not measured; a tensor under
    4,096 elements (fp32 state) takes the 32-bit kernel: AdamW's 14 (kOptimizer32bit2State;
    its CPU twin, backends/cpu/ops.py _optimizer_update_32bit_cpu, counted op by op in
    tests/test_optimizer_8bit_flops.py)."""

    def state(self, shape, state_dtype, role=""):
        n = prod(shape)
        if n < MIN_8BIT_SIZE:
            return (State("AdamW moments m and v of tensors under 4,096 elements (fp32)", FP32,
                          2 * n),)
        blocks = -(-n // BNB_BLOCK)
        return (State("8-bit AdamW moments m and v (uint8)", UINT8, 2 * n),
                State("8-bit AdamW optimizer state: block scales (absmax, fp32)", FP32, 2 * blocks))

    def shared(self, shapes=None):
        # init_state fills name2qmap only for a tensor it keeps in 8 bits (optimizer.py
        # Optimizer2State.init_state: `if "dynamic" not in self.name2qmap: self.fill_qmap()`
        # in the 8-bit branch): LoRA's small adapters keep fp32 state and no code books
        if shapes is not None and all(prod(s) < MIN_8BIT_SIZE for s in shapes):
            return ()
        return (State("8-bit AdamW optimizer state: code books (qmap1, qmap2)", FP32,
                      2 * QMAP_ENTRIES),)

    def update_flops(self, shape, role=""):
        n = prod(shape)
        if n < MIN_8BIT_SIZE:
            # float32 state: Optimizer2State.update_step runs optimizer_update_32bit (AdamW's
            # update on the fp32 moments, no (de)quantization; the step a Python int)
            return ADAMW_FLOPS_PER_ELEMENT * n
        return 20 * n

    def update_bytes(self, precision) -> int:
        """Timed as AdamW's foreach ops on the precision's moments (not the 8-bit kernel's
        own traffic: stated, not derived)."""
        return adamw_op_bytes(precision)


PAGED = "paged into CUDA unified memory"  # in a state item's name: outside torch's allocator
PAGED_MIN_NUMEL = 100_000  # bitsandbytes get_state_buffer: `p.numel() < 1e5` is not paged


def is_paged(item: str) -> bool:
    """Whether a state item lives in CUDA unified memory (cudaMallocManaged), outside
    PyTorch's caching allocator: evicted to the CPU under memory pressure, so not GPU memory
    the step needs (and not in torch.cuda's memory statistics)."""
    return PAGED in item


class PagedAdamW8bit(AdamW8bit):
    """bitsandbytes.optim.PagedAdamW8bit (bitsandbytes 0.50.2, optim/optimizer.py
    Optimizer8bit.get_state_buffer): on CUDA, state1 and state2 of a parameter of at least
    1e5 elements come from F.get_paged (functional.py: lib.cget_managed_ptr, i.e.
    cudaMallocManaged), pages the driver migrates between the GPU and the CPU; a smaller
    parameter's are torch.zeros_like on the device, as are every absmax (init_state). The
    rest is AdamW8bit's (checked on the CPU: tests/test_offload.py)."""

    def state(self, shape, state_dtype, role=""):
        out = super().state(shape, state_dtype, role)
        if prod(shape) < PAGED_MIN_NUMEL:
            return out
        m_v, *rest = out
        return (State(f"8-bit AdamW moments m and v, {PAGED} (uint8)", m_v.dtype, m_v.numel),
                *rest)


class TorchaoAdamW8bit(AdamW8bit):
    """torchao.optim.AdamW8bit (torchao/optim/adam.py _new_buffer, subclass_8bit.py
    OptimState8bit.zeros): a tensor of at least 4,096 elements whose size divides by the
    block (256) keeps exp_avg and exp_avg_sq as OptimState8bit: codes (uint8, one per
    element), scale (float32, n/256) and its own 256-entry float32 qmap each; any other
    tensor keeps zeros_like(p) (the parameter's dtype); state['step'] a 0-dim float32
    tensor on the parameter's device. Its step runs tensor by tensor, each through
    torch.compile(single_param_adam) (torchao/optim/adam.py _AdamBase.step): inductor's
    kernel writes the new m and v in float32 to a buffer of the tensor's size each before
    quantizing them by blocks (2 × 4 bytes an element: step_temporary), measured on the CPU
    from torchao 0.18's output code (tests/test_optimizers_reality.py,
    test_torchao_adamw8bit_step_buffers). Read on the CPU: CUDA's Triton kernels are not
    run here."""

    def state(self, shape, state_dtype, role=""):
        n = prod(shape)
        if n < MIN_8BIT_SIZE or n % BNB_BLOCK:
            return (State("AdamW moments m and v of tensors under 4,096 elements", state_dtype,
                          2 * n),)
        return (State("8-bit AdamW moments m and v (uint8)", UINT8, 2 * n),
                State("8-bit AdamW optimizer state: block scales and code books (fp32)", FP32,
                      2 * (n // BNB_BLOCK + QMAP_ENTRIES)))

    def shared(self, shapes=None):
        return ()

    def update_flops(self, shape, role=""):
        return 20 * prod(shape)  # bitsandbytes' count kept for torchao's (not measured)


OPTIMIZERS: dict[str, Optimizer] = {}


register = registrar(OPTIMIZERS, "optimizer")


ADAMW = register(AdamW("adamw", "torch.optim.AdamW (foreach, the default on CUDA)",
                       "torch/optim/adam.py", "cpu", foreach_temporary=True, elementwise=True,
                       adamw_update=True))
ADAMW_FUSED = register(AdamW("adamw-fused", "torch.optim.AdamW(fused=True)",
                             "torch/optim/adam.py", "device",
                             elementwise=True, adamw_update=True))
register(AdamW8bit("adamw8bit", "bitsandbytes.optim.AdamW8bit",
                   "bitsandbytes/optim/optimizer.py", None, refuses_master=True))
PAGED_ADAMW8BIT = register(PagedAdamW8bit("paged-adamw8bit", "bitsandbytes.optim.PagedAdamW8bit",
                                          "bitsandbytes/optim/optimizer.py", None,
                                          refuses_master=True))
ADAMW8BIT_TORCHAO = register(TorchaoAdamW8bit("adamw8bit-torchao", "torchao.optim.AdamW8bit",
                                            "torchao/optim/adam.py", "device",
                                            refuses_master=True,
                                            step_temporary=2 * DTYPE_BYTES[FP32]))
register(Adafactor("adafactor", "torch.optim.Adafactor", "torch/optim/_adafactor.py", "cpu",
                   counter_label="Adafactor"))
register(SGD("sgd", "torch.optim.SGD(momentum=0.9)", "torch/optim/sgd.py", None, elementwise=True))
register(Muon("muon", "torch.optim.Muon on the hidden 2-D matrices, torch.optim.AdamW on the rest",
              "torch/optim/_muon.py", "cpu", counterless_role=HIDDEN_MATRIX,
              zero1_refusal="its recipe is two optimizers, Muon and AdamW, and "
                            "ZeroRedundancyOptimizer wraps one class"))
DEFAULT_OPTIMIZER = ADAMW.name  # the planners' optimizer when none is given


def is_default(name: str) -> bool:
    """The default optimizer, whose update the planners count themselves (compute.ADAMW_OPS)
    and which goes unsaid in a plan's settings."""
    return name == DEFAULT_OPTIMIZER


def elementwise() -> list[str]:
    """The optimizers FSDP's row shards can step (state shaped like the parameter)."""
    return [o.name for o in OPTIMIZERS.values() if o.elementwise]


def optimizer_help() -> str:
    """--optimizer's help, written from the registry (one fact, one place)."""
    return "; ".join(f"{o.name}: {o.title}" for o in OPTIMIZERS.values()) + \
        f" (default: {DEFAULT_OPTIMIZER})"


def get_optimizer(name: str) -> Optimizer:
    try:
        return OPTIMIZERS[name]
    except KeyError:
        raise UsageError(f"unknown optimizer {name!r}; choose {', '.join(OPTIMIZERS)}") from None
