"""nn.Dropout as transformers' models run it in train() (issue 41): F.dropout(x, p,
training=True), with p the spec's embedding_dropout, attention_dropout or residual_dropout
(GPT-2's embd_pdrop, attn_pdrop, resid_pdrop). In eval() (serving, inference, --verify's
model) F.dropout returns its input and nothing runs; with p = 0 likewise (at::dropout's
`p == 0 || !train` early return, aten/src/ATen/native/Dropout.cpp). The course's model
(model/) has no dropout: the builder calls this under the transformers implementation only.

On CUDA, at::dropout takes the fused path (Dropout.cpp is_fused_kernel_acceptable:
input.is_cuda() and 0 < p < 1): aten.native_dropout returns the output and a bool mask of
the input's shape, and autograd saves the mask alone (tools/autograd/derivatives.yaml,
native_dropout: native_dropout_backward(grad, result1, scale)): 1 byte per element, whatever
the input's dtype. The op itself is one elementwise kernel, x·mask/(1 − p): 1 FLOP per
element under records.CONVENTION, as the op counter counts aten.native_dropout
(crosscheck/dispatch.py). On the CPU at::dropout is the composite input·noise (noise =
bernoulli(1 − p)/(1 − p), in the input's dtype), whose product saves the noise instead:
tests/test_transformers_gpt2.py measures both.

Inside SDPA (attention_dropout under attn_implementation='sdpa') the dropout is the
kernel's: on CUDA the flash and memory-efficient kernels take dropout_p and keep only the
Philox seed and offset, which they keep without dropout too (aten/src/ATen/native/
transformers/cuda/attention.cu _scaled_dot_product_flash_attention_cuda and
_efficient_attention_forward: philox_seed, philox_offset; tools/autograd/derivatives.yaml:
their backward reads q, k, v, the output, the log-sum-exp and the seed and offset, and
regenerates the mask), so nothing more is saved and, like the kernel's softmax, no separate op is counted.
"""
from __future__ import annotations

from accounting.ledger.builder.common import DROPOUT, DROPOUT_MASK
from accounting.ledger.trace import Sym, Trace
from accounting.units import BOOL


def native_dropout(t: Trace, x: Sym, p: float, where: str) -> Sym:
    """F.dropout(x, p) in training on CUDA (aten.native_dropout): x itself when p is 0;
    else one elementwise op and, when a gradient flows, its 1-byte mask saved."""
    if not p:
        return x
    desc = t._record("aten.native_dropout", f"{where} dropout (p = {p:g})", DROPOUT, x.shape)
    t._reads(desc, x)
    y = t.name(Sym(x.shape, x.dtype, x.grad, x.contiguous), f"{where} dropout output")
    if x.grad:
        t._saves(t.name(Sym(x.shape, BOOL, grad=False), f"{where} {DROPOUT_MASK} (1 byte)"),
                 desc, after=True)
    return y
