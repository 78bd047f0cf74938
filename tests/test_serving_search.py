"""`serve --search` (issue 40): the search's optimum against a brute force written here
(serve() called for every layout and batch, the deployments composed by the algebra in
docs/serving_search.md written out again), every layout's figures against `serve`'s own run
of that worker, the JSON contract, the launch commands, and refusals."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from accounting.formats.schemes import get_scheme
from accounting.planning.gpus import get_gpu
from accounting.serving.plan import serve
from accounting.serving.search import Workload, search
from accounting.architecture.loaders import read_config
from accounting.architecture.presets import get_preset
from tests.cli_run import refused_in_one_line, run

DATA = Path(__file__).parent / "data" / "serving"
L70 = str(DATA / "Llama-3.1-70B.json")


def _brute_force(config, scheme, gpu, w: Workload) -> Fraction:
    """The most output tokens/s per GPU of any deployment meeting the targets, every
    combination tried: TP 1..node, the checkpoint's weights and fp8, bf16/fp8 KV, batches
    1, 2, 4 ... 1024, 1..8 prefill and 1..8 decode workers."""
    card = get_gpu(gpu)
    ctx = w.isl + w.osl
    plans = {}
    for wt in ("bf16", "fp8"):
        for kvd in ("bf16", "fp8"):
            for tp in (1, 2, 4, 8):
                if tp > w.max_gpus:
                    continue
                b = 1
                while b <= 1024:
                    p = serve(config, get_scheme(wt), gpu=gpu, tp=tp, kv_dtype=kvd, ctx=ctx,
                              prompt=w.isl, concurrency=b)
                    if p.fits and b <= p.max_num_seqs:
                        plans[(wt, kvd, tp, b)] = p
                    b *= 2
    best = Fraction(0)
    for (wt, kvd, tp, b), p in plans.items():
        P, D = p.time.ttft_seconds, p.time.tpot_seconds
        tpot = D + b * P / w.osl  # aggregated: B prefills spread over OSL steps
        if P <= w.ttft and tpot <= w.tpot:
            best = max(best, Fraction(b) / (w.osl * tpot) * w.osl / tp)
        if D > w.tpot:
            continue
        for (wt2, kvd2, tp2, b2), pre in plans.items():
            if (wt2, kvd2, b2) != (wt, kvd, 1):
                continue
            for x in range(1, 9):
                for y in range(1, 9):
                    gpus = x * tp2 + y * tp
                    if gpus > w.max_gpus:
                        continue
                    link = card.fabric.nvlink if gpus <= 8 else card.fabric.network
                    ttft = pre.time.ttft_seconds + Fraction(
                        w.isl * p.kv_bytes_per_token_per_gpu) / link
                    if ttft > w.ttft:
                        continue
                    rate = min(Fraction(x) / pre.time.ttft_seconds, Fraction(y * b) / (w.osl * D))
                    best = max(best, rate * w.osl / gpus)
    return best


@pytest.mark.slow
@pytest.mark.parametrize("ttft,tpot", [(Fraction(1, 2), Fraction(1, 50)),
                                       (Fraction(2), Fraction(1, 100))])
def test_search_optimum_equals_brute_force_llama_8b(ttft, tpot):
    config = get_preset("meta-llama/Llama-3.1-8B")
    w = Workload(2048, 256, ttft, tpot, None, 4)
    r = search(config, get_scheme("bf16"), "H100", w)
    assert r.layouts, "a layout meets these targets on 4 H100s"
    assert r.layouts[0].tokens_per_second_per_gpu(w.osl) == \
        _brute_force(config, get_scheme("bf16"), "H100", w)


def test_search_equals_its_exhaustive_mode():
    """The pruned sweep (stop at the first batch over the TPOT target; the two worker ratios
    around balance) finds what trying every batch and pairing finds."""
    config = read_config(L70)[0]
    w = Workload(4096, 1024, Fraction(3), Fraction(1, 50), None, 8)
    fast = search(config, get_scheme("bf16"), "H100", w)
    full = search(config, get_scheme("bf16"), "H100", w, exhaustive=True)
    assert fast.layouts[0].tokens_per_second_per_gpu(w.osl) == \
        full.layouts[0].tokens_per_second_per_gpu(w.osl)
    assert fast.evaluated < full.evaluated


def _serve_json(capsys, *argv) -> dict:
    code, out, err = run(capsys, "serve", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _exact(d) -> Fraction:
    return Fraction(d["numerator"], d["denominator"])


def test_contract_and_each_layout_equals_serve(capsys):
    r = _serve_json(capsys, "--config", L70, "--gpu", "H100", "--search", "--max-gpus", "8",
                    "--isl", "4096", "--osl", "1024", "--ttft", "3", "--tpot", "0.05")
    lays = r["layouts"]
    assert lays
    for lay in lays:
        assert isinstance(lay["gpus"], int) and 1 <= lay["gpus"] <= 8
        assert isinstance(lay["disaggregated"], bool) and isinstance(lay["command"], str)
        assert lay["ttft_seconds"] <= 3 and lay["tpot_seconds"] <= 0.05
    per_gpu = [x["tokens_per_second_per_gpu"] for x in lays]
    assert per_gpu == sorted(per_gpu, reverse=True)
    # AIConfigurator's published answer for this model, GPU and SLA (docs/serving_search.md):
    # 2 prefill workers at TP 2 and 1 decode worker at TP 4; the search's best is the same
    best = lays[0]
    from accounting.timing import tables
    assert not tables.available() or best["disaggregated"] and best["prefill_workers"] == 2 and \
        best["prefill"]["tp"] == 2 and best["decode_workers"] == 1 and best["decode"]["tp"] == 4
    agg = next(x for x in lays if not x["disaggregated"])
    for lay in (best, agg):
        for role in ("prefill", "decode"):
            wk = lay[role]
            if wk is None:
                continue
            argv = ["--config", L70, "--gpu", "H100", "--tp", str(wk["tp"]), "--ctx", "5120",
                    "--prompt", "4096", "--concurrency", str(wk["batch"]),
                    "--kv-dtype", wk["kv_dtype"], "--weights", wk["weights"]]
            s = _serve_json(capsys, *argv)
            assert _exact(s["ttft_seconds"]) == _exact(wk["serve_ttft_seconds"])
            assert _exact(s["tpot_seconds"]) == _exact(wk["serve_tpot_seconds"])
    # aggregated: TPOT = serve's step + B · serve's TTFT / OSL (written out)
    d = agg["decode"]
    want = _exact(d["serve_tpot_seconds"]) + d["batch"] * _exact(d["serve_ttft_seconds"]) / 1024
    assert _exact(agg["exact"]["tpot_seconds"]) == want
    # disaggregated: TTFT = the prefill worker's + ISL × KV bytes/token/GPU over NVLink 4 per
    # direction (900 GB/s bidirectional / 2, the DGX H100 datasheet); Llama-3.1-70B's KV per
    # token per GPU at TP 4: 80 layers × 2 (K, V) × 8/4 heads × 128 × bytes of the KV dtype
    kvb = {"bf16": 2, "fp8": 1}[best["decode"]["kv_dtype"]]
    transfer = Fraction(4096 * 80 * 2 * 2 * 128 * kvb, 450 * 10**9)
    assert _exact(best["exact"]["ttft_seconds"]) == \
        _exact(best["prefill"]["serve_ttft_seconds"]) + transfer


def test_emitted_commands_name_the_engines_flags(capsys):
    base = ["--config", L70, "--gpu", "H100", "--search", "--max-gpus", "8", "--isl", "4096",
            "--osl", "1024", "--ttft", "3", "--tpot", "0.05"]
    v = _serve_json(capsys, *base)["layouts"][0]["command"]
    pre, dec = v.split(" ; ")
    assert pre.startswith("vllm serve ") and "--tensor-parallel-size 2" in pre
    assert '"kv_role":"kv_producer"' in pre and '"kv_role":"kv_consumer"' in dec
    assert "--tensor-parallel-size 4" in dec and "--max-num-seqs" in dec
    s = _serve_json(capsys, *base, "--emit", "sglang")["layouts"][0]["command"]
    pre, dec = s.split(" ; ")
    assert pre.startswith("python -m sglang.launch_server --model-path ")
    assert "--tp-size 2" in pre and "--disaggregation-mode prefill" in pre
    assert "--tp-size 4" in dec and "--disaggregation-mode decode" in dec


def test_text_answer_first_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "frontier.png"
    code, out, err = run(capsys, "serve", "--config", L70, "--gpu", "H100", "--search",
                         "--max-gpus", "8", "--isl", "4096", "--osl", "1024", "--ttft", "3",
                         "--tpot", "0.05", "--plot", str(png))
    assert code == 0, err
    head = out.splitlines()[:8]
    assert any(x.startswith("best aggregated:") for x in head)
    assert any(x.startswith("best disaggregated:") for x in head)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_targets_nobody_meets_exit_0_with_frontier(capsys):
    r = _serve_json(capsys, "--config", L70, "--gpu", "H100",
                    "--search", "--max-gpus", "2", "--isl", "4096", "--osl", "1024",
                    "--ttft", "0.001", "--tpot", "0.05")
    assert r["layouts"] == [] and r["notes"]


@pytest.mark.parametrize("extra,expected", [
    (["--isl", "4096"], "--osl"),
    (["--isl", "4096", "--osl", "10", "--tp", "2"], "drop --tp"),
])
def test_search_refuses_in_one_line(capsys, extra, expected):
    refused_in_one_line(capsys, "serve", "--config", L70, "--gpu", "H100", "--search", *extra,
                        expected=expected)


def test_request_rate_sizes_replicas_by_littles_law():
    """At a request rate the replicas serve that rate (not their batch's capacity): tokens/s
    per GPU = rate × OSL / GPUs, and the replicas are the fewest whose capacity covers it."""
    config = read_config(L70)[0]
    rate = Fraction(1, 2)
    w = Workload(4096, 1024, Fraction(3), Fraction(1, 20), rate, 8)
    r = search(config, get_scheme("bf16"), "H100", w)
    for lay in r.layouts[:20]:
        assert lay.tokens_per_second_per_gpu(1024) == rate * 1024 / lay.gpus
        assert lay.requests_per_second * lay.replicas >= rate
        assert lay.requests_per_second * (lay.replicas - 1) < rate


@pytest.mark.parametrize("extra,expected", [
    (["--tp", "4", "--isl", "4096"], "--isl is a --search flag"),
    (["--tp", "4", "--emit", "sglang"], "--emit is a --search flag"),
    (["--search", "--isl", "64", "--osl", "8", "--max-gpus", "2", "--plot",
      "/nonexistent-dir/x.png"], "--plot: cannot write"),
])
def test_search_flags_refused_in_one_line(capsys, extra, expected):
    if "--plot" in extra:
        pytest.importorskip("matplotlib")
    refused_in_one_line(capsys, "serve", "--config", L70, "--gpu", "H100", *extra,
                        expected=expected)


def test_cost_per_million_tokens_by_hand():
    """With a price a GPU-hour: price × GPUs / (tokens/s × 3600) × 10^6, worked here for the
    best layout; the ranking is unchanged (one price for every GPU)."""
    config = read_config(L70)[0]
    w = Workload(4096, 1024, Fraction(3), Fraction(1, 20), None, 8, Fraction(2))
    r = search(config, get_scheme("bf16"), "H100", w)
    best = r.layouts[0]
    tps = best.tokens_per_second(1024)
    assert best.cost_per_million_tokens(w) == Fraction(2) * best.gpus * 10**6 / (tps * 3600)
    plain = search(config, get_scheme("bf16"), "H100",
                   Workload(4096, 1024, Fraction(3), Fraction(1, 20), None, 8))
    assert [x.key() for x in plain.layouts[:5]] == [x.key() for x in r.layouts[:5]]
    from accounting.serving.search_views import answer, to_dict
    assert "per 10^6 output tokens" in "\n".join(answer(r, "m", "vllm").notes)
    assert to_dict(r, "m", "vllm")["layouts"][0]["cost_per_million_tokens"] == \
        float(best.cost_per_million_tokens(w))
