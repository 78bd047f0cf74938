"""Mistral 3's Pixtral tower walked once (builder/vision_walk.py Walk): PixtralVisionModel
under model.vision_tower and Mistral3MultiModalProjector under model.multi_modal_projector
(transformers 5.23 modeling_pixtral.py, modeling_mistral3.py), attention "sdpa": each
parameter, each matmul of one image (N = N_p patches at its own size; the merger's N_m =
N_p/s² rows of d_vm = s²·d_v, each a token of the language model) and what autograd saves
for one image when it trains (issue 41, Must 3), in the roles of vision_saves.py (its
docstring); measured against transformers' tower on the CPU with the graph walk of
tests/test_vision_train.py (fp32, bf16 and fp32 under bf16 autocast:
tests/test_vision_saves_pixtral.py). The forward-wide block mask, which is not a sum over
the images: vision_saves_pixtral.py."""
from __future__ import annotations

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder.vision_save import BLOCK, Save
from accounting.ledger.builder.vision_walk import BLOCK as EACH, Walk, gated_mlp


def _rmsnorm(out, name: str, module: str, repeat, rows: str, role: str) -> None:
    """PixtralRMSNorm / Mistral3RMSNorm (LlamaRMSNorm): x.to(float32) (pow saves it), rsqrt's
    output, weight · x_normed saves x_normed cast back to the input's dtype (`role`)."""
    out.append(Save(f"{name} fp32 input", module, repeat, (rows, "d_v"), "F", input_grad=True))
    out.append(Save(f"{name} rsqrt", module, repeat, (rows,), "F", input_grad=True))
    out.append(Save(f"{name} normalized", module, repeat, (rows, "d_v"), role))


def pixtral(w: Walk, s: VisionSpec) -> None:
    """One image of N = N_p patches (its own size: the conv's input is the image padded to
    the forward's largest height and width, counted here at its own size): the Conv2d's
    pixels; ln_pre on the conv's output; the rotary cos and sin (the residual stream's dtype,
    made once a forward, shared by every layer); each layer: attention_norm, the q/k/v
    projections' input (under autocast each casts its own copy), sdpa's q and k (rotated:
    q·cos saves cos, not q), v, output (o_proj's input) and log-sum-exp (CPU: (h, N); CUDA's
    padding is vision_saves_pixtral.whole_forward()'s), ffn_norm, the gated SiLU MLP; the
    projector on vision_feature_layer's hidden state: its RMSNorm, the patch merger's
    linear on the unfolded s×s patches (N_m rows of s²·d_v), linear_1's input, the GELU's,
    linear_2's."""
    v = "model.vision_tower"
    w.param(f"{v}.patch_conv.weight", ("d_v", "k_v"))  # Conv2d(C, d, p, stride p, no bias)
    w.norm(f"{v}.ln_pre", "rmsnorm")
    b = f"{v}.transformer.layers.{EACH}"
    w.norm(f"{b}.attention_norm", "rmsnorm", "L_v")
    w.norm(f"{b}.ffn_norm", "rmsnorm", "L_v")
    for x in ("q", "k", "v", "o"):
        w.linear(f"{b}.attention.{x}_proj", "d_v", "d_v", False, "L_v")
    w.linear(f"{b}.feed_forward.gate_proj", "d_v", "f_v", False, "L_v")
    w.linear(f"{b}.feed_forward.up_proj", "d_v", "f_v", False, "L_v")
    w.linear(f"{b}.feed_forward.down_proj", "f_v", "d_v", False, "L_v")
    p = "model.multi_modal_projector"
    w.norm(f"{p}.norm", "rmsnorm", projector=True)
    w.linear(f"{p}.patch_merger.merging_layer", "d_vm", "d_v", False, projector=True)
    w.linear(f"{p}.linear_1", "d_v", "d_t", s.projector_bias, projector=True)
    w.linear(f"{p}.linear_2", "d_t", "d_t", s.projector_bias, projector=True)
    out = w.saves
    w.save("patch embedding input (pixels)", "patch_conv", None, ("N_p", "k_v"), "A")
    w.matmul("patch embedding (Conv2d as a matmul)", "patch_conv", ("N_p",), ("k_v",), ("d_v",))
    _rmsnorm(out, "ln_pre", "ln_pre", None, "N", "A")
    for x in ("cos", "sin"):
        w.save(f"rotary {x}", "patch_positional_embedding", None, ("N", "d_hv"), "P")
    b = "transformer.layers.{i}"
    _rmsnorm(out, "attention_norm", f"{b}.attention_norm", BLOCK, "N", "P")
    a = f"{b}.attention"
    w.save("q/k/v input", f"{a}.q_proj", BLOCK, ("N", "d_v"), "A")
    for x in ("k", "v"):
        w.save(f"{x}_proj's own input copy", f"{a}.{x}_proj", BLOCK, ("N", "d_v"), "AC")
    for x in ("q", "k", "v"):
        w.matmul(x.upper(), f"{a}.{x}_proj", ("N",), ("d_v",), ("d_v",), "L_v")
    for x in ("q rotated", "k rotated", "v", "output (o_proj's input)"):
        w.save(f"sdpa {x}", a, BLOCK, ("N", "d_v"), "A")
    w.save("sdpa log-sum-exp", a, BLOCK, ("h_v", "N"), "F")
    for x in ("QKᵀ", "scores·V"):  # within the image (its block of the attention mask)
        w.matmul(x, a, ("S_f",), ("d_hv",), ("1",), "L_v", ("h_v",))
    w.matmul("attention output", f"{a}.o_proj", ("N",), ("d_v",), ("d_v",), "L_v")
    _rmsnorm(out, "ffn_norm", f"{b}.ffn_norm", BLOCK, "N", "P")
    m = f"{b}.feed_forward"
    gated_mlp(w, m, "SiLU", BLOCK)
    p = "multi_modal_projector"
    _rmsnorm(out, "norm", f"{p}.norm", None, "N", "P")
    w.save("merging_layer input (unfolded)", f"{p}.patch_merger.merging_layer", None,
           ("N_m", "d_vm"), "A")
    w.matmul("patch merger (s×s patches unfolded)", "patch_merger.merging_layer", ("N_m",),
             ("d_vm",), ("d_v",))
    w.save("linear_1 input", f"{p}.linear_1", None, ("N_m", "d_v"), "A")
    w.matmul("projector linear_1", "multi_modal_projector.linear_1", ("N_m",), ("d_v",),
             ("d_t",))
    w.save("GELU input", f"{p}.act", None, ("N_m", "d_t"), "A")
    w.save("linear_2 input", f"{p}.linear_2", None, ("N_m", "d_t"), "A")
    w.matmul("projector linear_2 (into the language model)", "multi_modal_projector.linear_2",
             ("N_m",), ("d_t",), ("d_t",))
