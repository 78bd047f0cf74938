"""Issue 44, the Hugging Face + FA2 rows' bytes a token: what Trainer's QLoRA step holds per
token on the CPU against what the plan (--prepare-kbit-training) holds per token.

Expected values: a measurement, benchmarks/hf_trainer_step.py (transformers' tiny Llama in
bitsandbytes NF4, PEFT's prepare_model_for_kbit_training and LoRA r 32 on every linear layer,
Trainer's compute_loss under bf16 autocast, live storages summed after every op), and the
hand algebra of what differs: the plan keeps the model output's bf16 logits through the
loss's backward (a caller holding `outputs`), 2 bytes a vocabulary entry a token, which
Trainer's compute_loss drops (transformers 4.47.1 and 5.23.0 trainer.py, compute_loss with
return_outputs=False). The same script under transformers 4.47.1 / PEFT 0.14.0 measured
99,220 bytes a token where 5.23.0 / PEFT 0.21.2 measure 99,212 (docs/parallel.md)."""
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("transformers")
pytest.importorskip("bitsandbytes")

from cli_run import run  # noqa: E402

T1, T2 = 128, 256
ROOT = Path(__file__).resolve().parents[1]


def _plan_peak(capsys, path, T):
    capsys.readouterr()  # what building the model printed (progress bars, library notes)
    code, out, err = run(capsys, "plan", "--config", str(path), "--batch", "1", "--precision",
                         "bf16-mixed", "--attention", "sdpa", "--recompute", "full",
                         "--lora-rank", "32", "--lora-targets", "all-linear", "--base-weights",
                         "nf4", "--prepare-kbit-training", "--gpu-mem", "80GiB", "--ctx", str(T),
                         "--format", "json")
    assert code == 0, err
    return json.loads(out)["peak"]["peak_bytes"]


@pytest.mark.slow
def test_trainers_step_holds_the_plans_bytes_a_token_less_the_kept_bf16_logits(
        capsys, tmp_path):
    sys.path.insert(0, str(ROOT))  # benchmarks/ is not installed
    import benchmarks.hf_trainer_step as m
    c = m.CONFIG
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**c, "model_type": "llama", "hidden_act": "silu",
                                "architectures": ["LlamaForCausalLM"],
                                "torch_dtype": "bfloat16"}))
    pm = m.prepared_model()
    (p1, op1), (p2, op2) = m.peak_over_start(pm, T1), m.peak_over_start(pm, T2)
    # the peak is the loss's backward in both, as the plan says (log-softmax backward)
    assert op1 == op2 == "aten._log_softmax_backward_data.default"
    measured = (p2 - p1) // (T2 - T1)
    assert measured * (T2 - T1) == p2 - p1  # linear in T: no per-token remainder
    planned = (_plan_peak(capsys, path, T2) - _plan_peak(capsys, path, T1)) // (T2 - T1)
    V = c["vocab_size"]
    # by hand: 3 float32 [T, V] tensors at the log-softmax's backward (its saved output, the
    # nll gradient, its own gradient), 12·V; the rest (block inputs kept in fp32, ...) is
    # the same in both; the plan's 14·V adds the bf16 logits (2·V)
    assert measured == planned - 2 * V
    assert 12 * V < measured < 13 * V
