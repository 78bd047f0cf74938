"""The gated DeltaNet layer (Qwen3-Next's linear_attention layers; Yang, Kautz and
Hatamizadeh 2024, "Gated Delta Networks"), as transformers 5.23's Qwen3NextGatedDeltaNet
runs it on its torch path (modeling_qwen3_next.py, torch_chunk_gated_delta_rule):

  in_proj_qkvz and in_proj_ba; Q, K, V through a depthwise causal conv1d and SiLU;
  β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias); the chunked gated delta rule with
  chunk C (Q and K L2-normalised, Q scaled by 1/√d_k; within a chunk the UT system solved
  by a unit lower-triangular solve, across chunks a sequential scan over the d_k × d_v
  state); a gated RMSNorm (norm(o)·w·SiLU(z)); out_proj.

The exact op sequence is what the ledger (accounting/ledger/builder/delta.py) assumes; the
products are einsums (the project's exact fvcore handle counts them).
"""

import torch
from einops import einsum
from torch import nn

from .layers import Linear, check_positive_int
from .recurrent import CausalConv1d, causal_conv


def silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """transformers' l2norm (fla's): x · rsqrt(Σ x² + eps) over the last dim."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class GatedRMSNorm(nn.Module):
    """Qwen3NextRMSNormGated: x · rsqrt(mean(x²) + eps) · w · SiLU(z), in float32;
    gate="sigmoid": KimiLinearRMSNormGated's · sigmoid(z) (Kimi Delta Attention)."""

    def __init__(self, dim, eps=1e-6, device=None, dtype=None, gate="silu"):
        super().__init__()
        if gate not in ("silu", "sigmoid"):
            raise ValueError(f"gate must be silu or sigmoid, got {gate!r}")
        self.eps, self.gate = eps, gate
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        in_dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        x = self.weight * x.to(in_dtype)
        gate = gate.to(torch.float32)
        return (x * (silu(gate) if self.gate == "silu" else torch.sigmoid(gate))).to(in_dtype)


def chunk_gated_delta_rule(q, k, v, g, beta, chunk: int) -> torch.Tensor:
    """transformers' torch_chunk_gated_delta_rule (no initial state, the final state not
    computed: N_c − 1 state updates), op for op: q, k (batch seq h_k d_k), v (batch seq h_v d_v), g and beta
    (batch seq h_v) -> (batch seq h_v d_v)."""
    batch, seq, hk, dk = k.shape
    hv, dv = v.shape[-2:]
    if hv != hk:  # each q/k head serves h_v/h_k consecutive value heads (a copy)
        q = q.unsqueeze(3).expand(batch, seq, hk, hv // hk, dk).reshape(batch, seq, hv, dk)
        k = k.unsqueeze(3).expand(batch, seq, hk, hv // hk, dk).reshape(batch, seq, hv, dk)
    # transformers: x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format);
    # written .contiguous() first, which always copies a transposed float32 tensor
    q, k, v, beta, g = (x.transpose(1, 2).contiguous().to(torch.float32)
                        for x in (q, k, v, beta, g))
    q = l2norm(q)
    k = l2norm(k)
    q = q * dk ** -0.5
    pad = (chunk - seq % chunk) % chunk
    q, k, v = (torch.constant_pad_nd(x, [0, 0, 0, pad]) for x in (q, k, v))
    beta, g = (torch.constant_pad_nd(x, [0, pad]) for x in (beta, g))
    n = (seq + pad) // chunk
    v_beta = v * beta.unsqueeze(-1)
    k_beta = k * beta.unsqueeze(-1)
    q, k, k_beta, v_beta = (x.reshape(batch, hv, n, chunk, x.shape[-1])
                            for x in (q, k, k_beta, v_beta))
    g = g.reshape(batch, hv, n, chunk)
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    cum = g.cumsum(dim=-1)
    pair = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(upper, float("-inf")).exp()
    ut = einsum(k_beta, k, "b h n i d, b h n j d -> b h n i j") * pair
    intra = einsum(q, k, "b h n i d, b h n j d -> b h n i j") * pair
    decayed_k_beta = k_beta * cum.exp().unsqueeze(-1)
    u = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(ut, decayed_k_beta, upper=False, unitriangular=True)
    # the solve returns each chunk's matrix column-major (LAPACK's layout): one copy of W,
    # row-major, for the scan's products (transformers' loop copies each chunk's slice)
    w = w.contiguous()
    q = q * cum.exp().unsqueeze(-1)
    k = k * (cum[..., -1:] - cum).exp().unsqueeze(-1)
    decay = cum[..., -1].exp()[..., None, None]
    return delta_scan(u, w, q, intra, k, decay, dk, seq)


def delta_scan(u, w, q, intra, k, decay, dk: int, seq: int) -> torch.Tensor:
    """The scan over the chunks shared by the gated delta rule and Kimi Delta Attention:
    u, w (the UT solves' new values and decayed keys), q (decayed queries), k (keys decayed
    to the chunk's end), (batch h n chunk ·); intra (batch h n chunk chunk); decay, each
    chunk's state decay, broadcast over the state (batch h n 1 1: a scalar per head, or
    batch h n d_k 1: one per key channel). N_c − 1 state updates (the state after the last
    chunk is no output here: transformers computes it for its cache; a forward without one
    has no use for it). -> (batch seq h d_v)."""
    batch, hv, n, chunk, dv = u.shape
    state = torch.zeros(batch, hv, dk, dv, dtype=u.dtype, device=u.device)
    out = torch.zeros_like(u)
    for i in range(n):
        v_new = u[:, :, i] - einsum(w[:, :, i], state, "b h c k, b h k v -> b h c v")
        inter = einsum(q[:, :, i], state, "b h c k, b h k v -> b h c v")
        out[:, :, i] = inter + einsum(intra[:, :, i], v_new, "b h c j, b h j v -> b h c v")
        if i < n - 1:
            state = state * decay[:, :, i] + einsum(k[:, :, i], v_new, "b h c k, b h c v -> b h k v")
    out = out.reshape(batch, hv, n * chunk, dv)[:, :, :seq]
    return out.transpose(1, 2).contiguous()


class GatedDeltaNet(nn.Module):
    """Qwen3NextGatedDeltaNet's modules, in its registration order: conv1d (over Q, K, V:
    2·h_k·d_k + h_v·d_v channels, no bias), in_proj_qkvz, in_proj_ba, dt_bias, A_log, norm,
    out_proj; with `split`, Qwen3_5GatedDeltaNet's in_proj_qkv, in_proj_z, in_proj_b and
    in_proj_a for the two (modular_qwen3_5.py)."""

    def __init__(self, d_model, key_heads, value_heads, key_dim, value_dim, kernel, chunk,
                 norm_eps=1e-6, split=False, device=None, dtype=None):
        super().__init__()
        for name, value in (("key_heads", key_heads), ("value_heads", value_heads),
                            ("key_dim", key_dim), ("value_dim", value_dim), ("chunk", chunk)):
            check_positive_int(name, value)
        if value_heads % key_heads:
            raise ValueError(f"value_heads {value_heads} is not a multiple of key_heads {key_heads}")
        self.hk, self.hv, self.dk, self.dv, self.chunk = key_heads, value_heads, key_dim, value_dim, chunk
        key, value = key_heads * key_dim, value_heads * value_dim
        self.conv1d = CausalConv1d(2 * key + value, kernel, device=device, dtype=dtype)
        self.split = split
        if split:  # Qwen3_5GatedDeltaNet: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
            self.in_proj_qkv = Linear(d_model, 2 * key + value, device=device, dtype=dtype)
            self.in_proj_z = Linear(d_model, value, device=device, dtype=dtype)
            self.in_proj_b = Linear(d_model, value_heads, device=device, dtype=dtype)
            self.in_proj_a = Linear(d_model, value_heads, device=device, dtype=dtype)
        else:
            self.in_proj_qkvz = Linear(d_model, 2 * key + 2 * value, device=device, dtype=dtype)
            self.in_proj_ba = Linear(d_model, 2 * value_heads, device=device, dtype=dtype)
        self.dt_bias = nn.Parameter(torch.ones(value_heads, device=device, dtype=dtype))
        a = torch.empty(value_heads, device=device, dtype=dtype)
        if a.device.type != "meta":
            a.uniform_(1, 16)
        self.A_log = nn.Parameter(torch.log(a))
        self.norm = GatedRMSNorm(value_dim, norm_eps, device=device, dtype=dtype)
        self.out_proj = Linear(value, d_model, device=device, dtype=dtype)
        self.recompute_core = False  # no attention core to checkpoint

    def forward(self, x: torch.Tensor, token_positions=None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        batch, seq, _ = x.shape
        hk, hv, dk, dv, r = self.hk, self.hv, self.dk, self.dv, self.hv // self.hk
        if self.split:  # Qwen3.5: Q, K, V already in the conv's order; z, b, a their own
            mixed = self.in_proj_qkv(x)
            z = self.in_proj_z(x).view(batch, seq, hv, dv)
            b, a = self.in_proj_b(x), self.in_proj_a(x)
        else:
            qkvz = self.in_proj_qkvz(x).view(batch, seq, hk, 2 * dk + 2 * r * dv)
            q, k, v, z = torch.split(qkvz, [dk, dk, r * dv, r * dv], dim=3)
            b, a = torch.split(self.in_proj_ba(x).view(batch, seq, hk, 2 * r), [r, r], dim=3)
            z = z.reshape(batch, seq, hv, dv)
            b, a = b.reshape(batch, seq, hv), a.reshape(batch, seq, hv)
            mixed = torch.cat([t.reshape(batch, seq, -1) for t in (q, k, v)], dim=-1)
        mixed = silu(causal_conv(mixed, self.conv1d.weight, self.conv1d.bias))
        q, k, v = torch.split(mixed, [hk * dk, hk * dk, hv * dv], dim=-1)
        q, k = q.reshape(batch, seq, hk, dk), k.reshape(batch, seq, hk, dk)
        v = v.reshape(batch, seq, hv, dv)
        beta = torch.sigmoid(b)
        g = -self.A_log.float().exp() * torch.nn.functional.softplus(a.float() + self.dt_bias)
        out = chunk_gated_delta_rule(q, k, v, g, beta, self.chunk)
        out = self.norm(out, z)
        return self.out_proj(out.reshape(batch, seq, hv * dv))

