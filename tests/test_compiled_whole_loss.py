"""torchtitan's compiled loss (issue 44): `training.compile` compiles cross_entropy_loss
(torchtitan components/loss.py build_cross_entropy_loss, since bbb1b61 of 2025-04-02; at
e7c0cae its body is F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))),
and --compile-components, the flag that names it.

Expected values: measured here, on the CPU, with that body under torch.compile (inductor):
the tensors its graph saves (saved-tensor hooks) and the buffers its forward and backward
write (inductor's output code, torch._inductor.utils.run_and_get_code), at two shapes, and
under loss_parallel on one TP rank of 4 of the fake process group
(tests/titan_compiled_loss_measure.py); the
eager body measured the same way; hand algebra from Llama 3.2 1B's config.json (V 128,256)
for the plans."""
import json
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from accounting.planning import compile_components as CC  # noqa: E402
from accounting.planning import loss_memory as LM  # noqa: E402
from accounting.planning.parallel.stacks import STACKS  # noqa: E402
from cli_run import refused_in_one_line, run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def cross_entropy_loss(pred, labels):  # torchtitan components/loss.py at e7c0cae, verbatim
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


_ALLOC = re.compile(r"empty_strided_cpu\(\(([^)]*)\), \([^)]*\), torch\.(\w+)\)")


def _written(code: str) -> list[int]:
    """The bytes of each buffer a graph's output code allocates (empty_strided_cpu calls)."""
    out = []
    for shape, dtype in _ALLOC.findall(code):
        n = 1
        for d in filter(None, (s.strip() for s in shape.split(","))):
            n *= int(d)
        out.append(n * torch.empty((), dtype=getattr(torch, dtype)).element_size())
    return out


def _measure(fn, B, T, V):
    """(bytes saved for the backward, excluding 0-dim scalars; whether pred itself is
    saved; the step's output code)."""
    g = torch.Generator().manual_seed(0)
    pred = torch.randn(B, T, V, generator=g).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, V, (B, T), generator=g)
    seen, own = {}, []

    def pack(t):
        if t.dim():
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            own.append(t.untyped_storage().data_ptr() == pred.untyped_storage().data_ptr())
        return t

    def step():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = fn(pred, labels)
        loss.backward()
    from torch._inductor.utils import run_and_get_code
    codes = run_and_get_code(step)[1] if fn is not cross_entropy_loss else (step(), [])[1]
    return sum(seen.values()), any(own), codes


@pytest.mark.slow  # inductor compiles C++ kernels at each shape: ~10 s
@pytest.mark.parametrize("B,T,V", [(2, 64, 4096), (1, 48, 3000)])
def test_the_compiled_loss_is_the_rule(B, T, V):
    torch._dynamo.reset()
    eager, _, _ = _measure(cross_entropy_loss, B, T, V)
    compiled, saves_pred, codes = _measure(torch.compile(cross_entropy_loss), B, T, V)
    # eager: the fp32 log-probabilities and the targets (a view of labels); compiled: pred
    # itself in bf16 (its own storage: `del pred` frees nothing), the targets, and two fp32
    # numbers a row (the max and the log-sum-exp)
    assert eager == 4 * B * T * V + 8 * B * T
    assert compiled == 2 * B * T * V + 8 * B * T + 2 * 4 * B * T and saves_pred
    forward, backward = codes  # the forward's graph, then the backward's
    assert max(_written(forward)) < B * T * V  # no B·T·V buffer: the upcast is fused
    # the backward writes pred's gradient in bf16 and one fp32 number a row
    assert sorted(_written(backward)) == [4 * B * T, 2 * B * T * V]
    rule = LM.compiled_whole(4, 2)  # the eager ledger's fp32 log-softmax, bf16 logits
    v = {"B": B, "T": T, "V": V}
    assert rule.kept.evaluate(v) == compiled - eager
    assert rule.backward.evaluate(v) == sum(_written(backward))


def test_each_stack_compiles_the_loss_by_default():
    # torchtitan's CompileConfig.components default ["model", "loss"] (config/configs.py at
    # b5bcd76; training.compile compiled the loss from bbb1b61); torchtune's recipes'
    # compile: compile_model and compile_loss (training/_compile.py at 0.6.1)
    assert STACKS["torchtitan"].compile_components == ("model", "loss")
    assert STACKS["torch"].compile_components == ("model", "loss")
    assert STACKS["torchtitan"].compiles_standard_loss
    assert not STACKS["torch"].compiles_standard_loss  # the recipe drops it: eager
    assert CC.parse("model") == {"model"} and CC.parse(" model , loss ") == {"model", "loss"}


_TITAN = ("plan", "meta-llama/Llama-3.2-1B", "--stack", "torchtitan", "--gpus", "8", "--fsdp",
          "--batch", "16", "--micro-batch", "2", "--ctx", "4096", "--recompute", "full",
          "--compile", "--format", "json")
START = "start of the backward pass (the loss's backward)"


def _moments(capsys, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    d = json.loads(out)
    return d, {m["name"]: m["bytes"] for st in d["stages"] for m in st["moments"]}


def test_torchtitan_compiles_its_loss_by_default(capsys):
    # by hand at B 2, T 4,096, V 128,256: eager, the loss's backward adds two fp32
    # gradients (2·4·B·T·V) to the fp32 log-probabilities its ledger keeps; compiled, the
    # bf16 logits replace them (2·B·T·V − 4·B·T·V + 8·B·T) and the backward adds one bf16
    # gradient and a fp32 number a row (2·B·T·V + 4·B·T). Before: the loss ran eager
    B, T, V = 2, 4096, 128256
    _, default = _moments(capsys, *_TITAN)
    _, both = _moments(capsys, *_TITAN, "--compile-components", "model,loss")
    _, model = _moments(capsys, *_TITAN, "--compile-components", "model")
    assert default == both
    assert model[START] - both[START] == 2 * 4 * B * T * V - (
        2 * B * T * V - 4 * B * T * V + 8 * B * T + 2 * B * T * V + 4 * B * T)


@lru_cache(maxsize=1)
def _loss_parallel_measured() -> list:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    run_ = subprocess.run([sys.executable, str(ROOT / "tests" / "titan_compiled_loss_measure.py")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path}, cwd=ROOT)
    assert run_.returncode == 0, run_.stderr[-2000:]
    return json.loads(run_.stdout)


@pytest.mark.slow  # a fresh interpreter on the fake process group, two compiles: ~25 s
def test_the_compiled_loss_parallel_is_the_rule():
    # measured (tests/titan_compiled_loss_measure.py: one TP rank of 4, inductor's output
    # code replayed), at two shapes, in units of the rank's logits, e = B·T·V/tp elements
    from accounting.planning.parallel import titan_tp as TT
    rule = TT.compiled_loss_parallel(STACKS["torchtitan"], 4, True)
    assert rule is not None and TT.compiled_loss_parallel(STACKS["torchtitan"], 4, False) is None
    for m in _loss_parallel_measured():
        B, T, _ = m["shape"]
        e = m["logits_fp32"] // 4
        # saved: the fp32 log-probabilities (the eager ledger's row) and a bool a row
        assert m["saved"] == sorted([4 * e, B * T])
        # the forward: the log-probabilities and one fp32 temporary at once, and per-row
        # numbers (not planned: under a tenth of e here); the bf16 logits are its input
        assert 0 <= m["forward_peak"] - (4 + rule.temporary) * e < e // 10
        assert rule.logits == 2  # the input: bf16 logits
        # the backward: one buffer, the logits' bf16 gradient
        assert m["backward_buffers"] == [rule.backward * e] == [2 * e]


def test_under_tp_the_compiled_loss_parallel_rule_is_planned(capsys):
    # by hand at TP 2 (⌈V/tp⌉ 64,128), B 2, T 4,096, e = B·T·⌈V/tp⌉: eager, the loss's
    # backward adds three fp32 temporaries (12·e); compiled, one bf16 gradient (2·e); its
    # forward's end adds the bf16 logits and one fp32 temporary (6·e) to what both hold
    e = 2 * 4096 * (128256 // 2)
    argv = list(_TITAN[:-2]) + ["--tp", "2", "--sp"]
    _, default = _moments(capsys, *argv, "--format", "json")
    _, model = _moments(capsys, *argv, "--compile-components", "model", "--format", "json")
    end = "end of the forward pass (the compiled loss)"
    assert model[START] - default[START] == 12 * e - 2 * e
    assert default[end] - default[START] == 6 * e - 2 * e and end not in model
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "the compiled loss under loss_parallel" in out


def test_the_torch_stack_keeps_torchtune_behaviour():
    # one GPU, --loss chunked: the default compiles the chunked loss (torchtune's
    # compile_loss), `model` leaves it eager: the same region as without --compile
    from accounting.planning.plan import plan
    args, kw = ("meta-llama/Llama-3.2-1B", 1024, 2), dict(loss="chunked")
    region = {k: plan(*args, **kw, compile=True, compile_components=c).memory.model.loss_region
              for k, c in (("default", None), ("both", CC.parse("model,loss")),
                           ("model", CC.parse("model")))}
    eager = plan(*args, **kw).memory.model.loss_region
    assert region["default"] == region["both"] != eager
    assert region["model"] == eager


def test_the_first_screen_says_the_loss_runs_eager(capsys):
    argv = ("plan", "meta-llama/Llama-3.2-1B", "--ctx", "1024", "--loss", "chunked",
            "--recompute", "full", "--compile")
    for extra, said in (((), False), (("--compile-components", "model"), True)):
        code, out, err = run(capsys, *argv, *extra)
        assert code == 0, err
        assert ("the loss eager" in out.split("\n\n")[0]) == said


def test_many_gpus_first_screen_names_what_is_compiled(capsys):
    # torchtitan's own setting (CompileConfig.components) read back from the first screen and
    # the JSON: its default compiles the loss too; `model` alone leaves the loss eager
    argv = tuple(a for a in _TITAN if a not in ("--format", "json"))
    for extra, row, compiled in (((), "the blocks and the loss", True),
                                 (("--compile-components", "model"),
                                  "the blocks; the loss runs eagerly", False)):
        code, out, err = run(capsys, *argv, *extra)
        assert code == 0, err
        first = out.split("\n\n")[0]
        assert re.search(r"^torch\.compile +" + re.escape(row) + "$", first, re.M), first
        assert "torchtitan: torchtitan" not in first  # the stack's name said once
        d, _ = _moments(capsys, *_TITAN, *extra)
        assert d["compile"] is True and d["compile_loss"] is compiled


@pytest.mark.parametrize("extra,expected", [
    ((), "give --compile with it"),
    (("--compile", "--compile-components", "loss"), "takes model or model,loss"),
    (("--compile", "--compile-components", "model,loss,optimizer"), "takes model or model,loss"),
])
def test_bad_compile_components_are_refused_in_one_line(capsys, extra, expected):
    flags = extra if extra else ("--compile-components", "model")
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.2-1B", *flags, expected=expected)
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.2-1B", "--gpus", "8", "--fsdp",
                        *flags, expected=expected)


def test_search_refuses_compile_components(capsys):
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.2-1B", "--gpus", "8", "--search",
                        "--gpu", "H100", "--compile", "--compile-components", "model",
                        expected="leave it out with --search")


def test_many_gpus_leave_the_chunked_loss_eager_with_model_alone(capsys):
    # --stack torch on 8 GPUs, --loss chunked: `model` leaves torchtune's chunked loss eager.
    # By hand (Llama-3.2-1B's V 128,256; B 2, T 4,096, 8 chunks: T_c 512; bf16 logits under
    # autocast), eager against compiled at the forward's end: the float32 log-softmax and
    # the last chunk's float32 copy, less the two float32 numbers a token,
    # 4·B·T·V + 4·B·T_c·V − 8·B·T
    B, T, Tc, V = 2, 4096, 512, 128256
    argv = ("plan", "meta-llama/Llama-3.2-1B", "--gpus", "8", "--fsdp", "--batch", "16",
            "--micro-batch", "2", "--ctx", "4096", "--loss", "chunked", "--recompute", "full",
            "--compile", "--format", "json")
    _, default = _moments(capsys, *argv)
    _, model = _moments(capsys, *argv, "--compile-components", "model")
    end = "end of the forward pass (--loss chunked)"
    assert model[end] - default[end] == 4 * B * T * V + 4 * B * Tc * V - 8 * B * T


def test_under_pp_the_saved_logits_are_the_fwd_cache_s(capsys):
    # under PP torch's pipelining keeps the last stage's output, the bf16 logits, in its
    # fwd_cache (pipeline_buffers.py), counted there: the compiled loss's saved pred is that
    # storage, not counted twice. By hand at the loss's backward, eager minus compiled:
    # 2·4·B·T·V − (−4·B·T·V + 8·B·T + 2·B·T·V + 4·B·T) = 10·B·T·V − 12·B·T
    B, T, V = 2, 4096, 128256
    argv = [a if a != "8" else "4" for a in _TITAN[:-2]] + ["--pp", "2", "--format", "json"]
    _, default = _moments(capsys, *argv)
    _, model = _moments(capsys, *argv, "--compile-components", "model")
    assert model[START] - default[START] == 10 * B * T * V - 12 * B * T
