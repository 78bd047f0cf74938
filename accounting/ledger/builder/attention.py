"""Causal multi-head (grouped-query, sliding-window, chunked) attention: model/attention.py's
ops, as facts."""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym, Trace
from accounting.ledger.builder.common import (ALIBI, QK_NORM, ATTN_SCALE, CAUSAL_MASK, SOFTMAX,
                                              MUP, NORM_PARAMS, OUTPUT_GATE, SOFTCAP, TEMPERATURE,
                                              Arch)
from accounting.ledger.builder.layers import Linear, Norm, RoPE, l2_norm
from accounting.ledger.builder import hf_eager, hf_gemma4, hf_gpt2, megatron
from accounting.ledger import autocast as AC

T_GE_W, T_LT_W = "[T≥W]", "[T<W]"  # transformers masks a sliding layer from T = W on
T_GE_C, T_LT_C = "[T≥C_a]", "[T<C_a]"  # and a chunked layer (Llama 4's) from T = C_a on


class Attention:
    def __init__(self, t: Trace, a: Arch, recompute: str = "none", local: bool = False,
                 chunked: bool = False, nope: bool = False, shared: bool = False):
        self.t, self.a, c = t, a, a.c
        self.recompute, self.local, self.chunked = recompute, local, chunked
        # Gemma 4: a global layer's own head shape (d_kG, h_kvG, g_G) and K = V
        self.s = s = a.shape(local)
        self.dk = self.v_dim = dk = s[0]
        k_eq_v = c.global_k_eq_v and not local
        # Gemma 4's KV sharing: a "reuse" layer has no k_proj, v_proj, k_norm or v_norm and
        # no cache; it attends over the K and V of the last earlier layer of its kind
        # (Gemma4TextAttention: shared_kv_states[self.layer_type])
        self.shared = shared
        # Llama 4: a NoPE layer has no RoPE (and no l2 QK-norm) but tunes its queries'
        # temperature; a RoPE layer normalizes Q and K after the rotation (qk_norm "l2")
        rope = c.positions == "rope" and not nope
        self.l2 = c.qk_norm == "l2" and rope
        self.temperature = nope and c.temperature_floor is not None
        d = ("d_model",)
        with t.scope("attn"):
            # gpt-oss's sinks: a module's own parameters come before its children's keys
            self.sinks = t.param("sinks", ("h",), R.ATTN_CORE) if c.attention_sinks else None
            self.q_proj = Linear(t, "q_proj", d, a.width(shape=s), R.ATTN_PROJ, "Q projection",
                                 c.qkv_bias)
            self.k_proj = None if shared else Linear(t, "k_proj", d, a.width(True, s),
                                                     R.ATTN_PROJ, "K projection", c.qkv_bias)
            self.v_proj = None if k_eq_v or shared else Linear(
                t, "v_proj", d, a.width(True, s), R.ATTN_PROJ, "V projection", c.qkv_bias)
            self.output_proj = Linear(t, "output_proj", a.width(shape=s), d, R.ATTN_PROJ,
                                      "output projection", c.out_bias)
            # Qwen3-Next's output gate (model/attention.py gate_proj): Q's width, Q's bias
            self.gate_proj = (Linear(t, "gate_proj", d, a.width(shape=s), R.ATTN_PROJ,
                                     "output gate projection", c.qkv_bias)
                              if c.attn_output_gate else None)
            self.q_norm = self.k_norm = None
            if c.qk_norm in ("head", "full", "per_head"):  # (l2: weightless, no module)
                full = c.qk_norm == "full"
                comp = NORM_PARAMS[c.norm]
                # per_head (Cohere): over each head's d_k, a gain per head: h·d_k and h_kv·d_k
                per = c.qk_norm == "per_head"
                self.q_norm = Norm(t, "q_norm", c.norm, a.width(shape=s) if full else (dk,),
                                   QK_NORM, comp, c.norm_offset, a.width(shape=s) if per else None)
                self.k_norm = None if shared else Norm(
                    t, "k_norm", c.norm, a.width(True, s) if full else (dk,), QK_NORM, comp,
                    c.norm_offset, a.width(True, s) if per else None)
            if c.positions == "alibi":  # Falcon's per-head slopes (float32, persistent=False)
                self.slopes = t.buffer("alibi_slopes", ("h",), 4)
            # transformers, Megatron and torchtitan: one rotary module for the model
            # (transformer.walk), none here
            self.rope = None if not rope or a.hf or a.megatron or a.titan else \
                RoPE(t, dk if c.rotary_dim is None else "d_rot")
            self.hf_rope = rope and a.hf
            self.megatron_rope = rope and a.megatron
            self.titan_rope = rope and a.titan

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        t, a, c = self.t, self.a, self.a.c
        with t.scope("attn"):
            if self.shared:
                return self.reuse(x, out_label, out_course)
            before = set(t.named)
            q = self.q_proj(x, "Q projection output", "Q/K/V projections")
            gate = None
            if self.gate_proj is not None and t.hf_qwen_next:  # one q_proj: query and gate
                after_q = set(t.named)
                gate = self.gate_proj(x, "output gate (reshape copy)", "Q/K/V projections")
                hf_gpt2.fuse_gate(t, before, q, after_q, gate)
            k = self.k_proj(x, "K projection output", "Q/K/V projections")
            # Gemma 4's K = V layers: value_states is key_states (before k_norm and RoPE)
            v = k if self.v_proj is None else self.v_proj(x, "V projection output",
                                                           "Q/K/V projections")
            if t.hf_gpt2 and t.adapters is None:  # GPT-2's one c_attn (builder/hf_gpt2.py)
                q, k, v = hf_gpt2.fuse(t, before, (q, k, v))
            if self.gate_proj is not None and gate is None:
                gate = self.gate_proj(x, "output gate projection output", "Q/K/V projections")
            if c.qk_norm == "full":
                q = self.q_norm(q, "Q after QK-norm")
                k = self.k_norm(k, "K after QK-norm")
            elif c.qk_norm == "per_head":  # on (B, T, heads, d_k): views in, new tensors out
                q = self.q_norm(t.view(q, ("B", "T", "h", self.dk), contiguous=True),
                                "Q after QK-norm")
                k = self.k_norm(t.view(k, ("B", "T", "h_kv" if a.gqa else "h", self.dk),
                                       contiguous=True), "K after QK-norm")
            # "... seq (heads d_k) -> ... heads seq d_k": a permuted view
            q = t.view(q, a.heads(shape=self.s), contiguous=False)
            k = t.view(k, a.heads(True, self.s), contiguous=False)
            v = t.view(v, a.heads(True, self.s), contiguous=False)
            if c.mup_multipliers:  # Falcon-H1: k_proj(x) · key_multiplier, before RoPE
                k = t.name(t.binary("aten.mul", k, None, "K · key_multiplier", MUP),
                           "K · key_multiplier")
            if c.qk_norm == "head":
                q = self.q_norm(q, "Q after QK-norm")
                k = self.k_norm(k, "K after QK-norm")
            if c.v_norm and t.hf_gemma4:  # transformers' Gemma4RMSNorm(with_scale=False)
                with t.scope("v_norm"):
                    v = hf_gemma4.rms_norm(t, v, (self.dk,), QK_NORM, f"{t.module}",
                                           "V after v_norm")
            elif c.v_norm:  # Gemma 4's v_norm: Gemma4RMSNorm(with_scale=False), no gain
                v = l2_norm(t, v, self.dk, "V after v_norm", QK_NORM)
            if self.hf_rope:  # apply_rotary_pos_emb(q, k, cos, sin)
                # Gemma 4: the global layers' own cos/sin of d_kG (Gemma4TextRotaryEmbedding)
                # Gemma 3: each layer type's own (cos, sin), of the same d_k
                rot, tables = ((a.rotary, a.rope_tables)
                               if self.local or getattr(a, "global_rotary", None) is None
                               else (a.global_rotary, a.global_tables))
                q = rot.rotate(q, tables, "Q after RoPE")
                k = rot.rotate(k, tables, "K after RoPE")
            if self.megatron_rope:  # TE's fused RoPE on the model's frequencies
                q = megatron.fused_rope(t, q, a.freqs, "Q after RoPE")
                k = megatron.fused_rope(t, k, a.freqs, "K after RoPE")
            if self.titan_rope:  # apply_rotary_emb: complex product with the freqs_cis buffer
                q = megatron.fused_rope(t, q, None, "Q after RoPE")
                k = megatron.fused_rope(t, k, None, "K after RoPE")
            if a.titan and a.gqa:  # repeat_kv: expand + reshape, a copy of h heads each
                k = t.view(t.name(t.copy(k, ("B", "T", "h", "d_k")), "K repeated (repeat_kv)"),
                           a.heads(), contiguous=False)
                v = t.view(t.name(t.copy(v, ("B", "T", "h", "d_k")), "V repeated (repeat_kv)"),
                           a.heads(), contiguous=False)
            if self.rope is not None:
                positions = t.fresh(("T",), R.INT64)  # torch.arange(seq)
                if c.rotary_dim is None:
                    q = self.rope.rotate(q, positions, "Q after RoPE")
                    k = self.rope.rotate(k, positions, "K after RoPE")
                else:  # cat((rotate(q[..., :r]), q[..., r:])): slices are views, cat a copy
                    q = self.partial(q, positions, "Q")
                    k = self.partial(k, positions, "K")
            if self.l2:
                q = l2_norm(t, q, self.dk, "Q after QK-norm", QK_NORM)
                k = l2_norm(t, k, self.dk, "K after QK-norm", QK_NORM)
            if self.temperature:
                q = self.tune(q)
            t.cached("K", a.width(True, self.s), window=self.local, chunk=self.chunked)
            t.cached("V", a.width(True, self.s), window=self.local, chunk=self.chunked)
            if c.kv_shared_layers:  # the producer of its kind: K and V for the later layers
                a.shared_kv[self.local] = (k, v)
            out = self.merge(self.run_core(q, k, v), a.width(shape=self.s))
            if gate is not None:  # out · sigmoid(gate): the sigmoid saves its output
                s = t.unary("aten.sigmoid", gate, "sigmoid(gate)", OUTPUT_GATE, saves="output",
                            out="sigmoid(output gate)")
                out = t.binary("aten.mul", out, s, "heads · sigmoid(gate)", OUTPUT_GATE,
                               out="gated attention output")
            return self.output_proj(out, out_label, out_course)

    def reuse(self, x: Sym, out_label: str, out_course: str) -> Sym:
        """A KV-sharing layer (Gemma4TextAttention with is_kv_shared_layer): Q projected,
        normed and rotated; K and V the producer's tensors (the same storages: nothing new
        is kept for them, nothing cached); the core and o_proj as any layer's."""
        t, a, c = self.t, self.a, self.a.c
        q = self.q_proj(x, "Q projection output", "Q/K/V projections")
        q = t.view(q, a.heads(shape=self.s), contiguous=False)
        if c.qk_norm == "head":
            q = self.q_norm(q, "Q after QK-norm")
        if self.hf_rope:
            rot, tables = ((a.rotary, a.rope_tables) if self.local or not c.global_shape
                           else (a.global_rotary, a.global_tables))
            q = rot.rotate(q, tables, "Q after RoPE")
        elif self.rope is not None:
            q = self.rope.rotate(q, t.fresh(("T",), R.INT64), "Q after RoPE")
        k, v = a.shared_kv[self.local]
        out = self.merge(self.run_core(q, k, v), a.width(shape=self.s))
        return self.output_proj(out, out_label, out_course)

    def tune(self, q: Sym) -> Sym:
        """Llama 4's temperature tuning (model/attention.py's tune): the query at position i
        times 1 + s·log1p(⌊(i + 1)/F⌋); the floor is integer division of the positions
        (no FLOPs), then log1p, × s and + 1 on T elements, and one multiply per Q element."""
        t, comp = self.t, TEMPERATURE
        steps = t.name(t.fresh(("T",), R.INT64), "⌊(i + 1)/F⌋ per position")
        lg = t.unary("aten.log1p", steps, "log1p(⌊(i + 1)/F⌋)", comp)
        s = t.binary("aten.mul", lg, None, "× attn_scale", comp)
        scale = t.binary("aten.add", s, None, "+ 1", comp, out="temperature per position")
        dtype = q.dtype
        return t.name(t.cast(t.binary("aten.mul", q, scale, "Q × temperature", comp), dtype),
                      "Q after temperature tuning")

    def partial(self, x: Sym, positions: Sym, what: str) -> Sym:
        """Partial rotary (model/attention.py): the first d_rot dims of each head rotated,
        the other d_k − d_rot passed through, concatenated back (a new tensor, 0 FLOPs)."""
        t, lead = self.t, x.shape[:-1]
        rot = self.rope.rotate(t.view(x, lead + ("d_rot",), contiguous=False), positions,
                               f"{what} rotary part after RoPE")
        rest = t.view(x, lead + ("d_pass",), contiguous=False)
        return t.name(t.cat((rot, rest), x.shape), f"{what} after partial RoPE")

    def merge(self, out: Sym, width: tuple[str, ...]) -> Sym:
        """"... heads seq d -> ... seq (heads d)": a copy of a heads-major tensor, a view
        of one laid out seq-major (the fused kernel's output for a permuted q)."""
        t = self.t
        if out.contiguous:
            return t.name(t.copy(out, ("B", "T") + width), "attention-weighted values, heads merged")
        return t.view(out, ("B", "T") + width, contiguous=True)

    def run_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """The fused kernel (a mask only for a window), or the course's core with its mask,
        under checkpoint for selective recomputation."""
        t, c = self.t, self.a.c
        if self.a.hf and c.attention == "naive":  # transformers' eager_attention_forward
            if self.recompute == "selective":  # (gpt-oss, Gemma 2: recipes.eager_only)
                with t.recomputed_region("attention core", (q, k, v)):
                    return hf_eager.core(self, q, k, v)
            return hf_eager.core(self, q, k, v)
        mask = None
        kind = "sliding-window" if self.local else "chunked" if self.chunked else "causal"
        if (c.attention == "naive" and not self.a.megatron) or self.local or self.chunked \
                or self.topk:
            # DeepSeek-V3.2: causal & the indexer's top-k, one per sequence, (B, 1, T, T);
            # under the fused kernel its additive form is SDPA's attn_mask, as transformers'
            # sdpa path passes it (modeling_deepseek_v32.py: index_mask into attention_mask)
            mask = t.name(t.fresh(("B", "T", "T") if self.topk else ("T", "T"), R.BOOL),
                          f"{kind} mask" + (" and the indexer's top-k" if self.topk else ""))
        if self.a.hf and mask is not None and c.attention == "sdpa":
            if self.topk:  # DeepseekV32Attention: causal & ~index_mask, bool (B, 1, T, T),
                # made in every layer at every T (masking_utils' allow_is_causal_skip=False);
                # h K/V heads (latent attention: no repeat_kv); SDPA saves its additive form
                return self.fused(q, k, v, mask, None)
            return self.hf_masked(q, k, v)
        if self.a.megatron and c.attention == "naive" and mask is None:  # Megatron's unfused
            inputs, core = (q, k, v), lambda: megatron.unfused_core(self, q, k, v)
        elif c.attention == "sdpa":  # model/fused.py's fused_causal_attention(q, k, v, mask)
            def core():
                additive = None
                if mask is not None:  # the kernel takes an additive mask: where(mask, 0, −inf),
                    # made inside fused_causal_attention (so inside a selective checkpoint,
                    # which keeps the bool mask, its input)
                    additive = t.name(t.where(mask, t.fresh(mask.shape, R.FP32),
                                              "where(mask, 0, −inf)", CAUSAL_MASK),
                                      f"{kind} mask (additive)")
                return self.fused(q, k, v, additive)
            inputs = (q, k, v) + ((mask,) if mask is not None else ())
        elif self.slopes is not None:  # ALiBi: slopes[:, None] · arange(T), key j's bias
            keys = t.fresh(("T",), R.FP32)
            bias = t.name(t.binary("aten.mul", t.view(self.slopes, ("h", "T")), keys,
                                   "slope · key position", ALIBI), "ALiBi bias")
            inputs, core = (q, k, v, mask, bias), lambda: self.core(q, k, v, mask, bias)
        else:
            inputs, core = (q, k, v, mask), lambda: self.core(q, k, v, mask)
        if self.recompute == "selective":  # checkpoint(attention core, q, k, v, ...)
            with t.recomputed_region("attention core", inputs):
                return core()
        return core()

    def hf_masked(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """transformers' sdpa_attention_forward on a sliding layer (5.23,
        integrations/sdpa_attention.py). masking_utils builds the bool (B, 1, T, T) mask only
        once the keys reach the window (_ignore_causal_mask_sdpa: kv_length >= W), once per
        forward, saved by no op; torch's SDPA turns it into an additive one of the query's
        dtype per call (convert_boolean_attn_mask), which the kernel saves. With the mask,
        use_gqa_in_sdpa is False (CPU, CUDA), so repeat_kv expands K and V to h heads (a
        reshape of an expand: a copy, a view for h_kv = 1, which autocast's bf16 cast then
        copies at h heads); without it SDPA reads the h_kv heads (enable_gqa). What the
        kernel keeps of K and V therefore carries [T≥W] or [T<W] (measured on both sides:
        tests/test_transformers_saves.py)."""
        t, a = self.t, self.a
        # Llama 4's chunked layers: the same rule at the chunk (kv_length >= C_a)
        ge, lt = (T_GE_C, T_LT_C) if self.chunked else (T_GE_W, T_LT_W)
        heads = ("B", "h", "T", self.dk)
        target = AC.LOW_DTYPE if AC.policy(t.autocast, "sdpa") == AC.LOWER else None
        kept = []

        def prepare(x: Sym, what: str) -> Sym:
            rep = x if not a.gqa else (t.copy(x, heads) if a.c.kv_heads > 1 else t.view(x, heads))
            if target is not None and x.dtype != target and not a.gqa:  # one copy either way
                return t.cast(x, target)
            if target is not None and x.dtype != target:  # autocast's copies, one per branch
                t._reads(f"to {target}", rep)
                hi = t.name(Sym(rep.shape, target, x.grad), f"{what} ({target} copy, {ge})",
                            saved_if=ge)
                if rep is not x:
                    kept.append(t.name(Sym(x.shape, target, x.grad),
                                       f"{what} ({target} copy, {lt})", saved_if=lt))
                return hi
            if rep is x or rep.storage is x.storage:  # the same storage on both branches
                return rep
            kept.append(x)  # h_kv heads, read as they are below the window
            n = t.named[x.storage]
            n.shape = n.shape + (lt,)
            return t.name(rep, f"{what} repeated (repeat_kv, {ge})", saved_if=ge)
        k, v = prepare(k, "K"), prepare(v, "V")
        out = self.fused(q, k, v, t.fresh(("B", "T", "T"), R.BOOL), ge)
        for x in kept:
            t._saves(x, f"fused attention kernel ({lt}: no mask, enable_gqa)")
        return out

    def _grouping(self):
        _, hkv, g, gqa = getattr(self, "s", None) or self.a.shape()
        if gqa:
            return ("B", hkv), (g, "T"), "grouped: K and V are read by g query heads each, not copied"
        return ("B", "h"), ("T",), ""

    def fused(self, q: Sym, k: Sym, v: Sym, mask: Sym | None = None,
              mask_flag: str | None = T_GE_W) -> Sym:
        """One fused kernel (PyTorch's CPU flash attention here): the two matmuls, counted
        over the full T×T as torch's own sdpa formula does; its backward recomputes QKᵀ
        (5 matmuls where the naive backward has 4). Its softmax runs inside the kernel
        and is not a separate op (not in the non-matmul FLOPs)."""
        t = self.t
        batch, rows, note = self._grouping()
        note = "fused kernel" + (f"; {note}" if note else "")
        qk = R.Matmul("QKᵀ scores", R.ATTN_CORE, t.module, t.repeat, R.FORWARD, batch, rows,
                      (self.dk,), ("T",), causal=True, grads=("dQ", "dK"), note=note,
                      recompute_in_backward=True, window=self.local, chunk=self.chunked, topk=self.topk)
        if self.v_useful is not None:
            note += "; V zero-padded from d_v to d_k (useful: d_v)"
        pv = R.Matmul("scores·V", R.ATTN_CORE, t.module, t.repeat, R.FORWARD, batch, rows,
                      ("T",), (self.v_dim,), causal=True, grads=("d(scores)", "dV"), note=note,
                      window=self.local, chunk=self.chunked, topk=self.topk,
                      useful=self.v_useful)
        return t.fused_attention(q, k, v, (qk, pv), self.out_heads(), ("B", "h", "T"), mask,
                                 mask_flag)

    def records(self) -> tuple[R.Matmul, R.Matmul]:
        """The core's two matmuls, QKᵀ and scores·V, as the unfused core runs them."""
        t = self.t
        batch, rows, note = self._grouping()
        kw = dict(causal=True, note=note, window=self.local, chunk=self.chunked, topk=self.topk)
        return (R.Matmul("QKᵀ scores", R.ATTN_CORE, t.module, t.repeat, R.FORWARD, batch, rows,
                         (self.dk,), ("T",), grads=("dQ", "dK"), **kw),
                R.Matmul("scores·V", R.ATTN_CORE, t.module, t.repeat, R.FORWARD, batch, rows,
                         ("T",), (self.v_dim,), grads=("d(scores)", "dV"), **kw))

    def core(self, q: Sym, k: Sym, v: Sym, mask: Sym, bias: Sym | None = None) -> Sym:
        """scaled_dot_product_attention: softmax(QKᵀ/√d_k, masked) V, with grouped K/V
        broadcast over each group of query heads (bmm batch B·h_kv, g·T query rows); ALiBi's
        bias added to the scores before the scale."""
        t, a = self.t, self.a
        qk, pv = self.records()
        scores_shape = ("B", "h", "T", "T")
        dtype = t.matmul(q, k, qk, copy_labels=("Q (heads layout)", "K (heads layout)"))
        scores = t.name(Sym(scores_shape, dtype), "QKᵀ scores", "QKᵀ")
        if bias is not None:  # scores + bias.to(scores.dtype)
            scores = t.binary("aten.add", scores, t.cast(bias, dtype, "ALiBi bias (copy)"),
                              "QKᵀ + ALiBi bias", ALIBI, out="QKᵀ scores + ALiBi bias")
        scaled = t.binary("aten.div", scores, None, "QKᵀ / √d_k", ATTN_SCALE)
        cap = self.a.c.attn_softcap
        if cap is not None:  # Gemma 2: cap·tanh(scores/cap), before the mask
            scaled = t.binary("aten.div", scaled, None, "scores / cap", SOFTCAP)
            scaled = t.unary("aten.tanh", scaled, "tanh(scores / cap)", SOFTCAP, saves="output",
                             out="tanh(scores / cap)")
            scaled = t.binary("aten.mul", scaled, None, "cap · tanh", SOFTCAP)
        masked = t.where(mask, scaled, "where(mask, scores, −inf)", CAUSAL_MASK,
                         out="masked scores (softmax input)")
        mx = t.reduce("aten.amax", masked, ("T",), "max over keys", SOFTMAX, saves=True,
                      out="softmax row max")
        if self.sinks is not None:  # softmax_with_sink: the sink's column, not materialised
            mx = t.binary("aten.maximum", mx, self.sinks, "max with the sink", SOFTMAX,
                          out="softmax row max with the sink")
        shifted = t.binary("aten.sub", masked, mx, "x − max", SOFTMAX)
        e = t.unary("aten.exp", shifted, "exp", SOFTMAX, saves="output", out="exp(scores − max)")
        s = t.reduce("aten.sum", e, ("T",), "sum over keys", SOFTMAX, out="softmax row sum")
        if self.sinks is not None:  # + exp(sink − max): the sink's share of the row
            es = t.unary("aten.exp", t.binary("aten.sub", mx, self.sinks, "sink − max", SOFTMAX),
                         "exp", SOFTMAX, saves="output", out="exp(sink − max)")
            s = t.binary("aten.add", s, es, "+ the sink's exp", SOFTMAX,
                         out="softmax row sum with the sink")
        weights = t.binary("aten.div", e, s, "exp / sum", SOFTMAX, out="softmax output",
                           course="softmax")
        dtype = t.matmul(weights, v, pv, copy_labels=("softmax output (copy)", "V (heads layout)"))
        return t.name(Sym(self.out_heads(), dtype), "attention-weighted values",
                      "attention-weighted values")

    sinks = None  # gpt-oss's attention sinks (latent attention has none)
    slopes = None  # ALiBi's per-head slopes (a buffer), when positions is alibi
    chunked = False  # latent attention has no chunked layers (config.py refuses them)
    topk = False  # the core keeps the indexer's top k_I keys (DeepSeek-V3.2's latent attention)
    dk = "d_k"  # the query/key head dimension (Gemma 4's global layers: d_kG)
    v_dim = "d_k"  # the value's head dimension as the core sees it (latent attention: d_v)
    v_useful = None  # the factors of useful work when V is zero-padded (latent attention)

    def out_heads(self) -> tuple[str, ...]:
        return self.a.heads(shape=getattr(self, "s", None))
