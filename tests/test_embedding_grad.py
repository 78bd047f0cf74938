"""The vocab-parallel embedding's gradient under FSDP2 × TP (issue 44; planning/parallel/
buffers.py _fsdp_embedding), held to torch run on the CPU: one rank of 8 (dp 2 × tp 4) on
torch's fake process group, in a fresh interpreter (tests/embedding_grad_measure.py).

Expected values: measured (the shapes and dtypes of the ops' outputs, FSDPMemTracker's
live bytes, FSDP2's accumulated gradient under no-sync), turned into bytes by hand
(elements × the measured dtype's size). Before, the plan counted 4·(V − ⌈V/tp⌉)·d_model
bytes of fp32 at every block's backward of the first stage; measured: the whole V×d_model
gradient in bf16, live from the embedding's backward (the stage's last node) through the
root unit's post-backward, and under pipelining's no-sync an fp32 accumulation of the
whole table."""
import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from accounting.architecture.config import ModelConfig
from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import TORCHTITAN, get_stack

ROOT = Path(__file__).resolve().parents[1]
SIZE = {"bfloat16": 2, "float32": 4}


@lru_cache(maxsize=1)
def _measured() -> dict:
    pytest.importorskip("torch")
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "embedding_grad_measure.py")],
                         capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def _bytes(output) -> int:
    shape, dtype = output
    n = SIZE[dtype]
    for s in shape:
        n *= s
    return n


def _plan(s: dict, pp: int = 1):
    """The measured shape as a plan: its vocabulary and width, torchtitan's stack (bf16
    MixedPrecisionPolicy), FSDP 2 × TP 4 with sequence parallelism, micro-batch b."""
    config = ModelConfig(vocab_size=s["V"], context_length=s["T"], num_layers=2 * pp,
                         d_model=s["d"], num_heads=8, num_kv_heads=4, head_dim=8, d_ff=96,
                         name="embedding-grad")
    lo = Layout(s["dp"] * s["tp"] * pp, tp=s["tp"], dp=s["dp"], pp=pp, zero=3, sp=True,
                global_batch=s["dp"] * s["b"] * pp, micro_batch=s["b"])
    return parallel_plan(config, lo, s["T"], precision=PRECISIONS["bf16-mixed"],
                         stack=StackRun(get_stack(TORCHTITAN)))


def _op(ops, name):
    return next(o for o in ops if o["op"] == name)


@pytest.mark.slow  # a fresh interpreter on the fake process group: ~10 s
def test_the_whole_gradient_is_bf16_and_the_plan_counts_it():
    """embedding_dense_backward makes the whole V×d table in the parameter's bf16, from the
    all-gathered (b, T, d) bf16 gradient of the output (aten.cat): the item is their sum,
    2·V·d + b·T·d·2 (before: 4·(V − V/tp)·d, fp32 and without the gathered gradient)."""
    m = _measured()
    s, ops = m["shape"], m["backward"]["ops"]
    (whole,) = _op(ops, "aten.embedding_dense_backward.default")["outputs"]
    (gathered,) = _op(ops, "aten.cat.default")["outputs"]
    assert whole == [[s["V"], s["d"]], "bfloat16"]
    assert gathered == [[s["b"], s["T"], s["d"]], "bfloat16"]
    item = next(i for i in _plan(s).stages[0].items if i.name.startswith("embedding grad"))
    assert item.bytes.at(s["b"]) == _bytes(whole) + _bytes(gathered)
    assert item.embedding and not item.pass_grads


@pytest.mark.slow
def test_it_lives_through_the_roots_reduce_scatter():
    """FSDP2 takes the table's rows (split, clone) only when its post-backward reads the
    gradient, and the whole bf16 table is still live at the fp32 reduce-scatter; the
    backward's largest live set is there, at its end (the embedding's and the root unit's
    nodes), not in the blocks: so the plan counts it at its own moment."""
    ops = _measured()["backward"]["ops"]
    names = [o["op"] for o in ops]
    made = names.index("aten.embedding_dense_backward.default")
    whole = _bytes(ops[made]["outputs"][0])
    rs = names.index("c10d._reduce_scatter_base_.default")
    assert made < names.index("aten.clone.default") < rs
    assert ops[rs]["live"] >= whole + _bytes(ops[rs]["outputs"][0])
    peak = max(o["live"] for o in ops)
    assert peak == max(o["live"] for o in ops[made:])
    stage = _plan(_measured()["shape"]).stages[0]
    emb = [m for m in stage.moments if m.embedding]
    assert len(emb) == 1 and not emb[0].recomputed
    item = next(i for i in stage.items if i.name.startswith("embedding grad"))
    assert [m.name for m in stage.moments if m.holds(item)] == [emb[0].name]


@pytest.mark.slow
def test_no_sync_accumulates_the_whole_table_in_fp32():
    """Under pipelining's no-sync FSDP2 casts the whole Replicate .grad to reduce_dtype
    and accumulates it (to_accumulated_grad_if_needed): V×d fp32 after each micro-batch but
    the last, whose reduce-scatter leaves the V/(tp·dp) row shard. The plan's accumulation
    of the first stage (every unit at its V/tp rows) gains the rest of the table:
    4·(V − V/tp)·d, live from the first micro-batch's backward (Item.accumulated)."""
    m = _measured()
    s, ns = m["shape"], m["no_sync"]
    full = {"placements": ["R"], "local_shape": [s["V"], s["d"]], "dtype": "float32"}
    assert ns["accumulated"] == [full, full, None]
    assert ns["sharded_grad"] == {"local_shape": [s["V"] // s["tp"] // s["dp"], s["d"]],
                                  "dtype": "float32"}
    items = _plan(s, pp=2).stages[0].items
    acc = next(i for i in items if i.name.startswith("embedding grad accumulated"))
    whole = _bytes([full["local_shape"], "float32"])
    assert acc.bytes.at(s["b"]) == whole - whole // s["tp"]
    assert acc.accumulated


def test_without_fsdp_the_rule_is_unchanged():
    """Without FSDP2 (DDP, dp 1) the whole gradient stays as .grad (docs/parallel.md, the
    distcheck harness): the item is the one the distributed checks compare."""
    s = {"dp": 1, "tp": 4, "V": 4096, "d": 64, "b": 2, "T": 32}
    item = next(i for i in _plan(s).stages[0].items if i.name.startswith("embedding grad"))
    assert item.name == "embedding grad computed whole (torch DTensor)"
    assert item.bytes.at(2) == 4 * (4096 - 1024) * 64 and item.pass_grads
