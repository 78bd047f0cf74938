"""Mixture-of-experts settings without experts (issue 32): the CLI refused `--shared-experts 1`
on a dense model (a flag that changes no count), while the same keys in the tool's own
JSON (`num_shared_experts`, `experts_per_token`, `moe_d_ff`, `dense_layers`) and in
`ModelConfig(...)` were accepted and ignored: exit 0 with the dense counts. Now each is
refused in one line, as the flag is; a temperature scale without its floor likewise."""
import json

import pytest

from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from cli_run import refused_in_one_line

BASE = dict(vocab_size=100, context_length=64, num_layers=4, d_model=64, num_heads=4)

# (key, a value; for the JSON file even the default counts: it was given)
MOE_KEYS = [("num_shared_experts", 1), ("experts_per_token", 2), ("moe_d_ff", 32),
            ("dense_layers", [0]), ("router", "sigmoid"), ("moe_capacity_factor", 1.25)]


@pytest.mark.parametrize("key,value", MOE_KEYS, ids=[k for k, _ in MOE_KEYS])
def test_the_own_json_refuses_them(capsys, tmp_path, key, value):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({**BASE, key: value}))
    refused_in_one_line(capsys, "--config", str(p), "--no-verify",
                        expected=f"{key} is given but num_experts is absent")


def test_with_experts_the_json_is_read(capsys, tmp_path):
    from cli_run import run
    p = tmp_path / "c.json"
    p.write_text(json.dumps({**BASE, "num_experts": 4, "num_shared_experts": 1,
                             "experts_per_token": 2, "moe_d_ff": 32, "dense_layers": [0]}))
    code, _, err = run(capsys, "--config", str(p), "--no-verify")
    assert code == 0, err


@pytest.mark.parametrize("key,value", [("num_shared_experts", 1), ("experts_per_token", 3),
                                       ("moe_d_ff", 32), ("dense_layers", (0,)),
                                       ("router", "sigmoid"), ("temperature_scale", 0.5)])
def test_model_config_refuses_them(key, value):
    with pytest.raises(UsageError, match=f"{key} = .* means nothing without"):
        ModelConfig(**BASE, d_ff=128, **{key: value})


def test_model_config_keeps_the_defaults_of_a_dense_model():
    c = ModelConfig(**BASE, d_ff=128)
    assert c.num_experts is None and c.experts_per_token == 2  # the defaults: no error
