"""The vision tower of a vision-language model: one frozen spec of the encoder and its
projector into the language model, read from a config.json's vision_config (issue 41).
accounting/ledger/builder/vision.py walks it into parameter, matmul and saved-tensor
records; the image workload (accounting/analysis/images.py) evaluates them per image.

Each reader follows transformers 5.23.0's modeling code of its family (cited per reader):
the keys it reads are those the tower's modules read, with the config class's defaults; a
key of vision_config no reader knows is refused (it might change a count).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from accounting.runtime.errors import UsageError


@dataclass(frozen=True)
class VisionSpec:
    """A ViT tower and its projector. Sizes: width d_v, heads h_v, MLP width f_v (gated:
    gate/up/down, else fc1/fc2), patch p (temporal_patch frames per patch: Qwen's Conv3d
    sees an image as 2 equal frames), channels C. Positions: a learned table of
    `learned_positions` rows (CLIP, SigLIP) or 2D RoPE (Qwen). Attention over each image's
    patches (bidirectional), Qwen2.5-VL's window blocks over windows of `window` merged
    units a side. Projector: Qwen's patch merger (s×s patches concatenated, LN, two
    linears), LLaVA's two-linear MLP, Gemma 3's average pool, RMSNorm and one matrix."""
    family: str  # qwen2_vl, qwen2_5_vl, qwen3_vl, kimi_k25, llama4, gemma3, gemma4, llava, pixtral
    depth: int
    width: int
    heads: int
    mlp_width: int
    mlp_gated: bool
    act: str  # the MLP's activation, by transformers' name (for the tables)
    norm: str  # "layernorm" (weight and bias) or "rmsnorm" (a weight)
    patch: int
    temporal_patch: int
    channels: int
    patch_bias: bool
    learned_positions: int  # rows of the position table (0: 2D RoPE, no table)
    class_token: bool  # CLIP's class embedding, one more token per image
    pre_norm: bool  # CLIP's pre_layrnorm
    post_norm: bool  # CLIP's and SigLIP's post_layernorm (built, counted, run)
    merge: int  # Qwen's spatial_merge_size (1: none)
    window: int | None  # Qwen2.5-VL: a window's side in merged units (None: full attention)
    full_blocks: tuple[int, ...]  # Qwen2.5-VL's fullatt_block_indexes
    projector: str  # "qwen_merger", "llava_mlp", "gemma3"
    projector_bias: bool
    text_width: int  # the language model's hidden_size
    image_size: int | None  # a fixed-resolution tower's input side (every image resized)
    tokens_per_image: int | None  # Gemma 3's mm_tokens_per_image
    keep_class_token: bool = False  # LLaVA's vision_feature_select_strategy "full"
    deepstack: int = 0  # Qwen3-VL's deepstack mergers (len(deepstack_visual_indexes))
    # Qwen's image processor bounds (min_pixels, max_pixels) as the family's published
    # checkpoints' preprocessor_config.json set them; None: a fixed-resolution tower
    pixels: tuple[int, int] | None = None
    # Llama 4's pixel-shuffle adapter: fc1 (d/r² → adapter_in), fc2 (adapter_in →
    # adapter_out), then multi_modal_projector.linear_1 (vision_output_dim → text)
    adapter_in: int = 0
    adapter_out: int = 0
    vision_out: int = 0
    max_tiles: int = 0  # Llama 4's image processor: max_patches tiles of image_size²
    pool: int = 1  # Gemma 4's pooling_kernel_size (k × k patches a soft token)
    kv_heads: int = 0  # Gemma 4: K/V heads and the head dim, when given (0: heads, width/heads)
    attn_head_dim: int = 0
    longest_edge: int = 0  # Pixtral's processor: each image fitted within this many pixels a side
    qkv_bias: bool = True  # InternViT: attention_bias (q/k/v biases), use_qk_norm (RMSNorms of
    qk_norm: bool = False  # the full Q and K widths) and its layer scales lambda_1, lambda_2
    # LLaVA-OneVision's anyres: image_grid_pinpoints ((height, width) pairs) and anyres_max_N
    pinpoints: tuple[tuple[int, int], ...] = ()
    anyres_max: int = 0
    # the image processor's tiling (accounting/architecture/processor.py): Idefics3's
    # do_image_splitting and InternVL's crop_to_patches (False: one tile of image_size²);
    # InternVL's min_patches (its max_patches is max_tiles)
    split: bool = True
    min_tiles: int = 1
    # LLaVA's vision_feature_layer: the hidden state the projector reads (-1 the last
    # layer's output; -2, LLaVA-1.5's, the one before: the last layer runs, its output unused)
    feature_layer: int = -1
    # Gemma 3's pan-and-scan (Gemma3ImageProcessor.pan_and_scan_batched): off unless
    # --pan-and-scan or a preprocessor_config.json says do_pan_and_scan; min crop size,
    # max crops and the aspect ratio that activates it, Gemma3Processor's images_kwargs
    # defaults (processing_gemma3.py, transformers 5.23: 256, 4, 1.2; google/gemma-3-*'s
    # published preprocessor_config.json leave all four null, so these apply). The ratio is
    # compared as the processor compares it, a float.
    pan_scan: bool = False
    pan_min_crop: int = 256
    pan_max_crops: int = 4
    pan_min_ratio: float = 1.2
    # Gemma 4: standardize (std_bias, std_scale buffers after the pooler) and
    # use_clipped_linears (each linear clamps its input and output): what its saves follow
    standardize: bool = False
    clipped: bool = False
    # Qwen3-VL: deepstack_visual_indexes; the text layers (a merger past them reaches no loss)
    deepstack_at: tuple[int, ...] = ()
    text_layers: int = 0

    @property
    def deepstack_used(self) -> int:
        """Qwen3VLTextModel adds the k-th merger's output to layer k: k < its layers."""
        return min(self.deepstack, self.text_layers) if self.text_layers else self.deepstack

    @property
    def head_dim(self) -> int:
        return self.attn_head_dim or self.width // self.heads

    def runnable(self) -> str | None:
        """Why transformers' forward cannot run an image through this tower (None: it can);
        its parameters are counted either way, as transformers builds them."""
        if self.family == "llama4" and (
                self.width * 4 != self.mlp_width or self.adapter_in != self.adapter_out
                or self.adapter_out != self.vision_out or (self.image_size // self.patch) % 2):
            return ("Llama 4's pixel shuffle needs intermediate_size = 4·hidden_size, "
                    "projector_input_dim = projector_output_dim = vision_output_dim and an "
                    "even patch grid (Llama4VisionPixelShuffleMLP, Llama4MultiModalProjector)")
        return None

    @property
    def window_blocks(self) -> tuple[int, ...]:
        """The blocks that attend within windows (Qwen2.5-VL: all but fullatt_block_indexes)."""
        if self.window is None:
            return ()
        return tuple(i for i in range(self.depth) if i not in self.full_blocks)


# model_type of the config.json -> read(data, where, the language model's hidden_size as
# read) -> VisionSpec; a type registered twice
# is a bug (accounting/registry.py's rule)
READERS: dict[str, Callable[[Mapping, str, int], VisionSpec]] = {}


def reader(model_type: str):
    def wrap(fn):
        if model_type in READERS:
            raise ValueError(f"vision reader {model_type!r} registered twice")
        READERS[model_type] = fn
        return fn
    return wrap


def read_vision(data: Mapping, where: str, text_width: int) -> VisionSpec | None:
    """The tower of a vision-language config.json (None: no reader for its model_type);
    `text_width` the language model's hidden_size as read (its config class's default
    where text_config omits it)."""
    fn = READERS.get(data.get("model_type"))
    return None if fn is None else fn(data, where, text_width)


# ---- reading vision_config -----------------------------------------------------------------
def _int(v, key: str, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 10**7:
        raise UsageError(f"{where}: vision_config.{key} must be a positive integer, got {v!r}")
    return v


def _section(data: Mapping, where: str) -> Mapping:
    vc = data.get("vision_config")
    if not isinstance(vc, dict):
        raise UsageError(f"{where}: vision_config must be the vision tower's config object, "
                         f"got {type(vc).__name__}; transformers would build its default tower")
    return vc


def _keys(vc: Mapping, where: str, known: frozenset) -> None:
    unknown = sorted(k for k in vc if k not in known and k not in _FREE)
    if unknown:
        raise UsageError(f"{where}: unknown vision_config key(s) {', '.join(unknown[:4])}: the "
                         f"tool cannot tell whether they change the tower's count, so it "
                         f"refuses rather than drop them")


def _get(vc: Mapping, key: str, default, where: str, *aliases: str) -> int:
    for k in (key, *aliases):
        if k in vc:
            return _int(vc[k], k, where)
    return default


# keys no tower module reads for a count: initialisation, dtype, names, training switches
_FREE = frozenset({"model_type", "initializer_range", "initializer_factor", "torch_dtype",
                   "dtype", "_name_or_path", "architectures", "transformers_version",
                   "attention_dropout", "dropout", "tokens_per_second", "rope_parameters",
                   "rope_theta", "projection_dim", "layer_norm_eps", "vision_use_head",
                   "_attn_implementation_autoset", "_attn_implementation", "spatial_patch_size",
                   "return_dict",
                   "output_hidden_states", "output_attentions", "use_return_dict"})


# Qwen2-VL-7B-Instruct's and Qwen2.5-VL-7B-Instruct's preprocessor_config.json: min_pixels
# 3,136, max_pixels 12,845,056 (Qwen2VLImageProcessor's class defaults are 3,136 and
# 1,003,520 = 28·28·1280); Qwen3-VL's and Qwen3.5's: size shortest_edge 65,536, longest_edge
# 16,777,216
QWEN2_PIXELS = (3136, 12845056)
QWEN3_PIXELS = (65536, 16777216)


# ---- Qwen2-VL (modeling_qwen2_vl.py: Qwen2VisionTransformerPretrainedModel) -------------------
@reader("qwen2_vl")
def _qwen2_vl(data: Mapping, where: str, text: int) -> VisionSpec:
    """PatchEmbed: Conv3d(C, embed_dim, (t, p, p), bias=False); depth Qwen2VLVisionBlock:
    LayerNorm norm1/norm2 (eps 1e-6), VisionAttention qkv (bias) and proj (bias), VisionMlp
    fc1/fc2 (bias) of int(embed_dim·mlp_ratio), quick_gelu; 2D RoPE (no table); PatchMerger:
    LayerNorm ln_q, Linear(d·s², d·s²), GELU, Linear(d·s², hidden_size) (vision_config's
    hidden_size is the language model's width). Qwen2VLVisionConfig's defaults."""
    vc = _section(data, where)
    _keys(vc, where, frozenset({"depth", "embed_dim", "hidden_size", "hidden_act", "mlp_ratio",
                                "num_heads", "in_channels", "in_chans", "patch_size",
                                "spatial_merge_size", "temporal_patch_size"}))
    act = vc.get("hidden_act", "quick_gelu")
    if act not in ("quick_gelu", "gelu", "gelu_pytorch_tanh", "silu"):
        raise UsageError(f"{where}: vision_config.hidden_act {act!r} is not an activation the "
                         f"tool knows for VisionMlp")
    width = _get(vc, "embed_dim", 1280, where)
    ratio = vc.get("mlp_ratio", 4)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (
            math.isfinite(ratio) and 0 < ratio * width <= 10**7):
        raise UsageError(f"{where}: vision_config.mlp_ratio must be a positive number giving "
                         f"an MLP width up to 10^7")
    return VisionSpec(
        "qwen2_vl", _get(vc, "depth", 32, where), width, _get(vc, "num_heads", 16, where),
        int(width * ratio), False, act, "layernorm", _get(vc, "patch_size", 14, where),
        _get(vc, "temporal_patch_size", 2, where), _get(vc, "in_channels", 3, where, "in_chans"),
        False, 0, False, False, False, _get(vc, "spatial_merge_size", 2, where), None, (),
        "qwen_merger", True, _get(vc, "hidden_size", 3584, where), None, None,
        pixels=QWEN2_PIXELS)


# ---- Qwen2.5-VL (modeling_qwen2_5_vl.py: Qwen2_5_VisionTransformerPretrainedModel) -------------
@reader("qwen2_5_vl")
def _qwen2_5_vl(data: Mapping, where: str, text: int) -> VisionSpec:
    """Qwen2-VL's tower with RMSNorm norm1/norm2 (weight only), a gated MLP gate/up/down_proj
    (bias) of intermediate_size, window attention (windows of window_size // merge // patch
    merged units a side, get_vision_window_index) in all blocks but fullatt_block_indexes,
    the merger's ln_q an RMSNorm; out_hidden_size the language model's width."""
    vc = _section(data, where)
    _keys(vc, where, frozenset({"depth", "hidden_size", "hidden_act", "intermediate_size",
                                "num_heads", "in_channels", "in_chans", "patch_size",
                                "spatial_merge_size", "temporal_patch_size", "window_size",
                                "out_hidden_size", "fullatt_block_indexes"}))
    depth = _get(vc, "depth", 32, where)
    full = vc.get("fullatt_block_indexes", [7, 15, 23, 31])
    if not isinstance(full, (list, tuple)) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < depth for i in full):
        raise UsageError(f"{where}: vision_config.fullatt_block_indexes must list block "
                         f"indices below depth {depth}")
    patch, merge = _get(vc, "patch_size", 14, where), _get(vc, "spatial_merge_size", 2, where)
    window = _get(vc, "window_size", 112, where) // merge // patch
    if window < 1:
        raise UsageError(f"{where}: vision_config.window_size is smaller than one merged unit "
                         f"(spatial_merge_size·patch_size = {merge * patch})")
    return VisionSpec(
        "qwen2_5_vl", depth, _get(vc, "hidden_size", 3584, where), _get(vc, "num_heads", 16, where),
        _get(vc, "intermediate_size", 3420, where), True, vc.get("hidden_act", "silu"), "rmsnorm",
        patch, _get(vc, "temporal_patch_size", 2, where),
        _get(vc, "in_channels", 3, where, "in_chans"), False, 0, False, False, False, merge,
        window, tuple(sorted(set(full))), "qwen_merger", True,
        _get(vc, "out_hidden_size", 3584, where), None, None, pixels=QWEN2_PIXELS)


# ---- Gemma 3 (modeling_gemma3.py: SiglipVisionModel and Gemma3MultiModalProjector) -------------
@reader("gemma3")
def _gemma3(data: Mapping, where: str, text: int) -> VisionSpec:
    """SiglipVisionTransformer: patch_embedding Conv2d(C, d, p, stride p, bias), a learned
    position_embedding of (image_size/p)² rows, num_hidden_layers SiglipEncoderLayer
    (LayerNorm layer_norm1/2 with bias, q/k/v/out_proj with bias, fc1/fc2 with bias,
    gelu_pytorch_tanh), post_layernorm; no pooling head in Gemma 3 (vision_use_head false).
    Gemma3MultiModalProjector: AvgPool2d to mm_tokens_per_image, Gemma3RMSNorm (d),
    mm_input_projection_weight (d × text hidden_size), no bias. SiglipVisionConfig's defaults
    where vision_config omits a key."""
    vc = _section(data, where)
    _keys(vc, where, frozenset({"hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_channels", "image_size",
                                "patch_size", "hidden_act"}))
    if vc.get("vision_use_head", False):
        raise UsageError(f"{where}: vision_config.vision_use_head true builds SigLIP's pooling "
                         f"head, which Gemma 3 does not use; the tool does not count it")
    size, patch = _get(vc, "image_size", 224, where), _get(vc, "patch_size", 16, where)
    tokens = data.get("mm_tokens_per_image", 256)
    tokens = _int(tokens, "mm_tokens_per_image", where)
    side = int(tokens ** 0.5)
    if side * side != tokens or (size // patch) % side:
        raise UsageError(f"{where}: mm_tokens_per_image {tokens} must be a square whose side "
                         f"divides the {size // patch} patches a side (Gemma3MultiModalProjector's "
                         f"average pool)")
    return VisionSpec(
        "gemma3", _get(vc, "num_hidden_layers", 12, where), _get(vc, "hidden_size", 768, where),
        _get(vc, "num_attention_heads", 12, where), _get(vc, "intermediate_size", 3072, where),
        False, vc.get("hidden_act", "gelu_pytorch_tanh"), "layernorm", patch, 1,
        _get(vc, "num_channels", 3, where), True, (size // patch) ** 2, False, False, True, 1,
        None, (), "gemma3", False, text, size, tokens)


# ---- LLaVA (modeling_llava.py: CLIPVisionModel and LlavaMultiModalProjector) ------------------
@reader("llava")
def _llava(data: Mapping, where: str, text: int) -> VisionSpec:
    """CLIPVisionTransformer: class_embedding (d), patch_embedding Conv2d(C, d, p, stride p,
    bias=False), position_embedding of (image_size/p)² + 1 rows, pre_layrnorm, CLIPEncoderLayer
    × num_hidden_layers (LayerNorm, q/k/v/out_proj with bias, fc1/fc2 with bias, quick_gelu),
    post_layernorm; every layer runs (LlavaModel.get_image_features takes hidden_states
    [vision_feature_layer]). LlavaMultiModalProjector: linear_1 (d → text hidden), act,
    linear_2 (text → text), bias multimodal_projector_bias (default true)."""
    vc = _section(data, where)
    if vc.get("model_type", "clip_vision_model") != "clip_vision_model":
        raise UsageError(f"{where}: vision_config.model_type {vc.get('model_type')!r}: the tool "
                         f"reads LLaVA's CLIP tower only")
    _keys(vc, where, frozenset({"hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_channels", "image_size",
                                "patch_size", "hidden_act", "vocab_size"}))
    layer = data.get("vision_feature_layer", -2)
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise UsageError(f"{where}: vision_feature_layer must be one layer index (a list "
                         f"concatenates several layers' features: not read)")
    strategy = data.get("vision_feature_select_strategy", "default")
    if strategy not in ("default", "full"):
        raise UsageError(f"{where}: vision_feature_select_strategy must be default or full")
    size, patch = _get(vc, "image_size", 224, where), _get(vc, "patch_size", 32, where)
    return VisionSpec(
        "llava", _get(vc, "num_hidden_layers", 12, where), _get(vc, "hidden_size", 768, where),
        _get(vc, "num_attention_heads", 12, where), _get(vc, "intermediate_size", 3072, where),
        False, vc.get("hidden_act", "quick_gelu"), "layernorm", patch, 1,
        _get(vc, "num_channels", 3, where), False, (size // patch) ** 2 + 1, True, True, True, 1,
        None, (), "llava_mlp", bool(data.get("multimodal_projector_bias", True)),
        text, size, None, strategy == "full", feature_layer=layer)


# ---- Qwen3-VL and Qwen3.5 (modeling_qwen3_vl.py Qwen3VLVisionModel, modeling_qwen3_5.py
# Qwen3_5VisionModel) ------------------------------------------------------------------------
def _qwen3_vl(data: Mapping, where: str, text: int) -> VisionSpec:
    """Qwen3VLVisionPatchEmbed: Conv3d(C, d, (t, p, p), bias=True); pos_embed, a learned
    table of num_position_embeddings rows, bilinearly interpolated to the grid (no matmul);
    depth Qwen3VLVisionBlock: LayerNorm norm1/norm2, attn.qkv and attn.proj (bias), mlp
    linear_fc1/linear_fc2 (bias, gelu_pytorch_tanh), 2D RoPE, full attention per image;
    merger: LayerNorm(d), linear_fc1 (d·s² → d·s²), GELU, linear_fc2 (→ out_hidden_size);
    one more merger per deepstack_visual_indexes entry (its LayerNorm over d·s²), whose
    outputs the language model adds to its first layers' hidden states. Qwen3.5's tower is
    the same without deepstack mergers (Qwen3_5VisionModel)."""
    vc = _section(data, where)
    _keys(vc, where, frozenset({"depth", "hidden_size", "hidden_act", "intermediate_size",
                                "num_heads", "in_channels", "patch_size", "spatial_merge_size",
                                "temporal_patch_size", "out_hidden_size",
                                "num_position_embeddings", "deepstack_visual_indexes"}))
    deep = vc.get("deepstack_visual_indexes", [8, 16, 24])
    if data.get("model_type") in ("qwen3_5", "qwen3_5_moe"):
        deep = []  # Qwen3_5VisionModel builds no deepstack mergers
    if not isinstance(deep, (list, tuple)):
        raise UsageError(f"{where}: vision_config.deepstack_visual_indexes must be a list")
    tc, depth = data.get("text_config"), _get(vc, "depth", 27, where)
    layers = tc.get("num_hidden_layers") if isinstance(tc, Mapping) else None
    return VisionSpec(
        "qwen3_vl", depth, _get(vc, "hidden_size", 1152, where),
        _get(vc, "num_heads", 16, where), _get(vc, "intermediate_size", 4304, where), False,
        vc.get("hidden_act", "gelu_pytorch_tanh"), "layernorm", _get(vc, "patch_size", 16, where),
        _get(vc, "temporal_patch_size", 2, where), _get(vc, "in_channels", 3, where), True,
        _get(vc, "num_position_embeddings", 2304, where), False, False, False,
        _get(vc, "spatial_merge_size", 2, where), None, (), "qwen_merger", True,
        _get(vc, "out_hidden_size", 3584, where), None, None, deepstack=len(deep),
        deepstack_at=tuple(deep), text_layers=layers if type(layers) is int and layers > 0
        else 0, pixels=QWEN3_PIXELS)


for _mt in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
    reader(_mt)(_qwen3_vl)


# ---- Kimi-K2.5 (modeling_kimi_k25.py: Kimi_K25VisionModel, Kimi_K25MultimodalProjection) -------
# The Hub file's vision_config spells Moonshot's remote code's keys (vt_hidden_size,
# init_pos_emb_height, ...), which its checkpoint's weights have; transformers 5.23's
# Kimi_K25VisionConfig reads its own names (hidden_size, pos_emb_height, ...) and builds its
# defaults where they are absent, which are K2.5's published sizes. The tool counts what
# transformers builds: its names, else its defaults.
_KIMI_ALIASES = {"hidden_size": ("vt_hidden_size", 1152), "intermediate_size":
                 ("vt_intermediate_size", 4304), "num_attention_heads":
                 ("vt_num_attention_heads", 16), "num_hidden_layers": ("vt_num_hidden_layers", 27),
                 "pos_emb_height": ("init_pos_emb_height", 64),
                 "pos_emb_width": ("init_pos_emb_width", 64),
                 "pos_emb_time": ("init_pos_emb_time", 4)}
# remote-code keys transformers' classes do not read, with the values K2.5's code means
_KIMI_REMOTE = frozenset({"merge_type", "mm_projector_type", "pos_emb_type", "video_attn_type",
                          "projector_hidden_act", "projector_ln_eps", "mm_hidden_size",
                          "text_hidden_size"})


@reader("kimi_k25")
def _kimi_k25(data: Mapping, where: str, text: int) -> VisionSpec:
    """Kimi_K25VisionPatchEmbed: Conv2d(3, d, p, stride p) with bias and a learned
    pos_emb.position_embeddings (pos_emb_height × pos_emb_width × d, bicubically resampled
    to the grid: no matmul); num_hidden_layers Kimi_K25VisionEncoderLayer (LayerNorm
    norm1/norm2, attn q/k/v_proj and proj with biases, mlp fc1/fc2 with biases, 2D RoPE, full
    attention per image); final_layernorm; each 2×2 (merge_kernel_size) patches averaged over
    time (one frame for an image) and handed on as one token of 4·d; Kimi_K25MultimodalProjection:
    pre_norm LayerNorm(projection_hidden_size, = d), in_proj (4d → 4d), GELU, out_proj
    (4d → text hidden_size), biased."""
    vc = _section(data, where)
    _keys(vc, where, frozenset(_KIMI_ALIASES) | {a for a, _ in _KIMI_ALIASES.values()}
          | _KIMI_REMOTE | {"patch_size", "merge_kernel_size", "hidden_act"})
    # transformers' names only, as Kimi_K25VisionConfig reads them (the vt_* keys are the
    # remote code's: unread, so a small file's vt_hidden_size 32 still builds 1,152 here)
    got = {key: _get(vc, key, default, where) for key, (_, default) in _KIMI_ALIASES.items()}
    merge = vc.get("merge_kernel_size", [2, 2])
    if merge not in ([2, 2], (2, 2)):
        raise UsageError(f"{where}: vision_config.merge_kernel_size must be [2, 2] (K2.5's)")
    text = text
    proj = data.get("projection_hidden_size", 1152)
    if proj != got["hidden_size"]:
        raise UsageError(f"{where}: projection_hidden_size {short_int(proj)} must equal the "
                         f"tower's hidden_size {got['hidden_size']} (Kimi_K25MultimodalProjection "
                         f"normalises the tower's output with it)")
    return VisionSpec(
        "kimi_k25", got["num_hidden_layers"], got["hidden_size"], got["num_attention_heads"],
        got["intermediate_size"], False, vc.get("hidden_act", "gelu_pytorch_tanh"), "layernorm",
        _get(vc, "patch_size", 14, where), 1, 3, True,
        got["pos_emb_height"] * got["pos_emb_width"], False, False, True, 2, None, (),
        "kimi_mlp", True, text, None, None)


def short_int(v) -> str:
    return repr(v)[:20]


# ---- Llama 4 (modeling_llama4.py: Llama4VisionModel, Llama4MultiModalProjector) ---------------
@reader("llama4")
def _llama4(data: Mapping, where: str, text: int) -> VisionSpec:
    """Llama4UnfoldConvolution: unfold to C·p² pixels a patch, linear (no bias) to d;
    class_embedding (d), positional_embedding_vlm ((image_size/p)² + 1 rows), layernorm_pre;
    num_hidden_layers Llama4VisionEncoderLayer (LayerNorm input_layernorm and
    post_attention_layernorm, q/k/v/o_proj with biases, fc1/fc2 with biases, GELU, 2D RoPE),
    layernorm_post; the class token dropped, pixel_shuffle (ratio r: (side·r)² tokens of
    d/r²), vision_adapter.mlp fc1 (d/r² → projector_input_dim), fc2 (→ projector_output_dim),
    no biases; multi_modal_projector.linear_1 (vision_output_dim → text hidden_size, no
    bias). Llama4VisionConfig's defaults; every tile of image_size² runs the tower once."""
    vc = _section(data, where)
    _keys(vc, where, frozenset({"hidden_size", "hidden_act", "num_hidden_layers",
                                "num_attention_heads", "num_channels", "intermediate_size",
                                "vision_output_dim", "image_size", "patch_size", "norm_eps",
                                "vision_feature_select_strategy", "vision_feature_layer",
                                "pixel_shuffle_ratio", "projector_input_dim",
                                "projector_output_dim", "multi_modal_projector_bias",
                                "projector_dropout"}))
    if vc.get("vision_feature_select_strategy", "default") != "default" or vc.get(
            "multi_modal_projector_bias", False):
        raise UsageError(f"{where}: vision_config's vision_feature_select_strategy default and "
                         f"multi_modal_projector_bias false are what Llama 4's modules build")
    ratio = vc.get("pixel_shuffle_ratio", 0.5)
    if ratio != 0.5:
        raise UsageError(f"{where}: vision_config.pixel_shuffle_ratio must be 0.5 (Llama 4's)")
    width = _get(vc, "hidden_size", 768, where)
    size, patch = _get(vc, "image_size", 448, where), _get(vc, "patch_size", 14, where)
    inner, a_in = _get(vc, "intermediate_size", 5632, where), _get(vc, "projector_input_dim",
                                                                   4096, where)
    a_out, v_out = (_get(vc, "projector_output_dim", 4096, where),
                    _get(vc, "vision_output_dim", 7680, where))
    side = size // patch
    return VisionSpec(
        "llama4", _get(vc, "num_hidden_layers", 34, where), width,
        _get(vc, "num_attention_heads", 16, where), inner, False, vc.get("hidden_act", "gelu"),
        "layernorm", patch, 1, _get(vc, "num_channels", 3, where), False, side * side + 1, True,
        True, True, 1, None, (), "llama4", False, text, size,
        (side // 2) ** 2, adapter_in=a_in, adapter_out=a_out, vision_out=v_out, max_tiles=16)


# ---- Gemma 4 (modeling_gemma4.py: Gemma4VisionModel, Gemma4MultimodalEmbedder) ---------------
_GEMMA4_FREE = frozenset({"id2label", "label2id", "chunk_size_feed_forward", "is_encoder_decoder",
                          "problem_type", "default_output_length", "standardize",
                          "max_position_embeddings", "rms_norm_eps", "global_head_dim"})


@reader("gemma4")
def _gemma4(data: Mapping, where: str, text: int) -> VisionSpec:
    """Gemma4VisionPatchEmbedder: input_proj (3·p² → d, no bias) and a learned
    position_embedding_table (2 × position_embedding_size × d: an x and a y row, looked up);
    num_hidden_layers Gemma4VisionEncoderLayer: four RMSNorms (input, post-attention,
    pre- and post-feedforward), q/k/v/o_proj (Gemma4ClippableLinear, no bias), q_norm and
    k_norm (head_dim), a weightless v_norm, 2D RoPE, a gated MLP gate/up/down_proj; every image
    padded to max_soft_tokens·k² patches (the processor's), the pooler's one-hot average
    (k×k patches a soft token, a matmul), standardize buffers (no parameters);
    Gemma4MultimodalEmbedder: a weightless RMSNorm and embedding_projection (d → text, no
    bias)."""
    vc = _section(data, where)
    _keys(vc, where, frozenset({"hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_key_value_heads", "head_dim",
                                "hidden_activation", "attention_bias", "pooling_kernel_size",
                                "patch_size", "position_embedding_size", "use_clipped_linears"})
          | _GEMMA4_FREE)
    width, heads = _get(vc, "hidden_size", 768, where), _get(vc, "num_attention_heads", 12, where)
    kv, head = _get(vc, "num_key_value_heads", 12, where), _get(vc, "head_dim", 64, where)
    if vc.get("attention_bias") or heads % kv:
        raise UsageError(f"{where}: the tool reads Gemma 4 towers whose attention has no bias "
                         f"and whose query heads are a multiple of the K/V heads")
    tokens = _int(data.get("vision_soft_tokens_per_image", 280), "vision_soft_tokens_per_image",
                  where)
    k = _get(vc, "pooling_kernel_size", 3, where)
    return VisionSpec(
        "gemma4", _get(vc, "num_hidden_layers", 16, where), width, heads,
        _get(vc, "intermediate_size", 3072, where), True,
        vc.get("hidden_activation", "gelu_pytorch_tanh"), "rmsnorm",
        _get(vc, "patch_size", 16, where), 1, 3, False,
        2 * _get(vc, "position_embedding_size", 10240, where), False, False, False, 1, None, (),
        "gemma4", False, text, None, tokens, pool=k, kv_heads=kv,
        attn_head_dim=head, standardize=bool(vc.get("standardize", False)),
        clipped=bool(vc.get("use_clipped_linears", False)))
