"""Softmax, scaled dot-product attention and causal multi-head self-attention (sections 3.5.4-3.5.5)."""

import math

import torch
from einops import einsum, rearrange
from torch import nn

from torch.utils.checkpoint import checkpoint

from .fused import fused_causal_attention
from .layers import (NORM_CLASSES, Linear, RotaryPositionalEmbedding, check_positive_int,
                     rms_normalize)


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """exp(x_i) / sum_j exp(x_j) along `dim` (eq. 10).

    Subtracting the max first changes nothing mathematically but keeps exp() <= 1,
    so large inputs cannot overflow to inf/inf = NaN.
    """
    x_max = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - x_max)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(
    Q: torch.Tensor,  # (... queries d_k)
    K: torch.Tensor,  # (... keys d_k)
    V: torch.Tensor,  # (... keys d_v)
    mask: torch.Tensor | None = None,  # (queries keys) bool, True = may attend
) -> torch.Tensor:  # (... queries d_v)
    """softmax(Q K^T / sqrt(d_k)) V (eq. 11); masked-out scores become -inf before softmax."""
    d_k = Q.shape[-1]
    scores = einsum(Q, K, "... queries d_k, ... keys d_k -> ... queries keys") / math.sqrt(d_k)
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    weights = softmax(scores, dim=-1)
    return einsum(weights, V, "... queries keys, ... keys d_v -> ... queries d_v")


class CausalMultiHeadSelfAttention(nn.Module):
    """W_O MultiHead(W_Q x, W_K x, W_V x) with a causal mask (eq. 14).

    Heads are slices of one projection, so Q, K and V take three matmuls in total; heads
    then act as a batch dimension. Beyond the course's model (all keyword-only, defaults
    = the course's): num_kv_heads < num_heads is grouped-query attention (each K/V head
    serves num_heads/num_kv_heads query heads; K and V are broadcast over the group, never
    copied); head_dim other than d_model/num_heads; biases; QK-norm per head (Qwen3) or over
    the full projection width (OLMo-2), applied before RoPE. Llama 4: chunk (a query attends
    only the keys of its own chunk of `chunk` tokens), qk_norm="l2" (a weightless RMS norm of
    each head's Q and K after RoPE, on a layer with RoPE only), temperature=(F, s) on a layer
    without RoPE (each query scaled by 1 + s·log(1 + ⌊(i + 1)/F⌋)).
    """

    def __init__(self, d_model, num_heads, max_seq_len=None, theta=None, device=None, dtype=None,
                 *, num_kv_heads=None, head_dim=None, qkv_bias=False, out_bias=False,
                 qk_norm="none", norm="rmsnorm", norm_eps=1e-5, attention="naive", window=None,
                 chunk=None, temperature=None):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_positive_int("num_kv_heads", num_kv_heads)
        if head_dim is None:
            if d_model % num_heads:
                raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
            head_dim = d_model // num_heads  # d_v = d_k as in Vaswani et al.
        check_positive_int("head_dim", head_dim)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
        if qk_norm not in ("none", "head", "full", "l2"):
            raise ValueError(f"qk_norm must be none, head, full or l2, got {qk_norm!r}")
        if attention not in ("naive", "sdpa"):
            raise ValueError(f"attention must be naive or sdpa, got {attention!r}")
        for name, value in (("window", window), ("chunk", chunk)):
            if value is not None:
                check_positive_int(name, value)
        self.attention, self.window, self.chunk = attention, window, chunk
        self.temperature, self.norm_eps = temperature, norm_eps
        self.recompute_core = False  # set by TransformerLM.set_recompute("selective")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_k, self.qk_norm = head_dim, qk_norm
        q_width, kv_width = num_heads * head_dim, num_kv_heads * head_dim
        self.q_proj = Linear(d_model, q_width, device=device, dtype=dtype, bias=qkv_bias)
        self.k_proj = Linear(d_model, kv_width, device=device, dtype=dtype, bias=qkv_bias)
        self.v_proj = Linear(d_model, kv_width, device=device, dtype=dtype, bias=qkv_bias)
        self.output_proj = Linear(q_width, d_model, device=device, dtype=dtype, bias=out_bias)
        if qk_norm in ("head", "full"):
            norm_cls = NORM_CLASSES[norm]
            full = qk_norm == "full"
            self.q_norm = norm_cls(q_width if full else head_dim, eps=norm_eps, device=device, dtype=dtype)
            self.k_norm = norm_cls(kv_width if full else head_dim, eps=norm_eps, device=device, dtype=dtype)
        if theta is not None:
            if max_seq_len is None:
                raise ValueError("max_seq_len is required when theta is given (RoPE needs its tables)")
            self.rope = RotaryPositionalEmbedding(theta, self.d_k, max_seq_len, device=device)
        else:
            self.rope = None

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        # x: (... seq d_model) -> (... seq d_model)
        seq = x.shape[-2]
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.qk_norm == "full":  # OLMo-2: over the whole projection
            q, k = self.q_norm(q), self.k_norm(k)
        q = rearrange(q, "... seq (heads d_k) -> ... heads seq d_k", heads=self.num_heads)
        k = rearrange(k, "... seq (heads d_k) -> ... heads seq d_k", heads=self.num_kv_heads)
        v = rearrange(v, "... seq (heads d_v) -> ... heads seq d_v", heads=self.num_kv_heads)
        if self.qk_norm == "head":  # Qwen3: each head's vector
            q, k = self.q_norm(q), self.k_norm(k)

        if self.rope is not None:  # rotate Q and K, never V
            if token_positions is None:
                if seq > self.rope.max_seq_len:
                    raise ValueError(f"sequence length {seq} exceeds max_seq_len {self.rope.max_seq_len}")
                positions = torch.arange(seq, device=x.device)
                rotate = self.rope.rotate  # 0..seq-1 is in range by the check above
            else:
                positions = token_positions
                rotate = self.rope  # user positions: range-checked
            # (seq) or (batch seq) -> add a heads axis so every head gets the same rotation
            positions = positions[..., None, :]
            q, k = rotate(q, positions), rotate(k, positions)
            if self.qk_norm == "l2":  # Llama 4: after the rotation, on RoPE layers only
                q, k = rms_normalize(q, self.norm_eps), rms_normalize(k, self.norm_eps)
        if self.temperature is not None:
            q = self.tune(q, seq, token_positions, x.device)

        core, args = self.attention_core(q, k, v, seq, x.device)
        if self.recompute_core:  # Korthikanti et al.'s selective recomputation
            out = checkpoint(core, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            out = core(*args)
        if out.dim() == q.dim() + 1:  # grouped: (... kv_heads group seq d_v)
            out = rearrange(out, "... kv_heads group seq d_v -> ... (kv_heads group) seq d_v")
        return self.output_proj(rearrange(out, "... heads seq d_v -> ... seq (heads d_v)"))

    def tune(self, q, seq, token_positions, device):
        """Llama 4's attention-temperature tuning (Nakanishi 2025, transformers'
        Llama4TextAttention): the query at position i times 1 + s·log(1 + ⌊(i + 1)/F⌋). The
        floor is an integer division of the positions (no float op)."""
        floor, s = self.temperature
        positions = torch.arange(seq, device=device) if token_positions is None else token_positions
        steps = torch.div(positions + 1, floor, rounding_mode="floor")  # int64
        scale = torch.log1p(steps.to(torch.float32)) * s + 1.0  # (seq) or (batch seq)
        scale = scale[..., None, :, None] if scale.dim() > 1 else scale[:, None]
        return (q * scale).to(q.dtype)

    def attention_core(self, q, k, v, seq, device):
        """The core to run and its arguments: the fused kernel (a mask only for a window), or
        the course's core with the causal mask (query i may attend key j iff j <= i, and
        with a window W iff i - W < j <= i)."""
        mask = None
        if self.attention == "naive" or self.window is not None or self.chunk is not None:
            mask = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
            if self.window is not None:
                mask = mask.triu(1 - self.window)
            if self.chunk is not None:  # and iff ⌊j/C⌋ = ⌊i/C⌋ (integer ops, no FLOPs)
                chunk = torch.div(torch.arange(seq, device=device), self.chunk, rounding_mode="floor")
                mask = mask & (chunk[:, None] == chunk[None, :])
        if self.attention == "sdpa":
            return fused_causal_attention, (q, k, v) + ((mask,) if mask is not None else ())
        return self.core, (q, k, v, mask)

    def core(self, q, k, v, causal):
        """The course's attention core: causal mask (query i may attend key j iff j <= i),
        softmax, weighted values; grouped heads read their K/V head by broadcasting."""
        if self.num_kv_heads == self.num_heads:
            return scaled_dot_product_attention(q, k, v, mask=causal)  # (... heads seq d_v)
        q = rearrange(q, "... (kv_heads group) seq d_k -> ... kv_heads group seq d_k",
                      kv_heads=self.num_kv_heads)
        return scaled_dot_product_attention(q, k.unsqueeze(-3), v.unsqueeze(-3), mask=causal)
