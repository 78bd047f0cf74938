"""The Mamba-2 mixer (Dao and Gu 2024, "Transformers are SSMs": SSD), as transformers 5.23's
NemotronHMamba2Mixer runs it on its torch path (modeling_nemotron_h.py: causal_conv1d_fn,
mamba2_chunk_scan, NemotronHRMSNormGated):

  in_proj to the gate z, x·B·C and dt; x, B, C through a depthwise causal conv1d and SiLU;
  dt = clamp(softplus(dt + dt_bias), min); the chunked SSD scan with chunk C: within a chunk
  (C·Bᵀ ⊙ L)·(x·dt), the chunk states Bᵀ·(x·dt), their exchange across chunks by an
  (N+1)×(N+1) decay matrix, the output C·state; D·x added; a gated RMSNorm per group
  (x·SiLU(z), normalised over each group's width, × w); out_proj.

The exact op sequence is what the ledger (accounting/ledger/builder/mamba.py) assumes.
"""

import torch
from einops import einsum
from torch import nn

from .delta import silu
from .layers import Linear, check_positive_int
from .recurrent import CausalConv1d, causal_conv


def segment_sum(x: torch.Tensor) -> torch.Tensor:
    """transformers' segment_sum: out[..., i, j] = Σ_{j < k ≤ i} x[..., k] for j ≤ i, −inf
    above the diagonal (cumulative sums of the masked, expanded input)."""
    chunk = x.size(-1)
    x = x[..., None].expand(*x.size(), chunk)
    lower = torch.tril(torch.ones(chunk, chunk, device=x.device, dtype=torch.bool), diagonal=-1)
    x = x.masked_fill(~lower, 0)
    x = torch.cumsum(x, dim=-2)
    keep = torch.tril(torch.ones(chunk, chunk, device=x.device, dtype=torch.bool), diagonal=0)
    return x.masked_fill(~keep, -torch.inf)


def chunk_scan(x, dt, A, B, C, chunk: int, D, dt_bias, dt_min: float) -> torch.Tensor:
    """transformers' mamba2_chunk_scan (no initial state, the final state not returned), op
    for op: x (batch seq heads p), dt (batch seq heads), A and D (heads), B and C (batch
    seq groups n) -> (batch seq heads p)."""
    batch, seq, heads, _ = x.shape
    groups = B.shape[2]
    dt = torch.nn.functional.softplus(dt + dt_bias)
    dt = torch.clamp(dt, min=dt_min, max=float("inf"))
    x = x.float()
    # repeat_interleave over the heads of each group (a copy), written as expand + reshape
    B = B.float()[:, :, :, None].expand(*B.shape[:3], heads // groups, B.shape[-1]).reshape(
        batch, seq, heads, B.shape[-1])
    C = C.float()[:, :, :, None].expand(*C.shape[:3], heads // groups, C.shape[-1]).reshape(
        batch, seq, heads, C.shape[-1])
    pad = (chunk - seq % chunk) % chunk
    d_residual = D[..., None] * torch.constant_pad_nd(x, [0, 0, 0, 0, 0, pad])
    x = x * dt[..., None]
    A = A.to(x.dtype) * dt
    x = torch.constant_pad_nd(x, [0, 0, 0, 0, 0, pad]).reshape(batch, -1, chunk, heads, x.shape[-1])
    A = torch.constant_pad_nd(A, [0, 0, 0, pad]).reshape(batch, -1, chunk, heads)
    B = torch.constant_pad_nd(B, [0, 0, 0, 0, 0, pad]).reshape(batch, -1, chunk, heads, B.shape[-1])
    C = torch.constant_pad_nd(C, [0, 0, 0, 0, 0, pad]).reshape(batch, -1, chunk, heads, C.shape[-1])
    A = A.permute(0, 3, 1, 2)  # (batch heads chunks C)
    a_cumsum = torch.cumsum(A, dim=-1)
    L = torch.exp(segment_sum(A))
    G = einsum(C, B, "b c l h n, b c s h n -> b c l s h")
    M = G * L.permute(0, 2, 3, 4, 1)
    y_diag = einsum(M, x, "b c l s h, b c s h p -> b c l h p")
    decay_states = torch.exp(a_cumsum[:, :, :, -1:] - a_cumsum)
    b_decay = B * decay_states.permute(0, -2, -1, 1)[..., None]
    states = einsum(b_decay, x, "b c l h n, b c l h p -> b c h p n")
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(segment_sum(torch.constant_pad_nd(a_cumsum[:, :, :, -1], [1, 0])))
    decay_chunk = decay_chunk.transpose(1, 3)
    new_states = einsum(decay_chunk, states, "b z c h, b z h p n -> b c h p n")
    states = new_states[:, :-1]
    c_states = einsum(C, states, "b c l h n, b c h p n -> b c l h p")
    y_off = c_states * torch.exp(a_cumsum).permute(0, 2, 3, 1)[..., None]
    out = (y_diag + y_off).contiguous().reshape(batch, -1, heads, x.shape[-1])
    out = out + d_residual
    return out[:, :seq]


class GroupedGatedRMSNorm(nn.Module):
    """NemotronHRMSNormGated: x·SiLU(z), normalised over each of `groups` equal slices of the
    width (rsqrt of the mean square + eps), × w; in float32."""

    def __init__(self, dim, groups, eps=1e-6, device=None, dtype=None):
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        in_dtype = x.dtype
        x = x.to(torch.float32) * silu(gate.to(torch.float32))
        *lead, width = x.shape
        x = x.view(*lead, self.groups, width // self.groups)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.view(*lead, width).to(in_dtype)


class Mamba2Mixer(nn.Module):
    """NemotronHMamba2Mixer's parameters, in its registration order (conv1d, in_proj,
    dt_bias, A_log, norm, D, out_proj; the state dict lists a module's own first)."""

    def __init__(self, d_model, heads, head_dim, state, groups, kernel, chunk, conv_bias=True,
                 bias=False, dt_min=0.0, norm_eps=1e-5, device=None, dtype=None,
                 gate_only=False, mup=False):
        super().__init__()
        for name, value in (("heads", heads), ("head_dim", head_dim), ("state", state),
                            ("groups", groups), ("chunk", chunk)):
            check_positive_int(name, value)
        if heads % groups:
            raise ValueError(f"heads {heads} is not a multiple of groups {groups}")
        self.heads, self.head_dim, self.state, self.groups = heads, head_dim, state, groups
        self.chunk, self.dt_min = chunk, dt_min
        inner = heads * head_dim
        self.conv_dim = inner + 2 * groups * state
        self.conv1d = CausalConv1d(self.conv_dim, kernel, conv_bias, device=device, dtype=dtype)
        self.in_proj = Linear(d_model, inner + self.conv_dim + heads, device=device, dtype=dtype,
                              bias=bias)
        self.dt_bias = nn.Parameter(torch.ones(heads, device=device, dtype=dtype))
        a = torch.arange(1, heads + 1, device=device, dtype=dtype) if device != "meta" else \
            torch.empty(heads, device=device, dtype=dtype)
        self.A_log = nn.Parameter(torch.log(a))
        # FalconH1Mixer with mamba_rms_norm false: y·SiLU(z), no norm (gate_only)
        self.norm = None if gate_only else GroupedGatedRMSNorm(inner, groups, norm_eps,
                                                               device=device, dtype=dtype)
        self.D = nn.Parameter(torch.ones(heads, device=device, dtype=dtype))
        self.out_proj = Linear(inner, d_model, device=device, dtype=dtype, bias=bias)
        # Falcon-H1's muP: the input × ssm_in_multiplier, in_proj's output × mup_vector (one
        # multiplier per channel; ones here: the values change no count)
        self.ssm_in_multiplier = 1.0 if mup else None
        if mup:
            self.register_buffer("mup_vector", torch.ones(
                1, 1, inner + self.conv_dim + heads, device=device, dtype=torch.float32),
                persistent=False)
        self.recompute_core = False  # no attention core to checkpoint

    def forward(self, x: torch.Tensor, token_positions=None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        batch, seq, _ = x.shape
        inner, heads, groups, n = self.heads * self.head_dim, self.heads, self.groups, self.state
        if self.ssm_in_multiplier is not None:
            x = x * self.ssm_in_multiplier
            zxbcdt = self.in_proj(x) * self.mup_vector
        else:
            zxbcdt = self.in_proj(x)
        A = -torch.exp(self.A_log.float())
        gate, xbc, dt = torch.split(zxbcdt, [inner, self.conv_dim, heads], dim=-1)
        xbc = silu(causal_conv(xbc, self.conv1d.weight, self.conv1d.bias))
        h, B, C = torch.split(xbc, [inner, groups * n, groups * n], dim=-1)
        y = chunk_scan(h.view(batch, seq, heads, self.head_dim), dt, A,
                       B.view(batch, seq, groups, n), C.view(batch, seq, groups, n),
                       self.chunk, self.D, self.dt_bias, self.dt_min)
        y = y.reshape(batch, seq, inner)
        y = y * silu(gate) if self.norm is None else self.norm(y, gate)
        return self.out_proj(y)
