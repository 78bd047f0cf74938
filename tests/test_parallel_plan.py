"""The multi-GPU planner (accounting.planning.parallel), without torch.

Expected values are hand algebra written here (tensor by tensor, collective by collective),
or a different path through the library (the one-GPU analysis and memory model), never the
planner's own output. tests/test_distributed.py checks the same plans on torch.distributed;
tests/test_parallel_literature.py holds the papers' figures.
"""
import json
import subprocess
import sys
from fractions import Fraction

import pytest

from accounting import analyze, get_preset
import cli_run
from accounting.planning.gpus import interconnect
from accounting.planning.memory import MemoryModel, get_precision
from accounting.planning.parallel import Layout, parallel_plan, problems
from accounting.planning.parallel.comms import ALL_GATHER, ALL_REDUCE, DATA, REDUCE_SCATTER, TENSOR
from accounting.planning.parallel.states import zero1_partition
from accounting.planning.plan import hardware

FP32, BF16 = get_precision("fp32"), get_precision("bf16-mixed")
XL = get_preset("gpt2-xl")  # CS336 shape: V 50,257, d 1,600, d_ff 6,400, 48 layers, untied
LLAMA = get_preset("meta-llama/Llama-3.1-8B")  # V 128,256, d 4,096, h 32, h_kv 8, d_ff 14,336
V, D, DFF, L = 50_257, 1_600, 6_400, 48


def ceil(a, b):
    return -(-a // b)


def plan(config, seq=1024, **kw):
    # these tests work the step time out by hand at MFU 0.5 (issue 39: an override now;
    # without it the stages' rate is predicted from measured kernels, tests/test_timing.py)
    kw_mfu = kw.pop("mfu", "0.5")
    gpu = kw.pop("gpu", None)
    precision = kw.pop("precision", FP32)
    kw.setdefault("global_batch", kw.get("dp", 1) * kw.get("micro_batch", 1))
    lo = Layout(**kw)
    return parallel_plan(config, lo, seq, precision=precision,
                         hardware=hardware(gpu, compute=precision.compute) if gpu else None,
                         net=interconnect(gpu) if gpu else None, mfu=kw_mfu)


def run(capsys, *argv):
    return cli_run.run(capsys, "plan", *argv)


# ---- model states by sharding stage -------------------------------------------------------
def test_zero3_shards_every_tensor_by_rows_with_fsdp_padding():
    # FSDP2 pads each tensor's first dimension to ⌈rows/8⌉ rows per rank.
    d = 8
    block = (ceil(D, d)  # ln1 gain
             + 4 * ceil(D, d) * D  # Q, K, V, output projection (d × d)
             + ceil(D, d)  # ln2 gain
             + 2 * ceil(DFF, d) * D  # W1, W3 (d_ff × d)
             + ceil(D, d) * DFF)  # W2 (d × d_ff)
    padded = 2 * ceil(V, d) * D + L * block + ceil(D, d)  # embedding, LM head, final gain
    p = plan(XL, gpus=8, dp=8, zero=3)
    st = p.stages[0].states
    assert st.params == padded
    assert st.grads == padded and st.moments == padded  # rank 0 holds full ⌈rows/d⌉ rows
    # the last rank holds V − 7·6,283 = 6,276 rows of each table: 7 fewer rows × 2 tables
    last = parallel_plan(XL, Layout(8, dp=8, zero=3, global_batch=8), 1024, precision=FP32,
                         dp_rank=7).stages[0].states
    assert last.moments == padded - 2 * 7 * D and last.params == padded


def test_stages_shard_one_more_state_each():
    n = 2_127_057_600  # tests/test_presets.py derives it by hand
    z0, z2 = (plan(XL, gpus=8, dp=8, zero=z).stages[0] for z in (0, 2))
    items0 = {i.name: i.bytes.at(1) for i in z0.items}
    assert items0["parameters (fp32)"] == items0["gradients (fp32)"] == 4 * n
    assert items0["AdamW moments: first moment m (fp32)"] == 4 * n
    assert items0["DDP grad buckets"] == 4 * n  # a flat copy of the gradients
    items2 = {i.name: i.bytes.at(1) for i in z2.items}
    # ZeRO-2 under FSDP2 keeps every unit gathered from its forward to its backward pass
    assert items2["FSDP2 gathered fp32 units (every unit, forward to backward)"] == 8 * z2.states.params * 4
    z1 = plan(XL, gpus=8, dp=8, zero=1).stages[0].states
    assert z1.params == z1.grads == n and z1.moments < n


def test_zero1_partition_is_torchs_greedy_rule():
    # largest first, each to the least-loaded rank (the first on a tie):
    # 5 → r0 (5, 0); 3 → r1 (5, 3); 3 → r1 (5, 6); 2 → r0 (7, 6); 1 → r1 (7, 7)
    assert zero1_partition([5, 3, 3, 2, 1], 2) == [[0, 3], [1, 2, 4]]
    sizes = [7, 7, 3, 9, 1, 1, 4]
    owned = zero1_partition(sizes, 3)
    assert sorted(i for o in owned for i in o) == list(range(len(sizes)))  # each tensor once


def test_tensor_parallel_splits_heads_d_ff_and_vocabulary():
    # Llama 3.1 8B at tp 8: Q (4,096 × 4,096) and O split by heads, K and V (1,024 × 4,096) by
    # KV heads, W1/W2/W3 (14,336 × 4,096) by d_ff, the tables by rows (128,256/8 = 16,032);
    # the 4,096-wide norm gains are replicated.
    per_layer = (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14_336 * 4096) // 8 + 2 * 4096
    expected = 32 * per_layer + 2 * 16_032 * 4096 + 4096
    st = plan(LLAMA, seq=4096, gpus=8, tp=8).stages[0].states
    assert st.params == st.stage_numel == expected == 1_004_015_616


def test_uneven_vocabulary_split_follows_torch_chunk():
    # GPT-2 small's shape at tp 4: 50,257 rows give 12,565 to ranks 0-2 and 12,562 to rank 3;
    # the LM head's forward matmul on a rank is 2·T·d·rows (T 64, d 768)
    small = get_preset("gpt2-small")
    f = {r: parallel_plan(small, Layout(4, tp=4), 64, precision=FP32, tp_rank=r).stages[0]
         for r in (0, 3)}
    assert f[0].flops.forward - f[3].flops.forward == 2 * 64 * 768 * (12_565 - 12_562)
    assert f[0].states.params - f[3].states.params == 2 * 3 * 768  # embedding and LM head


# ---- FLOPs ---------------------------------------------------------------------------------
def test_tp_and_pp_split_the_one_gpu_flops_exactly():
    # a different path: the one-GPU analysis (accounting.analysis.workload), forward matmul FLOPs
    one = analyze(LLAMA, 2048, 2).matmul_flops()
    p = plan(LLAMA, seq=2048, gpus=8, tp=8, micro_batch=2, global_batch=2)
    assert 8 * p.stages[0].flops.forward == one  # V = 128,256 divides by 8
    assert p.stages[0].flops.backward == 2 * p.stages[0].flops.forward
    stages = parallel_plan(XL, Layout(4, pp=4, global_batch=4), 1024, precision=FP32,
                           stages=[0, 1, 2, 3]).stages
    assert sum(s.flops.forward for s in stages) == analyze(XL, 1024, 1).matmul_flops()


def test_recomputation_flops():
    base = plan(XL, gpus=1).stages[0].flops
    full = plan(XL, gpus=1, recompute="full").stages[0].flops
    sel = plan(XL, gpus=1, recompute="selective").stages[0].flops
    a = analyze(XL, 1024, 1)
    # full: the blocks' forward again — everything but the LM head (2·T·d·V) and W2
    # (2·T·d·d_ff per layer): torch's checkpoint stops recomputing once every saved tensor
    # of the block is back, and nothing saves W2's output
    assert full.recompute == a.matmul_flops() - 2 * 1024 * D * V - L * 2 * 1024 * D * DFF
    # selective: QKᵀ again (2·h·T²·d_k = 2·T²·d per layer); scores·V's output is saved by
    # nothing, so the recomputation stops before it
    assert sel.recompute == L * 2 * 1024 * 1024 * D
    assert base.recompute == 0


def test_pipeline_bubble():
    p = plan(XL, gpus=4, pp=4, micro_batch=1, global_batch=8)
    assert p.bubble == Fraction(3, 11)  # (p − 1)/(m + p − 1), m = 8


# ---- activations ---------------------------------------------------------------------------
def test_one_gpu_activations_match_the_memory_model():
    # the one-GPU memory model (accounting.planning.memory) is a different path to the same
    # saved tensors
    for config in (XL, get_preset("openai-community/gpt2"), LLAMA):
        for precision in (FP32, BF16):
            mm = MemoryModel(config, precision).at(2, 512)
            # its activations, and autocast's bf16 weight copies (saved by the matmuls)
            acts = sum(i.bytes for i in mm.items if i.name.startswith("activations")
                       or i.name == "bf16 copies of the matmul weights")
            p = plan(config, seq=512, gpus=1, micro_batch=2, global_batch=2, precision=precision)
            assert p.stages[0].activations.total.at(2) == acts


def test_one_gpu_plan_is_the_one_gpu_memory_model():
    # on one GPU the whole per-GPU total (states, RoPE tables, activations, weight copies)
    # is the one-GPU memory model's sum, and its peak the one-GPU model's peak, with each recomputation. (Not bf16 with selective
    # recomputation on GPT-2: the one-GPU model's consistency check trips there, because the
    # checkpointed core keeps the biased projections' fp32 outputs where the plain run saves
    # bf16 casts of them — more bytes of one dtype, fewer of the other.)
    for config in (XL, get_preset("openai-community/gpt2"), get_preset("meta-llama/Llama-3.2-1B")):
        for precision in (FP32, BF16, get_precision("bf16"), get_precision("bf16-master")):
            for recompute in ("none", "full", "selective"):
                if config.qkv_bias and precision is BF16 and recompute == "selective":
                    continue
                model = MemoryModel(config, precision, "model", recompute)
                p = plan(config, seq=512, gpus=1, micro_batch=2, global_batch=2,
                         precision=precision, recompute=recompute)
                assert p.items_total == model.total(2, 512)
                # issue 44: what must fit is the step's peak, found at the one-GPU model's
                # moments (tests/test_peak.py measures them on a CPU step)
                assert p.memory == model.peak(2, 512), (config.name, precision.name, recompute)


def test_first_pipeline_stage_holds_p_micro_batches():
    p = parallel_plan(XL, Layout(4, pp=4, global_batch=8), 1024, precision=FP32,
                      stages=[0, 1, 2, 3])
    assert [s.activations.in_flight for s in p.stages] == [4, 3, 2, 1]
    few = parallel_plan(XL, Layout(4, pp=4, global_batch=2), 1024, precision=FP32)
    assert few.stages[0].activations.in_flight == 2  # m = 2 < p


# ---- communication -------------------------------------------------------------------------
def _sum(collectives, group, op):
    cs = [c for c in collectives if c.group == group and c.op == op]
    return sum(c.calls for c in cs), sum(c.bytes for c in cs)


def test_tensor_parallel_collectives_per_step():
    # GPT-2 small's shape (12 layers, d 768), tp 4, 2 micro-batches of 1 × 64 tokens, fp32:
    # without SP, per micro-batch 2 all-reduces per layer forward (+1 for the vocab-parallel
    # embedding) and 2 backward (+1 for the LM head's input), of T·d·4 bytes; the
    # cross-entropy adds 3 all-reduces of T·4 bytes.
    x = 64 * 768 * 4
    p = plan(get_preset("gpt2-small"), seq=64, gpus=4, tp=4, micro_batch=1, global_batch=2)
    cs = p.stages[0].collectives
    assert _sum(cs, TENSOR, ALL_REDUCE) == (2 * (2 * 12 + 1 + 2 * 12 + 1 + 3),
                                            2 * ((2 * 12 + 1 + 2 * 12 + 1) * x + 3 * 64 * 4))
    # with SP: each all-reduce becomes an all-gather plus a reduce-scatter (same bytes each)
    sp = plan(get_preset("gpt2-small"), seq=64, gpus=4, tp=4, sp=True, global_batch=2).stages[0]
    assert _sum(sp.collectives, TENSOR, ALL_GATHER) == (2 * 50, 2 * 50 * x)
    assert _sum(sp.collectives, TENSOR, REDUCE_SCATTER) == (2 * 50, 2 * 50 * x)


def test_fsdp_collectives_per_step():
    # GPT-2 XL shape on 8 GPUs, ZeRO-3, 3 micro-batches: each block unit all-gathered in the
    # forward and again in the backward, and reduce-scattered, once per micro-batch; payload
    # d·Σ⌈rows/d⌉·cols·4.
    d, m = 8, 3
    block = d * (2 * ceil(D, d) + 4 * ceil(D, d) * D + 2 * ceil(DFF, d) * D + ceil(D, d) * DFF)
    root = d * (2 * ceil(V, d) * D + ceil(D, d))
    p = plan(XL, gpus=8, dp=8, zero=3, global_batch=24)
    assert p.layout.micro_batches == m
    calls, nbytes = _sum(p.stages[0].collectives, DATA, ALL_GATHER)
    assert (calls, nbytes) == (2 * m * (L + 1), 2 * m * (L * block + root) * 4)
    assert _sum(p.stages[0].collectives, DATA, REDUCE_SCATTER) == (m * (L + 1), m * (L * block + root) * 4)


def test_ddp_all_reduces_the_gradients_once_per_step():
    p = plan(XL, gpus=8, dp=8, zero=0, global_batch=32)
    calls, nbytes = _sum(p.stages[0].collectives, DATA, ALL_REDUCE)
    assert nbytes == 4 * 2_127_057_600
    # 1 MiB first bucket, then 25 MiB buckets
    assert calls == 1 + ceil(4 * 2_127_057_600 - 2**20, 25 * 2**20)


def test_ring_traffic():
    p = plan(XL, gpus=8, dp=8, zero=0, global_batch=8)
    ar = next(c for c in p.stages[0].collectives if c.op == ALL_REDUCE)
    assert ar.traffic == Fraction(2 * 7 * ar.bytes, 8)


# ---- step time -----------------------------------------------------------------------------
def test_step_time_by_hand():
    # one pipeline of 2 stages on one node of H100s, fp32 FLOPs at MFU 0.5 (33.5 TFLOP/s):
    # critical path = (m + p − 1) × (compute + send) of the slowest (last) stage
    p = plan(XL, gpus=2, pp=2, micro_batch=1, global_batch=4, gpu="H100")
    last = p.stages[-1]
    rate = Fraction(67 * 10**12, 2)
    send = Fraction(1024 * D * 4, 450 * 10**9)  # one activation message over NVLink
    expected = (4 + 2 - 1) * (Fraction(last.flops.per_micro_batch) / rate + send)
    assert p.time.pipeline_path == expected
    assert p.time.seconds == expected + Fraction(max(s.flops.adamw for s in p.stages)) / rate


# ---- validation and the CLI --------------------------------------------------------------
@pytest.mark.parametrize("argv, fragment", [
    (["gpt2-xl", "--gpus", "8", "--tp", "2"], "does not divide the 25 attention heads"),
    (["meta-llama/Llama-3.1-8B", "--gpus", "16", "--tp", "16"], "does not divide the 8 key/value heads"),
    (["gpt2-xl", "--gpus", "64", "--pp", "64"], "each chunk needs a layer at least"),
    (["gpt2-xl", "--gpus", "8", "--dp", "4"], "not --gpus 8"),
    (["gpt2-xl", "--gpus", "8", "--pp", "3"], "not divisible by tp 1 × pp 3"),
    (["gpt2-xl", "--gpus", "8", "--batch", "64", "--micro-batch", "3"], "micro-batch 3 does not divide"),
    (["gpt2-xl", "--gpus", "8", "--batch", "12"], "not divisible by dp 8"),
    (["gpt2-xl", "--gpus", "8", "--ep", "2"], "has no experts"),
    (["gpt2-xl", "--gpus", "8", "--sp"], "needs --tp > 1"),
    (["gpt2-xl", "--tp", "5"], "give --gpus N"),
    (["gpt2-xl", "--gpus", "8", "--zero", "3", "--fsdp"], "not allowed with"),
    (["gpt2-xl", "--gpus", "8", "--search"], "give --gpu NAME"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and fragment in err, err


def test_does_not_fit_is_an_answer(capsys):
    code, out, err = run(capsys, "gpt2-xl", "--gpus", "2", "--batch", "2", "--gpu", "A100-40GB")
    assert code == 0 and err == ""
    assert "does not fit:" in out and "over the" in out


def test_fsdp_names_the_stage_and_means_the_same(capsys):
    a = run(capsys, "gpt2-xl", "--gpus", "8", "--fsdp", "--gpu", "H100", "--format", "json")[1]
    b = run(capsys, "gpt2-xl", "--gpus", "8", "--zero", "3", "--gpu", "H100", "--format", "json")[1]
    assert json.loads(a) == json.loads(b)
    text = run(capsys, "gpt2-xl", "--gpus", "8", "--fsdp", "shard_grad_op")[1]
    assert "ZeRO-2 = FSDP SHARD_GRAD_OP" in text


def test_json_is_exact_and_csv_has_rows(capsys):
    code, out, _ = run(capsys, "meta-llama/Llama-3.1-8B", "--gpus", "8", "--tp", "8", "--ctx",
                       "4096", "--format", "json")
    data = json.loads(out)
    params = next(i for i in data["stages"][0]["items"] if i["name"] == "parameters (fp32)")
    assert params["bytes"] == 4 * 1_004_015_616  # test_tensor_parallel_splits_heads_d_ff_...
    code, out, _ = run(capsys, "gpt2-xl", "--gpus", "8", "--zero", "3", "--format", "csv")
    assert code == 0 and out.startswith("model,gpus,tp,pp,dp,sp,zero,")


def test_search_ranks_and_explains(capsys):
    code, out, _ = run(capsys, "gpt2-xl", "--gpus", "8", "--search", "--gpu", "A100", "--batch", "64",
                       "--mfu", "0.5")
    assert code == 0
    assert "Layouts for 8 GPUs" in out and "Rejected layouts" in out
    # the first line names what is planned: the precision (gpt2-xl, a course preset: fp32, the
    # course's default), the GPU (A100 is the A100-80GB card) and the MFU (0.5 unless given)
    assert out.splitlines()[0].endswith("fastest first (fp32, A100-80GB at MFU 0.5)")
    assert "tp 2 does not divide the 25 attention heads" in out
    assert "pp 8 does not divide" not in out  # 48 = 8 × 6: a valid pipeline


def test_layout_problems_lists_every_reason():
    # (pp 5 no longer refuses 48 layers: an uneven split is chosen; 49 stages would leave one
    # without a layer)
    lo = Layout(8, tp=2, pp=49, dp=1, global_batch=3, micro_batch=2)
    found = problems(XL, lo, 1024)
    assert any("attention heads" in f for f in found) and any("layers" in f for f in found)
    assert any("GPUs" in f for f in found)


def test_plan_imports_no_torch():
    code = ("import sys; import accounting.planning.parallel as p; from accounting.cli "
            "import plan; print(sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_frames_hold_exact_integers():
    from accounting.planning.parallel import plan_frame, search_frame
    df = plan_frame("meta-llama/Llama-3.1-8B", gpus=8, tp=8, seq=4096)
    row = df[(df.section == "memory") & (df["item"] == "parameters (fp32)")].iloc[0]
    assert row["value"] == 4 * 1_004_015_616 and isinstance(row["value"], int)
    s = search_frame("gpt2-xl", 8, batch=64, gpu="A100")
    assert s[s.fits]["step_seconds"].is_monotonic_increasing
    assert s[~s.fits]["reason"].str.contains("attention heads").any()


@pytest.mark.parametrize("switch", ["--sp", "--search", "--hfu", "--compare-formulas",
                                    "--async-tp"])
def test_a_many_gpu_switch_on_one_gpu_is_refused(capsys, switch):
    """Regression (a flag accepted and ignored, exit 0): check_single took a switch's True for
    the degree 1 (True == 1), so `plan MODEL --sp` (or --search, --hfu, --compare-formulas)
    planned one GPU as if it were not given; --async-tp was in no list at all."""
    line = cli_run.refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.1-8B", "--ctx",
                                       "4096", switch, expected=f"{switch} ")
    assert "--gpus N" in line


@pytest.mark.parametrize("flags,expected", [
    (("--prepare-kbit-training",), "--prepare-kbit-training is QLoRA's"),
    (("--no-double-quant",), "--no-double-quant is QLoRA's"),
    (("--lora-targets", "q_proj"), "--lora-targets describes LoRA adapters"),
    (("--search", "--prepare-kbit-training"), "--prepare-kbit-training is QLoRA's")])
def test_a_qlora_companion_without_lora_is_refused_on_many_gpus(capsys, flags, expected):
    """Regression (a flag accepted and ignored, exit 0): the many-GPU planner returned no
    fine-tuning before reading the LoRA flags when --lora-rank and --base-weights were
    absent, so `plan MODEL --gpus 16 --prepare-kbit-training` planned full training as if
    the flag were not given; one GPU refused it (plan_finetune.plan_kwargs)."""
    line = cli_run.refused_in_one_line(capsys, "plan", "Qwen/Qwen3-0.6B", "--ctx", "4096",
                                       "--gpus", "16", *flags, expected=expected)
    assert "--lora-rank R" in line
