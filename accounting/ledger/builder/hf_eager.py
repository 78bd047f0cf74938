"""transformers' eager attention (`eager_attention_forward`), for the families transformers
runs without SDPA: gpt-oss (its sinks; GptOssPreTrainedModel._supports_sdpa = False) and
Gemma 2 (its attention soft-cap; Gemma2PreTrainedModel._supports_sdpa = False). Its ops as
transformers 5.23 writes them (models/gpt_oss/modeling_gpt_oss.py, models/gemma2/
modeling_gemma2.py eager_attention_forward), each save measured with saved-tensor hooks on
transformers' own model on the CPU (tests/test_transformers_eager.py):

    key, value = repeat_kv(key), repeat_kv(value)        # h heads: a copy for h_kv > 1
    w = torch.matmul(query, key.transpose(2, 3)) * scaling   # saves query and key
    [Gemma 2]  w = tanh(w / cap) * cap                   # tanh saves its output
    w = w + attention_mask                               # the additive mask: nothing saved
    [gpt-oss]  w = cat([w, sinks], -1); w = w - w.max(-1).values   # max saves its indices
               p = softmax(w, dtype=w.dtype)[..., :-1]   # saves p, the sink's column dropped
    [Gemma 2]  p = softmax(w, dtype=float32).to(query.dtype)
    p = dropout(p, 0.0).to(value.dtype)                  # p = 0: the same tensor
    out = torch.matmul(p, value)                         # saves p (or its copy) and value

The whole T×T scores are materialised and the probabilities kept: what SDPA's fused kernel
avoids. A sliding layer differs only in its mask's values (its FLOPs are the full T×T's,
as the executed count says)."""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym
from accounting.ledger.builder.common import ATTN_SCALE, CAUSAL_MASK, SOFTCAP, SOFTMAX

SINK_KEYS = "(T+1)"  # gpt-oss: a row of keys and the head's sink logit (symbols.py)


def repeat_kv(attn, x: Sym, what: str) -> Sym:
    """repeat_kv (modeling_llama.py's): x[:, :, None].expand(…).reshape(B, h, T, d_k), a new
    tensor unless h_kv = 1 (then a view: the expanded dim merges with the size-1 one); with
    h_kv = h, x itself."""
    t, a = attn.t, attn.a
    # the layer's own K/V heads (Gemma 4's full layers: h_kvG, num_global_key_value_heads)
    _, hkv, _, gqa = getattr(attn, "s", None) or a.shape()
    if not gqa:
        return x
    heads = ("B", "h", "T", attn.dk)
    if (a.c.global_kv if hkv == "h_kvG" else a.c.kv_heads) == 1:
        return t.view(x, heads, contiguous=False)
    return t.name(t.copy(x, heads), f"{what} repeated (repeat_kv)")


def core(attn, q: Sym, k: Sym, v: Sym) -> Sym:
    """eager_attention_forward on (B, h, T, d_k) q and the h_kv-head k, v (after RoPE)."""
    t, c = attn.t, attn.a.c
    k, v = repeat_kv(attn, k, "K"), repeat_kv(attn, v, "V")
    # K and V are h heads now: each bmm batch is one (b, head), not grouped
    kw = dict(causal=True, note="eager: the T×T scores materialised", window=attn.local,
              chunk=attn.chunked)
    qk = R.Matmul("QKᵀ scores", R.ATTN_CORE, t.module, t.repeat, R.FORWARD, ("B", "h"), ("T",),
                  (attn.dk,), ("T",), grads=("dQ", "dK"), **kw)
    pv = R.Matmul("scores·V", R.ATTN_CORE, t.module, t.repeat, R.FORWARD, ("B", "h"), ("T",),
                  ("T",), (attn.v_dim,), grads=("d(scores)", "dV"), **kw)
    # key.transpose(2, 3): bmm reads a heads-major K through the transposed view; a K laid
    # out seq-major (the projection's permuted view, RoPE's outputs keep its layout) or the
    # one-KV-head expand (stride 0 over the heads) cannot be viewed as (B·h, d_k, T): the
    # matmul's reshape copies it, and the copy is what bmm saves (Q likewise)
    dtype = t.matmul(q, k, qk, copy_labels=("Q (heads layout)", "K (heads layout)"))
    w = t.name(Sym(("B", "h", "T", "T"), dtype), "QKᵀ scores", "QKᵀ")
    w = t.binary("aten.mul", w, None, "QKᵀ · scaling", ATTN_SCALE)
    cap = c.attn_softcap
    if cap is not None:  # Gemma 2: attn_weights / cap, tanh, * cap, before the mask
        w = t.binary("aten.div", w, None, "scores / cap", SOFTCAP)
        w = t.unary("aten.tanh", w, "tanh(scores / cap)", SOFTCAP, saves="output",
                    out="tanh(scores / cap)")
        w = t.binary("aten.mul", w, None, "cap · tanh", SOFTCAP)
    # the additive mask (B, 1, T, T), made once per forward in the embeddings' dtype: a
    # broadcast add, nothing saved (its gradient is the incoming one)
    mask = t.fresh(("B", "1", "T", "T"), t.param_dtype if t.autocast is None else R.FP32)
    w = t.binary("aten.add", w, mask, "scores + mask", CAUSAL_MASK)
    if attn.sinks is not None:
        w = _sink_softmax(attn, w)
    else:  # softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        p = t.unary("aten.softmax", t.cast(w, R.FP32), "softmax over keys (float32)", SOFTMAX,
                    saves="output", out="softmax output", course="softmax")
        w = t.cast(p, q.dtype, "softmax output (cast to the query's dtype)")
    # dropout(p = 0.0) returns its input; .to(value_states.dtype): a copy where it differs
    w = t.cast(w, v.dtype, "attention weights (cast to V's dtype)")
    dtype = t.matmul(w, v, pv, copy_labels=("attention weights (copy)", "V (heads layout)"))
    return t.name(Sym(attn.out_heads(), dtype), "attention-weighted values",
                  "attention-weighted values")


def _sink_softmax(attn, w: Sym) -> Sym:
    """gpt-oss: the head's sink logit concatenated as one more key (cat: nothing saved), the
    row's max subtracted (max(dim) saves its int64 indices), softmax in the logits' dtype
    (saves its output, T + 1 wide), the sink's column sliced off (a view bmm reads with its
    row stride, no copy)."""
    t = attn.t
    rows = ("B", "h", "T")
    sinks = t.view(attn.sinks, rows + ("1",), contiguous=False)  # reshape + expand
    x = t.cat((w, sinks), rows + (SINK_KEYS,))
    t._record("aten.amax", "max over keys and the sink", SOFTMAX, x.shape, reduction=True)
    idx = t.name(Sym(rows, R.INT64), "softmax row max (indices)")
    if x.grad:
        t._saves(idx, "max (its indices)", after=True)
    mx = Sym(rows + ("1",), x.dtype, x.grad)
    x = t.binary("aten.sub", x, mx, "logits − max", SOFTMAX)
    p = t.unary("aten.softmax", x, "softmax over keys and the sink", SOFTMAX, saves="output",
                out="softmax output (with the sink's column)", course="softmax")
    return t.view(p, rows + ("T",), contiguous=True)  # probs[..., :-1]
