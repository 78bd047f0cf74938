"""The vision tower's facts (issue 41): walk a VisionSpec (accounting/architecture/vision.py) in the
order transformers' modules run and emit each parameter (its state-dict key in the family's
ImageTextToText model), each matmul of one image, as the ledger's records (Param, Matmul)
in shape symbols, and what autograd saves when the tower trains (vision_save.Save): one walk
a family (vision_vit.py, vision_qwen.py, vision_gemma4.py, vision_pixtral.py; the walk's
records: vision_walk.py). accounting/analysis/images.py gives the symbols their values per
image (values()) and reduces the records; nothing else restates the tower.

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
from accounting.ledger.builder.vision_walk import VISION, Walk  # noqa: F401 (VISION re-exported)
from accounting.ledger.builder.vision_gemma4 import gemma4
from accounting.ledger.builder.vision_pixtral import pixtral
from accounting.ledger.builder.vision_qwen import kimi, qwen
from accounting.ledger.builder.vision_vit import idefics3, internvl, llama4, vit


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


# each family's walk: its parameters, matmuls and saves
WALKS = {"qwen2_vl": qwen, "qwen2_5_vl": qwen, "qwen3_vl": qwen, "kimi_k25": kimi,
         "llama4": llama4, "gemma4": gemma4, "pixtral": pixtral, "idefics3": idefics3,
         "internvl": internvl}


def walk(spec: VisionSpec) -> VisionLedger:
    w = Walk(spec)
    WALKS.get(spec.family, vit)(w, spec)  # SigLIP (Gemma 3) and CLIP (LLaVA, OneVision)
    params = tuple(w.params)
    saves = None
    if VS.supported(spec):
        saves = tuple(w.saves) + tuple(VS.weight_copies(spec, params))
    return VisionLedger(spec, params, tuple(w.matmuls), tuple(w.projector), saves)


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
