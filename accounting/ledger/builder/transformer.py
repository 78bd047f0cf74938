"""Blocks and the LM, and walk(): model/transformer.py's ops, as facts, in its order."""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.architecture.config import NORMS, ModelConfig
from accounting.ledger.symbols import SAVED_AS_BLOCK_INPUT
from accounting.ledger.trace import LOSS, Sym, Trace
from accounting.ledger.builder.common import (POSITION_ADD, RESIDUAL, NORM_PARAMS, ROW, Arch, COURSE,
                                              TRANSFORMERS,
                                              EMBED_SCALE, LOGIT_SCALE, MUP, PER_LAYER,
                                              RESIDUAL_SCALE, SOFTCAP, deepseek_v2_layout,
                                              gemma2_layout, llama4_layout,
                                              gemma3_layout, gemma4_layout, gpt2_layout,
                                              gpt_oss_layout, nemotron_h_layout,
                                              qwen3_next_layout)
from accounting.ledger.builder.layers import Linear, Norm, activation, FeedForward, RotaryEmbedding
from accounting.units import FP32
from accounting.ledger.builder.attention import Attention
from accounting.ledger.builder.latent_attention import LatentAttention
from accounting.ledger.builder.moe import MoE
from accounting.ledger.builder import hf_gemma4, hf_loss, lora, megatron
from accounting.ledger.builder.dropout import native_dropout
from accounting.ledger.builder.recurrent import ShortConv
from accounting.ledger.builder.delta import GatedDeltaNet
from accounting.ledger.builder.kda import KimiDeltaAttention
from accounting.ledger.builder.mamba import Mamba2Mixer
from accounting.ledger.builder.mamba1 import Mamba1Mixer


class Block:
    mamba = None  # a hybrid layer's Mamba-2 mixer beside its attention (Falcon-H1)

    def __init__(self, t: Trace, a: Arch, recompute: str = "none", kind=None):
        self.t, self.c, self.recompute, self.kind, self.a = t, a.c, recompute, kind, a
        comp, kind, off = NORM_PARAMS[a.c.norm], a.c.norm, a.c.norm_offset
        sandwich = a.c.norm_placement == "sandwich"
        # Gemma 4's layer_scalar: a persistent one-element float32 buffer (the block's own
        # buffers come before its children's keys in the state dict)
        # (transformers: nn.Buffer(torch.ones(1)) in the default dtype, bf16 in a model
        # built with dtype=torch.bfloat16)
        size = R.DTYPE_BYTES[t.param_dtype] if t.hf_gemma4 else 4
        self.layer_scalar = (t.name(t.buffer("layer_scalar", ("1",), size, persistent=True),
                                    "layer_scalar") if a.c.layer_scalar else None)
        self.ln1 = Norm(t, "ln1", kind, ("d_model",), NORMS[kind], comp, off)
        local = self.kind is not None and self.kind.local
        mixer = "attention" if self.kind is None else self.kind.mixer
        single = a.c.block == "single"  # one sublayer per block (Nemotron-H)
        if mixer == "mlp":
            self.attn = None
        elif mixer == "conv":
            self.attn = ShortConv(t, a)
        elif mixer == "linear_attention":
            self.attn = GatedDeltaNet(t, a)
        elif mixer == "kda":
            self.attn = KimiDeltaAttention(t, a)
        elif mixer == "mamba":
            self.attn = Mamba2Mixer(t, a)
        elif mixer == "mamba1":
            self.attn = Mamba1Mixer(t, a)
        elif mixer == "hybrid":  # Falcon-H1: the Mamba-2 mixer first, then attention
            self.mamba = Mamba2Mixer(t, a)
            self.attn = Attention(t, a, recompute)
        elif a.c.mla:
            self.attn = LatentAttention(t, a, recompute, local)
        else:
            lk = self.kind  # the block's LayerKind (`kind` above is the norm's)
            # (torchtitan's selective recomputation is per op: the block's, not the core's)
            self.attn = Attention(t, a, "none" if a.titan else recompute, local,
                                  lk is not None and lk.chunked, lk is not None and lk.nope,
                                  lk is not None and lk.shared)
        self.post_attn_norm = (Norm(t, "post_attn_norm", kind, ("d_model",), NORMS[kind], comp, off)
                               if sandwich else None)
        self.ln2 = None if a.c.block in ("parallel_shared_norm", "single") else \
            Norm(t, "ln2", kind, ("d_model",), NORMS[kind], comp, off)
        moe = self.kind is not None and self.kind.moe
        self.moe = None
        if moe and a.c.mlp_beside_moe:  # Gemma 4: the dense MLP and the experts side by side
            self.ffn = FeedForward(t, a.c)
            self.moe = MoE(t, a.c, scope="moe")
            self.moe_norms = tuple(Norm(t, n, kind, ("d_model",), NORMS[kind], comp, off)
                                   for n in ("post_ffn_norm_1", "pre_ffn_norm_2",
                                             "post_ffn_norm_2"))
        else:  # Gemma 4's KV-sharing layers: 2·d_ff wide with use_double_wide_mlp
            wide = "2d_ff" if a.c.double_wide_mlp and self.kind.shared else "d_ff"
            self.ffn = None if single and mixer != "mlp" else \
                MoE(t, a.c) if moe else FeedForward(t, a.c, wide)
        self.post_ffn_norm = (Norm(t, "post_ffn_norm", kind, ("d_model",), NORMS[kind], comp, off)
                              if sandwich else None)
        # Gemma4TextDecoderLayer's per-layer input: gate (d → d_ple), act, × the layer's
        # slice of the per-layer inputs, projection (d_ple → d), norm, added to the residual
        self.ple = None
        if a.c.per_layer_input is not None:
            self.ple = (Linear(t, "per_layer_input_gate", ("d_model",), ("d_ple",), R.FFN,
                               "per-layer input gate"),
                        Linear(t, "per_layer_projection", ("d_ple",), ("d_model",), R.FFN,
                               "per-layer projection"),
                        Norm(t, "post_per_layer_input_norm", kind, ("d_model",), NORMS[kind],
                             comp, off))


    def __call__(self) -> None:
        t, pre = self.t, self.c.norm_placement == "pre"
        x = t.name(t.fresh(ROW, grad=True), "ln1 input" if pre else "block input",
                   f"{NORMS[self.c.norm]} inputs" if pre else "", block_input=True)
        if self.recompute == "selective" and self.a.titan:  # torchtitan's per-op SAC
            with t.policy_region("block (per-op selective checkpointing)", (x,)):
                self.run(x)
        elif self.recompute == "full":  # checkpoint(block, x): keeps x, runs it again
            # transformers passes the rotary cos/sin into each layer, Megatron its
            # frequencies: checkpoint keeps them (one storage for every layer)
            extra = tuple(self.a.rope_tables) if self.a.hf and self.a.rope_tables else \
                (self.a.freqs,) if self.a.freqs is not None else ()
            if t.hf_gemma4:  # and what Gemma 4's layers are passed besides
                extra += hf_gemma4.checkpoint_kept(t, self.a, self.kind)
            with t.recomputed_region("block", (x,) + extra):
                self.run(x)
        else:
            self.run(x)

    def scaled(self, out: Sym) -> Sym:
        """TransformerBlock.scaled: × residual_multiplier (Granite), a scalar: nothing saved."""
        m = self.c.residual_multiplier
        return out if m is None else self.t.binary("aten.mul", out, None, "sublayer output · m",
                                                     RESIDUAL_SCALE)

    def dropout(self, out: Sym, where: str) -> Sym:
        """A sublayer output's dropout: Megatron's (its --dropout), or transformers'
        nn.Dropout(resid_pdrop) in training (GPT2Attention.resid_dropout, GPT2MLP.dropout)."""
        if self.a.megatron:
            return megatron.dropout(self.t, out, where)
        p = self.c.residual_dropout if self.a.hf else 0  # model/ has no dropout
        return native_dropout(self.t, out, p, where)

    def run(self, x: Sym) -> None:
        t, norm_course = self.t, f"{NORMS[self.c.norm]} inputs"
        if self.c.block == "single":  # x + sublayer(ln1(x)): the mixer, or the MLP
            h = self.ln1(x, "ln1 output")
            o = self.attn(h, "output projection output", "output projection") \
                if self.attn is not None else self.ffn(h, "W2")
            t.binary("aten.add", x, self.scaled(o), "x + sublayer", RESIDUAL)
        elif self.c.block != "sequential":  # z = x + attn(ln1(x)) + ffn(ln2(x) or ln1(x))
            h = self.ln1(x, "ln1 output")
            o = self.scaled(self.attn(h, "output projection output", "output projection"))
            y = t.binary("aten.add", x, o, "x + attn + ffn (parallel)", RESIDUAL)
            m = self.scaled(self.ffn(h if self.ln2 is None else self.ln2(x, "ln2 output"), "W2"))
            t.binary("aten.add", y, m, "x + attn + ffn (parallel)", RESIDUAL)
        elif self.c.norm_placement == "pre":  # (Megatron: each sublayer's output dropped out)
            h = self.ln1(x, "ln1 output")
            o = self.scaled(self.attn(h, "output projection output", "output projection")
                            if self.mamba is None else self.hybrid(h))
            o = self.dropout(o, "attention's hidden")
            y = t.binary("aten.add", x, o, "x + attn, y + ffn", RESIDUAL)
            y = t.name(y, "ln2 input", norm_course)
            h = self.ln2(y, "ln2 output")
            f = self.dropout(self.scaled(self.ffn(h, "W2")), "MLP's hidden")
            t.binary("aten.add", y, f, "x + attn, y + ffn", RESIDUAL)
        elif self.c.norm_placement == "sandwich":  # Gemma 2/3: norms before and after
            h = self.ln1(x, "ln1 output")
            o = self.attn(h, "output projection output", "output projection")
            o = self.scaled(self.post_attn_norm(o, "post_attn_norm output"))
            y = t.binary("aten.add", x, o, "x + post_attn_norm(attn), y + post_ffn_norm(ffn)",
                         RESIDUAL)
            y = t.name(y, "ln2 input", norm_course)
            h = self.ln2(y, "ln2 output")
            f = self.ffn(h, "W2")
            if self.moe is not None:  # Gemma4TextDecoderLayer: norm_1(mlp) + norm_2(experts)
                post1, pre2, post2 = self.moe_norms
                f = post1(f, "post_ffn_norm_1 output")
                m = self.moe(pre2(y, "pre_ffn_norm_2 output"), "experts W2", router_x=y)
                f = t.binary("aten.add", f, post2(m, "post_ffn_norm_2 output"),
                             "MLP + experts", RESIDUAL, out="MLP + experts")
            f = self.scaled(self.post_ffn_norm(f, "post_ffn_norm output"))
            z = t.binary("aten.add", y, f, "x + post_attn_norm(attn), y + post_ffn_norm(ffn)",
                         RESIDUAL, out="block output (before layer_scalar)")
            if self.ple is not None:
                z = self.per_layer(z)
            if self.layer_scalar is not None:  # hidden_states *= self.layer_scalar
                # (transformers: mul_ saves the buffer itself, held anyway: not again here)
                scalar = (Sym(("1",), FP32, False, param="layer_scalar") if t.hf_gemma4
                          else self.layer_scalar)
                t.binary("aten.mul", z, scalar, "× layer_scalar", RESIDUAL_SCALE,
                         out="block output")
        else:  # OLMo-2: y = x + ln1(attn(x)); z = y + ln2(ffn(y))
            o = self.attn(x, "output projection output", "output projection")
            y = t.binary("aten.add", x, self.scaled(self.ln1(o, "ln1 output")),
                         "x + ln1(attn), y + ln2(ffn)", RESIDUAL)
            y = t.name(y, "residual after attention (ffn input)")
            f = self.ffn(y, "W2")
            t.binary("aten.add", y, self.scaled(self.ln2(f, "ln2 output")),
                     "x + ln1(attn), y + ln2(ffn)", RESIDUAL)


    def per_layer(self, z: Sym) -> Sym:
        """Gemma4TextDecoderLayer: z + post_per_layer_input_norm(per_layer_projection(
        act(per_layer_input_gate(z)) · per_layer_input)), the input this layer's slice
        (per_layer_inputs[:, :, i, :], a view) of the model's per-layer inputs."""
        t, (gate, proj, norm) = self.t, self.ple
        g = gate(z, "per-layer input gate output", "per-layer input gate")
        g = activation(t, self.c.mlp_kind.activation, g, PER_LAYER, "per-layer input gate")
        mine = t.view(self.a.ple, ("B", "T", "d_ple"), contiguous=False)
        g = t.binary("aten.mul", g, mine, "× per-layer input", PER_LAYER,
                     out="gated per-layer input")
        o = norm(proj(g, "per-layer projection output", "per-layer projection"),
                 "post_per_layer_input_norm output")
        return t.binary("aten.add", z, o, "+ per-layer input", RESIDUAL,
                        out="block output (before layer_scalar)")

    def hybrid(self, h: Sym) -> Sym:
        """FalconH1DecoderLayer: mamba(h)·ssm_out_multiplier + attn(h·attention_in_multiplier)
        ·attention_out_multiplier (the multipliers with mup_multipliers)."""
        t, mup = self.t, self.c.mup_multipliers
        m = self.mamba(h, "Mamba-2 out_proj output", "output projection")
        if mup:
            m = t.binary("aten.mul", m, None, "Mamba-2 output · ssm_out_multiplier", MUP)
            h = t.name(t.binary("aten.mul", h, None, "x · attention_in_multiplier", MUP),
                       "attention input · attention_in_multiplier")
        o = self.attn(h, "output projection output", "output projection")
        if mup:
            o = t.binary("aten.mul", o, None, "attention output · attention_out_multiplier", MUP)
        return t.binary("aten.add", m, o, "Mamba-2 + attention", RESIDUAL)


class PerLayerEmbeddings:
    """Gemma4TextModel's per-layer embeddings (modeling_gemma4.py, transformers 5.23.0):
    embed_tokens_per_layer (V_ple × L·d_ple, scaled by √d_ple), per_layer_model_projection
    (d_model → L·d_ple, × d_model^-½), per_layer_projection_norm (RMSNorm over d_ple); the
    per-layer inputs (projection + embedding)·2^-½, (B, T, L, d_ple), each block its slice."""

    def __init__(self, t: Trace, c: ModelConfig):
        self.t, self.c = t, c
        with t.scope("per_layer_embeddings"):
            self.table = t.param("weight", ("V_ple", "L·d_ple"), R.EMBEDDING, lookup=True)
            # transformers: a Gemma4TextScaledWordEmbedding, its 0-dim embed_scale buffer
            self.scale = (t.buffer("embed_scale", (), R.DTYPE_BYTES[t.param_dtype])
                          if t.hf_gemma4 else None)
        self.proj = Linear(t, "per_layer_model_projection", ("d_model",), ("L·d_ple",), R.FFN,
                           "per-layer model projection")
        comp = NORM_PARAMS[c.norm]
        self.norm = Norm(t, "per_layer_projection_norm", c.norm, ("d_ple",), NORMS[c.norm],
                         comp, c.norm_offset)

    def __call__(self, ids: Sym, x: Sym) -> Sym:
        t, packed = self.t, ("B", "T", "L", "d_ple")
        with t.scope("per_layer_embeddings"):
            e = t.lookup(self.table, ids, ("B", "T", "L·d_ple"))
        # × embed_scale.to(weight.dtype) (transformers: the product saves the buffer, held
        # anyway) or × √d_ple, a scalar
        scale = None if self.scale is None else Sym((), t.param_dtype, False,
                                                    param="per_layer_embeddings.embed_scale")
        e = t.binary("aten.mul", e, scale, "per-layer embedding · √d_ple", EMBED_SCALE)
        e = t.view(e, packed, contiguous=True)
        # the same tensor is block 0's input (saved by its ln1 there): counted once, there;
        # transformers' Gemma4RMSNorm saves an fp32 copy of a bf16 input instead (x.float()),
        # so with bf16 parameters the projection's save is this tensor's only one
        copied = t.hf_gemma4 and x.dtype != FP32
        # (with LoRA, transformers' x is enable_input_require_grads' leaf: its AccumulateGrad
        # node holds it, lora.keep_leaf)
        label = (lora.LEAF if t.hf_gemma4 and t.adapters is not None
                 else "scaled embeddings (per-layer projection input)")
        x = t.name(x, label, saved_if=None if copied else SAVED_AS_BLOCK_INPUT)
        p = self.proj(x, "per-layer model projection output", "per-layer model projection")
        p = t.name(t.binary("aten.mul", p, None, "× d_model^-½", PER_LAYER),
                   "per-layer projection · d_model^-½")
        p = self.norm(t.view(p, packed, contiguous=True), "per-layer projection normed")
        s = t.binary("aten.add", p, e, "projection + embedding", PER_LAYER)
        return t.name(t.binary("aten.mul", s, None, "× 2^-½", PER_LAYER),
                      "per-layer inputs", "per-layer embeddings")


def _symbol(kind, kinds) -> str:
    """"L" when every block is alike, else L_ and what sets this kind apart."""
    if len(kinds) == 1:
        return "L"
    parts = []
    if len({k.mixer for k in kinds}) > 1:
        parts.append({"attention": "attn", "linear_attention": "linear", "kda": "kda", "conv": "conv",
                      "mamba": "mamba", "hybrid": "hybrid", "mamba1": "mamba1",
                      "mlp": "mlp"}[kind.mixer])
    if len({k.local for k in kinds}) > 1:
        parts.append("local" if kind.local else "global")
    if len({k.chunked for k in kinds}) > 1:
        parts.append("chunked" if kind.chunked else "full")
    if len({k.moe for k in kinds}) > 1:
        parts.append("moe" if kind.moe else "dense")
    if len({k.nope for k in kinds}) > 1:
        parts.append("nope" if kind.nope else "rope")
    if len({k.shared for k in kinds}) > 1:
        parts.append("shared" if kind.shared else "own")
    return "L_" + "_".join(parts)


def walk(c: ModelConfig, autocast: str | None = None, recompute: str = "none",
         fold: bool = True, implementation: str = COURSE, param_dtype: str = FP32,
         adapters=None, dropout: bool = False, fp8: str | None = None) -> Trace:
    """Build (declare) the model, then run one training step's forward and loss: in float32,
    or under torch.autocast(autocast, dtype=torch.bfloat16); with activation recomputation
    "none", "full" (checkpoint each block) or "selective" (checkpoint the attention core);
    fold=False writes widths h·d_k even where that is d_model. implementation TRANSFORMERS
    runs transformers' ops where they differ from model/'s (its RoPE module, RMSNorm and
    SiLU; accounting/planning/recipes.py says for which configs); param_dtype bf16 holds
    the parameters in bf16 (model.to(torch.bfloat16), no autocast); adapters (builder/lora.py):
    LoRA on the linears it names, every other parameter frozen in param_dtype.
    implementation MEGATRON runs Megatron-Core + Transformer Engine's fused modules
    (builder/megatron.py; `dropout`: its dropouts on, their masks saved); fp8 ("torchao" or
    "te") runs the linear layers' matmuls in fp8 (Trace.matmul)."""
    t, a = Trace(autocast, param_dtype, adapters, fp8), Arch(c, fold, implementation, dropout)
    t.hf, t.megatron, t.dropout = a.hf or a.titan, a.megatron, a.dropout  # titan: F.silu
    t.titan, t.foundry = a.titan, a.foundry
    t.hf_olmo2 = a.hf and c.norm_placement == "post"  # Olmo2RMSNorm
    t.hf_oss = a.hf and gpt_oss_layout(c)  # GptOssForCausalLM's modules
    t.hf_gpt2 = a.hf and gpt2_layout(c)  # GPT2LMHeadModel's LayerNorm and c_attn
    t.fused_gelu = c.fused_gelu  # (under t.hf) transformers' GELUTanh: one F.gelu
    t.hf_nemotron = a.hf and nemotron_h_layout(c)  # NemotronHForCausalLM's (hf_mamba.py)
    t.hf_qwen_next = a.hf and qwen3_next_layout(c)  # Qwen3NextForCausalLM's, Qwen3.5's
    gemma3 = a.hf and gemma3_layout(c)  # Gemma 3's modules (Gemma3TextModel's)
    # Gemma 2's (Gemma2Model's, 5.23): the same RMSNorm, GELUTanh and scaled embedding (its
    # embed_scale buffer), one rotary module for every layer
    # Gemma 4's (Gemma4TextModel's, builder/hf_gemma4.py): its own RMSNorm, the same
    # GELUTanh and scaled embeddings (an embed_scale buffer in each)
    t.hf_gemma4 = a.hf and gemma4_layout(c)
    t.hf_gemma3 = gemma = gemma3 or (a.hf and gemma2_layout(c)) or t.hf_gemma4
    # RoPE per layer type: Gemma 3's, and OLMo-3's (OLMo-2's layout with sliding layers)
    per_type = gemma3 or (t.hf_olmo2 and c.sliding_window is not None)
    # __init__, in model/transformer.py's registration order
    with t.scope("token_embeddings"):
        tok = t.param("weight", ("V", "d_model"), R.EMBEDDING, lookup=True)
        # Gemma3TextScaledWordEmbedding: embed_scale, a 0-dim float32 buffer (persistent=False)
        # (made under the default dtype: bf16 when the model is built with dtype=bfloat16)
        scale = t.buffer("embed_scale", (), R.DTYPE_BYTES[param_dtype]) if gemma else None
    pos = None
    if c.positions == "learned":
        with t.scope("position_embeddings"):
            pos = t.param("weight", ("T_pos", "d_model"), R.POSITION_EMBEDDING, lookup=True)
    # Blocks of one kind (global/local attention, dense/MoE MLP) are alike: each kind is
    # walked once, its records repeated over its blocks (symbol "L" when all are alike).
    kinds = list(dict.fromkeys(c.layer_kinds))
    t.groups = tuple((_symbol(kind, kinds),
                      tuple(i for i, k in enumerate(c.layer_kinds) if k == kind)) for kind in kinds)
    if a.hf and c.positions == "rope" and c.global_shape:  # Gemma4TextRotaryEmbedding:
        # inv_freq per layer kind, sorted (full_attention's first), of each kind's head dim
        a.global_rotary = RotaryEmbedding(t, "d_kG", "full_attention_")
        a.rotary = RotaryEmbedding(t, "d_k", "sliding_attention_")
    elif per_type and c.positions == "rope":  # Gemma3RotaryEmbedding (Olmo3's alike):
        # inv_freq (and the original) per layer type present (sorted(set(layer_types)))
        local = {k.local for k in c.layer_kinds}
        a.global_rotary = RotaryEmbedding(t, "d_k", "full_attention_") if False in local else None
        a.rotary = RotaryEmbedding(t, "d_k", "sliding_attention_") if True in local else None
    elif a.hf and c.positions == "rope":  # LlamaModel.rotary_emb: before the blocks' keys
        # (DeepseekV3RotaryEmbedding: of d_rope, the latent attention's RoPE part)
        # (DeepseekV2RotaryEmbedding: complex64 freqs_cis)
        # (Llama4TextRotaryEmbedding: complex64 freqs_cis too)
        a.rotary = (RotaryEmbedding(t, "d_rope", pairs=True, complex_=deepseek_v2_layout(c))
                    if c.mla
                    # partial rotary (Qwen3-Next's): inv_freq and cos/sin of d_rot only
                    else RotaryEmbedding(t, "d_rot", partial=True, batched=c.linear_split_proj)
                    if c.rotary_dim is not None
                    else RotaryEmbedding(t, halves=t.hf_oss, complex_=llama4_layout(c)))
    blocks = []
    for kind, (symbol, _) in zip(kinds, t.groups):
        with t.block(symbol):
            blocks.append(Block(t, a, recompute, kind))
    comp = NORM_PARAMS[c.norm]
    ln_final = Norm(t, "ln_final", c.norm, ("d_model",), NORMS[c.norm], comp, c.norm_offset)
    ple = PerLayerEmbeddings(t, c) if c.per_layer_input is not None else None
    lm_head = Linear(t, "lm_head", ("d_model",), ("V",), R.LM_HEAD, "LM head",
                     c.lm_head_bias, weight=tok if c.tie_embeddings else None)

    # forward
    ids = t.name(t.fresh(("B", "T"), R.INT64), "token ids")
    with t.scope("token_embeddings"):
        x = t.lookup(tok, ids, ROW)
        if scale is not None:  # × embed_scale.to(weight.dtype): the mul saves the buffer
            # itself (it has the weight's dtype), counted with the buffers, not again here
            x = t.binary("aten.mul", x, Sym((), param_dtype, False, param="embed_scale"),
                         "embedding · embed_scale", EMBED_SCALE)
        if t.adapters is not None:  # a frozen table: enable_input_require_grads' leaf
            x = leaf = lora.input_leaf(t, x)
    if c.embedding_multiplier is not None and scale is None:  # Gemma's √d_model, Granite's
        # multiplier: a scalar
        x = t.binary("aten.mul", x, None, "embedding · multiplier", EMBED_SCALE)
    if ple is not None:  # Gemma4TextModel.get_per_layer_inputs, project_per_layer_inputs
        a.ple = ple(ids, x)
    if pos is not None:
        with t.scope("position_embeddings"):
            positions = t.name(t.fresh(("T",), R.INT64), "position ids")
            p = t.lookup(pos, positions, ("T", "d_model"))
        x = t.binary("aten.add", x, p, "token + position embedding", POSITION_ADD)
    if a.hf:  # GPT2Model.drop: nn.Dropout(embd_pdrop) on the summed embeddings
        x = native_dropout(t, x, c.embedding_dropout, "embedding")
    if a.megatron:  # LanguageModelEmbedding.embedding_dropout; GPTModel's rotary_pos_emb
        with t.scope("token_embeddings"):
            x = megatron.dropout(t, x, "embedding")
        if c.positions == "rope":
            a.freqs = t.name(t.fresh(("T", "d_k"), FP32), "RoPE frequencies (fp32, once per pass)")
    if a.hf and c.positions == "rope":  # position_embeddings = self.rotary_emb(x, position_ids)
        # (Gemma 3: one (cos, sin) per layer type present)
        a.rope_tables = a.rotary.tables(x) if a.rotary is not None else None
        if c.global_shape or (per_type and a.global_rotary is not None):
            a.global_tables = a.global_rotary.tables(x)
    for block, (symbol, _) in zip(blocks, t.groups):
        with t.block(symbol):
            block()
    if t.adapters is not None:
        lora.keep_leaf(t, leaf, pos is not None or c.embedding_multiplier is not None)
    final_course = f"final {NORMS[c.norm]}"
    x = t.name(t.fresh(ROW, grad=True), "ln_final input", final_course)
    h = ln_final(x, "ln_final output")
    logits = lm_head(h, "logits (output embedding)", "output embedding")
    if c.logit_scale is not None:  # Granite (1/logits_scaling), Cohere: a scalar
        logits = t.binary("aten.mul", logits, None, "logits · logit_scale", LOGIT_SCALE)
    if c.final_softcap is not None:  # Gemma 2/3: cap·tanh(logits/cap)
        logits = t.binary("aten.div", logits, None, "logits / cap", SOFTCAP)
        logits = t.unary("aten.tanh", logits, "tanh(logits / cap)", SOFTCAP, saves="output",
                         out="tanh(logits / cap)")
        logits = t.binary("aten.mul", logits, None, "cap · tanh", SOFTCAP)

    if t.hf_nemotron:  # NemotronHForCausalLM: logits = self.lm_head(hidden_states).float()
        logits = t.cast(logits, FP32, "logits (fp32 copy: .float())")
    t.logits_dtype = logits.dtype  # what the model's forward returns (an output may hold it)
    # F.cross_entropy(logits, targets) = nll_loss(log_softmax(logits)): outside the model
    with t.outside(LOSS):
        if a.titan:  # torchtitan's cross_entropy_loss: F.cross_entropy(pred.float(), …)
            logits = t.cast(logits, FP32, "logits (fp32 copy)")
        if implementation == TRANSFORMERS:  # model(ids, labels=…): ForCausalLMLoss's
            # logits.float() and shifted labels (hf_loss.py), then F.cross_entropy
            logits, targets = hf_loss.for_causal_lm_loss(t, logits)
            cross_entropy(t, logits, targets, "cross-entropy")
        elif a.megatron:
            megatron.vocab_parallel_cross_entropy(t, logits)
        elif a.foundry:  # llm-foundry's fused_crossentropy (flash-attn's Triton kernel)
            targets = t.name(t.fresh(("B", "T"), R.INT64), "targets")
            megatron.flash_cross_entropy(t, logits, targets)
        else:
            targets = t.name(t.fresh(("B", "T"), R.INT64), "targets")
            cross_entropy(t, logits, targets, "cross-entropy")
    t.check()
    return t


def cross_entropy(t: Trace, logits: Sym, targets: Sym, course: str) -> None:
    """F.cross_entropy = nll_loss(log_softmax(logits)): log_softmax saves its output,
    nll_loss its targets and a 0-dim total weight (float32 under autocast too, bf16 for
    bf16 logits)."""
    (logits,), dtype = t._autocast("cross_entropy", logits)
    lsm = t.name(Sym(logits.shape, dtype, grad=True), "log-softmax of the logits", course)
    t._reads("log_softmax", logits)
    t._saves(lsm, "log_softmax", after=True)
    t._saves(targets, "nll_loss")
    # the total weight has the log-probabilities' dtype (bf16 logits without autocast)
    t._saves(t.name(t.fresh((), dtype), "nll_loss total weight"), "nll_loss")
