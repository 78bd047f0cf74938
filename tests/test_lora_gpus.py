"""LoRA on many GPUs (plan --gpus with --lora-rank; planning/parallel/lora_states.py) against
torch.distributed's fake backend: PEFT's LoRA injected into model.TransformerLM, the base
frozen as PeftModel freezes it, sharded with FSDP2 (accounting/distcheck/fake.py, one rank of
8 per forked process), one step of AdamW over the adapters. Each rank's parameter, gradient
and AdamW bytes, its matmul FLOPs (FlopCounterMode) and its collectives must be the plan's.
"""
import json
import subprocess
import sys
from fractions import Fraction

import pytest

from accounting.distcheck.compare import config_of
from cli_run import refused_in_one_line
from accounting.planning.finetune import LoRA, resolve
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.lora_states import lora_states
from accounting.planning.parallel.plan import parallel_plan
from accounting.planning.precisions import get_precision
from accounting.runtime.errors import UsageError

# d 96, h 4 (d_k 24), d_ff 250, 2 blocks, V 1,000; r 6 over 8 ranks: lora_A's 6 rows leave
# ranks 6 and 7 with empty shards, d_ff = 250 rows split 32 × 7 + 26 (uneven padding)
MODEL = {"vocab_size": 1000, "context_length": 64, "num_layers": 2, "d_model": 96,
         "num_heads": 4, "d_ff": 250}
R, D, F, V, L = 6, 96, 250, 1000, 2
# hand algebra (PEFT: lora_A r × d_in, lora_B d_out × r, on q, k, v, o, w1, w2, w3):
# q, k, v, o: 4 · r·(96 + 96); w1, w3: 2 · r·(96 + 250); w2: r·(250 + 96)
N_LORA = L * (4 * R * (D + D) + 3 * R * (D + F))
# base: per block Q, K, V, O 4·96², W1..W3 3·96·250, two RMSNorm gains 2·96; embedding and
# LM head 2·1,000·96 (untied), final gain 96
N_BASE = L * (4 * D * D + 3 * D * F + 2 * D) + 2 * V * D + D
CASE = dict(world=8, dp=8, seq=16, micro_batch=1, micro_batches=2, lora_rank=R)


# One fresh interpreter runs both engines (the fake process group and the forked gloo
# workers need a clean process): first DDP on a gloo group of two processes, forked before
# anything else is done there (as `python -m accounting.distcheck` orders them), then the
# fake-backend ranks through accounting.distcheck.fake's main() (what `python -m
# accounting.distcheck.fake CASE ...` runs), each result a JSON line tagged with its engine.
# PEFT, which both import (about 7 s of CPU with transformers), is imported once there; the
# gloo run was in this process, which imported it a second time.
_BOTH = """
import json, sys
from accounting.distcheck import fake
from accounting.distcheck.gloo import run_group
from accounting.distcheck.measure import Case
for m in run_group([Case(**json.loads(sys.argv[1]))]):
    print("gloo " + json.dumps(m), flush=True)
print("fake", end=" ", flush=True)
sys.exit(fake.main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def both():
    """{"fake": ranks 0 and 7 under FSDP2 (reshard_after_forward True), rank 0 under zero 2;
    "gloo": the two DDP ranks}, from one subprocess (_BOTH)."""
    cases = [dict(model=MODEL, zero=3, rank=0, **CASE), dict(model=MODEL, zero=3, rank=7, **CASE),
             dict(model=MODEL, zero=2, rank=0, **CASE)]
    ddp = dict(model=MODEL, world=2, dp=2, zero=0, seq=16, micro_batches=2, lora_rank=R)
    run = subprocess.run([sys.executable, "-c", _BOTH, json.dumps(ddp), *map(json.dumps, cases)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = {"fake": [], "gloo": []}
    engine = None
    for line in run.stdout.splitlines():
        head, _, rest = line.partition(" ")
        if head in out:
            engine, line = head, rest
        if line.startswith("{"):
            out[engine].append(json.loads(line))
    assert len(out["gloo"]) == 2 and len(out["fake"]) == len(cases), run.stdout[-2000:]
    return out


@pytest.fixture(scope="module")
def measured(both):
    return both["fake"]


def _ft():
    return resolve(config_of(MODEL), LoRA(rank=R))


def _plan(zero, dp_rank, gpus=8):
    lo = Layout(gpus, dp=gpus, zero=zero, global_batch=2 * gpus)
    return parallel_plan(config_of(MODEL), lo, 16, precision=get_precision("fp32"),
                         dp_rank=dp_rank, finetune=_ft()).stages[0]


def test_adapter_and_base_counts_by_hand():
    ft = _ft()
    assert ft.adapter_count() == N_LORA
    s = lora_states(ft, Layout(8, dp=8, zero=0, global_batch=8))
    # DDP: every rank holds it all; fp32 base (the compute dtype), fp32 adapters
    assert (s.base_numel, s.adapter_numel) == (N_BASE, N_LORA)
    assert s.total_bytes == 4 * N_BASE + 4 * N_LORA + 4 * N_LORA + 2 * 4 * N_LORA
    assert s.step_counters == 7 * 2 * L  # lora_A and lora_B of 7 linears per block


def test_bf16_base_under_bf16_mixed():
    ft = resolve(config_of(MODEL), LoRA(rank=R), None, "cuda")
    s = lora_states(ft, Layout(8, dp=8, zero=0, global_batch=8))
    assert (s.base_bytes, s.adapter_bytes) == (2 * N_BASE, 4 * N_LORA)


def _compare(m, gpus):
    """The plan of the measured rank against torch's: states, matmul FLOPs, collectives."""
    case = m["case"]
    s = _plan(case["zero"], case["rank"], gpus)
    shards = ", FSDP shards" if case["zero"] >= 2 else ""
    items = {i.name: i.bytes.at(1) for i in s.items}
    st = m["state"]
    base = items[f"frozen base (fp32{shards}; no gradient, no optimizer state)"]
    adapters = items[f"LoRA adapters (fp32{shards})"]
    assert base + adapters == st["param_bytes"]  # FSDP2's padded shards, frozen ones too
    assert items[f"gradients of the adapters (fp32{shards})"] == st["grad_bytes"]
    assert (items["AdamW first moment m of the adapters (fp32)"]
            + items["AdamW second moment v of the adapters (fp32)"]) == st["moment_bytes"]
    assert st["step_counters"] == 7 * 2 * L
    # a frozen linear computes no weight gradient: backward < 2 × forward
    assert 2 * s.flops.forward == m["flops"]["forward"]
    assert 2 * s.flops.backward == m["flops"]["backward"] < 2 * m["flops"]["forward"]
    planned = {}
    for c in s.collectives:
        acc = planned.setdefault((c.op, c.phase), [0, 0])
        acc[0] += c.calls
        acc[1] += c.bytes
    got = {(c["op"], c["phase"]): [c["calls"], c["bytes"]] for c in m["collectives"]}
    assert planned == got
    return got


@pytest.mark.parametrize("index", [0, 1, 2])
def test_states_flops_and_collectives_equal_torch_fsdp2(measured, index):
    got = _compare(measured[index], 8)
    # the root unit holds no adapter: FSDP2 reduce-scatters the blocks' gradients only
    assert got[("reduce-scatter", "backward")][0] == 2 * L


@pytest.mark.slow
def test_ddp_on_a_gloo_group_reduces_the_adapters_gradients_only(both):
    """Two CPU processes, DDP (accounting/distcheck/gloo.py): each holds the whole model."""
    out = both["gloo"]
    assert [m["case"]["rank"] for m in out] == [0, 1]
    for m in out:
        got = _compare(m, 2)
        # one all-reduce per step (no_sync for the other micro-batch): 4·N_LoRA bytes
        assert got[("all-reduce", "backward")][1] == 4 * N_LORA
        assert m["state"]["param_bytes"] == 4 * (N_BASE + N_LORA)  # by hand, above


def test_uneven_shards_rank_7_holds_less_optimizer_state(measured):
    r0, r7 = (m["state"] for m in measured[:2])
    assert r0["param_bytes"] == r7["param_bytes"]  # padded alike
    assert r7["moment_bytes"] < r0["moment_bytes"]  # lora_A's 6 rows: none on rank 7


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "accounting", "plan", "gpt2-small",
                           "--gpus", "8", "--lora-rank", "16", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_plans_lora_on_8_gpus_and_reports_json():
    run = _cli("--fsdp", "full_shard", "--precision", "bf16-mixed", "--format", "json")
    assert run.returncode == 0, run.stderr[-2000:]
    data = json.loads(run.stdout)
    text = json.dumps(data)
    assert "LoRA adapters (fp32, FSDP shards)" in text and "frozen base (bf16" in text


@pytest.mark.parametrize("flags, word", [(("--cp", "2"), "--cp"), (("--zero", "1"), "--zero 1"),
                                         (("--base-weights", "nf4", "--precision", "bf16-mixed",
                                           "--pp", "2"), "QLoRA")])
def test_cli_refuses_what_is_not_planned_in_one_line(capsys, flags, word):
    # main() in this process (the JSON run above is the one in a fresh process)
    refused_in_one_line(capsys, "plan", "gpt2-small", "--gpus", "8", "--lora-rank", "16",
                        *flags, expected=word)


def test_api_refuses_qlora_with_tp_and_lora_with_cp():
    ft = resolve(config_of(MODEL), LoRA(rank=R), None, "cuda", "nf4")
    with pytest.raises(UsageError):
        lora_states(ft, Layout(8, tp=2, dp=4, zero=3, global_batch=8))
    with pytest.raises(UsageError):
        lora_states(_ft(), Layout(8, cp=2, dp=4, zero=3, global_batch=8))
    assert Fraction(_ft().lora.alpha) == 8
