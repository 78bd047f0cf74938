"""The vision tower's facts (issue 41): walk a VisionSpec (accounting/architecture/vision.py) in the
order transformers' modules run and emit each parameter (its state-dict key in the family's
ImageTextToText model) and each matmul of one image, as the ledger's records (Param, Matmul)
in shape symbols. accounting/analysis/images.py gives the symbols their values per image
(values()) and reduces the records; nothing else restates the tower.

Symbols (one image): N the tokens the blocks run (patches, + 1 with CLIP's class token),
N_p the patches the patch embedding runs, k_v = C·t·p² the patch's pixels (the conv as a
matmul: N_p × k_v @ k_v × d_v), d_v, f_v, h_v, d_hv the tower's sizes, S_f = Σ over the
attention's segments of length², S_w the same over Qwen2.5-VL's windows, N_m = N_p/s² and
d_vm = s²·d_v the merger's rows and width, N_o the tokens the projector maps, d_t the
language model's width. Repeat symbols: L_v every block; L_vf and L_vw Qwen2.5-VL's full and
window blocks.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger import records as R
from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder import vision_saves as VS

VISION = "vision encoder"  # the component of every record here (tower and projector)
BLOCK = "{i}"


@dataclass(frozen=True)
class VisionLedger:
    spec: VisionSpec
    params: tuple[R.Param, ...]  # state-dict order
    matmuls: tuple[R.Matmul, ...]  # one image's forward, in execution order
    projector_params: tuple[str, ...]  # names of the projector's parameters
    # what a trained tower saves for the backward pass (vision_saves.py); None: not written
    saves: tuple | None = None

    def param_count(self, values: dict[str, int]) -> int:
        return sum(p.numel(values) * p.count(values) for p in self.params)


class _Walk:
    def __init__(self, spec: VisionSpec):
        self.spec, self.params, self.matmuls, self.projector = spec, [], [], []

    def param(self, name: str, shape: tuple[str, ...], repeat: str | None = None,
              projector: bool = False) -> None:
        module = name.rsplit(".", 1)[0]
        self.params.append(R.Param(name, VISION, module, repeat, shape))
        if projector:
            self.projector.append(name)

    def linear(self, name: str, d_in: str, d_out: str, bias: bool, repeat: str | None = None,
               projector: bool = False) -> None:
        self.param(f"{name}.weight", (d_out, d_in), repeat, projector)
        if bias:
            self.param(f"{name}.bias", (d_out,), repeat, projector)

    def norm(self, name: str, kind: str, repeat: str | None = None, width: str = "d_v",
             projector: bool = False) -> None:
        self.param(f"{name}.weight", (width,), repeat, projector)
        if kind == "layernorm":
            self.param(f"{name}.bias", (width,), repeat, projector)

    def matmul(self, name: str, module: str, m: tuple, n: tuple, p: tuple,
               repeat: str | None = None, batch: tuple = ()) -> None:
        self.matmuls.append(R.Matmul(name, VISION, module, repeat, R.FORWARD, batch, m, n, p))


def walk(spec: VisionSpec) -> VisionLedger:
    w = _Walk(spec)
    if spec.family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        _qwen(w, spec)
    elif spec.family == "kimi_k25":
        _kimi(w, spec)
    elif spec.family == "llama4":
        _llama4(w, spec)
    elif spec.family == "gemma4":
        _gemma4(w, spec)
    elif spec.family == "pixtral":
        _pixtral(w, spec)
    elif spec.family == "idefics3":
        _idefics3(w, spec)
    elif spec.family == "internvl":
        _internvl(w, spec)
    else:
        _vit(w, spec)
    params = tuple(w.params)
    return VisionLedger(spec, params, tuple(w.matmuls), tuple(w.projector),
                        VS.saves(spec, params))


def _block_matmuls(w: _Walk, s: VisionSpec, prefix: str, names: dict[str, str]) -> None:
    """One block's matmuls on N tokens: Q, K, V (one fused qkv or three), the attention core
    per segment (QKᵀ and scores·V: h_v·S·d_hv each, S = Σ segment length²), the output
    projection, the MLP (gated: gate, up, down; else fc1, fc2)."""
    if s.window is not None:
        core = (("L_vf", "S_f", "full-attention blocks"), ("L_vw", "S_w", "window blocks"))
    else:
        core = (("L_v", "S_f", ""),)
    if "qkv" in names:
        w.matmul("QKV", f"{prefix}.{names['qkv']}", ("N",), ("d_v",), ("3d_v",), "L_v")
    else:
        for x in ("q", "k", "v"):
            w.matmul(x.upper(), f"{prefix}.{names[x]}", ("N",), ("d_v",), ("d_v",), "L_v")
    for repeat, pairs, where in core:
        label = f" ({where})" if where else ""
        w.matmul(f"QKᵀ{label}", f"{prefix}.{names['core']}", (pairs,), ("d_hv",), ("1",),
                 repeat, ("h_v",))
        w.matmul(f"scores·V{label}", f"{prefix}.{names['core']}", (pairs,), ("d_hv",), ("1",),
                 repeat, ("h_v",))
    w.matmul("attention output", f"{prefix}.{names['out']}", ("N",), ("d_v",), ("d_v",), "L_v")
    if s.mlp_gated:
        for x in ("gate", "up"):
            w.matmul(f"MLP {x}", f"{prefix}.mlp.{x}_proj", ("N",), ("d_v",), ("f_v",), "L_v")
        w.matmul("MLP down", f"{prefix}.mlp.down_proj", ("N",), ("f_v",), ("d_v",), "L_v")
    else:
        w.matmul("MLP fc1", f"{prefix}.mlp.fc1", ("N",), ("d_v",), ("f_v",), "L_v")
        w.matmul("MLP fc2", f"{prefix}.mlp.fc2", ("N",), ("f_v",), ("d_v",), "L_v")


def _encoder_layers(w, s, v: str) -> None:
    """CLIP's and SigLIP's encoder layers (CLIPEncoderLayer, SiglipEncoderLayer; Idefics3's is
    SigLIP's): self_attn's k, v, q and out projections with biases (their declaration order),
    layer_norm1, mlp.fc1 and fc2, layer_norm2, then each block's matmuls."""
    b = f"{v}.encoder.layers.{BLOCK}"
    for x in ("k", "v", "q"):  # CLIPAttention/SiglipAttention declare k, v, q, out
        w.linear(f"{b}.self_attn.{x}_proj", "d_v", "d_v", True, "L_v")
    w.linear(f"{b}.self_attn.out_proj", "d_v", "d_v", True, "L_v")
    w.norm(f"{b}.layer_norm1", "layernorm", "L_v")
    w.linear(f"{b}.mlp.fc1", "d_v", "f_v", True, "L_v")
    w.linear(f"{b}.mlp.fc2", "f_v", "d_v", True, "L_v")
    w.norm(f"{b}.layer_norm2", "layernorm", "L_v")
    _block_matmuls(w, s, "encoder.layers.{i}", {"q": "self_attn.q_proj", "k": "self_attn.k_proj",
                                                "v": "self_attn.v_proj", "core": "self_attn",
                                                "out": "self_attn.out_proj"})


def _qwen(w: _Walk, s: VisionSpec) -> None:
    """Qwen2VisionTransformerPretrainedModel / Qwen2_5_VisionTransformerPretrainedModel /
    Qwen3VLVisionModel (modeling_qwen2_vl.py, modeling_qwen2_5_vl.py, modeling_qwen3_vl.py),
    under model.visual."""
    v = "model.visual"
    w.param(f"{v}.patch_embed.proj.weight", ("d_v", "k_v"))  # Conv3d(C, d, (t, p, p))
    if s.patch_bias:  # Qwen3-VL's Conv3d has a bias
        w.param(f"{v}.patch_embed.proj.bias", ("d_v",))
    if s.learned_positions:  # Qwen3-VL's pos_embed (interpolated: no matmul)
        w.param(f"{v}.pos_embed.weight", ("N_pos", "d_v"))
    w.matmul("patch embedding (Conv3d as a matmul)", "patch_embed.proj", ("N_p",), ("k_v",),
             ("d_v",))
    b = f"{v}.blocks.{BLOCK}"
    w.norm(f"{b}.norm1", s.norm, "L_v")
    w.norm(f"{b}.norm2", s.norm, "L_v")
    w.linear(f"{b}.attn.qkv", "d_v", "3d_v", True, "L_v")
    w.linear(f"{b}.attn.proj", "d_v", "d_v", True, "L_v")
    if s.mlp_gated:  # Qwen2_5_VLMLP(bias=True): gate_proj, up_proj, down_proj
        w.linear(f"{b}.mlp.gate_proj", "d_v", "f_v", True, "L_v")
        w.linear(f"{b}.mlp.up_proj", "d_v", "f_v", True, "L_v")
        w.linear(f"{b}.mlp.down_proj", "f_v", "d_v", True, "L_v")
    else:  # VisionMlp fc1, fc2 (Qwen3VLVisionMLP: linear_fc1, linear_fc2), with biases
        fc1, fc2 = ("linear_fc1", "linear_fc2") if s.family == "qwen3_vl" else ("fc1", "fc2")
        w.linear(f"{b}.mlp.{fc1}", "d_v", "f_v", True, "L_v")
        w.linear(f"{b}.mlp.{fc2}", "f_v", "d_v", True, "L_v")
    _block_matmuls(w, s, "blocks.{i}", {"qkv": "attn.qkv", "core": "attn", "out": "attn.proj"})
    if s.family == "qwen3_vl":
        # Qwen3VLVisionPatchMerger: norm (LayerNorm of d_v; of s²·d_v in the deepstack ones),
        # linear_fc1 (s²·d_v → s²·d_v), GELU, linear_fc2 (→ d_t), biased
        mergers = [("merger", "d_v")] + [(f"deepstack_merger_list.{j}", "d_vm")
                                         for j in range(s.deepstack)]
        for name, norm_width in mergers:
            w.norm(f"{v}.{name}.norm", "layernorm", width=norm_width, projector=True)
            w.linear(f"{v}.{name}.linear_fc1", "d_vm", "d_vm", True, projector=True)
            w.linear(f"{v}.{name}.linear_fc2", "d_vm", "d_t", True, projector=True)
            w.matmul(f"{name} linear_fc1", f"{name}.linear_fc1", ("N_m",), ("d_vm",), ("d_vm",))
            w.matmul(f"{name} linear_fc2 (into the language model)", f"{name}.linear_fc2",
                     ("N_m",), ("d_vm",), ("d_t",))
        return
    # PatchMerger: ln_q over d_v, then s²·d_v → s²·d_v → d_t (nn.Sequential 0 and 2), biased
    w.norm(f"{v}.merger.ln_q", s.norm, projector=True)
    w.linear(f"{v}.merger.mlp.0", "d_vm", "d_vm", True, projector=True)
    w.linear(f"{v}.merger.mlp.2", "d_vm", "d_t", True, projector=True)
    w.matmul("merger MLP 0", "merger.mlp.0", ("N_m",), ("d_vm",), ("d_vm",))
    w.matmul("merger MLP 2 (into the language model)", "merger.mlp.2", ("N_m",), ("d_vm",),
             ("d_t",))


def _kimi(w: _Walk, s: VisionSpec) -> None:
    """Kimi_K25VisionModel under model.vision_tower and Kimi_K25MultimodalProjection under
    model.mm_projector (modeling_kimi_k25.py)."""
    v = "model.vision_tower"
    w.param(f"{v}.patch_embed.proj.weight", ("d_v", "k_v"))  # Conv2d(3, d, p, stride p)
    w.param(f"{v}.patch_embed.proj.bias", ("d_v",))
    w.param(f"{v}.patch_embed.pos_emb.position_embeddings", ("N_pos", "d_v"))  # (H, W, d)
    w.matmul("patch embedding (Conv2d as a matmul)", "patch_embed.proj", ("N_p",), ("k_v",),
             ("d_v",))
    b = f"{v}.layers.{BLOCK}"
    w.norm(f"{b}.norm1", "layernorm", "L_v")
    w.norm(f"{b}.norm2", "layernorm", "L_v")
    w.linear(f"{b}.attn.proj", "d_v", "d_v", True, "L_v")
    for x in ("q", "k", "v"):
        w.linear(f"{b}.attn.{x}_proj", "d_v", "d_v", True, "L_v")
    w.linear(f"{b}.mlp.fc1", "d_v", "f_v", True, "L_v")
    w.linear(f"{b}.mlp.fc2", "f_v", "d_v", True, "L_v")
    _block_matmuls(w, s, "layers.{i}", {"q": "attn.q_proj", "k": "attn.k_proj",
                                        "v": "attn.v_proj", "core": "attn", "out": "attn.proj"})
    w.norm(f"{v}.final_layernorm", "layernorm")
    p = "model.mm_projector"  # pre_norm over d_v, then 2×2 patches as one 4·d_v row
    w.norm(f"{p}.pre_norm", "layernorm", projector=True)
    w.linear(f"{p}.in_proj", "d_vm", "d_vm", True, projector=True)
    w.linear(f"{p}.out_proj", "d_vm", "d_t", True, projector=True)
    w.matmul("projector in_proj", "mm_projector.in_proj", ("N_m",), ("d_vm",), ("d_vm",))
    w.matmul("projector out_proj (into the language model)", "mm_projector.out_proj",
             ("N_m",), ("d_vm",), ("d_t",))


def _gemma4(w: _Walk, s: VisionSpec) -> None:
    """Gemma4VisionModel under model.vision_tower and Gemma4MultimodalEmbedder under
    model.embed_vision (modeling_gemma4.py). Symbols: N = N_p the padded patches the tower
    runs (max_soft_tokens·k²), N_o the pooler's output rows (max_soft_tokens), N_t the
    image's own soft tokens (what the embedder maps)."""
    v = "model.vision_tower"
    w.param(f"{v}.patch_embedder.position_embedding_table", ("N_pos", "d_v"))  # (2, P, d)
    w.param(f"{v}.patch_embedder.input_proj.weight", ("d_v", "k_v"))
    w.matmul("patch embedding (input_proj)", "patch_embedder.input_proj", ("N_p",), ("k_v",),
             ("d_v",))
    b = f"{v}.encoder.layers.{BLOCK}"
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
    layer = "encoder.layers.{i}"
    w.matmul("Q", f"{layer}.self_attn.q_proj", ("N",), ("d_v",), ("d_a",), "L_v")
    for x in ("K", "V"):
        w.matmul(x, f"{layer}.self_attn.{x.lower()}_proj", ("N",), ("d_v",), ("d_kv",), "L_v")
    for x in ("QKᵀ", "scores·V"):  # every query head (repeat_kv), over the padded patches
        w.matmul(x, f"{layer}.self_attn", ("S_f",), ("d_hv",), ("1",), "L_v", ("h_v",))
    w.matmul("attention output", f"{layer}.self_attn.o_proj", ("N",), ("d_a",), ("d_v",), "L_v")
    for x in ("gate", "up"):
        w.matmul(f"MLP {x}", f"{layer}.mlp.{x}_proj", ("N",), ("d_v",), ("f_v",), "L_v")
    w.matmul("MLP down", f"{layer}.mlp.down_proj", ("N",), ("f_v",), ("d_v",), "L_v")
    w.matmul("pooler (one-hot average of k×k patches)", "pooler", ("N_o",), ("N",), ("d_v",))
    w.linear("model.embed_vision.embedding_projection", "d_v", "d_t", False, projector=True)
    w.matmul("embedding_projection (into the language model)", "embed_vision", ("N_t",),
             ("d_v",), ("d_t",))


def _pixtral(w: _Walk, s: VisionSpec) -> None:
    """PixtralVisionModel under model.vision_tower and Mistral3MultiModalProjector under
    model.multi_modal_projector (modeling_pixtral.py, modeling_mistral3.py): one image of
    N = N_p patches at its own size; the merger's N_m = N_p/s² rows of d_vm = s²·d_v, each
    a token of the language model."""
    v = "model.vision_tower"
    w.param(f"{v}.patch_conv.weight", ("d_v", "k_v"))  # Conv2d(C, d, p, stride p, no bias)
    w.matmul("patch embedding (Conv2d as a matmul)", "patch_conv", ("N_p",), ("k_v",), ("d_v",))
    w.norm(f"{v}.ln_pre", "rmsnorm")
    b = f"{v}.transformer.layers.{BLOCK}"
    w.norm(f"{b}.attention_norm", "rmsnorm", "L_v")
    w.norm(f"{b}.ffn_norm", "rmsnorm", "L_v")
    for x in ("q", "k", "v", "o"):
        w.linear(f"{b}.attention.{x}_proj", "d_v", "d_v", False, "L_v")
    w.linear(f"{b}.feed_forward.gate_proj", "d_v", "f_v", False, "L_v")
    w.linear(f"{b}.feed_forward.up_proj", "d_v", "f_v", False, "L_v")
    w.linear(f"{b}.feed_forward.down_proj", "f_v", "d_v", False, "L_v")
    layer = "transformer.layers.{i}"
    for x in ("q", "k", "v"):
        w.matmul(x.upper(), f"{layer}.attention.{x}_proj", ("N",), ("d_v",), ("d_v",), "L_v")
    for x in ("QKᵀ", "scores·V"):  # within the image (its block of the attention mask)
        w.matmul(x, f"{layer}.attention", ("S_f",), ("d_hv",), ("1",), "L_v", ("h_v",))
    w.matmul("attention output", f"{layer}.attention.o_proj", ("N",), ("d_v",), ("d_v",), "L_v")
    for x in ("gate", "up"):
        w.matmul(f"MLP {x}", f"{layer}.feed_forward.{x}_proj", ("N",), ("d_v",), ("f_v",), "L_v")
    w.matmul("MLP down", f"{layer}.feed_forward.down_proj", ("N",), ("f_v",), ("d_v",), "L_v")
    p = "model.multi_modal_projector"
    w.norm(f"{p}.norm", "rmsnorm", projector=True)
    w.linear(f"{p}.patch_merger.merging_layer", "d_vm", "d_v", False, projector=True)
    w.linear(f"{p}.linear_1", "d_v", "d_t", s.projector_bias, projector=True)
    w.linear(f"{p}.linear_2", "d_t", "d_t", s.projector_bias, projector=True)
    w.matmul("patch merger (s×s patches unfolded)", "patch_merger.merging_layer", ("N_m",),
             ("d_vm",), ("d_v",))
    w.matmul("projector linear_1", "multi_modal_projector.linear_1", ("N_m",), ("d_v",),
             ("d_t",))
    w.matmul("projector linear_2 (into the language model)", "multi_modal_projector.linear_2",
             ("N_m",), ("d_t",), ("d_t",))


def _idefics3(w: _Walk, s: VisionSpec) -> None:
    """Idefics3VisionTransformer under model.vision_model and Idefics3Connector under
    model.connector (modeling_idefics3.py; SmolVLM's the same): one tile's records (N = N_p
    = (image_size/p)² patches; N_o = N_p/r² rows of d_vm = r²·d_v after the pixel shuffle)."""
    v = "model.vision_model"
    w.param(f"{v}.embeddings.patch_embedding.weight", ("d_v", "k_v"))
    w.param(f"{v}.embeddings.patch_embedding.bias", ("d_v",))
    w.param(f"{v}.embeddings.position_embedding.weight", ("N_pos", "d_v"))
    w.matmul("patch embedding (Conv2d as a matmul)", "embeddings.patch_embedding", ("N_p",),
             ("k_v",), ("d_v",))
    _encoder_layers(w, s, v)  # Idefics3VisionAttention declares k, v, q, out too
    w.norm(f"{v}.post_layernorm", "layernorm")
    w.linear("model.connector.modality_projection.proj", "d_vm", "d_t", False, projector=True)
    w.matmul("connector (after the pixel shuffle, into the language model)",
             "connector.modality_projection.proj", ("N_o",), ("d_vm",), ("d_t",))


def _internvl(w: _Walk, s: VisionSpec) -> None:
    """InternVLVisionModel under model.vision_tower and InternVLMultiModalProjector under
    model.multi_modal_projector (modeling_internvl.py): one tile's records (N = N_p + 1
    tokens with the class token; N_o = N_p/4 rows of d_vm = 4·d_v after the pixel shuffle)."""
    v = "model.vision_tower"
    w.param(f"{v}.embeddings.cls_token", ("d_v",))
    if s.learned_positions:
        w.param(f"{v}.embeddings.position_embeddings", ("N_pos", "d_v"))
    w.param(f"{v}.embeddings.patch_embeddings.projection.weight", ("d_v", "k_v"))
    w.param(f"{v}.embeddings.patch_embeddings.projection.bias", ("d_v",))
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
    _block_matmuls(w, s, "encoder.layer.{i}", {"q": "attention.q_proj", "k": "attention.k_proj",
                                               "v": "attention.v_proj", "core": "attention",
                                               "out": "attention.projection_layer"})
    if s.post_norm:  # without use_mean_pooling
        w.norm(f"{v}.layernorm", "layernorm")
    p = "model.multi_modal_projector"
    w.norm(f"{p}.layer_norm", "layernorm", width="d_vm", projector=True)
    w.linear(f"{p}.linear_1", "d_vm", "d_t", True, projector=True)
    w.linear(f"{p}.linear_2", "d_t", "d_t", True, projector=True)
    w.matmul("projector linear_1 (after the pixel shuffle)", "multi_modal_projector.linear_1",
             ("N_o",), ("d_vm",), ("d_t",))
    w.matmul("projector linear_2 (into the language model)", "multi_modal_projector.linear_2",
             ("N_o",), ("d_t",), ("d_t",))


def _llama4(w: _Walk, s: VisionSpec) -> None:
    """Llama4VisionModel under vision_model and Llama4MultiModalProjector under
    multi_modal_projector (Llama4ForConditionalGeneration holds them at its top,
    modeling_llama4.py); one tile's records."""
    v = "vision_model"
    w.param(f"{v}.class_embedding", ("d_v",))
    w.param(f"{v}.positional_embedding_vlm", ("N_pos", "d_v"))
    w.param(f"{v}.patch_embedding.linear.weight", ("d_v", "k_v"))  # unfold, then no-bias linear
    w.matmul("patch embedding (unfold and linear)", "patch_embedding.linear", ("N_p",),
             ("k_v",), ("d_v",))
    w.norm(f"{v}.layernorm_pre", "layernorm")
    w.norm(f"{v}.layernorm_post", "layernorm")
    b = f"{v}.model.layers.{BLOCK}"
    for x in ("q", "k", "v", "o"):
        w.linear(f"{b}.self_attn.{x}_proj", "d_v", "d_v", True, "L_v")
    w.linear(f"{b}.mlp.fc1", "d_v", "f_v", True, "L_v")
    w.linear(f"{b}.mlp.fc2", "f_v", "d_v", True, "L_v")
    w.norm(f"{b}.input_layernorm", "layernorm", "L_v")
    w.norm(f"{b}.post_attention_layernorm", "layernorm", "L_v")
    _block_matmuls(w, s, "model.layers.{i}", {"q": "self_attn.q_proj", "k": "self_attn.k_proj",
                                              "v": "self_attn.v_proj", "core": "self_attn",
                                              "out": "self_attn.o_proj"})
    # vision_adapter (Llama4VisionPixelShuffleMLP): N_o = (side/2)² rows of 4·d_v = f_v
    w.linear(f"{v}.vision_adapter.mlp.fc1", "f_v", "a_in", False, projector=True)
    w.linear(f"{v}.vision_adapter.mlp.fc2", "a_in", "a_out", False, projector=True)
    w.linear("multi_modal_projector.linear_1", "v_out", "d_t", False, projector=True)
    w.matmul("adapter fc1 (after the pixel shuffle)", "vision_adapter.mlp.fc1", ("N_o",),
             ("f_v",), ("a_in",))
    w.matmul("adapter fc2", "vision_adapter.mlp.fc2", ("N_o",), ("a_in",), ("a_out",))
    w.matmul("projector linear_1 (into the language model)", "multi_modal_projector.linear_1",
             ("N_o",), ("v_out",), ("d_t",))


def _vit(w: _Walk, s: VisionSpec) -> None:
    """SigLIP (Gemma 3) and CLIP (LLaVA) under model.vision_tower, and their
    projectors under model.multi_modal_projector."""
    v = "model.vision_tower"  # transformers 5.23 names the tower's modules there directly
    if s.class_token:  # CLIPVisionEmbeddings.class_embedding
        w.param(f"{v}.embeddings.class_embedding", ("d_v",))
    w.param(f"{v}.embeddings.patch_embedding.weight", ("d_v", "k_v"))  # Conv2d(C, d, p, stride p)
    if s.patch_bias:
        w.param(f"{v}.embeddings.patch_embedding.bias", ("d_v",))
    w.param(f"{v}.embeddings.position_embedding.weight", ("N_pos", "d_v"))
    w.matmul("patch embedding (Conv2d as a matmul)", "embeddings.patch_embedding", ("N_p",),
             ("k_v",), ("d_v",))
    if s.pre_norm:  # CLIP's pre_layrnorm (sic)
        w.norm(f"{v}.pre_layrnorm", "layernorm")
    _encoder_layers(w, s, v)
    if s.post_norm:
        w.norm(f"{v}.post_layernorm", "layernorm")
    p = "model.multi_modal_projector"
    if s.projector == "gemma3":
        # Gemma3MultiModalProjector: avg pool, mm_soft_emb_norm (RMSNorm of d_v), then
        # torch.matmul(normed, mm_input_projection_weight): N_o × d_v @ d_v × d_t
        w.param(f"{p}.mm_input_projection_weight", ("d_v", "d_t"), projector=True)
        w.norm(f"{p}.mm_soft_emb_norm", "rmsnorm", projector=True)
        w.matmul("projection into the language model", "multi_modal_projector", ("N_o",),
                 ("d_v",), ("d_t",))
    else:  # LlavaMultiModalProjector: linear_1 (d_v → d_t), act, linear_2 (d_t → d_t)
        if s.family == "llava_onevision":  # LlavaOnevisionModel.image_newline (no matmul)
            w.param("model.image_newline", ("d_t",), projector=True)
        w.linear(f"{p}.linear_1", "d_v", "d_t", s.projector_bias, projector=True)
        w.linear(f"{p}.linear_2", "d_t", "d_t", s.projector_bias, projector=True)
        w.matmul("projector linear_1", "multi_modal_projector.linear_1", ("N_o",), ("d_v",),
                 ("d_t",))
        w.matmul("projector linear_2", "multi_modal_projector.linear_2", ("N_o",), ("d_t",),
                 ("d_t",))


def values(spec: VisionSpec, patches_h: int = 0, patches_w: int = 0) -> dict[str, int]:
    """The symbols for one image of patches_h × patches_w patches (0 × 0: the sizes alone,
    enough for the parameters)."""
    s = spec
    n_p = patches_h * patches_w
    if s.family == "gemma4":  # every image padded to max_soft_tokens·k² patches
        real, n_p = n_p // (s.pool * s.pool), (s.tokens_per_image * s.pool ** 2 if n_p else 0)
    n = n_p + (1 if s.class_token else 0)
    out = {"d_v": s.width, "3d_v": 3 * s.width, "f_v": s.mlp_width, "h_v": s.heads,
           "d_hv": s.head_dim, "k_v": s.channels * s.temporal_patch * s.patch * s.patch,
           "d_vm": s.width * s.merge ** 2, "d_t": s.text_width, "L_v": s.depth, "1": 1,
           "N_pos": s.learned_positions, "N_p": n_p, "N": n, "S_f": n * n,
           "N_m": n_p // s.merge ** 2}
    if s.family == "pixtral":  # Mistral3PatchMerger unfolds s×s blocks: each side floored
        out["N_m"] = (patches_h // s.merge) * (patches_w // s.merge)
    if s.window is not None:
        out["L_vw"] = len(s.window_blocks)
        out["L_vf"] = s.depth - out["L_vw"]
        out["S_w"] = window_pairs(s, patches_h, patches_w)
    if s.family == "gemma4":
        out.update({"N_o": s.tokens_per_image if n_p else 0, "N_t": real,
                    "d_a": s.heads * s.head_dim, "d_kv": (s.kv_heads or s.heads) * s.head_dim,
                    "h_kv": s.kv_heads or s.heads})
    if s.projector in ("idefics3", "internvl"):
        out["N_o"] = s.tokens_per_image if n_p else 0
    if s.projector in ("gemma3", "llama4"):
        out["N_o"] = s.tokens_per_image if n_p else 0
        out.update({"a_in": s.adapter_in, "a_out": s.adapter_out, "v_out": s.vision_out})
    elif s.projector == "llava_mlp":
        out["N_o"] = n if s.keep_class_token else n_p
    return out


def window_pairs(s: VisionSpec, patches_h: int, patches_w: int) -> int:
    """Σ over Qwen2.5-VL's windows of (patches in the window)²: transformers'
    get_vision_window_index (vision_utils.py) tiles the grid of merged units (patches/s a
    side) into windows of `window` units a side, the last ones cut by the grid's edge; each
    window holds units·s² patches."""
    side, ws = s.merge, s.window
    gh, gw = patches_h // side, patches_w // side
    rows = [min(ws, gh - i) for i in range(0, gh, ws)]
    cols = [min(ws, gw - j) for j in range(0, gw, ws)]
    unit = side * side
    return sum((r * c * unit) ** 2 for r in rows for c in cols)
