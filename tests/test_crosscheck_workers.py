"""How the cross-check's counters are run (issue 12) changes no count.

fvcore in a forked worker with the tracer's source locations off, against fvcore run in
this process as before; FlopCounterMode and the op counter on one dispatch hop, against
the two stacked as separate modes; the worker's plumbing (results, exceptions, a worker
that dies)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accounting import ModelConfig, get_preset
from accounting.runtime import fork
from accounting.crosscheck.dispatch import OpCounter, counting
from accounting.crosscheck.measure import build_model, measure
from test_architectures import variant

SMALL = ModelConfig(vocab_size=50, context_length=16, num_layers=2, d_model=32, num_heads=4,
                    d_ff=40)
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
ROOT = Path(__file__).resolve().parent.parent


def fresh_python(*args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """`python *args` in a fresh interpreter importing this checkout, bounded by a timeout;
    env adds variables (None removes one)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, timeout=120,
                          env={k: v for k, v in full.items() if v is not None}, **kwargs)


@needs_fork
@pytest.mark.parametrize("config,seq,phase", [
    (SMALL, 8, "train"),
    (get_preset("gpt2-small"), 1024, "forward"),
    (get_preset("openai-community/gpt2"), 64, "train"),  # biases, LayerNorm, tied head
    (get_preset("Qwen/Qwen3-0.6B").with_overrides(num_layers=2), 32, "forward"),  # GQA, QK-norm
])
def test_worker_and_in_process_measure_the_same(config, seq, phase):
    """Every field of the Measurement (the stage timings excepted) is equal."""
    a = measure(config, seq, 2, phase, parallel=True)
    b = measure(config, seq, 2, phase, parallel=False)
    assert a.fvcore_macs is not None and a.ops and a.einsum_calls
    assert a == b
    assert "wait" in a.seconds and "wait" not in b.seconds


def test_one_dispatch_hop_counts_what_two_modes_count():
    model = build_model(SMALL, 12)
    ids = torch.zeros((3, 12), dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fcm, OpCounter(model) as counter:
        model(ids).sum().backward()
    two = (fcm.get_flop_counts(), counter.counts())
    model.zero_grad(set_to_none=True)
    with counting(model) as (fcm, counter):
        model(ids).sum().backward()
    one = (fcm.get_flop_counts(), counter.counts())
    model.zero_grad(set_to_none=True)
    assert one[0] == two[0] and one[0]["Global"]  # FlopCounterMode's own counts, every module
    assert sorted(one[1], key=repr) == sorted(two[1], key=repr)


def _nodes(model, ids):
    from fvcore.nn.jit_analysis import _get_scoped_trace_graph
    from fvcore.nn import FlopCountAnalysis
    aliases = FlopCountAnalysis(model, (ids,))._aliases
    with torch.no_grad():
        graph = _get_scoped_trace_graph(model, (ids,), aliases)
    return [(n.kind(), n.scopeName(), tuple(str(o.type()) for o in n.outputs()),
             tuple(i.debugName() for i in n.inputs())) for n in graph.nodes()]


def _trace_twice(config, seq):
    from accounting.crosscheck.metakernels import use_cpp_meta_kernels
    from accounting.crosscheck.tracer import skip_source_locations
    model = build_model(config, seq)
    ids = torch.zeros((2, seq), dtype=torch.long, device="meta")
    before = _nodes(model, ids)
    switched = skip_source_locations()
    python_kernels = use_cpp_meta_kernels()
    return switched, python_kernels, before, _nodes(model, ids)


@needs_fork
@pytest.mark.parametrize("config,seq", [
    (get_preset("gpt2-small").with_overrides(num_layers=2), 64),
    (get_preset("openai-community/gpt2").with_overrides(num_layers=2), 64),
    (variant("moe_deepseek"), 8), (variant("mla_window_moe"), 8), (variant("window_sdpa"), 8),
])
def test_worker_speedups_same_graph(config, seq):
    """In a throwaway child (the switches cannot be undone): fvcore's traced graph, every
    node's kind, scope, output types (shapes, dtypes, strides) and inputs, is the same with
    the tracer's source locations off and torch's C++ meta kernels."""
    with fork.Forked(_trace_twice, config, seq) as child:
        switched, python_kernels, before, after = child.result()
    assert switched, "torch's tracer::setRecordSourceLocation was not found"
    assert python_kernels > 0  # aten.where.self and others keep their Python meta kernel
    assert len(before) > 100 and before == after


def _measure_with_cpp_meta(config, seq, batch, phase):
    from accounting.crosscheck.metakernels import use_cpp_meta_kernels
    use_cpp_meta_kernels()
    return measure(config, seq, batch, phase, parallel=False)


@needs_fork
@pytest.mark.parametrize("name,phase", [
    ("cs336", "train"), ("gpt2", "train"), ("window_sdpa", "train"), ("moe_deepseek", "train"),
    ("moe_capacity", "train"), ("mla_q_lora_sdpa", "train"), ("qwen3", "forward"),
])
def test_every_counter_counts_the_same_on_cpp_meta_kernels(name, phase):
    """What the report's pool workers run: the whole measurement (fvcore, FlopCounterMode,
    the op counter with its zero-FLOP operator calls, forward and backward) in a child on
    the C++ meta kernels, against this process on torch's own."""
    config = variant(name)
    with fork.Forked(_measure_with_cpp_meta, config, 8, 2, phase) as child:
        fast = child.result()
    assert fast == measure(config, 8, 2, phase, parallel=False)


def _fails():
    raise ValueError("raised in the worker")


def _dies():
    os._exit(3)


@needs_fork
def test_worker_results_exceptions_and_deaths():
    with fork.Forked(divmod, 17, 5) as child:
        assert child.result() == (3, 2)
    with fork.Forked(_fails) as child, pytest.raises(ValueError, match="raised in the worker") as e:
        child.result()
    assert "_fails" in "".join(e.value.__notes__)  # the child's traceback, as a note
    with fork.Forked(_dies) as child, pytest.raises(RuntimeError, match="without a result"):
        child.result()


@needs_fork
def test_a_worker_forked_after_cpu_work_runs_cpu_ops():
    """A parent that ran a CPU matmul (torch's OpenMP pool started) forks a worker that runs
    one too, as a notebook that computed something and then cross-checks a MoE config does
    (transformers' shrunk experts run on the CPU in the worker). Before fork.single_threaded
    the child waited forever; a fresh interpreter, bounded by a timeout."""
    script = ("import torch; from accounting.runtime import fork\n"
              "torch.set_num_threads(2)\n"
              "def work():\n    a = torch.ones(256, 256); return int((a @ a).sum())\n"
              "assert work() == 256 ** 3\n"
              "with fork.Forked(work) as child:\n    print(child.result())\n")
    r = fresh_python("-c", script, text=True)
    assert (r.returncode, r.stdout) == (0, f"{256 ** 3}\n"), r.stderr[-500:]


def _two_then_fails():
    yield 1
    yield 2
    raise ValueError("raised after two items")


def _cleans_up(path):
    try:
        yield "started"
        import time
        time.sleep(60)
    finally:
        Path(path).write_text("cleaned up")  # as the report's pool parent ends its pool


@needs_fork
def test_streamed_items_exceptions_and_an_early_end(tmp_path):
    import time
    with fork.Streamed(_two_then_fails) as child:
        items = iter(child)
        assert (next(items), next(items)) == (1, 2)  # each as it is yielded
        with pytest.raises(ValueError, match="after two items") as e:
            next(items)
    assert "_two_then_fails" in "".join(e.value.__notes__)
    marker = tmp_path / "marker"
    start = time.monotonic()
    with fork.Streamed(_cleans_up, str(marker)) as child:
        assert next(iter(child)) == "started"
        pid = child.pid
    # SIGTERM, not the 60 s sleep: 30 s leaves a loaded machine room and still tells them apart
    assert time.monotonic() - start < 30
    assert marker.read_text() == "cleaned up"  # the generator's finally ran in the child
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # waited for: no zombie left


@needs_fork
def test_a_child_never_returns_into_its_parents_code():
    """A forked child shares its parent's stack: an exception that escaped the child's own
    code ran the parent's code on in a second process (seen in the suite: a pytest worker
    cloned itself and ran tests twice). The parent's SIGTERM, sent as it leaves the block,
    raised SystemExit in the child while it was ending. Here every signal.signal call in
    the child is made slow, so the SIGTERM lands inside one; a fresh interpreter counts
    which processes reach the end of the script."""
    script = ("import os, signal, time; from accounting.runtime import fork\n"
              "parent = os.getpid(); real = signal.signal\n"
              "def slow(*a):\n"
              "    if os.getpid() != parent: time.sleep(0.05)\n"
              "    return real(*a)\n"
              "signal.signal = slow\n"
              "for _ in range(5):\n"
              "    try:  # as pytest catches a test's SystemExit and goes on\n"
              "        with fork.Forked(divmod, 17, 5) as child:\n"
              "            assert child.result() == (3, 2)\n"
              "        with fork.Streamed(iter, (1, 2)) as child:\n"
              "            assert list(child) == [1, 2]\n"
              "    except BaseException as e:\n"
              "        print('caught', type(e).__name__, os.getpid() == parent, flush=True)\n"
              "print('end', os.getpid() == parent, flush=True)\n")
    r = fresh_python("-c", script, text=True)
    assert (r.returncode, r.stdout) == (0, "end True\n"), (r.stdout, r.stderr[-500:])


def test_workers_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("ACCOUNTING_WORKERS", "0")
    assert not fork.available()


@needs_fork
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_transformers_counter_in_a_worker_counts_the_same(name, monkeypatch):
    """transformers' model measured in a forked worker beside the tool's counters, against
    the same run with no worker at all (ACCOUNTING_WORKERS=0)."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parent))
    from hf_examples import CONFIGS
    from accounting import analyze
    from accounting.crosscheck import cross_check
    from accounting.architecture.hf_config import translate
    hf = translate(CONFIGS[name], "t", name)
    a = analyze(hf.config, 8, 2, "train")
    forked = cross_check(a, hf=hf)
    monkeypatch.setenv("ACCOUNTING_WORKERS", "0")
    alone = cross_check(a, hf=hf)
    assert forked.hf is not None and forked.agrees
    assert forked.to_dict() == alone.to_dict()


# ---- the CLI's own process (python -m accounting ... --verify) --------------------------------
def _cross_check_on_cpp_meta(a, hf):
    from accounting.crosscheck import cross_check
    from accounting.crosscheck.metakernels import use_cpp_meta_kernels
    from accounting.crosscheck.tracer import skip_source_locations
    assert use_cpp_meta_kernels() > 0 and skip_source_locations()
    return cross_check(a, hf=hf).to_dict()


@needs_fork
@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral", "qwen3", "olmo2", "mixtral",
                                  "qwen3_moe", "deepseek_v3"])
def test_the_whole_check_is_the_same_in_a_process_set_up_for_good(name, monkeypatch):
    """What `python -m accounting --config F --verify` runs since its own process is set up
    as the workers are (cli.py, measure.prepare_process): every counter, transformers' model
    (its worker is forked from that process) and its CPU experts check included. A child
    switched to the C++ meta kernels and no source locations, against this process on
    torch's own, every field of the result."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parent))
    from hf_examples import CONFIGS
    from hf_moe_examples import CONFIGS as MOE
    from accounting import analyze
    from accounting.crosscheck import cross_check
    from accounting.architecture.hf_config import translate
    monkeypatch.setenv("ACCOUNTING_WORKERS", "0")  # one process each side: nothing nested
    hf = translate({**CONFIGS, **MOE}[name], "t", name)
    a = analyze(hf.config, 8, 2, "train")
    with fork.Forked(_cross_check_on_cpp_meta, a, hf) as child:
        fast = child.result()
    plain = cross_check(a, hf=hf).to_dict()
    assert plain["agrees"] and plain["transformers"] is not None
    # the MoE note on the shrunk CPU runs gives their wall time, "(0.8 s)": not a count
    wall = re.compile(r"\(\d+\.\d s\)")
    assert wall.sub("", json.dumps(fast)) == wall.sub("", json.dumps(plain))


def test_a_callers_process_is_never_set_up_for_good(capsys):
    """main(argv) from a caller (a notebook, these tests) leaves torch as it was: only the
    process the CLI owns (argv None) takes the C++ meta kernels and the tracer switch."""
    from accounting.cli.main import main
    from accounting.crosscheck import metakernels, tracer
    kept, callback = list(metakernels._kept), tracer._callback
    assert main(["gpt2-small", "--num-layers", "2", "--ctx", "16", "--verify"]) == 0
    assert metakernels._kept == kept and tracer._callback is callback
    capsys.readouterr()


def test_python_m_accounting_ends_fast_with_every_byte(tmp_path):
    """The verified run as a process ends with os._exit (safe_io.end_process): its stdout,
    a file written with -o and its exit status are those of main() run in this process."""
    from accounting.cli.main import main
    argv = ["gpt2-small", "--num-layers", "2", "--ctx", "16", "--pass", "train", "--verify"]
    r = fresh_python("-m", "accounting", *argv, env={"COLUMNS": None}, cwd=tmp_path)
    f = fresh_python("-m", "accounting", *argv, "-o", "out.txt", env={"COLUMNS": None},
                     cwd=tmp_path)
    mine = tmp_path / "mine.txt"
    assert main([*argv, "-o", str(mine)]) == 0
    assert (r.returncode, f.returncode) == (0, 0), (r.stderr, f.stderr)
    assert r.stdout == mine.read_bytes() == (tmp_path / "out.txt").read_bytes()
    assert b"cross-check:   agrees exactly with fvcore and FlopCounterMode" in r.stdout


def test_end_process_flushes_and_keeps_the_status():
    script = ("import sys, torch; from accounting.runtime.safe_io import end_process; "
              "sys.stdout.write('x' * 100000); sys.stderr.write('done'); end_process(7)")
    r = fresh_python("-c", script, env={"PYTHONUNBUFFERED": ""})
    assert (r.returncode, r.stdout, r.stderr) == (7, b"x" * 100000, b"done")


@pytest.mark.parametrize("name,phase", [("llama", "train"), ("mixtral", "train"),
                                        ("gpt2", "forward")])
def test_transformers_counter_one_hop_counts_what_two_modes_count(name, phase):
    """hf_counter.measure runs FlopCounterMode and the op counter on one dispatch hop
    (dispatch.counting), as measure.py does for the tool's model: against the two stacked
    as separate modes (how it ran them before) on transformers' model, every count equal
    (checked once for all 49 model_types of tests/test_hf_default_sweep.py, forward and
    train: all equal)."""
    pytest.importorskip("transformers")
    import torch.nn.functional as F
    from hf_examples import CONFIGS
    from hf_moe_examples import CONFIGS as MOE
    from accounting.crosscheck import hf_counter
    from accounting.crosscheck.dispatch import BACKWARD
    from accounting.crosscheck.measure import _totals
    from accounting.ledger.records import PHASES
    data = {**CONFIGS, **MOE}[name]
    one = hf_counter.measure(data, 8, 2, phase)
    model = hf_counter.build(data)
    ids = torch.zeros((2, 8), dtype=torch.long, device="meta")
    root, flops = type(model).__name__, {}
    with FlopCounterMode(display=False) as fcm, OpCounter(model) as counter:
        with torch.set_grad_enabled(BACKWARD in PHASES[phase]):
            out = model(input_ids=ids, use_cache=True)
        flops["forward"] = _totals(fcm.get_flop_counts(), root)
        if BACKWARD in PHASES[phase]:
            counter.phases = {BACKWARD}
            logits = out.logits
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1)).backward()
            both = _totals(fcm.get_flop_counts(), root)
            flops[BACKWARD] = {k: v - flops["forward"].get(k, 0) for k, v in both.items()}
    assert {k: dict(v) for k, v in one.torch_flops.items()} == flops and flops["forward"]
    assert one.ops == counter.counts() and one.ops
