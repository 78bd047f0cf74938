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


def softmax_with_sink(x: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """softmax over x's last dim with one more column, `sink` (a logit per row, broadcast),
    that is dropped after: gpt-oss's attention sinks (transformers' GptOssAttention
    concatenates the sink column to the scores, softmaxes the T + 1 columns and slices the
    sink off). The same values without the extra column: m = max(row max, sink),
    exp(x − m) / (Σ exp(x − m) + exp(sink − m))."""
    x_max = torch.maximum(x.amax(dim=-1, keepdim=True), sink)
    e = torch.exp(x - x_max)
    return e / (e.sum(dim=-1, keepdim=True) + torch.exp(sink - x_max))


def scaled_dot_product_attention(
    Q: torch.Tensor,  # (... queries d_k)
    K: torch.Tensor,  # (... keys d_k)
    V: torch.Tensor,  # (... keys d_v)
    mask: torch.Tensor | None = None,  # (queries keys) bool, True = may attend
    sinks: torch.Tensor | None = None,  # (... 1 1): one logit per head (attention sinks)
    softcap: float | None = None,
    bias: torch.Tensor | None = None,  # (... 1 keys): ALiBi's, added before the scale
) -> torch.Tensor:  # (... queries d_v)
    """softmax(Q K^T / sqrt(d_k)) V (eq. 11); masked-out scores become -inf before softmax.
    With ALiBi, softmax((Q K^T + bias) / sqrt(d_k)) V, as Falcon's FalconAttention (alibi).
    softcap: the scaled scores soft-capped first, cap·tanh(scores/cap), as transformers'
    Gemma2 eager_attention_forward does (three ops: divide, tanh, multiply)."""
    d_k = Q.shape[-1]
    scores = einsum(Q, K, "... queries d_k, ... keys d_k -> ... queries keys")
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    scores = scores / math.sqrt(d_k)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    weights = softmax(scores, dim=-1) if sinks is None else softmax_with_sink(scores, sinks)
    return einsum(weights, V, "... queries keys, ... keys d_v -> ... queries d_v")


class CausalMultiHeadSelfAttention(nn.Module):
    """W_O MultiHead(W_Q x, W_K x, W_V x) with a causal mask (eq. 14).

    Heads are slices of one projection, so Q, K and V take three matmuls in total; heads
    then act as a batch dimension. Beyond the course's model (all keyword-only, defaults
    = the course's): num_kv_heads < num_heads is grouped-query attention (each K/V head
    serves num_heads/num_kv_heads query heads; K and V are broadcast over the group, never
    copied); head_dim other than d_model/num_heads; biases; QK-norm per head (Qwen3), per head
    with a weight per head (Cohere's use_qk_norm) or over the full projection width (OLMo-2),
    applied before RoPE; RoPE on the first rotary_dim
    dims of each head only (GPT-NeoX's rotary_pct, Phi's partial_rotary_factor); ALiBi in
    place of RoPE (alibi=True: Falcon's slope per head times the key position, added to the
    scores before the scale; the naive core only).
    Llama 4: chunk (a query attends
    only the keys of its own chunk of `chunk` tokens), qk_norm="l2" (a weightless RMS norm of
    each head's Q and K after RoPE, on a layer with RoPE only), temperature=(F, s) on a layer
    without RoPE (each query scaled by 1 + s·log(1 + ⌊(i + 1)/F⌋)).
    Qwen3-Next: output_gate (the merged heads times sigmoid(gate_proj(x)) before the output
    projection; gate_proj is Q's width).
    """

    def __init__(self, d_model, num_heads, max_seq_len=None, theta=None, device=None, dtype=None,
                 *, num_kv_heads=None, head_dim=None, qkv_bias=False, out_bias=False,
                 qk_norm="none", norm="rmsnorm", norm_eps=1e-5, attention="naive", window=None,
                 attention_sinks=False, norm_offset=False, attn_softcap=None,
                 rotary_dim=None, alibi=False,
                 chunk=None, temperature=None, output_gate=False, k_eq_v=False, v_norm=False,
                 kv_share=None):
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
        if qk_norm not in ("none", "head", "full", "l2", "per_head"):
            raise ValueError(f"qk_norm must be none, head, full, l2 or per_head, got {qk_norm!r}")
        if attention not in ("naive", "sdpa"):
            raise ValueError(f"attention must be naive or sdpa, got {attention!r}")
        for name, value in (("window", window), ("chunk", chunk)):
            if value is not None:
                check_positive_int(name, value)
        if attn_softcap is not None and attention != "naive":
            raise ValueError("attn_softcap needs the explicit scores (attention naive)")
        self.attention, self.window, self.chunk = attention, window, chunk
        self.softcap = attn_softcap
        self.temperature, self.norm_eps = temperature, norm_eps
        self.recompute_core = False  # set by TransformerLM.set_recompute("selective")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_k, self.qk_norm = head_dim, qk_norm
        self.v_norm = v_norm  # Gemma 4: a weightless RMSNorm of each value head
        q_width, kv_width = num_heads * head_dim, num_kv_heads * head_dim
        self.q_proj = Linear(d_model, q_width, device=device, dtype=dtype, bias=qkv_bias)
        # Gemma 4's KV sharing (Gemma4TextAttention): kv_share is (store, key), a dict shared
        # by the model and this layer's kind; "reuse" layers hold no k_proj, v_proj or
        # k_norm and attend over store[key], which every other layer of the kind writes
        # (the last one before the sharing layers is transformers' "store" layer)
        self.kv_share = kv_share
        reuse = kv_share is not None and kv_share[2]
        self.k_proj = None if reuse else Linear(d_model, kv_width, device=device, dtype=dtype,
                                                bias=qkv_bias)
        # Gemma 4's attention_k_eq_v (a global layer): no v_proj, V is K's projection
        self.v_proj = (None if k_eq_v or reuse else
                       Linear(d_model, kv_width, device=device, dtype=dtype, bias=qkv_bias))
        self.output_proj = Linear(q_width, d_model, device=device, dtype=dtype, bias=out_bias)
        # Qwen3-Next's output gate: transformers' q_proj is twice as wide (each head's query,
        # then its gate); here the gate half is its own projection (the same parameters and
        # matmul FLOPs), biased as q_proj is
        self.gate_proj = (Linear(d_model, q_width, device=device, dtype=dtype, bias=qkv_bias)
                          if output_gate else None)
        if attention_sinks:  # gpt-oss: one learned logit per head in every softmax row
            if attention != "naive":
                raise ValueError("attention sinks need the naive attention core")
            self.sinks = nn.Parameter(torch.zeros(num_heads, device=device, dtype=dtype))
        else:
            self.register_parameter("sinks", None)
        if qk_norm in ("head", "full", "per_head"):  # (l2: weightless, no module)
            norm_cls = NORM_CLASSES[norm]
            full = qk_norm == "full"
            offset = {"offset": True} if norm_offset else {}  # Gemma 3's (1 + w) gains
            if qk_norm == "per_head":  # Cohere: over each head's d_k, a weight per head
                q_heads, kv_heads = {"heads": num_heads}, {"heads": num_kv_heads}
            else:
                q_heads = kv_heads = {}
            self.q_norm = norm_cls(q_width if full else head_dim, eps=norm_eps, device=device,
                                   dtype=dtype, **offset, **q_heads)
            self.k_norm = None if reuse else norm_cls(
                kv_width if full else head_dim, eps=norm_eps, device=device, dtype=dtype,
                **offset, **kv_heads)
        if alibi:  # per-head slopes (Press et al. 2022), as transformers' build_alibi_tensor
            if theta is not None or attention != "naive":
                raise ValueError("ALiBi replaces RoPE and runs in the naive core: give theta "
                                 "None and attention naive with alibi")
            self.register_buffer("alibi_slopes", alibi_slopes(num_heads, device), persistent=False)
        self.alibi = alibi
        if theta is not None:
            if max_seq_len is None:
                raise ValueError("max_seq_len is required when theta is given (RoPE needs its tables)")
            if rotary_dim is not None:  # partial rotary (GPT-NeoX, Phi): the first rotary_dim dims
                check_positive_int("rotary_dim", rotary_dim)
                if rotary_dim >= head_dim:
                    raise ValueError(f"rotary_dim={rotary_dim} must be below head_dim={head_dim}")
            self.rotary_dim = rotary_dim
            self.rope = RotaryPositionalEmbedding(theta, rotary_dim or self.d_k, max_seq_len,
                                                  device=device)
        else:
            self.rope = None

    key_multiplier = None  # Falcon-H1's muP scalar on K (TransformerBlock sets it)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        # x: (... seq d_model) -> (... seq d_model)
        seq = x.shape[-2]
        if self.kv_share is not None and self.kv_share[2]:
            return self.reuse(x, token_positions)
        q, k = self.q_proj(x), self.k_proj(x)
        v = k if self.v_proj is None else self.v_proj(x)
        gate = None if self.gate_proj is None else self.gate_proj(x)
        if self.qk_norm == "full":  # OLMo-2: over the whole projection
            q, k = self.q_norm(q), self.k_norm(k)
        elif self.qk_norm == "per_head":  # Cohere (CohereAttention): on (... seq heads d_k),
            # before the heads move ahead of seq, each head's own (d_k) weight broadcast
            q = self.q_norm(rearrange(q, "... seq (heads d_k) -> ... seq heads d_k",
                                      heads=self.num_heads))
            k = self.k_norm(rearrange(k, "... seq (heads d_k) -> ... seq heads d_k",
                                      heads=self.num_kv_heads))
            q = rearrange(q, "... seq heads d_k -> ... seq (heads d_k)")
            k = rearrange(k, "... seq heads d_k -> ... seq (heads d_k)")
        q = rearrange(q, "... seq (heads d_k) -> ... heads seq d_k", heads=self.num_heads)
        k = rearrange(k, "... seq (heads d_k) -> ... heads seq d_k", heads=self.num_kv_heads)
        v = rearrange(v, "... seq (heads d_v) -> ... heads seq d_v", heads=self.num_kv_heads)
        if self.key_multiplier is not None:  # Falcon-H1: k_proj(x) · key_multiplier
            k = k * self.key_multiplier
        if self.qk_norm == "head":  # Qwen3: each head's vector
            q, k = self.q_norm(q), self.k_norm(k)
        if self.v_norm:  # Gemma4RMSNorm(with_scale=False) on each value head
            v = rms_normalize(v, self.norm_eps)

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
            if self.rotary_dim is None:
                q, k = rotate(q, positions), rotate(k, positions)
            else:  # rotate the first rotary_dim dims, pass the rest through (rotary_pct < 1)
                r = self.rotary_dim
                q = torch.cat((rotate(q[..., :r], positions), q[..., r:]), dim=-1)
                k = torch.cat((rotate(k[..., :r], positions), k[..., r:]), dim=-1)
            if self.qk_norm == "l2":  # Llama 4: after the rotation, on RoPE layers only
                q, k = rms_normalize(q, self.norm_eps), rms_normalize(k, self.norm_eps)
        if self.temperature is not None:
            q = self.tune(q, seq, token_positions, x.device)
        if self.kv_share is not None:  # this kind's K and V for the sharing layers
            store, key, _ = self.kv_share
            store[key] = (k, v)
        return self.attend(q, k, v, seq, x.device, gate)

    def reuse(self, x: torch.Tensor, token_positions=None) -> torch.Tensor:
        """A KV-sharing layer: Q projected, head-normed and rotated; K and V those the last
        earlier layer of its kind computed (Gemma4TextAttention, is_kv_shared_layer)."""
        seq = x.shape[-2]
        q = rearrange(self.q_proj(x), "... seq (heads d_k) -> ... heads seq d_k",
                      heads=self.num_heads)
        if self.qk_norm == "head":
            q = self.q_norm(q)
        if self.rope is not None:
            positions = (torch.arange(seq, device=x.device) if token_positions is None
                         else token_positions)[..., None, :]
            q = (self.rope.rotate if token_positions is None else self.rope)(q, positions)
        store, key, _ = self.kv_share
        k, v = store[key]
        return self.attend(q, k, v, seq, x.device, None)

    def attend(self, q, k, v, seq, device, gate):
        """The core over (q, k, v), heads merged, the output gate and projection."""
        core, args = self.attention_core(q, k, v, seq, device)
        if self.recompute_core:  # Korthikanti et al.'s selective recomputation
            out = checkpoint(core, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            out = core(*args)
        if out.dim() == q.dim() + 1:  # grouped: (... kv_heads group seq d_v)
            out = rearrange(out, "... kv_heads group seq d_v -> ... (kv_heads group) seq d_v")
        out = rearrange(out, "... heads seq d_v -> ... seq (heads d_v)")
        if gate is not None:  # Qwen3NextAttention: attn_output * sigmoid(gate), then o_proj
            out = out * torch.sigmoid(gate)
        return self.output_proj(out)

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
        if self.alibi:  # key j's bias slope_h·j (softmax ignores a query's constant shift)
            keys = torch.arange(seq, device=device, dtype=self.alibi_slopes.dtype)
            bias = self.alibi_slopes[:, None] * keys  # (heads seq)
            return self.core, (q, k, v, mask, bias)
        return self.core, (q, k, v, mask)

    def core(self, q, k, v, causal, bias=None):
        """The course's attention core: causal mask (query i may attend key j iff j <= i),
        softmax, weighted values; grouped heads read their K/V head by broadcasting; ALiBi's
        (heads keys) bias added to the scores of every query."""
        if self.num_kv_heads == self.num_heads:
            sinks = None if self.sinks is None else self.sinks.view(self.num_heads, 1, 1)
            if bias is not None:
                bias = rearrange(bias, "heads keys -> heads 1 keys")
            return scaled_dot_product_attention(q, k, v, mask=causal, sinks=sinks,
                                                softcap=self.softcap, bias=bias)
        q = rearrange(q, "... (kv_heads group) seq d_k -> ... kv_heads group seq d_k",
                      kv_heads=self.num_kv_heads)
        sinks = None if self.sinks is None else self.sinks.view(self.num_kv_heads, -1, 1, 1)
        if bias is not None:
            bias = rearrange(bias, "(kv_heads group) keys -> kv_heads group 1 keys",
                             kv_heads=self.num_kv_heads)
        return scaled_dot_product_attention(q, k.unsqueeze(-3), v.unsqueeze(-3), mask=causal,
                                            sinks=sinks, softcap=self.softcap, bias=bias)


def alibi_slopes(num_heads: int, device=None) -> torch.Tensor:
    """ALiBi's slope per head: 2^(-8i/n) for i = 1..n with n the largest power of two <=
    num_heads, then every other slope of 2n for the rest (transformers' build_alibi_tensor
    in modeling_falcon.py, in float32: transformers rounds slope·position to bfloat16)."""
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = [2 ** (-8 * i / n) for i in range(1, n + 1)]
    rest = min(n, num_heads - n)
    slopes += [2 ** (-4 * i / n) for i in range(1, 2 * rest, 2)]
    return torch.tensor(slopes, dtype=torch.float32, device=device)
