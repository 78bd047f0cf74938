"""The generated tables of docs/serving_search.md: `serve --search` on the issue's cases
(Llama-3.1-70B on up to 16 H100s and DeepSeek-V3 on up to 32 H200s, 4k in / 1k out, two SLA
pairs each) and on AIConfigurator's published cases, beside its answer. Regenerate with

    python benchmarks/serve_search_docs.py --update    # rewrite the blocks
    python benchmarks/serve_search_docs.py             # print them

tests/test_serving_search_docs.py checks that the blocks are what this prints (where
aiconfigurator-core's tables are installed).
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "serving_search.md"
START, END = "<!-- search-cases -->\n", "<!-- end search-cases -->\n"
AIC_START, AIC_END = "<!-- aiconfigurator-cases -->\n", "<!-- end aiconfigurator-cases -->\n"
WL_START, WL_END = "<!-- workload-cases -->\n", "<!-- end workload-cases -->\n"

L70 = "--config tests/data/serving/Llama-3.1-70B.json"
Q32 = "--config tests/data/serving/Qwen3-32B-FP8.json"
W = "--isl 4096 --osl 1024"
CASES = (
    f"{L70} --gpu H100 --search --max-gpus 16 {W} --ttft 3 --tpot 0.05",
    f"{L70} --gpu H100 --search --max-gpus 16 {W} --ttft 1 --tpot 0.02",
    f"deepseek-ai/DeepSeek-V3 --gpu H200 --search --max-gpus 32 {W} --ttft 3 --tpot 0.2",
    f"deepseek-ai/DeepSeek-V3 --gpu H200 --search --max-gpus 32 {W} --ttft 5 --tpot 0.5",
    f"deepseek-ai/DeepSeek-V3 --gpu H200 --search --max-gpus 32 {W} --ttft 3 --tpot 0.2 "
    "--speculative mtp --acceptance 0.85 --num-speculative-tokens 2",
)
# Workloads as distributions, TTFT percentiles and the wait at a request rate (the issue's
# first SLA pair on each model)
L70_SLA = f"{L70} --gpu H100 --search --max-gpus 16 --ttft 3 --tpot 0.05"
DS3_SLA = "deepseek-ai/DeepSeek-V3 --gpu H200 --search --max-gpus 32 --ttft 3 --tpot 0.2"
WORKLOADS = (
    f"{L70_SLA} {W} --request-rate 4 --percentile 50",
    f"{L70_SLA} {W} --request-rate 4 --percentile 99",
    f"{L70_SLA} --isl uniform:1024,7168 --osl 1024 --percentile 90",
    f"{L70_SLA} --isl uniform:1024,7168 --osl normal:1024,256 --request-rate 4 --percentile 90",
    f"{DS3_SLA} {W} --request-rate 8 --percentile 90",
)
# AIConfigurator's published answers (ai-dynamo/aiconfigurator at 095f58a5, README.md "cli
# default" example; docs/cli_user_guide.md of release 0.1.0; the issue's Llama-3.1-70B case,
# Dynamo's recipe for Llama-3.3-70B FP8 "disagg single-node 8× H100/H200: 2× prefill TP2 +
# 1× decode TP4"): (our command, their answer)
AIC = (
    (f"{L70} --gpu H100 --search --max-gpus 8 --isl 4000 --osl 1000 --ttft 3 --tpot 0.05",
     "disagg: 2 prefill TP2 + 1 decode TP4 (8 GPUs)"),
    (f"{Q32} --gpu H200 --search --max-gpus 32 --isl 4000 --osl 500 --ttft 0.3 --tpot 0.01",
     "trtllm: disagg 4 × [2 prefill TP2 + 1 decode TP4 bs 68], 684.79 tokens/s/GPU, TTFT "
     "295.71 ms, TPOT 9.97 ms; agg 8 × TP4 bs 16, 410.22 tokens/s/GPU (prefix 500 cached)"),
    (f"{Q32} --weights fp8 --gpu H200 --search --max-gpus 32 --isl 4000 --osl 500 --ttft 0.3 "
     "--tpot 0.01", "as above (the same case, the weights per-tensor fp8 here)"),
    (f"{Q32} --weights fp8 --gpu H200 --search --max-gpus 32 --isl 3000 --osl 512 --ttft 1 "
     "--tpot 0.01", "disagg 913.82 tokens/s/GPU (1.43× agg), TTFT 202.65 ms, TPOT 8.07 ms"),
)


def _search(command: str):
    from accounting.cli.serve import parser, plan_inputs
    from accounting.cli.serve_search import speculative_of, workload_of
    from accounting.serving.search import search
    ns = parser().parse_args(shlex.split(command))
    config, scheme, names, _ = plan_inputs(ns)
    w = workload_of(ns)
    return search(config, scheme, ns.gpu, w, names=names, speculative=speculative_of(ns)), \
        ns, ns.model or config.name


def _best(r, dis: bool) -> str:
    from accounting.serving.search_views import _formats, describe
    lay = next((x for x in r.layouts if x.disaggregated == dis), None)
    if lay is None:
        front = [x for x in r.frontier if x.disaggregated == dis]
        if not front:
            return "none fits"
        f = min(front, key=lambda x: x.tpot_seconds)
        return (f"none meets (fastest: {describe(f)}, TTFT {float(f.ttft_seconds) * 1000:.1f} ms, "
                f"TPOT {float(f.tpot_seconds) * 1000:.1f} ms)")
    osl = r.workload.osl_mean
    queue = "" if lay.utilisation is None else \
        (f", utilisation {float(lay.utilisation):.2f}, mean wait "
         f"{lay.wait.mean * 1000:.1f} ms")
    return (f"{describe(lay)} on {lay.gpus} GPUs ({_formats(lay)}): "
            f"{float(lay.tokens_per_second_per_gpu(osl)):,.1f} tokens/s/GPU, TTFT "
            f"{float(lay.ttft_seconds) * 1000:.1f} ms, TPOT {float(lay.tpot_seconds) * 1000:.1f} ms"
            f"{queue}")


def cases() -> str:
    from accounting.serving import engines, launch
    rows, cmds = [], []
    for c in CASES:
        r, ns, model = _search(c)
        rows.append(f"| `serve {c}` | {_best(r, False)} | {_best(r, True)} |")
        vllm, sglang = engines.get_engine(engines.VLLM), engines.get_engine(engines.SGLANG)
        for lay in r.layouts[:1]:
            cmds.append(f"serve {c}\n  → {launch.command(lay, vllm, model, ns.isl + ns.osl)}"
                        f"\n  → {launch.command(lay, sglang, model, ns.isl + ns.osl)}")
    return ("| command | best aggregated | best disaggregated |\n|---|---|---|\n"
            + "\n".join(rows) + "\n\nThe best layout's launch commands (vLLM, SGLang):\n\n"
            "```text\n" + "\n".join(cmds) + "\n```\n")


def workloads() -> str:
    rows = []
    for c in WORKLOADS:
        r, _, _ = _search(c)
        rows.append(f"| `serve {c}` | {_best(r, False)} | {_best(r, True)} |")
    return ("| command | best aggregated | best disaggregated |\n|---|---|---|\n"
            + "\n".join(rows) + "\n")


def aiconfigurator() -> str:
    rows = []
    for c, theirs in AIC:
        r, _, _ = _search(c)
        rows.append(f"| `serve {c}` | {_best(r, False)} | {_best(r, True)} | {theirs} |")
    return ("| command | best aggregated | best disaggregated | AIConfigurator |\n"
            "|---|---|---|---|\n" + "\n".join(rows) + "\n")


BLOCKS = ((START, END, cases), (WL_START, WL_END, workloads),
          (AIC_START, AIC_END, aiconfigurator))

if __name__ == "__main__":
    from benchmarks.doc_blocks import main
    main(__file__, DOC, BLOCKS)
