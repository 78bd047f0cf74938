"""Expert parallelism in the multi-GPU planner (accounting.planning.parallel) and on
torch.distributed (accounting.distcheck).

Expected values are hand algebra written here (tensor by tensor, all-to-all by all-to-all,
sizes multiplied out in the comments), a different path through the library (the one-GPU
memory model and analysis), or torch.distributed's own measurement (a fake process group
and gloo groups of CPU processes: python -m accounting.distcheck's EP cases, and one more
at the end).
"""
import json
import subprocess
import sys
from fractions import Fraction

import pytest

import cli_run
from accounting import analyze, get_preset
from accounting.planning.gpus import interconnect
from accounting.planning.memory import MemoryModel, get_precision
from accounting.planning.parallel import Layout, parallel_plan, problems
from accounting.planning.parallel.comms import (ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, DATA, EXPERT,
                                                EXPERT_DATA, REDUCE_SCATTER)
from accounting.planning.plan import hardware
from accounting.architecture.config import ModelConfig

FP32, BF16 = get_precision("fp32"), get_precision("bf16-mixed")
# V 101, d 32, h 4 (d_k 8), 2 layers, SwiGLU; 4 experts of width 16, top-2, untied head.
BASE = dict(vocab_size=101, context_length=64, num_layers=2, d_model=32, num_heads=4, d_ff=48)
MOE = dict(num_experts=4, experts_per_token=2, moe_d_ff=16)
MIXTRAL = get_preset("mistralai/Mixtral-8x7B-v0.1")
DEEPSEEK = get_preset("deepseek-ai/DeepSeek-V3")


def cfg(**kw) -> ModelConfig:
    return ModelConfig(**{**BASE, **kw}, name="t")


def plan(config, seq=16, precision=FP32, gpu=None, stages=None, dp_rank=None, **kw):
    kw.setdefault("global_batch", kw.get("dp", 1) * kw.get("micro_batch", 1))
    return parallel_plan(config, Layout(**kw), seq, precision=precision,
                         hardware=hardware(gpu, compute=precision.compute) if gpu else None,
                         net=interconnect(gpu) if gpu else None, stages=stages, dp_rank=dp_rank)


def run(capsys, *argv):
    return cli_run.run(capsys, "plan", *argv)


# ---- parameters per rank ------------------------------------------------------------------
# Per block: attention 4·32² = 4,096, two RMSNorm gains 2·32 = 64, router 4·32 = 128;
# each expert 3·16·32 = 1,536 (w1, w3: 16 × 32; w2: 32 × 16). Outside the blocks: the
# embedding and the LM head 2·101·32 = 6,464, the final gain 32.
DENSE_BLOCK, ONE_EXPERT = 4_096 + 64 + 128, 1_536


def test_each_rank_holds_e_over_ep_whole_experts():
    # dp 4, ep 2: 2 of the 4 experts a rank, the rest replicated (ZeRO-0)
    st = plan(cfg(**MOE), gpus=4, dp=4, ep=2).stages[0].states
    assert st.expert_numel == 2 * (2 * ONE_EXPERT) == 6_144
    assert st.params == st.moments == 2 * (DENSE_BLOCK + 2 * ONE_EXPERT) + 6_464 + 32 == 21_216
    # one GPU holds all four: 2·(4,288 + 6,144) + 6,496 = 27,360 (the analysis agrees)
    one = plan(cfg(**MOE), gpus=1).stages[0].states
    assert one.params == 2 * (DENSE_BLOCK + 4 * ONE_EXPERT) + 6_496 \
        == analyze(cfg(**MOE)).param_count


def test_zero3_shards_experts_over_the_ranks_holding_them():
    # dp 4, ep 2: the experts' FSDP2 unit is sharded over dp/ep = 2 ranks, on dim 0 (E/ep = 2
    # rows: 1 each) since 2·2 = 4 is not more than E = 4; the rest over the 4 dp ranks:
    #   embedding, head: ⌈101/4⌉ = 26 rows of 32 (rank 3: 101 − 3·26 = 23); final gain 8;
    #   per block: gains 2·8, Q, K, V, O 4·8·32 = 1,024, router 1·32; experts 3·(1·16·32)
    experts = 2 * 3 * 1 * 512
    dense = 2 * (16 + 1_024 + 32)
    p = plan(cfg(**MOE), gpus=4, dp=4, ep=2, zero=3)
    st = p.stages[0].states
    assert st.params == 2 * 26 * 32 + 8 + dense + experts == 6_888
    last = plan(cfg(**MOE), gpus=4, dp=4, ep=2, zero=3, dp_rank=3).stages[0].states
    assert last.params_unpadded == last.moments == 2 * 23 * 32 + 8 + dense + experts == 6_696
    # dp 8, ep 2: the 4 ranks holding the same experts outnumber E/ep, so FSDP2 shards dim 1
    # (torchtitan): w1, w3 (2, 16, 32) -> 16/4 = 4 rows of dim 1; w2 (2, 32, 16) -> 8
    st8 = plan(cfg(**MOE), gpus=8, dp=8, ep=2, zero=3).stages[0].states
    assert sum(t.padded(4) for u in st8.units if u.expert for t in u.tensors) == \
        2 * (2 * (2 * 4 * 32) + 2 * 8 * 16) == 1_536


def test_zero1_partitions_expert_state_over_the_expert_data_parallel_group():
    # ZeroRedundancyOptimizer per group: the 6 expert tensors (2 layers × w1, w2, w3, 1,024
    # elements each at ep 2) over dp/ep = 2 ranks: 3 each; every rank holds its share
    p = plan(cfg(**MOE), gpus=4, dp=4, ep=2, zero=1)
    st = p.stages[0].states
    from accounting.planning.parallel.states import zero1_partition
    dense = [t.numel for u in st.units if not u.expert for t in u.tensors]
    mine = sum(dense[i] for i in zero1_partition(dense, 4)[st.dp_rank])
    assert st.moments == mine + 3 * 1_024


# ---- communication ---------------------------------------------------------------------
def _sum(collectives, group, op, phase=None):
    cs = [c for c in collectives if c.group == group and c.op == op
          and (phase is None or c.phase == phase)]
    return sum(c.calls for c in cs), sum(c.bytes for c in cs)


def test_all_to_all_bytes_by_hand():
    # micro-batches of b = 2 sequences of T = 16, m = 2, fp32. Each MoE layer, each
    # micro-batch: the 4 token counts (int64, 32 B), the dispatch of b·T·k = 64 slots of
    # d_model 32 (64·32·4 = 8,192 B) and the combine (8,192 B); backward: both again.
    p = plan(cfg(**MOE), gpus=4, dp=4, ep=2, micro_batch=2, global_batch=16)
    cs = p.stages[0].collectives
    assert p.layout.micro_batches == 2
    assert _sum(cs, EXPERT, ALL_TO_ALL, "forward") == (2 * 2 * 3, 2 * 2 * (2 * 8_192 + 32))
    assert _sum(cs, EXPERT, ALL_TO_ALL, "backward") == (2 * 2 * 2, 2 * 2 * 2 * 8_192)
    # under balanced routing (ep − 1)/ep = 1/2 of each payload leaves the rank
    a2a = [c for c in cs if c.group == EXPERT]
    assert all(c.traffic == Fraction(c.bytes, 2) for c in a2a)
    # bf16 mixed precision: Megatron-LM's convention, 2-byte activations on the wire
    bf = plan(cfg(**MOE), precision=BF16, gpus=4, dp=4, ep=2, micro_batch=2, global_batch=16)
    assert _sum(bf.stages[0].collectives, EXPERT, ALL_TO_ALL, "backward")[1] == 2 * 2 * 2 * 4_096
    # ep 4 of 4 ranks: the same payload, 3/4 of it leaves
    p4 = plan(cfg(**MOE), gpus=4, dp=4, ep=4, micro_batch=2, global_batch=16)
    assert [c.bytes for c in p4.stages[0].collectives if c.group == EXPERT] == \
        [c.bytes for c in a2a]
    # ep 1: no all-to-all
    assert not [c for c in plan(cfg(**MOE), gpus=4, dp=4).stages[0].collectives
                if c.group == EXPERT]


def test_capacity_factor_sends_e_times_c_rows():
    # c = 1.25: C = ⌈1.25·64/4⌉ = 20 rows per expert, E·C = 80 rows of 32 fp32 = 10,240 B per
    # all-to-all, padding included; equal splits, so no token counts go first
    p = plan(cfg(**MOE, moe_capacity_factor=1.25), gpus=4, dp=4, ep=2, micro_batch=2,
             global_batch=16)
    cs = p.stages[0].collectives
    assert _sum(cs, EXPERT, ALL_TO_ALL, "forward") == (2 * 2 * 2, 2 * 2 * 2 * 10_240)
    assert _sum(cs, EXPERT, ALL_TO_ALL, "backward") == (2 * 2 * 2, 2 * 2 * 2 * 10_240)


def test_expert_gradients_go_over_the_expert_data_parallel_group():
    # ZeRO-0: DDP all-reduces the dense gradients over the 4 dp ranks (4·(21,216 − 6,144) B),
    # the experts' over the 2 ranks holding the same experts (4·6,144 B)
    cs = plan(cfg(**MOE), gpus=4, dp=4, ep=2).stages[0].collectives
    assert _sum(cs, DATA, ALL_REDUCE)[1] == 4 * (21_216 - 6_144)
    assert _sum(cs, EXPERT_DATA, ALL_REDUCE)[1] == 4 * 6_144
    assert {c.ranks for c in cs if c.group == EXPERT_DATA} == {2}
    # ZeRO-3, m = 1: the experts' units (2 blocks) gathered twice and reduce-scattered over
    # 2 ranks, each 2·(padded shard 1,536) elements of 4 B
    z3 = plan(cfg(**MOE), gpus=4, dp=4, ep=2, zero=3).stages[0].collectives
    assert _sum(z3, EXPERT_DATA, ALL_GATHER) == (2 * 2, 2 * 2 * 2 * 1_536 * 4)
    assert _sum(z3, EXPERT_DATA, REDUCE_SCATTER) == (2, 2 * 2 * 1_536 * 4)
    # ep = dp: each expert lives on one rank, nothing to reduce (FSDP2 skips a 1-rank mesh)
    assert not [c for c in plan(cfg(**MOE), gpus=4, dp=4, ep=4, zero=3).stages[0].collectives
                if c.group == EXPERT_DATA]


# ---- activations and FLOPs: one GPU's under balanced routing --------------------------
@pytest.mark.parametrize("extra", [MOE, {**MOE, "moe_capacity_factor": 1.5}])
def test_balanced_routing_runs_one_gpus_work_on_each_rank(extra):
    # fp32 (no weight copies): each rank runs b·T·k expert rows, so its matmul FLOPs and its
    # saved activations are one GPU's at the same micro-batch (the analysis: 2 × forward
    # for the backward), except that with a capacity factor the received E·C rows are saved
    # without the dispatch buffer's trash row (d_model·4 B per MoE layer)
    c = cfg(**extra)
    ep = plan(c, seq=16, gpus=4, dp=4, ep=2, micro_batch=2, global_batch=8).stages[0]
    one = plan(c, seq=16, gpus=1, micro_batch=2, global_batch=2).stages[0]
    assert ep.flops.forward == one.flops.forward == analyze(c, 16, 2, "forward").matmul_flops()
    trash = 2 * 32 * 4 if "moe_capacity_factor" in extra else 0
    assert ep.activations.total.at(2) == one.activations.total.at(2) - trash


def test_bf16_weight_copies_are_of_the_ranks_experts():
    # autocast's bf16 copy of each matmul weight is saved per micro-batch: the routed experts'
    # are the rank's E/ep = 1 of 4, so 3 experts' 1,536 elements fewer at 2 B, in 2 layers
    c = cfg(**MOE)
    ep4 = plan(c, precision=BF16, gpus=4, dp=4, ep=4).stages[0].activations.weight_copies
    one = plan(c, precision=BF16, gpus=1).stages[0].activations.weight_copies
    assert one.c - ep4.c == 2 * 3 * ONE_EXPERT * 2


# ---- blocks of several kinds; one GPU as the memory model -----------------------------
DEEPSEEK_LIKE = dict(num_experts=8, experts_per_token=2, moe_d_ff=8, num_shared_experts=1,
                     router="sigmoid", router_bias=True, router_groups=4, router_topk_groups=2,
                     routed_scaling_factor=2.5, dense_layers=(0,), q_lora_rank=10,
                     kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6)
KINDS = {"moe": MOE, "deepseek_like": DEEPSEEK_LIKE,
         "capacity": {**MOE, "moe_capacity_factor": 1.0},
         "window_alternating": dict(sliding_window=3, layer_types=("local", "global"))}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_one_gpu_plan_is_the_one_gpu_memory_model(name):
    # the one-GPU memory model (accounting.planning.memory) is a different path to the same
    # bytes: states, buffers, activations, weight copies, each recomputation. One deliberate
    # difference with blocks of several kinds: under recomputation the memory model adds one
    # recomputed block of each kind; the backward pass recomputes one block at a time, so
    # the plan holds the largest one only.
    from accounting.planning.memory import values
    c = cfg(**KINDS[name])
    v = values(c, 16, 2)
    for precision in (FP32, BF16):
        for recompute in ("none", "full", "selective"):
            model = MemoryModel(c, precision, "model", recompute)
            again = [t.bytes.evaluate(v) for t in model.terms if t.name.endswith(", recomputed")]
            p = plan(c, seq=16, precision=precision, gpus=1, micro_batch=2, global_batch=2,
                     recompute=recompute)
            assert p.items_total == model.total(2, 16) - sum(again) + max(again, default=0), \
                (precision.name, recompute)
            assert len(again) == (0 if recompute == "none" else len(set(c.layer_kinds)))


def test_pipeline_stages_hold_their_own_kinds():
    # 4 layers, the first dense (d_ff 48: 3·48·32 = 4,608): stage 0 of 2 holds the dense
    # block, an MoE block and the embedding; stage 1 two MoE blocks, the final gain and head
    c = cfg(**MOE, num_layers=4, dense_layers=(0,))
    p = plan(c, gpus=2, pp=2, global_batch=4, stages=[0, 1])
    dense_block = 4_096 + 64 + 4_608
    moe_block = DENSE_BLOCK + 4 * ONE_EXPERT
    assert [s.states.params for s in p.stages] == [dense_block + moe_block + 3_232,
                                                   2 * moe_block + 32 + 3_232]
    # the stages' forward matmuls add up to one GPU's (the analysis)
    assert sum(s.flops.forward for s in p.stages) == analyze(c, 16, 1, "forward").matmul_flops()


# ---- the layouts that cannot run: one line, exit 2 --------------------------------------
@pytest.mark.parametrize("argv, fragment", [
    (["mistralai/Mixtral-8x7B-v0.1", "--gpus", "6", "--ep", "3"],
     "--ep 3 does not divide the 8 experts"),
    (["deepseek-ai/DeepSeek-V3", "--gpus", "8", "--ep", "16"],
     "--ep 16 does not divide the data-parallel degree 8"),
    (["meta-llama/Llama-3.1-8B", "--gpus", "8", "--ep", "2"], "has no experts"),
    (["mistralai/Mixtral-8x7B-v0.1", "--gpus", "8", "--tp", "2", "--ep", "4"],
     "expert tensor parallelism"),
    (["deepseek-ai/DeepSeek-V3", "--gpus", "8", "--tp", "2"], "expert tensor parallelism"),
    (["deepseek-ai/DeepSeek-V3", "--gpus", "8", "--pp", "8", "--stage-layers", "8,8"],
     "--stage-layers gives 2 numbers; pp 8 needs 8"),
])
def test_impossible_layouts_are_one_line_exit_2(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and fragment in err, err


def test_uneven_fsdp2_dim1_split_is_refused():
    # dp 8, ep 2: 4 ranks hold the same experts and 4·2 > E = 4, so FSDP2 splits dim 1 evenly
    # (torch asserts it): d_e 18 is not divisible by 4
    c = cfg(**{**MOE, "moe_d_ff": 18})
    found = problems(c, Layout(8, dp=8, ep=2, zero=2, global_batch=8), 16)
    assert any("must divide d_e = 18" in f for f in found)
    assert not problems(c, Layout(8, dp=8, ep=2, zero=1, global_batch=8), 16)  # no FSDP2


# ---- Mixtral 8x7B and DeepSeek-V3 -------------------------------------------------------
# Mixtral: N = 46,702,792,704, of which the routed experts 32 layers × 8 × 3·14,336·4,096 =
# 45,097,156,608 and the rest 1,605,636,096 (every dimension divisible by 8, 16 and 32).
MIX_N, MIX_EXPERTS = 46_702_792_704, 45_097_156_608
BF = ["--precision", "bf16-mixed", "--attention", "sdpa", "--ctx", "4096"]


def _json(capsys, *argv) -> dict:
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_mixtral_on_8_h100s_does_not_fit_and_says_by_how_much(capsys):
    # ep 8 = dp: one expert per rank (ZeRO-3 shards the rest over 8): (45,097,156,608 +
    # 1,605,636,096)/8 = 5,837,849,088 parameters, 16 B each with AdamW = 93.4 GB > 80 GiB
    d = _json(capsys, "mistralai/Mixtral-8x7B-v0.1", "--gpus", "8", "--ep", "8", "--zero", "3",
              "--gpu", "H100", "--batch", "8", *BF)
    params = next(i for i in d["stages"][0]["items"] if i["name"].startswith("parameters"))
    assert params["bytes"] == 4 * (MIX_EXPERTS + (MIX_N - MIX_EXPERTS)) // 8 == 4 * 5_837_849_088
    assert d["fit"]["shortfall_bytes"] > 16 * MIX_N // 8 - 80 * 2**30
    code, out, err = run(capsys, "mistralai/Mixtral-8x7B-v0.1", "--gpus", "8", "--ep", "8",
                         "--zero", "3", "--gpu", "H100", "--batch", "8", *BF)
    assert code == 0 and err == "" and "does not fit:" in out and "Routing assumed balanced" in out


def test_mixtral_on_32_h100s_fits(capsys):
    # dp 32, ep 8: each expert on 4 ranks (FSDP2 dim 1: 14,336/4 and 4,096/4), the rest over
    # 32: N/32 parameters, plus FSDP2's padding of each router's 8 rows to ⌈8/32⌉ = 1 row a
    # rank (4,096 instead of 8·4,096/32 = 1,024, in 32 layers); 16 B each ≈ 23.4 GB of states
    d = _json(capsys, "mistralai/Mixtral-8x7B-v0.1", "--gpus", "32", "--ep", "8", "--zero", "3",
              "--recompute", "full", "--gpu", "H100", "--batch", "32", *BF)
    params = next(i for i in d["stages"][0]["items"] if i["name"].startswith("parameters"))
    assert params["bytes"] == 4 * (MIX_N // 32 + 32 * (4_096 - 1_024))
    assert d["fit"]["shortfall_bytes"] == 0 and d["fit"]["largest_micro_batch"] >= 1
    a2a = [c for c in d["stages"][0]["collectives"] if c["group"] == EXPERT]
    # per micro-batch: 32 layers × (2 + 2) all-to-alls of b·T·k·d_model·2 = 4,096·2·4,096·2
    assert sum(c["bytes"] for c in a2a if c["what"] != "token counts per expert (the "
               "dispatch's split sizes)") == 32 * 4 * 4_096 * 2 * 4_096 * 2


def test_deepseek_v3_on_64_h200s(capsys):
    # 671,026,404,352 parameters at 16 B (fp32 weights, gradients, AdamW m and v) are 10.7 TB;
    # 64 H200s hold 9.0 TB: no layout of 64 fits; it says by how much. 128 do.
    n = 671_026_404_352
    d = _json(capsys, "deepseek-ai/DeepSeek-V3", "--gpus", "64", "--ep", "64", "--zero", "3",
              "--recompute", "full", "--gpu", "H200", "--batch", "64", *BF)
    states = sum(i["bytes"] for i in d["stages"][0]["items"] if i["name"].startswith(
        ("parameters", "gradients", "AdamW moments")))
    assert states >= 16 * n // 64
    assert d["fit"]["shortfall_bytes"] > 16 * n // 64 - d["fit"]["usable_bytes"] > 0
    # 4 of the 256 experts a rank; all-to-alls over the 64 ranks of 58 MoE layers
    a2a = [c for c in d["stages"][0]["collectives"] if c["group"] == EXPERT]
    assert {c["ranks"] for c in a2a} == {64}
    assert sum(c["calls"] for c in a2a) == 58 * 5  # counts, dispatch, combine; 2 backward
    d128 = _json(capsys, "deepseek-ai/DeepSeek-V3", "--gpus", "128", "--ep", "64", "--zero", "3",
                 "--recompute", "full", "--gpu", "H200", "--batch", "128", *BF)
    assert d128["fit"]["shortfall_bytes"] == 0


def test_search_tries_expert_parallel_degrees(capsys):
    code, out, _ = run(capsys, "mistralai/Mixtral-8x7B-v0.1", "--gpus", "16", "--search",
                       "--gpu", "H100", "--batch", "16", "--recompute", "full", *BF)
    assert code == 0
    head = next(line for line in out.splitlines() if line.startswith("#"))
    # (a v column, virtual stages, joins after pp when a shown layout interleaves)
    assert [c for c in head.split() if c != "v"][:6] == ["#", "tp", "pp", "dp", "ep", "sp"]
    ep = head.split().index("ep")  # its column (a v column may come before it)
    eps = {r[ep] for r in _ranked(out)}
    assert len(eps) > 1  # several ep among the ranked layouts
    assert "expert tensor parallelism" in out  # tp > 1 rejected with the reason
    fixed = run(capsys, "mistralai/Mixtral-8x7B-v0.1", "--gpus", "16", "--search", "--ep", "4",
                "--gpu", "H100", "--batch", "16", "--recompute", "full", *BF)[1]
    ranked = _ranked(fixed)
    ep = next(line for line in fixed.splitlines() if line.startswith("#")).split().index("ep")
    assert ranked and {r[ep] for r in ranked} == {"4"}


def _ranked(text: str) -> list[list[str]]:
    """The rows of the ranked table: #, tp, pp, dp, ep, …"""
    table = text.split("\n\n")[0].splitlines()
    return [line.split() for line in table if line.split()[:2] and all(
        w.isdigit() for w in line.split()[:5])]


# ---- torch.distributed -------------------------------------------------------------------
# The expert-parallel cases of `python -m accounting.distcheck` (its one run, shared with
# test_distributed.py: tests/conftest.py, distcheck_run): a gloo group of 4 CPU processes on
# the suite's EP case with a capacity factor, and the fake backend's EP cases (Mixtral and
# DeepSeek-V3 shapes, routing dealt evenly); and, in one subprocess here (a fresh
# interpreter: the forked gloo workers need a clean process), a gloo group of 4 processes on
# a dropless case with a real routing.
SCRIPT = """
import json, sys
from accounting.distcheck import suite
from accounting.distcheck.measure import Case
from accounting.distcheck.gloo import run_group
dropless = {k: v for k, v in suite.TINY_MOE.items() if k != "moe_capacity_factor"}
out = run_group([Case(dropless, 4, dp=4, ep=2, zero=3, label="dropless, real routing")])
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def measured(distcheck_run, tmp_path_factory):
    path = tmp_path_factory.mktemp("ep") / "measured.json"
    run_ = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], capture_output=True,
                          text=True, timeout=600)
    assert path.exists(), run_.stderr[-4000:]
    ep = [m for m in distcheck_run["results"] if m["case"]["ep"] > 1]
    return ([m for m in ep if "routing" in m]  # gloo: the capacity case's 4 ranks
            + json.loads(path.read_text())
            + [m for m in ep if "routing" not in m])  # the fake backend's


@pytest.mark.slow
def test_torch_distributed_agrees_with_the_plan(measured):
    from accounting.distcheck.compare import compare, compare_expert_group
    assert len(measured) == 2 * 4 + 2
    for m in measured:
        rows = compare(m)
        wrong = [f"{r.what}: plan {r.planned:,}, torch {r.measured:,}" for r in rows
                 if not r.agrees]
        assert not wrong, (m["case"]["label"], m["case"]["rank"], wrong)
        assert any(r.what.startswith("routed expert parameter") for r in rows)
    real = [m for m in measured if m.get("routing") == "real"]
    for group in (real[0:2], real[2:4]):  # ranks 0, 1 and 2, 3: the EP groups
        rows = compare_expert_group(group)
        assert rows and all(r.agrees for r in rows), [(r.what, r.planned, r.measured) for r in rows]
    # the ranks really were routed unevenly (else the group check would prove nothing)
    assert len({m["flops"]["forward"] for m in real}) > 1


def _a2a(m, phase):
    return sum(c["bytes"] for c in m["collectives"] if (c["group"], c["op"], c["phase"])
               == ("ep", ALL_TO_ALL, phase))


@pytest.mark.slow
def test_torch_distributed_by_hand(measured):
    # the gloo tiny MoE: 2 layers, E = 4 of d_e 24 (3·24·32 = 2,304 each), d_model 32, top-2,
    # T 16, b 1, m 2 micro-batches, fp32; ep 2 of 4 ranks, ZeRO-3
    cap = [m for m in measured if m.get("routing") == "capacity"]
    real = [m for m in measured if m.get("routing") == "real"]
    for m in cap + real:
        # 2 experts a rank per layer (4,608), FSDP2-sharded over 2 ranks on dim 0: 1 each
        assert m["state"]["expert_param_numel"] == 2 * 2_304
    for m in cap:
        # capacity 1.25: C = ⌈1.25·16·2/4⌉ = 10, E·C = 40 rows of 32·4 B = 5,120 B per
        # all-to-all; 2 per layer and micro-batch, each way
        assert _a2a(m, "forward") == _a2a(m, "backward") == 2 * 2 * 2 * 5_120
    for m in real:
        # dropless: the dispatch sends the rank's 32 slots (4,096 B) whatever the routing;
        # the combine returns what its experts ran; the counts are 4 int64
        assert _a2a(m, "forward") - _a2a(m, "backward") == 2 * 2 * 4 * 8
    fwd = sum(_a2a(m, "forward") for m in real[:2])
    assert fwd == 2 * (2 * 2 * (2 * 32 * 32 * 4 + 32))  # two ranks: what is sent is received
    # the fake Mixtral shape (2 layers, ep 4 of 16): 2 experts of 3·14,336·4,096 per layer,
    # FSDP2 dim 1 over 4 ranks: 2 layers × 2 × 3·14,336·4,096/4
    mix = next(m for m in measured if m["case"]["label"].startswith("Mixtral"))
    assert mix["state"]["expert_param_numel"] == 2 * 2 * 3 * 14_336 * 4_096 // 4
    # T 32, b 1, k 2: dispatch 64 rows of 4,096 fp32 = 1 MiB; counts 8 int64
    assert _a2a(mix, "forward") == 2 * (2 * 64 * 4_096 * 4 + 8 * 8)
    # DeepSeek-V3 shape, its one MoE layer: 32 of 256 experts (3·2,048·7,168 each), whole
    ds = next(m for m in measured if m["case"]["label"].startswith("DeepSeek"))
    assert ds["state"]["expert_param_numel"] == 32 * 3 * 2_048 * 7_168
