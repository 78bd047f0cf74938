"""The one builder: walks a ModelConfig top-down into the ledger, mirroring model/.

Each class below mirrors the model/ class of the same name: its constructor declares the
parameters and buffers in the order model/ registers them (so the ledger's parameter
names are the state-dict keys, in order), and calling it runs the forward pass's ops, in
the order model/ runs them, on accounting.trace's symbolic tensors. Every op emits its
facts as it runs (FLOPs, saved tensors, KV cache, module path); ledger.py only collects.
Where the spec switches a feature, both this file and model/ branch on the same field.
"""
from __future__ import annotations

from accounting import records as R
from accounting.config import NORMS, ModelConfig
from accounting.trace import LOSS, Sym, Trace

# Non-matmul components, in the order the tables list them.
QK_NORM = "QK-norm"
POSITION_ADD = "position add"
ROPE = "RoPE"
ATTN_SCALE = "scale by 1/√d_k"
CAUSAL_MASK = "causal mask"
SOFTMAX = "softmax"
BIAS = "bias adds"
RESIDUAL = "residual adds"
ROUTER = "MoE routing"
ACTIVATION_COMPONENT = {"swiglu": "SiLU and gating", "geglu": "GELU (tanh) and gating",
                        "gelu": "GELU (erf)", "gelu_tanh": "GELU (tanh)"}
ELEMENTWISE_ORDER = (*NORMS.values(), QK_NORM, POSITION_ADD, ROPE, ATTN_SCALE, CAUSAL_MASK,
                     SOFTMAX, *dict.fromkeys(ACTIVATION_COMPONENT.values()), ROUTER, BIAS, RESIDUAL)
NORM_PARAMS = {"rmsnorm": "RMSNorm gains", "layernorm": "LayerNorm weights and biases"}

ROW = ("B", "T", "d_model")


class Arch:
    """The symbols the spec's sizes are written in, shared by every module below."""

    def __init__(self, c: ModelConfig, fold: bool = True):
        self.c = c
        # h·d_k is written d_model (fold=False keeps the heads dimension visible: tensor
        # parallelism splits exactly the tensors that have one)
        self.fold = fold and c.num_heads * c.d_k == c.d_model
        self.gqa = c.kv_heads != c.num_heads

    def width(self, kv: bool = False) -> tuple[str, ...]:
        """The Q (or K/V) projection's output width."""
        if kv and self.gqa:
            return ("h_kv", "d_k")
        return ("d_model",) if self.fold else ("h", "d_k")

    def heads(self, kv: bool = False) -> tuple[str, ...]:
        """A per-head tensor: (B, heads, T, d_k)."""
        return ("B", "h_kv" if kv and self.gqa else "h", "T", "d_k")


# ---- layers (model/layers.py) ---------------------------------------------------------------

class Linear:
    """y = einsum(x, W, '... d_in, d_out d_in -> ... d_out') (+ b)."""

    def __init__(self, t: Trace, name: str, d_in, d_out, component: str, record: str,
                 bias: bool = False, weight: Sym | None = None):
        self.t, self.name, self.d_in, self.d_out = t, name, d_in, d_out
        self.component, self.record = component, record
        with t.scope(name):
            self.weight = (t.param("weight", d_out + d_in, component) if weight is None
                           else t.alias("weight", weight))
            self.bias = t.param("bias", d_out, component) if bias else None

    def __call__(self, x: Sym, label: str, course: str = "", reads_cache: bool = False) -> Sym:
        t = self.t
        assert x.contiguous and x.shape[-len(self.d_in):] == self.d_in, (self.name, x.shape)
        rows = x.shape[:-len(self.d_in)]
        with t.scope(self.name):
            dtype = t.matmul(x, self.weight, R.Matmul(self.record, self.component, t.module,
                                                      t.repeat, R.FORWARD, (), rows, self.d_in,
                                                      self.d_out, grads=("dX", "dW"),
                                                      reads_cache=reads_cache))
            y = Sym(rows + self.d_out, dtype)
            if self.bias is not None:
                y = t.binary("aten.add", y, self.bias, "+ bias", BIAS)
        return t.name(y, label, course)


class Norm:
    """RMSNorm (x / sqrt(mean(x²) + eps) · g) or LayerNorm ((x − mean) / sqrt(var + eps) · g
    + b) over the trailing `width` symbols, in float32 (a no-op cast for fp32)."""

    def __init__(self, t: Trace, name: str, kind: str, width: tuple[str, ...], component: str,
                 param_component: str):
        self.t, self.name, self.kind, self.width = t, name, kind, width
        self.component = component
        with t.scope(name):
            self.weight = t.param("weight", width, param_component)
            self.bias = t.param("bias", width, param_component) if kind == "layernorm" else None

    def __call__(self, x: Sym, out_label: str, course: str = "") -> Sym:
        t, w, k = self.t, self.width, self.component
        over = "·".join(w)
        m = f"{t.module}.{self.name}" if t.module else self.name
        in_dtype = x.dtype
        with t.scope(self.name):
            x = t.cast(x, R.FP32, f"{m} input (fp32 copy)")  # x.to(torch.float32)
            if self.kind == "rmsnorm":
                sq = t.unary("aten.pow", x, "x²", k, saves="input")
                ms = t.reduce("aten.mean", sq, w, f"mean over {over}", k)
                e = t.binary("aten.add", ms, None, "+ eps", k)
                rms = t.unary("aten.sqrt", e, "sqrt", k, saves="output", out=f"{m} rms")
                normed = t.binary("aten.div", x, rms, "x / rms", k, out=f"{m} x / rms")
                y = t.binary("aten.mul", normed, self.weight, "· gain", k)
            else:
                mean = t.reduce("aten.mean", x, w, f"mean over {over}", k)
                xc = t.binary("aten.sub", x, mean, "x − mean", k, out=f"{m} x − mean")
                sq = t.unary("aten.pow", xc, "(x − mean)²", k, saves="input")
                var = t.reduce("aten.mean", sq, w, f"variance: mean of squares over {over}", k)
                e = t.binary("aten.add", var, None, "+ eps", k)
                std = t.unary("aten.sqrt", e, "sqrt", k, saves="output", out=f"{m} std")
                normed = t.binary("aten.div", xc, std, "(x − mean) / std", k,
                                  out=f"{m} normalized")
                y = t.binary("aten.mul", normed, self.weight, "· weight", k)
                y = t.binary("aten.add", y, self.bias, "+ bias", k)
            y = t.cast(y, in_dtype)  # result.to(in_dtype)
        return t.name(y, out_label, course)


class RoPE:
    """model.RotaryPositionalEmbedding.rotate: cos/sin tables (buffers) gathered at the
    positions; per pair (x_even, x_odd): 4 multiplies, a subtract and an add."""

    def __init__(self, t: Trace, dim: str = "d_k"):
        self.t, self.half = t, f"{dim}/2"
        with t.scope("rope"):
            self.cos = t.buffer("cos", ("T_max", self.half), 4)  # float32, persistent=False
            self.sin = t.buffer("sin", ("T_max", self.half), 4)

    def rotate(self, x: Sym, positions: Sym, out_label: str) -> Sym:
        # Called as rope.rotate from the attention's forward: the ops run in `attn`.
        t = self.t
        half = ("T", self.half)
        label = "RoPE cos and sin at the positions"
        # self.cos[positions].to(x.dtype): a gather (float32), then a cast under autocast
        cos = t.cast(t.name(t.lookup(self.cos, positions, half), label), x.dtype, label)
        sin = t.cast(t.name(t.lookup(self.sin, positions, half), label), x.dtype, label)
        pairs = x.shape[:-1] + (self.half,)
        x_even, x_odd = t.view(x, pairs, False), t.view(x, pairs, False)
        label = "x_even·cos, x_odd·sin, x_even·sin, x_odd·cos"
        a = t.binary("aten.mul", x_even, cos, label, ROPE)
        b = t.binary("aten.mul", x_odd, sin, label, ROPE)
        even = t.binary("aten.sub", a, b, "x_even·cos − x_odd·sin", ROPE)
        c = t.binary("aten.mul", x_even, sin, label, ROPE)
        d = t.binary("aten.mul", x_odd, cos, label, ROPE)
        odd = t.binary("aten.add", c, d, "x_even·sin + x_odd·cos", ROPE)
        out = t.copy(even, x.shape)  # torch.stack, then a view back to (... d_k)
        out.dtype = even.dtype
        t._reads("stack", even, odd)
        return t.name(out, out_label)


def activation(t: Trace, kind: str, x: Sym, component: str, course: str) -> Sym:
    """silu, gelu_tanh or gelu (model/layers.py), op by op."""
    if kind == "silu":  # x * sigmoid(x)
        s = t.unary("aten.sigmoid", x, "sigmoid(W1·x)", component, saves="output",
                    out="sigmoid(W1 output)")
        return t.binary("aten.mul", x, s, "SiLU: W1·x · sigmoid", component, out="SiLU output",
                        course=course)
    half = t.binary("aten.mul", x, None, "0.5·x", component, out="0.5·x")
    if kind == "gelu_tanh":  # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        cube = t.unary("aten.pow", x, "x³", component, saves="input")
        inner = t.binary("aten.mul", cube, None, "0.044715·x³", component)
        inner = t.binary("aten.add", x, inner, "x + 0.044715·x³", component)
        inner = t.binary("aten.mul", inner, None, "√(2/π)·(x + 0.044715·x³)", component)
        th = t.unary("aten.tanh", inner, "tanh", component, saves="output", out="tanh(…)")
        one = t.binary("aten.add", th, None, "1 + tanh", component, out="1 + tanh(…)")
    else:  # exact: 0.5·x·(1 + erf(x/√2))
        scaled = t.binary("aten.div", x, None, "x / √2", component, out="x / √2")
        e = t.unary("aten.erf", scaled, "erf", component, saves="input")
        one = t.binary("aten.add", e, None, "1 + erf", component, out="1 + erf(x / √2)")
    return t.binary("aten.mul", half, one, "0.5·x · (1 + …)", component, out="GELU output",
                    course=course)


class FeedForward:
    """GatedMLP/SwiGLU (W2(act(W1 x) · W3 x)) or MLP (W2 act(W1 x)); model.feed_forward."""

    def __init__(self, t: Trace, c: ModelConfig):
        self.t, self.kind = t, c.mlp_kind
        prefix = {"swiglu": "SwiGLU", "geglu": "GeGLU"}.get(c.mlp, "MLP")
        f, d = ("d_ff",), ("d_model",)
        with t.scope("ffn"):
            self.w1 = Linear(t, "w1", d, f, R.FFN, f"{prefix} W1", c.mlp_bias)
            self.w2 = Linear(t, "w2", f, d, R.FFN, f"{prefix} W2", c.mlp_bias)
            self.w3 = Linear(t, "w3", d, f, R.FFN, f"{prefix} W3", c.mlp_bias) if self.kind.gated else None
        self.component = ACTIVATION_COMPONENT[c.mlp]

    def __call__(self, x: Sym, out_course: str) -> Sym:
        t = self.t
        act_course = "SiLU" if self.kind.activation == "silu" else "GELU"
        with t.scope("ffn"):
            a = self.w1(x, "W1 output", "W1")
            h = activation(t, self.kind.activation, a, self.component, act_course)
            if self.w3 is not None:
                b = self.w3(x, "W3 output", "W3 (SwiGLU)" if self.kind.activation == "silu" else "W3")
                act = "SiLU(W1·x)" if self.kind.activation == "silu" else "GELU(W1·x)"
                h = t.binary("aten.mul", h, b, f"gate: {act} · W3·x", self.component,
                             out="gated product (W2 input)")
            return self.w2(h, "W2 output", out_course)


# ---- mixture of experts (model/moe.py) -------------------------------------------------------

class MoE:
    """Router (a linear map to E scores; softmax, or a sigmoid with DeepSeek's bias and
    group-limited choice), top-k, the routed token slots gathered, run through E stacked
    gated experts, weighted and added back; shared experts beside. Dropless: B·T·k slots,
    whatever the routing (on meta the model deals them in turn); with a capacity factor,
    E·C slots (C = ⌈c·B·T·k/E⌉), of which B·T·k at most are useful."""

    def __init__(self, t: Trace, c: ModelConfig):
        self.t, self.c, self.kind = t, c, c.mlp_kind
        d, f, E = ("d_model",), ("d_e",), ("E",)
        self.component = ACTIVATION_COMPONENT[c.mlp]
        with t.scope("ffn"):
            # a module's own buffers come before its children's keys in the state dict
            self.bias = t.buffer("router_bias", E, 4, persistent=True) if c.router_bias else None
            self.router = Linear(t, "router", d, E, R.FFN, "router")
            with t.scope("experts"):
                self.w1 = t.param("w1", E + f + d, R.FFN)
                self.w2 = t.param("w2", E + d + f, R.FFN)
                self.w3 = t.param("w3", E + f + d, R.FFN)
            self.shared = None
            if c.num_shared_experts:
                sf = ("d_s",)
                with t.scope("shared"):
                    self.shared = (Linear(t, "w1", d, sf, R.FFN, "shared expert W1"),
                                   Linear(t, "w2", sf, d, R.FFN, "shared expert W2"),
                                   Linear(t, "w3", d, sf, R.FFN, "shared expert W3"))

    def __call__(self, x: Sym, out_course: str) -> Sym:
        t, c = self.t, self.c
        tokens, comp = ("B", "T"), ROUTER
        slots = tokens + ("k",)
        with t.scope("ffn"):
            weights = self.route(x)
            # the slots (token-major), ordered by expert: int ops, no FLOPs
            order = t.name(t.fresh(slots, R.INT64), "slot order (by expert)")
            token = t.name(t.fresh(slots, R.INT64), "token of each slot")
            slot_w = t.name(t.index(weights, order, slots, "weights in slot order"), "slot weights")
            routed = t.name(t.index(x, token, slots + ("d_model",), "the slots' tokens"),
                            "routed tokens")
            if c.moe_capacity_factor is None:  # dropless
                out = self._experts(routed, slots)
            else:  # E·C rows (a slot beyond C goes to a trash row), then back to the slots
                dest = t.name(t.fresh(slots, R.INT64), "dispatch row of each slot")
                rows = t.name(t.index_copy(("E·C+1", "d_model"), dest, routed, "dispatch"),
                              "dispatched rows (E·C + a trash row)")
                ran = self._experts(t.view(rows, ("E", "C", "d_model")), ("E", "C"))
                padded = t.cat((ran,), ("E·C+1", "d_model"))
                out = t.name(t.index(padded, dest, slots + ("d_model",), "back to the slots"),
                             "expert outputs, back in slot order")
            out = t.binary("aten.mul", out, slot_w, "× router weight", comp,
                           out="weighted expert outputs")
            y = t.index_add(tokens + ("d_model",), token, out, "add back to the tokens", comp)
            if self.shared is not None:
                w1, w2, w3 = self.shared
                with t.scope("shared"):
                    a = w1(x, "shared W1 output")
                    g = activation(t, self.kind.activation, a, self.component, "")
                    b = w3(x, "shared W3 output")
                    g = t.binary("aten.mul", g, b, "shared gate", self.component,
                                 out="shared gated product")
                    sh = w2(g, "shared W2 output")
                y = t.binary("aten.add", y, sh, "routed + shared", comp)
        return t.name(y, "W2 output", out_course)

    def route(self, x: Sym) -> Sym:
        """MoE.route: the router's scores, the chosen experts and their weights (B, T, k)."""
        t, c, comp = self.t, self.c, ROUTER
        tokens = ("B", "T")
        logits = self.router(x, "router scores")
        if c.router == "softmax":  # model/attention.py's softmax over the experts
            mx = t.reduce("aten.amax", logits, ("E",), "max over experts", comp, saves=True,
                          out="router max")
            shifted = t.binary("aten.sub", logits, mx, "x − max", comp)
            e = t.unary("aten.exp", shifted, "exp", comp, saves="output", out="router exp")
            total = t.reduce("aten.sum", e, ("E",), "sum over experts", comp, out="router sum")
            scores = t.binary("aten.div", e, total, "exp / sum", comp, out="router probabilities")
        else:
            scores = t.unary("aten.sigmoid", logits, "sigmoid", comp, saves="output",
                             out="router probabilities")
        # Only the chosen indices leave the choice: its ops are off the gradient path.
        choice = t.off_gradient_path(scores)
        if self.bias is not None:
            choice = t.binary("aten.add", choice, self.bias, "+ correction bias", comp)
        if c.router_groups > 1:  # keep the best topk_groups groups, by their two best scores
            grouped = t.view(choice, tokens + ("G", "E/G"))
            best2, _ = t.topk(grouped, ("E/G",), ("2",), "top-2 in each group", comp,
                              out="router top-2 per group", values=True)
            group_score = t.reduce("aten.sum", best2, ("2",), "group score", comp)
            t.topk(group_score, ("G",), ("k_G",), "top groups", comp, out="router top groups")
            keep = t.name(t.fresh(tokens + ("E",), R.BOOL), "router group mask")
            choice = t.masked_fill(choice, keep, "zero the other groups", comp)
        experts = t.topk(choice, ("E",), ("k",), "top-k experts", comp, out="chosen experts")
        weights = t.name(t.gather(scores, experts, "chosen scores"), "chosen experts' scores")
        if c.norm_topk_prob:
            total = t.reduce("aten.sum", weights, ("k",), "sum of the k weights", comp,
                             out="router weight sum")
            weights = t.binary("aten.div", weights, total, "renormalise", comp,
                               out="router weights")
        if c.routed_scaling_factor != 1.0:
            weights = t.binary("aten.mul", weights, None, "× routed_scaling_factor", comp)
        return t.name(weights, "router weights")

    def _experts(self, xs: Sym, rows: tuple[str, ...]) -> Sym:
        """Experts.forward on the routed rows: einsums with w1, w3 (activation, gate), w2.
        Under a capacity factor the E·C rows run; the B·T·k routed slots are the useful work."""
        t = self.t
        note = "routed token slots" if rows == ("B", "T", "k") else \
            "capacity: E·C rows run (padding included), B·T·k useful"
        with t.scope("experts"):
            def mm(x, w, name, n, p):
                useful = None if rows == ("B", "T", "k") else ("B", "T", "k") + n + p
                return t.matmul(x, w, R.Matmul(name, R.FFN, t.module, t.repeat, R.FORWARD, (), rows,
                                               n, p, grads=("dX", "dW"), useful=useful, note=note))
            dt = mm(xs, self.w1, "expert W1", ("d_model",), ("d_e",))
            a = t.name(Sym(rows + ("d_e",), dt), "expert W1 output", "W1")
            g = activation(t, self.kind.activation, a, self.component, "")
            dt = mm(xs, self.w3, "expert W3", ("d_model",), ("d_e",))
            b = t.name(Sym(rows + ("d_e",), dt), "expert W3 output", "W3")
            g = t.binary("aten.mul", g, b, "expert gate", self.component,
                         out="expert gated product")
            dt = mm(g, self.w2, "expert W2", ("d_e",), ("d_model",))
            return t.name(Sym(rows + ("d_model",), dt), "expert outputs", "W2")


# ---- attention (model/attention.py) --------------------------------------------------------

class Attention:
    def __init__(self, t: Trace, a: Arch, recompute: str = "none", local: bool = False):
        self.t, self.a, c = t, a, a.c
        self.recompute, self.local = recompute, local
        d = ("d_model",)
        with t.scope("attn"):
            self.q_proj = Linear(t, "q_proj", d, a.width(), R.ATTN_PROJ, "Q projection", c.qkv_bias)
            self.k_proj = Linear(t, "k_proj", d, a.width(kv=True), R.ATTN_PROJ, "K projection", c.qkv_bias)
            self.v_proj = Linear(t, "v_proj", d, a.width(kv=True), R.ATTN_PROJ, "V projection", c.qkv_bias)
            self.output_proj = Linear(t, "output_proj", a.width(), d, R.ATTN_PROJ,
                                      "output projection", c.out_bias)
            self.q_norm = self.k_norm = None
            if c.qk_norm != "none":
                full = c.qk_norm == "full"
                comp = NORM_PARAMS[c.norm]
                self.q_norm = Norm(t, "q_norm", c.norm, a.width() if full else ("d_k",), QK_NORM, comp)
                self.k_norm = Norm(t, "k_norm", c.norm, a.width(kv=True) if full else ("d_k",),
                                   QK_NORM, comp)
            self.rope = RoPE(t) if c.positions == "rope" else None

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        t, a, c = self.t, self.a, self.a.c
        with t.scope("attn"):
            q = self.q_proj(x, "Q projection output", "Q/K/V projections")
            k = self.k_proj(x, "K projection output", "Q/K/V projections")
            v = self.v_proj(x, "V projection output", "Q/K/V projections")
            if c.qk_norm == "full":
                q = self.q_norm(q, "Q after QK-norm")
                k = self.k_norm(k, "K after QK-norm")
            # "... seq (heads d_k) -> ... heads seq d_k": a permuted view
            q = t.view(q, a.heads(), contiguous=False)
            k = t.view(k, a.heads(kv=True), contiguous=False)
            v = t.view(v, a.heads(kv=True), contiguous=False)
            if c.qk_norm == "head":
                q = self.q_norm(q, "Q after QK-norm")
                k = self.k_norm(k, "K after QK-norm")
            if self.rope is not None:
                positions = t.fresh(("T",), R.INT64)  # torch.arange(seq)
                q = self.rope.rotate(q, positions, "Q after RoPE")
                k = self.rope.rotate(k, positions, "K after RoPE")
            t.cached("K", a.width(kv=True), window=self.local)
            t.cached("V", a.width(kv=True), window=self.local)
            out = self.run_core(q, k, v)
            return self.output_proj(self.merge(out, a.width()), out_label, out_course)

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
        mask = None
        if c.attention == "naive" or self.local:
            mask = t.name(t.fresh(("T", "T"), R.BOOL),
                          "sliding-window mask" if self.local else "causal mask")
        if c.attention == "sdpa":  # F.scaled_dot_product_attention(q, k, v, ...)
            if mask is not None:  # the kernel takes an additive mask: where(mask, 0, −inf)
                mask = t.name(t.where(mask, t.fresh(("T", "T"), R.FP32), "where(mask, 0, −inf)",
                                      CAUSAL_MASK), "sliding-window mask (additive)")
            inputs, core = (q, k, v) + ((mask,) if mask is not None else ()), \
                lambda: self.fused(q, k, v, mask)
        else:
            inputs, core = (q, k, v, mask), lambda: self.core(q, k, v, mask)
        if self.recompute == "selective":  # checkpoint(attention core, q, k, v, ...)
            with t.recomputed_region("attention core", inputs):
                return core()
        return core()

    def _grouping(self):
        if self.a.gqa:
            return ("B", "h_kv"), ("g", "T"), "grouped: K and V are read by g query heads each, not copied"
        return ("B", "h"), ("T",), ""

    def fused(self, q: Sym, k: Sym, v: Sym, mask: Sym | None = None) -> Sym:
        """One fused kernel (PyTorch's CPU flash attention here): the two matmuls, counted
        over the full T×T as torch's own sdpa formula does; its backward recomputes QKᵀ
        (5 matmuls where the naive backward has 4). Its softmax runs inside the kernel
        and is not a separate op (not in the non-matmul FLOPs)."""
        t = self.t
        batch, rows, note = self._grouping()
        note = "fused kernel" + (f"; {note}" if note else "")
        qk = R.Matmul("QKᵀ scores", R.ATTN_CORE, t.module, t.repeat, R.FORWARD, batch, rows,
                      ("d_k",), ("T",), causal=True, grads=("dQ", "dK"), note=note,
                      recompute_in_backward=True, window=self.local)
        if self.v_useful is not None:
            note += "; V zero-padded from d_v to d_k (useful: d_v)"
        pv = R.Matmul("scores·V", R.ATTN_CORE, t.module, t.repeat, R.FORWARD, batch, rows,
                      ("T",), (self.v_dim,), causal=True, grads=("d(scores)", "dV"), note=note,
                      window=self.local, useful=self.v_useful)
        return t.fused_attention(q, k, v, (qk, pv), self.out_heads(), ("B", "h", "T"), mask)

    def core(self, q: Sym, k: Sym, v: Sym, mask: Sym) -> Sym:
        """scaled_dot_product_attention: softmax(QKᵀ/√d_k, masked) V, with grouped K/V
        broadcast over each group of query heads (bmm batch B·h_kv, g·T query rows)."""
        t, a = self.t, self.a
        batch, rows, note = self._grouping()
        scores_shape = ("B", "h", "T", "T")
        dtype = t.matmul(q, k, R.Matmul("QKᵀ scores", R.ATTN_CORE, t.module, t.repeat, R.FORWARD,
                                        batch, rows, ("d_k",), ("T",), causal=True,
                                        grads=("dQ", "dK"), note=note, window=self.local),
                         copy_labels=("Q (heads layout)", "K (heads layout)"))
        scores = t.name(Sym(scores_shape, dtype), "QKᵀ scores", "QKᵀ")
        scaled = t.binary("aten.div", scores, None, "QKᵀ / √d_k", ATTN_SCALE)
        masked = t.where(mask, scaled, "where(mask, scores, −inf)", CAUSAL_MASK,
                         out="masked scores (softmax input)")
        mx = t.reduce("aten.amax", masked, ("T",), "max over keys", SOFTMAX, saves=True,
                      out="softmax row max")
        shifted = t.binary("aten.sub", masked, mx, "x − max", SOFTMAX)
        e = t.unary("aten.exp", shifted, "exp", SOFTMAX, saves="output", out="exp(scores − max)")
        s = t.reduce("aten.sum", e, ("T",), "sum over keys", SOFTMAX, out="softmax row sum")
        weights = t.binary("aten.div", e, s, "exp / sum", SOFTMAX, out="softmax output",
                           course="softmax")
        dtype = t.matmul(weights, v, R.Matmul("scores·V", R.ATTN_CORE, t.module, t.repeat,
                                              R.FORWARD, batch, rows, ("T",), (self.v_dim,),
                                              causal=True, grads=("d(scores)", "dV"), note=note,
                                              window=self.local),
                         copy_labels=("softmax output (copy)", "V (heads layout)"))
        return t.name(Sym(self.out_heads(), dtype), "attention-weighted values",
                      "attention-weighted values")

    v_dim = "d_k"  # the value's head dimension as the core sees it (latent attention: d_v)
    v_useful = None  # the factors of useful work when V is zero-padded (latent attention)

    def out_heads(self) -> tuple[str, ...]:
        return self.a.heads()


class LatentAttention(Attention):
    """Multi-head latent attention (model/latent_attention.py, DeepSeek-V2/V3): K and V
    from a normed latent of r_kv (kv_b_proj expands it per head), one RoPE key of d_rope
    shared by all heads, queries through a normed latent of r_q (or one projection);
    heads attend with d_k = d_nope + d_rope and values of d_v. The cache holds the latent
    and the RoPE key: d_kv_a = r_kv + d_rope per token."""

    def __init__(self, t: Trace, a: Arch, recompute: str = "none", local: bool = False):
        self.t, self.a, c = t, a, a.c
        self.recompute, self.local = recompute, local
        d, comp = ("d_model",), NORM_PARAMS[c.norm]
        q_width = ("h", "d_k")
        with t.scope("attn"):
            if c.q_lora_rank is None:
                self.q_proj = Linear(t, "q_proj", d, q_width, R.ATTN_PROJ, "Q projection", c.qkv_bias)
            else:
                self.q_proj = None
                self.q_a_proj = Linear(t, "q_a_proj", d, ("r_q",), R.ATTN_PROJ, "Q down-projection",
                                       c.qkv_bias)
                self.q_a_norm = Norm(t, "q_a_norm", c.norm, ("r_q",), NORMS[c.norm], comp)
                self.q_b_proj = Linear(t, "q_b_proj", ("r_q",), q_width, R.ATTN_PROJ,
                                       "Q up-projection")
            self.kv_a_proj = Linear(t, "kv_a_proj", d, ("d_kv_a",), R.ATTN_PROJ,
                                    "KV down-projection (latent and RoPE key)", c.qkv_bias)
            self.kv_a_norm = Norm(t, "kv_a_norm", c.norm, ("r_kv",), NORMS[c.norm], comp)
            self.kv_b_proj = Linear(t, "kv_b_proj", ("r_kv",), ("h", "d_kv_b"), R.ATTN_PROJ,
                                    "KV up-projection")
            self.output_proj = Linear(t, "output_proj", ("h", "d_v"), d, R.ATTN_PROJ,
                                      "output projection", c.out_bias)
            self.rope = RoPE(t, "d_rope") if c.positions == "rope" else None
        self.pad = c.attention == "sdpa" and c.v_head_dim != c.d_k
        self.v_dim = "d_k" if self.pad else "d_v"
        self.v_useful = ("B", "h", "P_W" if local else "P", "d_v") if self.pad else None

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        t = self.t
        heads = ("B", "h", "T")
        with t.scope("attn"):
            if self.q_proj is not None:
                q = self.q_proj(x, "Q projection output", "Q/K/V projections")
            else:
                q = self.q_a_proj(x, "Q latent", "Q/K/V projections")
                q = self.q_a_norm(q, "Q latent after its norm")
                q = self.q_b_proj(q, "Q projection output", "Q/K/V projections")
            q = t.view(q, heads + ("d_k",), contiguous=False)  # ... heads seq d
            q_nope = t.view(q, heads + ("d_nope",), contiguous=False)  # q[..., :nope]
            q_pe = t.view(q, heads + ("d_rope",), contiguous=False)  # q[..., nope:]
            latent = self.kv_a_proj(x, "KV latent and RoPE key", "Q/K/V projections")
            t.cached("latent c_KV and RoPE key", ("d_kv_a",), window=self.local)
            # last-dim slices of a (B, T, ·) tensor: views einsum and the norm read in place
            c_kv = t.view(latent, ("B", "T", "r_kv"))
            k_pe = t.view(latent, ("B", "T", "d_rope"))
            c_kv = self.kv_a_norm(c_kv, "KV latent after its norm")
            kv = self.kv_b_proj(c_kv, "KV up-projection output", "Q/K/V projections",
                                reads_cache=True)
            kv = t.view(kv, heads + ("d_kv_b",), contiguous=False)
            k_nope = t.view(kv, heads + ("d_nope",), contiguous=False)
            v = t.view(kv, heads + ("d_v",), contiguous=False)
            if self.rope is not None:
                positions = t.fresh(("T",), R.INT64)  # torch.arange(seq)
                q_pe = self.rope.rotate(q_pe, positions, "Q RoPE part after RoPE")
                k_pe = self.rope.rotate(k_pe, positions, "shared RoPE key after RoPE")
            q = t.name(t.cat((q_nope, q_pe), heads + ("d_k",)), "Q (no-RoPE and RoPE parts)")
            k = t.name(t.cat((k_nope, k_pe), heads + ("d_k",)),
                       "K (no-RoPE part and the shared RoPE key)")
            if self.pad:  # F.pad(v, (0, d_k − d_v)): the fused kernel needs one head size
                v = t.name(t.copy(v, heads + ("d_k",)), "V zero-padded to d_k")
            out = self.run_core(q, k, v)
            if self.pad:
                out = t.view(out, heads + ("d_v",), contiguous=False)  # out[..., :d_v]
                merged = t.name(t.copy(out, ("B", "T", "h", "d_v")),
                                "attention-weighted values, heads merged")
            else:
                merged = self.merge(out, ("h", "d_v"))
            return self.output_proj(merged, out_label, out_course)

    def out_heads(self) -> tuple[str, ...]:
        return ("B", "h", "T", self.v_dim)


# ---- blocks and the LM (model/transformer.py) ------------------------------------------------

class Block:
    def __init__(self, t: Trace, a: Arch, recompute: str = "none", kind=None):
        self.t, self.c, self.recompute, self.kind = t, a.c, recompute, kind
        comp, kind = NORM_PARAMS[a.c.norm], a.c.norm
        self.ln1 = Norm(t, "ln1", kind, ("d_model",), NORMS[kind], comp)
        local = self.kind is not None and self.kind.local
        self.attn = (LatentAttention if a.c.mla else Attention)(t, a, recompute, local)
        self.ln2 = Norm(t, "ln2", kind, ("d_model",), NORMS[kind], comp)
        self.ffn = MoE(t, a.c) if self.kind is not None and self.kind.moe else FeedForward(t, a.c)

    def __call__(self) -> None:
        t, pre = self.t, self.c.norm_placement == "pre"
        x = t.name(t.fresh(ROW, grad=True), "ln1 input" if pre else "block input",
                   f"{NORMS[self.c.norm]} inputs" if pre else "", block_input=True)
        if self.recompute == "full":  # checkpoint(block, x): keeps x, runs it again
            with t.recomputed_region("block", (x,)):
                self.run(x)
        else:
            self.run(x)

    def run(self, x: Sym) -> None:
        t, norm_course = self.t, f"{NORMS[self.c.norm]} inputs"
        if self.c.norm_placement == "pre":
            h = self.ln1(x, "ln1 output")
            y = t.binary("aten.add", x, self.attn(h, "output projection output", "output projection"),
                         "x + attn, y + ffn", RESIDUAL)
            y = t.name(y, "ln2 input", norm_course)
            h = self.ln2(y, "ln2 output")
            t.binary("aten.add", y, self.ffn(h, "W2"), "x + attn, y + ffn", RESIDUAL)
        else:  # OLMo-2: y = x + ln1(attn(x)); z = y + ln2(ffn(y))
            o = self.attn(x, "output projection output", "output projection")
            y = t.binary("aten.add", x, self.ln1(o, "ln1 output"), "x + ln1(attn), y + ln2(ffn)",
                         RESIDUAL)
            y = t.name(y, "residual after attention (ffn input)")
            f = self.ffn(y, "W2")
            t.binary("aten.add", y, self.ln2(f, "ln2 output"), "x + ln1(attn), y + ln2(ffn)", RESIDUAL)


def _symbol(kind, kinds) -> str:
    """"L" when every block is alike, else L_ and what sets this kind apart."""
    if len(kinds) == 1:
        return "L"
    parts = []
    if len({k.local for k in kinds}) > 1:
        parts.append("local" if kind.local else "global")
    if len({k.moe for k in kinds}) > 1:
        parts.append("moe" if kind.moe else "dense")
    return "L_" + "_".join(parts)


def walk(c: ModelConfig, autocast: str | None = None, recompute: str = "none",
         fold: bool = True) -> Trace:
    """Build (declare) the model, then run one training step's forward and loss: in float32,
    or under torch.autocast(autocast, dtype=torch.bfloat16); with activation recomputation
    "none", "full" (checkpoint each block) or "selective" (checkpoint the attention core);
    fold=False writes widths h·d_k even where that is d_model."""
    t, a = Trace(autocast), Arch(c, fold)
    # __init__, in model/transformer.py's registration order
    with t.scope("token_embeddings"):
        tok = t.param("weight", ("V", "d_model"), R.EMBEDDING, lookup=True)
    pos = None
    if c.positions == "learned":
        with t.scope("position_embeddings"):
            pos = t.param("weight", ("T_pos", "d_model"), R.POSITION_EMBEDDING, lookup=True)
    # Blocks of one kind (global/local attention, dense/MoE MLP) are alike: each kind is
    # walked once, its records repeated over its blocks (symbol "L" when all are alike).
    kinds = list(dict.fromkeys(c.layer_kinds))
    t.groups = tuple((_symbol(kind, kinds),
                      tuple(i for i, k in enumerate(c.layer_kinds) if k == kind)) for kind in kinds)
    blocks = []
    for kind, (symbol, _) in zip(kinds, t.groups):
        with t.block(symbol):
            blocks.append(Block(t, a, recompute, kind))
    comp = NORM_PARAMS[c.norm]
    ln_final = Norm(t, "ln_final", c.norm, ("d_model",), NORMS[c.norm], comp)
    lm_head = Linear(t, "lm_head", ("d_model",), ("V",), R.LM_HEAD, "LM head",
                     weight=tok if c.tie_embeddings else None)

    # forward
    ids = t.name(t.fresh(("B", "T"), R.INT64), "token ids")
    with t.scope("token_embeddings"):
        x = t.lookup(tok, ids, ROW)
    if pos is not None:
        with t.scope("position_embeddings"):
            positions = t.name(t.fresh(("T",), R.INT64), "position ids")
            p = t.lookup(pos, positions, ("T", "d_model"))
        t.binary("aten.add", x, p, "token + position embedding", POSITION_ADD)
    for block, (symbol, _) in zip(blocks, t.groups):
        with t.block(symbol):
            block()
    final_course = f"final {NORMS[c.norm]}"
    x = t.name(t.fresh(ROW, grad=True), "ln_final input", final_course)
    h = ln_final(x, "ln_final output")
    logits = lm_head(h, "logits (output embedding)", "output embedding")

    # F.cross_entropy(logits, targets) = nll_loss(log_softmax(logits)): outside the model
    with t.outside(LOSS):
        targets = t.name(t.fresh(("B", "T"), R.INT64), "targets")
        t.cross_entropy(logits, targets, "cross-entropy")
    t.check()
    return t
