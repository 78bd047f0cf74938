"""Multi-head latent attention (DeepSeek): model/latent_attention.py's ops, as facts."""
from __future__ import annotations

from contextlib import nullcontext

from accounting.ledger import records as R
from accounting.architecture.config import NORMS
from accounting.ledger.trace import Sym, Trace
from accounting.units import FP32
from accounting.ledger.builder.common import INDEXER, NORM_PARAMS, Arch
from accounting.ledger.builder.layers import Linear, Norm, RoPE
from accounting.ledger.builder.attention import Attention
from accounting.ledger.builder import hf_latent


class Indexer:
    """DeepSeek-V3.2's lightning indexer (model/latent_attention.py Indexer), under
    torch.no_grad: wq_b on the query latent, wk and a LayerNorm for one key per token,
    RoPE on the first d_rope dims of each, the h_I·T×T scores (ReLU, scaled), weighted by
    weights_proj(x) and summed over the heads, the causal mask, the top k_I keys.

    Under transformers (hf: the Arch, DeepseekV32Indexer in modeling_deepseek_v32.py,
    5.23): the model's cos/sin tables (DeepSeek's interleaved ones) applied by the plain
    apply_rotary_pos_emb (rotate_half) to the first d_rope dims; q.float() and k.float()
    before the scores (fp32 scores and weighted sum whatever the model's dtype); nothing
    saved (@torch.no_grad)."""

    def __init__(self, t: Trace, rope: RoPE | None, hf: Arch | None = None):
        self.t, self.rope, self.hf = t, rope, hf
        d, I = ("d_model",), ("d_I",)
        # transformers: its forward is @torch.no_grad and nothing else reads its weights, so
        # they get no gradient and AdamW no state (measured: tests/test_transformers_deepseek.py
        # two moments); model/'s is no_grad too, but the course plans it trained ("DeepSeek
        # trains it apart", model/latent_attention.py)
        untrained = t.untrained() if hf is not None else nullcontext()
        with t.scope("indexer"), untrained:
            self.wq_b = Linear(t, "wq_b", ("r_q",), ("h_I", "d_I"), R.ATTN_PROJ,
                               "indexer Q projection")
            self.wk = Linear(t, "wk", d, I, R.ATTN_PROJ, "indexer K projection")
            self.k_norm = Norm(t, "k_norm", "layernorm", I, NORMS["layernorm"],
                               NORM_PARAMS["layernorm"])
            self.weights_proj = Linear(t, "weights_proj", d, ("h_I",), R.ATTN_PROJ,
                                       "indexer head weights")

    def __call__(self, x: Sym, q_latent: Sym) -> None:
        t = self.t
        with t.scope("indexer"), t.no_grad():
            q = self.wq_b(q_latent, "indexer queries")
            q = t.view(q, ("B", "T", "h_I", "d_I"), contiguous=True)
            k = self.k_norm(self.wk(x, "indexer key"), "indexer key after its norm")
            if self.hf is not None:  # q_rot, k_rot = apply_rotary_pos_emb(…); cat; .float()
                q, k = (self._hf_rotate(y, what) for y, what in ((q, "Q"), (k, "K")))
            elif self.rope is not None:  # the first d_rope dims rotated, the rest passed through
                positions = t.fresh(("T",), R.INT64)
                q = t.cat((self.rope.rotate(t.view(q, ("B", "T", "h_I", "d_rope"), False),
                                            positions, "indexer Q after RoPE"),
                           t.view(q, ("B", "T", "h_I", "d_I_pass"), False)), q.shape)
                k = t.cat((self.rope.rotate(t.view(k, ("B", "T", "d_rope"), False), positions,
                                            "indexer K after RoPE"),
                           t.view(k, ("B", "T", "d_I_pass"), False)), k.shape)
            t.cached("indexer key", ("d_I",))
            # einsum("bshd,btd->bsht"): B bmm of (T·h_I × d_I) @ (d_I × T), all T² pairs
            dtype = t.matmul(q, k, R.Matmul("indexer scores", R.ATTN_CORE, t.module, t.repeat,
                                            R.FORWARD, ("B",), ("T", "h_I"), ("d_I",), ("T",),
                                            causal=True, note="the indexer's T² (no gradient)"))
            scores = Sym(("B", "T", "h_I", "T"), dtype)
            scores = t.binary("aten.mul", scores, None, "indexer scores / √d_I", INDEXER)
            scores = t.unary("aten.relu", scores, "ReLU", INDEXER)
            w = self.weights_proj(x, "indexer head weights")
            if self.hf is not None:  # weights_proj(x.to(its weight's dtype)).float()
                w = t.cast(w, FP32, "indexer head weights (float)")
            w = t.binary("aten.mul", w, None, "× h_I^(−1/2)", INDEXER)
            # einsum("bsh,bsht->bst"): B·T bmm of (1 × h_I) @ (h_I × T)
            dtype = t.matmul(w, scores, R.Matmul("indexer weighted sum", R.ATTN_CORE, t.module,
                                                 t.repeat, R.FORWARD, ("B", "T"), (), ("h_I",),
                                                 ("T",), causal=True,
                                                 note="the indexer's T² (no gradient)"))
            index = Sym(("B", "T", "T"), dtype)
            index = t.masked_fill(index, t.fresh(("T", "T"), R.BOOL), "causal mask", INDEXER)
            t.topk(index, ("T",), ("k_I",), "top-k keys", INDEXER, out="")

    def _hf_rotate(self, x: Sym, what: str) -> Sym:
        """torch.split(x, [d_rope, d_I − d_rope]), the first part rotated (rotate_half on
        the model's tables), torch.cat back, .float() (a copy unless fp32 already)."""
        t, a = self.t, self.hf
        lead = x.shape[:-1]
        rot = a.rotary.rotate(t.view(x, lead + ("d_rope",), False), a.rope_tables,
                              f"indexer {what} after RoPE", half_split=True)
        y = t.cat((rot, t.view(x, lead + ("d_I_pass",), False)), x.shape)
        return t.cast(y, FP32, f"indexer {what} (float)")


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
            # transformers: one rotary module for the model (transformer.walk), none here
            self.rope = RoPE(t, "d_rope") if c.positions == "rope" and not a.hf else None
            # DeepSeek-V3.2: registered after the RoPE tables (model/'s order)
            self.indexer = Indexer(t, self.rope, a if a.hf else None) \
                if c.index_topk is not None else None
        self.topk = c.index_topk is not None  # the core keeps the indexer's k_I keys
        # model/'s F.pad of V to d_k for its fused kernel (transformers passes V as it is)
        self.pad = c.attention == "sdpa" and c.v_head_dim != c.d_k and not a.hf
        self.v_dim = "d_k" if self.pad else "d_v"
        self.v_useful = ("B", "h", "P_W" if local else "P_K" if self.topk else "P", "d_v") \
            if self.pad else None

    def __call__(self, x: Sym, out_label: str, out_course: str) -> Sym:
        if self.a.hf:  # DeepseekV3Attention's ops (builder/hf_latent.py)
            return hf_latent.forward(self, x, out_label, out_course)
        t = self.t
        heads = ("B", "h", "T")
        with t.scope("attn"):
            if self.q_proj is not None:
                q = self.q_proj(x, "Q projection output", "Q/K/V projections")
            else:
                q = self.q_a_proj(x, "Q latent", "Q/K/V projections")
                q_latent = q = self.q_a_norm(q, "Q latent after its norm")
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
            if self.indexer is not None:  # the mask: causal and the top k_I (no FLOPs there)
                self.indexer(x, q_latent)
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
