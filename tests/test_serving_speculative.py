"""Speculative decoding at serving time (issue 40, serving/speculative.py): the expected
tokens a step against Leviathan et al.'s formula worked by hand, the verify step at one query
token against serve's own TPOT, the MTP drafter as one block of the last layer's kind, the
search and launch commands with it, refusals."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from accounting.serving.speculative import Speculation, mtp_block
from accounting.architecture.presets import get_preset
from tests.cli_run import refused_in_one_line, run

L70 = str(Path(__file__).parent / "data" / "serving" / "Llama-3.1-70B.json")
DSV3 = ["deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "8", "--ctx", "5120", "--prompt",
        "4096", "--concurrency", "64"]


@pytest.mark.parametrize("a,k,expected", [
    (Fraction(85, 100), 1, Fraction(185, 100)),  # 1 + 0.85
    (Fraction(85, 100), 2, 1 + Fraction(85, 100) + Fraction(85, 100) ** 2),  # 2.5725
    (Fraction(0), 3, Fraction(1)),  # nothing accepted: the verified token only
    (Fraction(1), 3, Fraction(4)),  # everything accepted: k + 1
])
def test_expected_tokens_by_hand(a, k, expected):
    s = Speculation("mtp", k, a, Fraction(1), Fraction(0))
    assert s.expected_tokens == expected and s.tpot_seconds == 1 / expected


def test_mtp_block_is_one_layer_of_the_last_kind():
    c = get_preset("deepseek-ai/DeepSeek-V3")
    b = mtp_block(c)
    # DeepSeek-V3: layers 0-2 dense, 3-60 MoE (first_k_dense_replace 3): its MTP module's
    # block is a MoE block (transformers' MtpModel builds type(layers[-1]))
    assert b.num_layers == 1 and b.dense_layers == () and b.num_experts == c.num_experts


def _serve(capsys, *argv) -> dict:
    code, out, err = run(capsys, "serve", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_serve_reports_speculation_and_costs_it(capsys):
    from accounting.timing import tables
    d = _serve(capsys, *DSV3, "--speculative", "mtp", "--acceptance", "0", "--num-speculative-tokens", "1")
    s = d["speculative"]
    serve_tpot = Fraction(d["tpot_seconds"]["numerator"], d["tpot_seconds"]["denominator"])
    tpot = Fraction(s["tpot_seconds"]["numerator"], s["tpot_seconds"]["denominator"])
    # acceptance 0: one token a step, so the speculative step (a verify of 2 query tokens a
    # sequence plus the MTP block) costs more per token than serve's plain step
    assert s["expected_tokens"]["approx"] == 1 and tpot > serve_tpot
    if tables.available():
        from accounting.cli.serve import parser, plan_from_args, plan_inputs
        from accounting.planning.gpus import get_gpu
        from accounting.serving.speculative import _decode_seconds
        ns = parser().parse_args(DSV3)
        p = plan_from_args(ns)
        one = _decode_seconds(plan_inputs(ns)[0], get_gpu(p.gpu), p.record.kernel_tables,
                              p.scheme.kind,
                              p.tp, 64, 5120, p.kv_dtype, 1)
        assert one == p.time.tpot_seconds  # one query token: serve's own step


def test_search_with_mtp_emits_the_speculative_flags(capsys):
    base = ["deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--search", "--max-gpus", "16",
            "--isl", "4096", "--osl", "1024", "--ttft", "3", "--tpot", "0.2",
            "--speculative", "mtp", "--acceptance", "0.85", "--num-speculative-tokens", "2"]
    d = _serve(capsys, *base)
    lay = d["layouts"][0]
    spec = lay["decode"]["speculative"]
    assert spec["tokens"] == 2
    if lay["disaggregated"]:  # the decode worker's TPOT is the speculative one
        assert lay["exact"]["tpot_seconds"] == spec["tpot_seconds"]
    assert '"method":"mtp","num_speculative_tokens":2' in lay["command"]
    s = _serve(capsys, *base, "--emit", "sglang")["layouts"][0]["command"]
    assert "--speculative-algorithm NEXTN --speculative-num-steps 2" in s
    assert "--speculative-num-draft-tokens 3" in s


@pytest.mark.parametrize("extra,expected", [
    (["--speculative", "mtp", "--acceptance", "0.8"], "MTP heads"),
    (["--speculative", "mtp"], "--acceptance"),
    (["--acceptance", "0.8"], "--speculative"),
    (["--speculative", "mtp", "--acceptance", "1.5"], "[0, 1]"),
])
def test_refusals(capsys, extra, expected):
    refused_in_one_line(capsys, "serve", "--config", L70, "--gpu", "H100", "--tp", "4",
                        *extra, expected=expected)


# DeepSeek-V3 (config.json): 61 layers, first_k_dense_replace 3 (58 MoE), 8 routed experts a
# token (num_experts_per_tok), hidden 7168; its MTP module is one MoE block
DSV3_DP = ["deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "1", "--ctx", "5120",
           "--prompt", "4096", "--concurrency", "64", "--speculative", "mtp", "--acceptance",
           "0.85", "--num-speculative-tokens", "2"]


def _fraction(x) -> Fraction:
    return Fraction(x["numerator"], x["denominator"])


def _tables() -> bool:
    from accounting.timing import tables
    return tables.available()


@pytest.mark.skipif(not _tables(), reason="aiconfigurator-core's tables are not installed")
def test_dp_attention_worker_speculates_with_its_all_to_alls(capsys):
    # regression: the search's DP-attention + EP workers dropped --speculative (their step was
    # the plain one), so the best layout named no speculation and launched without it
    from accounting.planning.gpus import get_gpu
    from accounting.serving.dp_attention import _alltoall
    rank = _serve(capsys, *DSV3_DP)["speculative"]
    dp = _serve(capsys, *DSV3_DP, "--dp", "8")["speculative"]
    b, k, top_k, d, moe = 64, 2, 8, 7168, 58
    card = get_gpu("H200")
    verify_a2a = 2 * moe * _alltoall(card, 8, b * (k + 1) * top_k * d)  # k + 1 rows a sequence
    draft_a2a = k * 2 * 1 * _alltoall(card, 8, b * top_k * d)  # k steps of the one MoE head
    assert _fraction(dp["verify_seconds"]) == _fraction(rank["verify_seconds"]) + verify_a2a
    assert _fraction(dp["draft_seconds"]) == _fraction(rank["draft_seconds"]) + draft_a2a


@pytest.mark.skipif(not _tables(), reason="aiconfigurator-core's tables are not installed")
def test_search_dp_layout_speculates_as_serve_dp(capsys):
    d = _serve(capsys, "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--search", "--max-gpus",
               "8", "--isl", "4096", "--osl", "1024", "--ttft", "3", "--tpot", "0.5",
               "--speculative", "mtp", "--acceptance", "0.85", "--num-speculative-tokens", "2")
    lay = next(x for x in d["layouts"] if not x["disaggregated"] and x["decode"]["dp"] > 1)
    wk = lay["decode"]
    assert wk["speculative"] is not None
    assert '"method":"mtp","num_speculative_tokens":2' in lay["command"]
    s = _serve(capsys, "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", str(wk["tp"]),
               "--dp", str(wk["dp"]), "--ctx", "5120", "--prompt", "4096", "--concurrency",
               str(wk["dp_attention"]["rank_batch"]), "--kv-dtype", wk["kv_dtype"],
               "--speculative", "mtp", "--acceptance", "0.85", "--num-speculative-tokens", "2")
    assert s["speculative"]["tpot_seconds"] == wk["speculative"]["tpot_seconds"]
