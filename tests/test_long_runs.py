"""No endless run (issue 32): the many-GPU plan's work grows with the layer count, not its
square, and a long --search says how far it is on stderr.

Before the fix ModelConfig.layer_kinds built every layer's LayerKind again at each index
(1,555,400 LayerKinds for a 200-layer, 8-GPU --search; 1,000 layers on 64 GPUs took 202 s),
and Ledger.group_of scanned every group's layers per call. Counted here, not timed: a count
does not depend on how loaded the machine is.
"""
from __future__ import annotations

import contextlib
import io

import pytest

import accounting.architecture.config as config_module
from accounting.cli.main import main
from accounting.ledger.ledger import ledger
from accounting.runtime.progress import Ticker
from accounting.architecture.config import ModelConfig


def _plan(layers: int, gpus: int) -> list[str]:
    return ["plan", "--vocab-size", "100", "--context-length", "64", "--num-layers", str(layers),
            "--d-model", "64", "--num-heads", "4", "--gpus", str(gpus), "--search", "--gpu", "H100"]


def test_a_search_builds_each_layers_kind_once(monkeypatch):
    built = []

    class Counting(config_module.LayerKind):
        def __init__(self, *a, **k):
            built.append(1)
            super().__init__(*a, **k)
    monkeypatch.setattr(config_module, "LayerKind", Counting)
    L = 200
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(_plan(L, 8)) == 0
    # one tuple of L kinds per config the run makes (the user's one): was 1,555,400
    assert 0 < len(built) <= 2 * L


def test_layer_kinds_is_the_same_tuple_each_time_and_replace_recomputes_it():
    c = ModelConfig(vocab_size=10, context_length=8, num_layers=4, d_model=8, num_heads=2,
                    d_ff=16, sliding_window=2, layer_types=("local", "global") * 2)
    assert c.layer_kinds is c.layer_kinds
    assert [k.local for k in c.layer_kinds] == [True, False, True, False]
    d = c.with_overrides(layer_types=("global",) * 4)
    assert [k.local for k in d.layer_kinds] == [False] * 4  # not the first config's cache
    assert c == ModelConfig(**{f: getattr(c, f) for f in ("vocab_size", "context_length",
                                                           "num_layers", "d_model", "num_heads",
                                                           "d_ff", "sliding_window",
                                                           "layer_types")})


def test_group_of_is_a_lookup(monkeypatch):
    """Each block's kind symbol, for alternating kinds: the groups' layers as written."""
    c = ModelConfig(vocab_size=10, context_length=8, num_layers=6, d_model=8, num_heads=2,
                    d_ff=16, sliding_window=2, layer_types=("local", "global") * 3)
    lg = ledger(c)
    symbols = [lg.group_of(i) for i in range(6)]
    assert symbols[0::2] == [symbols[0]] * 3 and symbols[1::2] == [symbols[1]] * 3
    assert symbols[0] != symbols[1]
    assert {s: tuple(layers) for s, layers in lg.groups} == {
        symbols[0]: (0, 2, 4), symbols[1]: (1, 3, 5)}
    with pytest.raises(IndexError):
        lg.group_of(6)


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_ticker_is_silent_at_first_then_says_how_far_every_few_seconds():
    clock, lines = _Clock(), []
    t = Ticker("plan --search", 28, "(tp, pp) pairs planned", quiet_s=2.0, every_s=2.0,
               clock=clock, write=lines.append)
    for done, at in enumerate((0.0, 0.5, 1.9)):
        clock.now = 100.0 + at
        t(done)
    assert lines == []  # a quick run prints nothing
    clock.now = 102.0
    t(3)
    clock.now = 103.0
    t(4)  # within 2 s of the last line: nothing
    clock.now = 104.5
    t(5)
    assert lines == ["[plan --search] 3/28 (tp, pp) pairs planned, 2 s",
                     "[plan --search] 5/28 (tp, pp) pairs planned, 4 s"]


def test_search_reports_each_pair(monkeypatch):
    from accounting.planning.parallel import search as S
    calls = []
    real = S.search

    def spy(*a, **k):
        progress = k["progress"]
        k["progress"] = lambda done, total: (calls.append((done, total)), progress(done, total))
        return real(*a, **k)
    monkeypatch.setattr("accounting.cli.plan_parallel.search", spy)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(_plan(4, 8)) == 0
    # 8 GPUs: tp in 1, 2, 4, 8 and pp dividing 8/tp: 4 + 3 + 2 + 1 = 10 pairs, each
    # reported as it starts (and again before each of its layouts)
    assert sorted(set(calls)) == [(i, 10) for i in range(10)] and calls == sorted(calls)


def _zero1_by_scanning(sizes, d):
    """torch's ZeroRedundancyOptimizer._partition_parameters as written there: for each
    tensor, largest first, the rank of least load (the first on a tie), by a scan."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)
    load, owned = [0] * d, [[] for _ in range(d)]
    for i in order:
        r = load.index(min(load))
        owned[r].append(i)
        load[r] += sizes[i]
    return owned


def test_zero1_partition_is_torchs_without_the_scan():
    import random
    from accounting.planning.parallel.states import zero1_partition
    rng = random.Random(3)
    for _ in range(200):
        sizes = [rng.choice((1, 7, 64, 64, 4096, rng.randint(1, 10**6)))
                 for _ in range(rng.randint(0, 40))]
        d = rng.randint(1, 50)
        assert zero1_partition(sizes, d) == _zero1_by_scanning(sizes, d)
