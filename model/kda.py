"""Kimi Delta Attention (Kimi Linear's KDA layers; Kimi Team 2025, "Kimi Linear: An
Expressive, Efficient Attention Architecture", arXiv 2510.26692): the gated delta rule with
a decay per key channel instead of per head, as transformers 5.23's KimiLinearDeltaAttention
builds it (modeling_kimi_linear.py) and as fla's chunk_kda computes its chunked form:

  q_proj, k_proj, v_proj; Q, K, V through one depthwise causal conv1d and SiLU; the forget
  gate g = −exp(A_log)·softplus(f_b_proj(f_a_proj(x)) + dt_bias), one log-decay per (head,
  key channel); β = sigmoid(b_proj(x)); the chunked rule with chunk C (Q and K
  L2-normalised, Q scaled by 1/√d_k); an output gate g_b_proj(g_a_proj(x)) through a
  sigmoid-gated RMSNorm (o_norm); o_proj.

The chunked rule per chunk, with G the cumulative log-decay of each key channel (C × d_k):
the pairwise decays exp(G_i − G_j) factor as exp(G_i)·exp(−G_j), so the UT system
A = (K_β ⊙ e^G)(K ⊙ e^{−G})ᵀ and the intra-chunk scores (Q ⊙ e^G)(K ⊙ e^{−G})ᵀ are two
C × d_k × C products, as fla's chunk_kda_fwd_intra computes them (referring each 16-token
sub-chunk to its own position for range; the same products; here one reference, exact in
real arithmetic, which overflows float32 once a chunk's cumulative decay passes ~88);
the unit lower-triangular solves and the scan over the d_k × d_v state are the gated delta
rule's (model/delta.py: delta_scan), the state decayed per key channel. transformers' torch
path computes A and the scores as broadcast products summed over d_k and applies the solve
as a loop and two dense C × C products (chunk_kimi_delta_attention): the same function, other
operations (accounting/crosscheck/hf_recurrent.py states the difference).

The exact op sequence is what the ledger (accounting/ledger/builder/kda.py) assumes.
"""

import torch
from einops import einsum
from torch import nn

from .delta import GatedRMSNorm, delta_scan, l2norm, silu
from .layers import Linear, check_positive_int
from .recurrent import CausalConv1d, causal_conv


def chunk_kda(q, k, v, g, beta, chunk: int) -> torch.Tensor:
    """q, k (batch seq h d_k), v (batch seq h d_v), g (batch seq h d_k: log-decays), beta
    (batch seq h) -> (batch seq h d_v). No initial state; N_c − 1 state updates."""
    batch, seq, h, dk = k.shape
    q, k, v, beta, g = (x.transpose(1, 2).contiguous().to(torch.float32)
                        for x in (q, k, v, beta, g))
    q = l2norm(q)
    k = l2norm(k)
    q = q * dk ** -0.5
    pad = (chunk - seq % chunk) % chunk
    q, k, v, g = (torch.constant_pad_nd(x, [0, 0, 0, pad]) for x in (q, k, v, g))
    beta = torch.constant_pad_nd(beta, [0, pad])
    n = (seq + pad) // chunk
    v_beta = v * beta.unsqueeze(-1)
    k_beta = k * beta.unsqueeze(-1)
    q, k, g, k_beta, v_beta = (x.reshape(batch, h, n, chunk, x.shape[-1])
                               for x in (q, k, g, k_beta, v_beta))
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    cum = g.cumsum(dim=-2)  # per key channel, within each chunk
    ec = cum.exp()
    k_neg = k * (-cum).exp()  # K ⊙ e^{−G}
    decayed_k_beta = k_beta * ec  # K_β ⊙ e^G: the UT system's rows and the W solve's input
    q = q * ec  # Q ⊙ e^G: the intra-chunk scores' rows and the scan's queries
    ut = einsum(decayed_k_beta, k_neg, "b h n i d, b h n j d -> b h n i j").masked_fill(upper, 0)
    intra = einsum(q, k_neg, "b h n i d, b h n j d -> b h n i j").masked_fill(upper, 0)
    u = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(ut, decayed_k_beta, upper=False, unitriangular=True)
    w = w.contiguous()  # row-major for the scan (model/delta.py's reason)
    k = k * (cum[..., -1:, :] - cum).exp()
    decay = cum[..., -1, :].exp().unsqueeze(-1)  # (batch h n d_k 1): per key channel
    return delta_scan(u, w, q, intra, k, decay, dk, seq)


class ForgetGate(nn.Module):
    """KimiLinearForgetGate: f_a_proj (d → d_k), f_b_proj (d_k → h·d_k), dt_bias (h·d_k),
    A_log (h); g = −exp(A_log)·softplus(f_b_proj(f_a_proj(x)) + dt_bias)."""

    def __init__(self, d_model, heads, key_dim, device=None, dtype=None):
        super().__init__()
        self.heads, self.key_dim = heads, key_dim
        self.f_a_proj = Linear(d_model, key_dim, device=device, dtype=dtype)
        self.f_b_proj = Linear(key_dim, heads * key_dim, device=device, dtype=dtype)
        self.dt_bias = nn.Parameter(torch.zeros(heads * key_dim, device=device, dtype=dtype))
        a = torch.empty(heads, device=device, dtype=dtype)
        if a.device.type != "meta":
            a.uniform_(1, 16)  # fla's initialisation (KimiLinearPreTrainedModel._init_weights)
        self.A_log = nn.Parameter(torch.log(a))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        f = self.f_b_proj(self.f_a_proj(x))
        sp = torch.nn.functional.softplus(f.float() + self.dt_bias)
        neg = -self.A_log.float().exp()
        return sp.view(batch, seq, self.heads, self.key_dim) * neg.unsqueeze(-1)


class KimiDeltaAttention(nn.Module):
    """KimiLinearDeltaAttention's modules, in its registration order: q_proj, k_proj,
    v_proj, conv1d (over Q, K, V: 2·h·d_k + h·d_v channels, no bias), forget_gate, b_proj,
    g_a_proj, g_b_proj, o_norm (sigmoid-gated RMSNorm of d_v), o_proj. No biases."""

    def __init__(self, d_model, heads, key_dim, value_dim, kernel, chunk, norm_eps=1e-6,
                 device=None, dtype=None):
        super().__init__()
        for name, value in (("heads", heads), ("key_dim", key_dim), ("value_dim", value_dim),
                            ("chunk", chunk)):
            check_positive_int(name, value)
        self.h, self.dk, self.dv, self.chunk = heads, key_dim, value_dim, chunk
        key, value = heads * key_dim, heads * value_dim
        self.q_proj = Linear(d_model, key, device=device, dtype=dtype)
        self.k_proj = Linear(d_model, key, device=device, dtype=dtype)
        self.v_proj = Linear(d_model, value, device=device, dtype=dtype)
        self.conv1d = CausalConv1d(2 * key + value, kernel, device=device, dtype=dtype)
        self.forget_gate = ForgetGate(d_model, heads, key_dim, device=device, dtype=dtype)
        self.b_proj = Linear(d_model, heads, device=device, dtype=dtype)
        self.g_a_proj = Linear(d_model, value_dim, device=device, dtype=dtype)
        self.g_b_proj = Linear(value_dim, value, device=device, dtype=dtype)
        self.o_norm = GatedRMSNorm(value_dim, norm_eps, device=device, dtype=dtype,
                                   gate="sigmoid")
        self.o_proj = Linear(value, d_model, device=device, dtype=dtype)
        self.recompute_core = False  # no attention core to checkpoint

    def forward(self, x: torch.Tensor, token_positions=None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        batch, seq, _ = x.shape
        h, dk, dv = self.h, self.dk, self.dv
        mixed = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        mixed = silu(causal_conv(mixed, self.conv1d.weight, self.conv1d.bias))
        q, k, v = torch.split(mixed, [h * dk, h * dk, h * dv], dim=-1)
        q, k = q.reshape(batch, seq, h, dk), k.reshape(batch, seq, h, dk)
        v = v.reshape(batch, seq, h, dv)
        g = self.forget_gate(x)
        beta = torch.sigmoid(self.b_proj(x))
        out = chunk_kda(q, k, v, g, beta, self.chunk)
        gate = self.g_b_proj(self.g_a_proj(x)).view(batch, seq, h, dv)
        out = self.o_norm(out, gate)
        return self.o_proj(out.reshape(batch, seq, h * dv))
