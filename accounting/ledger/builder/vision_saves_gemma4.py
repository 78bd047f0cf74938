"""What autograd saves in Gemma 4's trained tower (issue 41, Must 3): Gemma4VisionModel and
Gemma4MultimodalEmbedder (transformers 5.23 modeling_gemma4.py), one image of N = N_p
patches (padded to max_soft_tokens·k², the tower's budget), attention "sdpa"; in the roles
of vision_saves.py (its docstring), measured against transformers' tower on the CPU with
the graph walk of tests/test_vision_train.py (fp32, bf16 and fp32 under bf16 autocast).

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


def gemma4(out, s: VisionSpec) -> None:
    """One image: the patch linear's input (the pixels); the position lookups' ids (the
    clamped (x, y) pairs, one int64 tensor both lookups index); the padding mask (the
    position embedding's where and the pooler's masked_fill save one bool tensor); the
    rotary cos and sin (the residual stream's dtype, made once); each layer: its four
    RMSNorms, q_norm and k_norm, v_norm (no scale), the q/k/v projections' input, sdpa's q,
    k and v (k and v repeated to h_v heads), its mask, output (o_proj's input) and
    log-sum-exp, the MLP (gate/up input, the GELU's input, the product's two operands,
    down's input); the pooler's one-hot weights (N_o × N, fp32; a bf16 copy under
    autocast: the matmul is autocast's), the pooled rows' mask (bool); standardize's scale
    (fp32, once); the embedder's norm (no scale) on the N_t soft tokens and its
    projection's input."""
    out.append(Save("patch linear input (pixels)", "patch_embedder.input_proj", None,
                    ("N_p", "k_v"), "A"))
    out.append(Save("position ids (clamped x and y)", "patch_embedder", None, ("N",), "I",
                    copies=2))
    out.append(Save("padding positions (bool)", "patch_embedder", None, ("N",), "B1"))
    for x in ("cos", "sin"):
        out.append(Save(f"rotary {x}", "encoder.rotary_emb", None, ("N", "d_hv"), "P"))
    b = "encoder.layers.{i}"
    a = f"{b}.self_attn"
    _rmsnorm(out, "input_layernorm", f"{b}.input_layernorm", BLOCK, ("N",), "d_v")
    if s.clipped:
        _clipped_inputs(out, a, ("q", "k", "v"), "d_v")
        for x, width in (("q", ("h_v", "d_hv")), ("k", ("h_kv", "d_hv")),
                         ("v", ("h_kv", "d_hv"))):
            out.append(Save(f"{x}_proj output (its clamp's input)", f"{a}.{x}_proj", BLOCK,
                            ("N", *width), "A"))
    else:
        out.append(Save("q/k/v input", f"{a}.q_proj", BLOCK, ("N", "d_v"), "A"))
        for x in ("k", "v"):
            out.append(Save(f"{x}_proj's own input copy", f"{a}.{x}_proj", BLOCK,
                            ("N", "d_v"), "AC"))
    _rmsnorm(out, "q_norm", f"{a}.q_norm", BLOCK, ("N", "h_v"), "d_hv")
    _rmsnorm(out, "k_norm", f"{a}.k_norm", BLOCK, ("N", "h_kv"), "d_hv")
    _rmsnorm(out, "v_norm", f"{a}.v_norm", BLOCK, ("N", "h_kv"), "d_hv", scale=False)
    for x in ("q", "k (every head)", "v (every head)", "output (o_proj's input)"):
        out.append(Save(f"sdpa {x}", a, BLOCK, ("N", "d_a"), "A"))
    out.append(Save("sdpa additive mask (CPU)", a, BLOCK, ("N", "N"), "AX"))
    out.append(Save("sdpa additive mask, padded (CUDA)", a, BLOCK, ("N", "N_8"), "AG"))
    out.append(Save("sdpa log-sum-exp (CPU)", a, BLOCK, ("h_v", "N"), "FC"))
    out.append(Save("sdpa log-sum-exp, padded (CUDA)", a, BLOCK, ("h_v", "N_32"), "FG"))
    if s.clipped:  # o_proj's input clamp saves sdpa's output (above), its linear the copy
        out.append(Save("o_proj's clamped input", f"{a}.o_proj", BLOCK, ("N", "d_a"), "A"))
        out.append(Save("o_proj output (its clamp's input)", f"{a}.o_proj", BLOCK,
                        ("N", "d_v"), "A"))
    _rmsnorm(out, "post_attention_layernorm", f"{b}.post_attention_layernorm", BLOCK,
             ("N",), "d_v")
    _rmsnorm(out, "pre_feedforward_layernorm", f"{b}.pre_feedforward_layernorm", BLOCK,
             ("N",), "d_v")
    m = f"{b}.mlp"
    if s.clipped:
        _clipped_inputs(out, m, ("gate", "up"), "d_v")
    else:
        out.append(Save("gate/up input", f"{m}.gate_proj", BLOCK, ("N", "d_v"), "A"))
        out.append(Save("up_proj's own input copy", f"{m}.up_proj", BLOCK, ("N", "d_v"), "AC"))
    for x in ("GELU input", "GELU output (the product's)", "up_proj output (the product's)",
              "down_proj input"):
        out.append(Save(x, m, BLOCK, ("N", "f_v"), "A"))
    if s.clipped:  # gate's and up's clamps save their linears' outputs; down's input clamp
        # saves the product (above), its linear the clamped copy, its output clamp its output
        for x in ("gate_proj output", "up_proj output", "down_proj's clamped input"):
            out.append(Save(f"{x} (clipped)", m, BLOCK, ("N", "f_v"), "A"))
        out.append(Save("down_proj output (its clamp's input)", f"{m}.down_proj", BLOCK,
                        ("N", "d_v"), "A"))
        # each clamp saves its two bounds (0-dim buffers: input_min/max, output_min/max)
        out.append(Save("clamp bounds (buffers)", b, BLOCK, (), "P", fixed=True,
                        copies=4 * len(CLIPPED)))
    _rmsnorm(out, "post_feedforward_layernorm", f"{b}.post_feedforward_layernorm", BLOCK,
             ("N",), "d_v")
    out.append(Save("pooler one-hot weights", "pooler", None, ("N_o", "N"), "FA"))
    out.append(Save("pooled rows' mask (bool)", "pooler", None, ("N_o",), "B1"))
    if s.standardize:
        out.append(Save("std_scale.float()", "", None, ("d_v",), "F", fixed=True))
    e = "embed_vision"
    _rmsnorm(out, "embedding_pre_projection_norm", f"{e}.embedding_pre_projection_norm",
             None, ("N_t",), "d_v", scale=False)
    out.append(Save("embedding_projection input", f"{e}.embedding_projection", None,
                    ("N_t", "d_v"), "A"))
