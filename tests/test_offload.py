"""--offload (issue 44): model states kept in CPU memory.

Expected values: DeepSpeed's own estimators, the installed library
(deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs and
stage3.py estimate_zero3_model_states_mem_needs with cpu_offload=True), and hand algebra."""
import pytest

from accounting import get_preset
from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import get_stack
from tests.cli_run import refused_in_one_line

BF16 = PRECISIONS["bf16-mixed"]
N = 64
LLAMA_1B = "meta-llama/Llama-3.2-1B"


def _plan(zero: int, offload: set, stack: str = "deepspeed"):
    c = get_preset(LLAMA_1B)
    return parallel_plan(c, Layout(N, dp=N, zero=zero, global_batch=N), 2048, precision=BF16,
                         stack=StackRun(get_stack(stack)), offload=frozenset(offload))


def test_deepspeed_zero2_offload_optimizer_is_the_estimators():
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    p = _plan(2, {"optimizer"})
    psi = sum(t.numel for u in p.worst.states.units for t in u.tensors)
    assert psi == 1_235_814_400
    _, gpu = estimate_zero2_model_states_mem_needs(psi, 8, 8, cpu_offload=True)
    assert gpu == p.model_states == 2 * psi  # the 16-bit parameters alone stay


def test_deepspeed_zero_offload_on_one_gpu_is_the_estimators():
    # ZeRO-Offload's own case (Ren et al. 2021: a 13B model on one V100): one data-parallel
    # rank, stage 2, the optimizer on the CPU. Nothing is sharded at dp 1, yet the stage asked
    # for is what DeepSpeed runs (it was refused as "not --zero 0")
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    c = get_preset(LLAMA_1B)
    p = parallel_plan(c, Layout(1, dp=1, zero=2, global_batch=1), 2048, precision=BF16,
                      stack=StackRun(get_stack("deepspeed")), offload=frozenset({"optimizer"}))
    psi = sum(t.numel for u in p.worst.states.units for t in u.tensors)
    _, gpu = estimate_zero2_model_states_mem_needs(psi, 1, 1, cpu_offload=True)
    assert gpu == p.model_states == 2 * psi


@pytest.mark.parametrize("offload,params_too", [({"optimizer"}, False),
                                                ({"optimizer", "params"}, True)])
def test_deepspeed_zero3_offload_is_the_estimators(offload, params_too):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    p = _plan(3, offload)
    psi = sum(t.numel for u in p.worst.states.units for t in u.tensors)
    largest = 128256 * 2048  # the tied embedding table, the largest module
    _, gpu, _ = estimate_zero3_model_states_mem_needs(psi, largest, 8, 8, cpu_offload=True,
                                                      cpu_offload_params=params_too)
    working = next(i.bytes.c for i in p.worst.items if "working set" in i.name)
    assert gpu == p.model_states + working


def test_fsdp2_cpu_offload_keeps_no_model_state_on_the_gpu():
    # CPUOffloadPolicy: sharded parameters, gradients and AdamW's moments on the CPU; the
    # update runs there, so its √v temporary is not the GPU's either
    on = _plan(3, {"params"}, "torch")
    off = _plan(3, set(), "torch")
    assert on.model_states == 0 and off.model_states > 0
    update = lambda p: max(p.worst.moment_bytes(m, 1) for m in p.worst.moments  # noqa: E731
                           if m.name == "optimizer update")
    # 4 elements' worth per updated element gone: parameters, gradients, m, v (and √v)
    moments = off.worst.states.moments
    assert update(off) - update(on) >= 4 * 4 * moments + 4 * moments


@pytest.mark.parametrize("flags,expected", [
    (("--stack", "megatron", "--offload", "optimizer"), "not planned for --stack megatron"),
    (("--stack", "deepspeed", "--zero", "3", "--offload", "params"), "needs --offload"),
    (("--offload", "params", "--zero", "0"), "--zero 2 or 3"),
    (("--offload", "disk"), "--offload takes optimizer or activations or params"),
    # issue 44: torchtune's OffloadActivations is a one-GPU recipe here
    (("--stack", "megatron", "--offload", "activations"),
     "--offload activations is planned with --stack torch"),
])
def test_refused_in_one_line(capsys, flags, expected):
    refused_in_one_line(capsys, "plan", LLAMA_1B, "--gpus", "8", *flags, expected=expected)


def test_one_gpu_names_the_stage_asked_for(capsys):
    # the message named the stage in effect at dp 1 (0), not the one given
    refused_in_one_line(capsys, "plan", LLAMA_1B, "--gpus", "1", "--stack", "megatron",
                        "--offload", "optimizer", expected="not planned for --stack megatron")
    refused_in_one_line(capsys, "plan", LLAMA_1B, "--gpus", "1", "--zero", "1",
                        "--offload", "params", expected="not --zero 1")


def test_offload_needs_gpus(capsys):
    refused_in_one_line(capsys, "plan", LLAMA_1B, "--offload", "params",
                        expected="give --gpus N")


def test_paged_adamw8bit_pages_the_large_states():
    # bitsandbytes' rule, read from the installed library (paging needs CUDA's
    # cudaMallocManaged; on the CPU it falls back to zeros_like): PagedAdamW8bit is paged,
    # and get_state_buffer pages a parameter's state1/state2 from 1e5 elements up
    bnb = pytest.importorskip("bitsandbytes")
    import inspect
    import torch
    from accounting.planning.optimizers import PAGED_MIN_NUMEL, get_optimizer, is_paged
    p = torch.nn.Parameter(torch.zeros(4096, 64))
    assert bnb.optim.PagedAdamW8bit([p]).is_paged
    src = inspect.getsource(bnb.optim.optimizer.Optimizer8bit.get_state_buffer)
    assert "p.numel() < 1e5" in src and "F.get_paged" in src and PAGED_MIN_NUMEL == 10**5
    opt = get_optimizer("paged-adamw8bit")
    big, small = opt.state((4096, 4096), "fp32"), opt.state((256, 256), "fp32")
    assert is_paged(big[0].item) and big[0].numel == 2 * 4096 * 4096  # m and v, uint8
    assert not any(is_paged(s.item) for s in small)  # 65,536 elements: on the device
    assert not is_paged(big[1].item)  # absmax: init_state's device tensors


def test_paged_states_leave_the_gpu_total(capsys):
    from tests.cli_run import run
    import json
    code, out, err = run(capsys, "plan", "meta-llama/Llama-3.1-8B", "--ctx", "2048",
                         "--precision", "bf16", "--optimizer", "paged-adamw8bit",
                         "--format", "json")
    assert code == 0, err
    items = json.loads(out)["training_memory"]["items"]
    paged = [i for i in items if "unified memory" in i["name"]]
    # every matrix of Llama-3.1-8B has at least 1e5 elements: 2 bytes (m, v) per element of
    # them; the norms (4,096 each: 65 of them) stay on the device
    assert sum(i["bytes"] for i in paged) == 2 * (8030261248 - 65 * 4096)
    assert not any(i["on_gpu"] for i in paged)
