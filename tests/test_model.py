"""Tests for the from-scratch Transformer LM in model/.

Every expected value comes from an independent source, named in a comment:
torch's own functional ops (F.linear, F.embedding, F.rms_norm, F.silu, torch.softmax,
F.scaled_dot_product_attention), an explicit d x d RoPE rotation matrix built from the
definition in CS336 section 3.5.3, or arithmetic done by hand.
"""

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from model import (
    CausalMultiHeadSelfAttention,
    Embedding,
    Linear,
    RMSNorm,
    RotaryPositionalEmbedding,
    SwiGLU,
    TransformerBlock,
    TransformerLM,
    default_d_ff,
    scaled_dot_product_attention,
    softmax,
)

MODEL_DIR = Path(__file__).resolve().parent.parent / "model"

# float32 model vs float64 reference: float32 rounding only
F32_TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- references


def ref_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE straight from eqs. 8-9: R_i is block diagonal with 2x2 blocks
    [[cos, -sin], [sin, cos]] at angle i / theta^(2k/d), applied as a d x d matmul."""
    d = x.shape[-1]
    pos = positions.to(torch.float64)
    R = torch.zeros(*pos.shape, d, d, dtype=torch.float64)
    for k in range(d // 2):
        angle = pos / theta ** (2 * k / d)
        c, s = torch.cos(angle), torch.sin(angle)
        R[..., 2 * k, 2 * k], R[..., 2 * k, 2 * k + 1] = c, -s
        R[..., 2 * k + 1, 2 * k], R[..., 2 * k + 1, 2 * k + 1] = s, c
    return (R.to(x.dtype) @ x.unsqueeze(-1)).squeeze(-1)


def ref_mhsa(x, wq, wk, wv, wo, num_heads, theta=None, positions=None):
    """Causal MHSA with F.linear + F.scaled_dot_product_attention(is_causal=True);
    heads are split with view/transpose rather than einops."""
    *lead, seq, d_model = x.shape
    d_k = d_model // num_heads

    def heads(t):  # (... seq d_model) -> (... heads seq d_k)
        return t.view(*lead, seq, num_heads, d_k).transpose(-3, -2)

    q, k, v = heads(F.linear(x, wq)), heads(F.linear(x, wk)), heads(F.linear(x, wv))
    if theta is not None:
        if positions is None:
            positions = torch.arange(seq)
        positions = positions.unsqueeze(-2)  # heads axis
        q, k = ref_rope(q, positions, theta), ref_rope(k, positions, theta)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = out.transpose(-3, -2).reshape(*lead, seq, d_model)
    return F.linear(out, wo)


def ref_swiglu(x, w1, w2, w3):
    return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)


def ref_block(x, p, prefix, num_heads, theta, eps=1e-5):
    """Pre-norm block (eq. 15) from functional ops; p maps state-dict keys to float64 tensors."""
    d = x.shape[-1]
    h = F.rms_norm(x, (d,), p[prefix + "ln1.weight"], eps=eps)
    a = prefix + "attn."
    y = x + ref_mhsa(
        h,
        p[a + "q_proj.weight"],
        p[a + "k_proj.weight"],
        p[a + "v_proj.weight"],
        p[a + "output_proj.weight"],
        num_heads,
        theta,
    )
    h = F.rms_norm(y, (d,), p[prefix + "ln2.weight"], eps=eps)
    f = prefix + "ffn."
    return y + ref_swiglu(h, p[f + "w1.weight"], p[f + "w2.weight"], p[f + "w3.weight"])


def ref_lm(ids, p, num_layers, num_heads, theta):
    x = F.embedding(ids, p["token_embeddings.weight"])
    for i in range(num_layers):
        x = ref_block(x, p, f"layers.{i}.", num_heads, theta)
    x = F.rms_norm(x, (x.shape[-1],), p["ln_final.weight"], eps=1e-5)
    return F.linear(x, p["lm_head.weight"])


def f64_params(module):
    return {k: v.detach().to(torch.float64) for k, v in module.state_dict().items()}


def small_lm(**overrides):
    cfg = dict(vocab_size=97, context_length=16, d_model=32, num_layers=2, num_heads=4, d_ff=64)
    cfg.update(overrides)
    return TransformerLM(**cfg)


# ---------------------------------------------------------------- components vs torch


def test_linear_matches_F_linear():
    layer = Linear(24, 40, dtype=torch.float64)
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    # expected: torch's F.linear with the same weight
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight))
    assert layer.weight.shape == (40, 24)


def test_embedding_matches_F_embedding():
    emb = Embedding(50, 16)
    ids = torch.randint(0, 50, (3, 7))
    # expected: torch's F.embedding with the same table
    torch.testing.assert_close(emb(ids), F.embedding(ids, emb.weight))


def test_rmsnorm_matches_F_rms_norm():
    norm = RMSNorm(32)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(32))
    x = torch.randn(4, 6, 32)
    # expected: torch's F.rms_norm with eps=1e-5 and the same gain
    torch.testing.assert_close(norm(x), F.rms_norm(x, (32,), norm.weight, eps=1e-5))


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_keeps_bf16(weight_dtype):
    norm = RMSNorm(16, dtype=weight_dtype)
    x = torch.randn(2, 3, 16, dtype=torch.bfloat16)
    out = norm(x)
    assert out.dtype == torch.bfloat16
    # expected: F.rms_norm on the float32 upcast, rounded to bf16 (section 3.5.1)
    expected = F.rms_norm(x.float(), (16,), norm.weight.float(), eps=1e-5).to(torch.bfloat16)
    torch.testing.assert_close(out, expected)


def test_swiglu_matches_functional_reference():
    ffn = SwiGLU(16, 48, dtype=torch.float64)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    # expected: W2(SiLU(W1 x) * W3 x) from F.silu and F.linear (eq. 7)
    expected = ref_swiglu(x, ffn.w1.weight, ffn.w2.weight, ffn.w3.weight)
    torch.testing.assert_close(ffn(x), expected)
    assert ffn.w1.weight.shape == (48, 16) and ffn.w2.weight.shape == (16, 48)


def test_swiglu_default_d_ff():
    # expected: default_d_ff(768) = 2048, checked by hand in test_default_d_ff
    assert SwiGLU(768, device="meta").w1.weight.shape == (2048, 768)


@pytest.mark.parametrize(
    "d_model, expected",
    [
        (768, 2048),  # 8/3*768 = 2048 exactly, already a multiple of 64
        (1024, 2752),  # 8/3*1024 = 2730.67 -> next multiple of 64 is 43*64 = 2752
        (64, 192),  # 8/3*64 = 170.67 -> 3*64 = 192
        (100, 320),  # 8/3*100 = 266.67 -> 5*64 = 320
    ],
)
def test_default_d_ff(d_model, expected):
    assert default_d_ff(d_model) == expected


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_matches_torch(dim):
    x = torch.randn(3, 4, 5, dtype=torch.float64) * 3
    # expected: torch.softmax
    torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_softmax_large_inputs_are_stable():
    x = torch.tensor([[1e4, 1e4 - 1.0, -1e4], [1e4, 1e4, 1e4]])
    out = softmax(x, dim=-1)
    assert torch.isfinite(out).all()
    # expected: rows of a distribution sum to 1; equal inputs give a uniform row
    torch.testing.assert_close(out.sum(dim=-1), torch.ones(2))
    torch.testing.assert_close(out[1], torch.full((3,), 1 / 3))
    # expected: torch.softmax, which is stable too
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


@pytest.mark.parametrize("lead", [(2,), (2, 3)], ids=["3d", "4d"])
@pytest.mark.parametrize("use_mask", [False, True], ids=["nomask", "mask"])
def test_sdpa_matches_torch(lead, use_mask):
    q = torch.randn(*lead, 5, 8, dtype=torch.float64)
    k = torch.randn(*lead, 7, 8, dtype=torch.float64)
    v = torch.randn(*lead, 7, 6, dtype=torch.float64)
    mask = None
    if use_mask:
        mask = torch.rand(5, 7) > 0.5
        mask[:, 0] = True  # every query attends to something, so no row is all -inf
    # expected: F.scaled_dot_product_attention (bool mask: True = may attend, same convention)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask=mask), expected)


# ---------------------------------------------------------------- RoPE


def test_rope_matches_rotation_matrix():
    rope = RotaryPositionalEmbedding(10000.0, 8, 32)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 5, 17, 31])
    # expected: explicit block-diagonal R_i from eqs. 8-9, applied by matmul
    torch.testing.assert_close(rope(x, pos), ref_rope(x, pos, 10000.0), rtol=1e-6, atol=1e-6)


def test_rope_leading_batch_dims():
    rope = RotaryPositionalEmbedding(500.0, 6, 20)
    x = torch.randn(2, 3, 5, 6, dtype=torch.float64)
    # expected: explicit rotation matrices, positions broadcast over leading dims
    pos = torch.arange(5)
    torch.testing.assert_close(rope(x, pos), ref_rope(x, pos, 500.0), rtol=1e-6, atol=1e-6)
    pos = torch.randint(0, 20, (2, 1, 5))  # different positions per batch element
    torch.testing.assert_close(rope(x, pos), ref_rope(x, pos, 500.0), rtol=1e-6, atol=1e-6)


def test_rope_dot_product_depends_only_on_offset():
    rope = RotaryPositionalEmbedding(10000.0, 16, 64)
    q, k = torch.randn(1, 16, dtype=torch.float64), torch.randn(1, 16, dtype=torch.float64)

    def score(m, n):
        return (rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum()

    # expected: R_m^T R_n = R_(n-m), so q.k depends only on n - m (section 3.5.3)
    base = score(3, 10)
    for shift in (1, 20, 50):
        torch.testing.assert_close(score(3 + shift, 10 + shift), base, rtol=1e-5, atol=1e-5)
    assert not torch.isclose(score(3, 11), base)  # a different offset gives a different score


def test_rope_buffers_are_not_in_state_dict():
    rope = RotaryPositionalEmbedding(10000.0, 8, 16)
    assert rope.state_dict() == {}
    assert rope.cos.shape == rope.sin.shape == (16, 4)


def test_rope_rejects_out_of_range_positions():
    rope = RotaryPositionalEmbedding(10000.0, 8, 16)
    with pytest.raises(ValueError, match="max_seq_len"):
        rope(torch.randn(3, 8), torch.tensor([0, 1, 16]))


# ---------------------------------------------------------------- attention, block, LM


@pytest.mark.parametrize("theta", [None, 10000.0], ids=["norope", "rope"])
def test_mhsa_matches_reference(theta):
    attn = CausalMultiHeadSelfAttention(32, 4, max_seq_len=16, theta=theta)
    x = torch.randn(2, 10, 32)
    w = [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, attn.output_proj.weight]
    w64 = [t.detach().double() for t in w]
    # expected: F.linear + F.scaled_dot_product_attention(is_causal=True) in float64
    expected = ref_mhsa(x.double(), *w64, num_heads=4, theta=theta)
    torch.testing.assert_close(attn(x).double(), expected, **F32_TOL)


def test_mhsa_with_given_positions():
    attn = CausalMultiHeadSelfAttention(32, 4, max_seq_len=32, theta=10000.0)
    x = torch.randn(2, 6, 32)
    w64 = [
        t.detach().double()
        for t in (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, attn.output_proj.weight)
    ]
    for pos in (torch.arange(6) + 7, torch.stack([torch.arange(6), torch.arange(6) + 20])):
        # expected: same functional reference, with positions (seq) and (batch, seq)
        expected = ref_mhsa(x.double(), *w64, num_heads=4, theta=10000.0, positions=pos)
        torch.testing.assert_close(attn(x, pos).double(), expected, **F32_TOL)


def test_transformer_block_matches_reference():
    block = TransformerBlock(32, 4, 64, max_seq_len=16, theta=10000.0)
    with torch.no_grad():  # non-trivial gains so a swapped ln1/ln2 would show
        block.ln1.weight.copy_(torch.rand(32) + 0.5)
        block.ln2.weight.copy_(torch.rand(32) + 0.5)
    x = torch.randn(2, 12, 32)
    # expected: pre-norm block from F.rms_norm, F.linear, F.silu, F.sdpa and ref_rope
    expected = ref_block(x.double(), f64_params(block), "", num_heads=4, theta=10000.0)
    torch.testing.assert_close(block(x).double(), expected, **F32_TOL)


def test_transformer_lm_matches_reference():
    lm = small_lm()
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_final.weight":
                p.copy_(torch.rand_like(p) + 0.5)
    ids = torch.randint(0, 97, (2, 16))
    logits = lm(ids)
    assert logits.shape == (2, 16, 97)
    # expected: whole forward from F.embedding, F.rms_norm, F.linear, F.silu, F.sdpa, ref_rope
    expected = ref_lm(ids, f64_params(lm), num_layers=2, num_heads=4, theta=10000.0)
    torch.testing.assert_close(logits.double(), expected, **F32_TOL)


def test_lm_is_causal():
    lm = small_lm()
    ids = torch.randint(0, 97, (1, 12))
    j = 7
    changed = ids.clone()
    changed[0, j] = (ids[0, j] + 1) % 97
    a, b = lm(ids), lm(changed)
    # expected: a causal LM's logits at i < j cannot see token j; at j they must change
    torch.testing.assert_close(a[:, :j], b[:, :j], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, j], b[:, j])


# ---------------------------------------------------------------- init


def test_linear_init_statistics():
    layer = Linear(256, 512)
    sigma = math.sqrt(2 / (256 + 512))  # section 3.4.1
    w = layer.weight.detach()
    # expected: a N(0, sigma^2) truncated at 3 sigma has std 0.986 sigma; 131k samples
    assert abs(w.std().item() / sigma - 0.986) < 0.02
    assert abs(w.mean().item()) < 0.02 * sigma  # ~7 standard errors
    assert w.abs().max().item() <= 3 * sigma + 1e-7


def test_embedding_and_rmsnorm_init():
    w = Embedding(1000, 64).weight.detach()
    # expected: N(0, 1) truncated at +-3 (section 3.4.1), std 0.986
    assert w.abs().max().item() <= 3.0
    assert abs(w.std().item() - 0.986) < 0.02
    assert torch.equal(RMSNorm(8).weight.detach(), torch.ones(8))  # gain starts at 1


# ---------------------------------------------------------------- state dict


def test_state_dict_keys_exact():
    # expected: the naming fixed by the assignment's checkpoint format, written out by hand
    assert list(small_lm().state_dict()) == [
        "token_embeddings.weight",
        "layers.0.ln1.weight",
        "layers.0.attn.q_proj.weight",
        "layers.0.attn.k_proj.weight",
        "layers.0.attn.v_proj.weight",
        "layers.0.attn.output_proj.weight",
        "layers.0.ln2.weight",
        "layers.0.ffn.w1.weight",
        "layers.0.ffn.w2.weight",
        "layers.0.ffn.w3.weight",
        "layers.1.ln1.weight",
        "layers.1.attn.q_proj.weight",
        "layers.1.attn.k_proj.weight",
        "layers.1.attn.v_proj.weight",
        "layers.1.attn.output_proj.weight",
        "layers.1.ln2.weight",
        "layers.1.ffn.w1.weight",
        "layers.1.ffn.w2.weight",
        "layers.1.ffn.w3.weight",
        "ln_final.weight",
        "lm_head.weight",
    ]


def test_state_dict_round_trip_strict():
    a = small_lm()
    torch.manual_seed(1)
    b = small_lm()
    ids = torch.randint(0, 97, (2, 9))
    assert not torch.allclose(a(ids), b(ids))
    b.load_state_dict(a.state_dict(), strict=True)
    # expected: same weights -> same logits
    torch.testing.assert_close(b(ids), a(ids), rtol=0, atol=0)


# ---------------------------------------------------------------- meta device, size


def gpt2_xl(context_length=1024):
    return TransformerLM(
        vocab_size=50257,
        context_length=context_length,
        d_model=1600,
        num_layers=48,
        num_heads=25,
        d_ff=6400,
        device="meta",
    )


def test_gpt2_xl_parameter_count():
    n = sum(p.numel() for p in gpt2_xl().parameters())
    # expected, by hand with V=50257, d=1600, d_ff=6400, L=48:
    #   embedding      V*d                         =    80_411_200
    #   per layer      2d + 4d^2 + 3*d*d_ff
    #                  = 3_200 + 10_240_000 + 30_720_000 = 40_963_200
    #   48 layers      48 * 40_963_200             = 1_966_233_600
    #   final norm     d                           =         1_600
    #   lm head        V*d                         =    80_411_200
    #   total                                      = 2_127_057_600
    assert n == 2_127_057_600


def test_gpt2_xl_meta_forward_and_backward_long_context():
    model = gpt2_xl(context_length=16384)
    ids = torch.empty(1, 16384, dtype=torch.long, device="meta")
    logits = model(ids)
    # expected: (batch, seq, vocab); meta tensors carry shapes only, so this is fast
    assert logits.shape == (1, 16384, 50257) and logits.is_meta
    logits.sum().backward()
    assert model.lm_head.weight.grad.shape == (50257, 1600)


def test_rope_on_meta_skips_value_check():
    rope = RotaryPositionalEmbedding(10000.0, 8, 16, device="meta")
    x = torch.empty(2, 5, 8, device="meta")
    assert rope(x, torch.arange(5, device="meta")).shape == (2, 5, 8)


# ---------------------------------------------------------------- argument checks


def test_too_long_sequence_raises():
    lm = small_lm(context_length=8)
    with pytest.raises(ValueError, match="context_length"):
        lm(torch.zeros(1, 9, dtype=torch.long))


@pytest.mark.parametrize(
    "build",
    [
        lambda: CausalMultiHeadSelfAttention(30, 4),  # 30 % 4 != 0
        lambda: CausalMultiHeadSelfAttention(12, 4, max_seq_len=8, theta=10000.0),  # d_k = 3, odd
        lambda: CausalMultiHeadSelfAttention(16, 4, theta=10000.0),  # RoPE without max_seq_len
        lambda: RotaryPositionalEmbedding(10000.0, 7, 16),  # odd d_k
        lambda: RotaryPositionalEmbedding(0.0, 8, 16),  # theta must be positive
        lambda: Linear(0, 4),
        lambda: Embedding(10, 0),
        lambda: RMSNorm(-1),
        lambda: SwiGLU(16, 0),
        lambda: small_lm(vocab_size=0),
        lambda: small_lm(context_length=0),
        lambda: small_lm(num_layers=0),
        lambda: small_lm(num_heads=0),
        lambda: small_lm(d_model=2.5),
        lambda: small_lm(d_ff=True),
    ],
)
def test_bad_constructor_args_raise(build):
    with pytest.raises(ValueError):
        build()


# ---------------------------------------------------------------- forbidden APIs

FORBIDDEN = [
    r"\bnn\.(Linear|Embedding|RMSNorm|LayerNorm|SiLU|GELU|Softmax|MultiheadAttention)\b",
    r"\b(F|functional)\.(linear|embedding|scaled_dot_product_attention|softmax|rms_norm|layer_norm|silu|gelu)\b",
    r"\btorch\.softmax\b",
    r"\.softmax\(",
    r"import\s+torch\.nn\.functional|from\s+torch\.nn\s+import\s+functional",  # no alias tricks
]


def forbidden_hits(text):
    return [m.group(0) for pattern in FORBIDDEN for m in re.finditer(pattern, text)]


def test_forbidden_patterns_catch_what_they_should():
    # the scanner itself: catches prefixed uses, lets our own softmax/sdpa names through
    for bad in ["nn.Linear(3, 4)", "F.linear(x, w)", "torch.softmax(x, -1)", "x.softmax(-1)",
                "F.silu(x)", "F.scaled_dot_product_attention(q, k, v)", "import torch.nn.functional as F",
                "nn.LayerNorm(8)", "F.layer_norm(x, (8,))", "F.gelu(x)", "nn.GELU()"]:
        assert forbidden_hits(bad), bad
    ok = "def softmax(x, dim):\nweights = softmax(scores, dim=-1)\nscaled_dot_product_attention(q, k, v)"
    assert forbidden_hits(ok) == []


def test_model_uses_no_forbidden_api():
    # model/fused.py is the one exemption: the fused attention path calls torch's kernel
    files = sorted(f for f in MODEL_DIR.glob("*.py") if f.name != "fused.py")
    assert files, f"no sources found in {MODEL_DIR}"
    hits = {f.name: forbidden_hits(f.read_text()) for f in files}
    assert {name: h for name, h in hits.items() if h} == {}
