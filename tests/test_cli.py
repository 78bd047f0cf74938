"""The CLI as users call it: main(argv) -> int, output formats, one-line errors."""
import csv
import io
import json
import subprocess
import sys

import pytest

from cli_run import run


def test_text_report(capsys):
    code, out, err = run(capsys, "gpt2-xl", "--no-verify")
    assert code == 0 and err == ""
    assert "4,513,336,524,800" in out  # hand-derived in test_analysis.py
    assert "2,127,057,600" in out
    for section in ("Parameters", "Matmuls (forward pass)", "Matmul FLOPs by component",
                    "Non-matmul FLOPs", "Closed forms", "GiB", "GB"):
        assert section in out


def test_json_holds_exact_integers(capsys):
    code, out, _ = run(capsys, "gpt2-xl", "--ctx", "16384", "--format", "json", "--no-verify")
    data = json.loads(out)
    assert code == 0
    # hand value from test_analysis.test_gpt2_xl_16k_ratio
    assert data["matmul_flops"]["executed"] == 149_522_795_724_800
    assert isinstance(data["parameters"]["total"], int)
    assert sum(r["flops"] for r in data["ledger"] if r["kind"] == "matmul") == 149_522_795_724_800


def test_csv_ledger(capsys):
    code, out, _ = run(capsys, "gpt2-small", "--format", "csv", "--no-verify", "--batch", "4")
    rows = list(csv.DictReader(io.StringIO(out)))
    matmul = [r for r in rows if r["kind"] == "matmul"]
    assert len(matmul) == 10  # Q, K, V, QKᵀ, scores·V, O, W1, W3, W2, LM head
    # 4 × small at T=1024: 12·(8·1024·768² + 4·1024²·768 + 6·1024·768·3072) + 2·1024·768·50257
    per_seq = 12 * (8 * 1024 * 768**2 + 4 * 1024**2 * 768 + 6 * 1024 * 768 * 3072) + 2 * 1024 * 768 * 50257
    assert sum(int(r["flops"]) for r in matmul) == 4 * per_seq


def test_markdown_and_output_file(capsys, tmp_path):
    target = tmp_path / "out.md"
    code, out, _ = run(capsys, "gpt2-medium", "--format", "markdown", "--no-verify", "-o", str(target))
    assert code == 0 and out == ""
    text = target.read_text()
    assert text.startswith("## Answer: gpt2-medium") and "| component |" in text
    assert text.index("## Answer") < text.index("## Model and workload")
    assert not [p for p in tmp_path.iterdir() if p.name != "out.md"]  # no temp file left


def test_custom_config_from_flags_and_overrides(capsys):
    code, out, _ = run(capsys, "--vocab-size", "1000", "--context-length", "128", "--num-layers",
                       "2", "--d-model", "128", "--num-heads", "4", "--format", "json", "--no-verify")
    data = json.loads(out)
    assert code == 0 and data["config"]["d_ff"] == 384  # default 8/3·128 = 341.3 -> 384
    code, out, _ = run(capsys, "gpt2-xl", "--num-layers", "2", "--format", "json", "--no-verify")
    assert json.loads(out)["config"]["num_layers"] == 2


def test_train_pass_and_useful_count(capsys):
    code, out, _ = run(capsys, "gpt2-xl", "--pass", "train", "--count", "useful", "--format", "json",
                       "--no-verify")
    data = json.loads(out)
    # train = forward + backward = 3× forward; useful attention core at T=1024:
    # 48·2·1024·1025·1600 per the T(T+1)/2 rule, instead of 48·4·1024²·1600
    fwd_useful = 4_513_336_524_800 - 48 * 4 * 1024**2 * 1600 + 48 * 2 * 1024 * 1025 * 1600
    assert data["matmul_flops"]["useful"] == 3 * fwd_useful


@pytest.mark.parametrize("argv,fragment", [
    (["gpt2-xxl"], "closest presets: gpt2-xl"),
    (["gpt2-xl", "--ctx", "0"], "positive integer"),
    (["gpt2-xl", "--ctx", "-5"], "positive integer"),
    (["gpt2-xl", "--ctx", "1.5"], "positive integer"),
    (["gpt2-xl", "--batch", "abc"], "positive integer"),
    (["gpt2-xl", "--num-heads", "7"], "not divisible"),
    (["--vocab-size", "10", "--context-length", "8", "--num-layers", "1", "--d-model", "96",
      "--num-heads", "32"], "odd"),
    (["gpt2-xl", "--format", "xml"], "invalid choice"),
    (["--config", "/nonexistent/cfg.json"], "does not exist"),
    (["--d-model", "64"], "no model given"),
    (["gpt2-xl", "--pass", "sideways"], "invalid choice"),
    (["gpt2-xl", "--bogus"], "unrecognized"),
    # the architecture spec's own checks
    (["gpt2-xl", "--num-kv-heads", "4"], "not divisible by num_kv_heads 4"),
    (["--vocab-size", "10", "--context-length", "8", "--num-layers", "1", "--d-model", "64",
      "--num-heads", "4", "--head-dim", "7"], "head_dim = 7 is odd"),
    (["openai-community/gpt2", "--ctx", "2048"], "learned position table (1,024 positions)"),
    (["gpt2-xl", "--positions", "learned", "--rope-theta", "5"], "--rope-theta is given"),
    (["openai-community/gpt2", "--rope-theta", "5"], "--rope-theta is given"),
    (["gpt2-xl", "--bias", "--no-qkv-bias"], "contradicts"),
    (["gpt2-xl", "--mlp", "relu"], "invalid choice"),
    (["gpt2-xl", "--qk-norm", "sideways"], "invalid choice"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, fragment):
    code, out, err = run(capsys, *argv, "--no-verify")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("accounting: error:")
    assert fragment in err and "Traceback" not in err


def test_architecture_flags_and_list(capsys):
    # A Llama-3-8B shape from flags: 32 layers, d 4096, 32 query heads, 8 KV heads, d_ff 14,336,
    # vocab 128,256. By hand: 2·V·d (untied) + L·(2·d² + 2·d·(8·128) + 3·d·d_ff + 2d) + d
    # = 1,050,673,152 + 32·218,112,000 + 4,096 = 8,030,261,248 (Llama-3.1-8B's published count)
    code, out, _ = run(capsys, "--vocab-size", "128256", "--context-length", "8192",
                       "--num-layers", "32", "--d-model", "4096", "--num-heads", "32",
                       "--num-kv-heads", "8", "--d-ff", "14336", "--format", "json", "--no-verify")
    assert code == 0 and json.loads(out)["parameters"]["total"] == 8_030_261_248
    # GPT-2 from flags on a CS336 preset: the released 124,439,808 (test_presets.py)
    code, out, _ = run(capsys, "gpt2-small", "--norm", "layernorm", "--mlp", "gelu_tanh",
                       "--positions", "learned", "--tie-embeddings", "--bias", "--format", "json",
                       "--no-verify")
    assert code == 0 and json.loads(out)["parameters"]["total"] == 124_439_808
    code, out, _ = run(capsys, "--list")
    assert code == 0
    assert "openai-community/gpt2-xl" in out and "1,557,611,200" in out
    assert "meta-llama/Llama-3.1-8B" in out and "grouped-query attention" in out


def test_every_header_says_the_architecture(capsys):
    for name, words in (("gpt2-xl", "GPT-2 XL's shape on the CS336 architecture"),
                        ("openai-community/gpt2", "OpenAI GPT-2 small (124M) as released")):
        for brief in ((), ("--brief",)):
            code, out, _ = run(capsys, name, *brief, "--no-verify")
            assert code == 0 and words in out.split("\n\n")[0], out[:300]


def test_malformed_config_file(capsys, tmp_path):
    p = tmp_path / "cfg.json"
    p.write_text('{"vocab_size": 10,')
    code, _, err = run(capsys, "--config", str(p), "--no-verify")
    assert code == 2 and "cfg.json" in err and "not valid JSON" in err


def test_huge_values_exact(capsys):
    code, out, _ = run(capsys, "gpt2-xl", "--ctx", "10000000", "--batch", "10000", "--format",
                       "json", "--no-verify")
    T, B = 10**7, 10**4
    expected = 48 * (8 * B * T * 1600**2 + 4 * B * T * T * 1600 + 6 * B * T * 1600 * 6400) \
        + 2 * B * T * 1600 * 50257
    assert code == 0 and json.loads(out)["matmul_flops"]["executed"] == expected


def test_help_exits_zero(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--ctx" in out


def test_import_is_light():
    # `import accounting` must not pull torch, pandas or matplotlib (fresh interpreter).
    code = ("import sys, accounting; "
            "print(sorted(m for m in ('torch', 'pandas', 'matplotlib', 'numpy', 'fvcore') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_presets_read_their_config_json_when_first_looked_up():
    # Real checkpoints' config.json files are read and translated on first lookup, not at
    # `import accounting`; membership, order and length need none of them.
    code = ("import sys, accounting; from accounting.architecture import presets; P = accounting.PRESETS; "
            "print('accounting.architecture.hf_config' in sys.modules, len(P) == len(list(P)) > 16, "
            "'Qwen/Qwen3-8B' in P, 'gpt2' in P, 'openai-community/gpt2' in list(P), "
            "len(presets._HF_SOURCES)); "
            "c = P['Qwen/Qwen3-8B']; "
            "print(c.num_layers, sorted(presets._HF_SOURCES), P.get('gpt2'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Qwen3-8B's config.json: num_hidden_layers 36
    assert out.stdout.splitlines() == ["False True True False True 0",
                                       "36 ['Qwen/Qwen3-8B'] None"]


def test_module_entry_point():
    out = subprocess.run([sys.executable, "-m", "accounting", "gpt2-small", "--no-verify"],
                         capture_output=True, text=True)
    # 2·50257·768 + 12·(2·768 + 4·768² + 3·768·3072) + 768 = 190,460,160
    assert out.returncode == 0 and "190,460,160" in out.stdout


def test_every_spec_field_has_one_flag_generated_from_its_metadata():
    # issue 22: the flags were hand-written (5 fields had none, the size caps disagreed);
    # now each field but its name carries its flag, and the docs' table lists each once
    import dataclasses

    from accounting.cli.args import flag_table
    from accounting.architecture.config import ModelConfig
    names = [f.name for f in dataclasses.fields(ModelConfig)]
    rows = flag_table()[2:]
    fields_in_table = [r.split(" | ")[1].strip("`") for r in rows]
    flags = [r.split(" | ")[0].strip("|` ") for r in rows]
    assert sorted(fields_in_table) == sorted(n for n in names if n != "name")
    assert len(set(flags)) == len(flags)
    for flag in ("--router-groups", "--router-topk-groups", "--router-bias",
                 "--norm-topk-prob", "--routed-scaling-factor"):  # the five that had none
        assert flag in flags


def test_spec_flags_set_their_fields(capsys):
    from accounting.cli.args import config_from_args
    from accounting.cli.main import parser
    ns = parser().parse_args(
        ["--vocab-size", "1000", "--context-length", "64", "--num-layers", "2", "--d-model", "64",
         "--num-heads", "4", "--num-experts", "8", "--router", "sigmoid", "--router-groups", "4",
         "--router-topk-groups", "2", "--router-bias", "--no-norm-topk-prob",
         "--routed-scaling-factor", "2.5", "--shared-experts", "0"])
    c = config_from_args(ns)
    assert (c.num_experts, c.router, c.router_groups, c.router_topk_groups, c.router_bias,
            c.norm_topk_prob, c.routed_scaling_factor, c.num_shared_experts) == \
        (8, "sigmoid", 4, 2, True, False, 2.5, 0)


@pytest.mark.parametrize("argv, words", [
    # every size flag has the spec's bound, 10^12 (the MoE sizes had 10^15)
    (["gpt2-small", "--num-experts", "10000000000000"], "10^12"),
    (["gpt2-small", "--sliding-window", "10000000000000"], "10^12"),
    # issue 23: a MoE option on a dense model changed nothing but the title; now refused
    (["gpt2-small", "--experts-per-token", "4"], "--num-experts"),
    (["gpt2-small", "--capacity-factor", "1.25"], "--num-experts"),
    (["gpt2-small", "--shared-experts", "1"], "--num-experts"),
    (["gpt2-small", "--router", "sigmoid"], "--num-experts"),
    (["gpt2-small", "--dense-layers", "0"], "--num-experts"),
])
def test_spec_flag_bounds_and_needs(capsys, argv, words):
    from accounting.cli.main import main
    assert main([*argv, "--no-verify"]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


# ---- --help and --help-all (issue 38, Must 4) ----------------------------------------------
def _spec_flags() -> list[str]:
    """Every per-field flag of the spec, from the fields' own metadata (architecture/fields.py)
    and --bias (args.py's one flag for the three biases)."""
    from accounting.architecture import fields
    from accounting.architecture.config import ModelConfig
    return [m.flag for _, m in fields.flagged(ModelConfig)] + ["--bias"]


@pytest.mark.parametrize("command", [(), ("plan",), ("serve",)])
def test_help_leaves_the_spec_flags_to_help_all(capsys, command):
    code, short, _ = run(capsys, *command, "--help")
    assert code == 0
    code, full, _ = run(capsys, *command, "--help-all")
    assert code == 0
    listed_short = {line.split()[0].rstrip(",") for line in short.splitlines()
                    if line.startswith("  --")}
    listed_full = {line.split()[0].rstrip(",") for line in full.splitlines()
                   if line.startswith("  --")}
    spec = set(_spec_flags())
    assert not spec & listed_short  # none of the per-field flags in --help ...
    # ... every one in --help-all (a BooleanOptionalAction is listed as "--x, --no-x")
    assert spec <= listed_full
    assert f"one per field of the spec ({len(spec)}:" in " ".join(short.split())
    assert listed_short <= listed_full


def test_plan_help_puts_the_questions_flags_first(capsys):
    code, out, _ = run(capsys, "plan", "--help")
    titles = [line for line in out.splitlines() if line and not line[0].isspace()
              and line.endswith(":")]
    assert titles.index("workload:") < titles.index("custom config (each flag also overrides "
                                                    "a preset):")
    # the model's groups come after every group of the question's own
    assert all(t.startswith(("positional", "options", "custom config", "architecture",
                             "sliding windows"))
               for t in titles[titles.index("custom config (each flag also overrides a preset):"):])


def test_the_spec_flags_still_parse_and_the_web_form_keeps_them():
    from accounting.cli.plan import parser
    ns = parser().parse_args(["gpt2-small", "--num-kv-heads", "4"])
    assert ns.num_kv_heads == 4
    from accounting.web.form import QUESTIONS, fields
    names = {f.name for q in QUESTIONS.values() for f in fields(q)}
    assert "num_kv_heads" in names and "help_all" not in names
