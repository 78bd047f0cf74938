"""torchtitan's tensor parallelism (accounting/planning/parallel/titan_tp.py; issue 44), held
to torch run on the CPU: one TP rank of 4 on torch's fake process group, in a fresh
interpreter (tests/titan_tp_measure.py).

Expected values: measured (torch's MemTracker for the loss's peaks, saved_tensors_hooks for
the block's saved bytes), and hand algebra where written out; the rule itself read from
the installed torch (torch/distributed/tensor/parallel/loss.py)."""
import inspect
import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from accounting.architecture.config import ModelConfig
from accounting.planning import cuda_peak as CP
from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel import titan_tp as TT
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import TORCH, TORCHTITAN, get_stack

ROOT = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def _measured() -> dict:
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "titan_tp_measure.py")],
                         capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_loss_parallel_backward_holds_three_temporaries():
    """Measured: torchtitan's loss on vocab-sharded logits under loss_parallel peaks at 4 fp32
    tensors the size of the rank's logits (the saved log-probabilities and the fused
    backward's zeros_like, exp and sum), F.cross_entropy on the same logits at 3 (the saved
    log-probabilities and its two gradients); both forwards peak lower (3.5 and 2.5: the bf16
    logits, their fp32 copy, and shifted/exp or the log-probabilities). The remainder is the
    LM head's input and weight and the labels, under a quarter of one."""
    got = _measured()["loss"]
    e = got["logits_fp32"]
    lp, plain = got["loss_parallel"], got["plain"]
    rule = TT.loss_gradients(get_stack(TORCHTITAN), 4)
    assert rule is not None and rule.count == 3
    # the saved log-probabilities (activations.py: the "log-softmax of the logits" row) + the
    # temporaries peak.py adds at the loss's backward
    assert lp["peak"] // e == 1 + rule.count and lp["peak"] % e < e // 4, lp
    assert plain["peak"] // e == 1 + 2 and plain["peak"] % e < e // 4, plain
    assert lp["forward_peak"] < lp["peak"] and plain["forward_peak"] < plain["peak"]
    # (2·forward_peak: 7 and 5 half-tensors, the bf16 logits being one)
    assert 2 * lp["forward_peak"] // e == 7 and 2 * plain["forward_peak"] // e == 5


def test_the_rule_is_torchs_fused_backward():
    loss = pytest.importorskip("torch.distributed.tensor.parallel.loss")
    src = inspect.getsource(loss._nll_loss_and_log_softmax_backward)
    assert "grad_input = torch.zeros_like(x)" in src
    assert "return (grad_input + torch.exp(x)) * grad_output" in src
    # the log_softmax backward it pairs with does no computation of its own
    assert "return grad_output.to(input_dtype)" in inspect.getsource(
        loss._log_softmax_backward_handler)


def test_only_torchtitan_with_tp_runs_loss_parallel():
    assert TT.loss_gradients(get_stack(TORCHTITAN), 1) is None  # no TP: F.cross_entropy
    assert TT.loss_gradients(get_stack(TORCH), 8) is None


V, T, B = 1000, 32, 2


def _plan(config, tp=4, **layout):
    lo = Layout(8, tp=tp, dp=8 // tp, zero=3, sp=tp > 1, global_batch=8 // tp * B,
                micro_batch=B, **layout)
    return parallel_plan(config, lo, T, precision=PRECISIONS["bf16-mixed"],
                         stack=StackRun(get_stack(TORCHTITAN)))


def _config(a=16, g=8):
    return ModelConfig(vocab_size=V, context_length=T, num_layers=2, d_model=64, num_heads=a,
                       num_kv_heads=g, head_dim=8, d_ff=96, name="titan-tp")


def test_plan_adds_the_temporaries_at_the_loss_backward():
    """The loss's backward moment of the last stage, by hand: the cuBLAS workspaces, the
    0-dim fp32 loss, and 3·b·T·⌈V/tp⌉·4 (2· without TP)."""
    ws = CP.workspace(None).bytes.evaluate({})
    for tp, n in ((4, 3), (1, 2)):
        stage = _plan(_config(), tp).stages[-1]
        m = next(m for m in stage.moments if m.name.startswith("start of the backward pass"))
        assert m.extra.at(B) == ws + 4 + n * B * T * -(-V // tp) * 4, tp


def test_tp_block_saves_what_the_rows_count():
    """A torchtitan block parallelized as apply_tp does it saves the torchtitan stack's
    per-layer bytes, less the block's input (the measurement leaves it out): the norms'
    sequence shards and rstd, the two gathered full-sequence inputs (each saved once by the
    linears that read it), the rank's heads and d_ff/tp columns."""
    got = _measured()["block"]["gqa"]
    c = _config()
    p = _plan(c)
    h, tp = c.d_model, 4
    assert p.per_layer_activation_bytes - 2 * B * (T // tp) * h == got["saved"]
    # by hand: 2 norms (input shard 2b(T/tp)h, rstd 4b(T/tp)), 2 gathered inputs 2bTh,
    # Q, K, V (repeated) and the output at a/tp heads, the log-sum-exp, 4 tensors of d_ff/tp
    a, d, f = c.num_heads // tp, c.d_k, c.d_ff // tp
    assert got["saved"] == (2 * B * (T // tp) * h + 4 * 2 * B * (T // tp) + 2 * 2 * B * T * h
                            + 4 * 2 * B * T * a * d + 4 * B * a * T + 4 * 2 * B * T * f)


def test_one_kv_head_a_rank_repeat_kv_is_a_view():
    """Measured: where a rank holds one KV head (Llama 3 70B and 405B at TP 8), repeat_kv's
    expand + reshape is a view, so SDPA saves the rank's one-head K and V, not copies of a/tp
    heads; the rows count the copies: an overcount (the plan errs high) of exactly
    2·(2·b·T·(a/tp)·d − 2·b·T·1·d) bytes per block."""
    got = _measured()["block"]["one_kv_head"]
    c = _config(8, 4)
    p = _plan(c)
    h, tp, d = c.d_model, 4, c.d_k
    counted = p.per_layer_activation_bytes - 2 * B * (T // tp) * h
    assert counted - got["saved"] == 2 * (2 * B * T * (8 // tp) * d - 2 * B * T * 1 * d)
