"""Images as a workload (issue 41): each image's size as its processor resizes it, the
patches the tower runs, the tokens it hands the language model, and the encoder's matmul
FLOPs by op (the vision ledger's records, accounting/ledger/builder/vision.py, evaluated per
image). Pure Python; the processors' rules are written from their code and tested against
it (tests/test_vision.py runs transformers' image processors on the CPU).

Token rules, by family:
* Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 (Qwen2VLImageProcessor,
  image_processing_qwen2_vl.py): smart_resize to multiples of patch·merge within
  [min_pixels, max_pixels] (the family's published preprocessor_config.json values,
  VisionSpec.pixels; --min-pixels, --max-pixels for others), then (H/p)·(W/p) patches and a
  token per merge² patches.
* Kimi-K2.5 (Kimi_K25ImageProcessor, image_processing_kimi_k25.py): navit_resize, scaled
  down (never up) to at most max_patches 16,384 patches and 512 patches a side, then padded
  to a multiple of patch·merge (28); a token per 2×2 patches.
* Llama 4 (Llama4ImageProcessor, image_processing_llama4.py): the image fitted to the
  canvas of image_size tiles (at most max_patches 16) get_best_fit chooses (the smallest
  upscale, else the least downscale; the smallest area among equals); each tile, and a
  global one when there are several, runs the tower and adds (side/2)² patch tokens.
* Gemma 4 (Gemma4ImageProcessor, image_processing_gemma4.py): get_aspect_ratio_preserving_size,
  the largest size within max_soft_tokens·k² patches of p pixels whose sides are multiples
  of k·p; (H/kp)·(W/kp) soft tokens; the tower runs the padded max_soft_tokens·k² patches.
* Mistral 3 (PixtralProcessor, PixtralImageProcessor): fitted within image_size a side
  (never enlarged), each side rounded up to a multiple of patch·merge; (H/p)·(W/p) patches
  and (H/(p·s))·(W/(p·s)) [IMG] tokens (each row followed by an [IMG_BREAK], the last by
  [IMG_END]: text tokens beside them).
* Idefics3, SmolVLM (Idefics3ImageProcessor, do_image_splitting): the longest side to
  4·image_size (the processor's size; max_image_size = image_size, as the published
  checkpoints pair them), sides to multiples of image_size, split into image_size² tiles
  and a global tile; each tile runs the tower and adds (side/r)² <image> tokens (the
  processor's image_seq_len; the row/column markers around them are text, tokenizer-made).
* InternVL (InternVLProcessor: crop_to_patches by default, GotOcr2ImageProcessor's 1 to 12
  tiles of image_size²): get_optimal_tiled_canvas's grid and a thumbnail when it has
  several tiles; each tile runs the tower and adds image_seq_length = (side/2)² <IMG_CONTEXT>
  tokens (the <img> and </img> around them are text tokens).
* LLaVA-OneVision (LlavaOnevisionImageProcessor, LlavaOnevisionProcessor): anyres, the
  image_grid_pinpoints resolution select_best_resolution picks, its tiles of image_size²
  and the base tile each run the tower (the projector on every tile's patches); tokens:
  the base tile's, the grid's unpadded to the image's aspect (downsampled past anyres_max_N
  tiles), a newline per row (_get_number_of_features).
* Gemma 3 (Gemma3ImageProcessor): every image resized to image_size², (image_size/p)²
  patches, mm_tokens_per_image tokens. With pan-and-scan (do_pan_and_scan, off by
  default: --pan-and-scan or --processor FILE) an image whose aspect ratio reaches
  pan_and_scan_min_ratio_to_activate is also cut into 2 to pan_and_scan_max_num_crops
  crops along its long side (gemma3_crops), each resized to image_size² and run by the
  tower: the original and every crop add mm_tokens_per_image tokens (Gemma3Processor
  wraps each in "\n\n<start_of_image>…<end_of_image>\n\n" and puts "Here is the original
  image … and here are some crops to help you see better" around them: text tokens).
* LLaVA (CLIPImageProcessor): resized and cropped to image_size², (image_size/p)² patches
  and the class token; vision_feature_select_strategy "default" drops the class token.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from accounting.ledger.builder import vision as VB
from accounting.runtime.errors import UsageError
from accounting.architecture.vision import VisionSpec

MAX_SIDE = 10**5  # pixels a side: far beyond any image, small enough to stay instant
MAX_IMAGES = 10**4


def parse_size(text: str) -> tuple[int, int]:
    """'1024x1024' (height x width) -> (1024, 1024); UsageError otherwise."""
    m = re.fullmatch(r"\s*(\d{1,6})\s*[xX×]\s*(\d{1,6})\s*", str(text))
    if not m or not all(0 < int(g) <= MAX_SIDE for g in m.groups()):
        raise UsageError(f"--image {text!r}: give the image's height and width in pixels, "
                         f"HxW, each from 1 to {MAX_SIDE:,} (e.g. --image 1024x1024)")
    return int(m[1]), int(m[2])


def smart_resize(height: int, width: int, factor: int, min_pixels: int,
                 max_pixels: int) -> tuple[int, int]:
    """transformers' smart_resize (image_processing_qwen2_vl.py), as written there (its
    float arithmetic kept: the processor's answer is defined by it)."""
    if max(height, width) / min(height, width) > 200:
        raise UsageError(f"--image {height}x{width}: Qwen's image processor refuses an aspect "
                         f"ratio above 200 (smart_resize)")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


KIMI_MAX_PATCHES, KIMI_MAX_SIDE = 16384, 512  # Kimi_K25ImageProcessor's max_patches, size


def navit_resize(height: int, width: int, patch: int, merge: int, max_patches: int,
                 max_side: int) -> tuple[int, int]:
    """transformers' navit_resize (image_processing_kimi_k25.py), as written there: the
    padded size the patches are cut from."""
    num_h = max(1.0, height // patch)
    num_w = max(1.0, width // patch)
    scale = min(1.0, math.sqrt(max_patches / (num_h * num_w)), (max_side * patch) / height,
                (max_side * patch) / width)
    new_h, new_w = max(1, int(height * scale)), max(1, int(width * scale))
    new_h, new_w = min(new_h, max_side * patch), min(new_w, max_side * patch)
    factor = merge * patch
    return (factor - new_h % factor) % factor + new_h, (factor - new_w % factor) % factor + new_w


def llama4_tiles(height: int, width: int, tile: int, max_tiles: int) -> tuple[int, int]:
    """Llama4ImageProcessor's canvas, in tiles (rows, columns): find_supported_resolutions
    (every rows × columns with rows·columns ≤ max_tiles) and get_best_fit (scale = the
    smaller of canvas/image per side; the smallest scale ≥ 1, else the largest below 1;
    among equal scales the smallest area), in exact fractions where the processor compares
    float32 ratios (equal for these integer sizes)."""
    from fractions import Fraction
    shapes = [(r, c) for r in range(1, max_tiles + 1) for c in range(1, max_tiles + 1)
              if r * c <= max_tiles]
    scale = {rc: min(Fraction(rc[0] * tile, height), Fraction(rc[1] * tile, width))
             for rc in shapes}
    up = [x for x in scale.values() if x >= 1]
    chosen = min(up) if up else max(scale.values())
    return min((rc for rc in shapes if scale[rc] == chosen), key=lambda rc: rc[0] * rc[1])


def gemma4_size(height: int, width: int, patch: int, max_patches: int, k: int
                ) -> tuple[int, int]:
    """transformers' get_aspect_ratio_preserving_size (image_processing_gemma4.py), as
    written there."""
    total_px = height * width
    target_px = max_patches * (patch ** 2)
    factor = math.sqrt(target_px / total_px)
    side = k * patch
    th = int(math.floor(factor * height / side)) * side
    tw = int(math.floor(factor * width / side)) * side
    if th == 0 and tw == 0:
        raise UsageError(f"--image {height}x{width}: Gemma 4's processor cannot size it")
    longest = (max_patches // k ** 2) * side
    if th == 0:
        th, tw = side, min(int(math.floor(width / height)) * side, longest)
    elif tw == 0:
        tw, th = side, min(int(math.floor(height / width)) * side, longest)
    return th, tw


def gemma3_crops(height: int, width: int, min_crop: int, max_crops: int, min_ratio: float
                 ) -> tuple[int, int]:
    """Gemma3ImageProcessor.pan_and_scan_batched (image_processing_gemma3.py, transformers
    5.23; vLLM's Gemma3ProcessingInfo.get_num_crops, gemma3_mm.py, copies it), as written
    there: (rows, columns) of crops, (0, 0) for none. The long side's ratio below min_ratio:
    none; else round(ratio) crops (half up), at most long side // min_crop, at least 2, at
    most max_crops; none if a crop's short side (ceil) is below min_crop."""
    if width >= height:
        if width / height < min_ratio:
            return 0, 0
        cols = min(int(math.floor(width / min_crop)), int(math.floor(width / height + 0.5)))
        rows, cols = 1, min(max_crops, max(2, cols))
    else:
        if height / width < min_ratio:
            return 0, 0
        rows = min(int(math.floor(height / min_crop)), int(math.floor(height / width + 0.5)))
        rows, cols = min(max_crops, max(2, rows)), 1
    crop_w, crop_h = int(math.ceil(width / cols)), int(math.ceil(height / rows))
    if min(crop_w, crop_h) < min_crop:
        return 0, 0
    # (a tiny min_crop can leave the last crop empty, 4×25 at min_crop 1: the processor
    # still counts and resizes it, Gemma3ImageProcessorPil, and so does the tool)
    return rows, cols


def pixtral_size(height: int, width: int, longest: int, factor: int) -> tuple[int, int]:
    """transformers' get_resize_output_image_size (image_processing_pixtral.py), as written
    there: scaled down (never up) to fit longest × longest, floor; then each side rounded up
    to a multiple of factor = patch_size · spatial_merge_size (PixtralProcessor passes that
    patch_size to its image processor)."""
    ratio = max(height / longest, width / longest)
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    return ((height - 1) // factor + 1) * factor, ((width - 1) // factor + 1) * factor


def idefics3_tiles(height: int, width: int, longest: int, tile: int) -> tuple[int, int]:
    """Idefics3ImageProcessor's preprocessing (image_processing_pil_idefics3.py), as written
    there: the longest side rescaled to `longest` (up or down; the other side int()ed and
    made even), capped at 4,096; resize_for_vision_encoder to multiples of `tile`; split into
    tile² crops (rows, columns), a global tile beside them; (0, 0) when it fits one tile."""
    aspect = width / height
    if width >= height:
        width, height = longest, int(longest / aspect)
        height += height % 2
    else:
        height, width = longest, int(longest * aspect)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    aspect = width / height
    if width >= height and width > 4096:
        width, height = 4096, int(4096 / aspect)
    elif height > width and height > 4096:
        height, width = 4096, int(4096 * aspect)
    height, width = max(height, 1), max(width, 1)
    aspect = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / aspect) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * aspect) / tile) * tile
    if height > tile or width > tile:
        return (height - tile) // tile + 1, (width - tile) // tile + 1
    return 0, 0


def internvl_tiles(height: int, width: int, tile: int, low: int = 1, high: int = 12
                   ) -> tuple[int, int]:
    """GotOcr2ImageProcessor's get_optimal_tiled_canvas (image_processing_pil_got_ocr2.py), as
    written there: among the (columns, rows) with low ≤ columns·rows ≤ high, sorted by
    tiles, the closest aspect ratio; a tie goes to the later grid while the image's area
    exceeds half the grid's. Returns (rows, columns)."""
    grids = sorted(((c, r) for c in range(1, high + 1) for r in range(1, high + 1)
                    if low <= c * r <= high), key=lambda g: g[0] * g[1])
    aspect, area = width / height, width * height
    best_diff, best = float("inf"), (1, 1)
    for g in grids:
        diff = abs(aspect - g[0] / g[1])
        if diff < best_diff:
            best_diff, best = diff, g
        elif diff == best_diff and area > 0.5 * tile * tile * g[0] * g[1]:
            best = g
    return best[1], best[0]


def select_best_resolution(height: int, width: int, pinpoints) -> tuple[int, int]:
    """transformers' select_best_resolution (image_processing_utils.py), as written there:
    the (height, width) keeping the most of the image's pixels, then wasting the fewest."""
    best, most, least = None, 0, float("inf")
    for h, w in pinpoints:
        scale = min(w / width, h / height)
        kept = min(int(width * scale) * int(height * scale), width * height)
        wasted = w * h - kept
        if kept > most or (kept == most and wasted < least):
            best, most, least = (h, w), kept, wasted
    return best


def onevision_tokens(height: int, width: int, side: int, scale_h: int, scale_w: int,
                     anyres_max: int) -> int:
    """LlavaOnevisionProcessor._get_number_of_features (processing_llava_onevision.py), as
    written there: the base tile's side² features, and the grid's (side·scale)² unpadded to
    the image's aspect, downsampled past anyres_max_N tiles' worth, a newline per row."""
    ch, cw = side * scale_h, side * scale_w
    if width / height > cw / ch:
        ch -= (ch - int(round(height * (cw / width), 7))) // 2 * 2
    else:
        cw -= (cw - int(round(width * (ch / height), 7))) // 2 * 2
    features, newlines = ch * cw, ch
    ratio = math.sqrt(ch * cw / (anyres_max * side ** 2))
    if ratio > 1.1:
        features, newlines = int(ch // ratio) * int(cw // ratio), int(ch // ratio)
    return features + newlines + side * side


@dataclass(frozen=True)
class ImageRow:
    """One image: as given, as resized, its patch grid, the tokens it adds to the language
    model's sequence, and the encoder's forward matmul FLOPs by op (name, FLOPs)."""
    size: tuple[int, int]
    resized: tuple[int, int]
    grid: tuple[int, int]  # patches a side (height, width)
    tokens: int
    flops_by_op: tuple[tuple[str, int], ...]
    tiles: int = 1  # the tower's runs for this image (Llama 4's tiles and global tile)

    @property
    def patches(self) -> int:
        return self.tiles * self.grid[0] * self.grid[1]

    @property
    def flops(self) -> int:
        return sum(f for _, f in self.flops_by_op)


@dataclass(frozen=True)
class VisionWorkload:
    """The tower's parameters and the images' rows (none: the tower counted, not run)."""
    spec: VisionSpec
    params: int  # tower and projector
    projector_params: int
    images: tuple[ImageRow, ...]
    pixels: tuple[int, int] | None  # Qwen's (min_pixels, max_pixels) used, else None
    # the preprocessor_config.json the processor's settings were read from ("" : assumed,
    # accounting/architecture/processor.py)
    processor: str = ""
    over: str = ""  # a flag set over the file's or the assumed settings ("--pan-and-scan")

    @property
    def image_tokens(self) -> int:
        return sum(i.tokens for i in self.images)

    @property
    def flops(self) -> int:
        return sum(i.flops for i in self.images)


def image_row(spec: VisionSpec, size: tuple[int, int], pixels: tuple[int, int] | None = None
              ) -> ImageRow:
    s, (h, w) = spec, size
    if s.pixels is not None:  # Qwen's dynamic resolution
        lo, hi = pixels or s.pixels
        rh, rw = smart_resize(h, w, s.patch * s.merge, lo, hi)
        gh, gw = rh // s.patch, rw // s.patch
        tokens = gh * gw // s.merge ** 2
    elif s.family == "llama4":  # tiles of image_size², and a global tile when several
        rows, cols = llama4_tiles(h, w, s.image_size, s.max_tiles)
        tiles = rows * cols + (1 if rows * cols > 1 else 0)
        rh, rw = rows * s.image_size, cols * s.image_size
        side = s.image_size // s.patch
        values = VB.values(s, side, side)
        ops = {}
        for r in VB.walk(s).matmuls:
            ops[r.name] = ops.get(r.name, 0) + tiles * r.flops(values) * r.count(values)
        return ImageRow((h, w), (rh, rw), (side, side), tiles * s.tokens_per_image,
                        tuple(ops.items()), tiles)
    elif s.family == "gemma4":
        rh, rw = gemma4_size(h, w, s.patch, s.tokens_per_image * s.pool ** 2, s.pool)
        gh, gw = rh // s.patch, rw // s.patch
        tokens = gh * gw // s.pool ** 2
    elif s.family == "pixtral":  # PixtralProcessor: a row of [IMG] per merged row (the
        # [IMG_BREAK]/[IMG_END] after each row are text tokens beside them)
        rh, rw = pixtral_size(h, w, s.longest_edge, s.patch * s.merge)
        gh, gw = rh // s.patch, rw // s.patch
        tokens = (gw // s.merge) * (gh // s.merge)
    elif s.family == "idefics3":  # tiles of image_size², and a global one when several
        # (without do_image_splitting: one image_size² tile)
        rows, cols = idefics3_tiles(h, w, s.longest_edge, s.image_size) if s.split else (0, 0)
        tiles = rows * cols + 1 if rows else 1
        side = s.image_size // s.patch
        values = VB.values(s, side, side)
        ops = {}
        for r in VB.walk(s).matmuls:
            ops[r.name] = ops.get(r.name, 0) + tiles * r.flops(values) * r.count(values)
        return ImageRow((h, w), (max(rows, 1) * s.image_size, max(cols, 1) * s.image_size),
                        (side, side), tiles * s.tokens_per_image, tuple(ops.items()), tiles)
    elif s.family == "internvl":  # InternVLProcessor: crop_to_patches, 1 to 12 tiles
        # (GotOcr2ImageProcessor crops only with crop_to_patches and max_patches > 1)
        rows, cols = internvl_tiles(h, w, s.image_size, s.min_tiles, s.max_tiles) \
            if s.split and s.max_tiles > 1 else (1, 1)
        tiles = rows * cols + (1 if rows * cols > 1 else 0)  # and a thumbnail when several
        side = s.image_size // s.patch
        values = VB.values(s, side, side)
        ops = {}
        for r in VB.walk(s).matmuls:
            ops[r.name] = ops.get(r.name, 0) + tiles * r.flops(values) * r.count(values)
        return ImageRow((h, w), (rows * s.image_size, cols * s.image_size), (side, side),
                        tiles * s.tokens_per_image, tuple(ops.items()), tiles)
    elif s.family == "llava_onevision":  # anyres: the best grid's tiles and the base one
        bh, bw = select_best_resolution(h, w, s.pinpoints)
        rows, cols = bh // s.image_size, bw // s.image_size
        tiles, side = rows * cols + 1, s.image_size // s.patch
        values = VB.values(s, side, side)
        ops = {}
        for r in VB.walk(s).matmuls:
            ops[r.name] = ops.get(r.name, 0) + tiles * r.flops(values) * r.count(values)
        return ImageRow((h, w), (bh, bw), (side, side),
                        onevision_tokens(h, w, side, rows, cols, s.anyres_max),
                        tuple(ops.items()), tiles)
    elif s.family == "kimi_k25":
        rh, rw = navit_resize(h, w, s.patch, s.merge, KIMI_MAX_PATCHES, KIMI_MAX_SIDE)
        gh, gw = rh // s.patch, rw // s.patch
        tokens = gh * gw // s.merge ** 2
    elif s.family == "gemma3" and s.pan_scan:  # the image and its crops, each image_size²
        rows, cols = gemma3_crops(h, w, s.pan_min_crop, s.pan_max_crops, s.pan_min_ratio)
        tiles, side = 1 + rows * cols, s.image_size // s.patch
        values = VB.values(s, side, side)
        ops = {}
        for r in VB.walk(s).matmuls:
            ops[r.name] = ops.get(r.name, 0) + tiles * r.flops(values) * r.count(values)
        return ImageRow((h, w), (s.image_size, s.image_size), (side, side),
                        tiles * s.tokens_per_image, tuple(ops.items()), tiles)
    else:  # a fixed-resolution tower: every image resized to image_size²
        rh = rw = s.image_size
        gh = gw = s.image_size // s.patch
        tokens = s.tokens_per_image if s.projector == "gemma3" else \
            gh * gw + (1 if s.keep_class_token else 0)
    values = VB.values(s, gh, gw)
    ledger = VB.walk(s)
    ops: dict[str, int] = {}
    for r in ledger.matmuls:
        ops[r.name] = ops.get(r.name, 0) + r.flops(values) * r.count(values)
    return ImageRow((h, w), (rh, rw), (gh, gw), tokens, tuple(ops.items()))


def workload(spec: VisionSpec, sizes: list[str] | None, count: int | None,
             pixels: tuple[int, int] | None = None) -> VisionWorkload:
    """--image HxW (repeatable) and --images N: N images of the one --image size (of the
    tower's own input size when it resizes every image and no --image is given)."""
    given = [parse_size(x) for x in (sizes or ())]
    if count is not None:
        if not 0 <= count <= MAX_IMAGES:
            raise UsageError(f"--images {count}: give 0 to {MAX_IMAGES:,} images")
        if len(given) > 1:
            raise UsageError("--images N repeats one --image size; give one --image HxW with "
                             "it, or list each image with its own --image")
        if not given and spec.image_size is None:  # it sizes each image by its resolution
            raise UsageError(f"--images {count}: {spec.family}'s processor sizes each image by "
                             f"its own resolution; give --image HxW too")
        given = (given or [(spec.image_size, spec.image_size)]) * count
    if len(given) > MAX_IMAGES:
        raise UsageError(f"{len(given):,} images: give at most {MAX_IMAGES:,}")
    if pixels is not None and spec.pixels is None:
        raise UsageError("--min-pixels and --max-pixels set Qwen's image processor; "
                         f"{spec.family} resizes every image to {spec.image_size}²")
    if given and spec.runnable() is not None:
        raise UsageError(f"--image: transformers cannot run an image through this tower: "
                         f"{spec.runnable()}; its parameters are counted without --image")
    ledger = VB.walk(spec)
    sizes_only = VB.values(spec)
    projector = sum(p.numel(sizes_only) * p.count(sizes_only) for p in ledger.params
                    if p.name in ledger.projector_params)
    rows = {}
    for size in given:  # one row per distinct size, reused (10⁴ equal images stay instant)
        if size not in rows:
            rows[size] = image_row(spec, size, pixels)
    return VisionWorkload(spec, ledger.param_count(sizes_only), projector,
                          tuple(rows[s] for s in given),
                          (pixels or spec.pixels) if spec.pixels is not None else None)
