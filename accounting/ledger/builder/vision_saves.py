"""What autograd saves in a trained vision tower for the backward pass (issue 41, Must 3):
the saved tensors of one image's forward through transformers' tower and projector, in the
vision ledger's symbols (accounting/ledger/builder/vision.py values()), for the families
whose saves are checked against transformers on the CPU with saved-tensor hooks
(tests/test_vision_train.py): Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5
(Qwen2VisionTransformerPretrainedModel, Qwen2_5_VisionTransformerPretrainedModel,
Qwen3VLVisionModel with its deepstack mergers; Qwen3.5's Qwen3_5VisionModel is
Qwen3VLVisionModel without them, modular_qwen3_5.py), Gemma 3's SigLIP with its projector
(SiglipVisionModel, Gemma3MultiModalProjector) and LLaVA's CLIP with its MLP projector
(CLIPVisionModel, LlavaMultiModalProjector; LLaVA-OneVision's SigLIP and projector on each
tile), Kimi-K2.5's MoonViT with its projector
(Kimi_K25VisionModel, Kimi_K25MultimodalProjection) and Llama 4's (Llama4VisionModel,
Llama4MultiModalProjector), Idefics3's (Idefics3VisionTransformer, Idefics3Connector;
SmolVLM's the same), InternVL's InternViT (InternVLVisionModel,
InternVLMultiModalProjector; LayerNorm, or InternViT-6B's RMSNorms and QK-norm), Gemma
4's (Gemma4VisionModel, Gemma4MultimodalEmbedder: vision_saves_gemma4.py) and Mistral 3's
Pixtral (vision_saves_pixtral.py, its forward-wide block mask beside the per-image saves),
transformers 5.23, attention "sdpa".

Frozen tower (LLaMA-Factory's default: FinetuningArguments.freeze_vision_tower = True and
freeze_multi_modal_projector = True, src/llamafactory/hparams/finetuning_args.py): no
parameter needs a gradient and neither do the pixels, so autograd records no graph and
saves nothing (nothing here applies).

Each save is per image, except `fixed` ones (once per forward of the tower: the bf16 copy
autocast makes of each weight matrix for its matmul, which is per call, however many images
the call carries). The dtype of a save is a role, resolved by dtype_bytes():
  A   the compute dtype: float32, or bfloat16 (bf16 parameters, or under autocast: linear,
      conv and sdpa are autocast's lower-precision ops, so what they save is a bf16 copy);
  P   the parameters' dtype (SigLIP's and CLIP's residual stream: autocast's bf16 conv
      output plus the fp32 position embedding is fp32);
  F   float32 whatever the parameters (RMSNorm's upcast and rsqrt, sdpa's log-sum-exp,
      the rotary tables);
  I   int64 (indices an index op saves);
  LN  a LayerNorm's saved input: the residual stream's dtype, but float32 under CUDA's
      autocast (layer_norm is on its fp32 list; the CPU's autocast leaves it alone);
  ST  a LayerNorm's mean and rstd: float32 (the accumulation type on CUDA and under
      autocast), the input's dtype on the CPU without autocast;
  AC  a second bf16 copy under autocast of an input two linears share (each casts its
      own), nothing otherwise;
  LNC the fp32 copy CUDA's autocast makes for a LayerNorm whose input another op saves
      already (Qwen3-VL's deepstack mergers read the residual stream a block's norm1 or
      the merger saves), nothing otherwise;
  ACC a bf16 copy under CUDA's autocast of a LayerNorm's output each linear reading it makes
      (fp32 there; the CPU's autocast leaves a bf16 residual's LayerNorm in bf16), nothing
      otherwise;
  IC, IG  int64 on the CPU only, on CUDA only (embedding_bag's bookkeeping differs: below);
  NA  the parameters' dtype without autocast, nothing under it (LLaVA's projector input:
      the feature layer's output itself, or under autocast only its bf16 copy: AC);
  W   autocast's bf16 copy of a weight matrix, nothing otherwise;
  LNR a LayerNorm's input no other op saves, unless CUDA's autocast saves its fp32 copy
      (LNC) in its place (vision_saves_projector.py).
`repeat` "L_v": in every block. A block under gradient checkpointing (transformers'
GradientCheckpointingLayer: Qwen2VLVisionBlock, Qwen2_5_VLVisionBlock, SiglipEncoderLayer;
gradient_checkpointing_enable() reaches the tower's blocks) keeps its input, the residual
stream, instead of its saves.
"""
from __future__ import annotations

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder.vision_save import BLOCK, Save  # noqa: F401 (re-exported)
from accounting.units import BF16, DTYPE_BYTES, FP32, INT64

# the towers whose projector reads vision_feature_layer's hidden state (the later layers run,
# their saves freed with their unused outputs): LLaVA's, LLaVA-OneVision's, InternVL's
LLAVA = ("llava", "llava_onevision", "internvl")
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3", "kimi_k25", "llama4", "idefics3",
            "gemma4", "pixtral", *LLAVA)
USED = "L_vu"  # LLaVA: the layers whose output reaches the projector (vision_feature_layer)
# the linears reading the pixels (Llama 4's unfolded patches, Gemma 4's patch vectors): the
# pixels need no gradient, so their mm keeps the input alone, not autocast's weight copy
PIXEL_LINEARS = ("vision_model.patch_embedding.linear.weight",
                 "model.vision_tower.patch_embedder.input_proj.weight")


MODES = (FP32, BF16, "autocast")  # parameters fp32, bf16, or fp32 under bf16 autocast
DEVICES = ("cuda", "cpu")


def mode_of(precision) -> str:
    """A planning Precision's mode (planning/precisions.py): its autocast, else its
    parameters' dtype."""
    if precision.autocast is not None:
        return "autocast"
    return "bf16" if precision.param_dtype == BF16 else "fp32"


def roles(spec: VisionSpec, mode: str, device: str) -> dict[str, int]:
    """Bytes per element of each role (the module's docstring) for this tower, mode, device."""
    f32, b16 = DTYPE_BYTES[FP32], DTYPE_BYTES[BF16]
    out = {"A": f32 if mode == "fp32" else b16, "P": b16 if mode == "bf16" else f32,
           "F": f32, "I": DTYPE_BYTES[INT64],
           "ST": b16 if (mode == "bf16" and device == "cpu") else f32,
           "AC": b16 if mode == "autocast" else 0, "W": b16 if mode == "autocast" else 0}
    out["NA"] = 0 if mode == "autocast" else out["P"]
    out["ACC"] = b16 if (mode == "autocast" and device == "cuda") else 0
    out["IC"] = DTYPE_BYTES[INT64] if device == "cpu" else 0
    out["IG"] = DTYPE_BYTES[INT64] if device == "cuda" else 0
    out["R"] = out[residual(spec)]
    out["LN"] = f32 if (mode == "autocast" and device == "cuda") else out["R"]
    out["LNC"] = f32 if (mode == "autocast" and device == "cuda") else 0
    # a LayerNorm's input where no other op saves it and no fp32 copy replaces it (CUDA's
    # autocast saves that copy, LNC): Qwen3-VL's deepstack mergers trained on a frozen tower
    out["LNR"] = 0 if (mode == "autocast" and device == "cuda") else out["R"]
    # Gemma 4's (vision_saves_gemma4.py): a bool; weight.float() of bf16 parameters; fp32
    # unless autocast casts it; the compute dtype or fp32 on one device only (its masked
    # sdpa: the CPU's flash kernel, CUDA's memory-efficient one)
    out.update({"B1": 1, "WF": f32 if mode == "bf16" else 0,
                "FA": b16 if mode == "autocast" else f32,
                "AX": out["A"] if device == "cpu" else 0, "AG": out["A"] if device == "cuda" else 0,
                "FC": f32 if device == "cpu" else 0, "FG": f32 if device == "cuda" else 0})
    return out


def supported(spec: VisionSpec) -> bool:
    return spec.family in FAMILIES


def saves(spec: VisionSpec, params) -> tuple[Save, ...] | None:
    """One image's saves (and the fixed ones), in forward order; None: a tower whose saves
    are not written here. `params`: the tower's parameter records (its weight matrices);
    builder/vision.py walk() calls this and keeps the answer in its VisionLedger."""
    if not supported(spec):
        return None
    out: list[Save] = []
    s = spec
    if s.family == "gemma3":
        _siglip(out, s)
    elif s.family == "internvl":
        _internvit(out, s)
    elif s.family in LLAVA:
        _clip(out, s)
    elif s.family == "kimi_k25":
        _moonvit(out, s)
    elif s.family == "llama4":
        _llama4(out, s)
    elif s.family == "idefics3":
        _idefics3(out, s)
    elif s.family == "gemma4":
        from accounting.ledger.builder.vision_saves_gemma4 import gemma4
        gemma4(out, s)
    elif s.family == "pixtral":  # its forward-wide mask: vision_saves_pixtral.whole_forward
        from accounting.ledger.builder.vision_saves_pixtral import pixtral
        pixtral(out, s)
    else:
        _qwen(out, s)
    # autocast's bf16 copy of every weight matrix a matmul or conv reads (a position table
    # is looked up, not multiplied)
    # (Llama 4's patch linear reads the unfolded pixels, which need no gradient: its mm
    # keeps the input alone, for the weight's gradient; a conv keeps its weight either way)
    for p in params:
        if len(p.shape) == 2 and "position" not in p.name and "pos_embed" not in p.name \
                and p.name not in PIXEL_LINEARS and not unused_merger(s, p.module):
            repeat = USED if (s.family in LLAVA and p.repeat) else p.repeat
            out.append(Save(f"bf16 copy of {p.name}", p.module, repeat, p.shape, "W",
                            fixed=True))
    return tuple(out)


def unused_merger(spec: VisionSpec, module: str) -> bool:
    """A Qwen3-VL deepstack merger (its module, any prefix) whose output reaches no loss:
    the k-th past the language model's layers (VisionSpec.deepstack_used)."""
    _, found, rest = module.partition("deepstack_merger_list.")
    return bool(found) and int(rest.split(".")[0]) >= spec.deepstack_used


def residual(spec: VisionSpec) -> str:
    """The role of the residual stream between blocks (what checkpointing keeps)."""
    # SigLIP, CLIP, Llama 4: an fp32 position table or class embedding joins the stream;
    # Kimi casts its positions to the stream's dtype, Qwen adds none
    # (Pixtral's ln_pre multiplies the bf16 conv output by its fp32 weight under autocast)
    return "P" if spec.family in ("gemma3", "llama4", "idefics3", "gemma4", "pixtral",
                                  *LLAVA) else "A"


def _layernorm(out, name: str, module: str, repeat, rows: str, width: str = "d_v") -> None:
    out.append(Save(f"{name} input", module, repeat, (rows, width), "LN"))
    out.append(Save(f"{name} mean and rstd", module, repeat, (rows,), "ST"))
    out.append(Save(f"{name} mean and rstd", module, repeat, (rows,), "ST"))


def _rmsnorm(out, name: str, module: str, repeat, rows: str, role: str = "A") -> None:
    """Qwen2RMSNorm (InternVLVisionRMSNorm the same): x.to(float32) (pow saves it), rsqrt's
    output, and weight · x_normed saves x_normed cast back to the input's dtype (for the
    weight's gradient): `role`, the input's (InternViT-6B's residual stream is "R": fp32
    under autocast; its q_norm and k_norm read q_proj's and k_proj's outputs, "A")."""
    out.append(Save(f"{name} fp32 input", module, repeat, (rows, "d_v"), "F", input_grad=True))
    out.append(Save(f"{name} rsqrt", module, repeat, (rows,), "F", input_grad=True))
    out.append(Save(f"{name} normalized", module, repeat, (rows, "d_v"), role))


def _qwen(out, s: VisionSpec) -> None:
    """modeling_qwen2_vl.py / modeling_qwen2_5_vl.py: the Conv3d patch embedding saves its
    input (the pixels, cast to the weight's dtype or by autocast); rot_pos_emb's cos and sin
    (fp32, (N, d_h) each, made once and passed to every block); each block: its norms, the
    qkv input, the rotated q and k (new tensors), v (a view of the whole qkv output), sdpa's
    output and log-sum-exp (per window or image: together N rows), the attention output
    torch.cat made (proj's input), the MLP; the merger: ln_q, mlp.0, GELU, mlp.2.
    Qwen2.5-VL's window_index and reverse_indices are saved by their index ops."""
    out.append(Save("patch embedding input (pixels)", "patch_embed.proj", None,
                    ("N_p", "k_v"), "A"))
    if s.learned_positions:  # Qwen3-VL: pos_embed at 4 interpolation corners a patch, weighed
        out.append(Save("pos_embed indices", "pos_embed", None, ("N",), "I", copies=4))
        out.append(Save("interpolation weights", "", None, ("N",), "F", copies=4))
    if s.window is not None:
        out.append(Save("window_index", "", None, ("N_m",), "I"))
    for x in ("cos", "sin"):
        out.append(Save(f"rotary {x}", "", None, ("N", "d_hv"), "F"))
    b = "blocks.{i}"
    norm = _rmsnorm if s.norm == "rmsnorm" else _layernorm
    norm(out, "norm1", f"{b}.norm1", BLOCK, "N")
    out.append(Save("qkv input", f"{b}.attn.qkv", BLOCK, ("N", "d_v"), "A"))
    out.append(Save("q rotated", f"{b}.attn", BLOCK, ("N", "d_v"), "A"))
    out.append(Save("k rotated", f"{b}.attn", BLOCK, ("N", "d_v"), "A"))
    out.append(Save("v (the qkv output)", f"{b}.attn", BLOCK, ("N", "3d_v"), "A"))
    out.append(Save("sdpa output", f"{b}.attn", BLOCK, ("N", "d_v"), "A"))
    out.append(Save("sdpa log-sum-exp", f"{b}.attn", BLOCK, ("h_v", "N"), "F"))
    out.append(Save("proj input (the segments' outputs, concatenated)", f"{b}.attn.proj",
                    BLOCK, ("N", "d_v"), "A"))
    norm(out, "norm2", f"{b}.norm2", BLOCK, "N")
    if s.mlp_gated:  # Qwen2_5_VLMLP: down(act(gate(x)) * up(x))
        out.append(Save("gate_proj/up_proj input", f"{b}.mlp.gate_proj", BLOCK, ("N", "d_v"), "A"))
        out.append(Save("up_proj's own input copy", f"{b}.mlp.up_proj", BLOCK, ("N", "d_v"),
                        "AC"))
        out.append(Save(f"{s.act} input", f"{b}.mlp.act_fn", BLOCK, ("N", "f_v"), "A"))
        out.append(Save(f"{s.act} output (the product's)", f"{b}.mlp", BLOCK, ("N", "f_v"), "A"))
        out.append(Save("up_proj output (the product's)", f"{b}.mlp", BLOCK, ("N", "f_v"), "A"))
        out.append(Save("down_proj input", f"{b}.mlp.down_proj", BLOCK, ("N", "f_v"), "A"))
    else:  # VisionMlp / Qwen3VLVisionMLP: fc2(act(fc1(x))); QuickGELU x·sigmoid(1.702x)
        # saves x and the sigmoid, a GELU its input
        fc1, act, fc2 = (("linear_fc1", "act_fn", "linear_fc2") if s.family == "qwen3_vl"
                         else ("fc1", "act", "fc2"))
        out.append(Save("fc1 input", f"{b}.mlp.{fc1}", BLOCK, ("N", "d_v"), "A"))
        out.append(Save(f"{s.act} input", f"{b}.mlp.{act}", BLOCK, ("N", "f_v"), "A"))
        if s.act == "quick_gelu":
            out.append(Save("QuickGELU sigmoid output", f"{b}.mlp.{act}", BLOCK, ("N", "f_v"),
                            "A"))
        out.append(Save("fc2 input", f"{b}.mlp.{fc2}", BLOCK, ("N", "f_v"), "A"))
    if s.family == "qwen3_vl":  # Qwen3VLVisionPatchMerger: norm, linear_fc1, GELU, linear_fc2
        # after their blocks: norm over s²·d_v (postshuffle); a merger past the language
        # model's layers reaches no loss, its saves freed with its output (deepstack_used)
        for j in range(s.deepstack_used):
            m = f"deepstack_merger_list.{j}"
            out.append(Save(f"{m} norm's fp32 copy", f"{m}.norm", None, ("N_m", "d_vm"),
                            "LNC"))
            for _ in range(2):
                out.append(Save(f"{m} norm mean and rstd", f"{m}.norm", None, ("N_m",), "ST"))
            _merger_mlp(out, m, "linear_fc1", "act_fn", "linear_fc2")
        _layernorm(out, "merger norm", "merger.norm", None, "N")
        _merger_mlp(out, "merger", "linear_fc1", "act_fn", "linear_fc2")
        return
    norm(out, "merger ln_q", "merger.ln_q", None, "N")
    _merger_mlp(out, "merger", "mlp.0", "mlp.1", "mlp.2")
    if s.window is not None:
        out.append(Save("reverse_indices", "", None, ("N_m",), "I", after_projector=True))


def _encoder_layers(out, s: VisionSpec, repeat: str, b: str = "encoder.layers.{i}",
                    norms: tuple[str, str] = ("layer_norm1", "layer_norm2"),
                    layer_scale: bool = False) -> None:
    """SiglipEncoderLayer / CLIPEncoderLayer / Llama4VisionEncoderLayer: the first norm, the
    q/k/v projections' input (one tensor; under autocast each casts its own copy of the
    fp32 norm output), sdpa's q, k, v, output (out_proj's input is a view of it) and
    log-sum-exp, the second norm, fc1's input, the activation's (QuickGELU also its
    sigmoid), fc2's input."""
    rms = s.norm == "rmsnorm"  # InternViT-6B's InternVLVisionRMSNorm (norm_type rms_norm)
    norm = (lambda *a: _rmsnorm(*a, role="R")) if rms else _layernorm
    norm(out, norms[0], f"{b}.{norms[0]}", repeat, "N")
    out.append(Save("q/k/v input", f"{b}.self_attn.q_proj", repeat, ("N", "d_v"), "A"))
    for x in ("k", "v"):
        out.append(Save(f"{x}_proj's own input copy", f"{b}.self_attn.{x}_proj", repeat,
                        ("N", "d_v"), "AC"))
    if s.qk_norm:  # InternViT-6B's q_norm, k_norm: RMSNorms of the full q and k widths
        for x in ("q", "k"):
            _rmsnorm(out, f"{x}_norm", f"{b}.self_attn.{x}_norm", repeat, "N")
    for x in ("q", "k", "v", "output"):
        out.append(Save(f"sdpa {x}", f"{b}.self_attn", repeat, ("N", "d_v"), "A"))
    out.append(Save("sdpa log-sum-exp", f"{b}.self_attn", repeat, ("h_v", "N"), "F"))
    if layer_scale:  # InternViT: lambda_1 · attention output saves the output (lambda's grad)
        out.append(Save("lambda_1's operand", b, repeat, ("N", "d_v"), "A"))
    norm(out, norms[1], f"{b}.{norms[1]}", repeat, "N")
    out.append(Save("fc1 input", f"{b}.mlp.fc1", repeat, ("N", "d_v"), "A"))
    out.append(Save(f"{s.act} input", f"{b}.mlp.activation_fn", repeat, ("N", "f_v"), "A"))
    if s.act == "quick_gelu":
        out.append(Save("QuickGELU sigmoid output", f"{b}.mlp.activation_fn", repeat,
                        ("N", "f_v"), "A"))
    out.append(Save("fc2 input", f"{b}.mlp.fc2", repeat, ("N", "f_v"), "A"))
    if layer_scale:
        out.append(Save("lambda_2's operand", b, repeat, ("N", "d_v"), "A"))


def _internvit(out, s: VisionSpec) -> None:
    """InternVLVisionModel and InternVLMultiModalProjector (modeling_internvl.py), one tile:
    the Conv2d's pixels; each layer SigLIP's saves and the two layer scales' operands
    (lambda_1 · attention, lambda_2 · MLP); InternViT-6B (norm_type rms_norm, use_qk_norm:
    InternVL3-38B/78B) its two InternVLVisionRMSNorms in place of the LayerNorms and q_norm,
    k_norm on q_proj's and k_proj's outputs (the full width), and the final LayerNorm
    (use_mean_pooling false); the projector after
    the pixel shuffle: its LayerNorm over r²·d_v, linear_1's input, the GELU's, linear_2's."""
    out.append(Save("patch embedding input (pixels)", "embeddings.patch_embeddings", None,
                    ("N_p", "k_v"), "A"))
    _encoder_layers(out, s, USED, "encoder.layer.{i}", ("layernorm_before", "layernorm_after"),
                    layer_scale=True)
    if s.post_norm and s.feature_layer == -1:  # last_hidden_state: after the final norm
        _layernorm(out, "layernorm", "layernorm", None, "N")
    p = "multi_modal_projector"
    _layernorm(out, "layer_norm", f"{p}.layer_norm", None, "N_o", width="d_vm")
    out.append(Save("linear_1 input", f"{p}.linear_1", None, ("N_o", "d_vm"), "A"))
    out.append(Save("GELU input", f"{p}.act", None, ("N_o", "d_t"), "A"))
    out.append(Save("linear_2 input", f"{p}.linear_2", None, ("N_o", "d_t"), "A"))


def _clip(out, s: VisionSpec) -> None:
    """CLIPVisionModel under LlavaModel.get_image_features (modeling_clip.py,
    modeling_llava.py), and LLaVA-OneVision's SigLIP the same way on each tile
    (modeling_llava_onevision.py: pack_image_features's slices, bilinear downsampling and
    image_newline save nothing): the Conv2d saves the pixels, the position embedding its int64 ids,
    pre_layrnorm its input; the encoder layers up to vision_feature_layer (L_vu of them:
    the later layers run, but nothing the loss reads depends on them, so their saves are
    freed with their outputs, post_layernorm's too); LlavaMultiModalProjector: linear_1's
    input (the feature layer's output, class token included, or under autocast its bf16
    copy of the selected rows), the activation's input, linear_2's input."""
    out.append(Save("patch embedding input (pixels)", "embeddings.patch_embedding", None,
                    ("N_p", "k_v"), "A"))
    out.append(Save("position ids (the buffer)", "embeddings.position_embedding", None,
                    ("N",), "I", fixed=True))
    if s.pre_norm:
        _layernorm(out, "pre_layrnorm", "pre_layrnorm", None, "N")
    _encoder_layers(out, s, USED)
    p = "multi_modal_projector"
    out.append(Save("linear_1 input (the feature layer's output)", f"{p}.linear_1", None,
                    ("N", "d_v"), "NA"))
    out.append(Save("linear_1 input's bf16 copy", f"{p}.linear_1", None, ("N_o", "d_v"), "AC"))
    out.append(Save("activation input", f"{p}.act", None, ("N_o", "d_t"), "A"))
    out.append(Save("linear_2 input", f"{p}.linear_2", None, ("N_o", "d_t"), "A"))


def _moonvit(out, s: VisionSpec) -> None:
    """Kimi_K25VisionModel and Kimi_K25MultimodalProjection (modeling_kimi_k25.py): the
    Conv2d saves the pixels; the position table is resampled bicubically by F.embedding_bag
    (16 table rows a patch, mode "sum", per_sample_weights in the table's dtype): it saves
    the indices, the offsets and the weights, and its bookkeeping: on the CPU bag_size and
    max_indices (N each; measured), on CUDA offset2bag (16·N) and bag_size (N), max_indices
    empty outside mode "max" (aten/src/ATen/native/cuda/EmbeddingBag.cu
    _embedding_bag_cuda; read, not measured here); the rotary cos and sin (fp32, made once);
    each block: norm1, the q/k/v projections' input (one bf16 tensor under the CPU's
    autocast, three copies of the fp32 LayerNorm output under CUDA's), the rotated q and k,
    v, sdpa's output and log-sum-exp, proj's input (a copy), norm2, fc1's input, the GELU's,
    fc2's; final_layernorm; the projector: the 2×2 merge's gather indices, pre_norm,
    in_proj's input, the GELU's, out_proj's."""
    out.append(Save("patch embedding input (pixels)", "patch_embed.proj", None,
                    ("N_p", "k_v"), "A"))
    e = "patch_embed.pos_emb"
    out.append(Save("embedding_bag indices", e, None, ("N",), "I", copies=16))
    out.append(Save("embedding_bag per_sample_weights", e, None, ("N",), "P", copies=16))
    out.append(Save("embedding_bag offsets", e, None, ("N",), "I"))
    out.append(Save("embedding_bag bag_size", e, None, ("N",), "I"))
    out.append(Save("embedding_bag max_indices (CPU)", e, None, ("N",), "IC"))
    out.append(Save("embedding_bag offset2bag (CUDA)", e, None, ("N",), "IG", copies=16))
    for x in ("cos", "sin"):
        out.append(Save(f"rotary {x}", "", None, ("N", "d_hv"), "F"))
    b = "layers.{i}"
    _layernorm(out, "norm1", f"{b}.norm1", BLOCK, "N")
    out.append(Save("q/k/v input", f"{b}.attn.q_proj", BLOCK, ("N", "d_v"), "A"))
    for x in ("k", "v"):
        out.append(Save(f"{x}_proj's own input copy", f"{b}.attn.{x}_proj", BLOCK,
                        ("N", "d_v"), "ACC"))
    for x in ("q rotated", "k rotated", "v", "output"):
        out.append(Save(f"sdpa {x}", f"{b}.attn", BLOCK, ("N", "d_v"), "A"))
    out.append(Save("sdpa log-sum-exp", f"{b}.attn", BLOCK, ("h_v", "N"), "F"))
    out.append(Save("proj input", f"{b}.attn.proj", BLOCK, ("N", "d_v"), "A"))
    _layernorm(out, "norm2", f"{b}.norm2", BLOCK, "N")
    out.append(Save("fc1 input", f"{b}.mlp.fc1", BLOCK, ("N", "d_v"), "A"))
    out.append(Save(f"{s.act} input", f"{b}.mlp", BLOCK, ("N", "f_v"), "A"))
    out.append(Save("fc2 input", f"{b}.mlp.fc2", BLOCK, ("N", "f_v"), "A"))
    _layernorm(out, "final_layernorm", "final_layernorm", None, "N")
    p = "mm_projector"
    # (the gather runs on the tower's output, before pre_norm: for that input's gradient)
    out.append(Save("2×2 merge's gather indices", p, None, ("N",), "I", input_grad=True))
    _layernorm(out, "pre_norm", f"{p}.pre_norm", None, "N")
    _merger_mlp(out, p, "in_proj", "act", "out_proj")


def _llama4(out, s: VisionSpec) -> None:
    """Llama4VisionModel and Llama4MultiModalProjector (modeling_llama4.py), one tile: the
    unfold's patches (the patch linear's input), layernorm_pre, the encoder layers (q and k
    rotated by the complex freqs_ci: its (N, d_h/2) complex64, made once per forward for
    every tile, is what the products save), layernorm_post, the pixel-shuffle MLP (fc1's
    input, GELU, fc2's input, GELU) and the projector's linear_1 input."""
    out.append(Save("patch linear input (unfolded pixels)", "patch_embedding.linear", None,
                    ("N_p", "k_v"), "A"))
    out.append(Save("freqs_ci (complex64)", "rotary_embedding", None, ("N", "d_hv"), "F",
                    fixed=True))
    _layernorm(out, "layernorm_pre", "layernorm_pre", None, "N")
    _encoder_layers(out, s, BLOCK, "model.layers.{i}",
                    ("input_layernorm", "post_attention_layernorm"))
    _layernorm(out, "layernorm_post", "layernorm_post", None, "N")
    a = "vision_adapter.mlp"
    for name, rows in (("fc1 input (pixel-shuffled)", "f_v"), ("GELU input", "a_in"),
                       ("fc2 input", "a_in"), ("second GELU input", "a_out")):
        out.append(Save(f"adapter {name}", a, None, ("N_o", rows), "A"))
    out.append(Save("projector linear_1 input", "multi_modal_projector.linear_1", None,
                    ("N_o", "v_out"), "A"))


def _idefics3(out, s: VisionSpec) -> None:
    """Idefics3VisionTransformer and Idefics3Connector (modeling_idefics3.py; SmolVLM's the
    same), one tile: the Conv2d's pixels, the position ids, SigLIP's encoder layers,
    post_layernorm, and the connector's input after the pixel shuffle (N_o rows of r²·d_v,
    a copy)."""
    out.append(Save("patch embedding input (pixels)", "embeddings.patch_embedding", None,
                    ("N_p", "k_v"), "A"))
    out.append(Save("position ids", "embeddings.position_embedding", None, ("N",), "I"))
    _encoder_layers(out, s, BLOCK)
    _layernorm(out, "post_layernorm", "post_layernorm", None, "N")
    out.append(Save("connector input (pixel-shuffled)", "connector.modality_projection.proj",
                    None, ("N_o", "d_vm"), "A"))


def used_layers(spec: VisionSpec) -> int:
    """The layers whose output reaches LLaVA's projector: hidden_states[vision_feature_layer]
    of the L + 1 (the embeddings', then each layer's)."""
    k = spec.feature_layer
    return max(0, min(spec.depth, spec.depth + 1 + k if k < 0 else k))


def _merger_mlp(out, m: str, fc1: str, act: str, fc2: str) -> None:
    """A patch merger's MLP on N_m rows of s²·d_v: fc1's input, the GELU's, fc2's."""
    for name, what in ((fc1, "input"), (act, "GELU input"), (fc2, "input")):
        out.append(Save(f"{m} {name} {what}", f"{m}.{name}", None, ("N_m", "d_vm"), "A"))


def _siglip(out, s: VisionSpec) -> None:
    """modeling_siglip.py and Gemma3MultiModalProjector (modeling_gemma3.py): the Conv2d
    saves the pixels, the position embedding its int64 ids; each layer: layer_norm1, the
    q/k/v projections' input (one tensor; under autocast each casts its own copy), sdpa's
    q, k, v, output (out_proj's input is a view of it) and log-sum-exp, layer_norm2, fc1's
    input, gelu_pytorch_tanh's input, fc2's input; post_layernorm; the projector's
    avg_pool input, Gemma3RMSNorm (x.float(), rsqrt, 1 + w in fp32, the normalized x) and
    the matmul's input."""
    out.append(Save("patch embedding input (pixels)", "embeddings.patch_embedding", None,
                    ("N_p", "k_v"), "A"))
    # the lookup saves its ids: the position_ids buffer (1, N), expanded over the images
    out.append(Save("position ids (the buffer)", "embeddings.position_embedding", None,
                    ("N",), "I", fixed=True))
    _encoder_layers(out, s, BLOCK)
    if s.post_norm:
        _layernorm(out, "post_layernorm", "post_layernorm", None, "N")
    p = "multi_modal_projector"
    out.append(Save("avg_pool input", f"{p}.avg_pool", None, ("N", "d_v"), "P",
                    input_grad=True))
    out.append(Save("mm_soft_emb_norm fp32 input", f"{p}.mm_soft_emb_norm", None,
                    ("N_o", "d_v"), "F", input_grad=True))
    out.append(Save("mm_soft_emb_norm rsqrt", f"{p}.mm_soft_emb_norm", None, ("N_o",), "F",
                    input_grad=True))
    # (1 + w) · x_normed: 1 + w is saved for x_normed's gradient alone
    out.append(Save("mm_soft_emb_norm 1 + w", f"{p}.mm_soft_emb_norm", None, ("d_v",), "F",
                    fixed=True, input_grad=True))
    out.append(Save("mm_soft_emb_norm normalized", f"{p}.mm_soft_emb_norm", None,
                    ("N_o", "d_v"), "F"))
    out.append(Save("projection input", p, None, ("N_o", "d_v"), "A"))


def bytes_per_image(ledger, values: dict[str, int], mode: str, device: str = "cuda",
                    checkpointed: bool = False) -> tuple[int, int] | None:
    """(bytes per image at these values, bytes once per forward); None: saves not written
    for this tower. checkpointed: each block keeps its input (N × d_v in the residual
    stream's dtype) in place of its saves."""
    table = ledger.saves
    if table is None:
        return None
    r = roles(ledger.spec, mode, device)
    n = values.get("N", 0)  # CUDA's memory-efficient sdpa: its mask's columns to 8, its
    # log-sum-exp's rows to 32 (vision_saves_gemma4.py)
    values = {**values, USED: used_layers(ledger.spec), "N_8": -(-n // 8) * 8,
              "N_32": -(-n // 32) * 32}
    blocks = USED if ledger.spec.family in LLAVA else BLOCK
    kept = [x for x in table if not (checkpointed and x.repeat == blocks)]
    if checkpointed:
        kept.append(Save("block input (gradient checkpointing)", "blocks.{i}", blocks,
                         ("N", "d_v"), "R"))
    per = sum(x.bytes(values, r) for x in kept if not x.fixed)
    once = sum(x.bytes(values, r) for x in kept if x.fixed)
    return per, once
