"""Linear, Norm, RoPE, activations and the feed-forward network: model/layers.py's ops, as facts."""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.units import COMPLEX64, FP32
from accounting.architecture.config import ModelConfig
from accounting.ledger.trace import Sym, Trace
from accounting.ledger.builder.common import ROPE, BIAS, MUP, ACTIVATION_COMPONENT
from accounting.ledger.builder import hf_gemma4, hf_gpt2, lora, megatron


class Linear:
    """y = einsum(x, W, '... d_in, d_out d_in -> ... d_out') (+ b)."""

    def __init__(self, t: Trace, name: str, d_in, d_out, component: str, record: str,
                 bias: bool = False, weight: Sym | None = None):
        self.t, self.name, self.d_in, self.d_out = t, name, d_in, d_out
        self.component, self.record = component, record
        with t.scope(name):
            self.weight = (t.param("weight", d_out + d_in, component, dims=(len(d_out), len(d_in)))
                           if weight is None
                           else t.alias("weight", weight))
            self.bias = t.param("bias", d_out, component, dims=(len(d_out),)) if bias else None
            # QLoRA after prepare_model_for_kbit_training: an NF4 layer (every linear but the
            # LM head) stays bitsandbytes' Linear4bit, whose matmul sees its weight dequantized
            # to the compute dtype (a temporary; MatMul4Bit keeps the packed weight only) while
            # the rest of the base is fp32 (bitsandbytes 0.45 nn/modules.py Linear4bit.forward)
            self.nf4 = (t.adapters is not None and t.adapters.nf4_compute is not None
                        and t.module != "lm_head")
            if self.nf4:
                self.weight = Sym(self.weight.shape, t.adapters.nf4_compute, grad=False,
                                  param=self.weight.param)

    def __call__(self, x: Sym, label: str, course: str = "", reads_cache: bool = False) -> Sym:
        t = self.t
        assert x.contiguous and x.shape[-len(self.d_in):] == self.d_in, (self.name, x.shape)
        rows = x.shape[:-len(self.d_in)]
        with t.scope(self.name):
            dtype = t.matmul(x, self.weight, R.Matmul(self.record, self.component, t.module,
                                                      t.repeat, R.FORWARD, (), rows, self.d_in,
                                                      self.d_out, grads=("dX", "dW"),
                                                      reads_cache=reads_cache), linear=True)
            y = Sym(rows + self.d_out, dtype)
            if self.bias is not None:
                y = t.binary("aten.add", y, self.bias, "+ bias", BIAS)
                # nn.Linear (transformers', MPT's): one F.linear (addmm), autocast casts the
                if t.hf or t.foundry or self.nf4:  # bias too, so the output stays bf16
                    y.dtype = dtype  # (model/'s fp32 bias promotes it; Linear4bit casts it)
            if self.nf4 and x.dtype != dtype:  # Linear4bit's out.to(inp_dtype): a new tensor
                y = Sym(rows + self.d_out, x.dtype)
            if t.adapters is not None and t.adapters.targets(t.per_block, t.module):
                y = lora.apply(t, self, x, y)  # PEFT's LoRA on this layer
            y = t.name(y, label, course)
            t.mm_output(y)  # under a selective-checkpoint policy (torchtitan's)
        return y


class Norm:
    """RMSNorm (x / sqrt(mean(x²) + eps) · g) or LayerNorm ((x − mean) / sqrt(var + eps) · g
    + b; layernorm_nobias: no + b, Cohere's) over the trailing `width` symbols, in float32
    (a no-op cast for fp32). offset: Gemma's gain, x / rms · (1 + g): the add runs on the
    gain vector, once per call. weight_shape: a gain of another shape, broadcast over the
    input (Cohere's per-head QK-norm: (heads, d_k) over (B, T, heads, d_k))."""

    def __init__(self, t: Trace, name: str, kind: str, width: tuple[str, ...], component: str,
                 param_component: str, offset: bool = False,
                 weight_shape: tuple[str, ...] | None = None):
        self.t, self.name, self.kind, self.width, self.offset = t, name, kind, width, offset
        self.component = component
        shape = width if weight_shape is None else weight_shape
        with t.scope(name):
            # a gain over (h, d_k) is one dimension unless given per head (Cohere's 2-D gain)
            dims = (len(shape),) if weight_shape is None else ()
            self.weight = t.param("weight", shape, param_component, dims=dims)
            self.bias = (t.param("bias", shape, param_component, dims=dims)
                         if kind == "layernorm" else None)

    def __call__(self, x: Sym, out_label: str, course: str = "") -> Sym:
        # Transformer Engine's fused norm, or torch's fused rms_norm (builder/megatron.py)
        if self.t.megatron or (self.t.titan and self.kind == "rmsnorm"):
            return megatron.fused_norm(self.t, self, x, out_label, course)
        if self.t.foundry and self.kind != "rmsnorm":
            return megatron.low_precision_norm(self.t, self, x, out_label, course)
        if self.t.hf_gpt2 and self.kind == "layernorm":  # GPT-2's nn.LayerNorm
            return hf_gpt2.layer_norm(self.t, self, x, out_label, course)
        if self.t.hf_gemma4 and self.kind == "rmsnorm":  # Gemma4RMSNorm
            t = self.t
            m = f"{t.module}.{self.name}" if t.module else self.name
            with t.scope(self.name):
                return hf_gemma4.rms_norm(t, x, self.width, self.component, m, out_label,
                                          self.weight, course)
        return self.ops(x, out_label, course)

    def ops(self, x: Sym, out_label: str, course: str = "") -> Sym:
        t, w, k = self.t, self.width, self.component
        over = "·".join(w)
        m = f"{t.module}.{self.name}" if t.module else self.name
        in_dtype = x.dtype
        with t.scope(self.name):
            x = t.cast(x, R.FP32, f"{m} input (fp32 copy)")  # x.to(torch.float32)
            if self.kind == "layernorm_nobias" and t.hf:
                return self.cohere(x, in_dtype, m, out_label, course)
            # Qwen3NextRMSNorm is Gemma3RMSNorm's form: x.float(), · (1 + w.float()), type_as
            if self.kind == "rmsnorm" and (t.hf_gemma3 or t.hf_qwen_next) and self.offset:
                return self.gemma3(x, in_dtype, m, out_label, course)
            if self.kind == "rmsnorm" and t.hf:
                # transformers' LlamaRMSNorm (and Qwen2/3's, Mistral's): x·rsqrt(mean(x²) +
                # eps), then weight · x.to(input_dtype): the same three tensors saved as the
                # course's x / sqrt (x, the B×T rms, the normalized x), but the normalized x
                # is saved after its cast back (bf16 under bf16 parameters), and the product
                # with an fp32 weight is fp32 under autocast (type promotion)
                sq = t.unary("aten.pow", x, "x²", k, saves="input")
                ms = t.reduce("aten.mean", sq, w, f"mean over {over}", k)
                e = t.binary("aten.add", ms, None, "+ eps", k)
                r = t.unary("aten.rsqrt", e, "rsqrt", k, saves="output", out=f"{m} rms")
                normed = t.binary("aten.mul", x, r, "x · rsqrt", k, out=f"{m} x / rms")
                if t.hf_olmo2 or t.hf_oss or t.hf_nemotron:  # Olmo2RMSNorm, GptOssRMSNorm:
                    # (weight · x).to(input_dtype); NemotronHRMSNorm: weight.to(float32) · x
                    # (a saved fp32 copy of bf16 weights)
                    gain = t.cast(self.weight, FP32) if t.hf_nemotron else self.weight
                    y = t.cast(t.binary("aten.mul", normed, gain, "· gain", k), in_dtype)
                    return t.name(y, out_label, course)
                normed = t.cast(normed, in_dtype, f"{m} x / rms")
                y = t.binary("aten.mul", normed, self.weight, "· gain", k)
                return t.name(y, out_label, course)
            if self.kind == "rmsnorm":
                sq = t.unary("aten.pow", x, "x²", k, saves="input")
                ms = t.reduce("aten.mean", sq, w, f"mean over {over}", k)
                e = t.binary("aten.add", ms, None, "+ eps", k)
                rms = t.unary("aten.sqrt", e, "sqrt", k, saves="output", out=f"{m} rms")
                normed = t.binary("aten.div", x, rms, "x / rms", k, out=f"{m} x / rms")
                gain = self.weight
                if self.offset:  # (1.0 + self.weight): a new d-vector, saved by the multiply
                    gain = t.binary("aten.add", gain, None, "1 + gain", k, out=f"{m} 1 + gain")
                y = t.binary("aten.mul", normed, gain, "· gain", k)
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
                if self.bias is not None:  # layernorm_nobias has none
                    y = t.binary("aten.add", y, self.bias, "+ bias", k)
            y = t.cast(y, in_dtype)  # result.to(in_dtype)
        return t.name(y, out_label, course)


    def cohere(self, x: Sym, in_dtype: str, m: str, out_label: str, course: str) -> Sym:
        """transformers' CohereLayerNorm (models/cohere/modeling_cohere.py, 5.23), in float32:
        `(x - mean)` computed twice (once for the variance, once to normalize: two saved
        storages), rsqrt(variance + eps), then `self.weight.to(torch.float32) * x` (an fp32
        copy of bf16 weights, saved) and the cast back to the input's dtype."""
        t, w, k = self.t, self.width, self.component
        over = "·".join(w)
        mean = t.reduce("aten.mean", x, w, f"mean over {over}", k)
        xc = t.binary("aten.sub", x, mean, "x − mean", k, out=f"{m} x − mean")
        sq = t.unary("aten.pow", xc, "(x − mean)²", k, saves="input")
        var = t.reduce("aten.mean", sq, w, f"variance: mean of squares over {over}", k)
        e = t.binary("aten.add", var, None, "+ eps", k)
        r = t.unary("aten.rsqrt", e, "rsqrt", k, saves="output", out=f"{m} rsqrt")
        xc2 = t.binary("aten.sub", x, mean, "x − mean (again)", k, out=f"{m} x − mean (again)")
        normed = t.binary("aten.mul", xc2, r, "(x − mean) · rsqrt", k, out=f"{m} normalized")
        y = t.binary("aten.mul", normed, t.cast(self.weight, R.FP32), "· weight", k)
        return t.name(t.cast(y, in_dtype), out_label, course)

    def gemma3(self, x: Sym, in_dtype: str, m: str, out_label: str, course: str) -> Sym:
        """transformers' Gemma3RMSNorm (models/gemma3/modeling_gemma3.py, 5.23): x.float() ·
        rsqrt(mean(x²) + eps), then `output * (1.0 + self.weight.float())` in float32 and
        type_as(x) last: the product saves the fp32 normalized x and the fp32 (1 + w) vector
        (a new d-vector per call); x·rsqrt saves the fp32 x and the B×T rsqrt."""
        t, w, k = self.t, self.width, self.component
        sq = t.unary("aten.pow", x, "x²", k, saves="input")
        ms = t.reduce("aten.mean", sq, w, f"mean over {'·'.join(w)}", k)
        e = t.binary("aten.add", ms, None, "+ eps", k)
        r = t.unary("aten.rsqrt", e, "rsqrt", k, saves="output", out=f"{m} rms")
        normed = t.binary("aten.mul", x, r, "x · rsqrt", k, out=f"{m} x / rms")
        gain = t.cast(self.weight, R.FP32)  # weight.float(): a copy of bf16 parameters
        gain = t.binary("aten.add", gain, None, "1 + gain", k, out=f"{m} 1 + gain")
        y = t.binary("aten.mul", normed, gain, "· (1 + gain)", k)
        return t.name(t.cast(y, in_dtype), out_label, course)


def l2_norm(t: Trace, x: Sym, over: str, out_label: str, component: str) -> Sym:
    """model.layers.rms_normalize: x / sqrt(mean(x²) + eps) over the last dim, in float32,
    no gain (Llama 4's weightless QK-norm, transformers' Llama4TextL2Norm)."""
    in_dtype = x.dtype
    x = t.cast(x, R.FP32, f"{out_label} input (fp32 copy)")
    sq = t.unary("aten.pow", x, "x²", component, saves="input")
    ms = t.reduce("aten.mean", sq, (over,), f"mean over {over}", component)
    e = t.binary("aten.add", ms, None, "+ eps", component)
    rms = t.unary("aten.sqrt", e, "sqrt", component, saves="output", out=f"{out_label}: rms")
    y = t.binary("aten.div", x, rms, "x / rms", component)
    return t.name(t.cast(y, in_dtype), out_label)


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


class RotaryEmbedding:
    """transformers' LlamaRotaryEmbedding (models/llama/modeling_llama.py), one module for
    the model: two non-persistent float32 buffers of d_k/2 inverse frequencies (inv_freq,
    original_inv_freq), where model/ keeps cos/sin tables of T_max·d_k/2 in every block.
    Its forward computes cos and sin once per forward pass, (1, T, d_k) each in the hidden
    states' dtype (no grad), and every layer's apply_rotary_pos_emb multiplies by them: the
    products save the same two tensors in every layer (counted once)."""

    def __init__(self, t: Trace, dim: str = "d_k", prefix: str = "", halves: bool = False,
                 pairs: bool = False, complex_: bool = False, partial: bool = False,
                 batched: bool = False):
        # prefix: Gemma4TextRotaryEmbedding's buffers per layer kind (full_attention_inv_freq)
        # halves: gpt-oss's (GptOssRotaryEmbedding: emb = freqs, cos/sin d_k/2 wide, and
        # _apply_rotary_emb on the two halves of each head); pairs: DeepSeek-V3's
        # apply_rotary_pos_emb_interleave (cos/sin d wide, their first half read, the even
        # and odd dims rotated: the same four products and a cat)
        # complex_: DeepSeek-V2's (DeepseekV2RotaryEmbedding: freqs_cis = polar(1, freqs),
        # complex64 (T, dim/2), apply_rotary_emb: x.float() viewed as complex pairs, times it)
        self.t, self.dim, self.halves, self.pairs = t, dim, halves, pairs
        self.complex = complex_
        # partial: apply_rotary_pos_emb on q[..., :d_rot], cat with q[..., d_rot:] (a copy)
        self.partial = partial
        # batched: cos/sin per sequence, (B, T, dim): Qwen3.5's interleaved M-RoPE, whose
        # position_ids are expanded to (3, B, T) (Qwen3_5TextRotaryEmbedding.forward)
        self.batched = batched
        with t.scope("rotary_emb"):
            t.buffer(f"{prefix}inv_freq", (f"{dim}/2",), 4)
            t.buffer(f"{prefix}original_inv_freq", (f"{dim}/2",), 4)

    def tables(self, like: Sym) -> tuple[Sym, Sym]:
        t = self.t
        if self.complex:  # one complex64 tensor (cos + i·sin), the same for every layer
            with t.scope("rotary_emb"):
                f = t.name(t.fresh(("T", f"{self.dim}/2"), COMPLEX64),
                           "RoPE freqs_cis (complex64, once per pass)")
            return f, f
        # Olmo2RotaryEmbedding returns them in float32 (no cast to the hidden states' dtype)
        dtype = FP32 if t.hf_olmo2 else like.dtype
        width = f"{self.dim}/2" if self.halves else self.dim
        rows = ("B", "T") if self.batched else ("T",)
        with t.scope("rotary_emb"):
            cos = t.name(t.fresh(rows + (width,), dtype), "RoPE cos and sin (once per pass)")
            sin = t.name(t.fresh(rows + (width,), dtype), "RoPE cos and sin (once per pass)")
        return cos, sin

    def rotate(self, x: Sym, tables: tuple[Sym, Sym], out_label: str,
               half_split: bool = False) -> Sym:
        """q·cos + rotate_half(q)·sin; rotate_half = cat(−x2, x1), a new tensor.
        half_split: this rotation whatever the module's own (DeepseekV32Indexer's
        apply_rotary_pos_emb on the model's interleaved-RoPE tables)."""
        t, (cos, sin) = self.t, tables
        if self.partial:  # Qwen3-Next's: the rotated d_rot dims and the rest, concatenated
            lead = x.shape[:-1]
            rot = self.rotate_plain(t.view(x, lead + ("d_rot",), False), tables,
                                    f"{out_label} (rotary part)")
            rest = t.view(x, lead + ("d_pass",), contiguous=False)
            return t.name(t.cat((rot, rest), x.shape), out_label)
        if self.complex and not half_split:
            return self.rotate_complex(x, cos, out_label)
        if (self.halves or self.pairs) and not half_split:
            return self.rotate_halves(x, tables, out_label)
        return self.rotate_plain(x, tables, out_label)

    def rotate_plain(self, x: Sym, tables: tuple[Sym, Sym], out_label: str) -> Sym:
        """LlamaRotaryEmbedding's apply_rotary_pos_emb on x's last self.dim dims."""
        t, (cos, sin) = self.t, tables
        a = t.binary("aten.mul", x, cos, "x·cos, rotate_half(x)·sin", ROPE)
        half = t.unary("aten.neg", t.view(x, x.shape[:-1] + (f"{self.dim}/2",), False),
                       "−x2", ROPE)
        rot = t.cat((half, x), x.shape)
        b = t.binary("aten.mul", rot, sin, "x·cos, rotate_half(x)·sin", ROPE)
        y = t.binary("aten.add", a, b, "x·cos + rotate_half(x)·sin", ROPE)
        if t.hf_olmo2:  # OLMo-2's apply_rotary_pos_emb: q_embed.to(q_type)
            y = t.cast(y, x.dtype)
        return t.name(y, out_label)


    def rotate_complex(self, x: Sym, freqs: Sym, out_label: str) -> Sym:
        """DeepSeek-V2's apply_rotary_emb (modeling_deepseek_v2.py, 5.23): view_as_complex(
        x.float() in pairs) · freqs_cis, view_as_real, type_as(x): one complex product per
        pair (4 multiplies and 2 adds: the course's six), which saves freqs_cis."""
        t = self.t
        xf = t.cast(x, FP32)
        pairs = x.shape[:-1] + (f"{self.dim}/2",)
        y = t.binary("aten.mul", t.view(xf, pairs, contiguous=False), freqs,
                     "x·freqs_cis (complex: 4 multiplies, 2 adds)", ROPE)
        for _ in range(5):  # the complex product's other five real FLOPs per pair
            t._record("aten.mul", "x·freqs_cis (complex: 4 multiplies, 2 adds)", ROPE, pairs)
        # view_as_real(…).flatten(3): a view of the product, laid out as x is (TensorIterator)
        y = Sym(x.shape, FP32, y.grad, x.contiguous)
        return t.name(t.cast(y, x.dtype), out_label)

    def rotate_halves(self, x: Sym, tables: tuple[Sym, Sym], out_label: str) -> Sym:
        """gpt-oss's _apply_rotary_emb (modeling_gpt_oss.py, 5.23): x1, x2 = chunk(x, 2);
        cat(x1·cos − x2·sin, x2·cos + x1·sin): four products (each saves its cos or sin,
        the tables counted once), a subtract, an add, the cat a new tensor."""
        t, (cos, sin) = self.t, tables
        half = x.shape[:-1] + (f"{self.dim}/2",)
        x1, x2 = t.view(x, half, False), t.view(x, half, False)
        label = "x1·cos, x2·sin, x2·cos, x1·sin"
        first = t.binary("aten.sub", t.binary("aten.mul", x1, cos, label, ROPE),
                         t.binary("aten.mul", x2, sin, label, ROPE), "x1·cos − x2·sin", ROPE)
        second = t.binary("aten.add", t.binary("aten.mul", x2, cos, label, ROPE),
                          t.binary("aten.mul", x1, sin, label, ROPE), "x2·cos + x1·sin", ROPE)
        return t.name(t.cat((first, second), x.shape), out_label)


def xielu(t: Trace, x: Sym, params, component: str) -> Sym:
    """transformers' XIELUActivation._xielu_python (activations.py), op for op:
    αp = softplus(alpha_p), αn = β + softplus(alpha_n) (one element each), then
    where(x > 0, αp·x·x + β·x, (expm1(min(x, ε)) − x)·αn + β·x): 11 FLOPs an element (the
    comparison is a bool op, 0), each op saving what autograd's formulas keep (the products
    both operands that need a gradient, or the buffer β; min both; expm1 its output; where
    its condition)."""
    alpha_p, alpha_n, beta, eps = params
    ap = t.name(t.unary("aten.softplus", alpha_p, "softplus(alpha_p)", component,
                        saves="input"), "softplus(alpha_p)")
    an = t.name(t.binary("aten.add", t.unary("aten.softplus", alpha_n, "softplus(alpha_n)",
                                             component, saves="input"),
                         beta, "β + softplus(alpha_n)", component), "β + softplus(alpha_n)")
    mask = t.name(t.fresh(x.shape, R.BOOL), "x > 0 (xIELU's branch)")
    px = t.binary("aten.mul", x, ap, "αp·x", component, out="αp·x")
    pos = t.binary("aten.add", t.binary("aten.mul", px, x, "αp·x·x", component),
                   t.binary("aten.mul", x, beta, "β·x", component), "αp·x² + β·x", component)
    low = t.binary("aten.minimum", x, eps, "min(x, ε)", component, out="min(x, ε)")
    e = t.unary("aten.expm1", low, "expm1", component, saves="output", out="expm1(min(x, ε))")
    neg = t.binary("aten.sub", e, x, "expm1 − x", component, out="expm1(…) − x")
    neg = t.binary("aten.add", t.binary("aten.mul", neg, an, "· αn", component),
                   t.binary("aten.mul", x, beta, "β·x", component), "(…)·αn + β·x", component)
    return t.name(t.where(mask, pos, "where(x > 0, …)", component), "xIELU output")


def activation(t: Trace, kind: str, x: Sym, component: str, course: str) -> Sym:
    """silu, gelu_tanh or gelu (model/layers.py), op by op."""
    # MPT's nn.GELU(approximate='none'), GPT-2's "gelu" (transformers' GELUActivation:
    if kind == "gelu" and (t.foundry or t.hf_gpt2):  # F.gelu): one op, saves its input
        return t.unary("aten.gelu", x, "GELU", component, saves="input", out="GELU output",
                       course=course)
    if kind == "silu" and t.hf:  # transformers: nn.SiLU, one op (F.silu) that saves its input
        return t.unary("aten.silu", x, "SiLU", component, saves="input", out="SiLU output",
                       course=course)
    if kind == "silu":  # x * sigmoid(x)
        s = t.unary("aten.sigmoid", x, "sigmoid(W1·x)", component, saves="output",
                    out="sigmoid(W1 output)")
        return t.binary("aten.mul", x, s, "SiLU: W1·x · sigmoid", component, out="SiLU output",
                        course=course)
    if kind == "gelu_tanh" and t.hf and t.fused_gelu:  # transformers' GELUTanh (ACT2FN's
        # gelu_pytorch_tanh: Gemma's, a GPT-2-style config's): F.gelu(x, approximate="tanh"),
        # one op that saves its input; gelu_new (NewGELUActivation) runs the ops below
        return t.unary("aten.gelu", x, "GELU (tanh)", component, saves="input",
                       out="GELU output", course=course)
    if kind == "relu2":  # r = relu(x) (saves its output), r · r (saves r)
        r = t.unary("aten.relu", x, "relu(W1·x)", component, saves="output", out="relu(W1 output)")
        return t.binary("aten.mul", r, r, "relu²", component, out="relu² output", course=course)
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


def clamped_swiglu(t: Trace, gate: Sym, up: Sym, component: str, out: str) -> Sym:
    """gpt-oss's gate (model/layers.py clamped_swiglu, transformers' GptOssExperts._apply_gate):
    clamp(gate, max), clamp(up, ±limit), gate·α, sigmoid, gate·sigmoid, up + 1, the product:
    7 ops per element. clamp saves its input; mul saves the other operand."""
    g = t.unary("aten.clamp", gate, "clamp(gate, max=7)", component, saves="input",
                out=f"{out}: clamped gate")
    u = t.unary("aten.clamp", up, "clamp(up, ±7)", component, saves="input",
                out=f"{out}: clamped up")
    a = t.binary("aten.mul", g, None, "α·gate", component)
    s = t.unary("aten.sigmoid", a, "sigmoid(α·gate)", component, saves="output",
                out=f"{out}: sigmoid(α·gate)")
    glu = t.binary("aten.mul", g, s, "gate·sigmoid(α·gate)", component, out=f"{out}: glu")
    u1 = t.binary("aten.add", u, None, "up + 1", component, out=f"{out}: up + 1")
    return t.binary("aten.mul", u1, glu, "(up + 1)·glu", component, out=out)


class FeedForward:
    """GatedMLP/SwiGLU (W2(act(W1 x) · W3 x)) or MLP (W2 act(W1 x)); model.feed_forward."""

    def __init__(self, t: Trace, c: ModelConfig, width: str = "d_ff"):
        # width: "2d_ff" for Gemma 4's double-wide MLP on its KV-sharing layers
        self.t, self.kind = t, c.mlp_kind
        prefix = ("MLP" if not self.kind.gated else
                  "SwiGLU" if self.kind.activation == "silu" else "GeGLU")
        f, d = (width,), ("d_model",)
        with t.scope("ffn"):
            self.w1 = Linear(t, "w1", d, f, R.FFN, f"{prefix} W1", c.mlp_bias)
            self.w2 = Linear(t, "w2", f, d, R.FFN, f"{prefix} W2", c.mlp_bias)
            self.w3 = Linear(t, "w3", d, f, R.FFN, f"{prefix} W3", c.mlp_bias) if self.kind.gated else None
            self.xielu = None
            if self.kind.activation == "xielu":  # XIELUActivation: after up/down_proj
                with t.scope("act_fn"):
                    self.xielu = (t.param("alpha_p", ("1",), R.FFN),
                                  t.param("alpha_n", ("1",), R.FFN),
                                  t.name(t.buffer("beta", (), 4, persistent=True), "xIELU beta"),
                                  t.name(t.buffer("eps", (), 4, persistent=True), "xIELU eps"))
        self.component = ACTIVATION_COMPONENT[c.mlp]
        self.mup = c.mup_multipliers

    def __call__(self, x: Sym, out_course: str) -> Sym:
        t = self.t
        act_course = "SiLU" if self.kind.activation == "silu" else "GELU"
        with t.scope("ffn"):
            a = self.w1(x, "W1 output", "W1")
            if self.mup:  # Falcon-H1: act(gate_proj(x) · gate_multiplier)
                a = t.name(t.binary("aten.mul", a, None, "W1·x · gate_multiplier", MUP),
                           "W1 output · gate_multiplier")
            if self.kind.activation == "silu_clamped":  # reads both halves (gpt-oss)
                b = self.w3(x, "W3 output", "W3")
                return self.w2(clamped_swiglu(t, a, b, self.component, "gated product (W2 input)"),
                               "W2 output", out_course)
            b = (self.w3(x, "W3 output", "W3 (SwiGLU)" if self.kind.activation == "silu" else "W3")
                 if self.w3 is not None and t.megatron else None)

            def run() -> Sym:
                if self.xielu is not None:
                    with t.scope("act_fn"):
                        return xielu(t, a, self.xielu, self.component)
                h = activation(t, self.kind.activation, a, self.component, act_course)
                if self.w3 is None:
                    return h
                w3 = b if b is not None else self.w3(
                    x, "W3 output", "W3 (SwiGLU)" if self.kind.activation == "silu" else "W3")
                act = "SiLU(W1·x)" if self.kind.activation == "silu" else "GELU(W1·x)"
                return t.binary("aten.mul", h, w3, f"gate: {act} · W3·x", self.component,
                                out="gated product (W2 input)")
            if t.megatron:  # Megatron's fused bias-GeLU/SwiGLU (builder/megatron.py)
                h = megatron.fused_activation(t, run, a, b, "activation output (W2 input)")
            else:
                h = run()
            y = self.w2(h, "W2 output", out_course)
            # Falcon-H1: down_proj(y) · down_multiplier
            return t.binary("aten.mul", y, None, "W2·y · down_multiplier", MUP) if self.mup else y
