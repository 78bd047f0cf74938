"""Token mixers without attention: model/recurrent.py's ops, as facts (issue 31).

A depthwise causal conv1d over C channels with width K runs as model/recurrent.py's
CausalConv1d: the input padded with K − 1 zeros in front, its T windows of K (a view)
contracted with the (C, K) weight by one einsum, a bmm over the channels that copies the
windows first: 2·B·T·C·K FLOPs, the T outputs of a causal conv kernel (transformers'
torch fallback, F.conv1d with padding K − 1, computes T + K − 1 and keeps T). Its state in
the cache is the last K inputs of each channel (transformers' conv_states: (B, C, K)).
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym, Trace
from accounting.ledger.builder.common import BIAS, SHORT_CONV, Arch
from accounting.ledger.builder.layers import Linear


def causal_conv(t: Trace, x: Sym, weight: Sym, bias: Sym | None, channels: tuple[str, ...],
                label: str) -> Sym:
    """model/recurrent.py's causal_conv, run in the calling layer's module: x (B, T,
    channels) -> (B, T, channels), laid out channels-major (not contiguous)."""
    padded = t.copy(x)  # constant_pad_nd: K − 1 zeros in front, a new tensor
    windows = t.view(padded, ("B", "T") + channels + ("K",), contiguous=False)  # unfold
    record = R.Matmul(f"{label} conv1d", R.RECURRENT, t.module, t.repeat, R.FORWARD,
                      channels, ("B", "T"), ("K",), (), grads=("dX", "dW"),
                      note="depthwise causal conv1d: a bmm over the channels")
    dtype = t.matmul(windows, weight, record, copy_labels=(f"{label} conv windows (copy)", ""))
    y = Sym(("B", "T") + channels, dtype, contiguous=False)
    if bias is not None:
        y = t.binary("aten.add", y, bias, "+ bias", BIAS)
    return t.name(y, f"{label} conv1d output")


class CausalConv1d:
    """The depthwise conv's parameters (its owner runs it: causal_conv)."""

    def __init__(self, t: Trace, name: str, channels: tuple[str, ...], bias: bool):
        self.channels = channels
        with t.scope(name):
            self.weight = t.param("weight", channels + ("K",), R.RECURRENT)
            self.bias = t.param("bias", channels, R.RECURRENT) if bias else None


class ShortConv:
    """LFM2's Lfm2ShortConv: B, C, x = in_proj(h); C · conv(B · x); out_proj."""

    def __init__(self, t: Trace, a: Arch):
        self.t, c = t, a.c
        d = ("d_model",)
        with t.scope("conv"):
            self.conv = CausalConv1d(t, "conv", d, c.conv_bias)
            self.in_proj = Linear(t, "in_proj", d, ("3",) + d, R.ATTN_PROJ,
                                  "short conv in_proj (B, C, x)", c.conv_bias)
            self.out_proj = Linear(t, "out_proj", d, d, R.ATTN_PROJ, "short conv out_proj",
                                   c.conv_bias)

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        t = self.t
        with t.scope("conv"):
            bcx = self.in_proj(x, "short conv in_proj output (B, C, x)")
            b, gate, h = (t.view(bcx, ("B", "T", "d_model"), contiguous=False) for _ in range(3))
            bx = t.binary("aten.mul", b, h, "B · x", SHORT_CONV, out="B · x (conv input)")
            conv = causal_conv(t, bx, self.conv.weight, self.conv.bias, ("d_model",),
                               "short conv")
            y = t.binary("aten.mul", gate, conv, "C · conv", SHORT_CONV)
            # a new tensor, laid out as its inputs' broadcast shape (contiguous)
            y = t.name(t.view(y, contiguous=True), "C · conv (out_proj input)")
            t.state("conv state", ("d_model", "K"))
            return self.out_proj(y, out_label, out_course)
