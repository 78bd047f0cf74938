"""The Mamba-1 mixer (Gu and Dao 2023, "Mamba": the selective scan S6), as transformers 5.23's
JambaMambaMixer runs it on its torch path (modeling_jamba.py: causal_conv1d_fn,
mamba_selective_scan's sequential loop):

  in_proj to x and the gate z (d_i each); x through a depthwise causal conv1d and SiLU;
  x_proj to dt (rank r), B and C (n each), each RMS-normed (Jamba's dt_layernorm,
  b_layernorm, c_layernorm); dt = softplus(dt_proj.weight·dt + dt_proj.bias); per channel
  and state dA = exp(A·dt), dB·x = dt·B·x; then, token by token, state = dA·state + dB·x
  and y = state·C (a d_i×n by n product per token); y + D·x; y·SiLU(z); out_proj.

The exact op sequence is what the ledger (accounting/ledger/builder/mamba1.py) assumes.
"""

import torch
from einops import einsum
from torch import nn

from .delta import silu
from .layers import Linear, RMSNorm, check_positive_int
from .recurrent import CausalConv1d, causal_conv


class DtProj(nn.Module):
    """dt_proj's weight (d_i, r) and bias (d_i): a linear layer in transformers, whose forward is
    never called (the mixer runs weight @ dt and adds the bias in the scan), so a holder of
    the two parameters here, not a Linear."""

    def __init__(self, rank, inner, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(inner, rank, device=device, dtype=dtype))
        nn.init.uniform_(self.weight, -rank ** -0.5, rank ** -0.5)
        self.bias = nn.Parameter(torch.zeros(inner, device=device, dtype=dtype))


class Mamba1Mixer(nn.Module):
    """JambaMambaMixer's parameters, in its registration order (conv1d, in_proj, x_proj,
    dt_proj, A_log, D, out_proj, dt_layernorm, b_layernorm, c_layernorm; the state dict
    lists a module's own first)."""

    def __init__(self, d_model, inner, dt_rank, state, kernel, conv_bias=True, bias=False,
                 norm_eps=1e-6, device=None, dtype=None):
        super().__init__()
        for name, value in (("inner", inner), ("dt_rank", dt_rank), ("state", state)):
            check_positive_int(name, value)
        self.inner, self.dt_rank, self.state = inner, dt_rank, state
        self.conv1d = CausalConv1d(inner, kernel, conv_bias, device=device, dtype=dtype)
        self.in_proj = Linear(d_model, 2 * inner, device=device, dtype=dtype, bias=bias)
        self.x_proj = Linear(inner, dt_rank + 2 * state, device=device, dtype=dtype)
        self.dt_proj = DtProj(dt_rank, inner, device=device, dtype=dtype)
        a = torch.empty(inner, state, device=device, dtype=dtype) if device == "meta" else \
            torch.arange(1, state + 1, device=device, dtype=dtype).expand(inner, state)
        self.A_log = nn.Parameter(torch.log(a))
        self.D = nn.Parameter(torch.ones(inner, device=device, dtype=dtype))
        self.out_proj = Linear(inner, d_model, device=device, dtype=dtype, bias=bias)
        self.dt_layernorm = RMSNorm(dt_rank, norm_eps, device=device, dtype=dtype)
        self.b_layernorm = RMSNorm(state, norm_eps, device=device, dtype=dtype)
        self.c_layernorm = RMSNorm(state, norm_eps, device=device, dtype=dtype)
        self.recompute_core = False  # no attention core to checkpoint

    def forward(self, x: torch.Tensor, token_positions=None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        batch, seq, _ = x.shape
        di, r, n = self.inner, self.dt_rank, self.state
        xz = self.in_proj(x)
        A = -torch.exp(self.A_log.float())
        h, gate = torch.split(xz, [di, di], dim=-1)
        h = silu(causal_conv(h, self.conv1d.weight, self.conv1d.bias))
        dt, B, C = torch.split(self.x_proj(h.contiguous()), [r, n, n], dim=-1)
        dt, B, C = self.dt_layernorm(dt), self.b_layernorm(B), self.c_layernorm(C)
        # transformers: dt_proj.weight @ dt, its bias added inside the scan (delta_bias)
        dt = einsum(dt, self.dt_proj.weight, "b t r, i r -> b t i")
        dt = torch.nn.functional.softplus(dt + self.dt_proj.bias)
        dA = torch.exp(dt[..., None] * A)  # (batch seq d_i n)
        dBx = dt[..., None] * B[:, :, None, :] * h[..., None]
        state = torch.zeros(batch, di, n, device=x.device, dtype=dA.dtype)
        ys = []
        for i in range(seq):  # the sequential scan: state = dA·state + dB·x; y = state·C
            state = dA[:, i] * state + dBx[:, i]
            ys.append(torch.matmul(state, C[:, i, :, None])[..., 0])
        y = torch.stack(ys, dim=1)  # (batch seq d_i)
        y = y + h * self.D
        y = y * silu(gate)
        return self.out_proj(y)
