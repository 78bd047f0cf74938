"""The Mamba-2 mixer: model/mamba.py's ops, as facts (issue 31).

Symbols: h_m heads of p_m, n_s the state per head, G_m groups (B and C shared by h_m/G_m
heads), d_xbc = h_m·p_m + 2·G_m·n_s (the conv's channels: x, B, C), d_zxbcdt = 2·h_m·p_m
+ 2·G_m·n_s + h_m (in_proj's width), C_m the chunk, N_m = ⌈T/C_m⌉ chunks (padded to
N_m·C_m), N_m+1 the chunk states with the initial one.

Executed FLOPs per layer and sequence (2mnp; transformers' mamba2_chunk_scan, its torch
path): intra-chunk C·Bᵀ and (C·Bᵀ ⊙ L)·x, 2·2·h_m·N_m·C_m²·(n_s, p_m); the chunk states
Bᵀ·x, 2·h_m·N_m·C_m·p_m·n_s; their exchange across chunks as one (N_m+1)×(N_m+1) decay
matrix times the states, 2·h_m·(N_m+1)²·p_m·n_s (quadratic in the chunks: the torch path's
form; the mamba_ssm kernel passes the states sequentially, linear in N_m); the output
C·state, 2·h_m·N_m·C_m·n_s·p_m.

Falcon-H1's FalconH1Mixer (modeling_falcon_h1.py) is this mixer with its input × ssm_in_multiplier
and in_proj's output × the per-channel mup_vector (a buffer of d_zxbcdt, spec mup_multipliers),
and, with mamba_rms_norm false (spec mamba_gate_only), y·SiLU(z) in place of the gated norm.
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym, Trace
from accounting.ledger.builder.common import GATED_NORM, MUP, NORM_PARAMS, SSD, Arch
from accounting.ledger.builder.layers import Linear
from accounting.ledger.builder.recurrent import CausalConv1d, causal_conv
from accounting.ledger.builder import hf_mamba
from accounting.units import FP32

ROW = ("B", "T")
CH = ("B", "N_m", "C_m", "h_m")  # chunked, padded: (batch chunks position heads)


def _mm(t: Trace, name: str, batch, m, n, p) -> R.Matmul:
    return R.Matmul(name, R.RECURRENT, t.module, t.repeat, R.FORWARD, batch, m, n, p)


class Mamba2Mixer:
    def __init__(self, t: Trace, a: Arch):
        self.t, c = t, a.c
        with t.scope("mixer"):
            self.dt_bias = t.param("dt_bias", ("h_m",), R.RECURRENT)
            self.A_log = t.param("A_log", ("h_m",), R.RECURRENT)
            self.D = t.param("D", ("h_m",), R.RECURRENT)
            self.conv1d = CausalConv1d(t, "conv1d", ("d_xbc",), c.conv_bias)
            self.in_proj = Linear(t, "in_proj", ("d_model",), ("d_zxbcdt",), R.ATTN_PROJ,
                                  "Mamba-2 in_proj", c.mamba_bias)
            if not c.mamba_gate_only:
                with t.scope("norm"):
                    self.norm_weight = t.param("weight", ("h_m", "p_m"), NORM_PARAMS["rmsnorm"])
            self.out_proj = Linear(t, "out_proj", ("h_m", "p_m"), ("d_model",), R.ATTN_PROJ,
                                   "Mamba-2 out_proj", c.mamba_bias)
            # Falcon-H1's mup_vector: registered after the parameters (persistent=False)
            self.mup = (t.name(t.buffer("mup_vector", ("d_zxbcdt",), 4), "mup_vector (buffer)")
                        if c.mup_multipliers else None)
            self.gate_only = c.mamba_gate_only

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        t, k = self.t, SSD
        if t.hf_nemotron:  # transformers' NemotronHMamba2Mixer, its torch path
            return hf_mamba.torch_forward(self, x, out_label, out_course)
        with t.scope("mixer"):
            if self.mup is not None:  # x · ssm_in_multiplier; in_proj(x) · mup_vector
                x = t.name(t.binary("aten.mul", x, None, "x · ssm_in_multiplier", MUP),
                           "Mamba-2 input · ssm_in_multiplier")
                z = self.in_proj(x, "in_proj output (z, x·B·C, dt)")
                z = t.name(t.binary("aten.mul", z, self.mup, "in_proj output · mup_vector", MUP),
                           "in_proj output · mup_vector")
            else:
                z = self.in_proj(x, "in_proj output (z, x·B·C, dt)")
            ea = t.unary("aten.exp", self.A_log, "exp(A_log)", k, saves="output", out="exp(A_log)")
            A = t.name(t.unary("aten.neg", ea, "A = −exp(A_log)", k), "A")
            gate = t.view(z, ROW + ("h_m", "p_m"), contiguous=False)
            xbc = t.view(z, ROW + ("d_xbc",), contiguous=False)
            dt = t.view(z, ROW + ("h_m",), contiguous=False)
            conv = causal_conv(t, xbc, self.conv1d.weight, self.conv1d.bias, ("d_xbc",), "Mamba-2")
            sig = t.unary("aten.sigmoid", conv, "sigmoid(conv)", k, saves="output",
                          out="sigmoid(conv output)")
            xbc = t.name(t.binary("aten.mul", conv, sig, "SiLU: conv · sigmoid", k),
                         "SiLU(conv) (x, B, C)")
            h = t.view(xbc, ROW + ("h_m", "p_m"), contiguous=False)
            y = self.scan(h, dt, A, xbc)
            t.state("conv state", ("d_xbc", "K"))
            t.state("SSM state", ("h_m", "p_m", "n_s"), fp32=True)  # the scan runs in fp32
            y = self.gate(y, gate) if self.gate_only else self.gated_norm(y, gate)
            return self.out_proj(y, out_label, out_course)

    def segment_sum(self, a: Sym, n: str, label: str) -> Sym:
        """exp(segment_sum(a)) over the last dim n: expand, masked_fill, cumsum, masked_fill,
        exp (the masks: boolean n×n, saved by masked_fill)."""
        t, k = self.t, SSD
        wide = t.view(a, a.shape + (n,))
        lower = t.name(t.fresh((n, n), R.BOOL), f"{label}: strictly lower mask")
        keep = t.name(t.fresh((n, n), R.BOOL), f"{label}: lower mask")
        s = t.masked_fill(wide, lower, f"{label}: masked_fill(~lower, 0)", k)
        s = t.unary("aten.cumsum", s, f"{label}: cumsum", k)
        s = t.masked_fill(s, keep, f"{label}: masked_fill(~lower, −inf)", k)
        return t.unary("aten.exp", s, f"{label}: exp", k, saves="output", out=f"{label}")

    def scan(self, h: Sym, dt: Sym, A: Sym, xbc: Sym, hf: bool = False) -> Sym:
        """chunk_scan (model/mamba.py), op for op; hf: transformers' mamba2_chunk_scan
        (builder/hf_mamba.py), which adds dt_bias.to(dt.dtype) and runs the scan in float32:
        x.float(), B.float(), C.float(), and dt.float() once for x·dt and again for A·dt
        (copies where they are not float32 already)."""
        t, k = self.t, SSD
        pn = ("p_m", "n_s")
        bias = t.cast(self.dt_bias, dt.dtype) if hf else self.dt_bias
        dt = t.name(t.binary("aten.add", dt, bias, "dt + dt_bias", k), "dt + dt_bias")
        dt = t.name(t.unary("aten.softplus", dt, "softplus", k, saves="input"), "softplus(dt)")
        dt = t.name(t.unary("aten.clamp", dt, "clamp(dt, min)", k, saves="input"), "dt")
        if hf and xbc.dtype != FP32:  # the .float() copies (not saved themselves)
            h = t.name(Sym(h.shape, FP32, h.grad), "x (fp32 copy)")
            xbc = Sym(xbc.shape, FP32, xbc.grad)
        dt_x, dt_a = (t.cast(dt, FP32, "dt (fp32 copy)") if hf else dt for _ in range(2))
        # B and C over the heads of their group (expand + reshape: copies)
        Bm = t.copy(xbc, ROW + ("h_m", "n_s"))
        Cm = t.copy(xbc, ROW + ("h_m", "n_s"))
        xp = t.name(t.copy(h, CH + ("p_m",)), "x (padded, for D)")
        d_res = t.binary("aten.mul", xp, self.D, "D · x", k)
        xdt = t.binary("aten.mul", h, t.view(dt_x, ROW + ("h_m", "1")), "x · dt", k)
        Adt = t.binary("aten.mul", dt_a, A, "A · dt", k)
        xdt = t.name(t.copy(xdt, CH + ("p_m",)), "x·dt (padded)",
                     saved_if="[N_m=1]" if hf else None)
        if hf:  # transformers' x·dt: its product keeps the transposed conv output's layout
            # and F.pad keeps it (channels-last), so with one chunk (T ≤ C_m) both einsums
            # below read it in place and autograd keeps it, not their copies (measured,
            # tests/test_transformers_hybrid.py); under autocast each bmm saves its own
            # bf16 cast of it instead
            if t.autocast is None:
                t._saves(xdt, "bmm (M x (intra-chunk))")
            xdt_m, xdt_b = (t.name(t.copy(xdt), f"x·dt (copy for {what})", saved_if="[N_m>1]")
                            for what in ("M x", "Bᵀ x"))
        else:
            xdt_m = xdt_b = t.view(xdt, contiguous=False)
        Adt = t.view(t.copy(Adt, CH), ("B", "h_m", "N_m", "C_m"), contiguous=False)
        Bm = t.name(t.copy(Bm, CH + ("n_s",)), "B (padded)")
        Cm = t.name(t.copy(Cm, CH + ("n_s",)), "C (padded)")
        cum = t.unary("aten.cumsum", Adt, "cumsum(A·dt)", k)
        L = self.segment_sum(Adt, "C_m", "L = exp(segsum(A·dt))")
        chunk = ("B", "N_m", "h_m")
        G = Sym(("B", "N_m", "C_m", "C_m", "h_m"),
                t.matmul(t.view(Cm, contiguous=False), t.view(Bm, contiguous=False),
                         _mm(t, "C Bᵀ (intra-chunk)", chunk, ("C_m",), ("n_s",), ("C_m",)),
                         copy_labels=("C (copy for C Bᵀ)", "B (copy for C Bᵀ)")),
                contiguous=False)
        G = t.name(G, "C Bᵀ")
        M = t.binary("aten.mul", G, L, "C Bᵀ ⊙ L", k, out="M = C Bᵀ ⊙ L")
        y_diag = Sym(CH + ("p_m",), t.matmul(M, xdt_m,
                                             _mm(t, "M x (intra-chunk)", chunk, ("C_m",),
                                                 ("C_m",), ("p_m",)),
                                             copy_labels=("", "x·dt (copy for M x)")),
                     contiguous=False)
        last = t.binary("aten.sub", cum, t.view(cum, ("B", "h_m", "N_m", "1")),
                        "cum_last − cum", k)
        ds = t.unary("aten.exp", last, "exp(cum_last − cum)", k, saves="output",
                     out="decay states")
        bd = t.binary("aten.mul", Bm, t.view(ds, CH + ("1",)), "B · decay", k)
        bd = t.name(bd, "B · decay")
        states = Sym(chunk + pn, t.matmul(t.view(bd, contiguous=False), xdt_b,
                                          _mm(t, "Bᵀ x (chunk states)", chunk, ("p_m",),
                                              ("C_m",), ("n_s",)),
                                          copy_labels=("B · decay (copy)",
                                                       "x·dt (copy for Bᵀ x)")))
        states = t.cat((states,), ("B", "N_m+1", "h_m") + pn)  # zeros in front: a new tensor
        edge = t.copy(t.view(cum, ("B", "h_m", "N_m")), ("B", "h_m", "N_m+1"))  # pad (1, 0)
        dc = self.segment_sum(edge, "N_m+1", "decay across chunks")
        new = Sym(("B", "N_m+1", "h_m") + pn,
                  t.matmul(dc, t.view(states, contiguous=False),
                           _mm(t, "decay · states (across chunks)", ("B", "h_m"), ("N_m+1",),
                               ("N_m+1",), pn),
                           copy_labels=("", "states (copy)")), contiguous=False)
        # new_states[:, :-1]: the states entering each chunk (a view, copied by the einsum;
        # with one chunk, T ≤ C_m, the einsum reads it in place and autograd keeps all of
        # new_states: measured, tests/test_hybrid_saves.py)
        t.read_in_place(new, "states entering each chunk (one chunk: read in place)", "[N_m=1]",
                        "bmm (C state (chunk outputs))")
        entering = t.name(t.copy(t.view(new, chunk + pn)), "states (copy for C state)",
                          saved_if="[N_m>1]")
        c_states = Sym(CH + ("p_m",), t.matmul(t.view(Cm, contiguous=False), entering,
                                               _mm(t, "C state (chunk outputs)", chunk,
                                                   ("C_m",), ("n_s",), ("p_m",)),
                                               copy_labels=("C (copy for C state)", "")))
        c_states = t.name(c_states, "C state")
        eo = t.unary("aten.exp", cum, "exp(cum)", k, saves="output", out="exp(cum)")
        y_off = t.binary("aten.mul", c_states, t.view(eo, CH + ("1",)), "C state · exp(cum)", k)
        y = t.binary("aten.add", y_diag, y_off, "Y_diag + Y_off", k)
        y = t.copy(y)  # .contiguous()
        y = t.binary("aten.add", y, d_res, "+ D · x", k)
        # out[:, :T]: a view of the padded sum
        return t.view(t.name(y, "SSD output (padded)"), ROW + ("h_m", "p_m"))

    def gate(self, y: Sym, gate: Sym) -> Sym:
        """Falcon-H1 without its norm (mamba_rms_norm false): y · SiLU(z)."""
        t, k = self.t, GATED_NORM
        zs = t.unary("aten.sigmoid", gate, "sigmoid(z)", k, saves="output", out="sigmoid(z)")
        silu = t.name(t.binary("aten.mul", gate, zs, "SiLU(z)", k), "SiLU(z)")
        out = t.binary("aten.mul", t.view(y, ROW + ("h_m", "p_m")), silu, "y · SiLU(z)", k)
        return t.name(out, "y · SiLU(z) (out_proj input)")

    def gated_norm(self, y: Sym, gate: Sym, hf: bool = False) -> Sym:
        """GroupedGatedRMSNorm: y·SiLU(z), rsqrt of each group's mean square, × w (hf:
        NemotronHRMSNormGated, F.silu(gate.to(torch.float32)), one op saving its input)."""
        t, k = self.t, GATED_NORM
        g = ROW + ("G_m", "p_g")
        with t.scope("norm"):
            if hf:
                g32 = t.cast(gate, FP32, "z (fp32 copy)")
                silu = t.unary("aten.silu", g32, "SiLU(z)", k, saves="input", out="SiLU(z)")
            else:
                zs = t.unary("aten.sigmoid", gate, "sigmoid(z)", k, saves="output",
                             out="sigmoid(z)")
                silu = t.name(t.binary("aten.mul", gate, zs, "SiLU(z)", k), "SiLU(z)")
            h = t.name(t.binary("aten.mul", y, silu, "y · SiLU(z)", k), "y · SiLU(z)")
            hg = t.view(h, g)
            sq = t.unary("aten.pow", hg, "x²", k, saves="input")
            ms = t.reduce("aten.mean", sq, ("p_g",), "mean over a group", k)
            e = t.binary("aten.add", ms, None, "+ eps", k)
            inv = t.unary("aten.rsqrt", e, "rsqrt", k, saves="output", out="norm: rsqrt")
            n = t.name(t.binary("aten.mul", hg, t.view(inv, ROW + ("G_m", "1")), "x · rsqrt", k),
                       "norm: x · rsqrt")
            out = t.binary("aten.mul", t.view(n, ROW + ("h_m", "p_m")), self.norm_weight,
                           "· weight", k)
        return t.name(out, "gated norm output (out_proj input)")
