"""What a pipeline stage holds at its peak, against torch.distributed.pipelining's own
schedules (issue 44, task 44b).

Expected values come from torch 2.13's schedules, not from the planner: the interleaved
order is ScheduleInterleaved1F1B's own (_calculate_single_rank_operations, read by
tests/test_pipeline_schedules.py's torch_order), and the 1F1B stage's buffers are measured
on a gloo pipeline (tests/test_pipeline_live.py).
"""
import sys
from pathlib import Path

import pytest

from accounting.planning.parallel import peak as PK, plan as P
from accounting.planning.parallel.layout import Layout, chunks_in_flight, layer_split
from accounting.planning.parallel.shards import BLOCK, LAST
from accounting.planning.precisions import get_precision

pytest.importorskip("torch.distributed.pipelining.schedules")
sys.path.insert(0, str(Path(__file__).parent))
from test_pipeline_schedules import CT, torch_order  # noqa: E402


def held_per_chunk(ops, p: int, v: int):
    """Every moment of a rank's order: {local chunk: forwards not yet matched by their
    backward}."""
    live, out = dict.fromkeys(range(v), 0), []
    for a in ops:
        live[a.stage_index // p] += 1 if a.computation_type == CT.FORWARD else -1
        out.append(dict(live))
    return out


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (8, 2, 8), (8, 2, 32), (4, 4, 8)])
def test_the_last_chunk_holds_one_micro_batch(p, v, m):
    # torch's order: the last virtual stage (chunk v − 1 on the last rank) runs each
    # forward straight into its backward, while that rank's earlier chunks hold up to p
    # passes each: the head's and the loss's saved tensors are one micro-batch's
    moments = held_per_chunk(torch_order(p, v, m)[p - 1], p, v)
    assert max(h[v - 1] for h in moments) == 1
    assert max(sum(h.values()) for h in moments) == chunks_in_flight(
        Layout(p, pp=p, vpp=v, global_batch=m), p - 1)


def _plan(v: int):
    from accounting import get_preset
    c = get_preset("meta-llama/Llama-3.1-8B")  # 32 layers, V = 128,256
    lo = Layout(4, pp=4, dp=1, vpp=v, global_batch=8, recompute="full")
    plan = P.parallel_plan(c, lo, 2048, precision=get_precision("bf16"), stages=[0, 3])
    return c, lo, plan


def test_interleaved_last_stage_holds_the_head_once():
    # Hand algebra from torch's order (p 4, v 2, m 8): at the last rank's peak its chunks
    # hold {0: h0, 1: h1} passes; each block pass saves one block's kept bytes, the last
    # chunk's pass also the head's and the loss's. The plan rounds the blocks up to
    # ⌈chunks/v⌉ whole-stage micro-batches (an upper bound) but must count the head and
    # the loss for the one pass of the last chunk: at most that rounding above torch's peak.
    c, lo, plan = _plan(2)
    s = plan.stages[-1]
    p, v, m = lo.pp, lo.vpp, lo.micro_batches
    sizes = layer_split(c, lo)  # chunk c on stage c mod p
    chunk_layers = [sizes[s.stage + j * p] for j in range(v)]
    rows = P.A.rows(P.run_split(c, get_precision("bf16"), "full"), lo, 2048)
    block = sum(r.bytes.at(1) for r in rows if r.place == BLOCK)
    # and the logits the schedule's fwd_cache keeps (b·T·V in bf16: F.cross_entropy does
    # not save them; tests/test_pipeline_live.py)
    head = sum(r.bytes.at(1) for r in rows if r.place == LAST) + 2048 * c.vocab_size * 2
    torch_peak = max(sum(h[j] * chunk_layers[j] * block for j in range(v)) + h[v - 1] * head
                     for h in held_per_chunk(torch_order(p, v, m)[p - 1], p, v))
    held = s.activations.held(s.activations.in_flight).at(1)
    rounding = (v * s.activations.in_flight - chunks_in_flight(lo, s.stage)) \
        * max(chunk_layers) * block
    assert torch_peak <= held <= torch_peak + rounding, (held, torch_peak, rounding)
    assert head > rounding  # the test can tell one head from two


def test_one_f_one_b_unchanged_by_the_rule():
    # under 1F1B the last stage holds one micro-batch: held(k) is k whole micro-batches
    _, _, plan = _plan(1)
    for s in plan.stages:
        a = s.activations
        assert a.held(a.in_flight) == a.per_micro_batch.times(a.in_flight)


def test_table5_runs_torchtitans_default_micro_batches():
    # torchtitan 9dec370 splits the local batch into pipeline_parallel_microbatches, by
    # default the pipeline degree (pipelining_utils.py build_pipeline_schedule): Table 5's
    # local batch of 32 on PP 8 is 8 micro-batches of 4. Its published TPS/GPU agree: 128
    # (interleaved, v 2) over 100 (1F1B) is 1.28, the bubbles' ratio at m = 8
    # ((1 − 7/23)/(1 − 7/15) = 1.31), not at m = 32 ((1 − 7/71)/(1 − 7/39) = 1.10)
    from fractions import Fraction
    from accounting.literature.published_runs import RUNS
    from accounting.planning.parallel.step import bubble
    rows = [r for n, r in RUNS.items() if n.startswith("torchtitan Table 5")]
    assert len(rows) == 2
    for r in rows:
        f = dict(zip(r.flags, r.flags[1:]))
        dp = int(f["--gpus"]) // (int(f["--tp"]) * int(f["--pp"]))
        assert int(f["--batch"]) // dp == 32  # the table's local batch
        assert int(f["--batch"]) // dp // int(f["--micro-batch"]) == int(f["--pp"])

    def tps_ratio(m):
        one, two = (Layout(8, pp=8, vpp=v, global_batch=m) for v in (1, 2))
        return (1 - bubble(two)) / (1 - bubble(one))
    published = Fraction(128, 100)
    assert abs(tps_ratio(8) / published - 1) < Fraction(3, 100)
    assert abs(tps_ratio(32) / published - 1) > Fraction(10, 100)


def test_torchtitan_middle_stage_holds_its_block_inputs_and_its_output():
    # Hand algebra: torchtitan with full activation checkpointing saves each block's input
    # only, a sequence shard b·(T/tp)·d_model in bf16 (its blocks compute in bf16); a middle
    # stage also keeps its output of each micro-batch in flight in torch's fwd_cache
    # (tests/test_pipeline_live.py measures it): (blocks + 1)·b·(T/tp)·d_model·2 per
    # micro-batch. Llama 3.1 8B: 32 layers on 4 stages, d_model 4,096; T 2,048 on TP 2.
    from accounting import get_preset
    from accounting.planning.parallel.stack_memory import StackRun
    from accounting.planning.parallel.stacks import TORCHTITAN, get_stack
    c = get_preset("meta-llama/Llama-3.1-8B")
    lo = Layout(16, tp=2, sp=True, pp=4, dp=2, zero=3, global_batch=16, micro_batch=2,
                recompute="full")
    plan = P.parallel_plan(c, lo, 2048, precision=get_precision("bf16"), stages=[1],
                           stack=StackRun(get_stack(TORCHTITAN)))
    a = plan.stages[0].activations
    assert a.per_micro_batch.a == (8 + 1) * (2048 // 2) * 4096 * 2
    assert a.in_flight == 3  # min(m, p − s): m = 4, p − s = 3


def test_fsdp2_no_sync_passes_hold_the_unsharded_accumulation_not_the_shards():
    # In the backward passes of a pipelined FSDP2 stage the gradients live as FSDP2's
    # unsharded fp32 accumulation only: no sharded gradient exists before the last
    # micro-batch's reduce-scatter (measured: tests/test_pipeline_live.py), so a block's
    # backward moment holds the parameter shards, AdamW's m and v, the gathered bf16 units,
    # the fp32 accumulation, one block's bf16 gradients, the receive buffers, the RoPE
    # tables and the activations, and not the sharded gradients' item; the update holds
    # the sharded gradients and not the accumulation.
    from accounting import get_preset
    from accounting.planning.parallel.stack_memory import StackRun
    from accounting.planning.parallel.stacks import TORCHTITAN, get_stack
    c = get_preset("meta-llama/Llama-3.1-8B")
    lo = Layout(4, pp=2, dp=2, zero=3, global_batch=8, micro_batch=1, recompute="full")
    plan = P.parallel_plan(c, lo, 2048, precision=get_precision("bf16"), stages=[0],
                           stack=StackRun(get_stack(TORCHTITAN)))
    s = plan.stages[0]  # m = 4 > p − s = 2: one kind of backward moment
    items = {i.name: i.bytes.at(1) for i in s.items}

    def named(*starts):
        return sum(b for n, b in items.items() if n.startswith(starts))
    block = next(m for m in s.moments if m.name.startswith("a block's backward"))
    held = named("parameters", "AdamW moments", "FSDP2", "pipelining", "RoPE", "activations")
    assert s.moment_bytes(block, 1) == held + block.extra.at(1)
    update = next(m for m in s.moments if m.name == PK.AT_UPDATE)
    assert s.moment_bytes(update, 1) == named("parameters", "gradients", "AdamW moments",
                                              "pipelining", "RoPE") + update.extra.at(1)


def test_other_micro_batches_see_the_schedule_they_run():
    # the fit's search plans other micro-batches of the same per-rank batch: at the
    # layout's own b it is the peak; where m' = per_rank/b exceeds p − s the stage reaches
    # the steady state (k in flight beside every gradient): no micro-batch fewer there
    from accounting import get_preset
    c = get_preset("meta-llama/Llama-3.1-8B")
    lo = Layout(2, pp=2, global_batch=4, micro_batch=2, recompute="full")  # m = 2 = p
    plan = P.parallel_plan(c, lo, 2048, precision=get_precision("bf16"), stages=[0])
    s = plan.stages[0]
    assert s.memory_at(2, 4, lo) == s.peak(2)
    # at b = 1, m' = 4 > p: 2 in flight and every gradient, the later moment without "fewer"
    later = next(m for m in s.moments if m.fewer)
    a = s.activations
    acts = a.held(2).at(1) + a.recomputed_block.at(1)
    assert s.memory_at(1, 4, lo) >= s.moment_bytes(later, 1, acts, all_first=False) > \
        s.moment_bytes(later, 1, acts)


def test_a_fused_linear_loss_stage_keeps_its_hidden_state_not_logits():
    # --loss fused-linear (Liger): the last stage's module ends at the final hidden state
    # (the loss applies the head), so its fwd_cache keeps b·T·d_model, not b·T·V, per
    # micro-batch; the standard loss's keeps the logits b·T·V (bf16 here: 2 bytes)
    from accounting import get_preset
    c = get_preset("meta-llama/Llama-3.1-8B")
    lo = Layout(2, pp=2, global_batch=4, micro_batch=1)

    def once(loss):
        plan = P.parallel_plan(c, lo, 1024, precision=get_precision("bf16"), stages=[1],
                               loss=loss)
        return plan.stages[0].activations.once
    standard, fused = once("standard"), once("fused-linear")
    # (the ledger's head and loss rows are the same for both: the recipes' regions are
    # the moments' own, peak.py)
    assert standard.a - fused.a == 1024 * c.vocab_size * 2 - 1024 * c.d_model * 2
