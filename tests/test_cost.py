"""Issue 42, Must 3: cost = GPU-hours × a price per GPU-hour; serving per million output
tokens = the replica's GPUs' price per second / its tokens per second × 10^6.

Expected values: the table's price is RunPod's per-second list price as its page prints it
(docs.runpod.io/serverless/pricing: H100 PRO $0.00116/s), times 3,600 s, written out here;
the cost is that definition applied by hand to the time and throughput the plan prints
(each tested against its own sources elsewhere: tests/test_planning.py, test_serving.py).
"""
from __future__ import annotations

import json
from fractions import Fraction

from tests.cli_run import refused_in_one_line, run
from tests.test_hub import LLAMA, hub_env, lay_out  # noqa: F401 (a fixture)


def _json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _f(x) -> Fraction:
    return Fraction(x["numerator"], x["denominator"])


def test_a_training_run_costs_its_gpu_hours_at_the_price(capsys):
    d = _json(capsys, "plan", "gpt2-small", "--gpu", "H100", "--tokens", "10,000,000,000",
              "--batch", "32", "--price-per-gpu-hour", "2.50")
    seconds = _f(d["time_to_train"]["seconds"]) if isinstance(d["time_to_train"]["seconds"], dict) \
        else Fraction(d["time_to_train"]["seconds"])
    assert d["cost"]["dollars"] == float(seconds / 3600 * Fraction(5, 2))
    assert d["cost"]["gpus"] == 1 and d["cost"]["source"] == "--price-per-gpu-hour"


def test_the_table_price_is_runpods_per_second_price_times_3600(capsys):
    d = _json(capsys, "plan", "gpt2-small", "--gpu", "H100", "--steps", "1000",
              "--price-per-gpu-hour", "table")
    assert d["cost"]["price_per_gpu_hour"] == float(Fraction("0.00116") * 3600) == 4.176
    assert "docs.runpod.io/serverless/pricing" in d["cost"]["source"]
    code, out, err = run(capsys, "plan", "gpt2-small", "--gpu", "H100", "--steps", "1000",
                         "--price-per-gpu-hour", "table")
    assert code == 0, err
    answer = out.split("\n\n")[0]
    assert "\ncost:          $" in answer and "per GPU-hour (H100 PRO 80 GB, RunPod" in answer


def test_serving_per_million_tokens(capsys):
    d = _json(capsys, "serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--tp", "2",
              "--ctx", "8192", "--price-per-gpu-hour", "3")
    tps = Fraction(d["cost"]["tokens_per_second"])
    # 2 GPUs × $3/h = $6/h = $1/600 s; per token 1/(600·tps) dollars; × 10^6
    assert d["cost"]["gpus"] == 2
    assert abs(d["cost"]["dollars_per_million_tokens"] - float(Fraction(10**6, 600) / tps)) < 1e-9


def test_a_70b_fine_tune_from_the_cache_costs_its_8_gpus(hub_env, monkeypatch, capsys):
    # Llama 3.1 70B's config.json as published (hidden 8,192, 80 layers, 64 heads, 8 KV
    # heads, MLP 28,672; the rest as 8B's), under its hub id, in a cache on disk
    cfg = json.loads(LLAMA.read_text()) | {"hidden_size": 8192, "intermediate_size": 28672,
                                           "num_hidden_layers": 80, "num_attention_heads": 64}
    lay_out(hub_env / "cache", "meta-llama/Llama-3.1-70B", {"config.json": json.dumps(cfg).encode()})
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_env / "cache"))
    d = _json(capsys, "plan", "meta-llama/Llama-3.1-70B", "--gpus", "8", "--gpu", "H100",
              "--lora-rank", "16", "--ctx", "4096", "--batch", "8", "--zero", "3",
              "--recompute", "full", "--precision", "bf16-mixed", "--tokens", "100000000",
              "--price-per-gpu-hour", "table")
    seconds = _f(d["time_to_train"]["seconds"])
    assert d["cost"]["gpus"] == 8
    assert d["cost"]["dollars"] == float(8 * seconds / 3600 * Fraction("0.00116") * 3600)


def test_no_table_price_and_bad_prices_are_one_line(capsys):
    refused_in_one_line(capsys, "plan", "gpt2-small", "--gpu", "MI300X", "--steps", "10",
                        "--price-per-gpu-hour", "table", expected="no table price for MI300X")
    refused_in_one_line(capsys, "serve", "gpt2-small", "--gpu", "H100",
                        "--price-per-gpu-hour", "-1", expected="--price-per-gpu-hour")
    refused_in_one_line(capsys, "plan", "gpt2-small", "--gpu", "H100", "--gpus", "8", "--search",
                        "--tokens", "10", "--price-per-gpu-hour", "2", expected="costs one layout")
