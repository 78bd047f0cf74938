"""Context parallelism (--cp): the K/V exchange against torch's ring attention run on a gloo
group (accounting/distcheck/ring.py), and what each context-parallel rank holds and runs.

torch's context_parallel needs CUDA (it swaps the CUDA attention kernels); its ring
(_templated_ring_attention and its backward) is run here with the CPU flash kernel and
checked against full attention; the bytes are its own rotaters'. Expected values otherwise:
the planner at T/cp without context parallelism (a different path: no cp), hand algebra.
"""
from fractions import Fraction

import pytest

import cli_run
from accounting import get_preset
from accounting.planning.gpus import interconnect
from accounting.planning.memory import get_precision
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel import comms as C
from accounting.planning.plan import hardware

BF16 = get_precision("bf16-mixed")
LLAMA = get_preset("meta-llama/Llama-3.1-8B")


def sdpa(config):
    from dataclasses import replace
    return replace(config, attention="sdpa")


@pytest.mark.parametrize("rotate", ["ALL_GATHER", "ALL_TO_ALL"])
def test_kv_exchange_is_torchs_ring(rotate):
    ring = pytest.importorskip("accounting.distcheck.ring")
    cp, heads, seq, d_k = 4, 2, 32, 8
    ranks = ring.ring_case(cp, heads=heads, seq=seq, d_k=d_k, dtype="bfloat16", rotate=rotate)
    # the planner's collectives for one layer, one micro-batch of 1, bf16 (2 bytes); K and V
    # as the SDPA call gets them: `heads` heads of d_k
    lo = Layout(cp, cp=cp, global_batch=1)
    ours = {(c.phase, c.op): c for c in C.context_parallel(lo, 1, 1, seq, heads * d_k, 2)}
    for r in ranks:
        assert r["agrees_with_full_attention"], r["errs"]
        shard = r["kv_shard_bytes"]  # cat(k, v) of T/cp tokens: 2·T/cp·h·d_k·2 bytes
        assert shard == 2 * (seq // cp) * heads * d_k * 2

        def traffic(phase, dtype):
            # what the rank sends: an all-gather of its shard sends it to cp − 1 ranks
            # (ring: (cp − 1)/cp of the gathered output); a rotation sends it once
            return sum(b * (cp - 1) if kind == "all-gather" else b
                       for p, kind, b, dt in r["sent"] if p == phase and dt == dtype)
        fwd = ours[("forward", C.ALL_GATHER)]
        assert traffic("forward", "bfloat16") == fwd.traffic == (cp - 1) * shard
        assert traffic("backward", "bfloat16") == ours[("backward", C.ALL_GATHER)].traffic
        # the gradients of K and V: torch rotates them cp times (the last brings them home)
        # in float32 (_cp_options.convert_to_f32); the planner counts a reduce-scatter of
        # 2-byte gradients, (cp − 1)/cp of the whole: torch sends cp/(cp − 1) · 2 times that
        dkv = ours[("backward", C.REDUCE_SCATTER)].traffic
        assert traffic("backward", "float32") == Fraction(cp, cp - 1) * 2 * dkv


def _plan(config, seq, **kw):
    kw.setdefault("global_batch", kw.get("dp", 1))
    return parallel_plan(config, Layout(**kw), seq, precision=BF16,
                         hardware=hardware("H100", compute="bf16"), net=interconnect("H100"))


def test_a_context_parallel_rank_holds_and_runs_t_over_cp():
    c, T, cp = sdpa(LLAMA), 8192, 4
    with_cp = _plan(c, T, gpus=cp * 2, tp=2, cp=cp, sp=True)
    short = _plan(c, T // cp, gpus=2, tp=2, sp=True)  # one rank's T/cp tokens, no cp
    acts = {i.name: i.bytes.at(1) for i in with_cp.stages[0].items if i.activations}
    assert acts == {i.name: i.bytes.at(1) for i in short.stages[0].items if i.activations}
    # matmul FLOPs: the linear layers at T/cp tokens, the attention core's T² pairs / cp
    # (load-balanced): exactly the whole sequence's / cp
    whole = _plan(c, T, gpus=2, tp=2, sp=True)
    f, w = with_cp.stages[0].flops, whole.stages[0].flops
    assert (f.forward, f.backward) == (w.forward // cp, w.backward // cp)
    # the parameters are the same on every cp rank; AdamW state sharded over dp·cp with ZeRO-1
    z = _plan(c, T, gpus=cp * 2, tp=2, cp=cp, sp=True, zero=1)
    z1 = _plan(c, T, gpus=cp * 2, tp=2, dp=cp, sp=True, zero=1, global_batch=cp)
    assert [i.bytes.at(1) for i in z.stages[0].items if "moment" in i.name] == \
        [i.bytes.at(1) for i in z1.stages[0].items if "moment" in i.name]


def test_the_kv_exchange_is_timed_on_the_critical_path():
    p = _plan(sdpa(LLAMA), 8192, gpus=16, tp=2, cp=8)
    t = p.time
    # tp 2 × cp 8 = 16 ranks span two 8-GPU nodes: the exchange runs at the network's 50 GB/s
    assert t.links[C.CONTEXT] == (Fraction(400 * 10**9, 8), "network")
    assert t.context_parallel_per_micro_batch > 0
    kinds = {x.group for x in p.stages[0].collectives}
    assert C.CONTEXT in kinds
    # 32 layers × 3 collectives of b·T·2·(h_kv/tp)·d_k·2 bytes (8 KV heads over tp 2)
    payload = 8192 * 2 * 4 * 128 * 2
    cps = [x for x in p.stages[0].collectives if x.group == C.CONTEXT]
    assert sum(x.bytes for x in cps) == 3 * 32 * payload


@pytest.mark.parametrize("argv,expected", [
    (("--implementation", "course", "--attention", "naive", "--cp", "4"),
     "give --attention sdpa"),
    (("--cp", "3", "--attention", "sdpa", "--ctx", "8192"), "choose a T divisible by 6"),
])
def test_refusals(capsys, argv, expected):
    cli_run.refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.1-8B", "--gpus", "24",
                                "--gpu", "H100", *argv, expected=expected)
