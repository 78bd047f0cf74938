"""Issue 23's Python API cases, one test each: a typo is refused with a ValueError or
TypeError naming the argument and its accepted values (as the docstrings list them), never
a wrong number or an AttributeError deep inside; a preset name where a config is expected
is looked up. tests/test_fuzz_api.py covers the same ground at random.
"""
from __future__ import annotations

import pytest

import accounting
from accounting import ModelConfig, analyze, flops_grid, get_preset
from accounting.planning import plan
from accounting.runtime.errors import UsageError

TINY = ModelConfig(vocab_size=100, context_length=64, num_layers=2, d_model=64, num_heads=4,
                   d_ff=128, name="tiny")


def _refused(exc_type, fn, *fragments):
    with pytest.raises(exc_type) as e:
        fn()
    for f in fragments:
        assert f in str(e.value), str(e.value)


@pytest.mark.parametrize("typo", ["Executed", "EXECUTED", "executed ", "causal", ""])
def test_matmul_flops_refuses_a_counting_it_does_not_know(typo):
    """Was: any string but 'executed' gave the useful count."""
    a = analyze(TINY, 64)
    _refused(UsageError, lambda: a.matmul_flops(typo), "counting must be one of 'executed', "
             "'useful'", repr(typo) if typo else "''")
    # the two it knows still differ as they should: useful < executed under causal masking
    assert a.matmul_flops("useful") < a.matmul_flops("executed") == a.matmul_flops()


def test_matmul_flops_refuses_a_bogus_phase():
    """Was: phase='bogus' gave 0. A phase outside the analysis' pass is refused too."""
    a = analyze(TINY, 64)
    _refused(UsageError, lambda: a.matmul_flops(phase="bogus"), "phase must be one of "
             "'forward', 'backward', 'train'")
    _refused(UsageError, lambda: a.matmul_flops(phase="backward"), "not part of this analysis' "
             "pass ('forward')")
    t = analyze(TINY, 64, phase="train")
    # train = forward + backward, and the backward pass runs twice the forward's matmul
    # FLOPs (an input and a weight gradient for every forward matmul; Kaplan et al. 2020 §2.1)
    assert t.matmul_flops(phase="forward") + t.matmul_flops(phase="backward") == t.matmul_flops()
    assert t.matmul_flops(phase="backward") == 2 * t.matmul_flops(phase="forward")


@pytest.mark.parametrize("kwargs,fragment", [
    ({"counting": "Executed"}, "counting must be one of 'executed', 'useful'"),
    ({"component": "attention_core"}, "component must be one of 'attention projections', "
                                      "'attention core', 'recurrent mixing', 'feed-forward', "
                                      "'LM head'"),
    ({"phase": "fwd"}, "phase must be one of 'forward', 'backward', 'train'"),
])
def test_flops_grid_refuses_typos(kwargs, fragment):
    """Was: counting='Executed' gave the useful count, component='attention_core' [[0]]."""
    _refused(UsageError, lambda: flops_grid(TINY, [64], **kwargs), fragment)


def test_a_preset_name_is_looked_up():
    """Was: analyze('gpt2-small', 64) ended in AttributeError ('str' object has no attribute
    'context_length'). A name is what get_preset takes: the same analysis."""
    cfg = get_preset("gpt2-small")
    assert analyze("gpt2-small", 64).matmul_flops() == analyze(cfg, 64).matmul_flops()
    assert (flops_grid("gpt2-small", [64, 128]) == flops_grid(cfg, [64, 128])).all()
    assert plan("gpt2-small", 64).flops == plan(cfg, 64).flops
    _refused(UsageError, lambda: analyze("gpt2-smal", 64), "unknown model 'gpt2-smal'",
             "gpt2-small")


@pytest.mark.parametrize("bad", [None, 5, 1.5, ["gpt2-small"], b"gpt2-small"])
def test_a_config_of_the_wrong_type_is_named(bad):
    """Was: analyze(None) ended in AttributeError deep inside."""
    _refused(TypeError, lambda: analyze(bad), "config must be a ModelConfig or a preset name")
    _refused(TypeError, lambda: flops_grid(bad, [64]), "config must be a ModelConfig")
    _refused(TypeError, lambda: plan(bad), "config must be a ModelConfig")


@pytest.mark.parametrize("kwargs,exc,fragment", [
    ({"gpu": 5}, TypeError, "gpu must be a GPU name"),
    ({"gpu": "H1000"}, UsageError, "unknown GPU 'H1000'"),
    ({"precision": "fp16"}, UsageError, "precision must be one of 'fp32', 'bf16-mixed', 'bf16'"),
    ({"scope": {}}, TypeError, "scope must be one of 'course', 'model'"),
    ({"recompute": True}, TypeError, "recompute must be one of 'none', 'full', 'selective'"),
    ({"steps": 1.5}, TypeError, "steps must be an integer"),
    ({"position": 0}, UsageError, "position must be at least 1"),
])
def test_plan_names_what_it_refuses(kwargs, exc, fragment):
    """Was: plan(cfg, gpu=5) ended in AttributeError ('int' object has no attribute
    'strip'), scope={} in 'unhashable type'."""
    _refused(exc, lambda: plan(TINY, **kwargs), fragment)


@pytest.mark.parametrize("call,fragment", [
    (lambda: analyze(TINY, "64"), "seq must be an integer"),
    (lambda: analyze(TINY, 64, batch=2.0), "batch must be an integer"),
    (lambda: analyze(TINY, 64, counting="Useful"), "counting must be one of"),
    (lambda: analyze(TINY, 64).component_flops("x"), "counting must be one of"),
    (lambda: analyze(TINY, 64).matmul_expr(component="attention"), "component must be one of"),
    (lambda: analyze(TINY, 64).crossover(1), "counting must be one of"),
    (lambda: get_preset(None), "name must be a preset name"),
    (lambda: accounting.config_from_json(5), "path must be a file path"),
])
def test_other_public_calls_name_the_argument(call, fragment):
    with pytest.raises((TypeError, ValueError)) as e:
        call()
    assert fragment in str(e.value), str(e.value)


def test_the_frames_take_a_name_or_a_list():
    pytest.importorskip("pandas")
    one = accounting.sweep("gpt2-small", [64])  # was: iterated 'g', 'p', 't', ... as presets
    assert list(one["model"].unique()) == ["gpt2-small"] and len(one) == 4
    _refused(TypeError, lambda: accounting.sweep(["gpt2-small"], "64"), "seqs must be an iterable")
    _refused(TypeError, lambda: accounting.matmul_frame(None), "config must be a ModelConfig")
    _refused(TypeError, lambda: accounting.matmul_frame(TINY, 64, include_non_matmul="yes"),
             "include_non_matmul must be True or False")
    _refused(TypeError, lambda: accounting.formula_terms_frame(TINY, "64"), "seq must be")
