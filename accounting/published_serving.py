"""Published, measured serving runs (vLLM's and SGLang's own benchmark clients: mean TTFT and
mean TPOT at a stated concurrency), each with where it was read, and `serve`'s prediction
for the same settings: the cases docs/serving_times.md's table is generated from
(benchmarks/published_serving.py). A figure here is the source's own number; nothing is
fitted to it.

Each run is planned as the command line plans it (`serve MODEL --gpu G --tp N --engine E
--engine-version V --weights W --prompt P --ctx T --concurrency C`):
- P, the prompt: the run's mean input tokens (its total input tokens over its requests);
- T, the decode step's key length: the mean prompt plus half the mean output. A request's
  mean TPOT averages its decode steps over key lengths P .. P + O, and a step's time is
  linear in its key length (the attention's KV read), so the step at P + O/2 is that mean;
- C: the benchmark's --max-concurrency, the batch the engine decodes at once.
TTFT is compared only at concurrency 1: above it a request's first token also waits for the
running steps of the others (queueing, not a kernel time).

A room of its own, on the top floor beside published.py: predict() runs the command line
(cli/main.py). Engines are named by their records' names (serving/engines.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.serving.engines import SGLANG, VLLM
from accounting.units import BF16

GPUSTACK_QWEN3_8B = (
    "gpustack/gpustack docs/performance-lab/qwen3-8b/h100-latency.md (commit 1dbc3b8): one "
    "H100 SXM, vLLM 0.11.0 and SGLang 0.5.3.post3 at their defaults; `vllm bench serve` on "
    "ShareGPT, 100 requests of 23,260 input and 22,061 output tokens in all, openai-chat "
    "endpoint")
COOKBOOK_LLAMA31 = (
    "sgl-project/sgl-cookbook docs/autoregressive/Llama/Llama3.1.md (commit 172d80b), §5.1: "
    "Llama-3.1-70B on 8 A100 (80 GB assumed), TP 8, SGLang 0.5.6; `sglang.bench_serving` "
    "random dataset, the means from its printed totals")
COOKBOOK_QWEN3 = (
    "sgl-project/sgl-cookbook docs/autoregressive/Qwen/Qwen3.md (commit 230dd7f), §5.1: "
    "Qwen3-235B-A22B-Instruct-2507 on 8 B200, TP 8, SGLang 0.5.6; `sglang.bench_serving` "
    "random dataset, the means from its printed totals")

MUSGRAVE_A100 = (
    "johnmusgrave.com/p/vllm-throughput-latency-sweep-on (read 2026-11): one A100 40GB, vLLM "
    "0.23.0 at its defaults, Llama-3.1-8B-Instruct bf16, `vllm bench serve` random 1,024 "
    "input and 128 output tokens (--ignore-eos); \"decode at one request per time runs at "
    "about 75 tokens/sec\": TPOT 1,000 / 75 ms, as rounded there")

# model shapes beyond the presets, as flags of `serve` (the models' config.json values)
QWEN3_8B = ("Qwen/Qwen3-8B",)
LLAMA31_70B = ("meta-llama/Llama-3.1-8B", "--num-layers", "80", "--d-model", "8192",
               "--num-heads", "64", "--num-kv-heads", "8", "--d-ff", "28672")
QWEN3_235B = ("Qwen/Qwen3-30B-A3B", "--num-layers", "94", "--d-model", "4096",
              "--num-heads", "64", "--num-kv-heads", "4", "--moe-d-ff", "1536")

# SGLang's fp8-block table (sglang_deepgemm_gemm_nt_f8f8bf16) times this row; vLLM's
# (DeepGemmFp8BlockScaledMMKernel) reads 85-98 µs for a 4,096² GEMM at any M up to 256 on
# H100/H200, under review elsewhere: no vLLM fp8-block row here checks it
FP8_BLOCK = "fp8 block-scaled weights: SGLang's fp8-block GEMM table"
# the routed experts: from aiconfigurator-core's MoE table where the timing reads one (issue
# 39, Must 1); else the ledger's expert record, one GEMM of all routed tokens (M = B·T·k)
# against one expert's weights, reads one expert's weights where a decode step reads
# E·(1 − (1 − k/E)^B) experts' (docs/serving_times.md, "What the ratios say")
MOE = "MoE: the routed experts from the MoE table where read, else as one dense GEMM"
MIXED = "the others' prefills run between this request's decode steps"


@dataclass(frozen=True)
class ServedRun:
    name: str
    model: tuple[str, ...]  # the preset and any field flags
    gpu: str
    tp: int
    engine: str  # serving/engines.py's name
    release: str  # the engine release measured (--engine-version takes the rule before it)
    weights: str  # --weights
    prompt: int  # mean input tokens per request
    output: int  # mean output tokens per request
    concurrency: int  # the client's --max-concurrency
    ttft_ms: float | None  # measured mean TTFT (None: not published)
    tpot_ms: float  # measured mean TPOT (excluding the first token)
    source: str
    note: str = ""

    @property
    def position(self) -> int:
        """The decode step's key length whose time is the request's mean TPOT (module
        docstring): mean prompt + half the mean output."""
        return self.prompt + self.output // 2

    def argv(self) -> list[str]:
        return ["serve", *self.model, "--gpu", self.gpu, "--tp", str(self.tp),
                "--engine", self.engine, "--engine-version", self.release,
                "--weights", self.weights, "--prompt", str(self.prompt),
                "--ctx", str(self.position), "--concurrency", str(self.concurrency),
                "--format", "json"]


def _q8(name, engine, release, c, ttft, tpot, weights=BF16, note=""):
    return ServedRun(name, QWEN3_8B, "H100", 1, engine, release, weights, 233, 221, c, ttft,
                     tpot, GPUSTACK_QWEN3_8B, note)


def _l70(name, prompt, output, c, ttft, tpot, note=""):
    return ServedRun(name, LLAMA31_70B, "A100", 8, SGLANG, "0.5.6", BF16, prompt, output,
                     c, ttft, tpot, COOKBOOK_LLAMA31, note)


def _q235(name, prompt, output, c, ttft, tpot, note=MOE):
    return ServedRun(name, QWEN3_235B, "B200", 8, SGLANG, "0.5.6", BF16, prompt, output,
                     c, ttft, tpot, COOKBOOK_QWEN3, note)


# (mean input, mean output) = the printed totals over the requests: ShareGPT 23,260 / 100 and
# 22,061 / 100; the cookbook's 1000/1000 at concurrency 1: 6,101 / 10 and 4,220 / 10 (Llama)
# or 4,210 / 10 (Qwen); 8000/1000: 41,941 / 10; at concurrency 16: 39,668 / 80 input, and
# 40,805 / 80, 300,020 / 80 with 41,669 / 80 (Llama), 40,725 / 80, 318,226 / 80 (Qwen);
# 1000/8000: 44,452 / 10 output; at 64: 158,939 / 320 and 1,300,705 / 320.
SERVED_RUNS: tuple[ServedRun, ...] = (
    _q8("Qwen3-8B, BS 1", VLLM, "0.11.0", 1, 59.01, 7.28),
    _q8("Qwen3-8B, BS 2", VLLM, "0.11.0", 2, 63.78, 7.37),
    _q8("Qwen3-8B, BS 4", VLLM, "0.11.0", 4, 64.00, 7.38),
    _q8("Qwen3-8B, BS 8", VLLM, "0.11.0", 8, 74.57, 7.71),
    _q8("Qwen3-8B, BS 4", SGLANG, "0.5.3.post3", 4, 27.70, 7.19),
    # Qwen/Qwen3-8B-FP8: "fine-grained fp8 quantization with block size of 128" (its model
    # card; quantization_config weight_block_size [128, 128]): served as fp8-block
    _q8("Qwen3-8B-FP8, BS 4", SGLANG, "0.5.3.post3", 4, 39.66, 5.65, "fp8-block", FP8_BLOCK),
    ServedRun("Llama-3.1-8B, 1024/128, C 1", ("meta-llama/Llama-3.1-8B",), "A100-40GB", 1,
              VLLM, "0.23.0", BF16, 1024, 128, 1, None, round(1000 / 75, 2), MUSGRAVE_A100,
              "≈: the source rounds to 75 tokens/s; no aiconfigurator-core table for this GPU"),
    _l70("Llama-3.1-70B, 1000/1000, C 1", 610, 422, 1, 131.61, 18.63),
    _l70("Llama-3.1-70B, 8000/1000, C 1", 4194, 422, 1, 395.25, 18.80),
    _l70("Llama-3.1-70B, 1000/1000, C 16", 496, 510, 16, 264.84, 26.09, MIXED),
    _l70("Llama-3.1-70B, 8000/1000, C 16", 3750, 521, 16, 603.42, 36.94, MIXED),
    _q235("Qwen3-235B-A22B, 1000/1000, C 1", 610, 421, 1, 99.03, 10.12),
    _q235("Qwen3-235B-A22B, 1000/8000, C 1", 610, 4445, 1, 110.60, 10.23),
    _q235("Qwen3-235B-A22B, 8000/1000, C 1", 4194, 421, 1, 139.90, 10.31),
    _q235("Qwen3-235B-A22B, 1000/1000, C 16", 496, 509, 16, 215.70, 16.36, f"{MOE}; {MIXED}"),
    _q235("Qwen3-235B-A22B, 1000/8000, C 16", 496, 3978, 16, 169.71, 14.82, f"{MOE}; {MIXED}"),
    _q235("Qwen3-235B-A22B, 1000/8000, C 64", 497, 4065, 64, 265.03, 23.66, f"{MOE}; {MIXED}"),
)


@dataclass(frozen=True)
class Prediction:
    ttft_ms: float | None
    tpot_ms: float | None
    source: str  # "kernels" or "roofline" (serve's timing_source)
    problem: str = ""  # why there is no prediction

    def mixed_tpot_ms(self, run: ServedRun) -> float | None:
        """The mean TPOT with the other requests' prefills between the decode steps, from
        this prediction's own TTFT and TPOT (hand algebra, no fitted term): in the steady
        state each of the C slots starts one request per request lifetime, so during one
        request's O output tokens the C − 1 others each prefill once, every prefill holding
        the decode steps for about its TTFT:
            mean TPOT ≈ TPOT + (C − 1) · TTFT / O.
        With chunked prefill the decodes ride in the prefill's steps, which this bounds."""
        if self.ttft_ms is None or self.tpot_ms is None:
            return None
        return self.tpot_ms + (run.concurrency - 1) * self.ttft_ms / run.output


def predict(run: ServedRun) -> Prediction:
    """`serve`'s TTFT and TPOT for the run's settings, through the command line."""
    import contextlib
    import io
    import json

    from accounting.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(run.argv())
    if code != 0:
        lines = err.getvalue().strip().splitlines()
        return Prediction(None, None, "", lines[-1] if lines else f"exit {code}")
    d = json.loads(out.getvalue())
    ms = [None if d.get(k) is None else d[k]["approx"] * 1e3
          for k in ("ttft_seconds", "tpot_seconds")]
    return Prediction(ms[0], ms[1], d.get("timing_source", ""))
