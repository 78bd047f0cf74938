"""Each stack's overlap rule (accounting/planning/parallel/overlap.py) applied to a step whose
compute and collectives are given by hand: the expected exposed seconds are worked out here
from the rule as the stack's source states it (DDP: the last bucket after the backward;
FSDP2: the first all-gather and the last reduce-scatter of each micro-batch; Megatron's
default DDP and DeepSpeed below ZeRO-3: all of it; the CP ring: what outlasts the
attention), not read from the planner."""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from accounting.ledger.records import BACKWARD, FORWARD
from accounting.planning.gpus import Interconnect
from accounting.planning.parallel import overlap as OV
from accounting.planning.parallel.comms import (ALL_GATHER, ALL_REDUCE, CONTEXT, DATA,
                                                REDUCE_SCATTER, STEP, TENSOR as TP_GROUP, BROADCAST,
                                                Collective)
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.step import StageFlops, step_time

# 8 GPUs a node; 7/8·1e11 B/s per direction, so a ring all-gather or reduce-scatter of a
# payload of b bytes over 8 ranks ((n − 1)/n of it sent) takes b / 1e11 s, an all-reduce 2b / 1e11
NET = Interconnect("test node", Fraction(7, 8) * 10**11, None, 8, "hand-made")
PEAK = Fraction(10**15)  # at MFU 1: F FLOPs take F / 1e15 s
MS = Fraction(1, 1000)


def _c(group, op, phase, calls, per_call_bytes, ranks=8):
    return Collective(group, op, "test", phase, calls, calls * per_call_bytes, ranks, "b")


def _fsdp_comms(m: int) -> list[Collective]:
    """32 blocks of 1e8 gathered bytes (1 ms a gather), a root unit of 5e8 (5 ms); gradients
    reduce-scattered in fp32: 2 ms a block, 10 ms the root; per micro-batch (FSDP2)."""
    return [_c(DATA, ALL_GATHER, FORWARD, 32 * m, 10**8), _c(DATA, ALL_GATHER, FORWARD, m, 5 * 10**8),
            _c(DATA, ALL_GATHER, BACKWARD, 32 * m, 10**8), _c(DATA, ALL_GATHER, BACKWARD, m, 5 * 10**8),
            _c(DATA, REDUCE_SCATTER, BACKWARD, 32 * m, 2 * 10**8),
            _c(DATA, REDUCE_SCATTER, BACKWARD, m, 10**9)]


def _flops(forward: int, m: int) -> StageFlops:
    return StageFlops(0, forward, 2 * forward, 0, m, 0)


@pytest.mark.parametrize("forward, exposed_per_micro_batch", [
    # compute long (forward 100 ms, backward 200 ms): only the root's first all-gather
    # (5 ms) and last reduce-scatter (10 ms) show
    (10**14, 15 * MS),
    # compute short (1 ms, 2 ms): forward 37 ms of gathers, 5 ms exposed first, 31 ms more
    # than the 1 ms it hides under; backward 37 + 74 = 111 ms, 10 ms last, 99 ms beyond 2 ms
    (10**12, 15 * MS + 31 * MS + 99 * MS),
])
def test_fsdp2_prefetch_exposes_first_gather_and_last_reduce_scatter(forward, exposed_per_micro_batch):
    layout = Layout(8, dp=8, zero=3, micro_batch=1, global_batch=16)  # m = 2
    t = step_time(layout, [_flops(forward, 2)], [_fsdp_comms(2)], PEAK, Fraction(1), NET,
                  overlap=OV.TORCHTITAN_OVERLAP)
    assert t.exposed_data_parallel == 2 * exposed_per_micro_batch
    assert t.seconds == 2 * Fraction(3 * forward) / PEAK + 2 * exposed_per_micro_batch
    # without the rules: the old assumption (the whole critical path hides it all)
    old = step_time(layout, [_flops(10**14, 2)], [_fsdp_comms(2)], PEAK, Fraction(1), NET)
    assert old.exposed_data_parallel == 0


@pytest.mark.parametrize("forward, exposed", [
    (10**14, 2 * MS),  # 10 buckets of 1e8 bytes, 2 ms each: the last after the backward
    (10**12, 18 * MS),  # backward 2 ms hides 2 of the 20 ms
])
def test_ddp_buckets_expose_the_last_bucket(forward, exposed):
    layout = Layout(8, dp=8, zero=0, micro_batch=1, global_batch=16)
    comms = [_c(DATA, ALL_REDUCE, BACKWARD, 10, 10**8)]
    t = step_time(layout, [_flops(forward, 2)], [comms], PEAK, Fraction(1), NET,
                  overlap=OV.TORCH_OVERLAP)
    assert t.exposed_data_parallel == exposed


def test_zero1_broadcast_after_the_step_is_exposed():
    layout = Layout(8, dp=8, zero=1, micro_batch=1, global_batch=8)
    comms = [_c(DATA, ALL_REDUCE, BACKWARD, 10, 10**8), _c(DATA, BROADCAST, STEP, 1, 7 * 10**8)]
    t = step_time(layout, [_flops(10**14, 1)], [comms], PEAK, Fraction(1), NET,
                  overlap=OV.TORCH_OVERLAP)
    assert t.exposed_data_parallel == 2 * MS + 7 * MS  # last bucket + broadcast (b/1e11)


@pytest.mark.parametrize("overlap", [OV.MEGATRON_OVERLAP, OV.DEEPSPEED_OVERLAP])
def test_no_overlap_by_default_exposes_everything(overlap):
    layout = Layout(8, dp=8, zero=1, micro_batch=1, global_batch=8)
    comms = [_c(DATA, ALL_REDUCE, BACKWARD, 10, 10**8)]
    t = step_time(layout, [_flops(10**14, 1)], [comms], PEAK, Fraction(1), NET, overlap=overlap)
    assert t.exposed_data_parallel == 20 * MS == t.data_parallel


@pytest.mark.parametrize("per_rotation, exchange, exposed", [
    (875 * 10**7, 50 * MS, Fraction(0)),  # 50 ms under 75 ms of attention: hidden
    (175 * 10**8, 100 * MS, 25 * MS),  # 100 ms: 25 ms past the attention
])
def test_context_parallel_ring_hides_under_the_attention(per_rotation, exchange, exposed):
    # cp 2: an all-gather sends (n − 1)/n = 1/2 of its payload, at 7/8·1e11 B/s:
    # 8.75e9 bytes -> 50 ms; compute 300 ms a micro-batch, a quarter of it attention (75 ms)
    layout = Layout(2, cp=2, micro_batch=1, global_batch=1)
    comms = [_c(CONTEXT, ALL_GATHER, FORWARD, 1, per_rotation, ranks=2)]
    shares = (("GEMMs", Fraction(1, 2)), ("attention", Fraction(1, 4)),
              ("memory-bound", Fraction(1, 4)))
    t = step_time(layout, [_flops(10**14, 1)], [comms], PEAK, Fraction(1), NET,
                  overlap=OV.TORCHTITAN_OVERLAP, shares=shares)
    assert t.context_parallel_per_micro_batch == exchange
    assert t.exposed_context_parallel == exposed
    assert t.seconds == 300 * MS + exposed
    breakdown = t.breakdown()
    assert breakdown["attention"] == 75 * MS
    assert sum(breakdown.values()) == t.seconds
    # without the kernels' shares nothing says how long the attention is: all exposed
    bare = step_time(layout, [_flops(10**14, 1)], [comms], PEAK, Fraction(1), NET,
                     overlap=OV.TORCHTITAN_OVERLAP)
    assert bare.exposed_context_parallel == exchange


@pytest.mark.parametrize("gathered, exposed", [
    # tp 4: an all-gather sends 3/4 of its payload at 7/8·1e11 B/s. 1.1666e10 B -> 100 ms;
    # the GEMMs are half of a 300 ms micro-batch (150 ms), (tp − 1)/tp of them 112.5 ms:
    # micro-pipelined, nothing of the 100 ms shows
    (35 * 10**9 // 3, 0 * MS),
    # 3.5e10 B -> 300 ms: 300 − 112.5 = 187.5 ms exposed
    (35 * 10**9, Fraction(375, 2) * MS),
])
def test_async_tp_hides_the_collectives_under_their_matmuls(gathered, exposed):
    """torch's _pipelined_all_gather_and_consume (torch/distributed/_symmetric_memory): the
    local shard's matmul first, each next shard's copy under the matmul of the one in hand:
    a fused op takes max(t_m, t_m/tp + t_c), exposed max(0, t_c − t_m·(tp − 1)/tp)."""
    layout = Layout(4, tp=4, micro_batch=1, global_batch=1)
    comms = [_c(TP_GROUP, ALL_GATHER, FORWARD, 1, gathered, ranks=4)]
    shares = (("GEMMs", Fraction(1, 2)), ("attention", Fraction(1, 4)),
              ("memory-bound", Fraction(1, 4)))
    args = (layout, [_flops(10**14, 1)], [comms], PEAK, Fraction(1), NET)
    sync = step_time(*args, overlap=OV.TORCHTITAN_OVERLAP, shares=shares)
    both = step_time(*args, overlap=OV.TORCHTITAN_OVERLAP, shares=shares, async_tp=True)
    t_c = Fraction(gathered * 3, 4) / (Fraction(7, 8) * 10**11)
    assert sync.tensor_parallel_per_micro_batch == t_c == both.tensor_parallel_per_micro_batch
    assert sync.seconds == 300 * MS + t_c  # exposed without async TP
    assert both.exposed_tensor_parallel == exposed
    assert both.seconds == 300 * MS + exposed
    assert dict(both.rules)["tensor parallel"] == OV.ASYNC_TP
    assert sum(both.breakdown().values()) == both.seconds
    # without the kernels' shares the GEMMs' time is unknown: nothing hidden
    bare = step_time(*args, overlap=OV.TORCHTITAN_OVERLAP, async_tp=True)
    assert bare.exposed_tensor_parallel == t_c


def _plan(capsys, *argv):
    from accounting.cli.main import main
    code = main(["plan", "meta-llama/Llama-3.1-8B", "--gpus", "8", "--gpu", "H100",
                 "--ctx", "4096", "--batch", "8", "--mfu", "0.4", *argv, "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)["step_time"]


def test_stacks_carry_their_rules_into_the_json(capsys):
    ds = _plan(capsys, "--stack", "deepspeed", "--zero", "2")
    assert ds["overlap"]["rules"]["data parallel"] == OV.EXPOSED
    assert ds["exposed_data_parallel_seconds"] == ds["data_parallel_seconds"]
    tt = _plan(capsys, "--stack", "torchtitan", "--zero", "3")
    assert tt["overlap"]["rules"]["data parallel"] == OV.PREFETCH
    assert "apply_fsdp" in tt["overlap"]["source"]
    exposed = _exact(tt["exposed_data_parallel_seconds"])
    assert 0 < exposed < _exact(tt["data_parallel_seconds"])
    parts = sum(_exact(v) for v in tt["breakdown_seconds"].values())
    assert parts == _exact(tt["compute_scope_seconds"])


def _exact(d: dict) -> Fraction:
    return Fraction(d["numerator"], d["denominator"])


def test_context_parallel_rank_is_timed_as_its_share_of_the_whole_sequence(capsys):
    # a CP rank runs exactly 1/cp of the sequence's FLOPs (T/cp tokens through every linear,
    # 1/cp of the causal pairs: step.stage_flops), so each kind of its compute is 1/cp of a
    # whole T-token micro-batch's. Timing the rank as a T/cp-token sequence (the old rule)
    # gave the attention (cp times more pairs than (T/cp)²) the GEMM-heavy mix's rate:
    # 4.9 s of "GEMMs" for the 8B at 128k on 4 ranks, against 1.76 s at the ranks' tokens.
    from accounting.cli.main import main
    pytest.importorskip("pyarrow")
    from accounting.timing import tables
    if tables.system_of("H100-SXM") is None:
        pytest.skip("aiconfigurator-core's tables are not installed (pip install -e '.[time]')")

    def breakdown(*argv):
        code = main(["plan", "meta-llama/Llama-3.2-1B", "--gpu", "H100", "--ctx", "16384",
                     "--attention", "sdpa", *argv, "--format", "json"])
        assert code == 0
        st = json.loads(capsys.readouterr().out)["step_time"]
        assert st["source"] == "kernels"
        return {k: _exact(v) for k, v in st["breakdown_seconds"].items()}
    whole = breakdown("--gpus", "2", "--batch", "2")  # dp 2: a whole sequence per rank
    ring = breakdown("--gpus", "2", "--cp", "2", "--batch", "1")  # half of one per rank
    for kind in ("GEMMs", "attention", "memory-bound"):
        assert ring[kind] == whole[kind] / 2, kind


def test_torchtitan_pipeline_gathers_and_reduces_each_unit_once_a_step(capsys):
    # torch.distributed.pipelining (stage.py, _PipelineStageBase.backward_maybe_with_nosync)
    # sets set_reshard_after_backward(False) and set_requires_gradient_sync(False) for every
    # micro-batch and runs each FSDP unit's post_backward once, at the last; torchtitan keeps
    # the parameters gathered from the forward (reshard_after_forward = not pp_enabled). So
    # with pp 2 and m = 4 micro-batches, a stage of 16 blocks gathers and reduce-scatters
    # each block once a step (16 calls, not 4 × 16), and never gathers again in the backward
    from accounting.cli.main import main
    code = main(["plan", "meta-llama/Llama-3.1-8B", "--gpus", "16", "--pp", "2", "--zero", "3",
                 "--batch", "32", "--micro-batch", "1", "--ctx", "4096", "--stack", "torchtitan",
                 "--gpu", "H100", "--mfu", "0.4", "--format", "json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    dp = [c for c in d["stages"][0]["collectives"] if c["group"] == "data parallel"]
    blocks = {(c["op"], c["phase"]): c["calls"] for c in dp if "blocks" in c["what"]}
    assert blocks == {("all-gather", "forward"): 16, ("reduce-scatter", "backward"): 16}
    # the torch stack's FSDP2 under the same layout reduces after every micro-batch (its
    # default, checked on torch.distributed by accounting/distcheck)
    code = main(["plan", "meta-llama/Llama-3.1-8B", "--gpus", "16", "--pp", "2", "--zero", "3",
                 "--batch", "32", "--micro-batch", "1", "--ctx", "4096", "--gpu", "H100",
                 "--mfu", "0.4", "--attention", "sdpa", "--format", "json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    rs = next(c for c in d["stages"][0]["collectives"]
              if c["op"] == "reduce-scatter" and "blocks" in c["what"])
    assert rs["calls"] == 4 * 16
