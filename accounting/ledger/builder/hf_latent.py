"""Multi-head latent attention as transformers writes it (DeepseekV3Attention,
models/deepseek_v3/modeling_deepseek_v3.py, transformers 5.23), where model/'s
LatentAttention differs, each save measured with saved-tensor hooks on transformers' own
model on the CPU (tests/test_transformers_deepseek.py):

  * one rotary module for the model (DeepseekV3RotaryEmbedding: inv_freq of d_rope/2,
    cos/sin (T, d_rope) once per pass), rotated by apply_rotary_pos_emb_interleave: the
    even and odd dims times the first half of cos/sin, concatenated (saves cos and sin);
  * query_states = cat(q_pass, q_rot); key_states = new_empty(...) with k_nope and the
    shared RoPE key (expanded over the heads) copied in: a new tensor of kv's dtype;
  * the values stay a view of kv_b_proj's output, which SDPA reads (and saves) as it is:
    no zero padding to d_k (model/'s fused path pads), the kernel's output d_v wide;
  * DeepSeek-V3.2 (DeepseekV32Attention, models/deepseek_v32): the indexer after the key
    (latent_attention.Indexer's transformers branch, no_grad), its top-k scattered into a
    bool mask & the causal one, SDPA's attn_mask in every layer (Attention.run_core).

On the CPU torch's flash kernel needs one head size for q, k and v (d_v = d_k); with
d_v ≠ d_k it falls back to the math kernel (the T×T probabilities saved). On CUDA the
memory-efficient and cuDNN kernels take d_v ≠ d_k (torch/nn/attention: sdp_utils
check_head_dim_size_mem_efficient): the ledger plans that fused kernel (q, k, v, the output
and the log-sum-exp saved), measured here with d_v = d_k. With V3.2's mask CUDA's flash
kernel is out (sdp_utils.cpp use_flash_attention: check_for_attn_mask) and the
memory-efficient one runs, saving the additive mask too, as the CPU's flash kernel does.
"""
from __future__ import annotations

from accounting.ledger.trace import Sym


def forward(attn, x: Sym, out_label: str, out_course: str) -> Sym:
    t, a = attn.t, attn.a
    heads = ("B", "h", "T")
    with t.scope("attn"):
        if attn.q_proj is not None:
            q = attn.q_proj(x, "Q projection output", "Q/K/V projections")
        else:
            q = attn.q_a_proj(x, "Q latent", "Q/K/V projections")
            q_latent = q = attn.q_a_norm(q, "Q latent after its norm")
            q = attn.q_b_proj(q, "Q projection output", "Q/K/V projections")
        q = t.view(q, heads + ("d_k",), contiguous=False)  # .view(...).transpose(1, 2)
        q_pass = t.view(q, heads + ("d_nope",), contiguous=False)  # torch.split: views
        q_rot = t.view(q, heads + ("d_rope",), contiguous=False)
        latent = attn.kv_a_proj(x, "KV latent and RoPE key", "Q/K/V projections")
        t.cached("latent c_KV and RoPE key", ("d_kv_a",), window=attn.local)
        c_kv = t.view(latent, ("B", "T", "r_kv"))
        k_rot = t.view(latent, ("B", "1", "T", "d_rope"), contiguous=False)
        c_kv = attn.kv_a_norm(c_kv, "KV latent after its norm")
        q_rot = a.rotary.rotate(q_rot, a.rope_tables, "Q RoPE part after RoPE")
        k_rot = a.rotary.rotate(k_rot, a.rope_tables, "shared RoPE key after RoPE")
        q = t.name(t.cat((q_pass, q_rot), heads + ("d_k",)), "Q (no-RoPE and RoPE parts)")
        kv = attn.kv_b_proj(c_kv, "KV up-projection output", "Q/K/V projections",
                            reads_cache=True)
        kv = t.view(kv, heads + ("d_kv_b",), contiguous=False)
        k_nope = t.view(kv, heads + ("d_nope",), contiguous=False)
        v = t.view(kv, heads + ("d_v",), contiguous=False)
        # expand_kv: kv_nope.new_empty(…) and two copy_ (no saves), in kv's dtype
        k = t.cat((k_nope, k_rot), heads + ("d_k",))
        k.dtype = kv.dtype
        k = t.name(k, "K (no-RoPE part and the shared RoPE key)")
        if attn.indexer is not None:  # DeepseekV32Attention: self.indexer(x, q_resid, …)
            attn.indexer(x, q_latent)  # under no_grad; its top-k becomes the core's mask
        out = attn.run_core(q, k, v)
        return attn.output_proj(attn.merge(out, ("h", "d_v")), out_label, out_course)
