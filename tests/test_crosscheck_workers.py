"""How the cross-check's counters are run (issue 12) changes no count.

fvcore in a forked worker with the tracer's source locations off, against fvcore run in
this process as before; FlopCounterMode and the op counter on one dispatch hop, against
the two stacked as separate modes; the worker's plumbing (results, exceptions, a worker
that dies)."""
import os
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accounting import ModelConfig, get_preset
from accounting import fork
from accounting.crosscheck.dispatch import OpCounter, counting
from accounting.crosscheck.measure import build_model, measure
from test_architectures import variant

SMALL = ModelConfig(vocab_size=50, context_length=16, num_layers=2, d_model=32, num_heads=4,
                    d_ff=40)
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")


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
    from accounting.hf_config import translate
    hf = translate(CONFIGS[name], "t", name)
    a = analyze(hf.config, 8, 2, "train")
    forked = cross_check(a, hf=hf)
    monkeypatch.setenv("ACCOUNTING_WORKERS", "0")
    alone = cross_check(a, hf=hf)
    assert forked.hf is not None and forked.agrees
    assert forked.to_dict() == alone.to_dict()
