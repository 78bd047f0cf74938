"""The interleaved pipeline against torch.distributed.pipelining's own schedule.

ScheduleInterleaved1F1B computes every rank's order of forward and backward chunk passes
(pipeline_order, from _calculate_single_rank_operations; no process group is needed for
it) and adds the sends and receives (_add_send_recv). From torch's order this file reads:

  * the chunks a rank holds at its peak (forwards not yet matched by their backward) —
    the planner's chunks_in_flight, and so its micro-batches in flight;
  * the step's length, simulating torch's order with a chunk's forward taking 1 unit and
    its backward 2 (Narayanan et al. 2021's t_b = 2·t_f), each pass waiting for the one it
    depends on — against the planner's slots m + (p − 1)/v times a micro-batch's 3·v units;
  * the sends and receives per rank — against the planner's pipeline collectives.

1F1B itself (one chunk per rank) is checked on a gloo pipeline by accounting/distcheck.
"""
from fractions import Fraction

import pytest

from accounting import get_preset
from accounting.planning.parallel import comms as C
from accounting.planning.parallel.layout import (Layout, chunks_in_flight,
                                                 micro_batches_in_flight, split_layers,
                                                 stage_layers)
from accounting.planning.parallel.step import bubble, slots

pipelining = pytest.importorskip("torch.distributed.pipelining.schedules")
CT = pipelining._ComputationType
CASES = [(4, 2, 8), (4, 2, 4), (4, 4, 8), (8, 2, 16), (16, 2, 16), (2, 3, 4), (16, 4, 32)]


def torch_order(p, v, m):
    s = object.__new__(pipelining.ScheduleInterleaved1F1B)  # the order needs no stages
    s.pp_group_size, s.n_local_stages, s._n_microbatches = p, v, m
    s.number_of_rounds = max(1, m // p)
    s.microbatches_per_round = m // s.number_of_rounds
    return {r: [a for a in s._calculate_single_rank_operations(r) if a is not None]
            for r in range(p)}


def simulate(order, chunks, t_forward=1, t_backward=2):
    """Finish time of the last pass: each rank runs its passes in torch's order, each when
    the pass it needs (the previous chunk's forward, the next chunk's backward) is done."""
    done, free, at = {}, dict.fromkeys(order, 0), dict.fromkeys(order, 0)
    while any(at[r] < len(order[r]) for r in order):
        moved = False
        for r in order:
            while at[r] < len(order[r]):
                a = order[r][at[r]]
                k, i = a.stage_index, a.microbatch_index
                if a.computation_type == CT.FORWARD:
                    key, need, dt = ("F", k, i), [("F", k - 1, i)] if k else [], t_forward
                else:
                    key, dt = ("B", k, i), t_backward
                    need = [("F", k, i)] + ([("B", k + 1, i)] if k < chunks - 1 else [])
                if any(n not in done for n in need):
                    break
                free[r] = done[key] = max([free[r]] + [done[n] for n in need]) + dt
                at[r] += 1
                moved = True
        assert moved, "torch's order deadlocked"
    return max(done.values())


def peak_held(ops):
    held = peak = 0
    for a in ops:
        held += 1 if a.computation_type == CT.FORWARD else -1
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("p,v,m", CASES)
def test_chunks_in_flight_are_torchs(p, v, m):
    lo = Layout(p * 2, pp=p, dp=2, vpp=v, global_batch=2 * m)
    order = torch_order(p, v, m)
    for rank in range(p):
        assert chunks_in_flight(lo, rank) == peak_held(order[rank]), rank
        # the stage's micro-batches: whole-stage activations, rounded up
        assert micro_batches_in_flight(lo, rank) == -(-peak_held(order[rank]) // v)
    # Megatron-LM's first stage: ⌈p·(1 + (p − 1)/(p·v))⌉ (theoretical_memory_usage.py)
    if v * m >= p * v + p - 1:  # enough micro-batches to fill the warm-up
        assert micro_batches_in_flight(lo, 0) == -(-(p * (p * v + p - 1)) // (p * v))


@pytest.mark.parametrize("p,v,m", CASES)
def test_step_length_and_bubble_are_torchs(p, v, m):
    lo = Layout(p, pp=p, dp=1, vpp=v, global_batch=m)
    # a micro-batch through a whole stage: v chunks × (1 + 2) units
    assert slots(lo) * 3 * v == simulate(torch_order(p, v, m), p * v)
    assert bubble(lo) == Fraction(p - 1, v * m + p - 1)


@pytest.mark.parametrize("p,v,m", CASES)
def test_sends_and_receives_are_torchs(p, v, m):
    lo = Layout(p, pp=p, dp=1, vpp=v, global_batch=m)
    with_comms = pipelining._add_send_recv(torch_order(p, v, m), lambda s: s % p, p * v)
    for rank in range(p):
        kinds = [a.computation_type for a in with_comms[rank]]
        ours = C.pipeline(lo, rank, 1, 16, 8, 2)
        calls = {(c.op, c.phase): c.calls for c in ours}
        assert kinds.count(CT.SEND_F) == calls.get((C.SEND, "forward"), 0)
        assert kinds.count(CT.RECV_F) == calls.get((C.RECV, "forward"), 0)
        assert kinds.count(CT.SEND_B) == calls.get((C.SEND, "backward"), 0)
        assert kinds.count(CT.RECV_B) == calls.get((C.RECV, "backward"), 0)


def test_llama3_405b_split():
    # Dubey et al. 2024, §3.3.2: 126 layers on 16 stages, one fewer on the first and last
    assert split_layers(126, 16) == (7,) + (8,) * 14 + (7,)
    assert split_layers(32, 8) == (4,) * 8  # even where pp divides the layers
    assert split_layers(30, 4) == (7, 8, 8, 7) and split_layers(29, 4) == (7, 7, 8, 7)
    # virtual stages: chunk c on stage c mod p, the first and last chunk one fewer
    c = get_preset("meta-llama/Llama-3.1-8B")  # 32 layers
    lo = Layout(4, pp=2, dp=2, vpp=2, global_batch=4)
    assert stage_layers(c, lo, 0) == tuple(range(0, 8)) + tuple(range(16, 24))
    lo = Layout(4, pp=2, dp=2, vpp=2, global_batch=4, stage_split=(7, 9, 9, 7))
    assert stage_layers(c, lo, 1) == tuple(range(7, 16)) + tuple(range(25, 32))
