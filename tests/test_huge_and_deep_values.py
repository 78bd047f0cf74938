"""Values outside the exit contract (issue 32), each now a one-line refusal, exit 2:

- a huge integer in a number-valued key (`"rope_theta": 1` followed by 400 zeros; norm
  epsilons, soft-caps, multipliers, rotary_pct, ...): math.isfinite raised OverflowError on
  the int, exit 3, and `accounting.config_from_json` raised it too. Numbers are now checked
  the same way for ints and floats (hf_schema.real: |v| <= 10^18);
- a value nested 500-990 levels deep (task_specific_params): RecursionError in
  copy.deepcopy, exit 3 (5,000 levels was refused by json itself). Now any config nested
  more than own_format.MAX_DEPTH levels is refused when read.
"""
import copy
import json
from dataclasses import fields

import pytest

from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from accounting.architecture.fields import NUMBER, NUMBER0, meta
from accounting.architecture.hf_config import EPS, NUMBER_OR_NULL, THETA, TYPES, translate
from accounting.architecture.loaders import config_from_json
from accounting.architecture.own_format import MAX_DEPTH
from cli_run import refused_in_one_line
from hf_examples import CONFIGS

HUGE = 10 ** 400
NUMERIC = (THETA, EPS, NUMBER_OR_NULL)


def _examples():
    from test_hf_default_sweep import EXAMPLES, _inner  # one small example per model_type
    return EXAMPLES, _inner


def _numeric_keys():
    for mt, t in TYPES.items():
        for k in t.keys:
            if k.kind in NUMERIC:
                yield pytest.param(mt, k.hf, id=f"{mt}-{k.hf}")


@pytest.mark.parametrize("mt,key", list(_numeric_keys()))
@pytest.mark.parametrize("value", [HUGE, -HUGE, 1e300, 10 ** 19])
def test_a_huge_number_in_any_number_valued_key_is_refused(mt, key, value):
    examples, inner = _examples()
    data = copy.deepcopy(examples[mt])
    inner(data, mt)[key] = value
    with pytest.raises(UsageError) as e:
        translate(data, "config.json", "t")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("key", ["rope_theta", "rms_norm_eps", "initializer_range",
                                 "attention_dropout"])
def test_the_cli_and_the_python_api_refuse_a_huge_integer(capsys, tmp_path, key):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**CONFIGS["llama"], key: HUGE}))
    refused_in_one_line(capsys, "--config", str(p), "--no-verify", expected=key)
    with pytest.raises(UsageError):
        config_from_json(p)


@pytest.mark.parametrize("field", [f.name for f in fields(ModelConfig)
                                   if meta(f).kind in (NUMBER, NUMBER0)])
def test_the_own_format_refuses_a_huge_integer_in_each_number_field(capsys, tmp_path, field):
    p = tmp_path / "c.json"
    base = dict(vocab_size=100, context_length=64, num_layers=2, d_model=64, num_heads=4)
    if meta(next(f for f in fields(ModelConfig) if f.name == field)).needs:
        base[meta(next(f for f in fields(ModelConfig) if f.name == field)).needs] = \
            {"num_experts": 4, "temperature_floor": 8}[meta(next(
                f for f in fields(ModelConfig) if f.name == field)).needs]
    p.write_text(json.dumps({**base, field: HUGE}))
    refused_in_one_line(capsys, "--config", str(p), "--no-verify", expected=field)


def _nested(depth: int):
    value = 1
    for i in range(depth - 1):
        value = {"x": value} if i % 2 else [value]
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 990])
def test_a_deeply_nested_value_is_refused(capsys, tmp_path, depth):
    p = tmp_path / "config.json"
    text = json.dumps({**CONFIGS["llama"], "task_specific_params": 0})  # (written by hand:
    deep = '{"x": ' * (depth - 1) + "1" + "}" * (depth - 1)  # json.dumps recurses too)
    p.write_text(text.replace('"task_specific_params": 0', f'"task_specific_params": {deep}'))
    err = refused_in_one_line(capsys, "--config", str(p), "--no-verify", expected="config file")
    # (under pytest's deeper stack json itself may give up first: refused as well)
    assert f"more than {MAX_DEPTH} levels deep" in err or "recursion depth" in err
    with pytest.raises(UsageError, match="levels deep"):  # the Python API's dict too
        translate({**CONFIGS["llama"], "task_specific_params": _nested(depth)}, "d", "t")


def test_a_config_nested_a_few_levels_is_read(capsys, tmp_path):
    from cli_run import run
    p = tmp_path / "config.json"
    # the top object, task_specific_params and 8 levels in it
    p.write_text(json.dumps({**CONFIGS["llama"], "task_specific_params": _nested(8)}))
    code, _, err = run(capsys, "--config", str(p), "--no-verify", "--strict")
    assert code == 0, err
