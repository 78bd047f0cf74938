"""--verify on a whole vision-language model with image inputs (issue 41, Must 2): for
every family the tool reads, transformers' own AutoModelForImageTextToText (meta device)
runs a forward with the images' pixel_values and placeholder tokens under FlopCounterMode,
and its FLOPs, split by transformers' module names into the vision tower, the projector
and the language model, must equal the ledger's (the independent source: transformers'
model and torch's counter; the inputs' shapes are those the processors make, checked
against the processors in the families' own test modules).
"""
import json

import pytest

from accounting import analyze
from accounting.analysis import images as I
from accounting.architecture.hf_config import translate
from accounting.crosscheck import vision_check as VC
from cli_run import run
from hf_examples import write_config

pytest.importorskip("transformers")
hf_vision = pytest.importorskip("accounting.crosscheck.hf_vision")
from prepared_worker import module_worker  # noqa: E402

# transformers' whole model built and measured in one forked worker set up as the process
# of `python -m accounting --verify --image` is (torch's C++ meta kernels: about half the
# CPU time of torch's Python ones; the counts the same, tests/test_crosscheck_workers.py),
# once per inputs: the same run is read by more than one test (a family's case and the
# tests that tamper with the ledger's side of it)
WORKER, _worker = module_worker()
_MEASURED: dict = {}


def measured(data, vw, seq, phase="forward", trained=False, worker=WORKER):
    """hf_vision.measure(data, vw, seq, 1, phase, trained), run in `worker` once per inputs."""
    key = (json.dumps(data, sort_keys=True, default=repr), repr(vw), seq, phase, repr(trained))
    if key not in _MEASURED:
        # (the HFConfig's read-only view of the file cannot be pickled: its dict, the same
        # items, which build() copies into a dict anyway)
        _MEASURED[key] = worker(hf_vision.measure, dict(data), vw, seq, 1, phase, trained)
    return _MEASURED[key]


def _configs():
    import test_vision as TV
    import test_vision_idefics3
    import test_vision_internvl
    import test_vision_mistral3
    import test_vision_onevision
    from test_hf_qwen3_5 import DENSE, MOE
    out = dict(TV.CONFIGS)
    out.update({"qwen3_5": DENSE, "qwen3_5_moe": MOE})
    out.update({"llama4": TV._llama4(), "gemma4": TV._gemma4(), "kimi_k25": TV._kimi(),
                "mistral3": test_vision_mistral3.DATA, "idefics3": test_vision_idefics3.DATA,
                "internvl": test_vision_internvl.DATA,
                "llava_onevision": test_vision_onevision.DATA})
    return out


CONFIGS = _configs()
SEQ = 600


def _check(family, sizes=("224x300", "120x90")):
    data = CONFIGS[family]
    hf = translate(data, "config.json", family)
    vw = I.workload(hf.vision, list(sizes), None)
    a = analyze(hf.config, SEQ)
    m = measured(hf.whole or hf.data, vw, SEQ)
    return VC.compare(a, vw, m), m, vw, a


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_whole_model_with_two_images_agrees_by_component(family):
    """Two images of different sizes in one sequence: tower, projector and language model
    each equal transformers' FlopCounterMode count, and the three add up to its total."""
    check, m, vw, a = _check(family)
    assert check.agrees, check.disagreements()
    rows = {r.component: r for r in check.rows}
    from accounting.crosscheck.hf_recurrent import surpluses
    # the stated surpluses (Pixtral's batch, the recurrent layers' torch paths) aside,
    # nothing is left out of the split
    stated = sum(VC.pixtral_surplus(vw)) + sum(sum(x[2].values()) for x in surpluses(a))
    assert rows[VC.TOTAL].transformers + stated == m.total
    assert rows[VC.LANGUAGE].analytic == a.matmul_flops()
    assert rows[VC.TOWER].analytic + rows[VC.PROJECTOR].analytic == vw.flops
    assert rows[VC.TOWER].transformers > 0 and rows[VC.PROJECTOR].transformers > 0


def test_pixtral_batch_surplus_by_hand():
    """Mistral 3 (image_size 224, patch 14, merge 2, 2 blocks, 2 heads of 16): 224×300 fits
    as 168×224 (floor(224/300·224) = 167, up to a multiple of 28), 12×16 patches; 120×90
    is kept, up to 140×112, 10×8 patches. The batch pads both to 12×16: 192 − 80 = 112
    padded patches, each 2·(3·14²)·32 = 37,632 FLOPs of the patch convolution; eager
    attention over the 272 patches as one sequence adds 2·192·80 = 30,720 cross-image
    pairs, 2 matmuls of 2·2·16 FLOPs each per pair, in 2 blocks."""
    check, _, vw, _ = _check("mistral3")
    assert [r.grid for r in vw.images] == [(12, 16), (10, 8)]
    assert VC.pixtral_surplus(vw) == (112 * 37_632, 30_720 * 2 * 64 * 2) \
        == (4_214_784, 7_864_320)
    assert check.checks and check.checks[0].holds
    one, _, vw1, _ = _check("mistral3", ("224x300",))  # one image: no surplus, no check
    assert VC.pixtral_surplus(vw1) == (0, 0) and not one.checks and one.agrees


def test_a_wrong_tower_count_is_named_by_component():
    """A tower count one FLOP short (a ledger bug, simulated) disagrees in the vision tower
    row alone, by -1 ... +1 as transformers sees it."""
    check, m, vw, a = _check("qwen2_5_vl")
    first = vw.images[0]
    name, f = first.flops_by_op[1]
    wrong = I.VisionWorkload(vw.spec, vw.params, vw.projector_params, (
        I.ImageRow(first.size, first.resized, first.grid, first.tokens,
                   ((first.flops_by_op[0]), (name, f - 1), *first.flops_by_op[2:]),
                   first.tiles), *vw.images[1:]), vw.pixels)
    bad = VC.compare(a, wrong, m)
    assert not bad.agrees
    assert [r.component for r in bad.rows if not r.agree] == [VC.TOWER, VC.TOTAL]
    assert "vision tower: analytic" in bad.disagreements()[0] and "+1" in bad.disagreements()[0]


def _cli(tmp_path, capsys, family, *argv):
    path = str(write_config(tmp_path, CONFIGS[family]))
    return run(capsys, "--config", path, "--verify", "--ctx", str(SEQ), *argv)


def test_cli_verify_with_an_image(tmp_path, capsys):
    """--verify --image: the whole model's table, its verdict on the first screen, exit 0;
    the JSON's cross_check.with_images holds the rows."""
    code, out, err = _cli(tmp_path, capsys, "gemma3", "--image", "448x448")
    assert code == 0, err
    head = out.split("\n\n")[0]
    assert "the whole model with the images" in head
    assert "Cross-check: the whole model with 1 image" in out
    code, out, err = _cli(tmp_path, capsys, "gemma3", "--image", "448x448", "--format", "json")
    assert code == 0, err
    d = json.loads(out)["cross_check"]["with_images"]
    assert d["agrees"] and d["image_tokens"] == 16
    assert [c["component"] for c in d["components"]] == [VC.TOWER, VC.PROJECTOR, VC.LANGUAGE,
                                                         VC.TOTAL]


def test_cli_wrong_image_tokens_exit_1(tmp_path, capsys, monkeypatch):
    """A token count the model refuses (one placeholder too many, a simulated processor-rule
    bug): transformers' placeholder check fails, said as a disagreement, exit 1, one line
    on stderr naming it."""
    real = I.image_row

    def one_more(*args, **kwargs):
        row = real(*args, **kwargs)
        return I.ImageRow(row.size, row.resized, row.grid, row.tokens + 1, row.flops_by_op,
                          row.tiles)
    monkeypatch.setattr(I, "image_row", one_more)
    code, out, err = _cli(tmp_path, capsys, "llava", "--image", "448x448")
    assert code == 1
    assert "whole model with the images: it could not run them" in err
    assert "Traceback" not in err


def test_no_room_for_the_markers_is_said_not_run(tmp_path, capsys):
    """Gemma 3's 16 image tokens at T = 16 leave no text token before them: the whole-model
    run is not made, said in its table, and the language model's check still decides
    (exit 0)."""
    path = str(write_config(tmp_path, CONFIGS["gemma3"]))
    code, out, err = run(capsys, "--config", path, "--verify", "--ctx", "16", "--images", "1",
                         "--format", "json")
    assert code == 0, err
    d = json.loads(out)["cross_check"]["with_images"]
    assert d["agrees"] and "need T ≥ 17" in d["skipped"]


def test_processor_settings_reach_the_whole_model(tmp_path):
    """InternVL with min_patches 2 and max_patches 6 read from a preprocessor_config.json:
    the tiles the tool counts are the pixel_values transformers' model runs, and agree."""
    from accounting.architecture import processor
    hf = translate(CONFIGS["internvl"], "config.json", "internvl")
    spec = processor.apply(hf.vision, {"min_patches": 2, "max_patches": 6}, "f")
    vw = I.workload(spec, ["224x300", "120x90"], None)
    assert [r.tiles for r in vw.images] != [r.tiles for r in
                                             I.workload(hf.vision, ["224x300", "120x90"],
                                                        None).images]
    a = analyze(hf.config, SEQ)
    check = VC.compare(a, vw, measured(hf.whole or hf.data, vw, SEQ))
    assert check.agrees, check.disagreements()


def test_the_triangular_solve_is_counted_in_a_fresh_process(monkeypatch):
    """Qwen3.5's gated DeltaNet layers solve triangular systems (torch.linalg.solve_triangular),
    which FlopCounterMode counts only with the formula the cross-check registers
    (triangular.py). The whole-model run registers it itself: with a registry that lacks
    it (a process where the language model's counter has not run yet) the language model
    still agrees (it was 645,120 FLOPs a layer short before)."""
    from torch.utils import flop_counter
    fresh = dict(flop_counter.flop_registry)
    for op in [op for op in fresh if "solve_triangular" in str(op)]:
        del fresh[op]
    monkeypatch.setattr(flop_counter, "flop_registry", fresh)
    hf = translate(CONFIGS["qwen3_5"], "config.json", "qwen3_5")
    vw = I.workload(hf.vision, ["64x64"], None)
    # in this process: the worker was forked with torch's whole registry
    m = hf_vision.measure(hf.whole or hf.data, vw, SEQ)
    check = VC.compare(analyze(hf.config, SEQ), vw, m)
    assert check.agrees, check.disagreements()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["QWEN2_5_VL_7B", "GEMMA_3_27B", "QWEN3_VL_30B_A3B",
                                  "LLAMA_4_SCOUT"])
def test_published_configs_at_full_size_with_a_1024_image(name):
    """The published config.json files (tests/test_vision_published.py) whole, a 1024×1024
    image in T = 4,096 (the issue's size): transformers' model and the ledger agree by
    component on the meta device."""
    import test_vision_published as PUB
    hf = translate(getattr(PUB, name), "config.json", name)
    vw = I.workload(hf.vision, ["1024x1024"], None)
    a = analyze(hf.config, 4096)
    check = VC.compare(a, vw, measured(hf.whole or hf.data, vw, 4096))
    assert check.agrees, check.disagreements()


def test_idefics3_beyond_its_real_pixels_is_said_not_run(monkeypatch):
    """Idefics3's pixel values must be real numbers (its forward finds padding tiles by
    them): past the bound the run is said not run, naming why, not a disagreement."""
    from accounting.crosscheck import _with_images
    monkeypatch.setattr(VC, "REAL_PIXELS", 5 * 3 * 56 * 56)  # five 56² tiles
    hf = translate(CONFIGS["idefics3"], "config.json", "idefics3")
    vw = I.workload(hf.vision, ["224x300"], None)  # tiles and a global one: more than 5
    assert vw.images[0].tiles > 5
    check = _with_images(analyze(hf.config, SEQ), hf, vw)
    assert check.agrees and "pixel values" in check.skipped and not check.rows


def test_without_transformers_the_run_is_said_skipped(monkeypatch):
    """No transformers: the whole-model run is not made, said, and not a disagreement."""
    import accounting.crosscheck as CC
    real = CC.find_spec
    monkeypatch.setattr(CC, "find_spec", lambda name: None if name == "transformers"
                        else real(name))
    hf = translate(CONFIGS["gemma3"], "config.json", "gemma3")
    vw = I.workload(hf.vision, ["448x448"], None)
    check = CC._with_images(analyze(hf.config, SEQ), hf, vw)
    assert check.agrees and "not installed" in check.skipped
