"""The Mamba-1 mixer: model/mamba1.py's ops, as facts (issue 31; Jamba's JambaMambaMixer).

Symbols: d_i the inner width (channels, each with a state of n_s), r_dt dt's rank, 2d_i
in_proj's width (x and the gate z), d_rbc = r_dt + 2·n_s x_proj's width (dt, B, C).

Executed FLOPs per layer and sequence (2mnp; transformers' mamba_selective_scan, its torch
path's sequential loop): in_proj 2·T·d·2d_i, the depthwise conv 2·T·d_i·K, x_proj
2·T·d_i·d_rbc, dt_proj's weight times dt 2·T·r_dt·d_i (run in the mixer, its bias added in
the scan), and per token the state's read y = state·C, 2·d_i·n_s: 2·T·d_i·n_s; out_proj
2·T·d_i·d. The state's update (dA·state + dB·x) and the discretisation (exp(A·dt), dt·B·x)
are elementwise, T·d_i·n_s each. Autograd keeps the state entering each token (the first
zeros) and the last one, T + 1 tensors of d_i·n_s, beside exp(A·dt) and dt·B.
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym, Trace
from accounting.ledger.builder.common import NORM_PARAMS, SSD, Arch
from accounting.ledger.builder.layers import Linear, Norm
from accounting.ledger.builder.recurrent import CausalConv1d, causal_conv

ROW = ("B", "T")
S4 = ("B", "T", "d_i", "n_s")  # per token, channel and state


class Mamba1Mixer:
    def __init__(self, t: Trace, a: Arch):
        self.t, c = t, a.c
        comp = NORM_PARAMS["rmsnorm"]
        with t.scope("mixer"):
            self.A_log = t.param("A_log", ("d_i", "n_s"), R.RECURRENT)
            self.D = t.param("D", ("d_i",), R.RECURRENT)
            self.conv1d = CausalConv1d(t, "conv1d", ("d_i",), c.conv_bias)
            self.in_proj = Linear(t, "in_proj", ("d_model",), ("2d_i",), R.ATTN_PROJ,
                                  "Mamba-1 in_proj", c.mamba_bias)
            self.x_proj = Linear(t, "x_proj", ("d_i",), ("d_rbc",), R.ATTN_PROJ,
                                 "Mamba-1 x_proj (dt, B, C)")
            with t.scope("dt_proj"):  # its weight runs in the mixer (weight @ dt), as its bias
                self.dt_weight = t.param("weight", ("d_i", "r_dt"), R.RECURRENT, dims=(1, 1))
                self.dt_bias = t.param("bias", ("d_i",), R.RECURRENT, dims=(1,))
            self.out_proj = Linear(t, "out_proj", ("d_i",), ("d_model",), R.ATTN_PROJ,
                                   "Mamba-1 out_proj", c.mamba_bias)
            self.norms = tuple(Norm(t, name, "rmsnorm", (width,), SSD, comp) for name, width in
                               (("dt_layernorm", "r_dt"), ("b_layernorm", "n_s"),
                                ("c_layernorm", "n_s")))

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        t, k = self.t, SSD
        with t.scope("mixer"):
            xz = self.in_proj(x, "in_proj output (x, z)")
            ea = t.unary("aten.exp", self.A_log, "exp(A_log)", k, saves="output", out="exp(A_log)")
            A = t.name(t.unary("aten.neg", ea, "A = −exp(A_log)", k), "A")
            h = t.view(xz, ROW + ("d_i",), contiguous=False)
            gate = t.view(xz, ROW + ("d_i",), contiguous=False)
            conv = causal_conv(t, h, self.conv1d.weight, self.conv1d.bias, ("d_i",), "Mamba-1")
            sig = t.unary("aten.sigmoid", conv, "sigmoid(conv)", k, saves="output",
                          out="sigmoid(conv output)")
            h = t.name(t.binary("aten.mul", conv, sig, "SiLU: conv · sigmoid", k),
                       "SiLU(conv) (x)")
            hc = t.name(t.copy(h), "x (contiguous: x_proj's input)")
            rbc = self.x_proj(hc, "x_proj output (dt, B, C)")
            # each slice RMS-normed; a sliced (not dense) input's result is laid out contiguous
            dt, B, C = (t.view(norm(t.view(rbc, ROW + (w,), contiguous=False), f"{what} after "
                                    f"{norm.name}"), contiguous=True)
                        for norm, w, what in zip(self.norms, ("r_dt", "n_s", "n_s"),
                                                 ("dt", "B", "C")))
            dtype = t.matmul(dt, self.dt_weight, R.Matmul(
                "Mamba-1 dt_proj (weight · dt)", R.RECURRENT, t.module, t.repeat, R.FORWARD,
                (), ROW, ("r_dt",), ("d_i",), grads=("dX", "dW")))
            dt = Sym(ROW + ("d_i",), dtype)
            dt = t.name(t.binary("aten.add", dt, self.dt_bias, "dt + dt_proj.bias", k),
                        "dt + dt_proj.bias")
            dt = t.name(t.unary("aten.softplus", dt, "softplus", k, saves="input"), "dt")
            dt4 = t.view(dt, S4, contiguous=False)  # dt[..., None], broadcast
            ad = t.binary("aten.mul", dt4, A, "dt · A", k)
            dA = t.unary("aten.exp", ad, "exp(dt · A)", k, saves="output", out="dA = exp(dt · A)")
            db = t.binary("aten.mul", dt4, t.view(B, S4, contiguous=False), "dt · B", k,
                          out="dt · B")
            dbx = t.binary("aten.mul", db, t.view(h, ROW + ("d_i", "1"), contiguous=False),
                           "dt·B · x", k)
            y = self.scan(dA, dbx, C)
            hd = t.binary("aten.mul", h, self.D, "D · x", k)
            y = t.name(t.binary("aten.add", y, hd, "y + D · x", k), "scan output + D · x")
            zs = t.unary("aten.sigmoid", gate, "sigmoid(z)", k, saves="output", out="sigmoid(z)")
            silu = t.name(t.binary("aten.mul", gate, zs, "SiLU(z)", k), "SiLU(z)")
            y = t.name(t.binary("aten.mul", y, silu, "y · SiLU(z)", k),
                       "y · SiLU(z) (out_proj input)")
            t.state("conv state", ("d_i", "K"))
            t.state("SSM state", ("d_i", "n_s"), fp32=True)  # the scan runs in float32
            return self.out_proj(y, out_label, out_course)

    def scan(self, dA: Sym, dbx: Sym, C: Sym) -> Sym:
        """The loop over the T tokens, one record per op over all of them: state = dA·state
        + dB·x, then y = state·C (a bmm per token, (d_i × n_s) by (n_s × 1))."""
        t, k = self.t, SSD
        prev = t.name(t.fresh(S4, grad=True), "SSM state entering each token (the first zeros)",
                      storages="T")
        s = t.binary("aten.mul", dA, prev, "dA · state", k)
        s = t.binary("aten.add", s, dbx, "+ dt·B·x (the state after each token)", k)
        # the bmm saves the state after each token: the next token's entering one (prev,
        # named above), and the last token's
        dtype = t.matmul(t.view(prev, contiguous=True), t.view(C, ROW + ("n_s", "1")),
                         R.Matmul("state · C (per token)", R.RECURRENT, t.module, t.repeat,
                                  R.FORWARD, ("B",), ("T", "d_i"), ("n_s",), ()))
        t._saves(t.name(t.fresh(("B", "d_i", "n_s"), grad=True), "the last token's SSM state"),
                 "bmm (state · C)")
        return t.cat((Sym(("B", "d_i"), dtype, grad=True),), ROW + ("d_i",))  # stack: new
