"""Attention data parallelism with expert parallelism (issue 40, serving/dp_attention.py):
DeepSeek-V3's routed-expert bytes and latent KV cache worked by hand from its config, the
worker's weights, pool and sequences from them, the search's DP layouts equal to
`serve --dp`'s, the launch flags, refusals."""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from accounting.timing import tables
from tests.cli_run import refused_in_one_line, run

pytestmark = pytest.mark.skipif(not tables.available(),
                                reason="aiconfigurator-core's tables are not installed")

# DeepSeek-V3 (config.json): 61 layers, the first 3 dense; 256 routed experts of
# moe_intermediate_size 2048 on hidden 7168; kv_lora_rank 512 + qk_rope_head_dim 64;
# fp8 weights with one fp32 scale per 128×128 block (quantization_config)
E, D, DE, MOE_LAYERS, LAYERS = 256, 7168, 2048, 58, 61
MATRIX = D * DE + (D // 128) * (DE // 128) * 4  # fp8 bytes + block scales, one expert matrix
EXPERT_BYTES = MOE_LAYERS * E * 3 * MATRIX
KV_PER_TOKEN = LAYERS * (512 + 64) * 2  # the latent and the RoPE key, bf16, whole per rank


def _moe_row(ep: int, distribution: str, tokens: int) -> float:
    """Seconds of DeepSeek-V3's fused MoE call (fp8 blocks, TP 1) in vLLM 0.24.0's H200 table."""
    import pyarrow.parquet as pq
    path = tables.root() / "data/h200_sxm/moe/vllm/0.24.0/moe_perf.parquet"
    hits = [r["latency"] for r in pq.read_table(path).to_pylist()
            if (r["moe_dtype"], r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"],
                r["moe_tp_size"], r["moe_ep_size"], r["distribution"], r["num_tokens"])
            == ("fp8_block", D, DE, 8, E, 1, ep, distribution, tokens)]
    return min(hits) * 1e-3


def _json(capsys, *argv) -> dict:
    code, out, err = run(capsys, "serve", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_dp8_worker_by_hand(capsys):
    d = _json(capsys, "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "1", "--dp", "8",
              "--ctx", "5120", "--prompt", "4096", "--concurrency", "32")
    w = d["dp_attention"]
    assert w["gpus"] == 8 and w["experts_per_gpu"] == E // 8 and w["batch"] == 8 * 32
    rank_weights = d["weights_bytes_per_gpu"]  # the whole model on one rank (TP 1)
    freed = EXPERT_BYTES - EXPERT_BYTES // 8
    assert w["weights_bytes_per_gpu"] == rank_weights - freed
    assert w["kv_pool_bytes_per_gpu"] == d["kv_pool_bytes_per_gpu"] + freed
    assert d["kv_bytes_per_token_per_gpu"] == KV_PER_TOKEN
    # 5,120 tokens in blocks of 64 (vLLM's MLA block): exactly 80 blocks
    assert w["max_rank_sequences"] == w["kv_pool_bytes_per_gpu"] // (KV_PER_TOKEN * 5120)
    # the step: the rank's serve step, its routed experts (all 256 on the rank, its 32
    # tokens) swapped for the EP 8 GPU's (32 experts, all 8 ranks' 256 tokens), plus two
    # all-to-alls in each of the 58 MoE layers; the two expert times are vLLM 0.24.0's
    # MoE-table rows, read here from the parquet file (issue 39b)
    step = Fraction(w["tpot_seconds"]["numerator"], w["tpot_seconds"]["denominator"])
    rank = Fraction(d["tpot_seconds"]["numerator"], d["tpot_seconds"]["denominator"])
    a2a = Fraction(w["alltoall_seconds"]["numerator"], w["alltoall_seconds"]["denominator"])
    rank_experts = MOE_LAYERS * _moe_row(1, "power_law_1.01", 32)
    ep_experts = MOE_LAYERS * _moe_row(8, "balanced", 8 * 32)
    assert float(step) == pytest.approx(float(rank) - rank_experts + ep_experts + float(a2a))
    assert a2a > 0 and ep_experts < rank_experts


def test_imbalance_scales_the_routed_expert_gemms_only(capsys):
    base = ["deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "2", "--dp", "4", "--ctx",
            "5120", "--prompt", "4096", "--concurrency", "16"]
    one = _json(capsys, *base)["dp_attention"]
    more = _json(capsys, *base, "--ep-imbalance", "1.5")["dp_attention"]
    assert more["tpot_seconds"]["approx"] > one["tpot_seconds"]["approx"]
    assert more["ttft_seconds"] == one["ttft_seconds"]


def test_search_dp_layouts_equal_serve_dp(capsys):
    d = _json(capsys, "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--search", "--max-gpus", "8",
              "--isl", "4096", "--osl", "1024", "--ttft", "3", "--tpot", "0.5")
    dps = [x for x in d["layouts"] if not x["disaggregated"] and x["decode"]["dp"] > 1]
    assert dps, "the search offers DP-attention + EP workers for an MoE model"
    lay = dps[0]
    wk = lay["decode"]
    s = _json(capsys, "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", str(wk["tp"]),
              "--dp", str(wk["dp"]), "--ctx", "5120", "--prompt", "4096", "--concurrency",
              str(wk["dp_attention"]["rank_batch"]), "--kv-dtype", wk["kv_dtype"])
    assert s["dp_attention"]["tpot_seconds"] == wk["dp_attention"]["step_seconds"]
    assert s["dp_attention"]["ttft_seconds"] == lay["exact"]["ttft_seconds"]
    cmd = lay["command"]
    assert f"--data-parallel-size {wk['dp']} --enable-expert-parallel" in cmd
    assert f"--max-num-seqs {wk['dp_attention']['rank_batch']}" in cmd
    sg = _json(capsys, "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--search", "--max-gpus",
               "8", "--isl", "4096", "--osl", "1024", "--ttft", "3", "--tpot", "0.5",
               "--emit", "sglang")["layouts"]
    sg = next(x for x in sg if not x["disaggregated"] and x["decode"]["dp"] > 1)["command"]
    def flag(name):
        return int(sg.split(f"--{name} ")[1].split()[0])
    # SGLang's TP group spans the worker; D attention groups inside it; EP over all of it
    assert flag("tp-size") == flag("ep-size") and flag("attn-dp-size") > 1
    assert flag("tp-size") % flag("attn-dp-size") == 0


@pytest.mark.parametrize("argv,expected", [
    (["--config", "tests/data/serving/Llama-3.1-70B.json", "--gpu", "H100", "--tp", "2",
      "--dp", "2"], "mixture-of-experts"),
    (["deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "8", "--dp", "2"], "one node"),
    (["deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--search", "--isl", "8", "--osl", "8",
      "--dp", "2"], "drop --dp"),
])
def test_refusals(capsys, argv, expected):
    refused_in_one_line(capsys, "serve", *argv, expected=expected)


def test_imbalance_below_one_is_refused(capsys):
    refused_in_one_line(capsys, "serve", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp",
                        "2", "--dp", "4", "--ep-imbalance", "0.5", expected="at least 1")
