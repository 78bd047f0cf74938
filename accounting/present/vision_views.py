"""The vision tower in the analysis output (issue 41): its lines on the first screen, its
tables, its JSON. Formatting only: every number is accounting/analysis/images.py's."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from accounting.analysis.images import VisionWorkload
from accounting.ledger.builder.vision import VISION
from accounting.tables.table import Table
from accounting.units import gigabytes, grouped, si

LABEL = 14  # summary.py's label width

FAMILY = {"qwen2_vl": "Qwen2-VL ViT (2D RoPE) and patch merger",
          "qwen2_5_vl": "Qwen2.5-VL ViT (2D RoPE, window attention) and patch merger",
          "qwen3_vl": "Qwen3-VL ViT (learned and 2D RoPE positions) and patch mergers",
          "kimi_k25": "MoonViT (Kimi-K2.5) and its 2×2 patch-merging projector",
          "llama4": "Llama 4's ViT (tiles of 336², pixel shuffle) and projector",
          "gemma4": "Gemma 4's ViT (2D RoPE, padded to its soft-token budget) and embedder",
          "gemma3": "SigLIP ViT and Gemma 3's multimodal projector (average pool)",
          "llava": "CLIP ViT and LLaVA's MLP projector",
          "pixtral": "Pixtral ViT (2D RoPE, each image at its own size), Mistral 3's patch "
                     "merger and projector",
          "idefics3": "SigLIP ViT (tiles of image_size² and a global tile) and the "
                      "pixel-shuffle connector",
          "internvl": "InternViT (tiles of image_size² and a thumbnail) and the "
                      "pixel-shuffle MLP projector",
          "llava_onevision": "SigLIP ViT (anyres tiles and a base tile) and LLaVA's MLP "
                             "projector"}


def _line(label: str, text: str) -> str:
    return f"{label + ':':<{LABEL}} {text}"


def answer_lines(vw: VisionWorkload, language: int, seq: int) -> list[str]:
    lines = [_line("vision tower", f"counted: {grouped(vw.params)} parameters "
                                   f"({FAMILY[vw.spec.family]}; projector "
                                   f"{grouped(vw.projector_params)}); whole model "
                                   f"{grouped(language + vw.params)}")]
    said = processor_line(vw)
    if vw.images:
        n = len(vw.images)
        lines.append(_line("images", f"{grouped(n)} image{'' if n == 1 else 's'}: "
                                     f"{grouped(vw.image_tokens)} image tokens of the T = "
                                     f"{grouped(seq)}; vision encoder {grouped(vw.flops)} = "
                                     f"{si(vw.flops, 'FLOPs')} (matmul, forward)"))
    return lines + ([said] if said else [])


def processor_line(vw: VisionWorkload) -> str:
    """The image processor's settings the tokens follow: read from --processor's file, or
    assumed (the families whose settings config.json does not carry; Qwen's pixel bounds,
    the family's published preprocessor_config.json's, unless --min-pixels/--max-pixels)."""
    from dataclasses import replace as with_
    from accounting.architecture import processor
    if not vw.images:
        return ""
    spec = with_(vw.spec, pixels=vw.pixels) if vw.pixels else vw.spec
    flags = vw.pixels is not None and vw.pixels != vw.spec.pixels
    said = processor.text(spec) + ("; --min-pixels/--max-pixels over it" if flags else "") \
        + (f"; {vw.over} over it" if vw.over else "")
    if vw.processor:
        return _line("processor", f"read from {vw.processor}: {said}")
    if vw.spec.family in processor.FAMILIES or vw.spec.pixels is not None:
        how = "set by --min-pixels/--max-pixels" if flags else f"set by {vw.over}" if \
            vw.over else "assumed (config.json does not carry them)"
        return _line("processor", f"{how}: {processor.text(spec)}; --processor FILE reads "
                                  f"the model's preprocessor_config.json")
    return ""


def with_vision(answer: Table, vw: VisionWorkload | None, language: int, seq: int) -> Table:
    """The answer block with the tower's lines after its parameters line."""
    if vw is None:
        return answer
    notes = list(answer.notes)
    found = [i for i, x in enumerate(notes) if x.startswith("parameters:")]
    at = found[0] + 1 if found else len(notes)
    if found:
        notes[found[0]] += " in the language model"
    for i, x in enumerate(notes):  # the load memory of the whole model
        if x.startswith("load memory:"):
            total = language + vw.params
            notes[i] = _line("load memory", f"{gigabytes(4 * total)} in fp32, "
                                            f"{gigabytes(2 * total)} in bf16, the whole model "
                                            f"(GB = 10^9 bytes)")
    return replace(answer, notes=tuple(notes[:at] + answer_lines(vw, language, seq) + notes[at:]))


def tables(vw: VisionWorkload | None) -> list[Table]:
    if vw is None or not vw.images:
        return []
    s = vw.spec
    crops = s.family == "gemma3"  # pan-and-scan: the image and its crops, each resized
    rows = tuple((f"{i.size[0]}×{i.size[1]}", f"{i.resized[0]}×{i.resized[1]}" + (
                  f" and {i.tiles - 1} crops" if crops and i.tiles > 1 else ""),
                  f"{i.grid[0]}×{i.grid[1]}", grouped(i.patches), grouped(i.tokens),
                  grouped(i.flops)) for i in _distinct(vw))
    how = ("resized by Gemma4ImageProcessor within its soft-token budget" if s.family ==
           "gemma4" else "tiled by Llama4ImageProcessor's get_best_fit (at most 16 tiles, a global one "
           "beside several)" if s.family == "llama4" else
           "resized by navit_resize (at most 16,384 patches, 512 a side; padded to 28) as "
           "Kimi_K25ImageProcessor" if s.family == "kimi_k25" else
           f"resized by smart_resize (min_pixels {grouped(vw.pixels[0])}, max_pixels "
           f"{grouped(vw.pixels[1])}: the family's published preprocessor_config.json unless "
           f"--min-pixels/--max-pixels)"
           if vw.pixels else _tiling(vw) or f"every image resized to {s.image_size}×{s.image_size}")
    images = Table("Images (each distinct size once)",
                   ("image (H×W)", "resized", "patches (H×W)", "patches", "tokens",
                    "encoder matmul FLOPs"), rows,
                   notes=(f"{how}; {grouped(len(vw.images))} image(s), "
                          f"{grouped(vw.image_tokens)} image tokens in all.",))
    first = _distinct(vw)[0]
    ops = Table(f"Vision encoder matmul FLOPs by op, one {first.size[0]}×{first.size[1]} image",
                ("op", "FLOPs", "share"),
                tuple((name, grouped(f), f"{float(Fraction(f, first.flops)) * 100:.1f}%")
                      for name, f in first.flops_by_op),
                notes=("2·m·n·p per matmul; the convolutional patch embedding as the matmul "
                       "of its patches; the attention core per image (or window), as "
                       "transformers' eager attention runs it.",))
    return [images, ops]


def _tiling(vw: VisionWorkload) -> str:
    """How a processor-set family sizes each image, with the settings it used."""
    from accounting.architecture import processor
    s, how = vw.spec, processor.text(vw.spec)
    where = (f"{'read from ' + vw.processor if vw.processor else 'set by ' + vw.over if vw.over else 'assumed'}: {how}"
             + (f"; {vw.over} over it" if vw.processor and vw.over else ""))
    if s.family == "pixtral":
        return (f"fitted within the longest edge, sides up to multiples of patch·merge, by "
                f"PixtralImageProcessor ({where})")
    if s.family == "idefics3":
        return (f"rescaled and split into {s.image_size}² tiles and a global one by "
                f"Idefics3ImageProcessor ({where})")
    if s.family == "internvl":
        return (f"cut into {s.image_size}² tiles and a thumbnail by GotOcr2ImageProcessor's "
                f"crop_to_patches ({where})")
    if s.family == "gemma3" and s.pan_scan:
        return (f"resized to {s.image_size}², and cut into crops along the long side, each "
                f"resized to {s.image_size}², by Gemma3ImageProcessor's pan-and-scan "
                f"({where}); the image and each crop add {s.tokens_per_image} tokens, each "
                f"run's between <start_of_image> and <end_of_image> with blank lines around "
                f"and Gemma3Processor's 'Here is the original image … and here are some crops "
                f"to help you see better' around them (text tokens, not counted here)")
    return ""


def _distinct(vw: VisionWorkload):
    seen, out = set(), []
    for i in vw.images:
        if i.size not in seen:
            seen.add(i.size)
            out.append(i)
    return out


def _processor_dict(vw: VisionWorkload) -> dict:
    from accounting.architecture import processor
    from dataclasses import replace as with_
    spec = with_(vw.spec, pixels=vw.pixels) if vw.pixels else vw.spec  # flags included
    return {"source": vw.processor or "assumed", "settings": dict(processor.assumed(spec))}


def add_to_dict(d: dict, vw: VisionWorkload | None) -> dict:
    """The JSON: parameters.total the whole model (language model + tower), .language and
    .vision beside it; with images, workload.image_tokens, the vision section and a
    "vision encoder" component (its forward matmul FLOPs) in components and matmul_flops."""
    if vw is None:
        return d
    p = d["parameters"]
    language = p["total"]
    p.update({"total": language + vw.params, "language": language, "vision": vw.params,
              "vision_projector": vw.projector_params})
    # the whole model's bytes, as the total's (the language model's were params × bytes)
    p["memory_bytes"] = {k: v // language * p["total"] if language else v
                         for k, v in p["memory_bytes"].items()}
    d["workload"]["image_tokens"] = vw.image_tokens
    d["workload"]["images"] = len(vw.images)
    d["vision"] = {
        "family": vw.spec.family, "tower": FAMILY[vw.spec.family],
        "depth": vw.spec.depth, "width": vw.spec.width, "heads": vw.spec.heads,
        "mlp_width": vw.spec.mlp_width, "patch_size": vw.spec.patch,
        "parameters": vw.params, "projector_parameters": vw.projector_params,
        "pixels": None if vw.pixels is None else {"min": vw.pixels[0], "max": vw.pixels[1]},
        "processor": _processor_dict(vw),
        "encoder_pass": "forward",
        "encoder_matmul_flops": vw.flops,
        "images": [{"size": list(i.size), "resized": list(i.resized), "grid": list(i.grid),
                    "patches": i.patches, "tokens": i.tokens, "matmul_flops": i.flops,
                    "by_op": dict(i.flops_by_op)} for i in _distinct(vw)],
    }
    if vw.images:
        mm = d["matmul_flops"]
        mm["language_model"] = {k: mm[k] for k in ("executed", "useful")}
        mm["vision_encoder"] = vw.flops
        for counting in ("executed", "useful"):
            mm[counting] += vw.flops
            c = d["components"][counting]
            c["flops"][VISION] = vw.flops
            total = sum(c["flops"].values())
            c["shares"] = {k: _fraction(Fraction(v, total)) for k, v in c["flops"].items()}
            # the entry itself too (its FLOPs and share), beside flops and shares
            c[VISION] = {"flops": vw.flops, "share": c["shares"][VISION]}
    return d


def _fraction(x: Fraction) -> str:
    from accounting.present.export import fraction
    return fraction(x)


def uncounted(hf, what: str) -> str | None:
    """The line `plan` and `serve` put on their first screen for a vision-language config.json
    whose tower the tool reads: its parameters are not in `what` (None: no tower)."""
    tower = getattr(hf, "vision", None)
    if tower is None:
        return None
    from accounting.analysis.images import workload
    n = workload(tower, None, None).params
    return _line("vision tower", f"NOT in {what}: {grouped(n)} parameters ({gigabytes(2 * n)} "
                                 f"in bf16, GB = 10^9 bytes) beside the language model; the "
                                 f"tower's count: python -m accounting --config FILE --image HxW")


# planning/vision_train.py's default, as the recipe it follows states it
LLAMA_FACTORY = ("LLaMA-Factory's default (FinetuningArguments.freeze_vision_tower = True, "
                 "freeze_multi_modal_projector = True, hparams/finetuning_args.py)")


# --train-projector's recipe, as its sources state it
LLAVA_STAGE1 = ("LLaVA's stage 1, --tune_mm_mlp_adapter; LLaMA-Factory's "
                "freeze_multi_modal_projector = False")


def _activations(a) -> str:
    """What the line says of the tower's saved activations (planning/vision_train.py)."""
    if a is None or a.no_images:
        return ("no image in the workload, so no activation saved in it (give --image HxW, "
                "the images of each sequence)")
    n = f"{grouped(a.images)} image{'' if a.images == 1 else 's'} per sequence"
    if a.frozen:  # nothing requires grad in it: no graph, nothing saved
        return f"no activation saved in it for the {n} (frozen: autograd records no graph)"
    if a.not_written:
        return (f"its activations at the {n} are NOT counted (left out: this tower's saved "
                f"tensors are not written)")
    ckpt = ", each block checkpointed (--recompute full)" if a.checkpointed else ""
    mask = ""
    if a.forward is not None:  # Pixtral: one sequence of the forward's B·Σ N patches
        mask = (f" + the block mask over the forward's B × {grouped(a.forward.patches)} "
                f"patches, growing as B² ({gigabytes(a.forward_bytes(1))} at B = 1)")
    return (f"saved activations for the {n}: {gigabytes(a.per_sequence)} per sequence + "
            f"{gigabytes(a.fixed)} per step{mask}{ckpt}, in the step's peak above")


def flops_text(f, parallel: bool = False) -> str:
    """What the line says of the tower's FLOPs in the step (planning/vision_flops.py's
    TowerFlops; None: not in the step's). `parallel`: f is one sequence's, in each
    micro-batch of the first stage (planning/parallel/vision.py)."""
    if f is None:
        return "its FLOPs are NOT in the step's FLOPs or time"
    if not f.images:
        if f.update and not parallel:
            return (f"no image in the workload: of its FLOPs only its optimizer update, "
                    f"{si(f.update, 'FLOPs')}, is in the step's")
        return "no image in the workload, so no matmul of it in the step"
    n = f"{grouped(f.images)} image{'' if f.images == 1 else 's'} of the step"
    if parallel:
        n = (f"{grouped(f.images)} image{'' if f.images == 1 else 's'} of each sequence "
             f"(each micro-batch's in the first stage's FLOPs and time, at its rate)")
        if not f.trained:
            return f"its forward over the {n}: {si(f.forward, 'FLOPs')} (no backward: frozen)"
        if f.projector_only:
            return (f"its FLOPs over the {n}: forward {si(f.forward, 'FLOPs')} + the "
                    f"projector's backward {si(f.backward, 'FLOPs')}; its update in the "
                    f"stage's optimizer FLOPs")
        again = f" + recomputed {si(f.recompute, 'FLOPs')}" if f.recompute else ""
        return (f"its FLOPs over the {n}: forward {si(f.forward, 'FLOPs')} + backward "
                f"{si(f.backward, 'FLOPs')}{again}; its update in the stage's optimizer FLOPs")
    if not f.trained:
        return (f"its forward over the {n}, {si(f.forward, 'FLOPs')} (matmul), is in the "
                f"step's FLOPs and time (no backward: frozen)")
    if f.projector_only:
        return (f"its FLOPs over the {n}: forward {si(f.forward, 'FLOPs')} + the projector's "
                f"backward {si(f.backward, 'FLOPs')} (none in the frozen tower) + the "
                f"projector's update {si(f.update, 'FLOPs')} = {si(f.total, 'FLOPs')}, in the "
                f"step's FLOPs and time")
    again = f" + recomputed {si(f.recompute, 'FLOPs')}" if f.recompute else ""
    return (f"its FLOPs over the {n}: forward {si(f.forward, 'FLOPs')} + backward "
            f"{si(f.backward, 'FLOPs')}{again} + update {si(f.update, 'FLOPs')} = "
            f"{si(f.total, 'FLOPs')}, in the step's FLOPs and time")


def training_line(t, flops=None) -> str:
    """plan's first-screen line for a tower in a one-GPU training plan
    (planning/vision_train.py): counted, frozen or trained, in the fit; `flops` its
    TowerFlops in the step (planning/vision_flops.py)."""
    if not t.trained:
        return _line("vision tower", f"counted, frozen ({LLAMA_FACTORY}; --train-vision trains "
                                     f"it): {grouped(t.params)} parameters, weights "
                                     f"{gigabytes(t.weights)} held beside the step's peak (the "
                                     f"usable memory above is less them); no gradient, optimizer "
                                     f"state or saved activation; {flops_text(flops)}")
    if t.projector_only:
        return _line("vision tower", f"counted, tower frozen and projector trained "
                                     f"(--train-projector; {LLAVA_STAGE1}): {grouped(t.params)} "
                                     f"parameters, weights {gigabytes(t.weights)} + the "
                                     f"projector's {grouped(t.trained_params)} parameters' "
                                     f"gradients {gigabytes(t.gradients)} + optimizer state "
                                     f"{gigabytes(t.optimizer + t.master)} = "
                                     f"{gigabytes(t.total)} held beside the step's peak (the "
                                     f"usable memory above is less them); "
                                     f"{_activations(t.activations)}; {flops_text(flops)}")
    return _line("vision tower", f"counted, trained (--train-vision): {grouped(t.params)} "
                                 f"parameters, weights {gigabytes(t.weights)} + gradients "
                                 f"{gigabytes(t.gradients)} + optimizer state "
                                 f"{gigabytes(t.optimizer + t.master)} = {gigabytes(t.total)} "
                                 f"held beside the step's peak (the usable memory above is "
                                 f"less them); {_activations(t.activations)}; "
                                 f"{flops_text(flops)}")


def parallel_line(t, flops=None, parallel: bool = True) -> str:
    """The many-GPU plan's first-screen line (planning/parallel/vision.py): where the
    tower is and what of it the plan holds."""
    how = ("tower frozen, projector trained (--train-projector): the projector's gradients "
           "and optimizer state with every weight" if t.projector_only else
           "trained (--train-vision): its gradients and optimizer state with its weights"
           if t.trained else f"frozen ({LLAMA_FACTORY}): its weights alone")
    return _line("vision tower", f"counted on the first pipeline stage, whole on each of its "
                                 f"TP ranks (transformers' TP plans leave it unsplit), its "
                                 f"tensors sharded by --zero/--fsdp as the model's: "
                                 f"{grouped(t.params)} parameters, {how}, in the model states "
                                 f"above; {_activations(t.activations)}; "
                                 f"{flops_text(flops, parallel)}")


def parallel_dict(t) -> dict:
    return {**training_dict(t), "placement": "first pipeline stage; replicated over tensor "
            "parallelism; data-parallel sharding as the model's tensors",
            "bytes_are": "the whole tower's (unsharded); the per-GPU states hold its shard"}


def training_dict(t) -> dict:
    return {"family": t.family, "parameters": t.params, "trained": t.trained,
            "trained_part": ("projector" if t.projector_only else "tower and projector"
                             if t.trained else None),
            "trained_parameters": t.trained_params,
            "weights_bytes": t.weights, "gradient_bytes": t.gradients,
            "optimizer_state_bytes": t.optimizer, "master_bytes": t.master,
            "total_bytes": t.total, **_activations_dict(t.activations)}


def _activations_dict(a) -> dict:
    counted = a is not None and a.counted
    return {"activations_counted": counted,
            "activations": None if a is None else a.status,
            "images_per_sequence": 0 if a is None else a.images,
            "activation_bytes_per_sequence": a.per_sequence if counted else None,
            "activation_bytes_per_step": a.fixed if counted else None,
            # Pixtral's block mask over the forward's B·Σ N patches (not linear in B): at B = 1;
            # the peak's moments hold it at the plan's batch
            "activation_bytes_forward_at_batch_1": a.forward_bytes(1) if counted else None}
