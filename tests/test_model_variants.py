"""model/ beyond the course's configuration, against torch's own functional ops.

Every variant of the spec (tests/test_architectures.py::VARIANTS) is run forward and compared
with a reference written from torch.nn.functional: F.embedding, F.layer_norm, F.rms_norm,
F.linear (with bias), F.silu, F.gelu (exact and approximate="tanh"),
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True; a boolean mask for a
sliding window), and the rotation-matrix RoPE of tests/test_model.py; mixtures of experts
token by token (each token's top-k experts run one at a time, a capacity kept by counting
slots in token order), latent attention from DeepSeek-V2's equations. model/ itself uses
none of these functional ops (test_model.py scans it).
"""
import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from model import MLP, GatedMLP, LayerNorm, Linear, TransformerLM, gelu, gelu_tanh  # noqa: E402
from test_architectures import VARIANTS, variant  # noqa: E402
from test_model import F32_TOL, ref_rope  # noqa: E402


def test_linear_bias_matches_F_linear():
    layer = Linear(6, 5, bias=True, dtype=torch.float64)
    with torch.no_grad():
        layer.bias.copy_(torch.randn(5))
    x = torch.randn(3, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


def test_layernorm_matches_F_layer_norm():
    norm = LayerNorm(16)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(16))
        norm.bias.copy_(torch.randn(16))
    x = torch.randn(4, 3, 16) * 3 + 1
    torch.testing.assert_close(norm(x), F.layer_norm(x, (16,), norm.weight, norm.bias, eps=1e-5))


def test_gelus_match_F_gelu():
    x = torch.linspace(-6, 6, 201, dtype=torch.float64)
    torch.testing.assert_close(gelu_tanh(x), F.gelu(x, approximate="tanh"))
    torch.testing.assert_close(gelu(x), F.gelu(x))
    # and the two differ (the approximation is not the exact form)
    assert not torch.allclose(gelu_tanh(x), gelu(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize("activation,act", [("silu", F.silu), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
                                            ("gelu", F.gelu)])
def test_mlps_match_functional_references(activation, act):
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    gated = GatedMLP(8, 12, dtype=torch.float64, activation=activation, bias=True)
    plain = MLP(8, 12, dtype=torch.float64, activation=activation, bias=True)
    with torch.no_grad():
        for m in (gated, plain):
            for p in m.parameters():
                if p.dim() == 1:
                    p.copy_(torch.randn_like(p))
    g = gated
    expected = F.linear(act(F.linear(x, g.w1.weight, g.w1.bias)) * F.linear(x, g.w3.weight, g.w3.bias),
                        g.w2.weight, g.w2.bias)
    torch.testing.assert_close(gated(x), expected)
    p = plain
    torch.testing.assert_close(plain(x), F.linear(act(F.linear(x, p.w1.weight, p.w1.bias)),
                                                  p.w2.weight, p.w2.bias))


def ref_norm(c, x, p, prefix):
    shape = (x.shape[-1],)
    if c.norm in ("layernorm", "layernorm_nobias"):  # Cohere's: bias None
        weight = p[prefix + ".weight"]
        if weight.dim() == 2:  # a weight per head (Cohere's QK-norm): normalise, then scale
            return F.layer_norm(x, shape, eps=c.norm_eps) * weight
        return F.layer_norm(x, shape, weight, p.get(prefix + ".bias"), eps=c.norm_eps)
    gain = p[prefix + ".weight"]
    gain = 1 + gain if c.norm_offset else gain  # Gemma: 1 + w
    if gain.dim() == 2:  # a gain per head (per_head QK-norm)
        return F.rms_norm(x, shape, eps=c.norm_eps) * gain
    return F.rms_norm(x, shape, gain, eps=c.norm_eps)


def ref_linear(x, p, prefix):
    return F.linear(x, p[prefix + ".weight"], p.get(prefix + ".bias"))


def window_mask(T, window, chunk=None):
    """True where query i may attend key j: j <= i, and i − j < W for a window; for a chunk
    of C (Llama 4, transformers' chunked_overlay) j // C == i // C."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) & ((i - j < window) if window is not None else True) \
        & ((j // chunk == i // chunk) if chunk is not None else True)


def ref_alibi(h: int, T: int) -> torch.Tensor:
    """(h, 1, T): head i's slope times key position j, the slopes as transformers'
    build_alibi_tensor writes them (modeling_falcon.py): base^1..base^p for p the largest
    power of two <= h, base = 2^(−2^−(log2 p − 3)), then the odd powers of the next base."""
    p = 2 ** math.floor(math.log2(h))
    base = 2 ** (-(2 ** -(math.log2(p) - 3)))
    slopes = [base ** i for i in range(1, p + 1)]
    extra = 2 ** (-(2 ** -(math.log2(2 * p) - 3)))
    slopes += [extra ** i for i in range(1, 1 + 2 * min(p, h - p), 2)]
    return torch.tensor(slopes, dtype=torch.float64)[:, None, None] * torch.arange(T)


def ref_sdpa(q, k, v, window, chunk=None, alibi=False):
    if alibi:  # softmax((QKᵀ + bias)/√d_k): the bias scaled too, in the float mask
        bias = ref_alibi(q.shape[1], q.shape[-2]).to(q.dtype) / math.sqrt(q.shape[-1])
        mask = torch.where(window_mask(q.shape[-2], window, chunk), bias, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              enable_gqa=k.shape[1] != q.shape[1])
    if window is None and chunk is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(q.shape[-2], window, chunk),
                                          enable_gqa=k.shape[1] != q.shape[1])


def ref_softcapped(q, k, v, window, cap):
    """Gemma 2's eager attention (modeling_gemma2.eager_attention_forward): scores scaled,
    cap·tanh(scores/cap), masked, softmax; K/V repeated over each group (repeat_kv)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = cap * torch.tanh(scores / cap)
    scores = scores.masked_fill(~window_mask(q.shape[-2], window), float("-inf"))
    return scores.softmax(-1) @ v


def ref_indexer(c, x, q_latent, p, a):
    """DeepSeek-V3.2's lightning indexer (DeepseekV32Indexer's equations, query by query):
    I[s, t] = Σ_h w[s, h]·h_I^−½ · ReLU(q[s, h]·k[t] / √d_I) over the causal keys t ≤ s, the
    top index_topk kept (RoPE on the first qk_rope_head_dim dims of q and k)."""
    B, T, _ = x.shape
    hI, dI, r = c.index_heads, c.index_head_dim, c.qk_rope_head_dim
    q = ref_linear(q_latent, p, f"{a}.wq_b").view(B, T, hI, dI)
    k = F.layer_norm(ref_linear(x, p, f"{a}.wk"), (dI,), p[f"{a}.k_norm.weight"],
                     p[f"{a}.k_norm.bias"], eps=1e-6)
    pos = torch.arange(T).unsqueeze(0)
    q = torch.cat((ref_rope(q[..., :r].transpose(1, 2), pos, c.rope_theta).transpose(1, 2),
                   q[..., r:]), -1)
    k = torch.cat((ref_rope(k[..., :r], pos, c.rope_theta), k[..., r:]), -1)
    w = ref_linear(x, p, f"{a}.weights_proj") * hI ** -0.5
    keep = torch.zeros(B, T, T, dtype=torch.bool)
    for b in range(B):
        for s in range(T):
            scores = [float((w[b, s] * F.relu(q[b, s] @ k[b, t] / math.sqrt(dI))).sum())
                      for t in range(s + 1)]
            for t in sorted(range(s + 1), key=lambda t: -scores[t])[:c.index_topk]:
                keep[b, s, t] = True
    return keep


def ref_latent_attention(c, x, p, a, window):
    """DeepSeek-V2/V3 multi-head latent attention, from its equations (training form)."""
    B, T, _ = x.shape
    h, nope, rope, dv, r = c.num_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
    if c.q_lora_rank is None:
        q = ref_linear(x, p, f"{a}.q_proj")
    else:
        q_latent = ref_norm(c, ref_linear(x, p, f"{a}.q_a_proj"), p, f"{a}.q_a_norm")
        q = ref_linear(q_latent, p, f"{a}.q_b_proj")
    q = q.view(B, T, h, nope + rope).transpose(1, 2)
    q_nope, q_pe = q.split([nope, rope], dim=-1)
    c_kv, k_pe = ref_linear(x, p, f"{a}.kv_a_proj").split([r, rope], dim=-1)
    kv = ref_linear(ref_norm(c, c_kv, p, f"{a}.kv_a_norm"), p, f"{a}.kv_b_proj")
    k_nope, v = kv.view(B, T, h, nope + dv).transpose(1, 2).split([nope, dv], dim=-1)
    k_pe = k_pe.unsqueeze(1)
    if c.positions == "rope":
        pos = torch.arange(T).unsqueeze(0)
        q_pe, k_pe = ref_rope(q_pe, pos, c.rope_theta), ref_rope(k_pe, pos, c.rope_theta)
    q = torch.cat((q_nope, q_pe), -1)
    k = torch.cat((k_nope, k_pe.expand(B, h, T, rope)), -1)
    if c.index_topk is not None:  # DeepSeek-V3.2: attend only the indexer's top-k keys
        mask = window_mask(T, window) & ref_indexer(c, x, q_latent, p, f"{a}.indexer")
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1))
    else:
        out = ref_sdpa(q, k, v, window)
    return ref_linear(out.transpose(1, 2).reshape(B, T, h * dv), p, f"{a}.output_proj")


def ref_clamped_swiglu(gate, up, alpha=1.702, limit=7.0):
    """gpt-oss's gate as transformers' GptOssExperts._apply_gate writes it."""
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))


def ref_gated(c, a, b):
    if c.mlp_kind.activation == "silu_clamped":
        return ref_clamped_swiglu(a, b)
    act = {"silu": F.silu, "gelu": F.gelu,
           "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[c.mlp_kind.activation]
    return act(a) * b


def ref_expert(c, x, p, f, e):
    w1, w2, w3 = (p[f"{f}.experts.{n}"][e] for n in ("w1", "w2", "w3"))
    b1, b2, b3 = (p[f"{f}.experts.{n}"][e] if c.expert_bias else None for n in ("b1", "b2", "b3"))
    return F.linear(ref_gated(c, F.linear(x, w1, b1), F.linear(x, w3, b3)), w2, b2)


def ref_moe(c, x, p, f, router_x=None):
    """Token by token: the router's top-k (group-limited, biased choice where configured),
    each chosen expert run on the token, weighted; with a capacity factor each expert keeps
    its first C slots in token order (Switch/GShard), the rest are dropped. Gemma 4
    (mlp_beside_moe): the router reads router_x, F.rms_norm'd, × scale × d^-½
    (Gemma4TextRouter), and each chosen weight × per_expert_scale."""
    B, T, d = x.shape
    xt = x.reshape(-1, d)
    n, E, k = xt.shape[0], c.num_experts, c.experts_per_token
    rt = xt if router_x is None else router_x.reshape(-1, d)
    if c.mlp_beside_moe:
        rt = F.rms_norm(rt, (d,), eps=c.norm_eps) * p[f"{f}.router_scale"] * d ** -0.5
    logits = F.linear(rt, p[f"{f}.router.weight"], p.get(f"{f}.router.bias"))
    if c.router_scales_input:  # Llama 4 (transformers' Llama4TextMoe, token by token)
        top, chosen = logits.topk(k, dim=-1)
        y = torch.zeros_like(xt)
        for t in range(n):
            for j in range(k):
                w = torch.sigmoid(top[t, j])  # scales the expert's input, not its output
                y[t] += ref_expert(c, w * xt[t], p, f, int(chosen[t, j]))
        if c.num_shared_experts:
            shared = ref_mlp(c, xt, p, f"{f}.shared")
            if c.shared_expert_gate:  # Qwen3NextSparseMoeBlock: sigmoid(gate(x)) · shared
                shared = torch.sigmoid(ref_linear(xt, p, f"{f}.shared_gate")) * shared
            y = y + shared
        return y.reshape(B, T, d)
    if c.router == "sparsemixer":  # transformers' own (modeling_phimoe.py), inference form
        from transformers.models.phimoe.modeling_phimoe import sparsemixer
        weights, chosen = sparsemixer(logits, jitter_eps=0.01, training=False)
    elif c.router_topk_first:  # gpt-oss's GptOssTopKRouter: top-k logits, softmax over them
        top, chosen = logits.topk(k, dim=-1)
        weights = top.softmax(-1) if c.router == "softmax" else top.sigmoid()
    else:
        scores = logits.softmax(-1) if c.router == "softmax" else logits.sigmoid()
        # ERNIE 4.5 holds the bias as a frozen parameter (ffn.router_statics.bias)
        bias = p.get(f"{f}.router_bias", p.get(f"{f}.router_statics.bias"))
        choice = scores + bias if c.router_bias else scores.clone()
        if c.router_groups > 1:  # DeepSeek-V3: a group's two best; V2: its best
            size = E // c.router_groups
            for t in range(n):
                rank = sorted(range(c.router_groups), key=lambda g: -float(
                    choice[t, g * size:(g + 1) * size].topk(2).values.sum()
                    if c.router_group_score == "top2_sum"
                    else choice[t, g * size:(g + 1) * size].max()))
                for g in rank[c.router_topk_groups:]:
                    choice[t, g * size:(g + 1) * size] = 0.0
        chosen = choice.topk(k, dim=-1).indices
        weights = scores.gather(1, chosen)
    if c.norm_topk_prob:
        weights = weights / weights.sum(-1, keepdim=True)
    weights = weights * c.routed_scaling_factor
    if c.mlp_beside_moe:  # Gemma4TextRouter: × per_expert_scale[top_k_index]
        weights = weights * p[f"{f}.expert_scale"][chosen]
    keep = torch.ones(n, k, dtype=torch.bool)
    if c.moe_capacity_factor is not None:
        cap = math.ceil(c.moe_capacity_factor * n * k / E)
        used = [0] * E
        for t in range(n):
            for j in range(k):
                e = int(chosen[t, j])
                keep[t, j] = used[e] < cap
                used[e] += 1
    y = torch.zeros_like(xt)
    for t in range(n):
        for j in range(k):
            if keep[t, j]:
                y[t] += weights[t, j] * ref_expert(c, xt[t], p, f, int(chosen[t, j]))
    if c.num_shared_experts:
        shared = ref_mlp(c, xt, p, f"{f}.shared")
        if c.shared_expert_gate:  # Qwen2MoeSparseMoeBlock: sigmoid(shared_expert_gate(x)) ·
            shared = torch.sigmoid(xt @ p[f"{f}.shared_gate.weight"].T) * shared
        y = y + shared
    return y.reshape(B, T, d)


def ref_attention(c, x, p, a, window=None, chunk=None, nope=False, share=None):
    """share: Gemma 4's KV sharing, (store, its kind, reuse): a reuse layer's K and V are
    store[kind], which the layers before it wrote (Gemma4TextAttention's shared_kv_states)."""
    if c.mla:
        return ref_latent_attention(c, x, p, a, window)
    B, T, _ = x.shape
    h, kv, d = c.num_heads, c.kv_heads, c.d_k
    glob = window is None and c.global_shape  # Gemma 4's full layer: its own head shape
    if glob:
        kv, d = c.global_kv, c.global_d_k
    if share is not None and share[2]:  # q_proj, q_norm, RoPE; the stored K and V
        q = ref_linear(x, p, f"{a}.q_proj").view(B, T, h, d).transpose(1, 2)
        q = ref_norm(c, q, p, f"{a}.q_norm") if c.qk_norm == "head" else q
        q = ref_rope(q, torch.arange(T).unsqueeze(0), c.rope_theta)
        k, v = share[0][share[1]]
        out = ref_sdpa(q, k, v, window, chunk).transpose(1, 2).reshape(B, T, h * d)
        return ref_linear(out, p, f"{a}.output_proj")
    q, k = (ref_linear(x, p, f"{a}.{n}_proj") for n in "qk")
    # Gemma4TextAttention with attention_k_eq_v: value_states = key_states (no v_proj)
    v = k if glob and c.global_k_eq_v else ref_linear(x, p, f"{a}.v_proj")
    if c.qk_norm == "full":
        q, k = ref_norm(c, q, p, f"{a}.q_norm"), ref_norm(c, k, p, f"{a}.k_norm")
    if c.qk_norm == "per_head":  # CohereAttention: on (B, T, heads, d_k), weights (heads, d_k)
        q = ref_norm(c, q.view(B, T, h, d), p, f"{a}.q_norm").reshape(B, T, h * d)
        k = ref_norm(c, k.view(B, T, kv, d), p, f"{a}.k_norm").reshape(B, T, kv * d)
    q = q.view(B, T, h, d).transpose(1, 2)
    k = k.view(B, T, kv, d).transpose(1, 2)
    v = v.view(B, T, kv, d).transpose(1, 2)
    if c.qk_norm == "head":
        q, k = ref_norm(c, q, p, f"{a}.q_norm"), ref_norm(c, k, p, f"{a}.k_norm")
    if c.v_norm:  # Gemma4RMSNorm(with_scale=False) on each value head
        v = F.rms_norm(v, (d,), eps=c.norm_eps)
    if c.positions == "rope" and not nope:
        pos = torch.arange(T).unsqueeze(0)
        r = c.rotary_dim or d  # partial rotary: the first r dims rotated, the rest kept
        q = torch.cat((ref_rope(q[..., :r], pos, c.rope_theta), q[..., r:]), -1)
        k = torch.cat((ref_rope(k[..., :r], pos, c.rope_theta), k[..., r:]), -1)
        if c.qk_norm == "l2":  # Llama4TextL2Norm after the rotation, RoPE layers only
            q, k = F.rms_norm(q, (d,), eps=c.norm_eps), F.rms_norm(k, (d,), eps=c.norm_eps)
    if share is not None:
        share[0][share[1]] = (k, v)
    if nope and c.temperature_floor is not None:  # Llama4TextAttention, as transformers writes it
        i = torch.arange(T).double()
        scale = torch.log1p(torch.floor((i + 1.0) / c.temperature_floor)) * c.temperature_scale + 1.0
        q = q * scale[:, None]
    if c.attention_sinks:  # gpt-oss's eager attention: the sink column, softmax, dropped
        k, v = k.repeat_interleave(h // kv, 1), v.repeat_interleave(h // kv, 1)
        scores = q @ k.transpose(2, 3) / math.sqrt(d)
        if c.attn_softcap is not None:
            scores = c.attn_softcap * torch.tanh(scores / c.attn_softcap)
        scores = scores.masked_fill(~window_mask(T, window), float("-inf"))
        sinks = p[f"{a}.sinks"].reshape(1, h, 1, 1).expand(B, h, T, 1)
        out = torch.cat((scores, sinks), -1).softmax(-1)[..., :-1] @ v
    else:
        out = ref_sdpa(q, k, v, window, chunk, alibi=c.positions == "alibi") if c.attn_softcap is None else \
            ref_softcapped(q, k, v, window, c.attn_softcap)
    out = out.transpose(1, 2).reshape(B, T, h * d)
    if c.attn_output_gate:  # Qwen3NextAttention: attn_output * sigmoid(gate), then o_proj
        out = out * torch.sigmoid(ref_linear(x, p, f"{a}.gate_proj"))
    return ref_linear(out, p, f"{a}.output_proj")


def ref_xielu(x, p, a):
    """transformers' XIELUActivation._xielu_python, loaded with the layer's scalars."""
    from transformers.activations import XIELUActivation
    ref = XIELUActivation(dtype=x.dtype)
    ref.load_state_dict({k[len(a) + 1:]: v for k, v in p.items() if k.startswith(a + ".")})
    return ref._xielu_python(x)


def ref_mlp(c, x, p, f):
    if c.mlp_kind.activation == "xielu":  # ApertusMLP: down_proj(act_fn(up_proj(x)))
        return ref_linear(ref_xielu(ref_linear(x, p, f"{f}.w1"), p, f"{f}.act_fn"), p,
                          f"{f}.w2")
    if c.mlp_kind.gated:
        hidden = ref_gated(c, ref_linear(x, p, f"{f}.w1"), ref_linear(x, p, f"{f}.w3"))
    else:
        act = {"gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
               "relu2": lambda t: F.relu(t) ** 2}[c.mlp_kind.activation]  # Nemotron-H's
        hidden = act(ref_linear(x, p, f"{f}.w1"))
    return ref_linear(hidden, p, f"{f}.w2")


def ref_short_conv(c, x, p, a):
    """transformers' Lfm2ShortConv.slow_forward, transcribed: B, C, x from in_proj (the
    channels-first chunk), B·x, nn.Conv1d(groups=d, padding=K − 1) cut to T, C·conv, out_proj."""
    T = x.shape[1]
    bcx = ref_linear(x, p, f"{a}.in_proj").transpose(-1, -2)
    b, gate, h = bcx.chunk(3, dim=-2)
    w = p[f"{a}.conv.weight"].unsqueeze(1)  # (d, 1, K), nn.Conv1d's layout
    conv = F.conv1d(b * h, w, p.get(f"{a}.conv.bias"), padding=c.conv_kernel - 1,
                    groups=c.d_model)[..., :T]
    return ref_linear((gate * conv).transpose(-1, -2), p, f"{a}.out_proj")


def ref_gated_deltanet(c, x, p, a):
    """transformers' own Qwen3NextGatedDeltaNet (its torch path, torch_chunk_gated_delta_rule
    with chunk 64: the chunk changes no result), loaded with the block's weights."""
    from transformers import Qwen3_5TextConfig, Qwen3NextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet
    # Qwen3.5's (split input projections: linear_split_proj) or Qwen3-Next's
    config, layer = ((Qwen3_5TextConfig, Qwen3_5GatedDeltaNet) if c.linear_split_proj
                     else (Qwen3NextConfig, Qwen3NextGatedDeltaNet))
    cfg = config(hidden_size=c.d_model, linear_num_key_heads=c.linear_key_heads,
                 linear_num_value_heads=c.linear_value_heads,
                 linear_key_head_dim=c.linear_key_head_dim,
                 linear_value_head_dim=c.linear_value_head_dim,
                 linear_conv_kernel_dim=c.conv_kernel, rms_norm_eps=c.norm_eps,
                 num_hidden_layers=1, layer_types=["linear_attention"])
    ref = layer(cfg, 0).to(x.dtype)
    ref.load_state_dict({k[len(a) + 1:]: v.unsqueeze(1) if k.endswith("conv1d.weight") else v
                         for k, v in p.items() if k.startswith(a + ".")})
    return ref(x)


def ref_kda(c, x, p, a):
    """transformers' own KimiLinearDeltaAttention (its torch path, chunk_kimi_delta_attention
    with chunk 64: the chunk changes no result), loaded with the block's weights (A_log
    (h,) as its (1, 1, h, 1))."""
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention
    cfg = KimiLinearConfig(hidden_size=c.d_model, linear_num_heads=c.linear_key_heads,
                           linear_head_dim=c.linear_key_head_dim,
                           linear_conv_kernel_dim=c.conv_kernel, rms_norm_eps=c.norm_eps,
                           num_hidden_layers=1, layer_types=["linear_attention"])
    ref = KimiLinearDeltaAttention(cfg, 0).to(x.dtype)
    shapes = {"conv1d.weight": lambda v: v.unsqueeze(1),
              "forget_gate.A_log": lambda v: v.view(1, 1, -1, 1)}
    ref.load_state_dict({k[len(a) + 1:]: shapes.get(k[len(a) + 1:], lambda v: v)(v)
                         for k, v in p.items() if k.startswith(a + ".")})
    return ref(x)


def ref_mamba(c, x, p, a):
    """transformers' own NemotronHMamba2Mixer (its torch path: causal_conv1d_fn,
    mamba2_chunk_scan), loaded with the block's weights."""
    from transformers import NemotronHConfig
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer
    cfg = NemotronHConfig(hidden_size=c.d_model, mamba_num_heads=c.mamba_heads,
                          mamba_head_dim=c.mamba_head_dim, ssm_state_size=c.ssm_state,
                          n_groups=c.mamba_groups, conv_kernel=c.conv_kernel,
                          chunk_size=c.mamba_chunk, use_conv_bias=c.conv_bias,
                          use_bias=c.mamba_bias, time_step_min=c.mamba_dt_min,
                          layer_norm_epsilon=c.norm_eps, num_hidden_layers=1,
                          hybrid_override_pattern="M")
    ref = NemotronHMamba2Mixer(cfg, 0).to(x.dtype)
    ref.load_state_dict({k[len(a) + 1:]: v.unsqueeze(1) if k.endswith("conv1d.weight") else v
                         for k, v in p.items() if k.startswith(a + ".")})
    return ref(x)


def ref_falcon_mixer(c, x, p, a):
    """transformers' own FalconH1Mixer (its torch path, as Nemotron-H's), loaded with the
    block's weights; its muP multipliers 1 and mup_vector ones (model/'s: the values change
    no count); with the gated norm, gating first (mamba_norm_before_gate false)."""
    from transformers import FalconH1Config
    from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1Mixer
    cfg = FalconH1Config(hidden_size=c.d_model, mamba_d_ssm=c.mamba_heads * c.mamba_head_dim,
                         mamba_n_heads=c.mamba_heads, mamba_d_head=c.mamba_head_dim,
                         mamba_n_groups=c.mamba_groups, mamba_d_state=c.ssm_state,
                         mamba_d_conv=c.conv_kernel, mamba_chunk_size=c.mamba_chunk,
                         mamba_conv_bias=c.conv_bias, mamba_proj_bias=c.mamba_bias,
                         projectors_bias=c.mamba_bias, mamba_rms_norm=not c.mamba_gate_only,
                         mamba_norm_before_gate=False, rms_norm_eps=c.norm_eps,
                         time_step_limit=(c.mamba_dt_min, float("inf")), num_hidden_layers=1,
                         num_attention_heads=c.num_heads, num_key_value_heads=c.kv_heads)
    ref = FalconH1Mixer(cfg, 0).to(x.dtype)
    width = 2 * c.mamba_heads * c.mamba_head_dim + 2 * c.mamba_groups * c.ssm_state + c.mamba_heads
    ref.register_buffer("mup_vector", torch.ones(1, 1, width, dtype=x.dtype), persistent=False)
    ref.load_state_dict({k[len(a) + 1:]: v.unsqueeze(1) if k.endswith("conv1d.weight") else v
                         for k, v in p.items() if k.startswith(a + ".")})
    return ref(x)


def ref_jamba_mixer(c, x, p, a):
    """transformers' own JambaMambaMixer (its torch path: causal_conv1d_fn and
    mamba_selective_scan's sequential loop), loaded with the block's weights."""
    from transformers import JambaConfig
    from transformers.models.jamba.modeling_jamba import JambaMambaMixer
    cfg = JambaConfig(hidden_size=c.d_model, mamba_expand=c.mamba_inner // c.d_model,
                      mamba_dt_rank=c.mamba_dt_rank, mamba_d_state=c.ssm_state,
                      mamba_d_conv=c.conv_kernel, mamba_conv_bias=c.conv_bias,
                      mamba_proj_bias=c.mamba_bias, rms_norm_eps=c.norm_eps,
                      num_hidden_layers=1, use_associative_scan=False)
    ref = JambaMambaMixer(cfg, 0).to(x.dtype)
    ref.load_state_dict({k[len(a) + 1:]: v.unsqueeze(1) if k.endswith("conv1d.weight") else v
                         for k, v in p.items() if k.startswith(a + ".")})
    return ref(x)


def ref_lm(c, ids, p):
    T = ids.shape[-1]
    x = F.embedding(ids, p["token_embeddings.weight"])
    if c.embedding_multiplier is not None:
        x = x * c.embedding_multiplier
    m = 1.0 if c.residual_multiplier is None else c.residual_multiplier  # Granite
    if c.positions == "learned":
        x = x + F.embedding(torch.arange(T), p["position_embeddings.weight"])
    types = [("local" if k.local else "chunked" if k.chunked else "global") for k in c.layer_kinds]
    store, ple = {}, None
    if c.per_layer_input is not None:  # Gemma4TextModel: (norm(W x · d^-½) + E[ids] · √P) · 2^-½
        P = c.per_layer_input
        e = F.embedding(ids, p["per_layer_embeddings.weight"]) * P ** 0.5
        w = F.linear(x, p["per_layer_model_projection.weight"]) * c.d_model ** -0.5
        w = ref_norm(c, w.view(*ids.shape, c.num_layers, P), p, "per_layer_projection_norm")
        ple = (w + e.view(*ids.shape, c.num_layers, P)) * 2 ** -0.5
    for i in range(c.num_layers):
        b = f"layers.{i}"
        window = c.sliding_window if types[i] == "local" else None
        chunk = c.attention_chunk if types[i] == "chunked" else None
        moe = c.num_experts is not None and i not in c.dense_layers

        def attn(z, mixer=c.layer_kinds[i].mixer):
            if mixer == "conv":
                return ref_short_conv(c, z, p, f"{b}.conv")
            if mixer == "linear_attention":
                return ref_gated_deltanet(c, z, p, f"{b}.linear_attn")
            if mixer == "mamba":
                return ref_mamba(c, z, p, f"{b}.mixer")
            if mixer == "kda":
                return ref_kda(c, z, p, f"{b}.kda")
            if mixer == "mamba1":
                return ref_jamba_mixer(c, z, p, f"{b}.mixer")
            if mixer == "hybrid":  # FalconH1DecoderLayer: the mixer plus attention
                return ref_falcon_mixer(c, z, p, f"{b}.mixer") + ref_attention(
                    c, z, p, f"{b}.attn", window, chunk, i in c.nope_layers)
            return ref_attention(c, z, p, f"{b}.attn", window, chunk, i in c.nope_layers,
                                 (store, types[i], c.layer_kinds[i].shared)
                                 if c.kv_shared_layers else None)

        def mlp(z):
            return ref_moe(c, z, p, f"{b}.ffn") if moe else ref_mlp(c, z, p, f"{b}.ffn")
        if c.block == "single":  # NemotronHBlock: x + mixer(norm(x)), the mixer or the MLP
            h = ref_norm(c, x, p, f"{b}.ln1")
            x = x + m * (mlp(h) if c.layer_kinds[i].mixer == "mlp" else attn(h))
        elif c.block != "sequential":  # GPT-NeoX/Falcon: both sublayers read x
            h = ref_norm(c, x, p, f"{b}.ln1")
            x = x + m * attn(h) + m * mlp(h if c.block == "parallel_shared_norm"
                                          else ref_norm(c, x, p, f"{b}.ln2"))
        elif c.norm_placement == "pre":
            y = x + m * attn(ref_norm(c, x, p, f"{b}.ln1"))
            x = y + m * mlp(ref_norm(c, y, p, f"{b}.ln2"))
        elif c.norm_placement == "sandwich" and moe and c.mlp_beside_moe:
            # Gemma4TextDecoderLayer: the MLP and the experts (routed by y) side by side
            y = x + m * ref_norm(c, attn(ref_norm(c, x, p, f"{b}.ln1")), p, f"{b}.post_attn_norm")
            f = ref_norm(c, ref_mlp(c, ref_norm(c, y, p, f"{b}.ln2"), p, f"{b}.ffn"), p,
                         f"{b}.post_ffn_norm_1")
            e = ref_moe(c, ref_norm(c, y, p, f"{b}.pre_ffn_norm_2"), p, f"{b}.moe", router_x=y)
            f = f + ref_norm(c, e, p, f"{b}.post_ffn_norm_2")
            x = y + m * ref_norm(c, f, p, f"{b}.post_ffn_norm")
        elif c.norm_placement == "sandwich":  # Gemma2DecoderLayer
            y = x + m * ref_norm(c, attn(ref_norm(c, x, p, f"{b}.ln1")), p, f"{b}.post_attn_norm")
            x = y + m * ref_norm(c, mlp(ref_norm(c, y, p, f"{b}.ln2")), p, f"{b}.post_ffn_norm")
        else:  # OLMo-2
            y = x + m * ref_norm(c, attn(x), p, f"{b}.ln1")
            x = y + m * ref_norm(c, mlp(y), p, f"{b}.ln2")
        if ple is not None:  # Gemma4TextDecoderLayer's per-layer input, before layer_scalar
            g = F.gelu(ref_linear(x, p, f"{b}.per_layer_input_gate"), approximate="tanh")
            g = ref_linear(g * ple[..., i, :], p, f"{b}.per_layer_projection")
            x = x + ref_norm(c, g, p, f"{b}.post_per_layer_input_norm")
        if c.layer_scalar:  # Gemma4TextDecoderLayer: hidden_states *= layer_scalar
            x = x * p[f"{b}.layer_scalar"]
    head = p["token_embeddings.weight"] if c.tie_embeddings else p["lm_head.weight"]
    logits = F.linear(ref_norm(c, x, p, "ln_final"), head, p.get("lm_head.bias"))
    if c.logit_scale is not None:
        logits = logits * c.logit_scale
    if c.final_softcap is not None:  # Gemma2ForCausalLM
        logits = c.final_softcap * torch.tanh(logits / c.final_softcap)
    return logits


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_matches_its_functional_reference(name):
    c = variant(name)
    torch.manual_seed(0)
    lm = TransformerLM.from_config(c)
    with torch.no_grad():  # non-trivial gains and biases, so a swapped one would show
        for key, t in lm.named_parameters():
            if t.dim() == 1 or key.endswith(("experts.b1", "experts.b2", "experts.b3",
                                             "q_norm.weight", "k_norm.weight")):
                t.copy_(torch.rand_like(t) + 0.5 if key.endswith("weight") else torch.randn_like(t))
        for key, t in lm.named_buffers():
            if key.endswith("router_bias"):  # a bias that changes the choice
                t.copy_(torch.randn_like(t))
            if key.endswith("layer_scalar"):  # Gemma 4's: not 1, so a missing one would show
                t.fill_(0.75)
    p = {k: v.detach().double() for k, v in lm.state_dict().items()}
    ids = torch.randint(0, c.vocab_size, (2, 7))
    expected = ref_lm(c, ids, p)
    torch.testing.assert_close(lm(ids).double(), expected, **_tolerance(c, ids, expected))


def _tolerance(c, ids, expected) -> dict:
    """F32_TOL (float32 model, float64 reference), widened for gated-DeltaNet layers by the
    rounding their chunked scan may amplify. The UT transform solves a unit lower-triangular
    system over the T tokens of a chunk whose off-diagonal entries β_i·(k_i·k_j)·exp(Δg) are
    at most 1 in size (l2-normalized keys, β a sigmoid, decays ≤ 1); such a matrix's inverse
    has entries up to 2^(i−j−1) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
    ed., §8.3), so forward substitution's float32 rounding (u = 2^−24 an operation, T of them
    a row) grows by up to T·2^(T−1)·u relative to the layer's scale, in each such layer; the
    logits' scale is max|logits|. Both sides run the scan in float32: transformers'
    torch_chunk_gated_delta_rule casts q, k, v, β, g .to(torch.float32) whatever its input
    (and Qwen3NextRMSNormGated too), as model/delta.py does after it. Measured for
    qwen3_next (T = 7, 3 such layers): 6.9e-5 off at most on logits up to 5.95, against
    this bound's 4.8e-4; with those float32 casts lifted on both sides the two agree to
    1.7e-13 in float64 (the algorithm is the same; the difference is rounding only). A
    wrong weight or gate moves the logits by O(0.1)."""
    layers = sum(1 for t in (c.layer_types or ()) if t == "linear_attention")
    if not layers:
        return F32_TOL
    t = ids.shape[-1]
    scan = layers * t * 2 ** (t - 1) * 2.0 ** -24 * expected.abs().max().item()
    return dict(rtol=F32_TOL["rtol"], atol=max(F32_TOL["atol"], scan))


def test_alibi_slopes_are_transformers_own():
    # 6 heads: 2^(−8i/4) for i = 1..4, then 2^(−4i/4) for i = 1, 3 (written out by hand)
    from model.attention import alibi_slopes
    assert alibi_slopes(6).tolist() == [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]
    torch.testing.assert_close(alibi_slopes(12), ref_alibi(12, 2)[:, 0, 1].float())  # float32


def test_grouped_attention_does_not_copy_k_and_v():
    # GQA broadcasts each K/V head over its group: no aten op makes a tensor of h heads
    # from the h_kv heads (an expand + copy, as transformers' repeat_kv does)
    from torch.utils._python_dispatch import TorchDispatchMode
    c = variant("gqa")  # h = 4, h_kv = 2, d_k = 8
    lm = TransformerLM.from_config(c)
    shapes = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.__name__.startswith(("clone", "expand", "repeat")) and isinstance(out, torch.Tensor):
                shapes.append((func.__name__, tuple(out.shape)))
            return out
    with Log():
        lm(torch.zeros(1, 5, dtype=torch.long))
    # the copies made are V in heads layout (h_kv heads) and the merged output, never 4 K/V heads
    assert all(math.prod(s) in (1 * 2 * 5 * 8, 1 * 5 * 32) for _, s in shapes), shapes
