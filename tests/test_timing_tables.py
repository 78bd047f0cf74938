"""Issue 39, Must 1: the MoE, MLA and gated-DeltaNet kernel tables, and the fp8-block GEMM
question (accounting/timing/tables.py, layer_tables.py).

Expected values are rows read here straight from aiconfigurator-core's parquet files with
pyarrow (not through the lookup code), and the collector's own record: aiconfigurator's
collector/vllm/collect_gemm.py at d5bad971c (the vLLM 0.24.0 collection) timed fp8_block
GEMMs eagerly (`use_cuda_graph=gemm_type != "fp8_block"`), every other dtype from a CUDA
graph. Skipped, saying why, where aiconfigurator-core is not installed.
"""
from __future__ import annotations

import pytest

from accounting.timing import tables

needs_tables = pytest.mark.skipif(
    not tables.available(), reason="aiconfigurator-core is not installed (pip install -e '.[time]')")


def _rows(system: str, op: str, engine: str, version: str, table: str) -> list[dict]:
    import pyarrow.parquet as pq
    path = tables.root() / "data" / system / op / engine / version / f"{table}.parquet"
    return pq.read_table(path).to_pylist()


def _gemm_row(rows, dtype, m, n, k, kernel=None):
    hits = [r["latency"] for r in rows if r["gemm_dtype"] == dtype and (r["m"], r["n"], r["k"])
            == (m, n, k) and (kernel is None or r["kernel_source"] == kernel)]
    return min(hits) if hits else None


@needs_tables
def test_vllms_eager_fp8_block_table_is_replaced_by_sglangs_deepgemm_rows():
    """H200, DeepSeek-V3's MoE-free MLP shape at decode (m 32, n 2,048, k 7,168): vLLM
    0.24.0's fp8_block row is several times its own bf16 row (an fp8 GEMM reads half the
    bytes: the eager timing's launch gaps), so the planner reads SGLang 0.5.14's DeepGEMM
    row at that point and says why in the source."""
    vllm = _rows("h200_sxm", "gemm", "vllm", "0.24.0", "gemm_perf")
    eager, bf16 = _gemm_row(vllm, "fp8_block", 32, 2048, 7168), _gemm_row(vllm, "bfloat16", 32, 2048, 7168)
    assert eager > tables.FP8_PLAUSIBLE_RATIO * bf16  # 86.6 µs against 12.1 µs
    sglang = _rows("h200_sxm", "gemm", "sglang", "0.5.14", "gemm_perf")
    grid, src, kernel = tables.gemm("h200_sxm", "fp8_block", "vllm")
    assert src.engine == "sglang" and "in place of vllm 0.24.0's fp8_block table" in kernel
    row = _gemm_row(sglang, "fp8_block", 32, 2048, 7168, kernel.split(";")[0])
    assert grid(32, 2048, 7168).seconds == pytest.approx(row * 1e-3)


@needs_tables
def test_a_plausible_fp8_table_is_read_as_it_is():
    """vLLM 0.24.0's per-tensor fp8 table on H200 (CUTLASS scaled-mm, graph-replayed) is
    within the test's bound: its own row is the lookup."""
    vllm = _rows("h200_sxm", "gemm", "vllm", "0.24.0", "gemm_perf")
    grid, src, kernel = tables.gemm("h200_sxm", "fp8", "vllm")
    assert src.engine == "vllm" and ";" not in kernel
    assert grid(32, 2048, 7168).seconds == pytest.approx(
        _gemm_row(vllm, "fp8", 32, 2048, 7168, kernel) * 1e-3)


def _serve(model: str, gpu: str, tp: int, batch: int, scheme: str, engine: str = "vllm-0.21"):
    from accounting.analysis import arguments as A
    from accounting.planning.gpus import get_gpu
    from accounting.serving.engines import REGISTRY
    from accounting.timing.serve import serve_times
    return serve_times(A.config(model), get_gpu(gpu), REGISTRY[engine], scheme, tp, 4096, 8192,
                       batch, 4096)


@needs_tables
def test_moe_lookup_is_the_tables_row_for_the_models_shape():
    """DeepSeek-V3's routed experts (d_model 7,168, d_e 2,048, top-8 of 256) at TP 8, fp8
    blocks, on H200: at 128 tokens the lookup is vLLM 0.24.0's own row (read here with
    pyarrow), between two rows the straight line through them."""
    from accounting.timing import layer_tables as LT
    rows = [r for r in _rows("h200_sxm", "moe", "vllm", "0.24.0", "moe_perf")
            if (r["moe_dtype"], r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"],
                r["moe_tp_size"], r["moe_ep_size"], r["distribution"])
            == ("fp8_block", 7168, 2048, 8, 256, 8, 1, "power_law_1.01")]
    assert len({r["kernel_source"] for r in rows}) == 1
    at = {r["num_tokens"]: r["latency"] for r in rows}
    grid, src = LT.moe("h200_sxm", "vllm", "fp8_block", 7168, 2048, 8, 256, 8)
    assert "vllm 0.24.0 moe_perf" in src and "power_law_1.01" in src
    assert grid(128).seconds == pytest.approx(at[128] * 1e-3)
    assert grid(144).seconds == pytest.approx((at[128] + (at[160] - at[128]) / 2) * 1e-3)
    assert LT.moe("h200_sxm", "vllm", "fp8_block", 7168, 2048, 8, 255, 8) is None  # no such row


@needs_tables
def test_mla_decode_lookup_is_sglangs_kernel_row_for_a_vllm_plan():
    """vLLM 0.24.0 has no MLA kernel table (only modules with their projections): a vLLM
    plan reads SGLang 0.5.14's on the same GPU and says so; 16 heads (128 / TP 8), batch
    128, 4,095 cached latents: that row."""
    from accounting.timing import layer_tables as LT
    rows = _rows("h200_sxm", "mla", "sglang", "0.5.14", "generation_mla_perf")
    row = min(r["latency"] for r in rows if (r["num_heads"], r["batch_size"], r["step"],
                                             r["kv_cache_dtype"]) == (16, 128, 4095, "bfloat16"))
    grid, src, heads = LT.mla("h200_sxm", "generation", "vllm", 16)
    assert heads == 16 and "sglang 0.5.14 generation_mla_perf" in src and "vllm has no" in src
    assert grid(128, 4095).seconds == pytest.approx(row * 1e-3)


@needs_tables
def test_deepseek_v3_prefill_and_decode_are_timed_from_the_moe_and_mla_tables():
    """DeepSeek-V3 (fp8 blocks) on 8 H200s: prefill and decode labelled "kernels", the
    routed experts one fused-MoE call per layer from moe_perf (58 MoE layers), the latent
    attention from the MLA tables (61 layers), no op of either left to the roofline, and no
    GEMM read from vLLM's eager fp8_block table. A vLLM prefill's attention is vLLM's own
    FlashAttention table (what its MLA prefill runs); SGLang's its context_mla table."""
    for engine, prefill in (("vllm-0.21", "context_attention_perf"),
                            ("sglang-0.5", "context_mla_perf")):
        t = _serve("deepseek-ai/DeepSeek-V3", "H200", 8, 144, "fp8_block", engine)
        assert t.ttft.source == t.tpot.source == "kernels"
        for timed, table in ((t.ttft, prefill), (t.tpot, "generation_mla_perf")):
            names = {o.name: o for o in timed.ops}
            assert "moe_perf" in names["routed experts (fused MoE kernel)"].source
            attention = [o for o in timed.ops if o.category == "attention"]
            assert attention and all(table in a.source for a in attention), attention
            assert not any(o.name.startswith("expert W") for o in timed.ops)
            assert not any("roofline" in o.source for o in timed.ops)
            assert not any("vllm 0.24.0 gemm_perf (DeepGemm" in o.source for o in timed.ops)


@needs_tables
def test_a_moe_shape_no_table_measured_keeps_the_gemm_tables_and_says_why():
    """Qwen3-30B-A3B's experts (d_model 2,048, d_e 768, top-8 of 128) at TP 8 in bf16 on
    A100-80GB: no engine's table there holds that row (read here), so its experts stay
    GEMM-table GEMMs, each noting why."""
    import pyarrow.parquet as pq
    for eng in ("vllm", "sglang", "trtllm"):
        src = tables.find("a100_sxm", "moe", "moe_perf", eng)
        if src is None:
            continue
        t = pq.read_table(tables._path(src, "moe")).to_pylist()
        assert not any((r["moe_dtype"], r["hidden_size"], r["inter_size"], r["topk"],
                        r["num_experts"], r["moe_tp_size"], r["moe_ep_size"])
                       == ("bfloat16", 2048, 768, 8, 128, 8, 1) for r in t)
    t = _serve("Qwen/Qwen3-30B-A3B", "A100-80GB", 8, 32, "dense")
    experts = [o for o in t.tpot.ops if o.name.startswith("expert W")]
    assert len(experts) == 3 and all("no MoE table row" in o.note for o in experts)
    assert not any(o.name.startswith("routed experts") for o in t.tpot.ops)


@needs_tables
def test_the_planners_fp8_block_gemms_are_the_h200s_measured_kernels_not_the_eager_table():
    """tests/data/fp8_gemm_h200.json (measured on an H200 by benchmarks/gpu_fp8_recipes.py:
    torch._scaled_mm with 1×128 × 128×128 block scales, CUDA-graph replay, weights past L2):
    at DeepSeek-V3's shapes and decode's M (4 to 128) the planner's fp8_block GEMM lies
    within 0.6–1.5 × the measured kernel, where vLLM 0.24.0's eager table reads over 4 ×."""
    import json
    from pathlib import Path
    data = json.loads((Path(__file__).parent / "data" / "fp8_gemm_h200.json").read_text())
    grid = tables.gemm("h200_sxm", "fp8_block", "vllm")[0]
    eager = tables._gemm_rows("h200_sxm", "fp8_block", "vllm")[0]
    rows = [r for r in data["rows"] if 4 <= r["m"] <= 128 and "fp8_block_1x128_128x128_c_us" in r]
    assert len(rows) >= 20
    for r in rows:
        measured = r["fp8_block_1x128_128x128_c_us"] * 1e-6
        assert 0.6 <= grid(r["m"], r["n"], r["k"]).seconds / measured <= 1.5, r
        assert eager(r["m"], r["n"], r["k"]).seconds / measured > 3.5, r


@pytest.mark.slow
@needs_tables
def test_the_fp8_tables_block_of_the_timing_page_is_current():
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    import benchmarks.fp8_tables as mod
    from benchmarks.doc_blocks import stale
    assert mod.DOC == root / "docs" / "timing.md" and len(mod.BLOCKS) == 1
    assert stale(mod.DOC, mod.BLOCKS) == [], "stale: run python benchmarks/fp8_tables.py --update"


QWEN35 = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "frontier" / \
    "Qwen3.5-27B.json"


@needs_tables
def test_gdn_lookup_is_the_sum_of_the_two_kernels_rows():
    """Gated DeltaNet on one H200 with Qwen3.5-27B's heads (16 key, 48 value heads of 128): a
    decode step of 128 sequences is vLLM 0.24.0's causal_conv1d_update row plus its fused
    recurrent delta-rule row (read here); a 4,096-token prefill the causal_conv1d_fn row
    plus the chunked rule's."""
    from accounting.timing import layer_tables as LT
    rows = _rows("h200_sxm", "linear_attention", "vllm", "0.24.0", "gdn_perf")

    def row(phase, kernel, batch, seq):
        return min(r["latency"] for r in rows if (r["phase"], r["kernel_source"], r["batch_size"],
                   r["seq_len"], r["num_k_heads"], r["num_v_heads"], r["head_k_dim"],
                   r["head_v_dim"]) == (phase, kernel, batch, seq, 16, 48, 128, 128)) * 1e-3
    parts, src = LT.gdn("h200_sxm", "generation", "vllm", 16, 48, 128, 128)
    assert "vllm 0.24.0 gdn_perf" in src
    assert sum(g(128, 1).seconds for g, _ in parts) == pytest.approx(
        row("generation", "causal_conv1d_update", 128, 1)
        + row("generation", "fused_recurrent_gated_delta_rule_packed_decode", 128, 1))
    parts, _ = LT.gdn("h200_sxm", "context", "vllm", 16, 48, 128, 128)
    assert sum(g(1, 4096).seconds for g, _ in parts) == pytest.approx(
        row("context", "causal_conv1d_fn", 1, 4096)
        + row("context", "chunk_gated_delta_rule_flashinfer", 1, 4096))


@needs_tables
@pytest.mark.skipif(not QWEN35.is_file(), reason=f"{QWEN35} is absent (../shared/frontier)")
def test_qwen3_5_decode_runs_the_recurrent_kernels_not_a_padded_chunk():
    """Qwen3.5-27B (48 gated DeltaNet layers, 16 attention) served on one H200, 152
    sequences: before, a decode step's DeltaNet was the chunked form padded to a 64-token
    chunk at the roofline (191 ms a step, labelled roofline); now each mixer is the GDN
    table's two decode kernels (48 × their rows), no recurrent matmul left, kernels."""
    import accounting
    from accounting.planning.gpus import get_gpu
    from accounting.serving.engines import REGISTRY
    from accounting.timing.serve import serve_times
    c = accounting.config_from_json(str(QWEN35))
    t = serve_times(c, get_gpu("H200"), REGISTRY["vllm-0.21"], "dense", 1, 4096, 8192, 152, 4096)
    assert t.ttft.source == t.tpot.source == "kernels"
    for timed in (t.ttft, t.tpot):
        gdn = [o for o in timed.ops if o.name.startswith("gated DeltaNet (")]
        assert len(gdn) == 1 and "gdn_perf" in gdn[0].source
        assert not any("roofline" in o.source for o in timed.ops)
    rows = _rows("h200_sxm", "linear_attention", "vllm", "0.24.0", "gdn_perf")
    per = {}
    for r in rows:
        if (r["phase"], r["batch_size"], r["num_k_heads"], r["num_v_heads"]) == \
                ("generation", 128, 16, 48) or (r["phase"], r["batch_size"], r["num_k_heads"],
                                                r["num_v_heads"]) == ("generation", 256, 16, 48):
            per[(r["kernel_source"], r["batch_size"])] = r["latency"]
    at = {b: sum(v for (k, bb), v in per.items() if bb == b) for b in (128, 256)}
    expected = 48 * (at[128] + (at[256] - at[128]) * 24 / 128) * 1e-3  # 152 between 128, 256
    gdn = next(o for o in t.tpot.ops if o.name.startswith("gated DeltaNet ("))
    assert float(gdn.seconds) == pytest.approx(expected)


V32 = QWEN35.parent / "DeepSeek-V3.2.json"


@needs_tables
@pytest.mark.skipif(not V32.is_file(), reason=f"{V32} is absent (../shared/frontier)")
def test_deepseek_v3_2_decodes_its_indexers_top_2048_keys_not_the_whole_cache():
    """DeepSeek-V3.2's sparse attention reads the indexer's top-2,048 latents a query
    (index_topk in its config.json): a decode step at 4,096 cached tokens is the MLA table's
    kernel at 2,048 keys (SGLang's H200 rows at 2,047 and 4,095 keys, read here, on the
    straight line), for its 61 layers; the indexer's own scores stay apart."""
    import accounting
    from accounting.planning.gpus import get_gpu
    from accounting.serving.engines import REGISTRY
    from accounting.timing.serve import serve_times
    c = accounting.config_from_json(str(V32))
    t = serve_times(c, get_gpu("H200"), REGISTRY["vllm-0.21"], "fp8_block", 8, 4096, 8192, 64,
                    4096)
    rows = _rows("h200_sxm", "mla", "sglang", "0.5.14", "generation_mla_perf")
    at = {r["step"]: r["latency"] for r in rows if (r["num_heads"], r["batch_size"],
                                                    r["kv_cache_dtype"]) == (16, 64, "bfloat16")}
    expected = 61 * (at[2047] + (at[4095] - at[2047]) / 2048) * 1e-3
    latent = [o for o in t.tpot.ops if o.name == "latent attention (decode kernel)"]
    assert len(latent) == 1 and float(latent[0].seconds) == pytest.approx(expected)


@needs_tables
def test_a_moe_decode_step_is_not_faster_than_reading_its_weights():
    """Qwen3-30B-A3B served on one H100: a decode step reads the experts its tokens route to
    (the plan's own expected count), the rest of the weights and the KV cache; no step is
    shorter than those bytes at the datasheet bandwidth (hand algebra on the plan's JSON
    figures). Before the MoE table, the experts were one dense GEMM of B·k rows reading one
    expert's weights: 7.0 ms against an 18 ms floor."""
    import contextlib
    import io
    import json
    from accounting.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["serve", "Qwen/Qwen3-30B-A3B", "--gpu", "H100", "--ctx", "4096",
                     "--format", "json"]) == 0
    d = json.loads(out.getvalue())
    t = d["time"]
    floor = (t["weight_bytes_read_per_gpu"]["approx"] + t["kv_bytes_read_per_gpu"]) / \
        t["bandwidth_bytes_per_s"]["approx"]
    assert d["timing_source"] == "kernels" and d["tpot_seconds"]["approx"] >= floor


NEMOTRON_H = QWEN35.parent / "Nemotron-H-56B-Base-8K.json"


@needs_tables
@pytest.mark.skipif(not NEMOTRON_H.is_file(), reason=f"{NEMOTRON_H} is absent (../shared/frontier)")
def test_a_mamba2_decode_step_is_its_state_traffic_not_a_padded_chunk():
    """Nemotron-H-56B on two H200s: no table times Mamba-2's scan (the wheel's Mamba-2 table
    holds only its convolution), so a decode step's mixers are the recurrent form's state
    read and written once per sequence at 0.8 of the 4.8 TB/s (the serving plan's own
    state bytes per sequence, serving/kv.py, which drops one conv column), labelled
    roofline; before, the chunked scan padded around one token: 204 ms a step."""
    import json
    import contextlib
    import io
    from accounting.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["serve", "--config", str(NEMOTRON_H), "--gpu", "H200", "--tp", "2", "--ctx",
                     "4096", "--format", "json"]) == 0
    d = json.loads(out.getvalue())
    b, state = d["time"]["batch"], d["state_bytes_per_sequence_per_gpu"]
    traffic = 2 * b * state / (0.8 * 4.8e12)
    assert d["tpot_seconds"]["approx"] < 3 * traffic  # 204 ms before: 10 × it
    from accounting.planning.gpus import get_gpu
    from accounting.serving.engines import REGISTRY
    from accounting.timing.serve import serve_times
    import accounting
    t = serve_times(accounting.config_from_json(str(NEMOTRON_H)), get_gpu("H200"),
                    REGISTRY["vllm-0.21"], "dense", 2, 4096, 8192, b, 4096)
    ops = [o for o in t.tpot.ops if o.name == "recurrent state update (decode form)"]
    assert len(ops) == 1 and ops[0].source.startswith("roofline")
    assert float(ops[0].seconds) == pytest.approx(traffic, rel=0.01)
    assert not any(o.category == "GEMMs" and "roofline (a batched GEMM" in o.source
                   for o in t.tpot.ops)
