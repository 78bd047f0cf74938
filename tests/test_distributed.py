"""The multi-GPU planner against torch.distributed (accounting/distcheck, suite.py).

One subprocess runs every check (a fresh interpreter: the fake process group and the forked
gloo workers need a clean process): a gloo group of 4 CPU processes (DDP,
ZeroRedundancyOptimizer, FSDP2 × TP + SP on a 2 × 2 mesh, a 4-stage 1F1B pipeline) and one
rank of 8 to 64 on the fake backend (FSDP2 and TP/SP on real presets). For each rank, every
quantity the planner predicts — parameter, gradient and AdamW-state bytes, matmul FLOPs
(FlopCounterMode on the rank's local shapes), calls and bytes of each kind of collective
(a dispatch hook, its call counts beside CommDebugMode's) — must equal what torch did.
A few quantities are also derived by hand below, independently of the planner.
"""
import pytest

from accounting.distcheck.compare import compare

# a long module-scoped build, started first; one worker runs the file (tests/conftest.py)
pytestmark = pytest.mark.slow


# The tiny model of the gloo group (suite.TINY): V 1,002, d 32, 4 layers, h 4, h_kv 2 (d_k 8),
# d_ff 96, SwiGLU, RMSNorm, RoPE, untied head. Per block: two gains 2·32, Q and O 2·32·32,
# K and V 2·16·32, W1/W2/W3 3·96·32 = 12,352; N = 2·1,002·32 + 4·12,352 + 32 = 113,568.
N_TINY = 2 * 1002 * 32 + 4 * (2 * 32 + 2 * 32 * 32 + 2 * 16 * 32 + 3 * 96 * 32) + 32
ROPE_BYTES = 4 * 2 * 16 * 4 * 4  # L · (cos, sin) · T_max 16 · d_k/2 = 4 · fp32


@pytest.fixture
def measured(distcheck_run):
    """The one run of `python -m accounting.distcheck --json` (tests/conftest.py: shared with
    test_expert_parallel.py, whose EP cases it holds)."""
    return distcheck_run


def by_label(measured, label):
    found = [m for m in measured["results"] if m["case"]["label"].startswith(label)]
    assert found, label
    return found


def collective(m, group, op, phase):
    return next((c for c in m["collectives"]
                 if (c["group"], c["op"], c["phase"]) == (group, op, phase)), None)


def test_no_rank_prints_torch_s_known_warnings(measured):
    # before accounting.distcheck.measure.quiet_known_warnings, about 40 lines of three
    # torch warnings came before the answer; any other warning would still show here
    assert "Warning" not in measured["stderr"], measured["stderr"][-4000:]


def test_only_the_known_warnings_are_hidden():
    import warnings
    from accounting.distcheck.measure import quiet_known_warnings
    said = [(UserWarning, "Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients. See ..."),
            (UserWarning, "FSDP2-wrapped module (FSDPTransformerLM) returned a view tensor. An "
                          "in-place op on this view ..."),
            (FutureWarning, "`isinstance(treespec, LeafSpec)` is deprecated, use ..."),
            (UserWarning, "FSDP2-wrapped module (FSDPTransformerLM) did something else"),
            (DeprecationWarning, "Full backward hook is firing when gradients are computed "
                                 "with respect to module outputs since no inputs require "
                                 "gradients"),
            (UserWarning, "any other warning")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_warnings()
        for category, message in said:
            warnings.warn(message, category)
    assert [(w.category, str(w.message)) for w in caught] == said[3:]


def test_every_rank_agrees_with_the_plan(measured):
    assert measured["code"] == 0, measured["stdout"]
    assert len(measured["results"]) == 6 * 4 + 9  # gloo: 6 cases × 4 ranks; fake: 9 ranks
    for m in measured["results"]:
        rows = compare(m)
        assert len(rows) >= 12
        wrong = [f"{r.what}: plan {r.planned:,}, torch {r.measured:,}" for r in rows if not r.agrees]
        assert not wrong, (m["case"]["label"], m["case"]["rank"], wrong)
        assert m["flops"] and all(v > 0 for v in m["flops"].values())
        assert m["collectives"]  # something was communicated


def test_torchtitan_bf16_gathers_by_hand(measured):
    """torchtitan's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): FSDP2 gathers
    each unit in bf16 (2 bytes per element) and reduce-scatters its gradient in fp32 (4), so
    the forward all-gathers move half the bytes of the reduce-scatters (the same units, one
    micro-batch)."""
    (m,) = [m for m in measured["results"] if m["case"].get("stack") == "torchtitan"]
    ag = collective(m, "dp", "all-gather", "forward")
    rs = collective(m, "dp", "reduce-scatter", "backward")
    assert ag["calls"] == rs["calls"] == 3 and 2 * ag["bytes"] == rs["bytes"]


def test_ddp_by_hand(measured):
    for m in by_label(measured, "DDP"):
        ar = collective(m, "dp", "all-reduce", "backward")
        assert (ar["calls"], ar["bytes"]) == (1, 4 * N_TINY)  # < 1 MiB: one bucket, once a step
        bc = collective(m, "dp", "broadcast", "forward")
        assert (bc["calls"], bc["bytes"]) == (1, ROPE_BYTES)  # buffers, not under no_sync
        assert m["state"]["param_numel"] == m["state"]["grad_numel"] == N_TINY
        assert m["state"]["moment_numel"] == 2 * N_TINY


def test_zero1_partitions_the_optimizer_state(measured):
    ranks = by_label(measured, "ZeroRedundancyOptimizer")
    moments = [m["state"]["moment_numel"] for m in ranks]
    assert sum(moments) == 2 * N_TINY and len(set(moments)) > 1  # whole tensors, uneven
    for m in ranks:  # each rank broadcasts what it owns; every rank takes part in all
        bc = collective(m, "dp", "broadcast", "optimizer step")
        assert bc["bytes"] == 4 * N_TINY and bc["calls"] == m["state"]["param_tensors"]


def test_pipeline_messages_by_hand(measured):
    stages = sorted(by_label(measured, "1F1B pipeline of 4 stages"), key=lambda m: m["case"]["rank"])
    message = 1 * 16 * 32 * 4  # b · T · d_model · fp32, per micro-batch and direction
    for m in stages:
        s, last = m["case"]["rank"], m["case"]["rank"] == 3
        sends = collective(m, "pp", "send", "step")
        # 8 micro-batches: activations forward (not from the last stage), gradients back
        # (not from the first)
        assert sends["bytes"] == message * 8 * ((not last) + (s > 0))
        # 1F1B: stage s runs at most p − s = 4 − s forward passes ahead of its backward ones
        assert m["in_flight_peak"] == 4 - s
    params = sum(m["state"]["param_numel"] for m in stages)
    assert params == N_TINY  # the stages partition the model


def test_uneven_pipeline_stages(measured):
    # 6 layers on 4 stages: 1, 2, 2, 1 (one fewer on the first and last, Llama 3's rule),
    # the embedding on stage 0, the final norm and the LM head on stage 3
    stages = sorted(by_label(measured, "1F1B pipeline of 6 layers"), key=lambda m: m["case"]["rank"])
    layer = 2 * 32 + 2 * 32 * 32 + 2 * 16 * 32 + 3 * 96 * 32  # norms, Q and O, K and V, SwiGLU
    table = 1002 * 32
    assert [m["state"]["param_numel"] for m in stages] == [
        table + layer, 2 * layer, 2 * layer, layer + 32 + table]
    for m in stages:
        assert m["in_flight_peak"] == 4 - m["case"]["rank"]


def test_fsdp_pads_and_tp_whole_embedding_gradient(measured):
    # GPT-2 on 8 ranks, ZeRO-3, last rank: its shard of the 50,257 × 768 tables is 50,257 −
    # 7·6,283 = 6,276 rows, but FSDP2 stores ⌈50,257/8⌉ = 6,283 rows
    gpt2 = by_label(measured, "GPT-2 (tied")[0]["state"]
    assert gpt2["param_bytes"] - 4 * gpt2["param_numel"] >= 4 * (6283 - 6276) * 768
    # TP 12 with an untied head, last rank: it holds 50,257 − 11·⌈50,257/12⌉ = 50,257 − 11·4,189
    # = 4,178 rows of each table, but DTensor keeps the embedding's whole V × d gradient
    tp = by_label(measured, "CS336 GPT-2 small")[0]["state"]
    assert tp["grad_bytes"] - tp["param_bytes"] == 4 * (50_257 - 4_178) * 768


def test_hook_and_comm_debug_mode_see_the_same_calls(measured):
    for m in measured["results"]:
        if m["comm_debug_counts"]:
            assert sum(c["calls"] for c in m["collectives"]) == sum(m["comm_debug_counts"].values())


def test_torch_sequence_parallel_saves_the_gathered_norm_outputs(measured):
    # The FSDP2 × TP 2 + SP case: torch saves the all-gathered inputs of Q/K/V and W1 (the
    # two norm outputs, b·T·d_model fp32 each) whole; Megatron-LM would save their halves.
    # Counting them Megatron's way misses 4 layers × 2 × (1 − 1/2) × 16·32·4 = 8,192 bytes.
    from accounting.distcheck.compare import activation_rows
    from accounting.planning.parallel import activations as A
    from accounting.planning.parallel.shards import BLOCK, split
    m = by_label(measured, "FSDP2 ZeRO-3 × TP 2 + SP")[0]
    torch_way = sum(r.bytes.at(1) for r in activation_rows(m["case"])
                    if r.place == BLOCK and r.record.saved)
    assert 4 * torch_way == m["block_saved_bytes"]
    from accounting.distcheck.compare import config_of
    from accounting.planning.parallel.layout import Layout
    lo = Layout(4, tp=2, dp=2, sp=True, zero=3, global_batch=4)
    megatron = sum(r.bytes.at(1) for r in A.rows(split(config_of(m["case"]["model"])), lo, 16,
                                                  megatron_sp=True)
                   if r.place == BLOCK and r.record.saved)
    assert m["block_saved_bytes"] - 4 * megatron == 4 * 2 * (16 * 32 * 4) // 2 == 8192
