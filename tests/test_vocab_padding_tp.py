"""Megatron pads the vocabulary tables to a multiple of 128·tp rows
(megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding: multiple =
make_vocab_size_divisible_by (128) × tensor_model_parallel_size; padded = ⌈V / multiple⌉ ·
multiple), each TP rank holding padded/tp rows (issue 45: the rule was unguarded). The
expected sizes are that rule written out by hand; the plan's model states must not tell a
vocabulary from its padded size, and must grow one multiple past it."""
from __future__ import annotations

import json

import pytest
from cli_run import run

from accounting.planning.parallel.megatron import padded_vocab
from accounting.architecture.presets import get_preset


@pytest.mark.parametrize("tp,padded", [(1, 50304), (2, 50432), (4, 50688), (8, 51200)])
def test_padded_vocab_by_hand(tp, padded):
    # ⌈50,257 / (128·tp)⌉ · 128·tp: 393·128, 197·256, 99·512, 50·1024
    assert padded_vocab(get_preset("gpt2-small"), tp) == padded


def _states(capsys, vocab: int, tp: int) -> int:
    code, out, err = run(capsys, "plan", "gpt2-small", "--vocab-size", str(vocab), "--gpus",
                         str(tp), "--tp", str(tp), "--stack", "megatron", "--gpu", "H100",
                         "--format", "json")
    assert code == 0, err
    return json.loads(out)["model_states_per_gpu_bytes"]


@pytest.mark.parametrize("tp", [2, 4])
def test_model_states_hold_the_padded_rows(capsys, tp):
    multiple = 128 * tp
    padded = -(-50257 // multiple) * multiple
    at = _states(capsys, 50257, tp)
    assert at == _states(capsys, padded, tp)  # the padding rows are held either way
    # one row past: another multiple of rows, multiple/tp more on this rank in each of the
    # untied embedding and LM head (d = 768 each; bf16 parameters, fp32 gradients, master
    # copy and two moments: 2 + 4 + 4 + 4 + 4 = 18 bytes each, unsharded at dp 1)
    assert _states(capsys, padded + 1, tp) - at == 2 * (multiple // tp) * 768 * 18
