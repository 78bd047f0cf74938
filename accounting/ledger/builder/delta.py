"""The gated DeltaNet layer: model/delta.py's ops, as facts (issue 31).

Symbols: h_lk, h_lv (key and value heads), d_lk, d_lv (their widths), d_conv = 2·h_lk·d_lk
+ h_lv·d_lv (the conv's channels: Q, K, V), d_qkvz = 2·h_lk·d_lk + 2·h_lv·d_lv
(in_proj_qkvz's width; Qwen3.5's four projections in_proj_qkv, in_proj_z, in_proj_b,
in_proj_a have d_conv, h_lv·d_lv, h_lv and h_lv: the same sum), C_l (the chunk), N_c = ⌈T/C_l⌉ (chunks; the sequence is padded to
N_c·C_l), P_L = C_l(C_l − 1)/2 (the strictly lower pairs of a chunk: a unit lower
triangular solve's multiply-adds per right-hand column).

Executed FLOPs per layer and sequence (2mnp; the chunked algorithm as
torch_chunk_gated_delta_rule and fla's chunk_gated_delta_rule run it):
  intra-chunk: K_β·Kᵀ and Q·Kᵀ, 2·2·h_lv·N_c·C_l²·d_lk; the two UT solves,
  2·h_lv·N_c·P_L·(d_lv + d_lk);
  inter-chunk (the scan over N_c chunks): W·S, Q·S, 2·2·h_lv·N_c·C_l·d_lk·d_lv; A·V_new,
  2·h_lv·N_c·C_l²·d_lv; the state update Kᵀ·V_new, 2·h_lv·(N_c − 1)·C_l·d_lk·d_lv (the
  state after the last chunk is not computed: a forward without a cache has no use for
  it; transformers computes it for its cache, fvcore's trace drops it as dead code).
A triangular solve's backward is another solve and one dense product (dA = −dB·Xᵀ,
2·C_l²·d per column block), not the two equal products of a matmul.

Memory (saved tensors): the scan keeps a state S_i (h_lv·d_lk·d_lv) and a V_new_i
(h_lv·C_l·d_lv) per chunk, N_c storages each. Exact for every T (T < C_l: one padded chunk;
a partial last chunk: padded): the first state (zeros) has no gradient, so W·S_0 and Q·S_0
save S_0 alone; with one chunk (T ≤ C_l) nothing saves the row-major W, the decayed queries
or the decayed keys (no later chunk reads the state, and no state update runs): their
saved elements carry the 0/1 factor [N_c>1] (measured on the CPU at N_c = 1, 2, 3 and
partial chunks, tests/test_architectures.py).
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym, Trace
from accounting.ledger.builder.common import DELTA_RULE, GATED_NORM, NORM_PARAMS, Arch
from accounting.ledger.builder.layers import Linear
from accounting.ledger.builder.recurrent import CausalConv1d, causal_conv
from accounting.ledger.symbols import FOLD, SLICE, VIEWED
from accounting.ledger.builder import hf_mamba
from accounting.units import FP32
from accounting.ledger import autocast as AC

ROW = ("B", "T")
HEADS = ("B", "h_lv", "N_c", "C_l")  # a padded, chunked per-head sequence
# 1 with two chunks or more, else 0 (ledger.values): what only the products with a state
# that has a gradient save (chunks after the first; the state update runs N_c − 1 times)
ONLY_LATER = "[N_c>1]"
STATE_UPDATE = "Kᵀ V_new (state update)"  # the record a prefill runs once more (its cache's)


def _mm(t: Trace, name: str, batch, m, n, p, grads=("dA", "dB"), tri: bool = False,
        grad_b: bool = True) -> R.Matmul:
    return R.Matmul(name, R.RECURRENT, t.module, t.repeat, R.FORWARD, batch, m, n, p,
                    grads=grads, triangular=("C_l",) if tri else None, grad_b=grad_b)


class GatedDeltaNet:
    hf = False  # transformers' ops (Qwen3-Next's); Kimi Delta Attention's subclass: never
    def __init__(self, t: Trace, a: Arch):
        self.t, c = t, a.c
        # z: a copy where each key head's r = h_lv/h_lk value heads must be regrouped (a
        # view with one key head: its dimension of 1 has no stride to break)
        self.grouped = c.linear_value_heads != c.linear_key_heads and c.linear_key_heads > 1
        # the solve's W is column-major per chunk: row-major already (no copy) when a chunk
        # is one row or a key one column
        self.w_copy = c.linear_key_head_dim > 1 and c.linear_chunk > 1
        # transformers' torch_chunk_gated_delta_rule (Qwen3-Next, Qwen3.5: builder/hf_delta
        # notes in GatedDeltaNet.rule): its matmuls read the solve's column-major W in place
        self.hf = t.hf_qwen_next
        # transformers repeat_interleaves grouped heads (h_lk ≠ h_lv): contiguous (B, T, h_lv,
        # d_lk) queries and keys, whose transpose(1, 2) is the layout ALIASED below reads
        self.interleaved = c.linear_key_heads != c.linear_value_heads
        self.multi_head = c.linear_value_heads > 1
        if self.hf:
            self.w_copy = False
        with t.scope("linear_attn"):
            self.dt_bias = t.param("dt_bias", ("h_lv",), R.RECURRENT)
            self.A_log = t.param("A_log", ("h_lv",), R.RECURRENT)
            self.conv1d = CausalConv1d(t, "conv1d", ("d_conv",), False)
            self.split = c.linear_split_proj
            if self.split:  # Qwen3.5: in_proj_qkv (Q, K, V in the conv's order), z, b, a
                self.projs = {n: Linear(t, f"in_proj_{n}", ("d_model",), out, R.ATTN_PROJ,
                                        f"gated DeltaNet in_proj_{n}")
                              for n, out in (("qkv", ("d_conv",)), ("z", ("h_lv", "d_lv")),
                                             ("b", ("h_lv",)), ("a", ("h_lv",)))}
            else:
                self.in_proj_qkvz = Linear(t, "in_proj_qkvz", ("d_model",), ("d_qkvz",),
                                           R.ATTN_PROJ, "gated DeltaNet in_proj_qkvz")
                self.in_proj_ba = Linear(t, "in_proj_ba", ("d_model",), ("2", "h_lv"),
                                         R.ATTN_PROJ, "gated DeltaNet in_proj_ba")
            with t.scope("norm"):
                self.norm_weight = t.param("weight", ("d_lv",), NORM_PARAMS["rmsnorm"])
            self.out_proj = Linear(t, "out_proj", ("h_lv", "d_lv"), ("d_model",), R.ATTN_PROJ,
                                   "gated DeltaNet out_proj")

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        t, k = self.t, DELTA_RULE
        with t.scope("linear_attn"):
            if self.split:  # each its own projection's output: no regrouping
                qkv, z, b, a_ = (self.projs[n](x, f"in_proj_{n} output") for n in "qkv z b a".split())
                z = t.name(z, "z (the output gate)")
            else:
                qkv, z, b, a_ = self.regroup(x)
            if self.hf:  # causal_conv1d_fn's torch fallback: F.conv1d, F.silu
                mixed = hf_mamba.conv_silu(t, self.conv1d, t.view(qkv, ("B", "d_conv", "T"),
                                                                  contiguous=False),
                                           "d_conv", "gated DeltaNet", k)
            else:
                conv = causal_conv(t, qkv, self.conv1d.weight, None, ("d_conv",),
                                   "gated DeltaNet")
                sig = t.unary("aten.sigmoid", conv, "sigmoid(conv)", k, saves="output",
                              out="sigmoid(conv output)")
                mixed = t.binary("aten.mul", conv, sig, "SiLU: conv · sigmoid", k)
            beta = t.unary("aten.sigmoid", b, "β = sigmoid(b)", k, saves="output", out="β")
            # transformers: -A_log.float().exp() * F.softplus(a.float() + dt_bias)
            A_log = t.cast(self.A_log, FP32) if self.hf else self.A_log
            ea = t.unary("aten.exp", A_log, "exp(A_log)", k, saves="output", out="exp(A_log)")
            neg = t.name(t.unary("aten.neg", ea, "−exp(A_log)", k), "−exp(A_log)")
            if self.hf:
                a_ = t.cast(a_, FP32)
            pre = t.name(t.binary("aten.add", a_, self.dt_bias, "a + dt_bias", k),
                         "a + dt_bias (softplus input)")
            sp = t.unary("aten.softplus", pre, "softplus(a + dt_bias)", k, saves="input",
                         out="softplus(a + dt_bias)")
            g = t.binary("aten.mul", sp, neg, "g = −exp(A_log)·softplus(…)", k)
            out = self.rule(mixed, beta, g)
            # the cache: the conv's last K inputs and the d_lk × d_lv state of each value
            # head (float32: the rule computes it so; transformers caches it as returned)
            t.state("conv state", ("d_conv", "K"))
            t.state("recurrent state", ("h_lv", "d_lk", "d_lv"), fp32=True)
            y = self.gated_norm(out, z, hf=self.hf)
            return self.out_proj(y, out_label, out_course)

    def regroup(self, x: Sym) -> tuple[Sym, Sym, Sym, Sym]:
        """Qwen3-Next's fused projections: Q·K·V, z, b and a cut from a per-key-head layout."""
        t = self.t
        qkvz = self.in_proj_qkvz(x, "in_proj_qkvz output")
        ba = self.in_proj_ba(x, "in_proj_ba output")
        # z, b, a: slices of a per-key-head layout reshaped: copies (a view when h_lv =
        # h_lk, the key heads' slices are the value heads', or h_lk = 1)
        z = t.copy(qkvz, ROW + ("h_lv", "d_lv")) if self.grouped else \
            t.view(qkvz, ROW + ("h_lv", "d_lv"), contiguous=False)
        z = t.name(z, "z (the output gate)")
        b = t.copy(ba, ROW + ("h_lv",))
        a_ = t.copy(ba, ROW + ("h_lv",))
        qkv = t.cat((t.copy(qkvz), t.copy(qkvz), t.copy(qkvz)), ROW + ("d_conv",))
        return qkv, z, b, a_

    def l2norm(self, x: Sym, label: str) -> Sym:
        """x · rsqrt(Σ x² + eps) over the last dim."""
        t, k = self.t, DELTA_RULE
        sq = t.binary("aten.mul", x, x, f"{label}·{label}", k)
        s = t.reduce("aten.sum", sq, ("d_lk",), f"Σ {label}² over d_lk", k)
        e = t.binary("aten.add", s, None, "+ eps", k)
        inv = t.unary("aten.rsqrt", e, "rsqrt", k, saves="output", out=f"rsqrt(Σ {label}²)")
        return t.binary("aten.mul", x, inv, f"{label} · rsqrt", k)

    def rule(self, mixed: Sym, beta: Sym, g: Sym) -> Sym:
        """chunk_gated_delta_rule (model/delta.py), op for op."""
        t, k = self.t, DELTA_RULE
        lk, lv = ("d_lk",), ("d_lv",)
        per_head = ("B", "h_lv", "T")
        # the grouped heads' expand + reshape (a copy), then transpose + contiguous (a copy)
        q = t.copy(mixed, per_head + lk)
        kk = t.copy(mixed, per_head + lk)
        v = t.copy(mixed, per_head + lv)
        beta = t.copy(beta, per_head)
        g = t.copy(g, per_head)
        # ALIASED: in float32, x.transpose(1, 2).to(torch.float32, memory_format=
        # contiguous_format) returns x's transpose itself (Tensor.to aliases when the dtype
        # matches and suggest_memory_format() is already contiguous_format, as it is for
        # any 4-d tensor not channels-last: aten/src/ATen/native/TensorConversions.cpp
        # to_will_alias), the L2 norm and the scaling keep that (B, h_lv, T, d_lk) layout of
        # strides (T·h_lv·d_lk, d_lk, h_lv·d_lk, 1), and F.pad with nothing to pad (C_l
        # divides T) keeps it too. torch.matmul (aten/src/ATen/native/LinearAlgebra.cpp
        # _matmul_impl) reshapes each operand's batch dims into one for bmm: a copy where
        # they do not fold, and bmm saves the copies. (B, h_lv, N_c) folds only if h_lv = 1
        # or B = N_c = 1 (B with N_c folds: T·h·d = N_c·C_l·h·d; h with N_c never); one
        # chunk's (B, h_lv) only if B = 1 or h_lv = 1. Measured: tests/test_transformers_hybrid.py
        # (B = 1, 2; T = 64, 128, 192). Padding, a bf16 input or autocast make real copies.
        # Ungrouped heads (h_lk = h_lv) come in the conv output's layout instead: not
        # modelled (recipes.py keeps them in the gap)
        aliased = self.hf and mixed.dtype == FP32 and self.interleaved and self.multi_head
        if self.hf:
            q, kk, v, beta, g = (Sym(x.shape, FP32, x.grad) for x in (q, kk, v, beta, g))
        q = t.name(q, "Q (heads, float32 copy)")
        kk = t.name(kk, "K (heads, float32 copy)")
        q = t.binary("aten.mul", self.l2norm(q, "Q"), None, "Q / √d_lk", k)
        kk = t.name(self.l2norm(kk, "K"), "K, L2-normalised")
        # padded to N_c·C_l (constant_pad_nd: new tensors), then viewed as chunks
        q = t.name(t.copy(q, HEADS + lk), "Q (padded)")
        kk = t.name(t.copy(kk, HEADS + lk), "K (padded)")
        v = t.name(t.copy(v, HEADS + lv), "V (padded)")
        beta = t.name(t.copy(beta, HEADS), "β (padded)")
        g = t.copy(g, HEADS)
        v_beta = t.name(t.binary("aten.mul", v, t.view(beta, HEADS + lv), "V·β", k), "V·β")
        k_beta = t.name(t.binary("aten.mul", kk, t.view(beta, HEADS + lk), "K·β", k), "K·β")
        upper = t.name(t.fresh(("C_l", "C_l"), R.BOOL), "strictly upper mask (C_l×C_l)")
        cum = t.unary("aten.cumsum", g, "cumsum(g) within each chunk", k)
        pair = t.binary("aten.sub", t.view(cum, HEADS + ("C_l",)), cum, "cum_i − cum_j", k)
        pair = t.masked_fill(pair, upper, "masked_fill(upper, −inf)", k)
        pair = t.unary("aten.exp", pair, "exp", k, saves="output", out="pairwise decay")
        chunk = ("B", "h_lv", "N_c")
        ut = Sym(HEADS + ("C_l",), t.matmul(k_beta, kk, _mm(t, "K·β Kᵀ (UT system)", chunk,
                                                             ("C_l",), lk, ("C_l",))))
        ut = t.binary("aten.mul", t.name(ut, "K·β Kᵀ"), pair, "· pairwise decay", k)
        ut = t.name(ut, "UT system (K·β Kᵀ ⊙ decay)")
        intra = Sym(HEADS + ("C_l",), t.matmul(q, kk, _mm(t, "Q Kᵀ (intra-chunk)", chunk,
                                                          ("C_l",), lk, ("C_l",))))
        if aliased:  # bmm saves torch.matmul's copies (ALIASED above)
            for label, by in (("K·β", "K·β Kᵀ"), ("Kᵀ", "K·β Kᵀ"), ("Q", "Q Kᵀ"), ("Kᵀ", "Q Kᵀ")):
                t._saves(t.name(t.copy(k_beta), f"{label} (torch.matmul's batch-folding copy, "
                                f"for {by})", saved_if=FOLD), f"bmm ({by})")
        intra = t.binary("aten.mul", t.name(intra, "Q Kᵀ"), pair, "· pairwise decay", k)
        intra = t.name(intra, "intra-chunk attention (Q Kᵀ ⊙ decay)")
        ec = t.unary("aten.exp", cum, "exp(cum)", k, saves="output", out="exp(cum)")
        dkb = t.binary("aten.mul", k_beta, t.view(ec, HEADS + lk), "K·β · exp(cum)", k)
        dkb = t.name(dkb, "decayed K·β")
        u = t.solve(ut, v_beta, _mm(t, "UT solve for V·β", chunk, ("P_L",), (), lv,
                                    grads=("dB (a solve)", "dA"), tri=True), "U (new values)")
        w = t.solve(ut, dkb, _mm(t, "UT solve for the decayed K·β", chunk, ("P_L",), (), lk,
                                 grads=("dB (a solve)", "dA"), tri=True), "W (decayed keys)")
        # the solve's result is column-major per chunk: one row-major copy for the scan
        # (none when d_lk = 1 or C_l = 1: then it is row-major too)
        if self.w_copy:
            w = t.name(t.copy(w), "W (row-major copy)", saved_if=ONLY_LATER)
        eq = t.unary("aten.exp", cum, "exp(cum) (again)", k, saves="output", out="exp(cum) (again)")
        qd = t.name(t.binary("aten.mul", q, t.view(eq, HEADS + lk), "Q · exp(cum)", k),
                    "decayed Q", saved_if=VIEWED if aliased else ONLY_LATER)
        last = t.binary("aten.sub", cum, t.view(cum, ("B", "h_lv", "N_c", "1")),
                        "cum_last − cum", k)
        # only the state updates read these two exps; with one chunk there is none (model/
        # delta.py) or only the last (transformers: its state returned for a cache, dropped
        # without one), and autograd frees them (measured with weakrefs without saved-tensor
        # hooks, and by the live-storage tracker: tests/test_transformers_hybrid.py)
        dead = ONLY_LATER
        el = t.unary("aten.exp", last, "exp(cum_last − cum)", k, saves="output",
                     out="exp(cum_last − cum)", saved_if=dead)
        kd = t.name(t.binary("aten.mul", kk, t.view(el, HEADS + lk), "K · exp(cum_last − cum)", k),
                    "decayed K", saved_if=VIEWED if aliased else ONLY_LATER)
        if aliased:  # the scan's matmuls copy each later chunk's slice (ALIASED above)
            for label in ("decayed Q", "decayed Kᵀ"):
                t._saves(t.name(t.fresh(("B", "h_lv", "N_c-1", "C_l", "d_lk"), FP32),
                                f"{label}, one chunk's slice (torch.matmul's copy)",
                                storages="N_c-1", saved_if=SLICE), "bmm (the scan)")
        decay = t.unary("aten.exp", t.view(cum, chunk), "exp(cum_last)", k, saves="output",
                        out="chunk decay exp(cum_last)", saved_if=dead)
        rest = ("B", "h_lv", "N_c-1")
        return self.scan(u, w, qd, intra, kd, t.view(decay, rest + ("1", "1")), mixed.dtype)

    def scan(self, u: Sym, w: Sym, qd: Sym, intra: Sym, kd: Sym, decay: Sym, dtype) -> Sym:
        """model/delta.py's delta_scan (the gated delta rule's and Kimi Delta Attention's):
        `decay` each updated state's decay, broadcast over it (B, h_lv, N_c − 1, then 1 × 1
        or d_lk × 1)."""
        t, k = self.t, DELTA_RULE
        if self.hf and t.autocast is not None:
            return self.autocast_scan(u, w, qd, intra, kd, decay, dtype)
        lk, lv = ("d_lk",), ("d_lv",)
        chunk = ("B", "h_lv", "N_c")
        # the scan over the N_c chunks: one record per op over all chunks (the first
        # chunk's products with S_0, zeros without a gradient, apart: they have no dB);
        # the states and new values are N_c tensors each; N_c − 1 state updates
        # (transformers: zeros of new_values' dtype, float32 whatever the parameters')
        state = t.name(t.fresh(("B", "h_lv", "N_c", "d_lk", "d_lv"), FP32 if self.hf else None,
                               grad=True),
                       "states S_i (one per chunk)", storages="N_c")
        one, rest = ("B", "h_lv"), ("B", "h_lv", "N_c-1")
        ws = Sym(HEADS + lv, t.matmul(w, state, _mm(t, "W S_0 (first chunk)", one, ("C_l",),
                                                    lk, lv, grad_b=False)))
        t.matmul(w, state, _mm(t, "W S (inter-chunk)", rest, ("C_l",), lk, lv))
        v_new = t.binary("aten.sub", u, ws, "V_new = U − W S", k)
        v_new = t.name(v_new, "V_new (one per chunk)", storages="N_c")
        inter = Sym(HEADS + lv, t.matmul(qd, state, _mm(t, "Q S_0 (first chunk)", one,
                                                        ("C_l",), lk, lv, grad_b=False)))
        t.matmul(qd, state, _mm(t, "Q S (inter-chunk)", rest, ("C_l",), lk, lv))
        av = Sym(HEADS + lv, t.matmul(intra, v_new, _mm(t, "A V_new (intra-chunk)", chunk,
                                                        ("C_l",), ("C_l",), lv)))
        t.binary("aten.add", inter, av, "Q S + A V_new", k)
        upd = rest + lk + lv
        t.binary("aten.mul", t.view(state, upd), decay, "S · chunk decay", k)
        kv = Sym(upd, t.matmul(kd, v_new, _mm(t, STATE_UPDATE, rest, lk,
                                              ("C_l",), lv)))
        t.binary("aten.add", t.view(state, upd), kv, "S · decay + Kᵀ V_new", k)
        # the output, cut to T, transposed back: a copy
        return t.name(Sym(("B", "T", "h_lv", "d_lv"), dtype), "delta rule output")

    def gated_norm(self, x: Sym, z: Sym, scope: str = "norm", gate: str = "silu",
                   hf: bool = False) -> Sym:
        """GatedRMSNorm: x · rsqrt(mean(x²) + eps) · w · SiLU(z), over d_lv, in float32
        (gate "sigmoid": · sigmoid(z), Kimi Delta Attention's o_norm). hf: transformers'
        Qwen3NextRMSNormGated: weight · (x·rsqrt).to(input_dtype), then
        · F.silu(z.to(float32)) (one op saving its fp32 input), .to(input_dtype)."""
        t, k = self.t, GATED_NORM
        if hf:
            return self.hf_gated_norm(x, z, scope)
        with t.scope(scope):
            h = self._normalized(x)
            h = t.name(t.binary("aten.mul", h, self.norm_weight, "· weight", k), "norm: · weight")
            zs = t.unary("aten.sigmoid", z, "sigmoid(z)", k, saves="output", out="sigmoid(z)")
            if gate == "sigmoid":
                y = t.binary("aten.mul", h, zs, "· sigmoid(z)", k)
            else:
                silu = t.name(t.binary("aten.mul", z, zs, "SiLU(z)", k), "SiLU(z)")
                y = t.binary("aten.mul", h, silu, "· SiLU(z)", k)
        return t.name(y, "gated norm output (out_proj input)")

    def _normalized(self, x: Sym) -> Sym:
        """x · rsqrt(mean(x²) + eps) over d_lv in float32: the gated norms' common start
        (model/'s GatedRMSNorm and transformers' Qwen3NextRMSNormGated alike)."""
        t, k = self.t, GATED_NORM
        x = t.cast(x, R.FP32, "delta rule output (fp32 copy)")
        sq = t.unary("aten.pow", x, "x²", k, saves="input")
        ms = t.reduce("aten.mean", sq, ("d_lv",), "mean over d_lv", k)
        e = t.binary("aten.add", ms, None, "+ eps", k)
        inv = t.unary("aten.rsqrt", e, "rsqrt", k, saves="output", out="norm: rsqrt")
        return t.name(t.binary("aten.mul", x, inv, "x · rsqrt", k), "norm: x · rsqrt")

    def hf_gated_norm(self, x: Sym, z: Sym, scope: str) -> Sym:
        """Qwen3NextRMSNormGated.forward (transformers 5.23 modeling_qwen3_next.py)."""
        t, k = self.t, GATED_NORM
        in_dtype = x.dtype
        with t.scope(scope):
            h = self._normalized(x)
            h = t.cast(h, in_dtype, "norm: x · rsqrt (cast to the input's dtype)")
            h = t.name(t.binary("aten.mul", h, self.norm_weight, "· weight", k), "norm: · weight")
            z32 = t.cast(z, R.FP32, "z (fp32 copy)")
            silu = t.unary("aten.silu", z32, "SiLU(z)", k, saves="input", out="SiLU(z)")
            y = t.cast(t.binary("aten.mul", h, silu, "· SiLU(z)", k), in_dtype)
        return t.name(y, "gated norm output (out_proj input)")

    def autocast_scan(self, u: Sym, w: Sym, qd: Sym, intra: Sym, kd: Sym, decay: Sym,
                      dtype) -> Sym:
        """torch_chunk_gated_delta_rule's loop over the chunks under autocast: each chunk's
        matmul casts its own slices to bf16, and those casts are what autograd keeps
        (measured, tests/test_transformers_hybrid.py): per chunk i, k_cumdecay[i] @ S and
        query[i] @ S each cast S (2·N_c casts; the slices kept from i = 1 on, S_0 having no
        gradient); intra[i] @ v_new casts both (N_c each); the state update key[i]ᵀ @ v_new
        casts both, kept for i < N_c − 1 (the last update's result is dropped, its graph
        freed); S · chunk_decay keeps S in float32, S_0 … S_{N_c−2}. The float32 v_new,
        decayed Q and K and intra-chunk attention are then kept by nothing."""
        t, k = self.t, DELTA_RULE
        lk, lv = ("d_lk",), ("d_lv",)
        one, rest, chunk = ("B", "h_lv"), ("B", "h_lv", "N_c-1"), ("B", "h_lv", "N_c")
        low = AC.LOW_DTYPE

        def cast(shape, label, storages, grad=True):
            return t.name(Sym(shape, low, grad), label, storages=storages)
        s0 = [cast(one + lk + lv, f"S_0 (bf16 copy for {w_})", None, grad=False)
              for w_ in ("W S_0", "Q S_0")]
        ws0 = Sym(one + ("C_l",) + lv, low)
        t.matmul(Sym(one + ("C_l",) + lk, low), s0[0],
                 _mm(t, "W S_0 (first chunk)", one, ("C_l",), lk, lv, grad_b=False))
        s_w = cast(rest + lk + lv, "S_i (bf16 copies for W S)", "N_c-1")
        w_i = cast(rest + ("C_l",) + lk, "W_i (bf16 copies)", "N_c-1")
        t.matmul(w_i, s_w, _mm(t, "W S (inter-chunk)", rest, ("C_l",), lk, lv))
        v_new = t.binary("aten.sub", u, Sym(HEADS + lv, low), "V_new = U − W S", k)
        t.matmul(Sym(one + ("C_l",) + lk, low), s0[1],
                 _mm(t, "Q S_0 (first chunk)", one, ("C_l",), lk, lv, grad_b=False))
        s_q = cast(rest + lk + lv, "S_i (bf16 copies for Q S)", "N_c-1")
        q_i = cast(rest + ("C_l",) + lk, "decayed Q_i (bf16 copies)", "N_c-1")
        t.matmul(q_i, s_q, _mm(t, "Q S (inter-chunk)", rest, ("C_l",), lk, lv))
        a_i = cast(HEADS + ("C_l",), "intra-chunk attention_i (bf16 copies)", "N_c")
        v_a = cast(HEADS + lv, "V_new_i (bf16 copies for A V_new)", "N_c")
        t.matmul(a_i, v_a, _mm(t, "A V_new (intra-chunk)", chunk, ("C_l",), ("C_l",), lv))
        del ws0, v_new
        states = t.name(t.fresh(rest + lk + lv, grad=True), "states S_0 … S_{N_c−2} (fp32)",
                        storages="N_c-1")
        t.binary("aten.mul", states, decay, "S · chunk decay", k)
        k_i = cast(rest + lk + ("C_l",), "decayed K_i (bf16 copies)", "N_c-1")
        v_k = cast(rest + ("C_l",) + lv, "V_new_i (bf16 copies for the update)", "N_c-1")
        kv = Sym(rest + lk + lv, t.matmul(k_i, v_k, _mm(t, STATE_UPDATE, rest, lk, ("C_l",),
                                                        lv)))
        t.binary("aten.add", states, kv, "S · decay + Kᵀ V_new", k)
        return t.name(Sym(("B", "T", "h_lv", "d_lv"), dtype), "delta rule output")
