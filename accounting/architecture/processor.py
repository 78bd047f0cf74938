"""The image processor's settings that a config.json does not carry (issue 41): for the
families whose image tokens depend on them, the values the tool assumes (each from the
processor's own source, transformers 5.23.0, tied to the tower where the model needs it),
and `--processor FILE`, a published preprocessor_config.json, read over them.

* Pixtral (Mistral 3): PixtralImageProcessor (image_processing_pixtral.py) fits each image
  within size.longest_edge (class default 1,024, PixtralVisionConfig's default image_size;
  assumed: vision_config.image_size, as Mistral-Small-3.1's published file pairs them,
  1,540) in multiples of patch_size·spatial_merge_size (PixtralProcessor passes the
  product; patch_size assumed the tower's).
* Idefics3, SmolVLM: Idefics3ImageProcessor (image_processing_pil_idefics3.py; SmolVLM's is
  the same) rescales the longest side to size.longest_edge (class default 4·364 = 1,456),
  splits into max_image_size tiles (class default 364) with do_image_splitting (default
  true); assumed: max_image_size = vision_config.image_size (each tile is the tower's input)
  and longest_edge = 4 tiles, the class's ratio.
* InternVL: GotOcr2ImageProcessor (image_processing_pil_got_ocr2.py) with InternVLProcessor's
  crop_to_patches true (processing_internvl.py's images_kwargs; the image processor's own
  default is false), min_patches 1 and max_patches 12 (class defaults), tiles of size =
  vision_config.image_size, and a thumbnail beside several tiles (crop_image_to_patches'
  use_thumbnail, true, which no setting reaches).
* Gemma 3: Gemma3ImageProcessor's pan-and-scan (image_processing_gemma3.py), off unless
  do_pan_and_scan (Gemma3Processor's images_kwargs, processing_gemma3.py: do_pan_and_scan
  false, pan_and_scan_min_crop_size 256, pan_and_scan_max_num_crops 4,
  pan_and_scan_min_ratio_to_activate 1.2, which apply where the file says null, as
  google/gemma-3-*-it's published preprocessor_config.json do for all four, beside size
  896² and image_seq_length 256: the file as fine-tuning repositories copy it); size and
  image_seq_length must be the tower's image_size and mm_tokens_per_image. --pan-and-scan
  turns it on over the file.
* Qwen2-VL and its successors: min_pixels and max_pixels (size.shortest_edge and
  size.longest_edge in transformers 5's files), which --min-pixels/--max-pixels also set.

A key that would change the tokens in a way the tool does not follow (do_resize false,
a tile or patch size other than the tower's) is refused in one line; keys that change no
count (normalisation, resampling, the class names) are not read.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from accounting.architecture.vision import VisionSpec
from accounting.runtime.errors import UsageError

FAMILIES = ("pixtral", "idefics3", "internvl", "gemma3")  # settings assumed unless --processor


def assumed(spec: VisionSpec) -> tuple[tuple[str, object], ...]:
    """The settings the image tokens depend on and config.json does not carry, as the spec
    holds them: (preprocessor_config.json key, value)."""
    s = spec
    if s.family == "pixtral":
        return (("size.longest_edge", s.longest_edge), ("patch_size", s.patch),
                ("spatial_merge_size", s.merge))
    if s.family == "idefics3":
        return (("size.longest_edge", s.longest_edge),
                ("max_image_size.longest_edge", s.image_size),
                ("do_image_splitting", s.split))
    if s.family == "internvl":
        return (("crop_to_patches", s.split), ("min_patches", s.min_tiles),
                ("max_patches", s.max_tiles), ("size", s.image_size))
    if s.family == "gemma3":
        return (("do_pan_and_scan", s.pan_scan),) + ((
            ("pan_and_scan_min_crop_size", s.pan_min_crop),
            ("pan_and_scan_max_num_crops", s.pan_max_crops),
            ("pan_and_scan_min_ratio_to_activate", s.pan_min_ratio)) if s.pan_scan else ())
    if s.pixels is not None:
        return (("min_pixels", s.pixels[0]), ("max_pixels", s.pixels[1]))
    return ()


def pan_and_scan(spec: VisionSpec) -> VisionSpec:
    """--pan-and-scan: Gemma 3's pan-and-scan on (over a --processor file's setting);
    refused in one line for another tower."""
    if spec.family != "gemma3":
        raise UsageError(f"--pan-and-scan is Gemma 3's image processor's (do_pan_and_scan); "
                         f"{spec.family}'s processor has none; drop it")
    return replace(spec, pan_scan=True)


def text(spec: VisionSpec) -> str:
    """The settings in words (the answer's processor line)."""
    out = []
    for k, v in assumed(spec):
        out.append(f"{k} {'true' if v is True else 'false' if v is False else f'{v:,}'}")
    return ", ".join(out)


def load(path: str) -> Mapping:
    """A preprocessor_config.json's object; UsageError naming the file and the fix."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"--processor {path}: cannot read it ({e.strerror or e}); give the "
                         f"model's preprocessor_config.json") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"--processor {path}: not JSON ({str(e)[:80]}); give the model's "
                         f"preprocessor_config.json") from None
    if not isinstance(data, dict):
        raise UsageError(f"--processor {path}: a preprocessor_config.json is a JSON object, "
                         f"got {type(data).__name__}")
    return data


def _int(data: Mapping, key: str, where: str, low: int = 1) -> int | None:
    """data's key (a.b for data[a][b]) as a positive integer, None when absent."""
    head, _, rest = key.partition(".")
    v = data.get(head)
    if rest and isinstance(v, dict):
        v = v.get(rest)
    elif rest:
        return None
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= 10**10:
        raise UsageError(f"{where}: {key} must be an integer from {low:,} to 10^10, got {v!r}")
    return v


def _bool(data: Mapping, key: str, where: str) -> bool | None:
    v = data.get(key)
    if v is not None and not isinstance(v, bool):
        raise UsageError(f"{where}: {key} must be true or false, got {v!r}")
    return v


def _side(data: Mapping, key: str, where: str) -> int | None:
    """A size given as an int, {height, width} (equal) or {longest_edge}: one side."""
    v = data.get(key)
    if v is None or isinstance(v, int) and not isinstance(v, bool):
        return _int(data, key, where)
    if isinstance(v, dict):
        h, w = v.get("height"), v.get("width")
        if h is not None or w is not None:
            if h != w:
                raise UsageError(f"{where}: {key} must be square here, got {v!r}")
            return _int({key: h}, key, where)
        return _int(data, f"{key}.longest_edge", where)
    raise UsageError(f"{where}: {key} must be an integer or an object, got {v!r}")


def _same(name: str, given: int | None, tower: int, where: str, why: str) -> None:
    if given is not None and given != tower:
        raise UsageError(f"{where}: {name} {given:,} is not the tower's {tower:,} ({why}); "
                         f"the tool counts the tower as config.json builds it")


def apply(spec: VisionSpec, data: Mapping, where: str) -> VisionSpec:
    """The spec with the preprocessor_config.json's settings read over the assumed ones."""
    s = spec
    if data.get("do_resize", True) is False:
        raise UsageError(f"{where}: do_resize false: the image tokens then follow each image's "
                         f"own size unresized, which the tool does not count")
    if s.family == "pixtral":
        _same("patch_size", _side(data, "patch_size", where), s.patch, where,
              "PixtralProcessor cuts patch_size·spatial_merge_size cells")
        _same("spatial_merge_size", _int(data, "spatial_merge_size", where), s.merge, where,
              "the projector's merge")
        longest = _int(data, "size.longest_edge", where)
        return replace(s, longest_edge=longest or s.longest_edge)
    if s.family == "idefics3":
        _same("max_image_size.longest_edge", _int(data, "max_image_size.longest_edge", where),
              s.image_size, where, "each tile is the tower's input")
        split = _bool(data, "do_image_splitting", where)
        longest = _int(data, "size.longest_edge", where)
        return replace(s, longest_edge=longest or s.longest_edge,
                       split=s.split if split is None else split)
    if s.family == "internvl":
        _same("size", _side(data, "size", where), s.image_size, where,
              "each tile is the tower's input")
        crop = _bool(data, "crop_to_patches", where)
        low = _int(data, "min_patches", where) or s.min_tiles
        high = _int(data, "max_patches", where) or s.max_tiles
        if low > high:
            raise UsageError(f"{where}: min_patches {low} is above max_patches {high}")
        if high > 64:
            raise UsageError(f"{where}: max_patches {high}: at most 64 tiles are read")
        return replace(s, split=s.split if crop is None else crop, min_tiles=low,
                       max_tiles=high)
    if s.family == "gemma3":
        _same("size", _side(data, "size", where), s.image_size, where,
              "every image and crop is resized to the tower's input")
        _same("image_seq_length", _int(data, "image_seq_length", where), s.tokens_per_image,
              where, "mm_tokens_per_image, the projector's pooled tokens")
        on = _bool(data, "do_pan_and_scan", where)
        crop = _int(data, "pan_and_scan_min_crop_size", where) or s.pan_min_crop
        most = _int(data, "pan_and_scan_max_num_crops", where) or s.pan_max_crops
        if most > 64:
            raise UsageError(f"{where}: pan_and_scan_max_num_crops {most}: at most 64 crops "
                             f"are read")
        ratio = data.get("pan_and_scan_min_ratio_to_activate")
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                                  or not 0 < ratio <= 10**5):
            raise UsageError(f"{where}: pan_and_scan_min_ratio_to_activate must be a number "
                             f"above 0, got {ratio!r}")
        return replace(s, pan_scan=s.pan_scan if on is None else on, pan_min_crop=crop,
                       pan_max_crops=most,
                       pan_min_ratio=s.pan_min_ratio if ratio is None else float(ratio))
    if s.pixels is not None:  # Qwen: min_pixels/max_pixels, or transformers 5's size
        lo = _int(data, "min_pixels", where) or _int(data, "size.shortest_edge", where)
        hi = _int(data, "max_pixels", where) or _int(data, "size.longest_edge", where)
        _same("patch_size", _int(data, "patch_size", where), s.patch, where,
              "the tower's patch")
        _same("merge_size", _int(data, "merge_size", where), s.merge, where,
              "the tower's merger")
        pixels = (lo or s.pixels[0], hi or s.pixels[1])
        if pixels[0] > pixels[1]:
            raise UsageError(f"{where}: min_pixels {pixels[0]:,} is above max_pixels "
                             f"{pixels[1]:,}")
        return replace(s, pixels=pixels)
    raise UsageError(f"{where}: --processor reads the settings of Mistral 3 (Pixtral), "
                     f"Idefics3/SmolVLM, InternVL, Gemma 3 and Qwen's towers; {s.family}'s images "
                     f"follow the tool's fixed rule for its processor (the images table says "
                     f"which); drop --processor")
