"""--verify with images under a training pass (issue 41): transformers' whole
AutoModelForImageTextToText on the meta device runs the forward with the images and the
cross-entropy of its logits backward, the language model trained and the tower frozen,
its projector alone trained, or both trained (requires_grad as LLaMA-Factory's and LLaVA's
recipes set it); FlopCounterMode's forward and the op counter's backward (each FLOP to the
module whose forward made its autograd node), split by transformers' module names into the
vision tower, the projector and the language model, must equal the ledger's forward and
planning/vision_flops.py's gradient records (the independent source: transformers' model,
autograd and torch's FLOP formulas)."""
import json

import pytest

from accounting import analyze
from accounting.analysis import images as I
from accounting.architecture.hf_config import translate
from accounting.crosscheck import vision_check as VC
from cli_run import run
from hf_examples import write_config
from test_vision_verify import CONFIGS, SEQ, measured
from prepared_worker import module_worker

pytest.importorskip("transformers")
hf_vision = pytest.importorskip("accounting.crosscheck.hf_vision")

PARTS = [False, "projector", True]
# transformers' whole model measured in a worker set up as the CLI's process, once per
# inputs (test_vision_verify.measured): this module's own
WORKER, _worker = module_worker()


def _check(family, trained, phase="train", sizes=("224x300", "120x90")):
    hf = translate(CONFIGS[family], "config.json", family)
    vw = I.workload(hf.vision, list(sizes), None)
    a = analyze(hf.config, SEQ, 1, phase)
    m = measured(hf.whole or hf.data, vw, SEQ, phase, trained, WORKER)
    return VC.compare(a, vw, m), m, vw, a


# every family with its projector or all of it trained; frozen (no backward in the tower:
# the language model's backward and the forward the forward-only test checks) on three
CASES = [(f, t) for f in sorted(CONFIGS) for t in PARTS[1:]] + \
    [(f, False) for f in ("qwen2_5_vl", "mistral3", "qwen3_5")]


@pytest.mark.parametrize("family, trained", CASES)
def test_training_pass_agrees_by_component(family, trained):
    """Two images of different sizes in one sequence, forward and backward: tower,
    projector and language model each equal the counters (Pixtral trained: its eager
    tower's padding and cross-image pairs, backward too, as the stated surplus)."""
    check, m, vw, a = _check(family, trained)
    assert check.agrees, check.disagreements()
    rows = {r.component: r for r in check.rows}
    if not trained:  # nothing in the tower or projector requires grad: no backward there
        assert not any(VC._under(k, VC.roots(vw)[0]) and f for k, f in m.backward.items())
    ops = VC._projector_ops(vw, VC.roots(vw)[1])
    forward = sum(f for row in vw.images for n, f in row.flops_by_op if n in ops)
    assert (rows[VC.PROJECTOR].analytic > forward) == bool(trained)


def test_projector_backward_by_hand():
    """The tiny Qwen2.5-VL (merge 2, d_v 32, d_t 64) with two images of 16×22 and 8×6
    patches: 88 + 12 = 100 merged rows of 128; the projector's forward 2·100·128·(128 + 64)
    = 4,915,200 FLOPs; trained alone (ln_q's weight before mlp.0, so both gradients of both
    matmuls) its backward twice that: the projector's row 3 × 4,915,200 = 14,745,600."""
    check, _, vw, _ = _check("qwen2_5_vl", "projector")
    assert [r.grid for r in vw.images] == [(16, 22), (8, 6)]
    rows = {r.component: r for r in check.rows}
    assert rows[VC.PROJECTOR].transformers == 3 * 2 * 100 * 128 * (128 + 64) == 14_745_600


def test_a_wrong_backward_is_named_by_component(monkeypatch):
    """A projector backward that counted the first matmul's input gradient too (LLaVA's
    linear_1 reads the frozen tower's output: only its weight's gradient runs; a ledger bug,
    simulated) disagrees in the projector row alone."""
    from accounting.ledger.builder import vision_saves_projector as VP
    monkeypatch.setattr(VP, "DIRECT", tuple(f for f in VP.DIRECT if f != "llava"))
    check, *_ = _check("llava", "projector")
    assert not check.agrees
    assert [r.component for r in check.rows if not r.agree] == [VC.PROJECTOR, VC.TOTAL]


def _cli(tmp_path, capsys, family, *argv):
    path = str(write_config(tmp_path, CONFIGS[family]))
    return run(capsys, "--config", path, "--verify", "--ctx", str(SEQ), "--image", "224x300",
               "--pass", "train", "--format", "json", *argv)


@pytest.mark.parametrize("flag, part", [((), None), (("--train-projector",), "projector"),
                                        (("--train-vision",), "tower and projector")])
def test_cli_verify_train(tmp_path, capsys, flag, part):
    """--verify --image --pass train [--train-projector | --train-vision]: exit 0, the
    whole model's rows in the JSON, the notes naming what was trained."""
    code, out, err = _cli(tmp_path, capsys, "gemma3", *flag)
    assert code == 0, err
    d = json.loads(out)["cross_check"]["with_images"]
    assert d["agrees"] and d["pass"] == "train" and (part or "frozen") in d["vision_trained"]
    note = " ".join(d["notes"])
    assert "backward" in note and (part or "frozen") in note


def test_cli_disagreement_exits_1(tmp_path, capsys, monkeypatch):
    """A simulated backward bug (the projector's first matmul's input gradient counted):
    exit 1, one line on stderr naming the projector row, no traceback."""
    from accounting.ledger.builder import vision_saves_projector as VP
    monkeypatch.setattr(VP, "DIRECT", ())
    code, out, err = _cli(tmp_path, capsys, "llava", "--train-projector")
    assert code == 1
    assert "projector: analytic" in err and "Traceback" not in err


def test_cli_train_flags_need_a_tower(capsys):
    from cli_run import refused_in_one_line
    refused_in_one_line(capsys, "gpt2-xl", "--train-projector", "--brief",
                        expected="needs a vision-language config.json")


def test_cli_train_flags_need_a_backward(tmp_path, capsys):
    """Under --pass forward nothing trains: the flag is refused in one line, naming the fix."""
    from cli_run import refused_in_one_line
    path = str(write_config(tmp_path, CONFIGS["gemma3"]))
    refused_in_one_line(capsys, "--config", path, "--image", "224x300", "--train-vision",
                        expected="give --pass train (or backward)")


@pytest.mark.slow
@pytest.mark.parametrize("trained", ["projector", True])
def test_published_qwen2_5_vl_7b_training_pass(trained):
    """The published Qwen2.5-VL-7B config.json whole (tests/test_vision_published.py), a
    448×448 image in T = 4,096, forward and backward: transformers' model and the ledger
    agree by component (the 1024×1024 image's forward is tests/test_vision_verify.py's; its
    16 window-attention windows here rather than 100 keep the run short, same ops)."""
    import test_vision_published as PUB
    hf = translate(PUB.QWEN2_5_VL_7B, "config.json", "q7")
    vw = I.workload(hf.vision, ["448x448"], None)
    a = analyze(hf.config, 4096, 1, "train")
    check = VC.compare(a, vw, measured(hf.whole or hf.data, vw, 4096, "train", trained,
                                       WORKER))
    assert check.agrees, check.disagreements()
