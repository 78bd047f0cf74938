"""Multi-head latent attention (DeepSeek-V2/V3), the training form, from scratch.

Keys and values are compressed to a latent of kv_lora_rank (with one RoPE key of
qk_rope_head_dim shared by every head), normed, and expanded back per head; queries
optionally go through a low-rank q_lora_rank latent too. Each head attends with a key of
qk_nope_head_dim + qk_rope_head_dim and a value of v_head_dim. At inference the cache
holds the latent and the RoPE key: kv_lora_rank + qk_rope_head_dim per token and layer.
"""

import torch
from einops import rearrange
from torch import nn
from torch.utils.checkpoint import checkpoint

from .attention import scaled_dot_product_attention
from .fused import fused_causal_attention
from .layers import NORM_CLASSES, Linear, RotaryPositionalEmbedding, check_positive_int


class Indexer(nn.Module):
    """DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2; transformers'
    DeepseekV32Indexer): for each query, index scores over every key,
        I[s, t] = Σ_h w[s, h] · ReLU(q[s, h] · k[t] / √d_I),
    with q from the query latent (wq_b: r_q → heads·d_I), one key per token (wk, then a
    LayerNorm), per-head weights from x (weights_proj, × heads^−½), RoPE on the first
    rope_dim dims of q and k; the causal top-k keys are the ones the attention keeps. Run
    without gradients (as transformers' @torch.no_grad forward; DeepSeek trains it apart)."""

    def __init__(self, d_model, q_lora_rank, heads, head_dim, topk, rope_dim, device=None,
                 dtype=None):
        super().__init__()
        self.heads, self.head_dim, self.topk, self.rope_dim = heads, head_dim, topk, rope_dim
        self.wq_b = Linear(q_lora_rank, heads * head_dim, device=device, dtype=dtype)
        self.wk = Linear(d_model, head_dim, device=device, dtype=dtype)
        self.k_norm = NORM_CLASSES["layernorm"](head_dim, eps=1e-6, device=device, dtype=dtype)
        self.weights_proj = Linear(d_model, heads, device=device, dtype=dtype)

    @torch.no_grad()
    def forward(self, x, q_latent, rope, positions, causal):
        """The keys each query keeps: causal & top-k of the index scores, (batch seq seq)."""
        r = self.rope_dim
        q = rearrange(self.wq_b(q_latent), "... seq (heads d) -> ... seq heads d",
                      heads=self.heads)
        k = self.k_norm(self.wk(x))  # (... seq d): one key per token, shared by the heads
        if rope is not None:  # (seq 1) positions: the same rotation for every head
            q = torch.cat((rope.rotate(q[..., :r], positions[..., None]), q[..., r:]), dim=-1)
            k = torch.cat((rope.rotate(k[..., :r], positions), k[..., r:]), dim=-1)
        scores = torch.relu(torch.einsum("bshd,btd->bsht", q, k) * self.head_dim ** -0.5)
        weights = self.weights_proj(x) * self.heads ** -0.5  # (... seq heads)
        index = torch.einsum("bsh,bsht->bst", weights, scores)
        index = index.masked_fill(~causal, float("-inf"))
        top = index.topk(min(self.topk, index.shape[-1]), dim=-1).indices
        keep = torch.zeros(index.shape, dtype=torch.bool, device=x.device).scatter(
            -1, top, torch.ones(top.shape, dtype=torch.bool, device=x.device))
        return causal & keep


class LatentAttention(nn.Module):
    def __init__(self, d_model, num_heads, max_seq_len=None, theta=None, device=None, dtype=None,
                 *, q_lora_rank=None, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
                 qkv_bias=False, out_bias=False, norm="rmsnorm", norm_eps=1e-5, attention="naive",
                 window=None, index_heads=None, index_head_dim=None, index_topk=None):
        super().__init__()
        for name, value in (("d_model", d_model), ("num_heads", num_heads),
                            ("kv_lora_rank", kv_lora_rank), ("qk_nope_head_dim", qk_nope_head_dim),
                            ("qk_rope_head_dim", qk_rope_head_dim), ("v_head_dim", v_head_dim)):
            check_positive_int(name, value)
        if attention not in ("naive", "sdpa"):
            raise ValueError(f"attention must be naive or sdpa, got {attention!r}")
        self.h, self.nope, self.rope_dim, self.v_dim = num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.kv_lora_rank, self.attention, self.window = kv_lora_rank, attention, window
        self.recompute_core = False
        norm_cls = NORM_CLASSES[norm]
        qk = qk_nope_head_dim + qk_rope_head_dim
        if q_lora_rank is None:
            self.q_proj = Linear(d_model, num_heads * qk, device=device, dtype=dtype, bias=qkv_bias)
        else:
            self.q_a_proj = Linear(d_model, q_lora_rank, device=device, dtype=dtype, bias=qkv_bias)
            self.q_a_norm = norm_cls(q_lora_rank, eps=norm_eps, device=device, dtype=dtype)
            self.q_b_proj = Linear(q_lora_rank, num_heads * qk, device=device, dtype=dtype)
        self.kv_a_proj = Linear(d_model, kv_lora_rank + qk_rope_head_dim, device=device, dtype=dtype,
                                bias=qkv_bias)
        self.kv_a_norm = norm_cls(kv_lora_rank, eps=norm_eps, device=device, dtype=dtype)
        self.kv_b_proj = Linear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim),
                                device=device, dtype=dtype)
        self.output_proj = Linear(num_heads * v_head_dim, d_model, device=device, dtype=dtype,
                                  bias=out_bias)
        self.rope = (RotaryPositionalEmbedding(theta, qk_rope_head_dim, max_seq_len, device=device)
                     if theta is not None else None)
        # DeepSeek-V3.2: the keys each query attends are the indexer's top-k (naive core)
        self.indexer = (Indexer(d_model, q_lora_rank, index_heads, index_head_dim, index_topk,
                                qk_rope_head_dim, device=device, dtype=dtype)
                        if index_topk is not None else None)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        seq = x.shape[-2]
        if hasattr(self, "q_proj"):
            q = self.q_proj(x)
        else:
            q_latent = self.q_a_norm(self.q_a_proj(x))
            q = self.q_b_proj(q_latent)
        q = rearrange(q, "... seq (heads d) -> ... heads seq d", heads=self.h)
        q_nope, q_pe = q[..., :self.nope], q[..., self.nope:]
        latent = self.kv_a_proj(x)  # (... seq kv_lora_rank+rope)
        c_kv, k_pe = latent[..., :self.kv_lora_rank], latent[..., self.kv_lora_rank:]
        kv = rearrange(self.kv_b_proj(self.kv_a_norm(c_kv)), "... seq (heads d) -> ... heads seq d",
                       heads=self.h)
        k_nope, v = kv[..., :self.nope], kv[..., self.nope:]
        k_pe = k_pe.unsqueeze(-3)  # one RoPE key for every head: (... 1 seq rope)
        if self.rope is not None:
            if seq > self.rope.max_seq_len:
                raise ValueError(f"sequence length {seq} exceeds max_seq_len {self.rope.max_seq_len}")
            positions = torch.arange(seq, device=x.device)[None, :] if token_positions is None \
                else token_positions[..., None, :]
            q_pe, k_pe = self.rope.rotate(q_pe, positions), self.rope.rotate(k_pe, positions)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(*k_nope.shape[:-1], self.rope_dim)), dim=-1)
        mask = None
        if self.attention == "naive" or self.window is not None or self.indexer is not None:
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
            if self.window is not None:
                mask = mask.triu(1 - self.window)
        if self.indexer is not None:  # (batch 1 seq seq): the kept keys, for every head
            at = torch.arange(seq, device=x.device) if token_positions is None else token_positions
            mask = self.indexer(x, q_latent, self.rope, at, mask).unsqueeze(-3)
        pad = self.attention == "sdpa" and self.v_dim != q.shape[-1]
        if pad:  # the fused kernel needs one head size: V zero-padded, as HF's flash path does
            v = torch.cat((v, v.new_zeros(*v.shape[:-1], q.shape[-1] - self.v_dim)), dim=-1)
        if self.attention == "sdpa":
            core, args = fused_causal_attention, (q, k, v) + ((mask,) if mask is not None else ())
        else:
            core, args = scaled_dot_product_attention, (q, k, v, mask)
        if self.recompute_core:
            out = checkpoint(core, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            out = core(*args)
        if pad:
            out = out[..., :self.v_dim]
        return self.output_proj(rearrange(out, "... heads seq d_v -> ... seq (heads d_v)"))
