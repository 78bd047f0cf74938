"""Token mixers without attention (issue 31): the layers of hybrid models that keep a
fixed-size state instead of a KV cache.

  * ShortConv: LFM2's gated short convolution (transformers' Lfm2ShortConv.slow_forward):
    in_proj to B, C and x; B·x; a depthwise causal conv1d of width K; C·conv; out_proj.
  * GatedDeltaNet: Qwen3-Next's gated DeltaNet (transformers' Qwen3NextGatedDeltaNet with
    its torch path torch_chunk_gated_delta_rule): in_proj_qkvz and in_proj_ba, a depthwise
    causal conv1d and SiLU over Q, K and V, the chunked gated delta rule with chunk C, a
    gated RMSNorm, out_proj.

The depthwise causal convolution computes the T outputs a causal conv kernel does
(transformers' torch fallback, causal_conv1d_fn's F.conv1d with padding K − 1, computes
T + K − 1 and keeps the first T). The exact op sequence of each forward() is what the
ledger (accounting/ledger/builder/recurrent.py) assumes.
"""

import math

import torch
from einops import einsum
from torch import nn

from .layers import Linear, check_positive_int


def causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y[t, c] = Σ_j w[c, j]·x[t − K + 1 + j, c] (+ b[c]), each channel on its own (a
    depthwise causal conv1d, transformers' nn.Conv1d(groups=channels)): the input padded
    with K − 1 zeros in front, its T windows of K (a view), contracted with the (channels,
    K) weight by one einsum (a bmm over the channels, which copies the windows: 2·B·T·C·K
    FLOPs, the T outputs a causal conv kernel computes). x: (batch seq channels)."""
    kernel = weight.shape[-1]
    padded = torch.constant_pad_nd(x, [0, 0, kernel - 1, 0])
    windows = padded.unfold(1, kernel, 1)  # (batch seq channels K), a view
    y = einsum(windows, weight, "b t c k, c k -> b t c")
    return y if bias is None else y + bias


class CausalConv1d(nn.Module):
    """The depthwise conv's parameters: weight (channels, K) (nn.Conv1d's (channels, 1, K),
    squeezed) and an optional bias. As in transformers (causal_conv1d_fn reads
    self.conv.weight), the layer that owns it runs the convolution (causal_conv)."""

    def __init__(self, channels, kernel, bias=False, device=None, dtype=None):
        super().__init__()
        check_positive_int("channels", channels)
        check_positive_int("kernel", kernel)
        self.weight = nn.Parameter(torch.empty(channels, kernel, device=device, dtype=dtype))
        bound = 1 / math.sqrt(kernel)  # nn.Conv1d's default: U(±1/√(fan_in)), fan_in = K
        nn.init.uniform_(self.weight, -bound, bound)
        if bias:
            self.bias = nn.Parameter(torch.zeros(channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (batch seq channels) -> (batch seq channels)
        return causal_conv(x, self.weight, self.bias)


class ShortConv(nn.Module):
    """LFM2's gated short convolution: B, C, x = in_proj(h); y = C · conv(B · x);
    out_proj(y). Parameters in transformers' order: conv, in_proj, out_proj."""

    def __init__(self, d_model, kernel, bias=False, device=None, dtype=None):
        super().__init__()
        self.conv = CausalConv1d(d_model, kernel, bias, device=device, dtype=dtype)
        self.in_proj = Linear(d_model, 3 * d_model, device=device, dtype=dtype, bias=bias)
        self.out_proj = Linear(d_model, d_model, device=device, dtype=dtype, bias=bias)
        self.recompute_core = False  # no attention core to checkpoint

    def forward(self, x: torch.Tensor, token_positions=None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        b, c, h = self.in_proj(x).chunk(3, dim=-1)  # views of one (batch seq 3·d_model)
        return self.out_proj(c * causal_conv(b * h, self.conv.weight, self.conv.bias))
