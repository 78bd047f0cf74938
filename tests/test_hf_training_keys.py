"""Keys that change what a training step runs (issue 32). The tool's counts and its judge of
unknown keys were built from transformers' model in eval mode, so a key that acts only in
training passed as count-free: `"gradient_checkpointing": true` in a llama config.json was
answered with 3,996,672 train matmul FLOPs "in exact agreement" with transformers, whose
training step runs 5,028,864 (it turns on checkpointing and recomputes each block's forward:
PreTrainedModel._backward_compatibility_gradient_checkpointing, modeling_utils.py).

Now a true gradient_checkpointing is refused in one line for every model_type (gpt2's table
listed it as a key transformers no longer reads), and the judge also runs a training step
in train mode (forward and backward) with and without an unknown key.
"""
import pytest

from accounting.architecture.hf_config import TYPES, translate
from accounting.runtime.errors import UsageError
from cli_run import refused_in_one_line, run
from hf_examples import CONFIGS, write_config


@pytest.mark.parametrize("name", ["llama", "gpt2", "qwen3", "mistral"])
def test_gradient_checkpointing_true_is_refused_in_one_line(capsys, tmp_path, name):
    p = write_config(tmp_path, CONFIGS[name], {"gradient_checkpointing": True})
    refused_in_one_line(capsys, "--config", str(p), "--no-verify",
                        expected="gradient_checkpointing = True means transformers "
                                 "recomputing each block's forward")


@pytest.mark.parametrize("value", [False, None])
def test_gradient_checkpointing_false_is_read(capsys, tmp_path, value):
    p = write_config(tmp_path, CONFIGS["gpt2"], {"gradient_checkpointing": value})
    code, _, err = run(capsys, "--config", str(p), "--no-verify", "--strict")
    assert code == 0, err


def test_every_type_refuses_it_through_the_python_api():
    for mt in TYPES:
        if TYPES[mt].nested:
            continue
        data = {"model_type": mt, "gradient_checkpointing": True}
        with pytest.raises(UsageError, match="gradient_checkpointing"):
            translate(data, "config.json", "t")


# ---- the judge: a training step in train mode ---------------------------------------------
pytest.importorskip("transformers")


@pytest.mark.parametrize("key,value,what", [
    # (judged directly: the table itself refuses the first and notes the second)
    ("gradient_checkpointing", True, "a training step's operators"),
    ("attention_dropout", 0.1, "a training step's operators"),
])
def test_the_judge_sees_what_only_training_runs(key, value, what):
    from accounting.crosscheck.hf_keys import judge
    data = {**CONFIGS["llama"], key: value}
    with pytest.raises(UsageError) as e:
        judge(data, (key,), TYPES["llama"], "config.json (llama)")
    assert what in str(e.value) and "\n" not in str(e.value)


def test_the_judge_still_accepts_a_key_that_changes_nothing():
    from accounting.crosscheck.hf_keys import judge
    data = {**CONFIGS["llama"], "attention_dropout": 0.0, "my_note": "hello"}
    notes = judge(data, ("attention_dropout", "my_note"), TYPES["llama"], "config.json (llama)")
    assert "judged count-free" in notes[0] and "training step" in notes[0]
