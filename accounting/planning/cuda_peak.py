"""The step's peak on CUDA: where CUDA's kernels save and free what the CPU's do not.

The ledger's saved tensors and MemoryModel.peak_terms are measured on a CPU step
(tests/test_peak.py, tests/test_memory_reality.py). A CUDA step differs in four places, each
read from PyTorch's source (no GPU is needed to derive them; ../shared/gpu/README.md has the
H200 measurements each explains, and tests/test_cuda_peak.py checks each by hand algebra, on
the CPU where the same composite code runs there, and against that table):

  * the loss under CUDA autocast (LOSS): F.cross_entropy is not on CUDA's autocast lists
    (aten/src/ATen/autocast_mode.h: AT_FORALL_FP32 has nll_loss, not cross_entropy_loss;
    the CPU's list, autocast_mode.cpp TORCH_LIBRARY_IMPL(aten, AutocastCPU), has
    cross_entropy_loss), so it decomposes (aten/src/ATen/native/LossNLL.cpp
    cross_entropy_loss_symint) into log_softmax(self, 1, self.scalar_type()): an explicit
    dtype, which the fp32_set_opt_dtype policy leaves alone, so log_softmax runs in bf16 and
    saves its bf16 result; then nll_loss (fp32 policy) casts that to a float32 copy and saves
    the copy. Forward keeps (2 + 4)·B·T·V bytes where the CPU keeps 4. In the backward pass
    (tools/autograd/derivatives.yaml; torch/csrc/autograd/engine.cpp evaluate_function
    releases a node's saved tensors right after it runs) nll_loss_backward makes its fp32
    gradient (4·B·T·V): that is the peak, 10·B·T·V in the loss region against the CPU's
    12 (its log-softmax result plus two fp32 gradients). Then NllLossBackward's copy goes,
    the cast's backward makes a bf16 gradient and log_softmax's backward a bf16 one.
  * the SDPA backend (SDPA_BACKEND, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
    select_sdp_backend, can_use_flash_attention, can_use_mem_efficient_attention): flash
    for fp16/bf16 without a mask, head dim <= 256, grouped K/V allowed; else the
    memory-efficient kernel (fp32 too, a mask allowed, head dim a multiple of 8 in bf16 or 4
    in fp32 on sm80+; grouped K/V refused up to torch 2.11, the build measured: its
    check_batch_size_and_num_heads_dense<false>); else the math composite. cuDNN's kernel,
    first where it is preferred, allocates as flash does (alloc_with_matching_layout: q's
    layout, log-sum-exp (B, h, T) fp32): the same bytes.
  * the memory-efficient kernel's output layout (EFFICIENT_LAYOUT, attention.cu
    _efficient_attention_forward: res = at::empty({B, M, num_heads, Kv}), returned
    transposed to (B, h, T, d)): the heads are already merged in memory, so model/'s
    rearrange to (B, T, h·d) is a view and the output projection saves the kernel's own
    output, no copy. Flash allocates out = at::empty_like(q) (flash_api.cpp mha_fwd): q's
    (B, h, T, d) layout, so the merge copies, as on the CPU.
  * the math composite (MATH_SAVES, aten/src/ATen/native/transformers/attention.cpp
    _scaled_dot_product_attention_math): q and kᵀ scaled by √scale each (new tensors), K and
    V repeated to h heads when grouped, half inputs upcast to float32; its matmuls save
    q·s, kᵀ·s, V (repeated) and _safe_softmax its result, B·h·T² — all float32. Measured
    on the CPU (the same composite), in tests/test_cuda_peak.py.

For transformers' implementation the loss is the model's own (TRANSFORMERS_LOSS,
transformers/loss/loss_utils.py ForCausalLMLoss: logits.float() first, so log_softmax runs in
float32 under CUDA autocast as on the CPU, and under pure bf16 as the CPU ledger plans it
(accounting/ledger/builder/hf_loss.py); LlamaForCausalLM.forward returns the bf16 logits
in CausalLMOutputWithPast, which the training loop `out = model(ids, labels=...);
out.loss.backward()` holds through the backward pass: b·B·T·V more, b the bytes of the
logits the forward returns (Ledger.logits_dtype: NemotronHForCausalLM returns
`self.lm_head(hidden_states).float()`, transformers 5.23 modeling_nemotron_h.py, so its
output holds float32 logits, 4·B·T·V, and the bf16 head output is freed)).

And one reserve the tracker does not see (CUBLAS_WORKSPACE): cuBLAS keeps a workspace per
(handle, stream) (aten/src/ATen/cuda/CublasHandlePool.cpp: cublas_handle_stream_to_workspace;
its size from parseChosenWorkspaceSize, whose default depends on the GPU's architecture:
cublas_workspace_bytes below), handles come from a per-thread pool, and the backward pass
runs on the autograd engine's device thread: two workspaces.

The philox seed and offset the flash and memory-efficient kernels save without dropout are
two int64 host scalars (flash_api.cpp mha_fwd, attention.cu: at::empty({}, at::dtype(kLong))
on no device): 16 bytes per layer a live-storage tracker counts, not GPU memory.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger import records as R
from accounting.ledger.builder.common import TORCHTUNE, TRANSFORMERS
from accounting.ledger.symbols import Expr
from accounting.units import BF16, DTYPE_BYTES, FP16, FP32, INT64

CUDA, CPU = "cuda", "cpu"
DEVICES = {CUDA: "the step's peak as CUDA's kernels save and free (the plan's default: a GPU)",
           CPU: "the step's peak as the CPU's kernels save and free (what tests measure on a CPU)"}

FLASH, EFFICIENT, MATH = "flash", "efficient", "math"
FLASH_DTYPES = (BF16, FP16)  # check_dtypes_flash_attention on sm80+ (FA3's fp8 needs opting in)
FLASH_MAX_HEAD_DIM = 256  # check_head_dim_size_flash
EFFICIENT_ALIGNMENT = {BF16: 8, FP16: 8, FP32: 4}  # minimum_gemm_alignment on sm80+
EFFICIENT_GROUPED_KV = False  # torch <= 2.11 (the measured build); main has supports_gqa = true
KERNEL = "saved by fused attention kernel"  # the ledger's record of F.sdpa's saves (trace.py)
# parseChosenWorkspaceSize's default (aten/src/ATen/cuda/CublasHandlePool.cpp, torch 2.10+):
# CUDA: ":4096:8" = 32 MiB where the compute capability's major is 9, 10, 11 or 12 (Hopper and
# Blackwell), else ":4096:2:16:8" = 8 MiB + 128 KiB; ROCm (hipBLAS): 128 MiB on gfx942, gfx950
# and gfx1250, else 32 MiB. A GPU's arch is its record's (accounting/planning/gpus.py GPU.arch);
# a GPU of unknown arch (numbers given by hand) is planned with Hopper's.
CUBLAS_WORKSPACE_BYTES = 4096 * 1024 * 8  # ":4096:8", sm90 and newer
CUBLAS_WORKSPACE_BYTES_OLDER = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8", before sm90
HIPBLAS_WORKSPACE_BYTES, HIPBLAS_WORKSPACE_BYTES_CDNA3 = 32 * 1024 * 1024, 128 * 1024 * 1024
CUBLAS_32MIB_MAJORS = (9, 10, 11, 12)
HIPBLAS_128MIB_ARCHS = ("gfx942", "gfx950", "gfx1250")
CUBLAS_WORKSPACES = 2  # the forward's thread and the autograd engine's device thread
PHILOX_HOST_BYTES = 2 * DTYPE_BYTES[INT64]  # per flash/efficient call: seed and offset


@dataclass(frozen=True)
class Rule:
    name: str
    source: str  # PyTorch file and function it is read from
    what: str


RULES: dict[str, Rule] = {}


def _rule(name: str, source: str, what: str) -> str:
    if name in RULES:
        raise ValueError(f"duplicate CUDA peak rule {name!r}")
    RULES[name] = Rule(name, source, what)
    return name


LOSS = _rule("loss under CUDA autocast",
             "autocast_mode.h AT_FORALL_FP32 / AT_FORALL_FP32_SET_OPT_DTYPE; LossNLL.cpp "
             "cross_entropy_loss_symint; derivatives.yaml _log_softmax, nll_loss_forward; "
             "engine.cpp evaluate_function",
             "log_softmax in the logits' bf16 (an explicit dtype), nll_loss's float32 copy: "
             "the peak is right after nll_loss_backward, (b + 4 + 4)·B·T·V in the loss "
             "region where the CPU holds 12·B·T·V")
TRANSFORMERS_LOSS = _rule("transformers' loss",
                          "transformers loss/loss_utils.py ForCausalLMLoss (logits.float()); "
                          "modeling_llama.py LlamaForCausalLM.forward (returns the logits)",
                          "log_softmax in float32 (as on the CPU); the model's output keeps "
                          "its logits alive through the backward pass")
TORCHTUNE_LOSS = _rule("torchtune's loss",
                       "torchtune modules/transformer.py TransformerDecoder and "
                       "TiedEmbeddingTransformerDecoder (output(h).float(), 0.6.1 and "
                       "pytorch/torchtune@1814feb); recipes/full_finetune_single_device.py "
                       "_loss_step (del logits)",
                       "the decoder returns float32 logits, the recipe frees them before "
                       "the backward pass: log_softmax and both gradients in float32, no "
                       "logits kept")
SDPA_BACKEND = _rule("SDPA backend", "sdp_utils.cpp select_sdp_backend",
                     "flash (bf16/fp16, no mask, d <= 256), else memory-efficient (no grouped "
                     "K/V up to torch 2.11), else math")
EFFICIENT_LAYOUT = _rule("memory-efficient output layout",
                         "attention.cu _efficient_attention_forward (res (B, T, h, d)); "
                         "flash_api.cpp mha_fwd (out = empty_like(q))",
                         "the heads merge is a view: no copy saved by the output projection")
MATH_SAVES = _rule("math attention's saves",
                   "attention.cpp _scaled_dot_product_attention_math",
                   "saves q·s, kᵀ·s, V (repeated to h heads), softmax B·h·T², float32; not "
                   "the fused kernel's q, k, v, output and log-sum-exp")
CUBLAS_WORKSPACE = _rule("cuBLAS workspaces", "CublasHandlePool.cpp getChosenWorkspaceSize, "
                         "cublas_handle_stream_to_workspace",
                         f"{CUBLAS_WORKSPACES} workspaces of parseChosenWorkspaceSize's default "
                         "for the GPU's architecture")


@dataclass(frozen=True)
class Adjustment:
    """What one rule changes at the start of the backward pass (bytes, a closed form)."""
    rule: str
    bytes: Expr
    what: str


def select_backend(dtype: str, head_dim: int, value_dim: int, grouped: bool,
                   masked: bool) -> str:
    """The kernel F.scaled_dot_product_attention runs on CUDA (sm80+, training, no dropout),
    in sdp_utils.cpp's default order: flash, memory-efficient, math."""
    if (dtype in FLASH_DTYPES and not masked and head_dim == value_dim
            and head_dim <= FLASH_MAX_HEAD_DIM):
        return FLASH
    align = EFFICIENT_ALIGNMENT.get(dtype)
    if (align and head_dim % align == 0 and value_dim % align == 0
            and (EFFICIENT_GROUPED_KV or not grouped)):
        return EFFICIENT
    return MATH


def _bytes(r: R.Activation) -> Expr:
    return r.elements.scale(r.bytes_per_element)


def attention(activations, values: dict[str, int]) -> list[Adjustment]:
    """Per kind of block, the fused-kernel records the CUDA backend saves differently (only
    what the step keeps: under recomputation the kernel's saves are not kept)."""
    out: list[Adjustment] = []
    kinds = sorted({r.repeat for r in activations if r.repeat and r.saved and r.why == KERNEL})
    for kind in kinds:
        block = [r for r in activations if r.repeat == kind and r.saved]
        kernel = [r for r in block if r.why == KERNEL]  # saved by the kernel alone
        # the output: the kernel's alone, or (q laid out (B, T, h, d), a fused QKV
        # projection's split) also the output projection's, the merge being a view
        result = next((r for r in block if r.name == "attention output (fused kernel)"
                       and r.why.startswith(KERNEL)), None)
        if result is None:
            continue
        d = values[result.shape[-1]]
        grouped = any("h_kv" in r.shape for r in kernel) and values.get("h_kv") != values["h"]
        masked = any(r.shape[-2:] == ("T", "T") for r in kernel)
        backend = select_backend(result.dtype, d, d, grouped, masked)
        if backend == EFFICIENT:
            merged = [r for r in block if r.name.endswith("heads merged")
                      and r.elements == result.elements and r.dtype == result.dtype]
            if merged:
                out.append(Adjustment(EFFICIENT_LAYOUT, -_bytes(merged[0]).times(kind),
                                      f"{kind} blocks: memory-efficient kernel, heads merged "
                                      "in place"))
        elif backend == MATH:
            f32 = DTYPE_BYTES[FP32]
            rows = result.elements  # (B, h, T, d): as many as the output's
            math = (rows.scale(3 * f32)  # q·s, kᵀ·s, V repeated (or upcast)
                    + Expr.of(f32, ("B", "h", "T", "T")))  # the softmax's result
            # the kernel's saves go; an output the projection saves too stays, as the
            # merge's copy of the math's (B, h, T, d) output, the same bytes
            fused = sum((_bytes(r) for r in kernel), Expr())
            out.append(Adjustment(MATH_SAVES, (math - fused).times(kind),
                                  f"{kind} blocks: math attention "
                                  f"({'grouped K/V, ' if grouped else ''}{result.dtype})"))
    return out


def loss(activations, autocast: str | None, implementation: str,
         returned: str | None) -> list[Adjustment]:
    """The loss region on CUDA, against the CPU step's; `returned`: the dtype of the logits
    the model's forward returns (Ledger.logits_dtype; None: the head's output's)."""
    order = list(activations)
    lsm = next((r for r in order if r.name == "log-softmax of the logits"), None)
    if lsm is None:  # a fused cross-entropy kernel (llm-foundry's): no log_softmax to adjust
        return []
    before = [r for r in order[:order.index(lsm)] if r.shape == lsm.shape]
    if not before:
        return []
    logits = before[-1]
    b = DTYPE_BYTES[logits.dtype]
    if implementation == TORCHTUNE:  # its decoder's .float(): the CPU ledger's log-softmax
        f32 = DTYPE_BYTES[FP32]      # and two gradients, each in float32 instead
        lb = lsm.bytes_per_element
        return [Adjustment(TORCHTUNE_LOSS, Expr.of(3 * (f32 - lb), lsm.shape),
                           "the decoder's float32 logits (.float()), freed by the recipe "
                           "(del logits): log_softmax and both gradients in float32")] \
            if lb != f32 else []
    if implementation == TRANSFORMERS:  # the output holds what the forward returned: the
        # head's output, or (NemotronHForCausalLM's .float()) a float32 copy, the head's freed
        held = returned or logits.dtype
        return [Adjustment(TRANSFORMERS_LOSS, Expr.of(DTYPE_BYTES[held], lsm.shape),
                           f"the model's output keeps its {held} logits; its loss "
                           "upcasts them, so log_softmax runs in float32")]
    if autocast != CUDA or logits.dtype == FP32 or lsm.dtype != FP32:
        return []  # float32 logits: log_softmax in float32, as on the CPU
    # CUDA at nll_loss_backward: b (log_softmax's result) + 4 (nll_loss's float32 copy) +
    # 4 (its gradient); the CPU's boundary: 4 (the result) + 4 + 4 (two gradients)
    f32 = DTYPE_BYTES[FP32]
    return [Adjustment(LOSS, Expr.of(b + f32 + f32 - 3 * f32, lsm.shape),
                       f"log_softmax in {logits.dtype}, nll_loss's float32 copy, the "
                       "peak at nll_loss_backward")]


def boundary(activations, values: dict[str, int], autocast: str | None,
             implementation: str, returned: str | None) -> list[Adjustment]:
    """Every CUDA rule's change to the live bytes at the start of the backward pass."""
    return attention(activations, values) + loss(activations, autocast, implementation,
                                                 returned)


def cublas_workspace_bytes(arch: str | None) -> int:
    """One workspace's bytes on a GPU of architecture `arch` ("sm90", "sm100", "gfx942", …;
    None: unknown, planned as Hopper)."""
    if arch is None:
        return CUBLAS_WORKSPACE_BYTES
    if arch.startswith("gfx"):
        return HIPBLAS_WORKSPACE_BYTES_CDNA3 if arch in HIPBLAS_128MIB_ARCHS else \
            HIPBLAS_WORKSPACE_BYTES
    if not arch.startswith("sm") or not arch[2:].isdigit():
        raise ValueError(f"unknown GPU architecture {arch!r} (sm<major><minor> or gfx<N>)")
    major = int(arch[2:]) // 10
    return CUBLAS_WORKSPACE_BYTES if major in CUBLAS_32MIB_MAJORS else CUBLAS_WORKSPACE_BYTES_OLDER


def workspace(arch: str | None = None) -> Adjustment:
    """The cuBLAS (hipBLAS) workspaces, live at every moment of the step."""
    one = cublas_workspace_bytes(arch)
    return Adjustment(CUBLAS_WORKSPACE, Expr.of(CUBLAS_WORKSPACES * one),
                      f"{CUBLAS_WORKSPACES} × {one:,} bytes "
                      f"({arch or 'GPU of unknown architecture: planned as sm90'})")
