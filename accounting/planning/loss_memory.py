"""--loss standard|chunked|fused-linear (issue 44): what the LM head and its cross-entropy
hold, as a change to the ledger's loss region (accounting/ledger/builder/transformer.py
cross_entropy: log_softmax saves its B·T·V output, nll_loss the targets and a 0-dim total
weight; the backward pass starts with two B·T·V gradients). Each rule is read from the
library that implements it, pinned in pyproject.toml's `recipes` extra:

  * standard: F.cross_entropy on the full logits (the ledger as built).
  * chunked: torchtune 0.6.1's chunked output and loss. TransformerDecoder.chunked_output
    (torchtune/modules/transformer.py) applies the output projection to
    `last_hidden_state.chunk(n, dim=1)`, returning n logits chunks in the head's dtype;
    CEWithChunkedOutputLoss(num_output_chunks=8) (torchtune/modules/loss/
    ce_chunked_output_loss.py, compute_cross_entropy) runs F.cross_entropy(chunk.float(),
    …, reduction="sum") chunk by chunk, so log_softmax saves every chunk's output in
    float32 (4·B·T·V in all), and nll_loss saves each chunk's targets: `labels.chunk(n,
    dim=1)[i].reshape(-1)` copies a non-contiguous chunk (8·B·T bytes of int64 when B > 1
    and n > 1; views otherwise: the symbol [B>1]; nll_loss's backward frees the last chunk's
    just before the backward's start, an upper bound there by 8·B·T_c). The recipes free the logits chunks before
    the backward pass (recipes/full_finetune_single_device.py _loss_step: `del logits`,
    "free logits otherwise it peaks backward memory"), so the model's own logits are not
    held there, and log_softmax runs on float32 on CUDA as on the CPU (no cuda_peak loss
    rule). Two moments: the forward's end (every logits chunk, b·B·T·V in the head's dtype
    b, and the last chunk's float32 copy, 4·B·T_c·V, unless the logits are float32 already)
    and the backward's start (one chunk's two float32 gradients, 2·4·B·T_c·V, T_c = ⌈T/n⌉:
    torch.chunk's largest chunk). tests/test_loss_recipes.py measures both moments on a CPU
    step with torchtune's own class. With --compile the recipes compile the loss too
    (torchtune/training/_compile.py compile_loss: `loss.compute_cross_entropy =
    torch.compile(loss.compute_cross_entropy)`, pytorch/torchtune@1814feb and 0.6.1; the
    chunking stays eager). Inductor's graph of `F.cross_entropy(chunk.float(), …)` saves
    the chunk itself, in the head's dtype, its targets and two float32 numbers a row (the
    max and the log-sum-exp), not the float32 log-softmax; its forward kernels read the
    chunk with the upcast fused (no float32 copy), and its backward writes one buffer, the
    chunk's gradient in the chunk's dtype, beside one float32 number a row. Measured on the
    CPU with saved-tensor hooks and the output code (tests/test_loss_recipes.py,
    test_compiled_chunked_loss_saves_the_chunk); AOTAutograd's partition is the device's
    choice of none, the fusion inductor's scheduler's. So the chunks freed by the recipe's
    `del logits` stay saved (b·B·T·V) where the log-softmax was (4·B·T·V), the forward's
    end adds nothing to them, and the backward's start adds b·B·T_c·V + 4·B·T_c.
  * fused-linear: Liger-Kernel 0.8.5's LigerFusedLinearCrossEntropyFunction (liger_kernel/
    ops/fused_linear_cross_entropy.py, fused_linear_cross_entropy_forward): the head's
    matmul and the loss run in the forward pass over chunks of C_fl rows, C_fl =
    min(next_power_of_2(⌈B·T / ⌈V/H⌉⌉), B·T) (H = d_model; chunk_mem_const = 1), the
    loss's gradient computed there: `grad_input = torch.zeros_like(_input)` (B·T·H in the
    hidden state's dtype) and `grad_weight = torch.zeros_like(weight)` (V·H in the
    parameter's dtype: it becomes the head's gradient) are saved for the backward pass
    (ctx.save_for_backward), which only scales them. No B·T·V tensor exists: neither the
    head's saved input nor its weight copy, nor log_softmax's output, nor the two
    gradients. Its Triton kernels need a GPU, so this rule is read from the source, not
    run: the forward's last chunk holds one (C_fl, V) logits chunk in the compute dtype
    (overwritten in place with its gradient by liger_cross_entropy_kernel), its (C_fl, H)
    product with the weight, the float32 loss_1d of B·T, and autocast's copy of the head's
    weight (cached while the forward runs).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger.symbols import Expr
from accounting.registry import registrar
from accounting.runtime.errors import UsageError
from accounting.units import DTYPE_BYTES, FP32, INT64

STANDARD, CHUNKED, FUSED_LINEAR = "standard", "chunked", "fused-linear"
DEFAULT_CHUNKS = 8  # CEWithChunkedOutputLoss(num_output_chunks=8), torchtune's recipes' default
MAX_CHUNKS = 1 << 20


@dataclass(frozen=True)
class LossRecipe:
    name: str
    title: str
    source: str


LOSSES: dict[str, LossRecipe] = {}
_register = registrar(LOSSES, "loss")
_register(LossRecipe(STANDARD, "F.cross_entropy on the full logits",
                     "torch.nn.functional.cross_entropy"))
_register(LossRecipe(CHUNKED, "torchtune's chunked output and CEWithChunkedOutputLoss: "
                              "float32 one chunk at a time",
                     "torchtune 0.6.1 modules/loss/ce_chunked_output_loss.py"))
_register(LossRecipe(FUSED_LINEAR, "Liger's fused linear cross-entropy: no logits, the "
                                   "gradient computed in the forward pass chunk by chunk",
                     "liger-kernel 0.8.5 ops/fused_linear_cross_entropy.py"))


def check(loss: str, chunks: int | None, config) -> int:
    """The chunk count (torchtune's 8 unless given); a loss the config's head cannot run
    with is refused in one line."""
    if loss not in LOSSES:
        raise UsageError(f"unknown loss {loss!r}; choose {' or '.join(LOSSES)}")
    if chunks is not None and loss != CHUNKED:
        raise UsageError("--loss-chunks sets torchtune's chunked loss: give --loss chunked "
                         "with it")
    if loss != STANDARD and (config.final_softcap is not None or config.logit_scale is not None):
        raise UsageError(f"--loss {loss} is not modelled for a head with logit scaling or "
                         f"soft-capping ({config.name}); leave --loss out")
    if chunks is not None and not 1 <= chunks <= MAX_CHUNKS:
        raise UsageError(f"--loss-chunks must be in 1 … {MAX_CHUNKS:,}, got {chunks}")
    return DEFAULT_CHUNKS if chunks is None else chunks


def next_power_of_2(n: int) -> int:
    """triton.next_power_of_2: the smallest power of two ≥ n (1 for n ≤ 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def fused_chunk_rows(bt: int, vocab: int, width: int) -> int:
    """Liger's chunk_size for B·T rows (fused_linear_cross_entropy_forward)."""
    inc = -(-vocab // width)
    return min(next_power_of_2(-(-bt // inc)), bt)


def add_values(v: dict[str, int], loss: str, chunks: int) -> dict[str, int]:
    """The loss's symbols beside the ledger's: T_c = ⌈T/n⌉ (torch.chunk's largest chunk)
    and C_fl (Liger's chunk rows)."""
    out = dict(v)
    if loss == CHUNKED:
        out["T_c"] = -(-v["T"] // chunks)
        # a chunk of the (B, T) labels along T is contiguous only at B = 1 (or one chunk)
        out["[B>1]"] = int(v["B"] > 1 and chunks > 1)
    if loss == FUSED_LINEAR:
        out["C_fl"] = fused_chunk_rows(v["B"] * v["T"], v["V"], v["d_model"])
    return out


@dataclass(frozen=True)
class LossRegion:
    """The loss recipe against the ledger: `kept` changes the kept activations (every
    moment that holds them), `backward` is what the backward's start adds, `forward` (None:
    no such moment) what the forward's end adds beyond the kept activations; `replaced`:
    the ledger records it no longer holds; `cuda_loss`: whether cuda_peak's loss rules
    apply."""
    kept: Expr
    backward: Expr
    forward: Expr | None
    replaced: frozenset[str]
    cuda_loss: bool
    what_backward: str
    what_forward: str = ""


def _bytes(r) -> Expr:
    return r.elements.scale(r.bytes_per_element).times(*((r.repeat,) if r.repeat else ()))


def region(activations, loss: str, param_bytes: int, compiled: bool = False) -> LossRegion:
    """`activations`: the ledger's records; param_bytes: the head weight's bytes per
    element (fused-linear's grad_weight is zeros_like(weight), cast back at the end,
    `.to(weight.dtype)`; 0: a frozen head has none); `compiled`: --compile, which compiles
    the chunked loss's cross-entropy as torchtune's compile_loss does."""
    acts = list(activations)
    lsm = next((r for r in acts if r.name == "log-softmax of the logits"), None)
    if lsm is None:  # a fused cross-entropy kernel (llm-foundry's flash-attn Triton loss)
        return fused_kernel_region(acts, loss)
    lb, f32 = lsm.bytes_per_element, DTYPE_BYTES[FP32]
    if loss == STANDARD:
        return LossRegion(Expr(), Expr.of(2 * lb, ("B", "T", "V")), None, frozenset(), True,
                          f"the gradients of the log-softmax and of the logits (2 × {lb}·B·T·V)")
    before = [r for r in acts[:acts.index(lsm)] if r.shape == lsm.shape]
    logits_b = before[-1].bytes_per_element if before else lb  # the head's output dtype
    if loss == CHUNKED and compiled:
        return compiled_chunked(lsm, logits_b)
    if loss == CHUNKED:
        kept = Expr.of(f32, ("B", "T", "V")) - _bytes(lsm) \
            + Expr.of(DTYPE_BYTES[INT64], ("B", "T", "[B>1]"))
        forward = Expr.of(logits_b, ("B", "T", "V")) + (
            Expr.of(f32, ("B", "T_c", "V")) if logits_b != f32 else Expr())
        return LossRegion(kept, Expr.of(2 * f32, ("B", "T_c", "V")), forward,
                          frozenset({lsm.name}), False,
                          f"one chunk's two float32 gradients (2 × 4·B·T_c·V), every chunk's "
                          f"float32 log-softmax kept (4·B·T·V), the targets' chunk copies "
                          f"(8·B·T when B > 1)",
                          f"every logits chunk ({logits_b}·B·T·V)" + (
                              ", the last chunk's float32 copy (4·B·T_c·V)"
                              if logits_b != f32 else ""))
    # fused-linear: the head's and the loss's saves go, grad_input and grad_weight stay
    head = [r for r in acts if r.module == "lm_head"]
    gone = [r for r in head] + [r for r in acts if r.module == "loss" and r.name != "targets"]
    hidden = next((r for r in acts if r.name == "ln_final input"), None)
    hb = hidden.bytes_per_element if hidden is not None else logits_b
    weight_copy = sum((_bytes(r) for r in head if r.weight_copy), Expr())
    kept = Expr.of(hb, ("B", "T", "d_model")) + Expr.of(param_bytes, ("V", "d_model")) \
        - sum((_bytes(r) for r in gone), Expr())
    forward = Expr.of(logits_b, ("C_fl", "V")) + Expr.of(logits_b, ("C_fl", "d_model")) \
        + Expr.of(f32, ("B", "T")) + weight_copy
    return LossRegion(kept, Expr(), forward, frozenset(r.name for r in gone), False,
                      f"no logits: grad_input ({hb}·B·T·d_model) and the head's gradient "
                      f"({param_bytes}·V·d_model) saved in the forward pass",
                      f"the last chunk's logits ({logits_b}·C_fl·V) and its product with the "
                      f"weight ({logits_b}·C_fl·d_model), loss_1d (4·B·T)"
                      + (", autocast's copy of the head's weight" if weight_copy else "")
                      + "; C_fl = min(next_power_of_2(⌈B·T/⌈V/d_model⌉⌉), B·T)")


def compiled_chunked(lsm, logits_b: int) -> LossRegion:
    """--loss chunked under --compile: the compiled compute_cross_entropy's saves (above)."""
    f32 = DTYPE_BYTES[FP32]
    kept = Expr.of(logits_b, ("B", "T", "V")) + Expr.of(2 * f32, ("B", "T")) - _bytes(lsm) \
        + Expr.of(DTYPE_BYTES[INT64], ("B", "T", "[B>1]"))
    backward = Expr.of(logits_b, ("B", "T_c", "V")) + Expr.of(f32, ("B", "T_c"))
    return LossRegion(kept, backward, Expr(), frozenset({lsm.name}), False,
                      f"the compiled loss (torch.compile): one chunk's gradient "
                      f"({logits_b}·B·T_c·V), every logits chunk saved ({logits_b}·B·T·V) "
                      f"with two float32 numbers a token, the targets' chunk copies (8·B·T "
                      f"when B > 1)",
                      f"every logits chunk, saved by the compiled loss ({logits_b}·B·T·V)")


def compiled_whole(lsm_bytes: int, logits_b: int, logits_held: bool = False) -> LossRegion:
    """F.cross_entropy(pred.flatten(0, 1).float(), labels) compiled whole (torchtitan's
    cross_entropy_loss under torch.compile, components/loss.py at e7c0cae): the chunked
    rule's one chunk, T_c = T, and no chunk copies of the targets. Measured on the CPU
    (tests/test_compiled_whole_loss.py: saved-tensor hooks and inductor's output code, bf16
    pred [B, T, V]): the graph saves pred itself (logits_b·B·T·V, the same storage: `del
    pred` frees nothing), the targets, and two float32 numbers a row (the max and the
    log-sum-exp), not the float32 log-probabilities (`lsm_bytes`·B·T·V, which the eager
    ledger keeps); its forward writes no B·T·V buffer, its backward one, pred's gradient in
    pred's dtype, beside one float32 number a row. `logits_held`: the logits are counted
    already (a pipeline's last stage keeps its output in the fwd_cache until its backward:
    parallel/pipeline_buffers.py), the saved pred being that same storage."""
    f32 = DTYPE_BYTES[FP32]
    kept = Expr.of(0 if logits_held else logits_b, ("B", "T", "V")) \
        + Expr.of(2 * f32, ("B", "T")) - Expr.of(lsm_bytes, ("B", "T", "V"))
    backward = Expr.of(logits_b, ("B", "T", "V")) + Expr.of(f32, ("B", "T"))
    return LossRegion(kept, backward, None, frozenset(), False,
                      f"the compiled loss (torch.compile): the logits' gradient "
                      f"({logits_b}·B·T·V), the logits saved in place of the float32 "
                      f"log-probabilities ({logits_b}·B·T·V) with two float32 numbers a token")


def fused_kernel_region(acts, loss: str) -> LossRegion:
    """The loss of an implementation whose ledger runs one fused cross-entropy kernel
    (llm-foundry's default, flash-attn's Triton CrossEntropyLossFunction: ledger/builder/
    megatron.py flash_cross_entropy): no float32 log-softmax; its backward writes one
    gradient of the logits in their own dtype (softmax − one-hot, inplace_backward False),
    the same rule as the many-GPU plan's (parallel/peak.py). The implementation runs its
    own loss: another --loss is refused."""
    if loss != STANDARD:
        raise UsageError(f"--loss {loss} replaces F.cross_entropy; this implementation runs "
                         f"its own fused cross-entropy kernel (flash-attn's): leave --loss out")
    logits = next(r for r in acts if r.name == LOGITS)
    lb = logits.bytes_per_element
    return LossRegion(Expr(), Expr.of(lb, ("B", "T", "V")), None, frozenset(), False,
                      f"the fused cross-entropy's one gradient of the logits ({lb}·B·T·V)")


LOGITS = "logits (output embedding)"  # the ledger's record of the head's output

__all__ = ["CHUNKED", "DEFAULT_CHUNKS", "compiled_chunked", "compiled_whole", "FUSED_LINEAR", "LOSSES", "STANDARD", "LOGITS", "LossRegion",
           "add_values", "check", "fused_chunk_rows", "fused_kernel_region", "region"]
