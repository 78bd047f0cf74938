"""Recipes: defaults that follow the input, the JSON contract, bad combinations refused in
one line, and the figures of a Llama-3.1-8B plan worked by hand.

Expected values are hand algebra written out here (Llama-3.1-8B's published config.json:
L = 32, d_model = 4,096, h_kv = 8, d_k = 128, d_ff = 14,336, V = 128,256,
max_position_embeddings = 131,072) or transformers' own buffers
(tests/test_transformers_saves.py measures those on the model)."""
import csv
import io
import json

import pytest

from accounting.planning.plan import plan
from cli_run import refused_in_one_line, run

LLAMA = "meta-llama/Llama-3.1-8B"
L, D, KV, DK, FF, V = 32, 4096, 8, 128, 14336, 128256
N = V * D * 2 + L * (2 * D * D + 2 * D * KV * DK + 3 * D * FF + 2 * D) + D  # 8,030,261,248


def plan_json(capsys, *argv):
    code, out, err = run(capsys, "plan", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def item(d, fragment):
    return sum(i["bytes"] for i in d["training_memory"]["items"] if fragment in i["name"])


def test_defaults_follow_the_input(capsys):
    course = plan_json(capsys, "gpt2-xl")
    assert (course["assumptions"]["implementation"], course["assumptions"]["precision"],
            course["assumptions"]["attention"]) == ("course", "fp32", "naive")
    hf = plan_json(capsys, LLAMA, "--ctx", "8192")
    assert (hf["assumptions"]["implementation"], hf["assumptions"]["precision"],
            hf["assumptions"]["attention"], hf["assumptions"]["optimizer"]) == \
        ("transformers", "bf16-mixed", "sdpa", "adamw")
    assert hf["parameters"]["count"] == hf["parameters"]["trainable"] == N == 8_030_261_248
    # inference in bf16: 2 bytes per weight and KV element
    assert hf["inference"]["bytes_per_element"] == 2
    # GPT-2 (Conv1D, learned positions, LayerNorm): transformers' own ops since issue 41
    # (tests/test_transformers_gpt2.py)
    gpt2 = plan_json(capsys, "openai-community/gpt2", "--ctx", "1024")
    assert gpt2["assumptions"]["implementation"] == "transformers"
    assert gpt2["assumptions"]["attention"] == "sdpa"
    # DeepSeek-V3 (latent attention, grouped routing): transformers' own ops
    # (tests/test_transformers_deepseek.py), without the MTP module transformers lacks
    moe = plan_json(capsys, "deepseek-ai/DeepSeek-V3", "--ctx", "1024")
    assert moe["assumptions"]["implementation"] == "transformers"
    assert "no MTP module" in moe["assumptions"]["implementation_meaning"]
    assert moe["assumptions"]["attention"] == "sdpa"


def test_the_first_screen_names_the_recipe(capsys):
    code, out, _ = run(capsys, "plan", LLAMA, "--ctx", "8192", "--gpu", "H100")
    answer = out.split("\n\n")[0]
    assert ("recipe:        transformers implementation, bf16-mixed, sdpa attention, "
            "recomputation none, optimizer adamw") in answer


def test_rope_buffers_are_transformers_inv_freq_not_tables(capsys):
    hf = plan_json(capsys, LLAMA, "--ctx", "8192")
    # inv_freq and original_inv_freq: d_k/2 = 64 float32 each
    assert item(hf, "RoPE") == 2 * (DK // 2) * 4 == 512
    course = plan_json(capsys, LLAMA, "--ctx", "8192", "--implementation", "course")
    # model/: cos and sin tables of T_max·d_k/2 float32 in each of the 32 blocks
    assert item(course, "RoPE") == L * 2 * 131072 * (DK // 2) * 4 == 2_147_483_648


def test_full_fine_tune_with_8bit_adamw_by_hand(capsys):
    d = plan_json(capsys, LLAMA, "--ctx", "8192", "--optimizer", "adamw8bit")
    # every tensor has ≥ 4,096 elements (the norms exactly 4,096): all 8-bit, m and v one
    # byte each, one float32 absmax per block of 256 for each
    tensors = [V * D, V * D, D] + [D * D, KV * DK * D, KV * DK * D, D * D, D, D,
                                   FF * D, D * FF, FF * D] * L
    assert sum(tensors) == N
    blocks = sum(-(-n // 256) for n in tensors)
    assert item(d, "moments m and v (uint8)") == 2 * N
    assert item(d, "block scales") == 2 * 4 * blocks
    assert item(d, "code books") == 2 * 256 * 4
    assert not [i for i in d["training_memory"]["items"] if "step counters" in i["name"]]
    adamw = plan_json(capsys, LLAMA, "--ctx", "8192")
    # the peak drops by the 8 bytes of fp32 m and v per parameter, less the 8-bit state
    saved = (adamw["peak"]["peak_bytes"] - d["peak"]["peak_bytes"])
    assert saved == 8 * N - (2 * N + 8 * blocks + 2048)


def test_precision_bytes_per_parameter(capsys):
    for precision, per in (("fp32", 16), ("bf16-mixed", 16), ("bf16", 8), ("bf16-master", 16)):
        d = plan_json(capsys, "gpt2-small", "--precision", precision)
        n = d["parameters"]["count"]
        held = sum(i["bytes"] for i in d["training_memory"]["items"]
                   if i["name"].startswith(("parameters", "gradients", "fp32 master", "AdamW")))
        # parameters + gradients + (master) + m + v: 4+4+4+4, 4+4+4+4, 2+2+2+2, 2+2+4+4+4
        assert held - item(d, "step counters") == per * n, precision


def test_csv_and_dataframe_carry_the_recipe(capsys):
    code, out, _ = run(capsys, "plan", LLAMA, "--ctx", "8192", "--format", "csv",
                       "--optimizer", "adafactor")
    rows = list(csv.DictReader(io.StringIO(out)))
    got = {(r["section"], r["item"]): r["value"] for r in rows}
    assert got[("recipe", "implementation")] == "transformers"
    assert got[("recipe", "optimizer")] == "adafactor"
    assert int(got[("parameters", "trainable")]) == N
    pytest.importorskip("pandas")
    from accounting.planning.export import to_frame
    df = to_frame(plan(LLAMA, 8192, optimizer="adafactor"))
    assert set(df[df.section == "recipe"].item) >= {"implementation", "attention", "optimizer"}


@pytest.mark.parametrize("argv,expected", [
    (("gpt2-small", "--optimizer", "adamw8bit", "--precision", "bf16-master"),
     "keeps 8-bit moments"),
    (("gpt2-small", "--optimizer", "adamw8bit-torchao", "--precision", "bf16-master"),
     "keeps 8-bit moments"),
    ((LLAMA, "--implementation", "transformers", "--attention", "naive"), "eager attention"),
    # (DeepSeek-V3's ops are modelled since issue 41: tests/test_transformers_deepseek.py)
    # (Mistral-7B-v0.1's sliding window is modelled since issue 41: tests/test_transformers_saves.py)
    # (GPT-2's are modelled since issue 41: tests/test_transformers_gpt2.py)
    (("gpt2-small", "--scope", "course", "--optimizer", "sgd"), "--scope course"),
    # issue 30: the many-GPU plans take every precision and optimizer, but not these
    (("gpt2-small", "--gpus", "8", "--optimizer", "muon", "--zero", "1"), "ZeRO-1"),
    (("gpt2-small", "--gpus", "8", "--optimizer", "adafactor", "--zero", "3"), "FSDP"),
    (("gpt2-small", "--gpus", "8", "--precision", "fp8-te", "--gpu", "A100"), "fp8 Tensor Cores"),
    (("gpt2-small", "--gpus", "8", "--stack", "torchtitan", "--implementation", "course"),
     "--stack torch"),
    (("gpt2-small", "--optimizer", "lion"), "invalid choice"),
    (("gpt2-small", "--implementation", "vllm"), "invalid choice"),
])
def test_bad_recipes_are_refused_in_one_line(capsys, argv, expected):
    refused_in_one_line(capsys, "plan", *argv, expected=expected)


def test_frozen_parameters_have_no_gradient_or_state():
    """The trainable predicate: the embedding and head frozen (gradient and state only
    for the blocks and the final norm)."""
    from accounting.ledger import records as R
    p = plan("gpt2-small", 1024, precision="fp32",
             trainable=lambda q: q.component not in (R.EMBEDDING, R.LM_HEAD))
    V2, D2 = 50257, 768
    frozen = 2 * V2 * D2
    n = p.memory.parameters
    items = {i.name: i.bytes for i in p.memory.items}
    assert items["parameters (fp32)"] == 4 * n
    assert items["gradients (fp32)"] == 4 * (n - frozen)
    assert items["AdamW first moment m (fp32)"] == 4 * (n - frozen)


def test_transformers_is_refused_where_its_ops_are_not_modelled(capsys, tmp_path):
    """A model whose transformers ops are not modelled (GPT-NeoX's parallel block, partial
    rotary): --implementation transformers refused in one line; by default model/'s ops,
    named (the gap)."""
    from hf_examples import write_config
    from test_hf_parallel import CONFIGS as PARALLEL
    path = str(write_config(tmp_path, PARALLEL["gpt_neox"], folder=None))
    refused_in_one_line(capsys, "plan", "--config", path, "--implementation", "transformers",
                        expected="is not modelled for")
    neox = plan_json(capsys, "--config", path, "--ctx", "64")
    assert neox["assumptions"]["implementation"] == "course"
    assert "not yet modelled" in neox["assumptions"]["implementation_meaning"]


@pytest.mark.parametrize("extra", [
    ("--lora-rank", "16"), ("--lora-rank", "16", "--base-weights", "nf4",
                            "--prepare-kbit-training"),
    ("--loss", "chunked"), ("--loss", "fused-linear"), ("--offload", "activations"),
    ("--compile", "--loss", "chunked")])
def test_csv_peak_rows_of_the_recipe_flags(capsys, extra):
    """Regression (an internal error, exit 3): --format csv evaluated the peak with the bare
    ledger's symbol values, which lack LoRA's rank r, the loss recipe's chunk symbols and
    the offloaded rows' (KeyError 'r', '[B>1]', 'C_fl', '[off0]'). The CSV's peak moments are
    the JSON's (to_dict takes the memory model's values), and its CUDA rows hand algebra:
    Llama-3.2-1B (published config.json: V = 128,256), B = 1, T = 2,048: transformers' held
    bf16 logits 2·B·T·V = 525,336,576 bytes (none with a chunked or fused loss: they keep no
    whole logits), two cuBLAS workspaces of 32 MiB = 67,108,864."""
    argv = ("plan", "meta-llama/Llama-3.2-1B", "--ctx", "2048", *extra)
    code, out, err = run(capsys, *argv, "--format", "csv")
    assert code == 0, err
    got = {r["item"]: int(r["value"]) for r in csv.DictReader(io.StringIO(out))
           if r["section"] == "peak"}
    d = plan_json(capsys, *argv[1:])
    assert {m["name"]: m["bytes"] for m in d["peak"]["moments"]}.items() <= got.items()
    assert got["CUDA rule: cuBLAS workspaces"] == 2 * 32 * 2**20 == 67_108_864
    if "--loss" not in extra:
        assert got["CUDA rule: transformers' loss"] == 2 * 1 * 2048 * 128256 == 525_336_576
