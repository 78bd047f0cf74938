"""Gemma 3's pan-and-scan (issue 41, Must 2): the crops Gemma3ImageProcessor cuts from an
image, each resized to the tower's input and adding mm_tokens_per_image tokens. Expected
values: transformers' own Gemma3ImageProcessorPil run on the CPU on dummy images (its
num_crops and pixel_values), Gemma3Processor's images_kwargs and replace_image_token, the
whole model run with the crops (--verify), and hand algebra for vLLM's profile probe
(vllm/model_executor/models/gemma3_mm.py, get_image_size_with_most_features).
"""
import json

import numpy as np
import pytest

from accounting.analysis import images as I
from accounting.architecture import processor as P
from accounting.architecture.hf_config import translate
from accounting.serving import vision as SV
from cli_run import refused_in_one_line, run
from hf_examples import write_config
from test_vision import CONFIGS

GEMMA3 = CONFIGS["gemma3"]  # 112² input, 14-pixel patches, 16 tokens an image
# (height, width): square; ratio 1.15 (below 1.2); exactly 1.2; 3 crops; a crop's short
# side 200 under the 256 minimum (none); 6.7:1 capped at 4 crops; portrait capped at 4;
# portrait 2.5:1 (3 crops); 500×300 whose 2 crops would be 250 high (none); 4×25 at a
# tiny minimum crop (the last crop empty, still counted)
SIZES = [(896, 896), (1000, 1150), (1000, 1200), (300, 1000), (200, 900), (600, 4000),
         (3000, 500), (2000, 800), (500, 300), (4, 25)]
SETTINGS = [{}, {"pan_and_scan_min_crop_size": 100, "pan_and_scan_max_num_crops": 6,
                 "pan_and_scan_min_ratio_to_activate": 2.0},
            {"pan_and_scan_min_crop_size": 1, "pan_and_scan_max_num_crops": 8}]


def _spec(file: dict):
    s = translate(GEMMA3, "config.json", "gemma3").vision
    return P.apply(s, {"do_pan_and_scan": True, **file}, "preprocessor_config.json")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("file", SETTINGS)
def test_crops_equal_the_image_processor(size, file):
    """Gemma3ImageProcessorPil with do_pan_and_scan and the file's settings (Gemma3Processor's
    images_kwargs defaults where it gives none): its num_crops and its pixel_values' images
    (the original and each crop) are the tool's tower runs; 16 tokens each."""
    transformers = pytest.importorskip("transformers")
    settings = {**transformers.Gemma3Processor.images_kwargs, "do_pan_and_scan": True, **file}
    settings.pop("do_convert_rgb")
    proc = transformers.Gemma3ImageProcessorPil(size={"height": 112, "width": 112})
    out = proc(images=[np.zeros((*size, 3), dtype=np.uint8)], return_tensors="np",
               input_data_format="channels_last", **settings)
    row = I.image_row(_spec(file), size)
    assert row.tiles == 1 + int(out["num_crops"][0]) == out["pixel_values"].shape[0]
    assert row.tokens == 16 * row.tiles and row.resized == (112, 112)
    off = I.image_row(translate(GEMMA3, "config.json", "gemma3").vision, size)
    assert row.flops == row.tiles * off.flops  # each crop is one more 112² run


def test_hand_counts():
    """Hand algebra on Gemma3ImageProcessor.pan_and_scan_batched's rule, defaults (256, 4,
    1.2): 300×1000: 1000/300 = 3.33 rounds to 3, 1000 // 256 = 3, 3 crops of 334 × 300;
    600×4000: 6.67 rounds to 7, capped at 4; 200×900: 3 crops of 300 × 200, 200 < 256: none;
    1000×1150: 1.15 < 1.2: none."""
    assert I.gemma3_crops(300, 1000, 256, 4, 1.2) == (1, 3)
    assert I.gemma3_crops(600, 4000, 256, 4, 1.2) == (1, 4)
    assert I.gemma3_crops(3000, 500, 256, 4, 1.2) == (4, 1)
    assert I.gemma3_crops(200, 900, 256, 4, 1.2) == (0, 0)
    assert I.gemma3_crops(1000, 1150, 256, 4, 1.2) == (0, 0)


def test_defaults_are_the_processors():
    """Off by default, with Gemma3Processor's images_kwargs (which apply where the published
    preprocessor_config.json says null, as google/gemma-3-*'s do): the class attributes of
    Gemma3ImageProcessorPil are None, so these are the values used."""
    transformers = pytest.importorskip("transformers")
    kw = transformers.Gemma3Processor.images_kwargs
    assert transformers.Gemma3ImageProcessorPil.do_pan_and_scan is None
    s = translate(GEMMA3, "config.json", "gemma3").vision
    assert (s.pan_scan, s.pan_min_crop, s.pan_max_crops, s.pan_min_ratio) == (
        kw["do_pan_and_scan"], kw["pan_and_scan_min_crop_size"],
        kw["pan_and_scan_max_num_crops"], kw["pan_and_scan_min_ratio_to_activate"])
    nulls = {k: None for k in ("do_pan_and_scan", "pan_and_scan_min_crop_size",
                               "pan_and_scan_max_num_crops",
                               "pan_and_scan_min_ratio_to_activate")}
    assert P.apply(s, {**nulls, "size": {"height": 112, "width": 112}}, "f") == s


def test_tokens_are_the_processors_text():
    """Gemma3Processor.replace_image_token (processing_gemma3.py) with num_crops crops: the
    original's and each crop's full_image_sequence, each image_seq_length image tokens
    between <start_of_image> and <end_of_image>; run on a stand-in holding that sequence."""
    transformers = pytest.importorskip("transformers")

    class Stub:
        full_image_sequence = "\n\n<boi>" + "<img>" * 16 + "<eoi>\n\n"
    for size in [(896, 896), (300, 1000), (600, 4000)]:
        row = I.image_row(_spec({}), size)
        text = transformers.Gemma3Processor.replace_image_token(
            Stub(), {"num_crops": [row.tiles - 1]}, 0)
        assert text.count("<img>") == row.tokens and text.count("<boi>") == row.tiles


def test_verify_with_pan_and_scan_agrees(tmp_path, capsys):
    """--verify --pan-and-scan: transformers' Gemma3ForConditionalGeneration runs the
    original images and their crops (pixel_values of 3 + 5 images) with 128 placeholders
    (hand: 896×2000 gives 2 crops, 3000×500 gives 4, (3 + 5)·16), and agrees by component;
    the processor line says pan-and-scan is on."""
    pytest.importorskip("transformers")
    path = str(write_config(tmp_path, GEMMA3))
    args = ("--config", path, "--verify", "--ctx", "600", "--image", "896x2000", "--image",
            "3000x500", "--pan-and-scan")
    code, out, err = run(capsys, *args)
    assert code == 0, err
    head = out.split("\n\n")[0]
    assert "processor:     set by --pan-and-scan: do_pan_and_scan true, " \
           "pan_and_scan_min_crop_size 256, pan_and_scan_max_num_crops 4" in head
    assert "2 images: 128 image tokens" in head
    code, out, err = run(capsys, *args, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    w = d["cross_check"]["with_images"]
    assert w["agrees"] and w["image_tokens"] == 128
    assert w["inputs"]["pixel_values"] == [8, 3, 112, 112]
    assert d["vision"]["processor"]["settings"]["do_pan_and_scan"] is True


def test_processor_file_turns_it_on(tmp_path, capsys):
    """--processor with do_pan_and_scan true and a minimum crop of 100: 300×1000 gives 3
    crops (1000/300 rounds to 3, 1000 // 100 = 10), 4·16 tokens; the line names the file."""
    path = str(write_config(tmp_path, GEMMA3))
    pre = tmp_path / "preprocessor_config.json"
    pre.write_text(json.dumps({"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 100,
                               "size": {"height": 112, "width": 112}, "image_seq_length": 16}))
    code, out, err = run(capsys, "--config", path, "--no-verify", "--image", "300x1000",
                         "--processor", str(pre), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["workload"]["image_tokens"] == 64
    assert d["vision"]["processor"] == {"source": str(pre), "settings": {
        "do_pan_and_scan": True, "pan_and_scan_min_crop_size": 100,
        "pan_and_scan_max_num_crops": 4, "pan_and_scan_min_ratio_to_activate": 1.2}}
    code, out, err = run(capsys, "--config", path, "--no-verify", "--image", "300x1000",
                         "--processor", str(pre))
    assert code == 0 and "112×112 and 3 crops" in out  # the images table
    code, out, err = run(capsys, "--config", path, "--no-verify", "--image", "300x1000")
    assert code == 0
    assert "processor:     assumed (config.json does not carry them): do_pan_and_scan false" \
        in out.split("\n\n")[0]


def test_pan_and_scan_refused_elsewhere(tmp_path, capsys):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, CONFIGS["llava"])),
                        "--no-verify", "--image", "448x448", "--pan-and-scan",
                        expected="Gemma 3's image processor")
    refused_in_one_line(capsys, "gpt2-small", "--pan-and-scan", expected="vision-language")
    refused_in_one_line(capsys, "serve", "gpt2-small", "--gpu", "H100", "--pan-and-scan",
                        expected="vision-language")


def test_serve_profiles_vllms_probe(tmp_path, capsys):
    """vLLM profiles Gemma 3 with a 50·max_num_crops × 50 image (gemma3_mm.py): 200×50 at
    the default minimum crop 256 gets no crops (a 50-pixel side is below it): 16 tokens,
    while an image with all 4 crops carries (1 + 4)·16 = 80, 64 unprofiled. At a minimum
    crop of 20: 200/50 = 4 crops of 50×50, 5 runs of 64 patches, 80 tokens."""
    spec = _spec({})
    t = SV.tower_terms(spec, 1, 8192, 256)
    assert (t.item_tokens, t.item_patches, t.unprofiled_tokens) == (16, 64, 64)
    t = SV.tower_terms(_spec({"pan_and_scan_min_crop_size": 20}), 1, 8192, 256)
    assert (t.item_tokens, t.item_patches, t.unprofiled_tokens) == (80, 320, 0)
    path = str(write_config(tmp_path, GEMMA3))
    code, out, err = run(capsys, "serve", "--config", path, "--gpu", "H100", "--ctx", "600",
                         "--pan-and-scan", "--format", "json")
    assert code == 0, err
    v = json.loads(out)["vision"]
    assert (v["profile_item_tokens"], v["unprofiled_image_tokens"]) == (16, 64)


def test_trained_tower_saves_each_crop(tmp_path, capsys):
    """plan --train-vision: the original and its 3 crops (300×1000 at a minimum crop of
    100) each run the tower, so autograd keeps 4 images' saves per sequence: 4 × the saves
    of the image without pan-and-scan; the per-step ones (the weights' casts) stay."""
    path = str(write_config(tmp_path, GEMMA3))
    pre = tmp_path / "preprocessor_config.json"
    pre.write_text(json.dumps({"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 100}))
    out = {}
    for extra in ((), ("--processor", str(pre))):
        code, text, err = run(capsys, "plan", "--config", path, "--gpu", "H100", "--ctx",
                              "600", "--train-vision", "--image", "300x1000", *extra,
                              "--format", "json")
        assert code == 0, err
        out[extra != ()] = json.loads(text)["vision"]
    assert out[True]["activation_bytes_per_sequence"] == \
        4 * out[False]["activation_bytes_per_sequence"]
    assert out[True]["activation_bytes_per_step"] == out[False]["activation_bytes_per_step"]


def test_the_published_file_leaves_it_off(tmp_path, capsys):
    """google/gemma-3-27b-it's preprocessor_config.json (its keys and values as published:
    the four pan-and-scan keys null, size 896², image_seq_length 256) read over Gemma 3
    27B's tower: accepted, pan-and-scan off, a 600×4000 image 256 tokens; with
    --pan-and-scan, 600×4000 gives 4 crops (4000/600 = 6.67 rounds to 7, capped at 4):
    5·256 = 1,280 tokens."""
    from test_vision_published import GEMMA_3_27B
    published = {"do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None,
                 "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
                 "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 256,
                 "image_std": [0.5, 0.5, 0.5], "pan_and_scan_max_num_crops": None,
                 "pan_and_scan_min_crop_size": None,
                 "pan_and_scan_min_ratio_to_activate": None,
                 "processor_class": "Gemma3Processor", "resample": 2,
                 "rescale_factor": 0.00392156862745098, "size": {"height": 896, "width": 896}}
    path = str(write_config(tmp_path, GEMMA_3_27B))
    pre = tmp_path / "preprocessor_config.json"
    pre.write_text(json.dumps(published))
    tokens = {}
    for extra in ((), ("--pan-and-scan",)):
        code, out, err = run(capsys, "--config", path, "--no-verify", "--image", "600x4000",
                             "--ctx", "2048", "--processor", str(pre), *extra,
                             "--format", "json")
        assert code == 0, err
        tokens[bool(extra)] = json.loads(out)["workload"]["image_tokens"]
    assert tokens == {False: 256, True: 1280}


def test_the_flag_over_a_file_is_said(tmp_path, capsys):
    """--pan-and-scan over a file that says do_pan_and_scan false: on (300×1000: 3 crops,
    4·16 tokens), and the processor line names both."""
    path = str(write_config(tmp_path, GEMMA3))
    pre = tmp_path / "preprocessor_config.json"
    pre.write_text(json.dumps({"do_pan_and_scan": False}))
    code, out, err = run(capsys, "--config", path, "--no-verify", "--image", "300x1000",
                         "--processor", str(pre), "--pan-and-scan")
    assert code == 0, err
    head = out.split("\n\n")[0]
    assert f"processor:     read from {pre}: do_pan_and_scan true" in head
    assert "; --pan-and-scan over it" in head and "64 image tokens" in head
