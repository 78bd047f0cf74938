"""The whole vision-language model with its images, compared (issue 41, Must 2): the
ledger's executed forward matmul FLOPs (the vision ledger's per image, the language
model's over the T tokens that hold the image tokens) against FlopCounterMode over
transformers' whole model (hf_vision.py), by component: the vision tower, the projector
(the ledger's projector parameters' modules, as transformers names them), the language
model (everything else: its blocks and LM head). Works on plain numbers; runs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.analysis.images import VisionWorkload
from accounting.analysis.workload import Analysis
from accounting.crosscheck.result import Check
from accounting.ledger.builder import vision as VB
from accounting.ledger.records import BACKWARD, EXECUTED, FORWARD, PHASES
from accounting.units import grouped

TOWER, PROJECTOR, LANGUAGE, TOTAL = "vision tower", "projector", "language model", "total"


@dataclass(frozen=True)
class VisionRow:
    component: str
    analytic: int
    transformers: int

    @property
    def agree(self) -> bool:
        return self.analytic == self.transformers


@dataclass(frozen=True)
class VisionCheck:
    """transformers' whole model run with the images, beside the ledger."""
    transformers_class: str
    version: str
    images: int
    image_tokens: int
    seq: int
    batch: int
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    rows: tuple[VisionRow, ...]
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()
    error: str = ""  # why transformers' model could not run the images (a disagreement)
    skipped: str = ""  # why it was not run (the workload leaves it no room; not a disagreement)
    phase: str = FORWARD  # the pass compared: forward, backward or train
    trained: str = ""  # with a backward: what trains beside the language model (_trained_words)

    @property
    def agrees(self) -> bool:
        return not self.error and all(r.agree for r in self.rows) and \
            all(c.holds for c in self.checks)

    def disagreements(self) -> list[str]:
        if self.error:
            return [f"transformers' whole model with the images: {self.error}"]
        out = [f"with images, {r.component}: analytic {grouped(r.analytic)}, transformers "
               f"{grouped(r.transformers)} (difference {r.transformers - r.analytic:+,})"
               for r in self.rows if not r.agree]
        return out + [f"check failed: {c.claim} ({c.evidence})" for c in self.checks
                      if not c.holds]

    def to_dict(self) -> dict:
        return {"agrees": self.agrees, "transformers_class": self.transformers_class,
                "transformers_version": self.version, "images": self.images,
                "image_tokens": self.image_tokens, "seq": self.seq, "batch": self.batch,
                "inputs": {k: list(v) for k, v in self.inputs},
                "components": [{"component": r.component, "analytic": r.analytic,
                                "transformers": r.transformers, "agree": r.agree}
                               for r in self.rows],
                "checks": [{"claim": c.claim, "evidence": c.evidence, "holds": c.holds}
                           for c in self.checks],
                "notes": list(self.notes), "error": self.error or None,
                "skipped": self.skipped or None, "pass": self.phase,
                "vision_trained": self.trained or None}


def roots(vw: VisionWorkload) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the tower's top modules, the projector's modules) as transformers' model names them:
    from the vision ledger's parameter keys (their first module below the model, e.g.
    model.visual, vision_model) and its projector's matmul modules, extended to the path
    of the projector parameter they hold (Gemma 4's embed_vision holds
    embed_vision.embedding_projection)."""
    lg = VB.walk(vw.spec)
    tower = sorted({".".join(p.name.split(".")[:2 if p.name.startswith("model.") else 1])
                    for p in lg.params})
    # a parameter held by the model itself (LLaVA-OneVision's model.image_newline) names no
    # module of the projector
    held = {m for m in (name.rsplit(".", 1)[0] for name in lg.projector_params)
            if _under(m, tower)}
    projector = set(held)
    for r in lg.matmuls:
        for path in held:
            at = f".{path}.".find(f".{r.module}.")
            if "{" not in r.module and at >= 0:
                projector.add(path[:at + len(r.module)])
    return tuple(tower), tuple(sorted(projector))


def _projector_ops(vw: VisionWorkload, projector: tuple[str, ...]) -> set[str]:
    """The vision ledger's op names whose module is (under) a projector module."""
    return {r.name for r in VB.walk(vw.spec).matmuls if _in_projector(r, projector)}


def _in_projector(record, projector: tuple[str, ...]) -> bool:
    return "{" not in record.module and any(f".{p}.".find(f".{record.module}.") >= 0
                                            for p in projector)


def _under(path: str, tops) -> bool:
    return any(path == t or path.startswith(t + ".") for t in tops)


def analytic(a: Analysis, vw: VisionWorkload, trained=False) -> dict[str, int]:
    """The ledger's matmul FLOPs by component in a's pass: the forward's, and with a
    backward the gradient records planning/vision_flops.py runs for a tower frozen, trained
    (True) or with its projector alone trained (vision_train.PROJECTOR)."""
    _, projector = roots(vw)
    passes = PHASES[a.phase]
    out = {TOWER: 0, PROJECTOR: 0, LANGUAGE: a.matmul_flops(EXECUTED)}
    if FORWARD in passes:
        ops = _projector_ops(vw, projector)
        proj = sum(f for row in vw.images for name, f in row.flops_by_op if name in ops)
        out[TOWER], out[PROJECTOR] = vw.flops - proj, proj
    if BACKWARD in passes:
        from accounting.planning.vision_flops import image_records
        for row in vw.images:
            _, records, _, _, v, tiles = image_records(vw.spec, row, trained, False)
            for r in records:
                out[PROJECTOR if _in_projector(r, projector) else TOWER] += \
                    tiles * r.count(v) * r.flops(v)
    return out


def measured(m, vw: VisionWorkload) -> dict[str, int]:
    """transformers' modules' own FLOPs (hf_vision.VisionMeasurement.flops, and its
    backward's) by component."""
    tower, projector = roots(vw)
    out = {TOWER: 0, PROJECTOR: 0, LANGUAGE: 0}
    for path, f in list(m.flops.items()) + list((m.backward or {}).items()):
        key = PROJECTOR if _under(path, projector) else TOWER if _under(path, tower) \
            else LANGUAGE
        out[key] += f
    out[LANGUAGE] += m.total - sum(m.flops.values())  # counted outside every module
    return out


def pixtral_surplus(vw: VisionWorkload) -> tuple[int, int]:
    """What transformers' eager Pixtral tower runs beyond the tool's per-image count, for a
    batch of several images (PixtralVisionModel.forward, modeling_pixtral.py, 5.23):
    (the patch convolution over the padding: PixtralImageProcessor pads every image to the
    batch's largest height and width and patch_conv runs the padded pixel_values before
    each image is cut to its image_sizes, 2·C·p²·d_v per padded patch; the attention core
    over the images' patches as one sequence: eager attention with
    generate_block_attention_mask computes every pair, masked after, 2 matmuls of
    2·h_v·d_hv per pair in each block, for (ΣN)² − ΣN² pairs across images). (0, 0) for
    one image or another family. Flash attention (cu_seqlens, as vLLM runs it) attends
    per image, as the tool counts."""
    s, rows = vw.spec, vw.images
    if s.family != "pixtral" or len(rows) < 2:
        return 0, 0
    h = max(r.resized[0] for r in rows) // s.patch
    w = max(r.resized[1] for r in rows) // s.patch
    n = [r.grid[0] * r.grid[1] for r in rows]
    conv = 2 * s.channels * s.patch ** 2 * s.width * (len(rows) * h * w - sum(n))
    cross = sum(n) ** 2 - sum(x * x for x in n)
    return conv, s.depth * 2 * 2 * s.heads * s.head_dim * cross


def compare(a: Analysis, vw: VisionWorkload, m) -> VisionCheck:
    ours, theirs = analytic(a, vw, m.trained), measured(m, vw)
    checks, notes = [], []
    passes = PHASES[a.phase]
    conv, cross = pixtral_surplus(vw) if FORWARD in passes else (0, 0)
    if BACKWARD in passes and m.trained is True:  # a trained Pixtral's backward of the same:
        # the padding's weight gradient (its input, the pixels, needs none), and each
        # attention product's two gradients over the cross-image pairs
        c, x = pixtral_surplus(vw)
        conv, cross = conv + c, cross + 2 * x
    if conv or cross:
        claim = ("transformers' eager Pixtral tower runs its patch convolution over the batch "
                 "padded to the largest image and attends across the images' patches as one "
                 "masked sequence (PixtralVisionModel.forward); the tool counts each image at "
                 "its own size and attention, as flash attention serves it: the tower's "
                 "surplus is the padding's 2·C·p²·d_v per patch and 4·h_v·d_hv per "
                 "cross-image pair per block")
        surplus = theirs[TOWER] - ours[TOWER]
        checks.append(Check(claim, f"surplus {grouped(surplus)}; padding {grouped(conv)} + "
                                   f"cross-image pairs {grouped(cross)}",
                            surplus == conv + cross))
        theirs[TOWER] -= conv + cross
        notes.append(f"The tower's transformers count is less its batch's surplus, "
                     f"{grouped(conv + cross)} FLOPs (the check row).")
    from accounting.crosscheck.hf_recurrent import surpluses
    found = [x for phase in passes for x in surpluses(a, phase)]
    for claim, what, per_block in found:  # transformers' torch paths' extra work, as the
        extra = sum(per_block.values())  # language model's own check subtracts it
        checks.append(Check(claim, f"{grouped(extra)} {what} in {len(per_block)} layers, "
                                   f"within the language model's {grouped(theirs[LANGUAGE])}",
                            theirs[LANGUAGE] >= extra))
        theirs[LANGUAGE] -= extra
    rows = [VisionRow(c, ours[c], theirs[c]) for c in (TOWER, PROJECTOR, LANGUAGE)]
    rows.append(VisionRow(TOTAL, sum(ours.values()), sum(theirs.values())))
    tower, projector = roots(vw)
    notes.append(f"{m.transformers_class} (transformers {m.version}) built by "
                 f"AutoModelForImageTextToText.from_config from the config.json itself, eager "
                 f"attention, meta device; forward with "
                 f"{'; '.join(f'{k} {list(v)}' for k, v in m.inputs.items())}, "
                 f"counted by FlopCounterMode's module hierarchy"
                 f"{_backward_note(m) if m.backward is not None else ''}.")
    notes.append(f"Modules: {', '.join(projector)} -> projector; {', '.join(tower)} -> "
                 f"vision tower (the rest of them); everything else -> language model. "
                 f"Analytic: the vision ledger per image (the images table) and the language "
                 f"model's {a.phase} pass at T = {grouped(a.seq)}, B = {grouped(a.batch)}, the image "
                 f"tokens included (every image in the first sequence, a text token before "
                 f"each image's placeholders).")
    return VisionCheck(m.transformers_class, m.version, len(vw.images), vw.image_tokens,
                       a.seq, a.batch, tuple(m.inputs.items()), tuple(rows), tuple(checks),
                       tuple(notes), phase=a.phase,
                       trained=_trained_words(m.trained) if BACKWARD in passes else "")


def _trained_words(trained) -> str:
    from accounting.planning.vision_train import part
    on, alone = part(trained)
    return ("the tower frozen, its projector trained (--train-projector)" if alone else
            "the tower and projector trained (--train-vision)" if on else
            "the tower and projector frozen (the default)")


def _backward_note(m) -> str:
    return (f"; then the cross-entropy of its logits backward, the language model trained, "
            f"{_trained_words(m.trained)}: the backward's matmuls by the module whose forward "
            f"made each autograd node (the op counter, dispatch.py)")


REAL_PIXELS = 2 ** 27  # pixel values a run may hold as real CPU numbers (~0.7 GB at peak)


def room(a: Analysis, vw: VisionWorkload) -> str:
    """Why the images cannot be laid out in T (each image's placeholders after a text
    token, as its processor's start marker stands), or in memory, or ""."""
    s = vw.spec
    if s.family == "idefics3":  # its forward finds padding tiles by their pixel values
        real = sum(r.tiles for r in vw.images) * s.channels * s.image_size ** 2
        if real > REAL_PIXELS:
            return (f"Idefics3's forward tells padding tiles by their pixel values "
                    f"(Idefics3Model.get_image_features), so they are real numbers here: "
                    f"{grouped(real)} of them is more than the {grouped(REAL_PIXELS)} a run "
                    f"holds; give fewer images to run it")
    need = vw.image_tokens + len(vw.images)
    if need <= a.seq:
        return ""
    return (f"the {grouped(vw.image_tokens)} image tokens and a text token before each "
            f"image's placeholders (its processor's start marker) need T ≥ {grouped(need)}; "
            f"give --ctx {grouped(need)} or more to run it")


def skipped(a: Analysis, vw: VisionWorkload, why: str) -> VisionCheck:
    return VisionCheck("", "", len(vw.images), vw.image_tokens, a.seq, a.batch, (), (),
                       skipped=why, phase=a.phase)


def failed(a: Analysis, vw: VisionWorkload, why: str) -> VisionCheck:
    """transformers' model could not run the images: said, and a disagreement."""
    return VisionCheck("", "", len(vw.images), vw.image_tokens, a.seq, a.batch, (), (),
                       error=why, phase=a.phase)
