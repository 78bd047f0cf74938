"""transformers' whole vision-language model, run on the meta device with image inputs
(issue 41, Must 2): `python -m accounting --config VLM.json --image HxW --verify`.

The model is AutoModelForImageTextToText.from_config (eager attention in every sub-model)
built from the config.json object itself, on the meta device, as the language model's
counter builds AutoModelForCausalLM (hf_counter.py). Its inputs are those the family's
processor hands it: input_ids with each image's placeholder tokens (the tool's count of
them), pixel_values of the shape the image processor makes for the tool's resized size,
and the family's side inputs (Qwen's image_grid_thw and mm_token_type_ids, Pixtral's and
LLaVA-OneVision's image_sizes, Idefics3's pixel_attention_mask, Gemma 4's
image_position_ids). The model checks that its placeholders equal the tower's features
(get_placeholder_mask), so a wrong token count is an error here, said as a disagreement.

Meta tensors carry no values, but a VLM's forward reads some: the placeholder mask, the
grids that cut each image's attention (cu_seqlens), the M-RoPE positions. Those inputs are
given as real CPU tensors (small: ids and grids), the weights and pixels stay on meta, and
`MetaWhereMixed` moves a CPU tensor to meta whenever an op meets it with a meta one: the
control flow reads real values, the arithmetic stays shape-only. FlopCounterMode counts by
its module hierarchy. Imports torch and transformers: imported only for --verify.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode

from accounting.analysis.images import VisionWorkload
from accounting.crosscheck.hf_counter import DTYPES, _quiet, transformers_config
from accounting.crosscheck.measure import _totals
from accounting.architecture.hf_config import storage_dtype
from accounting.ledger.records import BACKWARD, FORWARD, PHASES

QWEN = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


class MetaWhereMixed(TorchDispatchMode):
    """An op whose tensors are on meta and on the CPU runs on meta (the CPU ones moved):
    CPU-only ops (the ids' mask, the grids' arithmetic) keep their values."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and _device(kwargs.get("device")) == "meta" \
                and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu":
            # a mask or positions sent to the model's device keep their values (an op that
            # meets them with a meta tensor moves them then)
            return func(*args, **{k: v for k, v in kwargs.items() if k != "device"})
        if func is torch.ops.aten.index.Tensor and args[0].device.type == "meta":
            # a meta tensor indexed by a CPU boolean mask (inputs_embeds[image_mask]): the
            # mask's True positions, known here, as long indices (meta cannot count them)
            args = (args[0], [i.nonzero().unbind(1) if isinstance(i, torch.Tensor) and
                              i.dtype == torch.bool and i.device.type == "cpu" else (i,)
                              for i in args[1]])
            args = (args[0], [j for group in args[1] for j in group])
        flat, _ = tree_flatten((args, kwargs))
        devices = {t.device.type for t in flat if isinstance(t, torch.Tensor)}
        if "meta" in devices and len(devices) > 1:
            args, kwargs = tree_map(lambda t: t.to("meta") if isinstance(t, torch.Tensor)
                                    and t.device.type != "meta" else t, (args, kwargs))
        return func(*args, **kwargs)


def _device(d) -> str | None:
    return None if d is None else torch.device(d).type


@dataclass(frozen=True)
class VisionMeasurement:
    transformers_class: str
    version: str
    flops: Mapping[str, int]  # module path (from the model's root) -> its own FLOPs
    total: int
    inputs: Mapping[str, tuple[int, ...]]  # input name -> shape, for the notes
    seconds: Mapping[str, float] = field(compare=False)
    # the backward pass's matmul FLOPs by module (the op counter's: each FLOP to the module
    # whose forward made the autograd node that ran it, dispatch.py); None: forward only
    backward: Mapping[str, int] | None = None
    trained: object = False  # what required grad: False, True or vision_train.PROJECTOR


def build(data: Mapping) -> torch.nn.Module:
    from transformers import AutoModelForImageTextToText
    config = transformers_config({k: v for k, v in data.items() if k != "architectures"})
    config._attn_implementation = "eager"
    for sub in ("vision_config", "text_config"):
        if getattr(config, sub, None) is not None:
            getattr(config, sub)._attn_implementation = "eager"
    dtype = DTYPES.get(storage_dtype(data), torch.float32)
    # experts as batched_mm, as the language model's counter runs them (hf_counter.build:
    # FlopCounterMode has no formula for grouped_mm, whose meta kernel refuses float32); a
    # model without experts ignores the setting
    extra = {"experts_implementation": "batched_mm"}
    with _quiet(), torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype, **extra)
    return model.eval()


def image_token(config) -> int:
    for key in ("image_token_id", "image_token_index"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise ValueError(f"{type(config).__name__} names no image token (image_token_id)")


def inputs(model, vw: VisionWorkload, seq: int, batch: int, dtype) -> dict:
    """The model's keyword inputs: every image in the first sequence, one text token before
    each image's placeholders (the processor's start/marker text tokens stand there)."""
    s, rows = vw.spec, vw.images
    token = image_token(model.config)
    text = 0 if token != 0 else 1
    ids = torch.full((batch, seq), text, dtype=torch.long)
    at = 0
    for r in rows:
        at += 1
        ids[0, at:at + r.tokens] = token
        at += r.tokens
    meta = {"device": "meta", "dtype": dtype}
    # an all-ones attention mask: with none (and no cache: Gemma 4's forward makes none)
    # masking_utils tests position_ids for packed sequences, a value meta cannot give
    kw: dict = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    fam = s.family
    if fam in QWEN or fam == "kimi_k25":
        grids = torch.tensor([[1, r.grid[0], r.grid[1]] for r in rows])
        n = sum(r.grid[0] * r.grid[1] for r in rows)
        shape = (n, s.channels * s.temporal_patch * s.patch ** 2) if fam != "kimi_k25" else \
            (n, s.channels, s.patch, s.patch)
        kw.update(pixel_values=torch.zeros(shape, **meta), image_grid_thw=grids)
        if fam in QWEN:
            kw["mm_token_type_ids"] = (ids == token).long()
    elif fam == "gemma4":
        side = s.tokens_per_image * s.pool ** 2
        positions = torch.full((len(rows), side, 2), -1, dtype=torch.long)
        for i, r in enumerate(rows):
            gh, gw = r.grid
            positions[i, :gh * gw] = torch.tensor([[x, y] for y in range(gh) for x in range(gw)])
        kw.update(pixel_values=torch.zeros(len(rows), side, s.channels * s.patch ** 2, **meta),
                  image_position_ids=positions)
    elif fam == "pixtral":
        h = max(r.resized[0] for r in rows)
        w = max(r.resized[1] for r in rows)
        kw.update(pixel_values=torch.zeros(len(rows), s.channels, h, w, **meta),
                  image_sizes=torch.tensor([list(r.resized) for r in rows]))
    elif fam == "idefics3":  # its padding tiles are found by their values: real ones here
        # (one number, expanded; vision_check.room bounds what its copies take)
        tiles = sum(r.tiles for r in rows)
        kw.update(pixel_values=torch.ones(()).expand(1, tiles, s.channels, s.image_size,
                                                      s.image_size),
                  pixel_attention_mask=torch.ones(1, tiles, s.image_size, s.image_size,
                                                  dtype=torch.bool))
    elif fam == "llava_onevision":
        tiles = max(r.tiles for r in rows)
        kw.update(pixel_values=torch.zeros(len(rows), tiles, s.channels, s.image_size,
                                           s.image_size, **meta),
                  image_sizes=torch.tensor([list(r.size) for r in rows]))
    else:  # one tensor of image_size² tiles (Gemma 3, LLaVA, Llama 4, InternVL)
        tiles = sum(r.tiles for r in rows)
        kw["pixel_values"] = torch.zeros(tiles, s.channels, s.image_size, s.image_size, **meta)
    return kw


def freeze(model, vw: VisionWorkload, trained) -> None:
    """requires_grad as a fine-tune sets it: the language model's parameters trained; the
    tower's and projector's (the vision ledger's parameters, by state-dict key) trained
    (True), frozen (False), or the projector's alone (vision_train.PROJECTOR: LLaVA's
    --tune_mm_mlp_adapter, LLaMA-Factory's freeze_vision_tower)."""
    from accounting.crosscheck.vision_check import roots
    from accounting.ledger.builder import vision as VB
    from accounting.planning.vision_train import part
    on, alone = part(trained)
    tower, _ = roots(vw)
    projector = set(VB.walk(vw.spec).projector_params)
    for name, p in model.named_parameters():
        if any(name == t or name.startswith(t + ".") for t in tower) or name in projector:
            p.requires_grad_(on and (not alone or name in projector))


def measure(data: Mapping, vw: VisionWorkload, seq: int, batch: int = 1, phase: str = FORWARD,
            trained=False) -> VisionMeasurement:
    """FlopCounterMode over transformers' whole model's forward with `vw`'s images; with a
    backward in `phase`, the cross-entropy of its logits back through every parameter that
    requires grad (freeze(): the tower frozen, its projector alone, or all trained), its
    matmul FLOPs by module from the op counter."""
    import transformers
    import torch.nn.functional as F
    from accounting.crosscheck.dispatch import EINSUM_PRODUCT, MATMUL, OpCounter
    seconds = {}
    t = time.perf_counter()
    model = build(data)
    seconds["build"] = time.perf_counter() - t
    from accounting.crosscheck.fused import register_flop_formulas
    register_flop_formulas()  # as hf_counter.measure: the triangular solve's own formula
    dtype = model.get_input_embeddings().weight.dtype
    kw = inputs(model, vw, seq, batch, dtype)
    root = type(model).__name__
    backward = BACKWARD in PHASES[phase]
    if backward:
        freeze(model, vw, trained)
    t = time.perf_counter()
    counter = OpCounter(model)
    counter.phases = {BACKWARD}  # the forward's FLOPs are FlopCounterMode's, by module
    with FlopCounterMode(display=False) as fcm, counter, torch.set_grad_enabled(backward), \
            MetaWhereMixed():
        out = model(**kw, use_cache=True)  # as hf_counter: a cache skips the packed-sequence test (masking_utils)
        totals = _totals(fcm.get_flop_counts(), root)
        total = fcm.get_total_flops()
        if backward:  # as hf_counter.measure: the loss over every position
            logits = out.logits
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                            kw["input_ids"].reshape(-1)).backward()
    seconds["run"] = time.perf_counter() - t
    from accounting.crosscheck.mapping import own
    back = None
    if backward:
        back = {}
        for c in counter.counts():
            if c.kind in (MATMUL, EINSUM_PRODUCT):
                back[c.module] = back.get(c.module, 0) + c.flops
    return VisionMeasurement(root, transformers.__version__, own(totals), total,
                             {k: tuple(v.shape) for k, v in kw.items()}, seconds, back,
                             trained if backward else False)
