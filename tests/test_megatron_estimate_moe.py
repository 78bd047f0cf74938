"""Megatron-LM's end-to-end estimate k·T·P/(n·X) (Narayanan et al. 2021, §5.1) is derived
for a dense model, each token meeting every parameter once (2·P FLOPs forward); for a
mixture of experts P is the parameters a token runs through (issue 45: DeepSeek-V3's plan
used all 671 B, 873 days). Expected values by hand below."""
from __future__ import annotations

from cli_run import run

TINY_MOE = ["--vocab-size", "100", "--context-length", "64", "--num-layers", "2",
            "--d-model", "64", "--num-heads", "4", "--num-experts", "8",
            "--experts-per-token", "2", "--moe-d-ff", "32"]


def _note(capsys, *argv) -> str:
    code, out, err = run(capsys, "plan", *argv, "--gpus", "2", "--gpu", "H100", "--tokens",
                         "6400000", "--batch", "2")
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("Megatron-LM's end-to-end")]
    return line


def test_a_mixture_of_experts_uses_its_active_parameters(capsys):
    # by hand: embedding 100·64 and the untied head 64·100 (6,400 each); a layer's attention
    # 4·64·64 = 16,384, two norms 128, router 64·8 = 512, and 2 of its 8 SwiGLU experts
    # of 3·64·32 = 6,144 (12,288 active, 49,152 in all); the final norm 64
    active = 2 * 6400 + 2 * (16384 + 128 + 512 + 2 * 6144) + 64
    total = 2 * 6400 + 2 * (16384 + 128 + 512 + 8 * 6144) + 64
    assert (active, total) == (71488, 145216)
    line = _note(capsys, *TINY_MOE)
    assert f"P = {active:,} active per token of {total:,}" in line, line


def test_a_dense_model_keeps_all_its_parameters(capsys):
    # gpt2-small's shape on the CS336 architecture: 2·V·d + L·(4d² + 3·d·d_ff + 2d) + d
    V, d, L, ff = 50257, 768, 12, 3072
    n = 2 * V * d + L * (4 * d * d + 3 * d * ff + 2 * d) + d
    line = _note(capsys, "gpt2-small")
    assert f"P = {n:,}, n = 2" in line and "active" not in line, line
