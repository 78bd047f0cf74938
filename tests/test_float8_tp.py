"""torchtitan's float8 tensor parallelism (stacks.Stack.fp8_tp_gathers; comms.tensor_parallel
gather_bytes): with --precision fp8-torchao its sequence-parallel all-gathers of the block
inputs (forward) and of the block outputs' gradients (backward) move fp8, one byte an
element; the reduce-scatters and the LM head's gather stay bf16.

Expected values: b·T·d_model bytes per gather written out by hand; the rule itself read from
the installed torchao (float8/float8_tensor_parallel.py): Float8ColwiseParallel's
_prepare_input_fn casts to fp8 before it redistributes (the all-gather), and
Float8RowwiseParallel's _prepare_output_fn applies NoopFwToFloat8BwDynamic after its
reduce-scatter (so the backward's all-gather of the gradient runs on the fp8 cast).

Async TP (--async-tp; stacks.Stack.async_tp): the symmetric-memory workspace torch keeps per
TP group, the largest request (torch/distributed/_symmetric_memory/__init__.py, read from
the installed torch: get_symm_mem_workspace, _pipelined_multi_all_gather_and_consume,
_pipelined_produce_and_all2all), by hand."""
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


def test_async_tp_workspace_by_hand():
    """torch's get_symm_mem_workspace keeps the largest request per TP group: under float8 TP
    the all-gather's fp8 shard (b·T/tp·d·1) is smaller than the reduce-scatter's two bf16
    output chunks (2·b·T/tp·d·2), which size it."""
    from accounting.planning.parallel.stack_memory import StackRun
    lo = Layout(8, tp=4, dp=2, zero=3, sp=True, global_batch=4, micro_batch=1)
    for prec in ("fp8-torchao", "bf16-mixed"):
        run = StackRun(get_stack(TORCHTITAN), async_tp=True)
        p = parallel_plan(_config(), lo, T, precision=PRECISIONS[prec], stack=run)
        items = {i.name: i.bytes.at(1) for i in p.stages[0].items}
        assert items["async TP symmetric-memory workspace (one per TP group)"] == \
            2 * (T // 4) * H * 2
        plain = parallel_plan(_config(), lo, T, precision=PRECISIONS[prec],
                              stack=StackRun(get_stack(TORCHTITAN)))
        assert "async TP symmetric-memory workspace (one per TP group)" not in \
            {i.name for i in plain.stages[0].items}


def test_async_tp_rule_is_torchs():
    sm = pytest.importorskip("torch.distributed._symmetric_memory")
    ws = inspect.getsource(sm.get_symm_mem_workspace)
    assert "max(size, min_size)" in ws  # grows to the largest request, kept per group
    rs = inspect.getsource(sm._pipelined_produce_and_all2all)
    assert "out_chunks[0].numel() * out_chunks[0].element_size() * 2" in rs
    ag = inspect.getsource(sm._pipelined_multi_all_gather_and_consume)
    assert "p2p_workspace_size_req += x.numel() * x.element_size()" in ag


def test_async_tp_refusals_in_one_line():
    import subprocess
    import sys
    for extra, word in ((["--gpus", "8"], "--stack torchtitan"),
                        (["--stack", "torchtitan", "--gpus", "8", "--fsdp"], "--tp")):
        run = subprocess.run([sys.executable, "-m", "accounting", "plan", "gpt2-small",
                              "--async-tp", *extra], capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and word in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_emit_torchtitan_sets_async_tp():
    # torchtitan/config/job_config.py Parallelism.enable_async_tensor_parallel
    import subprocess
    import sys
    base = [sys.executable, "-m", "accounting", "plan", "meta-llama/Llama-3.1-8B", "--stack",
            "torchtitan", "--gpus", "8", "--tp", "4", "--sp", "--fsdp", "--ctx", "4096",
            "--batch", "8", "--emit", "torchtitan"]
    on = subprocess.run(base + ["--async-tp"], capture_output=True, text=True, timeout=120)
    off = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert on.returncode == off.returncode == 0, on.stderr + off.stderr
    assert "enable_async_tensor_parallel = true" in on.stdout
    assert "enable_async_tensor_parallel" not in off.stdout
