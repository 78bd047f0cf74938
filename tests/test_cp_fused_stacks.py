"""Context parallelism on the stacks that always run a fused attention kernel (issue 45):
Megatron-Core (Transformer Engine's flash attention, its default --attention-kernel) and
torchtitan (its Llama's F.scaled_dot_product_attention) need no --attention sdpa, so Llama 3
405B's 128k layout (Dubey et al. 2024, Table 4: TP 8 · CP 16 · PP 16 · DP 8) can be asked
as written. The expected plan is the same command with --attention sdpa: the kernel these
stacks run either way (failed before: "--cp 16: ... give --attention sdpa", exit 2)."""
from __future__ import annotations

import json

import pytest
from cli_run import refused_in_one_line, run

LLAMA3_405B = ["--vocab-size", "128256", "--context-length", "131072", "--num-layers", "126",
               "--d-model", "16384", "--num-heads", "128", "--num-kv-heads", "8", "--d-ff",
               "53248", "--rope-theta", "500000", "--gpus", "16384", "--tp", "8", "--cp", "16",
               "--pp", "16", "--sp", "--batch", "128", "--gpu", "H100", "--format", "json"]
_ATTENTION_WORDS = ("attention", "architecture")


def _plan(capsys, *argv) -> dict:
    code, out, err = run(capsys, "plan", *LLAMA3_405B, *argv)
    assert code == 0, err
    d = json.loads(out)
    d["config"] = {k: v for k, v in d["config"].items() if k not in _ATTENTION_WORDS}
    d.pop("architecture", None)
    return d


@pytest.mark.parametrize("stack", [["--stack", "megatron", "--zero", "1"],
                                   ["--stack", "torchtitan", "--zero", "3"]],
                         ids=["megatron", "torchtitan"])
def test_cp_on_a_fused_stack_needs_no_attention_flag(capsys, stack):
    asked = _plan(capsys, *stack)
    assert asked == _plan(capsys, *stack, "--attention", "sdpa")


def test_torch_and_megatron_unfused_still_need_the_fused_kernel(capsys):
    refused_in_one_line(capsys, "plan", *LLAMA3_405B, "--zero", "1",
                        expected="give --attention sdpa")
    refused_in_one_line(capsys, "plan", *LLAMA3_405B, "--stack", "megatron", "--zero", "1",
                        "--attention-kernel", "unfused", expected="give --attention sdpa")
