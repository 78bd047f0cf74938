"""A vision-language model's projector trained on a frozen tower (issue 41): LLaVA's stage 1
(`--tune_mm_mlp_adapter`, llava/train/train.py: the model's requires_grad off, then the
mm_projector's on), LLaMA-Factory's `freeze_vision_tower: true` with
`freeze_multi_modal_projector: false` (src/llamafactory/hparams/finetuning_args.py;
model/model_utils/visual.py's forbidden modules: the tower's keys frozen, the projector's
trained). What autograd saves then, and which of the projector's matmuls run which gradient,
derived from the vision ledger (builder/vision.py's walk, its `projector=True` parameters)
and its saves (vision_saves.py), checked against transformers' own models on the CPU with
the tower's parameters' requires_grad off (tests/test_vision_projector.py).

Nothing in the tower requires grad (its parameters are frozen, the pixels need none), so
autograd records no graph there: none of its saves, nor autocast's copies of its weights,
and under gradient checkpointing nothing either as LLaMA-Factory checkpoints
(`_gradient_checkpointing_enable`, src/llamafactory/model/model_utils/checkpointing.py,
hiyouga/LlamaFactory 9174a7a: a layer without a trainable parameter runs unchecked).
(transformers 5.23's own gradient_checkpointing_enable() also hooks the tower's
get_input_embeddings() output to require grad, putting the frozen blocks in the graph: not
followed, docs/planning.md.) The projector's parameters do, so every op after its
first weight records: its saves are kept, except those an op keeps only for its input's
gradient when that input is the tower's output (Save.input_grad: a Python RMSNorm's fp32
input and rsqrt, Gemma 3's avg_pool input and 1 + w, Kimi-K2.5's 2×2 gather). A LayerNorm
(aten native_layer_norm) keeps its input, mean and rstd whatever needs a gradient (its one
backward formula computes the three gradients from them). The tower's ops on the
projector's output (Qwen2.5-VL's reverse_indices) keep theirs (Save.after_projector).
"""
from __future__ import annotations

from accounting.ledger.builder.vision_save import Save

# The families whose projector's first op is a matmul on the tower's output, no weighted
# norm before it, so that matmul's input needs no gradient: only its weight's gradient runs,
# and under autocast its bf16 weight copy is not saved (mm keeps the input alone when only
# the weight needs a gradient). LlavaMultiModalProjector.forward (linear_1 first; LLaVA-
# OneVision's the same), Llama4VisionPixelShuffleMLP (the adapter's fc1 after the pixel
# shuffle), Idefics3Connector (modality_projection after the pixel shuffle),
# Gemma4MultimodalEmbedder (embedding_pre_projection_norm has no scale). Every other
# projector begins with a norm with a weight (Qwen's ln_q/norm, Gemma 3's mm_soft_emb_norm,
# Kimi-K2.5's pre_norm, InternVL's layer_norm, Mistral 3's norm), whose output needs one.
DIRECT = ("llava", "llava_onevision", "llama4", "idefics3", "gemma4")


def roots(ledger) -> frozenset[str]:
    """The module names only the projector's parameters are under (the merger, the
    multi_modal_projector, ...): a record whose module begins with one is the projector's."""
    proj = set(ledger.projector_params)

    def parts(names):
        return {c for n in names for c in n.split(".")[:-1]}
    return frozenset(parts(proj) - parts(p.name for p in ledger.params if p.name not in proj))


def is_projector(module: str, names: frozenset[str]) -> bool:
    return module.split(".")[0] in names


def first_matmul(ledger):
    """The projector's matmul that reads the tower's output directly (DIRECT), or None."""
    if ledger.spec.family not in DIRECT:
        return None
    names = roots(ledger)
    return next(r for r in ledger.matmuls if is_projector(r.module, names))


def saves(ledger) -> tuple[Save, ...] | None:
    """One image's saves (and the fixed ones) when only the projector trains; None where
    the tower's saves are not written."""
    if ledger.saves is None:
        return None
    names, s = roots(ledger), ledger.spec
    first = first_matmul(ledger)
    skip = set()
    if first is not None:  # its weight's bf16 copy: mm keeps the input alone (DIRECT)
        skip = {p.module for p in ledger.params if p.name in ledger.projector_params
                and f".{p.module}.".find(f".{first.module}.") >= 0}
    out = []
    for x in ledger.saves:
        if x.role == "W":  # autocast's copy of a weight: a projector matmul's, but the
            # first's where it reads the tower's output (vision_saves.saves names each)
            if x.name.removeprefix("bf16 copy of ") in ledger.projector_params \
                    and x.module not in skip:
                out.append(x)
        elif x.after_projector or (is_projector(x.module, names) and not x.input_grad):
            out.append(x)
    if s.family == "qwen3_vl":
        # each deepstack merger's LayerNorm keeps its input, the hidden state after its block,
        # which no frozen block saves now; the one after the last block is the main merger's
        # input, saved by its norm already (the same tensor)
        n = sum(1 for i in s.deepstack_at[:s.deepstack_used] if i != s.depth - 1)
        if n:
            out.append(Save("deepstack mergers' norm inputs (the blocks' outputs)",
                            "deepstack_merger_list", None, ("N", "d_v"), "LNR", copies=n))
    return tuple(out)
