"""Gemma 4's tower walked once (builder/vision_walk.py Walk): Gemma4VisionModel under
model.vision_tower and Gemma4MultimodalEmbedder under model.embed_vision (transformers 5.23
modeling_gemma4.py), one image of N = N_p patches (padded to max_soft_tokens·k², the
tower's budget), attention "sdpa": each parameter, each matmul and what autograd saves when
it trains (issue 41, Must 3), in the roles of vision_saves.py (its docstring), measured
against transformers' tower on the CPU with the graph walk of tests/test_vision_train.py
(fp32, bf16 and fp32 under bf16 autocast).

Gemma4RMSNorm (with a scale) on rows × width: x.float() (pow and the first mul save it:
fp32 whatever the input), the mean square (pow(·, −0.5) saves it), its pow output (the mul
saves it), the normalized x (the weight's mul saves it) and, with bf16 parameters,
weight.float(), a fp32 copy of the weight per forward; without a scale (v_norm, the
embedder's pre-projection norm) the first three.

The attention runs with a mask (the padding patches masked out, create_bidirectional_mask),
so transformers repeats k and v to every query head (sdpa_attention.use_gqa_in_sdpa: no GQA
with a mask) and sdpa converts the boolean mask into an additive one of the query's dtype
at each call (convert_boolean_attn_mask, aten/src/ATen/native/transformers/attention.cpp),
which it saves. On the CPU the flash kernel saves that N×N mask and a (h, N) fp32
log-sum-exp (measured); on CUDA a masked call runs the memory-efficient kernel (flash takes
no mask), whose mask is padded to a multiple of 8 columns (preprocess_mask's pad_bias,
mem_eff_alignment = 8, attention.cpp) and whose log-sum-exp is (h, ⌈N/32⌉·32) fp32
(kAlignLSE = 32, _efficient_attention_forward in attention.cu): read, not measured. An
image whose patches fill the budget exactly gets no mask (then GQA and the flash kernel on
CUDA): not modelled (the masked call is counted).

use_clipped_linears (Gemma4ClippableLinear): torch.clamp(x, min, max) with 0-dim buffers
before and after each of a layer's seven linears; clamp.Tensor saves its input and both
bounds (tools/autograd/derivatives.yaml: clamp_backward(grad, self, min, max)), so each
linear's input and output are kept beside the clamped copies the next ops save (measured:
tests/test_vision_saves_gemma4.py).
"""
from __future__ import annotations

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder.vision_save import BLOCK, Save
from accounting.ledger.builder.vision_walk import BLOCK as EACH, Walk, gated_mlp


def _rmsnorm(out, name: str, module: str, repeat, rows: tuple, width: str,
             scale: bool = True) -> None:
    # (x.float(), its mean square and the power: for the input's gradient alone)
    for x, shape in (("fp32 input", (*rows, width)), ("mean square", rows),
                     ("mean square ^ -0.5", rows)):
        out.append(Save(f"{name} {x}", module, repeat, shape, "F", input_grad=True))
    if scale:
        out.append(Save(f"{name} normalized", module, repeat, (*rows, width), "F"))
        out.append(Save(f"{name} weight.float() (bf16 parameters)", module, repeat,
                        (width,), "WF", fixed=True))


# the layer's Gemma4ClippableLinears (modeling_gemma4.py Gemma4VisionAttention,
# Gemma4VisionMLP)
CLIPPED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _clipped_inputs(out, module: str, names: tuple[str, ...], width: str) -> None:
    """Linears reading one norm output, each clamping it first (use_clipped_linears): the
    clamps save that input (once: one tensor, the norm's output in the residual stream's
    dtype), each linear its own clamped copy (autocast's bf16 cast of it under autocast)."""
    out.append(Save(f"{'/'.join(names)} clamps' input", f"{module}.{names[0]}_proj", BLOCK,
                    ("N", width), "P"))
    for x in names:
        out.append(Save(f"{x}_proj's clamped input", f"{module}.{x}_proj", BLOCK,
                        ("N", width), "A"))


def gemma4(w: Walk, s: VisionSpec) -> None:
    """Symbols: N = N_p the padded patches the tower runs (max_soft_tokens·k²), N_o the
    pooler's output rows (max_soft_tokens), N_t the image's own soft tokens (what the
    embedder maps). One image: the patch linear's input (the pixels); the position lookups'
    ids (the clamped (x, y) pairs, one int64 tensor both lookups index); the padding mask
    (the position embedding's where and the pooler's masked_fill save one bool tensor); the
    rotary cos and sin (the residual stream's dtype, made once); each layer: its four
    RMSNorms, q_norm and k_norm, v_norm (no scale), the q/k/v projections' input, sdpa's q,
    k and v (k and v repeated to h_v heads), its mask, output (o_proj's input) and
    log-sum-exp, the MLP (gate/up input, the GELU's input, the product's two operands,
    down's input); the pooler's one-hot weights (N_o × N, fp32; a bf16 copy under
    autocast: the matmul is autocast's), the pooled rows' mask (bool); standardize's scale
    (fp32, once); the embedder's norm (no scale) on the N_t soft tokens and its
    projection's input."""
    v = "model.vision_tower"
    w.param(f"{v}.patch_embedder.position_embedding_table", ("N_pos", "d_v"))  # (2, P, d)
    w.param(f"{v}.patch_embedder.input_proj.weight", ("d_v", "k_v"))
    b = f"{v}.encoder.layers.{EACH}"
    # Gemma4ClippableLinear: q (d → h·d_h), k and v (d → h_kv·d_h), o (h·d_h → d)
    w.param(f"{b}.self_attn.q_proj.linear.weight", ("d_a", "d_v"), "L_v")
    w.param(f"{b}.self_attn.k_proj.linear.weight", ("d_kv", "d_v"), "L_v")
    w.param(f"{b}.self_attn.v_proj.linear.weight", ("d_kv", "d_v"), "L_v")
    w.param(f"{b}.self_attn.o_proj.linear.weight", ("d_v", "d_a"), "L_v")
    w.param(f"{b}.self_attn.q_norm.weight", ("d_hv",), "L_v")
    w.param(f"{b}.self_attn.k_norm.weight", ("d_hv",), "L_v")
    for x, shape in (("gate", ("f_v", "d_v")), ("up", ("f_v", "d_v")), ("down", ("d_v", "f_v"))):
        w.param(f"{b}.mlp.{x}_proj.linear.weight", shape, "L_v")
    for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
              "post_feedforward_layernorm"):
        w.norm(f"{b}.{n}", "rmsnorm", "L_v")
    w.linear("model.embed_vision.embedding_projection", "d_v", "d_t", False, projector=True)
    out = w.saves
    w.save("patch linear input (pixels)", "patch_embedder.input_proj", None, ("N_p", "k_v"),
           "A")
    w.matmul("patch embedding (input_proj)", "patch_embedder.input_proj", ("N_p",), ("k_v",),
             ("d_v",))
    w.save("position ids (clamped x and y)", "patch_embedder", None, ("N",), "I", copies=2)
    w.save("padding positions (bool)", "patch_embedder", None, ("N",), "B1")
    for x in ("cos", "sin"):
        w.save(f"rotary {x}", "encoder.rotary_emb", None, ("N", "d_hv"), "P")
    b = "encoder.layers.{i}"
    a = f"{b}.self_attn"
    _rmsnorm(out, "input_layernorm", f"{b}.input_layernorm", BLOCK, ("N",), "d_v")
    if s.clipped:
        _clipped_inputs(out, a, ("q", "k", "v"), "d_v")
        for x, width in (("q", ("h_v", "d_hv")), ("k", ("h_kv", "d_hv")),
                         ("v", ("h_kv", "d_hv"))):
            w.save(f"{x}_proj output (its clamp's input)", f"{a}.{x}_proj", BLOCK,
                   ("N", *width), "A")
    else:
        w.save("q/k/v input", f"{a}.q_proj", BLOCK, ("N", "d_v"), "A")
        for x in ("k", "v"):
            w.save(f"{x}_proj's own input copy", f"{a}.{x}_proj", BLOCK, ("N", "d_v"), "AC")
    w.matmul("Q", f"{a}.q_proj", ("N",), ("d_v",), ("d_a",), "L_v")
    for x in ("K", "V"):
        w.matmul(x, f"{a}.{x.lower()}_proj", ("N",), ("d_v",), ("d_kv",), "L_v")
    _rmsnorm(out, "q_norm", f"{a}.q_norm", BLOCK, ("N", "h_v"), "d_hv")
    _rmsnorm(out, "k_norm", f"{a}.k_norm", BLOCK, ("N", "h_kv"), "d_hv")
    _rmsnorm(out, "v_norm", f"{a}.v_norm", BLOCK, ("N", "h_kv"), "d_hv", scale=False)
    for x in ("q", "k (every head)", "v (every head)", "output (o_proj's input)"):
        w.save(f"sdpa {x}", a, BLOCK, ("N", "d_a"), "A")
    w.save("sdpa additive mask (CPU)", a, BLOCK, ("N", "N"), "AX")
    w.save("sdpa additive mask, padded (CUDA)", a, BLOCK, ("N", "N_8"), "AG")
    w.save("sdpa log-sum-exp (CPU)", a, BLOCK, ("h_v", "N"), "FC")
    w.save("sdpa log-sum-exp, padded (CUDA)", a, BLOCK, ("h_v", "N_32"), "FG")
    for x in ("QKᵀ", "scores·V"):  # every query head (repeat_kv), over the padded patches
        w.matmul(x, a, ("S_f",), ("d_hv",), ("1",), "L_v", ("h_v",))
    w.matmul("attention output", f"{a}.o_proj", ("N",), ("d_a",), ("d_v",), "L_v")
    if s.clipped:  # o_proj's input clamp saves sdpa's output (above), its linear the copy
        w.save("o_proj's clamped input", f"{a}.o_proj", BLOCK, ("N", "d_a"), "A")
        w.save("o_proj output (its clamp's input)", f"{a}.o_proj", BLOCK, ("N", "d_v"), "A")
    _rmsnorm(out, "post_attention_layernorm", f"{b}.post_attention_layernorm", BLOCK,
             ("N",), "d_v")
    _rmsnorm(out, "pre_feedforward_layernorm", f"{b}.pre_feedforward_layernorm", BLOCK,
             ("N",), "d_v")
    m = f"{b}.mlp"
    if s.clipped:
        _clipped_inputs(out, m, ("gate", "up"), "d_v")
    gated_mlp(w, m, "GELU", BLOCK, inputs=not s.clipped)
    if s.clipped:  # gate's and up's clamps save their linears' outputs; down's input clamp
        # saves the product (above), its linear the clamped copy, its output clamp its output
        for x in ("gate_proj output", "up_proj output", "down_proj's clamped input"):
            w.save(f"{x} (clipped)", m, BLOCK, ("N", "f_v"), "A")
        w.save("down_proj output (its clamp's input)", f"{m}.down_proj", BLOCK, ("N", "d_v"),
               "A")
        # each clamp saves its two bounds (0-dim buffers: input_min/max, output_min/max)
        w.save("clamp bounds (buffers)", b, BLOCK, (), "P", fixed=True, copies=4 * len(CLIPPED))
    _rmsnorm(out, "post_feedforward_layernorm", f"{b}.post_feedforward_layernorm", BLOCK,
             ("N",), "d_v")
    w.save("pooler one-hot weights", "pooler", None, ("N_o", "N"), "FA")
    w.save("pooled rows' mask (bool)", "pooler", None, ("N_o",), "B1")
    w.matmul("pooler (one-hot average of k×k patches)", "pooler", ("N_o",), ("N",), ("d_v",))
    if s.standardize:
        w.save("std_scale.float()", "", None, ("d_v",), "F", fixed=True)
    e = "embed_vision"
    _rmsnorm(out, "embedding_pre_projection_norm", f"{e}.embedding_pre_projection_norm",
             None, ("N_t",), "d_v", scale=False)
    w.save("embedding_projection input", f"{e}.embedding_projection", None, ("N_t", "d_v"),
           "A")
    w.matmul("embedding_projection (into the language model)", "embed_vision", ("N_t",),
             ("d_v",), ("d_t",))
