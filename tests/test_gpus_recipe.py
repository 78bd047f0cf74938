"""Issue 45 ("the recipe changes with --gpus") and issue 44 (the many-GPU memory is the
step's peak): a Hugging Face model is planned with the same recipe on one GPU and on many,
and on one GPU the many-GPU plan's peak is the one-GPU plan's.

Expected values: the one-GPU plan (planning/memory.py MemoryModel.peak_terms, a separate
path measured on CUDA within ±3% by ../shared/gpu/README.md), and hand algebra from
Llama-3.1-8B's published config.json (V = 128,256)."""
import json

from cli_run import run

LLAMA = "meta-llama/Llama-3.1-8B"
V = 128256


def plan_json(capsys, *argv):
    code, out, err = run(capsys, "plan", LLAMA, "--gpu", "H100", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_gpus_1_plans_the_one_gpu_recipe_and_peak(capsys):
    # before the fix: bf16-mixed transformers on one GPU (160.67 GB), fp32 course ops with
    # --gpus 1 (395.63 GB)
    one = plan_json(capsys, "--ctx", "4096")
    many = plan_json(capsys, "--ctx", "4096", "--gpus", "1")
    assert many["precision"] == one["assumptions"]["precision"] == "bf16-mixed"
    assert many["implementation"] == one["assumptions"]["implementation"] == "transformers"
    peak = one["peak"]["peak_bytes"]
    # the same moments: only the one-GPU plan's int64 ids/targets at the backward pass's start
    # and its 0-dim loss differ
    assert abs(many["memory_per_gpu_bytes"] / peak - 1) < 0.001, (many["memory_per_gpu_bytes"], peak)


def test_search_keeps_the_recipe(capsys):
    code, out, err = run(capsys, "plan", LLAMA, "--gpu", "H100", "--ctx", "4096", "--gpus", "8",
                         "--search", "--batch", "8", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert {r["precision"] for r in d["ranked"]} == {"bf16-mixed"}
    assert {r["implementation"] for r in d["ranked"]} == {"transformers"}


def test_fsdp_peak_adds_the_loss_gradients(capsys):
    # 8 GPUs, FSDP, one sequence of 32,768 tokens per rank, full recomputation: the step
    # peaks at the loss's backward, where the fp32 gradients of nll_loss and log_softmax,
    # 2 · 32,768 · V · 4 bytes, are live beside what the items hold
    d = plan_json(capsys, "--ctx", "32768", "--gpus", "8", "--fsdp", "--batch", "8",
                  "--recompute", "full")
    assert d["implementation"] == "transformers" and d["precision"] == "bf16-mixed"
    assert d["peak_moment"].startswith("start of the backward pass")
    s = d["stages"][0]
    moment = next(m for m in s["moments"] if m["name"] == d["peak_moment"])
    assert moment["bytes"] == d["memory_per_gpu_bytes"] == s["peak_bytes"]
    grads = sum(i["bytes"] for i in s["items"] if i["name"].startswith("gradients"))
    assert grads >= 4 * 8030261248 // 8  # FSDP's fp32 shard (rows padded: a little more)
    loss_grads = 2 * 32768 * V * 4
    # one micro-batch per rank: no gradient is live at the loss's backward yet, nor the
    # gradient buffers the head's backward and the blocks' allocate after it (FSDP2's
    # unsharded root and block gradients: pass_grads)
    later = sum(i["bytes"] for i in s["items"] if i["pass_grads"])
    assert later >= 2 * V * 4096  # at least the LM head's unsharded gradient (bf16 or fp32)
    # nor the two blocks of FSDP2's gathered units, each resharded after its forward (tests/
    # test_fsdp_loss_moment.py): by hand a block of Llama 3.1 8B holds 2·4,096² + 2·4,096·
    # 1,024 + 3·4,096·14,336 + 2·4,096 = 218,112,000 parameters, gathered in fp32
    blocks = 2 * 4 * 218_112_000
    assert moment["bytes"] - (s["memory_bytes"] - grads - later - blocks) >= loss_grads
    assert d["memory_per_gpu_items_bytes"] == s["memory_bytes"] < d["memory_per_gpu_bytes"]


def test_implementation_transformers_is_accepted_with_gpus(capsys):
    # was refused ("not in the many-GPU plans yet")
    d = plan_json(capsys, "--ctx", "4096", "--gpus", "8", "--fsdp", "--batch", "8",
                  "--implementation", "transformers")
    assert d["implementation"] == "transformers"
    course = plan_json(capsys, "--ctx", "4096", "--gpus", "8", "--fsdp", "--batch", "8",
                       "--implementation", "course")
    assert course["implementation"] == "course" and course["precision"] == "bf16-mixed"


def test_reserved_beside_allocated_in_the_json(capsys):
    # issue 44's contract: one GPU adds .peak.reserved_bytes, many GPUs
    # .memory_per_gpu_reserved_bytes, each at least the allocated peak (a segment holds
    # its blocks; tests/test_allocator.py checks the packing against an H200)
    one = plan_json(capsys, "--ctx", "4096")
    assert one["peak"]["reserved_bytes"] >= one["peak"]["peak_bytes"]
    many = plan_json(capsys, "--ctx", "4096", "--gpus", "8", "--fsdp", "--batch", "8")
    assert many["memory_per_gpu_reserved_bytes"] >= many["memory_per_gpu_bytes"]
    # beyond the segments' rounding (at most 2 MiB a tensor: well under 1% of this peak),
    # FSDP2's side streams' segments (parallel/fsdp_streams.py): the previous step's fp32
    # gradient shards, freed by zero_grad before the forward, in the reduce-scatter
    # stream's pool, 4·N/8 bytes of Llama-3.1-8B's N = 8,030,261,248 parameters (a shard's
    # rows padded: a little more); and the copy-in stream's two flat fp32 all-gather
    # outputs of the forward, the root unit's (embedding and head, 2·128,256·4,096, and the
    # final norm's 4,096) and the first block's (218,112,000 elements), by hand
    spare = many["memory_per_gpu_reserved_bytes"] - many["memory_per_gpu_bytes"]
    pools = 4 * 8030261248 // 8 + 4 * (2 * 128256 * 4096 + 4096) + 4 * 218_112_000
    assert pools <= spare < 0.01 * many["memory_per_gpu_bytes"] + pools * 1.001


def test_torchtitan_pp_keeps_the_stage_gathered_and_accumulates_unsharded(capsys):
    # torchtitan's reshard_after_forward policy "default" = not pp_enabled, and pipelining's
    # set_requires_gradient_sync(False) until the last micro-batch (stacks.py, buffers.py).
    # Stage 0 of Llama-3.1-8B over pp 2: 16 blocks of 2·d² + 2·d·h_kv·d_k + 3·d·d_ff + 2·d
    # = 218,112,000 elements and the V·d = 525,336,576 embedding: 4,015,128,576 elements,
    # gathered in bf16 (dp 4 divides every row count: no padding)
    d = plan_json(capsys, "--stack", "torchtitan", "--gpus", "8", "--pp", "2", "--fsdp",
                  "--batch", "16", "--ctx", "8192", "--recompute", "full")
    s0 = next(s for s in d["stages"] if s["stage"] == 0)
    stage = 16 * (2 * 4096 ** 2 + 2 * 4096 * 8 * 128 + 3 * 4096 * 14336 + 2 * 4096) + V * 4096
    assert stage == 4_015_128_576
    gathered = next(i for i in s0["items"] if i["name"].startswith("FSDP2 all-gathered"))
    assert gathered["bytes"] == 2 * stage
    grads = next(i for i in s0["items"] if "accumulated over the micro-batches" in i["name"])
    assert grads["bytes"] >= 4 * stage
