"""Building blocks of the Transformer LM (CS336 assignment 1, sections 3.4-3.5), and the
variants the architecture spec (accounting/architecture/config.py) can switch on: biases, LayerNorm,
GELU activations, a plain two-matrix MLP and gated MLPs other than SwiGLU.

Shape names used throughout: batch seq d_model d_ff vocab heads d_k.
Comments like `# x: (... d_in)` are jaxtyping-style shape annotations. The exact op
sequence of each forward() is what the analytic ledger (accounting/ledger/builder/) assumes.
"""

import math
import numbers

import torch
from einops import einsum, rearrange
from torch import nn

from accounting.architecture.config import MLPS
from accounting.architecture.config import default_d_ff as _spec_default_d_ff


def check_positive_int(name: str, value) -> None:
    """Raise a ValueError unless `value` is a positive integer (bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_positive_number(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


class Linear(nn.Module):
    """y = W x (+ b); W is stored as (d_out, d_in) for row-major memory. The course's
    Linear has no bias; bias=True adds one (GPT-2, Qwen2's Q/K/V), initialised to 0."""

    def __init__(self, in_features, out_features, device=None, dtype=None, bias=False):
        super().__init__()
        check_positive_int("in_features", in_features)
        check_positive_int("out_features", out_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        # N(0, 2/(d_in + d_out)) truncated at +-3 sigma (section 3.4.1)
        std = math.sqrt(2.0 / (in_features + out_features))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (... d_in) -> (... d_out)
        y = einsum(x, self.weight, "... d_in, d_out d_in -> ... d_out")
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}"
                + (", bias=True" if self.bias is not None else ""))


class Embedding(nn.Module):
    """Lookup table (vocab, d_model); d_model last so a row is one token's vector."""

    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__()
        check_positive_int("num_embeddings", num_embeddings)
        check_positive_int("embedding_dim", embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=1.0, a=-3.0, b=3.0)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        # token_ids: (...) int -> (... d_model)
        return self.weight[token_ids]

    def extra_repr(self) -> str:
        return f"num_embeddings={self.num_embeddings}, embedding_dim={self.embedding_dim}"


def check_norm_args(d_model, eps) -> None:
    check_positive_int("d_model", d_model)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or eps < 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")


def norm_shape(d_model, heads) -> tuple:
    """A norm's weight shape: (d_model,), or (heads, d_model) for a weight per head over
    (... heads d_model) inputs, normalised over the last dim only (Cohere's use_qk_norm:
    CohereLayerNorm(hidden_size=(num_heads, head_dim)), modeling_cohere.py)."""
    if heads is None:
        return (d_model,)
    check_positive_int("heads", heads)
    return (heads, d_model)


class RMSNorm(nn.Module):
    """a_i / RMS(a) * g_i, computed in float32 so squaring cannot overflow (eq. 4).

    offset=True is Gemma's gain (transformers' Gemma2RMSNorm/Gemma3RMSNorm): the weight
    starts at 0 and is applied as (1 + w), the add run once per call on the d-vector."""

    def __init__(self, d_model, eps=1e-5, device=None, dtype=None, offset=False, heads=None):
        super().__init__()
        check_norm_args(d_model, eps)
        self.d_model, self.eps, self.offset, self.heads = d_model, eps, offset, heads
        init = torch.zeros if offset else torch.ones
        # the gain g: (heads, d_model) when each head has its own (see norm_shape)
        self.weight = nn.Parameter(init(norm_shape(d_model, heads), device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (... d_model) -> (... d_model), same dtype as x.
        # This exact op sequence is what the analytic FLOP counter assumes.
        in_dtype = x.dtype
        x = x.to(torch.float32)
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        result = x / rms * ((1.0 + self.weight) if self.offset else self.weight)
        return result.to(in_dtype)

    def extra_repr(self) -> str:
        return (f"{self.d_model}, eps={self.eps}" + (", offset=True" if self.offset else "")
                + (f", heads={self.heads}" if self.heads else ""))


def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / RMS(x) over the last dim, in float32, with no gain: Llama 4's QK-norm
    (transformers' Llama4TextL2Norm, which multiplies by rsqrt; the same value)."""
    in_dtype = x.dtype
    x = x.to(torch.float32)
    return (x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)).to(in_dtype)


class LayerNorm(nn.Module):
    """(a - mean(a)) / sqrt(var(a) + eps) * g + b over the last dim (Ba et al. 2016), in
    float32 like RMSNorm; var is the biased (1/d) variance, as in torch's own layer norm."""

    def __init__(self, d_model, eps=1e-5, device=None, dtype=None, offset=False, heads=None,
                 bias=True):
        super().__init__()
        check_norm_args(d_model, eps)
        if offset:
            raise ValueError("offset (1 + w) gains are an RMSNorm variant (Gemma), not LayerNorm's")
        self.d_model, self.eps, self.heads = d_model, eps, heads
        shape = norm_shape(d_model, heads)
        self.weight = nn.Parameter(torch.ones(shape, device=device, dtype=dtype))
        if bias:
            self.bias = nn.Parameter(torch.zeros(shape, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (... d_model) -> (... d_model), same dtype as x
        in_dtype = x.dtype
        x = x.to(torch.float32)
        centered = x - x.mean(dim=-1, keepdim=True)
        std = torch.sqrt(centered.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        result = centered / std * self.weight
        if self.bias is not None:
            result = result + self.bias
        return result.to(in_dtype)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}" + ("" if self.bias is not None else ", bias=False")


class LayerNormNoBias(LayerNorm):
    """LayerNorm with a weight and no bias: (a - mean(a)) / sqrt(var(a) + eps) * g, as
    transformers' CohereLayerNorm (modeling_cohere.py), which multiplies by rsqrt where this
    divides by sqrt (the same count of elementwise ops: one each)."""

    def __init__(self, d_model, eps=1e-5, device=None, dtype=None, offset=False, heads=None):
        super().__init__(d_model, eps, device, dtype, offset, heads, bias=False)


NORM_CLASSES = {"rmsnorm": RMSNorm, "layernorm": LayerNorm, "layernorm_nobias": LayerNormNoBias}


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU(x) = x * sigmoid(x) (eq. 5)."""
    return x * torch.sigmoid(x)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation (Hendrycks and Gimpel 2016; GPT-2's "gelu_new"), written
    exactly as transformers' NewGELUActivation so that both run the same ops."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU(x) = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))), the exact form."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def relu2(x: torch.Tensor) -> torch.Tensor:
    """relu(x)², Nemotron-H's MLP activation (transformers' ReLUSquaredActivation)."""
    r = torch.relu(x)
    return r * r


ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh, "gelu": gelu, "relu2": relu2}

# gpt-oss's gated unit (transformers' GptOssConfig swiglu_alpha and swiglu_limit defaults,
# what gpt-oss-20b/120b ship); the values change no count, so they are constants here.
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gpt-oss's experts' gate, op for op as transformers' GptOssExperts._apply_gate writes
    it: gate clamped above, up clamped both sides, gate·sigmoid(α·gate)·(up + 1)."""
    gate = gate.clamp(min=None, max=SWIGLU_LIMIT)
    up = up.clamp(min=-SWIGLU_LIMIT, max=SWIGLU_LIMIT)
    glu = gate * torch.sigmoid(gate * SWIGLU_ALPHA)
    return (up + 1) * glu


# the activations of a gated MLP: ACTIVATIONS' (act(W1 x) · W3 x) and the clamped SwiGLU
GATED_ACTIVATIONS = (*ACTIVATIONS, "silu_clamped")


def default_d_ff(d_model: int) -> int:
    """8/3 * d_model rounded up to a multiple of 64, in integer arithmetic (no float rounding);
    the one definition lives in the spec (accounting/architecture/config.py)."""
    check_positive_int("d_model", d_model)
    return _spec_default_d_ff(d_model)


class GatedMLP(nn.Module):
    """FFN(x) = W2 (act(W1 x) * W3 x): SwiGLU with SiLU (eq. 7), GeGLU with GELU (tanh or
    exact erf)."""

    def __init__(self, d_model, d_ff=None, device=None, dtype=None, *, activation="silu", bias=False):
        super().__init__()
        check_positive_int("d_model", d_model)
        if d_ff is None:
            d_ff = default_d_ff(d_model)
        check_positive_int("d_ff", d_ff)
        if activation not in GATED_ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(GATED_ACTIVATIONS)}, got "
                             f"{activation!r}")
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.w1 = Linear(d_model, d_ff, device=device, dtype=dtype, bias=bias)
        self.w2 = Linear(d_ff, d_model, device=device, dtype=dtype, bias=bias)
        self.w3 = Linear(d_model, d_ff, device=device, dtype=dtype, bias=bias)
        self.act = ACTIVATIONS.get(activation)

    multipliers = None  # Falcon-H1's muP (gate, down) scalars (TransformerBlock sets them)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (... d_model) -> (... d_model); the gate lives in (... d_ff)
        if self.act is None:  # the clamped SwiGLU reads both halves
            a = self.w1(x)
            return self.w2(clamped_swiglu(a, self.w3(x)))
        if self.multipliers is not None:  # FalconH1MLP: act(W1 x · g) · W3 x, W2 (…) · d
            gate, down = self.multipliers
            return self.w2(self.act(self.w1(x) * gate) * self.w3(x)) * down
        return self.w2(self.act(self.w1(x)) * self.w3(x))


class SwiGLU(GatedMLP):
    """FFN(x) = W2 (SiLU(W1 x) * W3 x) (eq. 7)."""

    def __init__(self, d_model, d_ff=None, device=None, dtype=None):
        super().__init__(d_model, d_ff, device=device, dtype=dtype, activation="silu")


class XIELU(nn.Module):
    """xIELU (Huang 2024, arXiv:2411.13010), written as transformers' XIELUActivation's
    Python path (activations.py): two learned scalars alpha_p and alpha_n (initialised to
    softplus⁻¹ of 0.8 and of 0.8 − β), buffers β = 0.5 and ε = −1e-6;
    where(x > 0, αp·x·x + β·x, (expm1(min(x, ε)) − x)·αn + β·x)."""

    def __init__(self, device=None, dtype=None, beta=0.5, eps=-1e-6, alpha_init=0.8):
        super().__init__()
        def inverse_softplus(v):
            return torch.log(torch.expm1(torch.tensor(v, dtype=torch.float32))).reshape(1)
        self.alpha_p = nn.Parameter(inverse_softplus(alpha_init).to(device=device, dtype=dtype))
        self.alpha_n = nn.Parameter(inverse_softplus(alpha_init - beta).to(device=device,
                                                                            dtype=dtype))
        self.register_buffer("beta", torch.tensor(beta, device=device, dtype=torch.float32))
        self.register_buffer("eps", torch.tensor(eps, device=device, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha_p = nn.functional.softplus(self.alpha_p)
        alpha_n = nn.functional.softplus(self.alpha_n) + self.beta
        return torch.where(x > 0, x * alpha_p * x + x * self.beta,
                           (torch.expm1(torch.minimum(x, self.eps)) - x) * alpha_n
                           + x * self.beta)


class MLP(nn.Module):
    """FFN(x) = W2 act(W1 x): two matrices (GPT-2: GELU-tanh, d_ff = 4·d_model, biases);
    activation "xielu" (Apertus) is a module with learned scalars, registered as act_fn."""

    def __init__(self, d_model, d_ff, device=None, dtype=None, *, activation="gelu_tanh", bias=False):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        if activation not in ACTIVATIONS and activation != "xielu":
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)} or xielu, got "
                             f"{activation!r}")
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.w1 = Linear(d_model, d_ff, device=device, dtype=dtype, bias=bias)
        self.w2 = Linear(d_ff, d_model, device=device, dtype=dtype, bias=bias)
        if activation == "xielu":
            self.act_fn = XIELU(device=device, dtype=dtype)
        else:
            self.act = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = self.act_fn if self.activation == "xielu" else self.act
        return self.w2(act(self.w1(x)))


def feed_forward(mlp: str, d_model, d_ff, device=None, dtype=None, bias=False) -> nn.Module:
    """The MLP the spec names ("swiglu", "geglu", "geglu_erf", "gelu", "gelu_tanh";
    accounting.architecture.config.MLPS): gated or not, and its activation, from the spec's table."""
    if mlp not in MLPS:
        raise ValueError(f"mlp must be one of {', '.join(MLPS)}, got {mlp!r}")
    kind = MLPS[mlp]
    if kind.name == "swiglu" and not bias:
        return SwiGLU(d_model, d_ff, device=device, dtype=dtype)
    cls = GatedMLP if kind.gated else MLP
    return cls(d_model, d_ff, device=device, dtype=dtype, activation=kind.activation, bias=bias)


class RotaryPositionalEmbedding(nn.Module):
    """RoPE: rotate pairs (x[2k], x[2k+1]) at position i by i / theta^(2k/d_k) (eqs. 8-9).

    Only the cos/sin tables are stored, never the d_k x d_k block-diagonal matrix.
    They are non-persistent buffers: fixed, not learned, and kept out of state_dict.
    """

    def __init__(self, theta, d_k, max_seq_len, device=None):
        super().__init__()
        check_positive_number("theta", theta)
        check_positive_int("d_k", d_k)
        check_positive_int("max_seq_len", max_seq_len)
        if d_k % 2:
            raise ValueError(f"RoPE rotates pairs of dimensions, so d_k must be even, got d_k={d_k}")
        self.theta, self.d_k, self.max_seq_len = theta, d_k, max_seq_len
        # Angles in float64: i * freq at i ~ 1e4 would be off by ~1e-3 rad in float32.
        k = torch.arange(d_k // 2, device=device, dtype=torch.float64)
        inv_freq = 1.0 / theta ** (2 * k / d_k)  # (half)
        i = torch.arange(max_seq_len, device=device, dtype=torch.float64)  # (seq)
        angles = einsum(i, inv_freq, "seq, half -> seq half")
        self.register_buffer("cos", angles.cos().to(torch.float32), persistent=False)
        self.register_buffer("sin", angles.sin().to(torch.float32), persistent=False)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        # x: (... seq d_k); token_positions: (... seq), broadcastable to x's leading dims.
        # Reading values needs real data: skip the check on the meta device.
        if not token_positions.is_meta and token_positions.numel() > 0:
            lo, hi = int(token_positions.min()), int(token_positions.max())
            if lo < 0 or hi >= self.max_seq_len:
                raise ValueError(
                    f"token positions must lie in [0, max_seq_len={self.max_seq_len}), "
                    f"got positions from {lo} to {hi}"
                )
        return self.rotate(x, token_positions)

    def rotate(self, x: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        """forward() without the range check, for positions the caller knows are in range."""
        cos = self.cos[token_positions].to(x.dtype)  # (... seq half)
        sin = self.sin[token_positions].to(x.dtype)
        pairs = rearrange(x, "... seq (half two) -> ... seq half two", two=2)
        x_even, x_odd = pairs[..., 0], pairs[..., 1]
        # [[cos, -sin], [sin, cos]] applied to (x_even, x_odd)
        out_even = x_even * cos - x_odd * sin
        out_odd = x_even * sin + x_odd * cos
        out = torch.stack((out_even, out_odd), dim=-1)
        return rearrange(out, "... seq half two -> ... seq (half two)")

    def extra_repr(self) -> str:
        return f"theta={self.theta}, d_k={self.d_k}, max_seq_len={self.max_seq_len}"
