"""The towers with rotary patches and a patch merger, walked once (builder/vision_walk.py
Walk): Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 (Qwen2VisionTransformerPretrainedModel,
Qwen2_5_VisionTransformerPretrainedModel, Qwen3VLVisionModel with its deepstack mergers;
Qwen3.5's Qwen3_5VisionModel is Qwen3VLVisionModel without them, modular_qwen3_5.py) and
Kimi-K2.5's MoonViT with its projector (Kimi_K25VisionModel, Kimi_K25MultimodalProjection);
each parameter (state-dict order), each matmul of one image and each save (forward order;
roles: vision_saves.py), transformers 5.23, attention "sdpa"."""
from __future__ import annotations

from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder.vision_save import BLOCK as L_V
from accounting.ledger.builder.vision_saves import layernorm, merger_mlp, rmsnorm
from accounting.ledger.builder.vision_walk import (BLOCK, Walk, core_matmuls, mlp,
                                                   mlp_matmuls, out_matmul, qkv_matmuls)


def qwen(w: Walk, s: VisionSpec) -> None:
    """Qwen2VisionTransformerPretrainedModel / Qwen2_5_VisionTransformerPretrainedModel /
    Qwen3VLVisionModel (modeling_qwen2_vl.py, modeling_qwen2_5_vl.py, modeling_qwen3_vl.py),
    under model.visual: the Conv3d patch embedding saves its input (the pixels, cast to the
    weight's dtype or by autocast); rot_pos_emb's cos and sin (fp32, (N, d_h) each, made
    once and passed to every block); each block: its norms, the qkv input, the rotated q
    and k (new tensors), v (a view of the whole qkv output), sdpa's output and log-sum-exp
    (per window or image: together N rows), the attention output torch.cat made (proj's
    input), the MLP; the merger: ln_q, mlp.0, GELU, mlp.2. Qwen2.5-VL's window_index and
    reverse_indices are saved by their index ops."""
    v = "model.visual"
    w.param(f"{v}.patch_embed.proj.weight", ("d_v", "k_v"))  # Conv3d(C, d, (t, p, p))
    if s.patch_bias:  # Qwen3-VL's Conv3d has a bias
        w.param(f"{v}.patch_embed.proj.bias", ("d_v",))
    if s.learned_positions:  # Qwen3-VL's pos_embed (interpolated: no matmul)
        w.param(f"{v}.pos_embed.weight", ("N_pos", "d_v"))
    w.save("patch embedding input (pixels)", "patch_embed.proj", None, ("N_p", "k_v"), "A")
    w.matmul("patch embedding (Conv3d as a matmul)", "patch_embed.proj", ("N_p",), ("k_v",),
             ("d_v",))
    if s.learned_positions:  # Qwen3-VL: pos_embed at 4 interpolation corners a patch, weighed
        w.save("pos_embed indices", "pos_embed", None, ("N",), "I", copies=4)
        w.save("interpolation weights", "", None, ("N",), "F", copies=4)
    if s.window is not None:
        w.save("window_index", "", None, ("N_m",), "I")
    for x in ("cos", "sin"):
        w.save(f"rotary {x}", "", None, ("N", "d_hv"), "F")
    b = f"{v}.blocks.{BLOCK}"
    w.norm(f"{b}.norm1", s.norm, "L_v")
    w.norm(f"{b}.norm2", s.norm, "L_v")
    w.linear(f"{b}.attn.qkv", "d_v", "3d_v", True, "L_v")
    w.linear(f"{b}.attn.proj", "d_v", "d_v", True, "L_v")
    fc1, act, fc2 = (("linear_fc1", "act_fn", "linear_fc2") if s.family == "qwen3_vl"
                     else ("fc1", "act", "fc2"))
    if s.mlp_gated:  # Qwen2_5_VLMLP(bias=True): gate_proj, up_proj, down_proj
        w.linear(f"{b}.mlp.gate_proj", "d_v", "f_v", True, "L_v")
        w.linear(f"{b}.mlp.up_proj", "d_v", "f_v", True, "L_v")
        w.linear(f"{b}.mlp.down_proj", "f_v", "d_v", True, "L_v")
    else:  # VisionMlp fc1, fc2 (Qwen3VLVisionMLP: linear_fc1, linear_fc2), with biases
        w.linear(f"{b}.mlp.{fc1}", "d_v", "f_v", True, "L_v")
        w.linear(f"{b}.mlp.{fc2}", "f_v", "d_v", True, "L_v")
    b, out = "blocks.{i}", w.saves
    names = {"qkv": "attn.qkv", "core": "attn", "out": "attn.proj"}
    norm = rmsnorm if s.norm == "rmsnorm" else layernorm
    norm(out, "norm1", f"{b}.norm1", L_V, "N")
    w.save("qkv input", f"{b}.attn.qkv", L_V, ("N", "d_v"), "A")
    qkv_matmuls(w, b, names)
    w.save("q rotated", f"{b}.attn", L_V, ("N", "d_v"), "A")
    w.save("k rotated", f"{b}.attn", L_V, ("N", "d_v"), "A")
    w.save("v (the qkv output)", f"{b}.attn", L_V, ("N", "3d_v"), "A")
    w.save("sdpa output", f"{b}.attn", L_V, ("N", "d_v"), "A")
    w.save("sdpa log-sum-exp", f"{b}.attn", L_V, ("h_v", "N"), "F")
    core_matmuls(w, s, b, names)
    w.save("proj input (the segments' outputs, concatenated)", f"{b}.attn.proj", L_V,
           ("N", "d_v"), "A")
    out_matmul(w, b, names)
    norm(out, "norm2", f"{b}.norm2", L_V, "N")
    if s.mlp_gated:  # Qwen2_5_VLMLP: down(act(gate(x)) * up(x))
        w.save("gate_proj/up_proj input", f"{b}.mlp.gate_proj", L_V, ("N", "d_v"), "A")
        w.save("up_proj's own input copy", f"{b}.mlp.up_proj", L_V, ("N", "d_v"), "AC")
        mlp_matmuls(w, s, b, "in")
        w.save(f"{s.act} input", f"{b}.mlp.act_fn", L_V, ("N", "f_v"), "A")
        w.save(f"{s.act} output (the product's)", f"{b}.mlp", L_V, ("N", "f_v"), "A")
        w.save("up_proj output (the product's)", f"{b}.mlp", L_V, ("N", "f_v"), "A")
        w.save("down_proj input", f"{b}.mlp.down_proj", L_V, ("N", "f_v"), "A")
        mlp_matmuls(w, s, b, "out")
    else:  # VisionMlp / Qwen3VLVisionMLP: fc2(act(fc1(x)))
        mlp(w, s, b, L_V, fc1, act, fc2)
    if s.family == "qwen3_vl":
        _qwen3_mergers(w, s, v)
        return
    # PatchMerger: ln_q over d_v, then s²·d_v → s²·d_v → d_t (nn.Sequential 0 and 2), biased
    w.norm(f"{v}.merger.ln_q", s.norm, projector=True)
    w.linear(f"{v}.merger.mlp.0", "d_vm", "d_vm", True, projector=True)
    w.linear(f"{v}.merger.mlp.2", "d_vm", "d_t", True, projector=True)
    norm(out, "merger ln_q", "merger.ln_q", None, "N")
    merger_mlp(out, "merger", "mlp.0", "mlp.1", "mlp.2")
    w.matmul("merger MLP 0", "merger.mlp.0", ("N_m",), ("d_vm",), ("d_vm",))
    w.matmul("merger MLP 2 (into the language model)", "merger.mlp.2", ("N_m",), ("d_vm",),
             ("d_t",))
    if s.window is not None:
        w.save("reverse_indices", "", None, ("N_m",), "I", after_projector=True)


def _qwen3_mergers(w: Walk, s: VisionSpec, v: str) -> None:
    """Qwen3VLVisionPatchMerger: norm (LayerNorm of d_v; of s²·d_v in the deepstack ones),
    linear_fc1 (s²·d_v → s²·d_v), GELU, linear_fc2 (→ d_t), biased. The deepstack mergers
    run after their blocks, the main one after the last (their saves in that order; the
    parameters and matmuls list the main one first): a deepstack merger's norm over s²·d_v
    (postshuffle); one past the language model's layers reaches no loss, its saves freed
    with its output (deepstack_used)."""
    mergers = [("merger", "d_v")] + [(f"deepstack_merger_list.{j}", "d_vm")
                                     for j in range(s.deepstack)]
    for name, norm_width in mergers:
        w.norm(f"{v}.{name}.norm", "layernorm", width=norm_width, projector=True)
        w.linear(f"{v}.{name}.linear_fc1", "d_vm", "d_vm", True, projector=True)
        w.linear(f"{v}.{name}.linear_fc2", "d_vm", "d_t", True, projector=True)
        w.matmul(f"{name} linear_fc1", f"{name}.linear_fc1", ("N_m",), ("d_vm",), ("d_vm",))
        w.matmul(f"{name} linear_fc2 (into the language model)", f"{name}.linear_fc2",
                 ("N_m",), ("d_vm",), ("d_t",))
    out = w.saves
    for j in range(s.deepstack_used):
        m = f"deepstack_merger_list.{j}"
        w.save(f"{m} norm's fp32 copy", f"{m}.norm", None, ("N_m", "d_vm"), "LNC")
        for _ in range(2):
            w.save(f"{m} norm mean and rstd", f"{m}.norm", None, ("N_m",), "ST")
        merger_mlp(out, m, "linear_fc1", "act_fn", "linear_fc2")
    layernorm(out, "merger norm", "merger.norm", None, "N")
    merger_mlp(out, "merger", "linear_fc1", "act_fn", "linear_fc2")


def kimi(w: Walk, s: VisionSpec) -> None:
    """Kimi_K25VisionModel under model.vision_tower and Kimi_K25MultimodalProjection under
    model.mm_projector (modeling_kimi_k25.py): the Conv2d saves the pixels; the position
    table is resampled bicubically by F.embedding_bag (16 table rows a patch, mode "sum",
    per_sample_weights in the table's dtype): it saves the indices, the offsets and the
    weights, and its bookkeeping: on the CPU bag_size and max_indices (N each; measured), on
    CUDA offset2bag (16·N) and bag_size (N), max_indices empty outside mode "max"
    (aten/src/ATen/native/cuda/EmbeddingBag.cu _embedding_bag_cuda; read, not measured
    here); the rotary cos and sin (fp32, made once); each block: norm1, the q/k/v
    projections' input (one bf16 tensor under the CPU's autocast, three copies of the fp32
    LayerNorm output under CUDA's), the rotated q and k, v, sdpa's output and log-sum-exp,
    proj's input (a copy), norm2, fc1's input, the GELU's, fc2's; final_layernorm; the
    projector: the 2×2 merge's gather indices, pre_norm, in_proj's input, the GELU's,
    out_proj's."""
    v = "model.vision_tower"
    w.param(f"{v}.patch_embed.proj.weight", ("d_v", "k_v"))  # Conv2d(3, d, p, stride p)
    w.param(f"{v}.patch_embed.proj.bias", ("d_v",))
    w.param(f"{v}.patch_embed.pos_emb.position_embeddings", ("N_pos", "d_v"))  # (H, W, d)
    w.save("patch embedding input (pixels)", "patch_embed.proj", None, ("N_p", "k_v"), "A")
    w.matmul("patch embedding (Conv2d as a matmul)", "patch_embed.proj", ("N_p",), ("k_v",),
             ("d_v",))
    e = "patch_embed.pos_emb"
    w.save("embedding_bag indices", e, None, ("N",), "I", copies=16)
    w.save("embedding_bag per_sample_weights", e, None, ("N",), "P", copies=16)
    w.save("embedding_bag offsets", e, None, ("N",), "I")
    w.save("embedding_bag bag_size", e, None, ("N",), "I")
    w.save("embedding_bag max_indices (CPU)", e, None, ("N",), "IC")
    w.save("embedding_bag offset2bag (CUDA)", e, None, ("N",), "IG", copies=16)
    for x in ("cos", "sin"):
        w.save(f"rotary {x}", "", None, ("N", "d_hv"), "F")
    b = f"{v}.layers.{BLOCK}"
    w.norm(f"{b}.norm1", "layernorm", "L_v")
    w.norm(f"{b}.norm2", "layernorm", "L_v")
    w.linear(f"{b}.attn.proj", "d_v", "d_v", True, "L_v")
    for x in ("q", "k", "v"):
        w.linear(f"{b}.attn.{x}_proj", "d_v", "d_v", True, "L_v")
    w.linear(f"{b}.mlp.fc1", "d_v", "f_v", True, "L_v")
    w.linear(f"{b}.mlp.fc2", "f_v", "d_v", True, "L_v")
    b, out = "layers.{i}", w.saves
    names = {"q": "attn.q_proj", "k": "attn.k_proj", "v": "attn.v_proj", "core": "attn",
             "out": "attn.proj"}
    layernorm(out, "norm1", f"{b}.norm1", L_V, "N")
    w.save("q/k/v input", f"{b}.attn.q_proj", L_V, ("N", "d_v"), "A")
    for x in ("k", "v"):
        w.save(f"{x}_proj's own input copy", f"{b}.attn.{x}_proj", L_V, ("N", "d_v"), "ACC")
    qkv_matmuls(w, b, names)
    for x in ("q rotated", "k rotated", "v", "output"):
        w.save(f"sdpa {x}", f"{b}.attn", L_V, ("N", "d_v"), "A")
    w.save("sdpa log-sum-exp", f"{b}.attn", L_V, ("h_v", "N"), "F")
    core_matmuls(w, s, b, names)
    w.save("proj input", f"{b}.attn.proj", L_V, ("N", "d_v"), "A")
    out_matmul(w, b, names)
    layernorm(out, "norm2", f"{b}.norm2", L_V, "N")
    w.save("fc1 input", f"{b}.mlp.fc1", L_V, ("N", "d_v"), "A")
    mlp_matmuls(w, s, b, "in")
    w.save(f"{s.act} input", f"{b}.mlp", L_V, ("N", "f_v"), "A")
    w.save("fc2 input", f"{b}.mlp.fc2", L_V, ("N", "f_v"), "A")
    mlp_matmuls(w, s, b, "out")
    w.norm(f"{v}.final_layernorm", "layernorm")
    layernorm(out, "final_layernorm", "final_layernorm", None, "N")
    p = "model.mm_projector"  # pre_norm over d_v, then 2×2 patches as one 4·d_v row
    w.norm(f"{p}.pre_norm", "layernorm", projector=True)
    w.linear(f"{p}.in_proj", "d_vm", "d_vm", True, projector=True)
    w.linear(f"{p}.out_proj", "d_vm", "d_t", True, projector=True)
    p = "mm_projector"
    # (the gather runs on the tower's output, before pre_norm: for that input's gradient)
    w.save("2×2 merge's gather indices", p, None, ("N",), "I", input_grad=True)
    layernorm(out, "pre_norm", f"{p}.pre_norm", None, "N")
    merger_mlp(out, p, "in_proj", "act", "out_proj")
    w.matmul("projector in_proj", "mm_projector.in_proj", ("N_m",), ("d_vm",), ("d_vm",))
    w.matmul("projector out_proj (into the language model)", "mm_projector.out_proj",
             ("N_m",), ("d_vm",), ("d_t",))
