"""The spec's choices in words (ModelConfig.architecture): one clause per feature that
differs from the course's model, e.g. 'pre-norm RMSNorm, SwiGLU, RoPE, multi-head attention,
untied LM head, no biases'. Formatting only."""
from __future__ import annotations

from accounting.architecture.choices import NORMS, POSITIONS, QK_NORMS


def architecture(c) -> str:
    """`c` (a ModelConfig) in words."""
    h, kv = c.num_heads, c.kv_heads
    attn = ("multi-head attention" if kv == h else "multi-query attention" if kv == 1
            else f"grouped-query attention ({h // kv} query heads per KV head)")
    if c.d_k * h != c.d_model:
        attn += f", head_dim {c.d_k}"
    biases = [n for n, on in (("QKV", c.qkv_bias), ("attention output", c.out_bias),
                              ("MLP", c.mlp_bias), ("LM head", c.lm_head_bias), ("router", c.router_linear_bias),
                              ("experts", c.expert_bias)) if on]
    placement = {"pre": "pre-norm", "post": "post-sublayer-norm",
                 "sandwich": "sandwich-norm"}[c.norm_placement]
    parts = [f"{placement} {NORMS[c.norm]}" + (" (1 + w gains)" if c.norm_offset else ""),
             c.mlp_kind.label, POSITIONS[c.positions], attn]
    if c.rotary_dim is not None:
        parts[2] = f"RoPE on {c.rotary_dim} of {c.d_k} dims per head"
    if c.qk_norm != "none":
        parts.append(QK_NORMS[c.qk_norm])
    if c.global_shape or c.v_norm:  # Gemma 4
        parts.append(", ".join(([f"global layers: head_dim {c.global_d_k}, {c.global_kv}"
                                 f" K/V heads" + (", V = K" if c.global_k_eq_v else "")]
                                if c.global_shape else []) + ["RMS-normed V"] * c.v_norm))
    if c.attention_sinks:
        parts.append("attention sinks")
    if c.attn_output_gate:
        parts.append("sigmoid-gated attention output")
    if c.index_topk is not None:
        parts.append(f"sparse attention: an indexer of {c.index_heads} heads × "
                     f"{c.index_head_dim} picks {c.index_topk:,} keys per query")
    if c.mla:
        parts[3] = (f"multi-head latent attention (kv_lora_rank {c.kv_lora_rank}"
                    + (f", q_lora_rank {c.q_lora_rank}" if c.q_lora_rank else "") + ")")
    if c.block == "single":  # Nemotron-H
        parts.insert(1, "one sublayer per block (a token mixer or an MLP)")
    elif c.block != "sequential":
        parts.insert(1, "parallel attention and MLP" + (
            " (one shared norm)" if c.block == "parallel_shared_norm" else ""))
    kinds = c.layer_kinds
    n_local = sum(k.local for k in kinds)
    if n_local:
        parts.append(f"sliding window {c.sliding_window:,}"
                     + ("" if n_local == len(kinds) else f" on {n_local} of {len(kinds)} layers"))
    n_chunked, n_nope = sum(k.chunked for k in kinds), sum(k.nope for k in kinds)
    if n_chunked:
        parts.append(f"chunked attention {c.attention_chunk:,}"
                     + ("" if n_chunked == len(kinds) else f" on {n_chunked} of {len(kinds)} layers"))
    if n_nope:
        parts.append(f"no RoPE on {n_nope} of {len(kinds)} layers"
                     + (", temperature tuning there" if c.temperature_floor else ""))
    split = ", split in_proj" if c.linear_split_proj else ""
    for mixer, what in (("linear_attention", "gated DeltaNet (chunk "
                         f"{c.linear_chunk}{split})"), ("kda", "Kimi Delta Attention (chunk "
                         f"{c.linear_chunk})"), ("conv", "short convolution"),
                        ("mamba", f"Mamba-2 (chunk {c.mamba_chunk})"),
                        ("hybrid", f"attention beside Mamba-2 (chunk {c.mamba_chunk})"),
                        ("mamba1", "Mamba-1 (a sequential selective scan)")):
        n = sum(k.mixer == mixer for k in kinds)
        if n:
            parts.append(f"{what} on {n} of {len(kinds)} layers (conv width "
                         f"{c.conv_kernel})")
    if c.num_experts is not None:
        n_moe = sum(k.moe for k in kinds)
        parts.append(f"MoE: {c.num_experts} experts, top-{c.experts_per_token}"
                     + (f", {c.num_shared_experts} shared" if c.num_shared_experts else "")
                     + (" (sigmoid-gated)" if c.shared_expert_gate else "")
                     + (" beside a dense MLP" if c.mlp_beside_moe else "")
                     + ("" if n_moe == len(kinds) else f", on {n_moe} of {len(kinds)} layers"))
    if c.mup_multipliers:
        parts.append("muP multipliers (Falcon-H1)")
    if c.attention != "naive":
        parts.append("fused attention kernel (SDPA)")
    parts += [f"{what} {value:g}" for what, value in (
        ("embeddings ×", c.embedding_multiplier), ("sublayer outputs ×", c.residual_multiplier),
        ("scores soft-capped at", c.attn_softcap), ("logits ×", c.logit_scale),
        ("logits soft-capped at", c.final_softcap)) if value is not None]
    if c.fused_gelu:  # transformers' gelu_pytorch_tanh (the course's model: the eight ops)
        parts[parts.index(c.mlp_kind.label)] += " as one fused op (gelu_pytorch_tanh)"
    drops = [(w, p) for w, p in (("embeddings", c.embedding_dropout),
                                 ("attention probabilities", c.attention_dropout),
                                 ("sublayer outputs", c.residual_dropout)) if p]
    if len({p for _, p in drops}) == 1:
        where = [w for w, _ in drops]
        parts.append(f"dropout {drops[0][1]:g} on " + (", ".join(where[:-1]) + " and "
                     if len(where) > 1 else "") + f"{where[-1]} (training only)")
    elif drops:
        parts.append("dropout " + ", ".join(f"{p:g} on {w}" for w, p in drops)
                     + " (training only)")
    parts.append("tied LM head" if c.tie_embeddings else "untied LM head")
    parts.append("biases on " + ", ".join(biases) if biases else "no biases")
    return ", ".join(parts)
