"""Kimi Delta Attention (Kimi Linear's KDA layers): model/kda.py's ops, as facts (issue 31).
The gated DeltaNet's (builder/delta.py) with a decay per key channel: its symbols, its UT
solves and its scan (GatedDeltaNet.scan) are shared; h_lk = h_lv (one head count).

Executed FLOPs per layer and sequence (2mnp; the chunked form as fla's chunk_kda computes
it, chunk C_l, N_c = ⌈T/C_l⌉, the pairwise decays exp(G_i − G_j) of each key channel
factored as exp(G_i)·exp(−G_j)):
  projections: q_proj, k_proj, v_proj, forget_gate.f_a_proj (d → d_lk), f_b_proj
  (d_lk → h·d_lk), b_proj (d → h), g_a_proj (d → d_lv), g_b_proj (d_lv → h·d_lv), o_proj;
  the depthwise causal conv1d over Q, K, V (d_conv channels);
  intra-chunk: (K_β ⊙ e^G)(K ⊙ e^{−G})ᵀ and (Q ⊙ e^G)(K ⊙ e^{−G})ᵀ, 2·2·h·N_c·C_l²·d_lk;
  the two UT solves, 2·h·N_c·P_L·(d_lv + d_lk); the scan, as the gated DeltaNet's:
  2·2·h·N_c·C_l·d_lk·d_lv + 2·h·N_c·C_l²·d_lv + 2·h·(N_c − 1)·C_l·d_lk·d_lv.
So the matmul FLOPs equal a gated DeltaNet's of the same heads and widths; what differs is
elementwise: the decays are B·h·T·d_lk (one per key channel) where the gated DeltaNet's are
B·h·T, and no C_l × C_l pairwise-decay matrix is formed.
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym, Trace
from accounting.ledger.builder.common import DELTA_RULE, NORM_PARAMS, Arch
from accounting.ledger.builder.delta import HEADS, ROW, GatedDeltaNet, _mm
from accounting.ledger.builder.layers import Linear
from accounting.ledger.builder.recurrent import CausalConv1d, causal_conv


class KimiDeltaAttention(GatedDeltaNet):
    def __init__(self, t: Trace, a: Arch):
        self.t = t
        proj = R.ATTN_PROJ
        with t.scope("kda"):
            self.q_proj = Linear(t, "q_proj", ("d_model",), ("h_lk", "d_lk"), proj, "KDA q_proj")
            self.k_proj = Linear(t, "k_proj", ("d_model",), ("h_lk", "d_lk"), proj, "KDA k_proj")
            self.v_proj = Linear(t, "v_proj", ("d_model",), ("h_lv", "d_lv"), proj, "KDA v_proj")
            self.conv1d = CausalConv1d(t, "conv1d", ("d_conv",), False)
            with t.scope("forget_gate"):
                self.f_a_proj = Linear(t, "f_a_proj", ("d_model",), ("d_lk",), proj,
                                       "KDA forget gate f_a_proj")
                self.f_b_proj = Linear(t, "f_b_proj", ("d_lk",), ("h_lv", "d_lk"), proj,
                                       "KDA forget gate f_b_proj")
                self.dt_bias = t.param("dt_bias", ("h_lv", "d_lk"), R.RECURRENT)
                self.A_log = t.param("A_log", ("h_lv",), R.RECURRENT)
            self.b_proj = Linear(t, "b_proj", ("d_model",), ("h_lv",), proj, "KDA b_proj")
            self.g_a_proj = Linear(t, "g_a_proj", ("d_model",), ("d_lv",), proj, "KDA g_a_proj")
            self.g_b_proj = Linear(t, "g_b_proj", ("d_lv",), ("h_lv", "d_lv"), proj,
                                   "KDA g_b_proj")
            with t.scope("o_norm"):
                self.norm_weight = t.param("weight", ("d_lv",), NORM_PARAMS["rmsnorm"])
            self.o_proj = Linear(t, "o_proj", ("h_lv", "d_lv"), ("d_model",), proj, "KDA o_proj")

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        t, k = self.t, DELTA_RULE
        with t.scope("kda"):
            qkv = t.cat((self.q_proj(x, "KDA q_proj output"), self.k_proj(x, "KDA k_proj output"),
                         self.v_proj(x, "KDA v_proj output")), ROW + ("d_conv",))
            conv = causal_conv(t, qkv, self.conv1d.weight, None, ("d_conv",), "KDA")
            sig = t.unary("aten.sigmoid", conv, "sigmoid(conv)", k, saves="output",
                          out="sigmoid(conv output)")
            mixed = t.binary("aten.mul", conv, sig, "SiLU: conv · sigmoid", k)
            with t.scope("forget_gate"):
                f = self.f_b_proj(self.f_a_proj(x, "f_a_proj output"), "f_b_proj output")
                pre = t.name(t.binary("aten.add", f, self.dt_bias, "f + dt_bias", k),
                             "f + dt_bias (softplus input)")
                sp = t.unary("aten.softplus", pre, "softplus(f + dt_bias)", k, saves="input",
                             out="softplus(f + dt_bias)")
                ea = t.unary("aten.exp", self.A_log, "exp(A_log)", k, saves="output",
                             out="exp(A_log)")
                neg = t.name(t.unary("aten.neg", ea, "−exp(A_log)", k), "−exp(A_log)")
                g = t.binary("aten.mul", sp, t.view(neg, ("h_lv", "1")),
                             "g = −exp(A_log)·softplus(…) (per key channel)", k)
            b = self.b_proj(x, "b_proj output")
            beta = t.unary("aten.sigmoid", b, "β = sigmoid(b)", k, saves="output", out="β")
            out = self.rule(mixed, beta, g)
            # the cache, as the gated DeltaNet's: the conv's last K inputs over Q, K, V and a
            # d_lk × d_lv float32 state per head
            t.state("conv state", ("d_conv", "K"))
            t.state("recurrent state", ("h_lv", "d_lk", "d_lv"), fp32=True)
            gate = self.g_b_proj(self.g_a_proj(x, "g_a_proj output"), "output gate (g_b_proj)")
            y = self.gated_norm(out, gate, scope="o_norm", gate="sigmoid")
            return self.o_proj(y, out_label, out_course)

    def rule(self, mixed: Sym, beta: Sym, g: Sym) -> Sym:
        """model/kda.py's chunk_kda, op for op."""
        t, k = self.t, DELTA_RULE
        lk, lv = ("d_lk",), ("d_lv",)
        per_head = ("B", "h_lv", "T")
        q = t.name(t.copy(mixed, per_head + lk), "Q (heads, float32 copy)")
        kk = t.name(t.copy(mixed, per_head + lk), "K (heads, float32 copy)")
        v = t.copy(mixed, per_head + lv)
        beta = t.copy(beta, per_head)
        g = t.copy(g, per_head + lk)
        q = t.binary("aten.mul", self.l2norm(q, "Q"), None, "Q / √d_lk", k)
        kk = t.name(self.l2norm(kk, "K"), "K, L2-normalised")
        q = t.name(t.copy(q, HEADS + lk), "Q (padded)")
        kk = t.name(t.copy(kk, HEADS + lk), "K (padded)")
        v = t.name(t.copy(v, HEADS + lv), "V (padded)")
        g = t.copy(g, HEADS + lk)
        beta = t.name(t.copy(beta, HEADS), "β (padded)")
        v_beta = t.name(t.binary("aten.mul", v, t.view(beta, HEADS + ("1",)), "V·β", k), "V·β")
        k_beta = t.name(t.binary("aten.mul", kk, t.view(beta, HEADS + ("1",)), "K·β", k), "K·β")
        upper = t.name(t.fresh(("C_l", "C_l"), R.BOOL), "strictly upper mask (C_l×C_l)")
        cum = t.unary("aten.cumsum", g, "cumsum(g) within each chunk, per key channel", k)
        ec = t.unary("aten.exp", cum, "exp(cum)", k, saves="output", out="exp(cum)")
        nc = t.unary("aten.neg", cum, "−cum", k)
        en = t.unary("aten.exp", nc, "exp(−cum)", k, saves="output", out="exp(−cum)")
        k_neg = t.name(t.binary("aten.mul", kk, en, "K · exp(−cum)", k), "K ⊙ e^−G")
        dkb = t.name(t.binary("aten.mul", k_beta, ec, "K·β · exp(cum)", k), "decayed K·β")
        qd = t.name(t.binary("aten.mul", q, ec, "Q · exp(cum)", k), "decayed Q")
        chunk = ("B", "h_lv", "N_c")
        ut = Sym(HEADS + ("C_l",), t.matmul(dkb, k_neg, _mm(
            t, "(K·β ⊙ e^G)(K ⊙ e^−G)ᵀ (UT system)", chunk, ("C_l",), lk, ("C_l",))))
        ut = t.name(t.masked_fill(t.name(ut, "K·β Kᵀ, decayed"), upper, "masked_fill(upper, 0)",
                                  k), "UT system")
        intra = Sym(HEADS + ("C_l",), t.matmul(qd, k_neg, _mm(
            t, "(Q ⊙ e^G)(K ⊙ e^−G)ᵀ (intra-chunk)", chunk, ("C_l",), lk, ("C_l",))))
        intra = t.name(t.masked_fill(t.name(intra, "Q Kᵀ, decayed"), upper,
                                     "masked_fill(upper, 0)", k), "intra-chunk attention")
        u = t.solve(ut, v_beta, _mm(t, "UT solve for V·β", chunk, ("P_L",), (), lv,
                                    grads=("dB (a solve)", "dA"), tri=True), "U (new values)")
        w = t.solve(ut, dkb, _mm(t, "UT solve for the decayed K·β", chunk, ("P_L",), (), lk,
                                 grads=("dB (a solve)", "dA"), tri=True), "W (decayed keys)")
        w = t.name(t.copy(w), "W (row-major copy)")
        last = t.binary("aten.sub", cum, t.view(cum, chunk + ("1",) + lk), "cum_last − cum", k)
        el = t.unary("aten.exp", last, "exp(cum_last − cum)", k, saves="output",
                     out="exp(cum_last − cum)")
        kd = t.name(t.binary("aten.mul", kk, el, "K · exp(cum_last − cum)", k), "decayed K")
        decay = t.unary("aten.exp", t.view(cum, chunk + lk), "exp(cum_last)", k, saves="output",
                        out="chunk decay exp(cum_last), per key channel")
        rest = ("B", "h_lv", "N_c-1")
        return self.scan(u, w, qd, intra, kd, t.view(decay, rest + lk + ("1",)), mixed.dtype)
