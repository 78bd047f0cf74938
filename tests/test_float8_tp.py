"""torchtitan's float8 tensor parallelism (stacks.Stack.fp8_tp_gathers; comms.tensor_parallel
gather_bytes): with --precision fp8-torchao its sequence-parallel all-gathers of the block
inputs (forward) and of the block outputs' gradients (backward) move fp8, one byte an
element; the reduce-scatters and the LM head's gather stay bf16.

Expected values: b·T·d_model bytes per gather written out by hand; the rule itself read from
the installed torchao (float8/float8_tensor_parallel.py): Float8ColwiseParallel's
_prepare_input_fn casts to fp8 before it redistributes (the all-gather), and
Float8RowwiseParallel's _prepare_output_fn applies NoopFwToFloat8BwDynamic after its
reduce-scatter (so the backward's all-gather of the gradient runs on the fp8 cast)."""
import inspect

import pytest

from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import TORCH, TORCHTITAN, get_stack
from accounting.architecture.config import ModelConfig

H, L, T = 64, 2, 32


def _config():
    return ModelConfig(vocab_size=128, context_length=T, num_layers=L, d_model=H, num_heads=4,
                       num_kv_heads=4, head_dim=16, d_ff=128, name="titan-tiny")


def _tp(precision, stack=TORCHTITAN):
    lo = Layout(8, tp=4, dp=2, zero=3, sp=True, global_batch=4, micro_batch=1)
    p = parallel_plan(_config(), lo, T, precision=PRECISIONS[precision],
                      stack=StackRun(get_stack(stack)))
    return {(c.op, c.phase, c.what): c.bytes for c in p.stages[0].collectives
            if c.group.startswith("tensor")}


def test_fp8_all_gathers_by_hand():
    m = 2  # micro-batches per step: 4 sequences over dp 2, micro-batch 1
    got = _tp("fp8-torchao")
    assert got[("all-gather", "forward", "block inputs (attention, MLP), in fp8")] == \
        m * 2 * L * T * H * 1
    assert got[("all-gather", "forward", "the LM head's input")] == m * T * H * 2
    assert got[("all-gather", "backward", "gradients of the block outputs, in fp8")] == \
        m * 2 * L * T * H * 1
    assert got[("reduce-scatter", "forward", "block outputs (attention, MLP)")] == \
        m * 2 * L * T * H * 2
    # bf16 mixed precision: every gather in bf16, the blocks' and the head's together
    bf16 = _tp("bf16-mixed")
    assert bf16[("all-gather", "forward", "block inputs (attention, MLP) and the LM head's "
                 "input")] == m * (2 * L + 1) * T * H * 2


def test_torch_stack_keeps_bf16_gathers():
    # the torch stack's TP is DTensor's ColwiseParallel/RowwiseParallel: no float8 gathers
    assert not get_stack(TORCH).fp8_tp_gathers
    got = _tp("fp8-torchao", TORCH)
    assert not [k for k in got if "fp8" in k[2]]


def test_the_rule_is_torchaos():
    tp = pytest.importorskip("torchao.float8.float8_tensor_parallel")
    src = inspect.getsource(tp.Float8ColwiseParallel._prepare_input_fn)
    assert src.index("hp_tensor_to_float8_dynamic") < src.index(".redistribute(")
    out = inspect.getsource(tp.Float8RowwiseParallel._prepare_output_fn)
    assert out.index(".redistribute(") < out.index("NoopFwToFloat8BwDynamic.apply")
