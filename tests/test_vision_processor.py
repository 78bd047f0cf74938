"""The image processor's settings config.json does not carry (issue 41): the assumed ones
named on the first screen, and a preprocessor_config.json read over them (--processor),
each family's image tokens checked against transformers' own image processor run on the
CPU with the same settings (the independent source), and the refusals in one line.
"""
import json

import numpy as np
import pytest

from accounting.analysis import images as I
from accounting.architecture import processor as P
from accounting.architecture.hf_config import translate
from accounting.runtime.errors import UsageError
from cli_run import refused_in_one_line, run
from hf_examples import write_config
from test_vision import CONFIGS
from test_vision_idefics3 import DATA as IDEFICS3
from test_vision_internvl import DATA as INTERNVL
from test_vision_mistral3 import DATA as MISTRAL3

SIZES = [(1024, 1024), (300, 1000), (2000, 3000), (40, 30)]


def _spec(data, file: dict | None = None):
    s = translate(data, "config.json", "m").vision
    return P.apply(s, file, "preprocessor_config.json") if file is not None else s


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("longest", [700, 3000])
def test_pixtral_longest_edge_read_equals_the_processor(size, longest):
    """size.longest_edge from the file: PixtralImageProcessorPil with it (and PixtralProcessor's
    patch_size·spatial_merge_size, 14·2) resizes to the tool's size; tokens (H/28)·(W/28)."""
    transformers = pytest.importorskip("transformers")
    s = _spec(MISTRAL3, {"size": {"longest_edge": longest},
                         "patch_size": {"height": 14, "width": 14}})
    assert s.longest_edge == longest
    proc = transformers.PixtralImageProcessorPil(size={"longest_edge": longest},
                                                 patch_size={"height": 28, "width": 28})
    h, w = (int(x) for x in proc(images=[np.zeros((*size, 3), dtype=np.uint8)],
                                 return_tensors="np")["image_sizes"][0])
    row = I.image_row(s, size)
    assert (row.resized, row.tokens) == ((h, w), (h // 28) * (w // 28))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("file", [{"do_image_splitting": False},
                                  {"size": {"longest_edge": 2 * 56}},
                                  {"size": {"longest_edge": 7 * 56},
                                   "max_image_size": {"longest_edge": 56}}])
def test_idefics3_settings_read_equal_the_processor(size, file):
    """Idefics3ImageProcessorPil with the file's settings over the class's (max_image_size the
    tower's 56, longest_edge 4·56 unless given): its tiles (pixel_values' second axis) are
    the tool's; each tile adds (56/14/2)² = 4 <image> tokens."""
    transformers = pytest.importorskip("transformers")
    s = _spec(IDEFICS3, file)
    kwargs = {"max_image_size": {"longest_edge": 56}, "size": {"longest_edge": 4 * 56},
              **file}
    proc = transformers.Idefics3ImageProcessorPil(**kwargs)
    out = proc(images=[[np.full((*size, 3), 128, dtype=np.uint8)]], return_tensors="np")
    row = I.image_row(s, size)
    assert row.tiles == out["pixel_values"].shape[1]
    assert row.tokens == row.tiles * 4


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("file", [{"crop_to_patches": False}, {"min_patches": 2, "max_patches": 6},
                                  {"max_patches": 1}, {"min_patches": 3, "max_patches": 30,
                                                       "size": {"height": 56, "width": 56}}])
def test_internvl_settings_read_equal_the_processor(size, file):
    """GotOcr2ImageProcessorPil at the tower's tile (56) with crop_to_patches (InternVLProcessor's
    default, unless the file says) and the file's min/max_patches: its num_patches are the
    tool's tiles (the thumbnail included), (56/14/2)² = 4 tokens each."""
    transformers = pytest.importorskip("transformers")
    s = _spec(INTERNVL, file)
    settings = {"crop_to_patches": True, **{k: v for k, v in file.items() if k != "size"}}
    proc = transformers.GotOcr2ImageProcessorPil(size={"height": 56, "width": 56})
    out = proc(images=[np.full((*size, 3), 128, dtype=np.uint8)], return_tensors="np", **settings)
    row = I.image_row(s, size)
    assert row.tiles == int(out["num_patches"][0])
    assert row.tokens == row.tiles * 4


@pytest.mark.parametrize("file", [{"min_pixels": 200_000, "max_pixels": 400_000},
                                  {"size": {"shortest_edge": 50_000, "longest_edge": 100_000}}])
def test_qwen_pixel_bounds_read_equal_the_processor(file):
    """Qwen's bounds as a 4.x file (min_pixels/max_pixels) or a 5.x one (size.shortest_edge,
    size.longest_edge): Qwen2VLImageProcessorPil with them gives the tool's grid."""
    transformers = pytest.importorskip("transformers")
    s = _spec(CONFIGS["qwen2_5_vl"], file)
    lo, hi = s.pixels
    proc = transformers.Qwen2VLImageProcessorPil(min_pixels=lo, max_pixels=hi, patch_size=14)
    for size in SIZES:
        out = proc(images=[np.zeros((*size, 3), dtype=np.uint8)], return_tensors="np")
        _, gh, gw = (int(x) for x in out["image_grid_thw"][0])
        assert I.image_row(s, size).grid == (gh, gw)
    assert s.pixels == (tuple(file.values()) if "min_pixels" in file
                        else (50_000, 100_000))


def test_assumed_settings_are_the_processors_class_defaults_at_its_sizes():
    """At the class's own tile sizes the assumed settings are transformers' class defaults:
    Idefics3ImageProcessorPil (size 4·364, max_image_size 364, splitting), GotOcr2's
    min/max_patches 1 and 12 with InternVLProcessor's crop_to_patches, Pixtral's
    longest_edge 1,024 at PixtralVisionConfig's default image_size 1,024."""
    transformers = pytest.importorskip("transformers")
    i3 = _spec({**IDEFICS3, "vision_config": {**IDEFICS3["vision_config"], "image_size": 364}})
    c = transformers.Idefics3ImageProcessorPil()
    assert dict(P.assumed(i3)) == {"size.longest_edge": c.size["longest_edge"],
                                   "max_image_size.longest_edge": c.max_image_size["longest_edge"],
                                   "do_image_splitting": c.do_image_splitting}
    g = transformers.GotOcr2ImageProcessorPil()
    from transformers.models.internvl.processing_internvl import InternVLProcessor
    ivl = dict(P.assumed(_spec(INTERNVL)))
    assert (ivl["min_patches"], ivl["max_patches"], ivl["crop_to_patches"]) == \
        (g.min_patches, g.max_patches, InternVLProcessor.images_kwargs["crop_to_patches"])
    px = _spec({**MISTRAL3, "vision_config": {**MISTRAL3["vision_config"], "image_size": 1024}})
    assert dict(P.assumed(px))["size.longest_edge"] == \
        transformers.PixtralImageProcessorPil().size["longest_edge"] == 1024


def test_first_screen_says_assumed_then_read(tmp_path, capsys):
    """Without --processor the answer names the assumed settings; with a file, what it read
    (and the tokens follow it: longest_edge 700 fits 1,024×2,048 as 350×700, 13·25 = 325)."""
    path = str(write_config(tmp_path, MISTRAL3))
    code, out, err = run(capsys, "--config", path, "--no-verify", "--image", "1024x2048",
                         "--ctx", "4096")
    assert code == 0, err
    head = out.split("\n\n")[0]
    assert "processor:     assumed (config.json does not carry them): size.longest_edge 224" \
        in head
    pre = tmp_path / "preprocessor_config.json"
    pre.write_text(json.dumps({"size": {"longest_edge": 700}, "image_mean": [0.5] * 3}))
    code, out, err = run(capsys, "--config", path, "--no-verify", "--image", "1024x2048",
                         "--ctx", "4096", "--processor", str(pre), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["workload"]["image_tokens"] == 13 * 25
    assert d["vision"]["processor"] == {"source": str(pre), "settings": {
        "size.longest_edge": 700, "patch_size": 14, "spatial_merge_size": 2}}


@pytest.mark.parametrize("family, file, expected", [
    ("internvl", {"size": {"height": 448, "width": 448}}, "not the tower's 56"),
    ("internvl", {"min_patches": 5, "max_patches": 2}, "above max_patches"),
    ("idefics3", {"do_image_splitting": "yes"}, "true or false"),
    ("mistral3", {"do_resize": False}, "do_resize false"),
    ("mistral3", {"size": {"longest_edge": -3}}, "size.longest_edge must be"),
    ("llava", {"do_center_crop": True}, "drop --processor"),
    ("gemma3", {"size": {"height": 896, "width": 896}}, "not the tower's 112"),
    ("gemma3", {"image_seq_length": 256}, "not the tower's 16"),
    ("gemma3", {"do_pan_and_scan": "yes"}, "true or false"),
    ("gemma3", {"pan_and_scan_min_ratio_to_activate": "1.2"}, "a number above 0"),
    ("gemma3", {"pan_and_scan_max_num_crops": 65}, "at most 64 crops"),
    ("internvl", [1, 2], "a JSON object"),
    ("internvl", "{not json", "not JSON"),
])
def test_processor_refusals(tmp_path, capsys, family, file, expected):
    data = {"mistral3": MISTRAL3, "idefics3": IDEFICS3, "internvl": INTERNVL}.get(family) \
        or CONFIGS[family]
    path = str(write_config(tmp_path, data))
    pre = tmp_path / "pre.json"
    pre.write_text(file if isinstance(file, str) else json.dumps(file))
    refused_in_one_line(capsys, "--config", path, "--no-verify", "--image", "448x448",
                        "--processor", str(pre), expected=expected)


def test_processor_on_a_language_model_and_a_missing_file(tmp_path, capsys):
    refused_in_one_line(capsys, "gpt2-small", "--processor", "x.json", expected="vision-language")
    path = str(write_config(tmp_path, INTERNVL))
    refused_in_one_line(capsys, "--config", path, "--no-verify", "--processor",
                        str(tmp_path / "absent.json"), expected="cannot read it")
    with pytest.raises(UsageError):
        P.apply(_spec(INTERNVL), {"max_patches": 65}, "f")


def test_serve_reads_the_processor_file_too(tmp_path, capsys):
    """serve's profile item (the processor's largest image, a huge square) follows the
    file: max_patches 2 leaves grids 1×1, 1×2 and 2×1, of which a square image takes 1×1,
    one 56² tile and no thumbnail, (56/14/2)² = 4 tokens (the default 1-12 tiles take 3×3
    and the thumbnail: 10 tiles, 40 tokens)."""
    path = str(write_config(tmp_path, INTERNVL))
    pre = tmp_path / "preprocessor_config.json"
    pre.write_text(json.dumps({"max_patches": 2}))
    argv = ("serve", "--config", path, "--gpu", "H100", "--ctx", "4096", "--format", "json")
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert json.loads(out)["vision"]["profile_item_tokens"] == 40
    code, out, err = run(capsys, *argv, "--processor", str(pre))
    assert code == 0, err
    assert json.loads(out)["vision"]["profile_item_tokens"] == 4


def test_qwen_processor_line_names_where_the_bounds_came_from(tmp_path, capsys):
    """Qwen's bounds: assumed (the family's published file's, 3,136 and 12,845,056 for
    Qwen2.5-VL), set by the flags, or read from --processor with the flags over it."""
    path = str(write_config(tmp_path, CONFIGS["qwen2_5_vl"]))
    pre = tmp_path / "preprocessor_config.json"
    pre.write_text(json.dumps({"min_pixels": 3136, "max_pixels": 1003520}))
    base = ("--config", path, "--no-verify", "--image", "1024x1024", "--ctx", "4096")
    for extra, expected in [
            ((), "assumed (config.json does not carry them): min_pixels 3,136, max_pixels "
                 "12,845,056"),
            (("--max-pixels", "500000"), "set by --min-pixels/--max-pixels: min_pixels 3,136, "
                                         "max_pixels 500,000"),
            (("--processor", str(pre)), f"read from {pre}: min_pixels 3,136, max_pixels "
                                        f"1,003,520"),
            (("--processor", str(pre), "--max-pixels", "500000"),
             "max_pixels 500,000; --min-pixels/--max-pixels over it")]:
        code, out, err = run(capsys, *base, *extra)
        assert code == 0, err
        assert expected in out.split("\n\n")[0], extra
    code, out, err = run(capsys, *base, "--processor", str(pre), "--format", "json")
    d = json.loads(out)
    # smart_resize by hand: 1,036² > 1,003,520, β = 1,024/√1,003,520 = 1.0222, floor(1,024/β/28)
    # = 35: 980×980, 70×70 patches, 35·35 = 1,225 tokens
    assert d["vision"]["processor"]["settings"]["max_pixels"] == 1003520
    assert d["workload"]["image_tokens"] == 35 * 35
