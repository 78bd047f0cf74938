"""Issue 32's soft items: each a wrong word or a silent acceptance the third hostile round
found, with the answer the contract (README "Exit status"; docs/cli.md) asks for: exit 2
and one line naming the problem and its fix, or the number the docs promise.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QWEN = str(ROOT / "accounting/hf_configs/Qwen/Qwen2.5-0.5B.json")


def _run(argv, env_extra=None, timeout=180):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "MPLBACKEND")}
    env.update({"PYTHONPATH": str(ROOT), **(env_extra or {})})
    return subprocess.run([sys.executable, "-m", "accounting", *argv], capture_output=True,
                          env=env, timeout=timeout)


def _one_line(r, *fragments):
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, (r.returncode, err[-2000:])
    assert err.count("\n") == 1 and err.startswith("accounting: error: "), err[-2000:]
    for f in fragments:
        assert f in err, err
    return err


# ---- a broken or old transformers is the environment's problem, not the config's ----------
OLD = '''__version__ = "4.30.0"
class AutoConfig:
    @staticmethod
    def for_model(model_type, **kwargs):  # what transformers 4.30 says of a newer type
        raise ValueError(f"Unrecognized model identifier: {model_type}")
'''
BROKEN = 'raise ImportError("cannot import name GenerationMixin (partially initialized)")\n'


@pytest.mark.parametrize("package,fragments", [
    (OLD, ("transformers 4.30.0 is installed", "pip install transformers==5.23.0")),
    (BROKEN, ("transformers is installed but cannot be imported",
              "environment is the problem, not the config",
              "pip install --force-reinstall transformers==5.23.0"))], ids=["old", "broken"])
def test_a_bad_transformers_install_is_named_with_its_fix(tmp_path, package, fragments):
    """Was: 'FILE: transformers refuses it (...); correct the value', blaming the file."""
    pytest.importorskip("fvcore")
    (tmp_path / "transformers").mkdir()
    (tmp_path / "transformers" / "__init__.py").write_text(package)
    r = _run(["--config", QWEN, "--ctx", "64", "--verify"],
             {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    err = _one_line(r, *fragments)
    assert "correct the value" not in err


# ---- one value in two spellings is not a contradiction ------------------------------------
def _llama(**changes) -> dict:
    import json
    data = json.loads((ROOT / "accounting/hf_configs/meta-llama/Llama-3.2-1B.json").read_text())
    return {**data, **changes}


def test_an_int_and_a_float_of_one_value_agree():
    """Was: 'contradictory keys rope_theta = 500000, rope_parameters.rope_theta = 500000.0'."""
    from accounting.architecture.hf_config import translate
    data = _llama(rope_theta=500000, rope_parameters={"rope_type": "default",
                                                      "rope_theta": 500000.0})
    data.pop("rope_scaling")
    assert translate(data, "f", "f").config.rope_theta == 500000


def test_two_values_still_contradict():
    from accounting.runtime.errors import UsageError
    from accounting.architecture.hf_config import translate
    data = _llama(rope_theta=500000, rope_parameters={"rope_type": "default",
                                                      "rope_theta": 500001.0})
    data.pop("rope_scaling")
    with pytest.raises(UsageError, match="contradictory keys"):
        translate(data, "f", "f")
    with pytest.raises(UsageError, match="contradictory keys"):  # a bool is not the number 1
        translate({**data, "rope_theta": True, "rope_parameters": {"rope_theta": 1}}, "f", "f")


# ---- an unknown key inside text_config is judged, as the message says ---------------------
def test_an_unknown_key_inside_text_config_is_judged(capsys, tmp_path):
    """Was: refused with '...without --strict, the CLI judges such a key' even without
    --strict: the nested translation got no judge. The judge (transformers' Llama4ForCausalLM
    built with and without the key) is the independent source."""
    pytest.importorskip("transformers")
    import copy
    from cli_run import run
    from hf_examples import write_config
    from test_hf_llama4 import MULTIMODAL
    data = copy.deepcopy(MULTIMODAL)
    data["text_config"]["my_unread_key"] = 3
    path = str(write_config(tmp_path, data))
    code, out, err = run(capsys, "--config", path, "--ctx", "16", "--no-verify")
    assert code == 0, err[-800:]
    assert "'my_unread_key': not in the tool's table for llama4_text; judged count-free" in out
    code, out, err = run(capsys, "--config", path, "--ctx", "16", "--no-verify", "--strict")
    assert code == 2 and "unknown key(s) 'my_unread_key'" in err


# ---- a config is never refused for its file name -------------------------------------------
@pytest.mark.parametrize("stem,shown", [("a\tb", "a\\tb"), ("m" * 230, "m" * 200)],
                         ids=["tab", "230 characters"])
def test_a_config_json_is_named_not_refused_by_its_file_name(capsys, tmp_path, stem, shown):
    """Was: 'name must be at most 200 printable characters ...' for a Hugging Face file (the
    tool's own format already escaped and cut its stem: loaders.read_config)."""
    from cli_run import run
    path = tmp_path / f"{stem}.json"
    path.write_text(Path(QWEN).read_text())
    code, out, err = run(capsys, "--config", str(path), "--no-verify", "--brief")
    assert code == 0, err
    assert out.startswith(f"Answer: {shown} (custom config)")


# ---- the Python API names its own arguments, types and bounds ------------------------------
def _api_error(call):
    with pytest.raises((TypeError, ValueError)) as e:
        call()
    return e.type, str(e.value)


TINY_ARGS = dict(vocab_size=100, context_length=64, num_layers=2, d_model=64, num_heads=4,
                 d_ff=128, name="tiny")


@pytest.mark.parametrize("call,said", [
    (lambda a, p, c: a.analyze(c, 10**20), "seq must be at most 10^15"),
    (lambda a, p, c: a.analyze(c, 64, batch=10**20), "batch must be at most 10^15"),
    (lambda a, p, c: a.flops_grid(c, [10**20]), "seq must be at most 10^15"),
    (lambda a, p, c: p(c, 64, mfu=2), "mfu must be in (0, 1]"),
    (lambda a, p, c: p(c, 64, margin="1"), "margin must be in [0, 1)"),
    (lambda a, p, c: p(c, 64, memory_bytes=10**9, peak_tflops=0, bandwidth_tbs=1),
     "peak_tflops must be positive"),
    # a named card takes memory_bytes (issue 45: a 96 GiB H100), not another peak
    (lambda a, p, c: p(c, 64, gpu="H100", peak_tflops=100), "give either gpu or "
                                                             "peak_tflops/bandwidth_tbs"),
    (lambda a, p, c: p(c, 64, steps=1, tokens=64), "give either steps or tokens"),
], ids=["seq", "batch", "grid", "mfu", "margin", "peak", "gpu", "steps"])
def test_api_errors_name_the_argument_not_the_flag(call, said):
    """Was: '--ctx must be at most 10^15', '--mfu must be ...': flags a notebook never typed."""
    import accounting
    from accounting.planning import plan
    kind, message = _api_error(lambda: call(accounting, plan, accounting.ModelConfig(**TINY_ARGS)))
    assert said in message and "--" not in message, message


def test_the_command_line_still_names_its_flags(capsys):
    from cli_run import run
    code, out, err = run(capsys, "plan", "gpt2-small", "--mfu", "2")
    assert code == 2 and "--mfu must be in (0, 1]" in err


@pytest.mark.parametrize("kwargs", [dict(mfu=[0.5]), dict(margin={}), dict(
    memory_bytes=10**9, peak_tflops=[100], bandwidth_tbs=1)], ids=["mfu", "margin", "peak"])
def test_a_number_of_the_wrong_type_is_a_type_error(kwargs):
    """plan()'s docstring: 'a wrong type is a TypeError'. Was: UsageError (a ValueError)."""
    import accounting
    from accounting.planning import plan
    kind, message = _api_error(lambda: plan(accounting.ModelConfig(**TINY_ARGS), 64, **kwargs))
    assert kind is TypeError and "must be a number" in message, message


def test_numpy_scalars_are_numbers_everywhere():
    """Was: np.int64 taken by seq, batch, steps; np.float64 refused by mfu, margin and
    peak_tflops ('must be a number ..., got np.float64(0.4)'). The float a numpy scalar holds
    is the value (0.25 and 0.5 are exact in binary: the same Fraction either way)."""
    np = pytest.importorskip("numpy")
    import accounting
    from accounting.planning import plan
    c = accounting.ModelConfig(**TINY_ARGS)
    mine = plan(c, np.int64(64), np.int64(2), memory_bytes=np.int64(10**9),
                peak_tflops=np.float64(100.0), bandwidth_tbs=np.float32(1.0),
                mfu=np.float64(0.5), margin=np.float32(0.25), steps=np.int64(10))
    plain = plan(c, 64, 2, memory_bytes=10**9, peak_tflops=100, bandwidth_tbs=1,
                 mfu="0.5", margin="0.25", steps=10)
    assert mine.time.seconds == plain.time.seconds and mine.batch_fit == plain.batch_fit


@pytest.mark.parametrize("kwargs,said", [
    (dict(steps=10**16, gpu="H100"), "steps must be at most 10^15"),
    (dict(tokens=10**16, gpu="H100"), "tokens must be at most 10^15"),
    (dict(position=10**16), "position must be at most 10^15"),
    (dict(memory_bytes=10**19), "memory_bytes must be at most 10^18 bytes"),
], ids=["steps", "tokens", "position", "memory"])
def test_plan_keeps_the_command_lines_bounds(kwargs, said):
    """Was: plan(cfg, steps=10**30) answered; --steps stops at 10^15 (cli/args.py), --gpu-mem
    at 10^18 bytes (cli/plan.py)."""
    import accounting
    from accounting.planning import plan
    kind, message = _api_error(lambda: plan(accounting.ModelConfig(**TINY_ARGS), 64, **kwargs))
    assert said in message, message


# ---- --temperature-floor acts on NoPE layers: without any it is refused ---------------------
def test_temperature_floor_without_nope_layers_is_refused(capsys):
    """Was: exit 0 with the same counts as without the flag (the temperature tuning scales
    the NoPE layers' queries only: ledger/builder/attention.py)."""
    from cli_run import refused_in_one_line, run
    refused_in_one_line(capsys, "gpt2-small", "--temperature-floor", "8192", "--no-verify",
                        expected="give nope_layers (--nope-layers) or drop it")
    code, out, err = run(capsys, "gpt2-small", "--temperature-floor", "8192", "--nope-layers",
                         "3", "--no-verify", "--brief")
    assert code == 0, err


def test_a_llama4_file_tuning_no_nope_layer_still_reads():
    """attn_temperature_tuning true with every layer RoPE (no_rope_layers all 1) is a no-op
    in transformers' Llama4TextAttention (it scales only where not use_rope): read, not
    refused."""
    from accounting.architecture.hf_config import translate
    from test_hf_llama4 import TEXT
    data = {**TEXT, "no_rope_layers": [1, 1, 1, 1], "attn_temperature_tuning": True}
    c = translate(data, "f", "f").config
    assert c.nope_layers == () and c.temperature_floor is None


# ---- the fused attention's backward is not "each the size of the forward one" --------------
def test_the_sdpa_plan_says_why_backward_is_not_twice_forward(capsys):
    """Was: 'Backward = 456866/222289 × forward, exactly: ... each the size of the forward
    one'. Hand algebra, gpt2-small at T = 1,024 (d = 768, L = 12, B = 1): the forward's two
    T×T matmuls per layer are 2·2·T²·d FLOPs; the fused backward recomputes QKᵀ, one more
    T×T matmul (2·T²·d) beyond eager attention's 2 × forward."""
    from dataclasses import replace
    from accounting import get_preset
    from accounting.planning import plan
    from cli_run import run
    T, d, L = 1024, 768, 12
    p = plan(replace(get_preset("gpt2-small"), attention="sdpa"), T)
    assert p.flops.backward == 2 * p.flops.forward + 2 * T * T * d * L
    code, out, err = run(capsys, "plan", "gpt2-small", "--attention", "sdpa", "--ctx", "1024")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("Backward = "))
    assert line.startswith("Backward = 2.0553 × forward (456,866/222,289 exactly)"), line
    assert "recomputes the scores QKᵀ" in line


# ---- distcheck --json -: standard output holds the JSON alone ------------------------------
def test_distcheck_json_on_stdout_is_json_alone(capsys, monkeypatch):
    """Was: the 'ok rank ...' lines and the JSON both on stdout: `| jq` failed. The checks
    are replaced by one canned measurement (the workers are not the subject here)."""
    import json
    from accounting.distcheck import __main__ as distcheck, compare, fake, gloo
    case = {"case": {"rank": 0, "world": 1, "label": "canned"}}
    monkeypatch.setattr(gloo, "run_group", lambda cases: [case])
    monkeypatch.setattr(fake, "run_cases", lambda cases: [])
    monkeypatch.setattr(compare, "compare", lambda m: [])
    code = distcheck.main(["--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out) == [case]
    assert "ok  rank  0 of 1: canned: 0/0 quantities agree" in err


# ---- markdown output shows a config's name as text, never as HTML --------------------------
def test_markdown_escapes_html_from_a_config_name(capsys, tmp_path):
    """Was: '## Answer: <img src=x onerror=alert(1)> ...' (raw HTML in any rendered page)."""
    import json
    from cli_run import run
    path = tmp_path / "evil.json"
    path.write_text(json.dumps({"name": "<img src=x onerror=alert(1)> & co", "vocab_size": 100,
                                "context_length": 64, "num_layers": 2, "d_model": 64,
                                "num_heads": 4}))
    code, out, err = run(capsys, "--config", str(path), "--no-verify", "--format", "markdown")
    assert code == 0, err
    assert "<img" not in out and "&lt;img src=x onerror=alert(1)> & co" in out


# ---- --list takes no other argument; --help names every preset -----------------------------
@pytest.mark.parametrize("argv,named", [(["--list", "gpt2-xl"], "the model 'gpt2-xl'"),
                                        (["--list", "--ctx", "80"], "--ctx"),
                                        (["plan", "--list", "--gpu", "H100"], "--gpu"),
                                        (["serve", "--list", "--config", "x.json"], "--config")])
def test_list_refuses_what_it_would_ignore(capsys, argv, named):
    """Was: exit 0 with the preset table, the model or flag silently dropped."""
    from cli_run import refused_in_one_line
    refused_in_one_line(capsys, *argv, expected=f"so {named} would be ignored")


def test_list_keeps_its_output_options(capsys):
    from cli_run import run
    code, out, err = run(capsys, "--list", "--format", "markdown")
    assert code == 0 and out.startswith("## Presets"), err


def test_help_names_every_preset_list_shows(capsys):
    """Was: the help's list stopped at meta-llama/Llama-3.1-8B; --list had 20 presets. The
    names are read from --list's own table, not from the code under test."""
    import re
    from cli_run import run
    code, out, err = run(capsys, "--list")
    rows = out.split("\n---")[1].split("\n")[1:]
    names = [r.split()[0] for r in rows if r.strip() and not r.startswith("Give ")]
    code, out, err = run(capsys, "--help")
    flat = re.sub(r"\s+", "", out)  # argparse wraps the help anywhere, hyphens included
    assert len(names) >= 20 and all(n in flat for n in names), [n for n in names if n not in flat]


# ---- a numeral is digits (with thousands groups), never Python's int() syntax -------------
@pytest.mark.parametrize("argv,flag", [
    (["gpt2-small", "--ctx", "8_0"], "--ctx"), (["gpt2-small", "--ctx", "8,0"], "--ctx"),
    (["gpt2-small", "--ctx", "٨٠"], "--ctx"), (["gpt2-small", "--num-layers", "1_2"], "--num-layers"),
    (["gpt2-small", "--nope-layers", "1_0"], "--nope-layers"),
    (["gpt2-small", "--norm-eps", "1_0"], "--norm-eps"),
    (["plan", "gpt2-small", "--gpu-mem", "8_0GB"], "--gpu-mem"),
    (["plan", "gpt2-small", "--mfu", "0.5_0"], "--mfu"),
    (["plan", "gpt2-small", "--gpus", "2", "--zero", "0_1"], "--zero")],
    ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_odd_numerals_are_refused(capsys, argv, flag):
    """Was: '--ctx 8_0' answered for T = 80 (int('8_0') == 80), '--zero 0_1' planned ZeRO-1."""
    from cli_run import refused_in_one_line
    refused_in_one_line(capsys, *argv, "--no-verify" if argv[0] != "plan" else "--format",
                        *([] if argv[0] != "plan" else ["text"]), expected=flag)


def test_thousands_groups_still_read(capsys):
    from cli_run import run
    code, out, err = run(capsys, "gpt2-small", "--ctx", "1,024", "--no-verify", "--brief")
    assert code == 0 and "T = 1,024" in out, err


# ---- a time to train for what does not fit is labelled so ----------------------------------
def test_a_layout_that_does_not_fit_has_its_time_labelled(capsys):
    """Was: 'time for 1,000,000,000 tokens  3,815 steps, 43.40 days' beside 'does not fit'.
    Llama-3.1-8B at T = 131,072 in fp32 on 2 H100s needs ~214 TB per GPU (the plan's own
    'does not fit' line, checked here first)."""
    from cli_run import run
    code, out, err = run(capsys, "plan", "meta-llama/Llama-3.1-8B", "--gpus", "2", "--gpu",
                         "H100", "--tokens", "1000000000")
    assert code == 0, err
    assert "does not fit:" in out
    times = [x for x in out.splitlines() if x.startswith(("step time (estimate)", "time for "))]
    assert len(times) == 2 and all(x.endswith("; if it fitted, which it does not on H100-SXM")
                                   for x in times), times


def test_one_gpu_that_does_not_fit_has_its_time_labelled(capsys):
    from cli_run import run
    code, out, err = run(capsys, "plan", "meta-llama/Llama-3.1-8B", "--gpu", "H100",
                         "--tokens", "1000000000")
    assert code == 0 and "fits:          NO" in out, err
    line = next(x for x in out.splitlines() if x.startswith("time to train:"))
    assert line.endswith("; if it fitted, which batch 1 does not on H100-SXM"), line
    code, out, err = run(capsys, "plan", "gpt2-small", "--gpu", "H100", "--tokens", "1000000000")
    line = next(x for x in out.splitlines() if x.startswith("time to train:"))
    assert "if it fitted" not in line


# ---- --search with --tokens gives each layout its time to train ---------------------------
def test_search_shows_each_layouts_time_to_train(capsys):
    """Was: no time to train in the search table, and none in its JSON. By hand: 10^9 tokens
    in steps of 16 × 8,192 tokens is ⌈7,629.39⌉ = 7,630 steps; the time is 7,630 steps of
    the layout's own step time."""
    import json
    from cli_run import run
    argv = ["plan", "meta-llama/Llama-3.1-8B", "--gpus", "16", "--gpu", "H100", "--search",
            "--tokens", "1000000000", "--ctx", "8192", "--precision", "bf16-mixed",
            "--recompute", "full"]
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    first = json.loads(out)["ranked"][0]["time_to_train"]
    assert first["steps"] == 7630
    hours = first["seconds"]["numerator"] / first["seconds"]["denominator"] / 3600
    code, out, err = run(capsys, *argv)
    lines = out.splitlines()
    assert lines[2].endswith("time for 1,000,000,000 tokens"), lines[2]
    assert lines[4].endswith(f"{hours:.2f} h"), (lines[4], hours)
