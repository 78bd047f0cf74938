"""The towers of SigLIP/CLIP-style encoder layers, walked once (builder/vision_walk.py Walk):
Gemma 3's SigLIP with its projector and LLaVA's CLIP with its MLP projector (LLaVA-OneVision's
SigLIP and projector on each tile), Idefics3's (SmolVLM's the same), InternVL's InternViT and
Llama 4's; each parameter (state-dict order), each matmul of one image and each save
(forward order; roles: vision_saves.py), transformers 5.23, attention "sdpa"."""
from __future__ import annotations

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder.vision_save import BLOCK as L_V
from accounting.ledger.builder.vision_saves import USED, layernorm, rmsnorm
from accounting.ledger.builder.vision_walk import (BLOCK, Walk, core_matmuls, mlp,
                                                   out_matmul, qkv_matmuls)

# the matmuls' modules of a SigLIP/CLIP/Llama 4 encoder layer
SELF_ATTN = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
             "core": "self_attn", "out": "self_attn.out_proj"}


def _encoder_params(w: Walk, s: VisionSpec, v: str) -> None:
    """CLIP's and SigLIP's encoder layers (CLIPEncoderLayer, SiglipEncoderLayer; Idefics3's is
    SigLIP's): self_attn's k, v, q and out projections with biases (their declaration order),
    layer_norm1, mlp.fc1 and fc2, layer_norm2."""
    b = f"{v}.encoder.layers.{BLOCK}"
    for x in ("k", "v", "q"):  # CLIPAttention/SiglipAttention declare k, v, q, out
        w.linear(f"{b}.self_attn.{x}_proj", "d_v", "d_v", True, "L_v")
    w.linear(f"{b}.self_attn.out_proj", "d_v", "d_v", True, "L_v")
    w.norm(f"{b}.layer_norm1", "layernorm", "L_v")
    w.linear(f"{b}.mlp.fc1", "d_v", "f_v", True, "L_v")
    w.linear(f"{b}.mlp.fc2", "f_v", "d_v", True, "L_v")
    w.norm(f"{b}.layer_norm2", "layernorm", "L_v")


def _encoder_layer(w: Walk, s: VisionSpec, repeat: str, b: str = "encoder.layers.{i}",
                   norms: tuple[str, str] = ("layer_norm1", "layer_norm2"),
                   names: dict[str, str] = SELF_ATTN, layer_scale: bool = False) -> None:
    """SiglipEncoderLayer / CLIPEncoderLayer / Llama4VisionEncoderLayer / InternVLVisionLayer
    forward, each op's matmul and saves: the first norm; the q/k/v projections (one input
    tensor; under autocast each casts its own copy of the fp32 norm output); sdpa's q, k,
    v, output (out_proj's input is a view of it) and log-sum-exp; the output projection;
    the second norm; fc1 (its input), the activation (its input; QuickGELU also its
    sigmoid), fc2 (its input). `repeat`: the saves' (L_v, or LLaVA's used layers)."""
    rms = s.norm == "rmsnorm"  # InternViT-6B's InternVLVisionRMSNorm (norm_type rms_norm)
    norm = (lambda *a: rmsnorm(*a, role="R")) if rms else layernorm
    out = w.saves
    norm(out, norms[0], f"{b}.{norms[0]}", repeat, "N")
    w.save("q/k/v input", f"{b}.self_attn.q_proj", repeat, ("N", "d_v"), "A")
    for x in ("k", "v"):
        w.save(f"{x}_proj's own input copy", f"{b}.self_attn.{x}_proj", repeat,
               ("N", "d_v"), "AC")
    qkv_matmuls(w, b, names)
    if s.qk_norm:  # InternViT-6B's q_norm, k_norm: RMSNorms of the full q and k widths
        for x in ("q", "k"):
            rmsnorm(out, f"{x}_norm", f"{b}.self_attn.{x}_norm", repeat, "N")
    for x in ("q", "k", "v", "output"):
        w.save(f"sdpa {x}", f"{b}.self_attn", repeat, ("N", "d_v"), "A")
    w.save("sdpa log-sum-exp", f"{b}.self_attn", repeat, ("h_v", "N"), "F")
    core_matmuls(w, s, b, names)
    out_matmul(w, b, names)
    if layer_scale:  # InternViT: lambda_1 · attention output saves the output (lambda's grad)
        w.save("lambda_1's operand", b, repeat, ("N", "d_v"), "A")
    norm(out, norms[1], f"{b}.{norms[1]}", repeat, "N")
    mlp(w, s, b, repeat)
    if layer_scale:
        w.save("lambda_2's operand", b, repeat, ("N", "d_v"), "A")


def vit(w: Walk, s: VisionSpec) -> None:
    """SigLIP (Gemma 3) and CLIP (LLaVA) under model.vision_tower, and their projectors under
    model.multi_modal_projector (modeling_siglip.py, modeling_clip.py, modeling_gemma3.py,
    modeling_llava.py). The Conv2d saves the pixels, the position embedding its int64 ids
    (the position_ids buffer (1, N), expanded over the images). SigLIP: each layer, then
    post_layernorm; Gemma3MultiModalProjector's avg_pool input, Gemma3RMSNorm (x.float(),
    rsqrt, 1 + w in fp32, the normalized x) and the matmul's input. CLIP under
    LlavaModel.get_image_features (LLaVA-OneVision's SigLIP the same way on each tile,
    modeling_llava_onevision.py: pack_image_features's slices, bilinear downsampling and
    image_newline save nothing): pre_layrnorm its input; the encoder layers up to
    vision_feature_layer (L_vu of them: the later layers run, but nothing the loss reads
    depends on them, so their saves are freed with their outputs, post_layernorm's too);
    LlavaMultiModalProjector: linear_1's input (the feature layer's output, class token
    included, or under autocast its bf16 copy of the selected rows), the activation's
    input, linear_2's input."""
    siglip = s.projector == "gemma3"
    v = "model.vision_tower"  # transformers 5.23 names the tower's modules there directly
    if s.class_token:  # CLIPVisionEmbeddings.class_embedding
        w.param(f"{v}.embeddings.class_embedding", ("d_v",))
    w.param(f"{v}.embeddings.patch_embedding.weight", ("d_v", "k_v"))  # Conv2d(C, d, p, stride p)
    if s.patch_bias:
        w.param(f"{v}.embeddings.patch_embedding.bias", ("d_v",))
    w.param(f"{v}.embeddings.position_embedding.weight", ("N_pos", "d_v"))
    w.save("patch embedding input (pixels)", "embeddings.patch_embedding", None,
           ("N_p", "k_v"), "A")
    w.save("position ids (the buffer)", "embeddings.position_embedding", None, ("N",), "I",
           fixed=True)
    w.matmul("patch embedding (Conv2d as a matmul)", "embeddings.patch_embedding", ("N_p",),
             ("k_v",), ("d_v",))
    if s.pre_norm:  # CLIP's pre_layrnorm (sic)
        w.norm(f"{v}.pre_layrnorm", "layernorm")
        if not siglip:
            layernorm(w.saves, "pre_layrnorm", "pre_layrnorm", None, "N")
    _encoder_params(w, s, v)
    _encoder_layer(w, s, L_V if siglip else USED)
    if s.post_norm:
        w.norm(f"{v}.post_layernorm", "layernorm")
        if siglip:
            layernorm(w.saves, "post_layernorm", "post_layernorm", None, "N")
    p = "model.multi_modal_projector"
    q = "multi_modal_projector"
    if siglip:
        # Gemma3MultiModalProjector: avg pool, mm_soft_emb_norm (RMSNorm of d_v), then
        # torch.matmul(normed, mm_input_projection_weight): N_o × d_v @ d_v × d_t
        w.param(f"{p}.mm_input_projection_weight", ("d_v", "d_t"), projector=True)
        w.norm(f"{p}.mm_soft_emb_norm", "rmsnorm", projector=True)
        w.save("avg_pool input", f"{q}.avg_pool", None, ("N", "d_v"), "P", input_grad=True)
        n = f"{q}.mm_soft_emb_norm"
        w.save("mm_soft_emb_norm fp32 input", n, None, ("N_o", "d_v"), "F", input_grad=True)
        w.save("mm_soft_emb_norm rsqrt", n, None, ("N_o",), "F", input_grad=True)
        # (1 + w) · x_normed: 1 + w is saved for x_normed's gradient alone
        w.save("mm_soft_emb_norm 1 + w", n, None, ("d_v",), "F", fixed=True, input_grad=True)
        w.save("mm_soft_emb_norm normalized", n, None, ("N_o", "d_v"), "F")
        w.save("projection input", q, None, ("N_o", "d_v"), "A")
        w.matmul("projection into the language model", "multi_modal_projector", ("N_o",),
                 ("d_v",), ("d_t",))
        return
    # LlavaMultiModalProjector: linear_1 (d_v → d_t), act, linear_2 (d_t → d_t)
    if s.family == "llava_onevision":  # LlavaOnevisionModel.image_newline (no matmul)
        w.param("model.image_newline", ("d_t",), projector=True)
    w.linear(f"{p}.linear_1", "d_v", "d_t", s.projector_bias, projector=True)
    w.linear(f"{p}.linear_2", "d_t", "d_t", s.projector_bias, projector=True)
    w.save("linear_1 input (the feature layer's output)", f"{q}.linear_1", None, ("N", "d_v"),
           "NA")
    w.save("linear_1 input's bf16 copy", f"{q}.linear_1", None, ("N_o", "d_v"), "AC")
    w.matmul("projector linear_1", "multi_modal_projector.linear_1", ("N_o",), ("d_v",),
             ("d_t",))
    w.save("activation input", f"{q}.act", None, ("N_o", "d_t"), "A")
    w.save("linear_2 input", f"{q}.linear_2", None, ("N_o", "d_t"), "A")
    w.matmul("projector linear_2", "multi_modal_projector.linear_2", ("N_o",), ("d_t",),
             ("d_t",))


def idefics3(w: Walk, s: VisionSpec) -> None:
    """Idefics3VisionTransformer under model.vision_model and Idefics3Connector under
    model.connector (modeling_idefics3.py; SmolVLM's the same): one tile (N = N_p =
    (image_size/p)² patches; N_o = N_p/r² rows of d_vm = r²·d_v after the pixel shuffle):
    the Conv2d's pixels, the position ids, SigLIP's encoder layers, post_layernorm, and the
    connector's input after the pixel shuffle (a copy)."""
    v = "model.vision_model"
    w.param(f"{v}.embeddings.patch_embedding.weight", ("d_v", "k_v"))
    w.param(f"{v}.embeddings.patch_embedding.bias", ("d_v",))
    w.param(f"{v}.embeddings.position_embedding.weight", ("N_pos", "d_v"))
    w.save("patch embedding input (pixels)", "embeddings.patch_embedding", None,
           ("N_p", "k_v"), "A")
    w.save("position ids", "embeddings.position_embedding", None, ("N",), "I")
    w.matmul("patch embedding (Conv2d as a matmul)", "embeddings.patch_embedding", ("N_p",),
             ("k_v",), ("d_v",))
    _encoder_params(w, s, v)  # Idefics3VisionAttention declares k, v, q, out too
    _encoder_layer(w, s, L_V)
    w.norm(f"{v}.post_layernorm", "layernorm")
    layernorm(w.saves, "post_layernorm", "post_layernorm", None, "N")
    w.linear("model.connector.modality_projection.proj", "d_vm", "d_t", False, projector=True)
    w.save("connector input (pixel-shuffled)", "connector.modality_projection.proj", None,
           ("N_o", "d_vm"), "A")
    w.matmul("connector (after the pixel shuffle, into the language model)",
             "connector.modality_projection.proj", ("N_o",), ("d_vm",), ("d_t",))


def internvl(w: Walk, s: VisionSpec) -> None:
    """InternVLVisionModel under model.vision_tower and InternVLMultiModalProjector under
    model.multi_modal_projector (modeling_internvl.py): one tile (N = N_p + 1 tokens with
    the class token; N_o = N_p/4 rows of d_vm = 4·d_v after the pixel shuffle): the
    Conv2d's pixels; each layer SigLIP's saves and the two layer scales' operands (lambda_1
    · attention, lambda_2 · MLP); InternViT-6B (norm_type rms_norm, use_qk_norm:
    InternVL3-38B/78B) its two InternVLVisionRMSNorms in place of the LayerNorms and q_norm,
    k_norm on q_proj's and k_proj's outputs (the full width), and the final LayerNorm
    (use_mean_pooling false); the projector after the pixel shuffle: its LayerNorm over
    r²·d_v, linear_1's input, the GELU's, linear_2's."""
    v = "model.vision_tower"
    w.param(f"{v}.embeddings.cls_token", ("d_v",))
    if s.learned_positions:
        w.param(f"{v}.embeddings.position_embeddings", ("N_pos", "d_v"))
    w.param(f"{v}.embeddings.patch_embeddings.projection.weight", ("d_v", "k_v"))
    w.param(f"{v}.embeddings.patch_embeddings.projection.bias", ("d_v",))
    w.save("patch embedding input (pixels)", "embeddings.patch_embeddings", None,
           ("N_p", "k_v"), "A")
    w.matmul("patch embedding (Conv2d as a matmul)", "embeddings.patch_embeddings.projection",
             ("N_p",), ("k_v",), ("d_v",))
    b = f"{v}.encoder.layer.{BLOCK}"
    w.param(f"{b}.lambda_1", ("d_v",), "L_v")
    w.param(f"{b}.lambda_2", ("d_v",), "L_v")
    for x in ("q", "k", "v"):
        w.linear(f"{b}.attention.{x}_proj", "d_v", "d_v", s.qkv_bias, "L_v")
    if s.qk_norm:  # InternVLVisionRMSNorm over the full width
        w.norm(f"{b}.attention.q_norm", "rmsnorm", "L_v")
        w.norm(f"{b}.attention.k_norm", "rmsnorm", "L_v")
    w.linear(f"{b}.attention.projection_layer", "d_v", "d_v", True, "L_v")
    w.linear(f"{b}.mlp.fc1", "d_v", "f_v", True, "L_v")
    w.linear(f"{b}.mlp.fc2", "f_v", "d_v", True, "L_v")
    w.norm(f"{b}.layernorm_before", s.norm, "L_v")
    w.norm(f"{b}.layernorm_after", s.norm, "L_v")
    _encoder_layer(w, s, USED, "encoder.layer.{i}", ("layernorm_before", "layernorm_after"),
                   {"q": "attention.q_proj", "k": "attention.k_proj", "v": "attention.v_proj",
                    "core": "attention", "out": "attention.projection_layer"},
                   layer_scale=True)
    if s.post_norm:  # without use_mean_pooling
        w.norm(f"{v}.layernorm", "layernorm")
        if s.feature_layer == -1:  # last_hidden_state: after the final norm
            layernorm(w.saves, "layernorm", "layernorm", None, "N")
    p = "model.multi_modal_projector"
    q = "multi_modal_projector"
    w.norm(f"{p}.layer_norm", "layernorm", width="d_vm", projector=True)
    w.linear(f"{p}.linear_1", "d_vm", "d_t", True, projector=True)
    w.linear(f"{p}.linear_2", "d_t", "d_t", True, projector=True)
    layernorm(w.saves, "layer_norm", f"{q}.layer_norm", None, "N_o", width="d_vm")
    w.save("linear_1 input", f"{q}.linear_1", None, ("N_o", "d_vm"), "A")
    w.matmul("projector linear_1 (after the pixel shuffle)", "multi_modal_projector.linear_1",
             ("N_o",), ("d_vm",), ("d_t",))
    w.save("GELU input", f"{q}.act", None, ("N_o", "d_t"), "A")
    w.save("linear_2 input", f"{q}.linear_2", None, ("N_o", "d_t"), "A")
    w.matmul("projector linear_2 (into the language model)", "multi_modal_projector.linear_2",
             ("N_o",), ("d_t",), ("d_t",))


def llama4(w: Walk, s: VisionSpec) -> None:
    """Llama4VisionModel under vision_model and Llama4MultiModalProjector under
    multi_modal_projector (Llama4ForConditionalGeneration holds them at its top,
    modeling_llama4.py); one tile: the unfold's patches (the patch linear's input),
    layernorm_pre, the encoder layers (q and k rotated by the complex freqs_ci: its
    (N, d_h/2) complex64, made once per forward for every tile, is what the products save),
    layernorm_post, the pixel-shuffle MLP (fc1's input, GELU, fc2's input, GELU) and the
    projector's linear_1 input."""
    v = "vision_model"
    w.param(f"{v}.class_embedding", ("d_v",))
    w.param(f"{v}.positional_embedding_vlm", ("N_pos", "d_v"))
    w.param(f"{v}.patch_embedding.linear.weight", ("d_v", "k_v"))  # unfold, then no-bias linear
    w.save("patch linear input (unfolded pixels)", "patch_embedding.linear", None,
           ("N_p", "k_v"), "A")
    w.matmul("patch embedding (unfold and linear)", "patch_embedding.linear", ("N_p",),
             ("k_v",), ("d_v",))
    w.save("freqs_ci (complex64)", "rotary_embedding", None, ("N", "d_hv"), "F", fixed=True)
    w.norm(f"{v}.layernorm_pre", "layernorm")
    w.norm(f"{v}.layernorm_post", "layernorm")
    layernorm(w.saves, "layernorm_pre", "layernorm_pre", None, "N")
    b = f"{v}.model.layers.{BLOCK}"
    for x in ("q", "k", "v", "o"):
        w.linear(f"{b}.self_attn.{x}_proj", "d_v", "d_v", True, "L_v")
    w.linear(f"{b}.mlp.fc1", "d_v", "f_v", True, "L_v")
    w.linear(f"{b}.mlp.fc2", "f_v", "d_v", True, "L_v")
    w.norm(f"{b}.input_layernorm", "layernorm", "L_v")
    w.norm(f"{b}.post_attention_layernorm", "layernorm", "L_v")
    _encoder_layer(w, s, L_V, "model.layers.{i}", ("input_layernorm", "post_attention_layernorm"),
                   {**SELF_ATTN, "out": "self_attn.o_proj"})
    layernorm(w.saves, "layernorm_post", "layernorm_post", None, "N")
    # vision_adapter (Llama4VisionPixelShuffleMLP): N_o = (side/2)² rows of 4·d_v = f_v
    w.linear(f"{v}.vision_adapter.mlp.fc1", "f_v", "a_in", False, projector=True)
    w.linear(f"{v}.vision_adapter.mlp.fc2", "a_in", "a_out", False, projector=True)
    w.linear("multi_modal_projector.linear_1", "v_out", "d_t", False, projector=True)
    a = "vision_adapter.mlp"
    for name, rows in (("fc1 input (pixel-shuffled)", "f_v"), ("GELU input", "a_in"),
                       ("fc2 input", "a_in"), ("second GELU input", "a_out")):
        w.save(f"adapter {name}", a, None, ("N_o", rows), "A")
    w.matmul("adapter fc1 (after the pixel shuffle)", "vision_adapter.mlp.fc1", ("N_o",),
             ("f_v",), ("a_in",))
    w.matmul("adapter fc2", "vision_adapter.mlp.fc2", ("N_o",), ("a_in",), ("a_out",))
    w.save("projector linear_1 input", "multi_modal_projector.linear_1", None,
           ("N_o", "v_out"), "A")
    w.matmul("projector linear_1 (into the language model)", "multi_modal_projector.linear_1",
             ("N_o",), ("v_out",), ("d_t",))
