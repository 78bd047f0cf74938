"""`serve` against published engine start-up logs (issue 43, Must 5): each log's own settings
run through `python -m accounting serve ... --format json`, the tool's weights, KV pool and
concurrency beside the figures the engine printed, and the median and worst ratios.

    python benchmarks/serve_logs.py                 # print the Markdown
    python benchmarks/serve_logs.py --write         # regenerate docs/serving_logs.md
    python benchmarks/serve_logs.py --before DIR    # the same logs through another checkout
                                                    # (e.g. main before issue 43), summary only

Every logged figure is quoted from its source (the URL in the table); the settings are the
log's own (its command line or the engine's defaults at that release, said so). vLLM prints
"GB"/"GiB" for 2^30 bytes; SGLang's "#tokens" is its max_total_num_tokens. A log that prints
no figure of a kind leaves that cell empty. Ratios are the tool's over the log's; a negative
logged pool (the engine refused to start) is compared by sign, not by ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "serving_logs.md"
DATA = "tests/data/serving"
GiB = 2**30


@dataclass(frozen=True)
class Log:
    key: str
    url: str
    what: str  # engine, release, GPU, model, settings in words
    argv: tuple[str, ...]  # serve's arguments reproducing the settings
    version: str | None  # --engine-version (omitted for a checkout without the flag)
    weights_gib: str | None = None  # "Model loading took" / "Loading model weights took" /
    # SGLang's "Load weight end ... mem usage"
    kv_gib: str | None = None  # "Available KV cache memory" / kv_cache_size / SGLang K + V size
    kv_tokens: int | None = None  # "GPU KV cache size" / blocks · 16 / SGLang #tokens
    concurrency: str | None = None  # "Maximum concurrency for N tokens per request: X×"
    formats: tuple[str, ...] = field(default=())


OSS = f"{DATA}/gpt-oss-120b.json"
QWEN = f"{DATA}/Qwen3-235B-A22B-FP8.json"
L70 = f"{DATA}/Llama-3.1-70B.json"
QWEN_VL = f"{DATA}/Qwen2.5-VL-72B-Instruct.json"
QWEN_VL7 = f"{DATA}/Qwen2.5-VL-7B-Instruct.json"
THESIS = "https://github.com/korsqqq/meeting-planning-llm-thesis/blob/main"
LOGS = (
    Log("3090-8B-20k", "https://github.com/vllm-project/vllm/issues/10517",
        "vLLM 0.6 (V0), RTX 3090 (total_gpu_memory 23.58 GiB), Llama-3.1-8B-Instruct bf16, TP 1,"
        " max_model_len 20,000 (the profile run's length), utilization 0.90",
        ("meta-llama/Llama-3.1-8B", "--gpu-mem", "23.58GiB", "--ctx", "20000",
         "--max-num-batched-tokens", "20000", "--max-num-seqs", "256"), "0.10",
        weights_gib="14.9888", kv_gib="3.81", kv_tokens=1952 * 16, concurrency="1.56"),
    Log("3090-8B-29k", "https://github.com/vllm-project/vllm/issues/10517",
        "as above, max_model_len 29,000",
        ("meta-llama/Llama-3.1-8B", "--gpu-mem", "23.58GiB", "--ctx", "29000",
         "--max-num-batched-tokens", "29000", "--max-num-seqs", "256"), "0.10",
        weights_gib="14.9888", kv_gib="2.89", kv_tokens=1478 * 16, concurrency="0.82"),
    Log("H100-8B-tp1", "https://github.com/vllm-project/vllm/pull/10511",
        "vLLM 0.6.4 (V0), H100 (total_gpu_memory 79.22 GiB), Meta-Llama-3-8B bf16, TP 1, "
        "defaults (max_model_len 8,192, utilization 0.90)",
        ("meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx", "8192",
         "--max-num-batched-tokens", "8192", "--max-num-seqs", "256"), "0.10",
        weights_gib="14.96", kv_gib="53.29"),
    Log("H100-8B-tp2", "https://github.com/vllm-project/vllm/pull/10511",
        "as above at TP 2 (the pool is 71.29 − 7.48 − 3.58 − 1.26 GiB, the terms it prints)",
        ("meta-llama/Llama-3.1-8B", "--gpu", "H100", "--tp", "2", "--ctx", "8192",
         "--max-num-batched-tokens", "8192", "--max-num-seqs", "256"), "0.10",
        weights_gib="7.48", kv_gib="58.97"),
    Log("H100-Qwen235-vllm", "https://github.com/vllm-project/vllm/issues/21348",
        "vLLM V1 of July 2025, 4 × H100, Qwen3-235B-A22B-FP8 (128×128 blocks), TP 4, defaults "
        "(utilization 0.9, max_model_len 40,960, 8,192 batched tokens, 1,024 sequences)",
        ("--config", QWEN, "--gpu", "H100", "--tp", "4", "--ctx", "40960"), "0.10",
        kv_gib="8.11", kv_tokens=178_880, formats=("fp8-block",)),
    Log("H100-Qwen235-sglang", "https://github.com/vllm-project/vllm/issues/21348",
        "SGLang of July 2025, 4 × H100, Qwen3-235B-A22B-FP8, --tp 4 --mem-fraction-static 0.93",
        ("--config", QWEN, "--gpu", "H100", "--tp", "4", "--engine", "sglang",
         "--gpu-memory-utilization", "0.93", "--ctx", "40960"), "0.4",
        kv_tokens=367_404, formats=("fp8-block",)),
    Log("H100-oss120-marlin", "https://github.com/vllm-project/vllm/issues/23278",
        "vLLM 0.10.1, H100, gpt-oss-120b (MXFP4 through Marlin, as the log says), TP 1, "
        "defaults (utilization 0.9, max_model_len 131,072, 8,192 batched tokens)",
        ("--config", OSS, "--gpu", "H100", "--ctx", "131072"), "0.10",
        weights_gib="65.9651", kv_gib="-2.14", formats=("mxfp4",)),
    Log("H100-oss120-0.95", "https://github.com/vllm-project/vllm/issues/27508",
        "vLLM 0.11, H100, gpt-oss-120b, TP 1, --gpu-memory-utilization 0.95 "
        "--max-num-batched-tokens 1024, max_model_len 131,072",
        ("--config", OSS, "--gpu", "H100", "--ctx", "131072", "--gpu-memory-utilization",
         "0.95", "--max-num-batched-tokens", "1024"), "0.10",
        kv_gib="1.71", formats=("mxfp4",)),
    Log("H100-oss120-triton", "https://github.com/vllm-project/vllm/issues/33155",
        "vLLM 0.14.1, H100, gpt-oss-120b (MXFP4, \"Using Triton backend\"), TP 1, "
        "--gpu-memory-utilization 0.97 --max_num_seqs 1 --max-model-len 5,120",
        ("--config", OSS, "--gpu", "H100", "--ctx", "5120", "--gpu-memory-utilization", "0.97",
         "--max-num-seqs", "1"), "0.10",
        weights_gib="64.38", formats=("mxfp4",)),
    Log("A100-oss20", "https://myoceane.fr/index.php/ai-vllm-a100-gemma-4/",
        "vLLM 0.19.0, A100 80GB, gpt-oss-20b (gpt-oss-120b's layers with 24 layers and 32 "
        "experts; MXFP4 through Marlin on Ampere), TP 1, --max-model-len 131072 "
        "--gpu-memory-utilization 0.65",
        ("--config", OSS, "--num-layers", "24", "--num-experts", "32", "--gpu", "A100",
         "--ctx", "131072", "--gpu-memory-utilization", "0.65"), "0.10",
        weights_gib="13.72", kv_gib="36.56", formats=("mxfp4",)),
    Log("4090x2-Qwen14", "https://github.com/vllm-project/vllm/issues/13061",
        "vLLM 0.7 (V0), 2 × RTX 4090, DeepSeek-R1-Distill-Qwen-14B (Qwen2.5-14B's shape) bf16, "
        "TP 2, --gpu_memory_utilization=0.98, max_model_len 131,072 (chunked prefill, 2,048 "
        "batched tokens)",
        ("Qwen/Qwen2.5-7B", "--d-model", "5120", "--num-layers", "48", "--num-heads", "40",
         "--num-kv-heads", "8", "--d-ff", "13824", "--vocab-size", "152064", "--gpu",
         "RTX-4090", "--tp", "2", "--ctx", "131072", "--gpu-memory-utilization", "0.98",
         "--max-num-batched-tokens", "2048", "--max-num-seqs", "256"), "0.10",
        weights_gib="13.9476", kv_gib="8.69", kv_tokens=81_536),
    Log("79GiB-Llama2-7B", "https://github.com/kubernetes-sigs/gateway-api-inference-extension/pull/550",
        "vLLM 0.8 (V0), a GPU of total_gpu_memory 79.19 GiB, Llama-2-7b bf16 (with LoRA adapters"
        "), TP 1, utilization 0.90, max_model_len 4,096",
        ("meta-llama/Llama-3.1-8B", "--vocab-size", "32000", "--num-kv-heads", "32", "--d-ff",
         "11008", "--context-length", "4096", "--gpu-mem", "79.19GiB", "--ctx", "4096",
         "--max-num-batched-tokens", "4096", "--max-num-seqs", "256"), "0.10",
        weights_gib="12.55", kv_gib="56.18", kv_tokens=7191 * 16),
    Log("79GiB-Qwen3-0.6B", "https://github.com/generative-computing/mellea/pull/416",
        "vLLM V0 (worker.py), a GPU of total_gpu_memory 79.19 GiB, utilization 0.80, 8,192 "
        "tokens per request; the log names no model: 1.12 GiB of weights and 36,184 blocks of "
        "16 in 61.84 GiB (114,688 bytes a token) are Qwen3-0.6B's bf16 (28 layers · 8 KV "
        "heads · 128 · 2 · 2)",
        ("Qwen/Qwen3-0.6B", "--gpu-mem", "79.19GiB", "--gpu-memory-utilization", "0.8",
         "--ctx", "8192", "--max-num-batched-tokens", "8192", "--max-num-seqs", "256"), "0.10",
        weights_gib="1.12", kv_gib="61.84", kv_tokens=36_184 * 16, concurrency="70.67"),
    Log("L40Sx2-Qwen32-v0", "https://github.com/vllm-project/vllm/issues/15815",
        "vLLM 0.7.1 (V0), 2 × L40S (total_gpu_memory 44.42 GiB), Qwen2.5-32B-Instruct bf16, TP 2,"
        " max_model_len 10,000 without chunked prefill (so 10,000 batched tokens), utilization "
        "0.90, 256 sequences (the defaults)",
        ("Qwen/Qwen2.5-7B", "--d-model", "5120", "--num-layers", "64", "--num-heads", "40",
         "--num-kv-heads", "8", "--d-ff", "27648", "--vocab-size", "152064", "--gpu", "L40S",
         "--tp", "2", "--ctx", "10000", "--max-num-batched-tokens", "10000", "--max-num-seqs",
         "256"), "0.10",
        weights_gib="30.7098", kv_gib="7.71", kv_tokens=3947 * 16),
    Log("A6000-Qwen3-32B-AWQ", f"{THESIS}/results/evidence/serving/vllm_config_extract.txt",
        "vLLM 0.19.1 (V1), an RTX A6000 (torch's total 47.53 GiB, as an A6000 reports it in "
        "huggingface/text-generation-inference#2301), Qwen/Qwen3-32B-AWQ (AWQ int4 through "
        "Marlin, as the log says), TP 1, --max-model-len 32768 --max-num-seqs 16 "
        "--gpu-memory-utilization 0.90, prefix caching off (SETUP.md's frozen record); 2,048 "
        "batched tokens, the default under 70 GiB",
        ("Qwen/Qwen3-8B", "--d-model", "5120", "--num-layers", "64", "--num-heads", "64",
         "--d-ff", "25600", "--weights", "awq", "--gpu-mem", "47.53GiB", "--ctx", "32768",
         "--max-num-seqs", "16", "--max-num-batched-tokens", "2048"), "0.10",
        kv_tokens=98_928, formats=("awq",)),
    Log("A6000-Qwen3-8B-AWQ", f"{THESIS}/SETUP.md",
        "as above, Qwen/Qwen3-8B-AWQ, prefix caching on (the 35.78 GiB is SETUP.md's; the 32B "
        "printed 94,320 tokens with prefix caching on and 98,928 off, a 4.9 % spread between "
        "runs of one configuration)",
        ("Qwen/Qwen3-8B", "--weights", "awq", "--gpu-mem", "47.53GiB", "--ctx", "32768",
         "--max-num-seqs", "16", "--max-num-batched-tokens", "2048"), "0.10",
        kv_gib="35.78", kv_tokens=260_544, formats=("awq",)),
    Log("H100-8B-sglang-docs", "https://docs.sglang.ai/start/send_request.html",
        "SGLang of January 2025 (its docs' quick-start page, built 2025-01-23), an 80 GB card "
        "(78.81 GB free before loading; H100 assumed), Meta-Llama-3.1-8B-Instruct bf16, TP 1, "
        "mem_fraction_static 0.88 (printed in server_args: that release's default at TP 1), "
        "context 131,072; weights are the free memory before less after loading (78.81 − 63.72)",
        ("meta-llama/Llama-3.1-8B", "--gpu", "H100", "--engine", "sglang",
         "--gpu-memory-utilization", "0.88", "--ctx", "131072"), "0.4",
        weights_gib="15.09", kv_gib="54.26", kv_tokens=444_500),
    Log("H100-8B-sglang-fa3", "https://github.com/sgl-project/sglang/pull/4760",
        "SGLang of March 2025 (the FlashAttention 3 backend's test, so a Hopper card: 78.59 GB "
        "free before loading; H100 assumed), Meta-Llama-3.1-8B-Instruct bf16, TP 1, "
        "mem_fraction_static 0.88 (not printed: that release's default at TP 1, server_args.py "
        "ServerArgs.__post_init__, 0.88/0.87/0.85/0.81/0.79 at TP 1/2/4/8/16), context 131,072",
        ("meta-llama/Llama-3.1-8B", "--gpu", "H100", "--engine", "sglang",
         "--gpu-memory-utilization", "0.88", "--ctx", "131072"), "0.4",
        weights_gib="15.11", kv_gib="54.04", kv_tokens=442_750),
    Log("L4x4-QwQ32-sglang",
        "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
        "SGLang of March 2025, 4 × L4 (AWS g6.12xlarge; custom all-reduce off on PCIe, NCCL's "
        "set-up 0.13 GB), QwQ-32B (Qwen2.5-32B's shape) bf16, TP 4, mem_fraction_static 0.85 "
        "(printed: that release's default at TP 4), context 131,072",
        ("Qwen/Qwen2.5-7B", "--d-model", "5120", "--num-layers", "64", "--num-heads", "40",
         "--num-kv-heads", "8", "--d-ff", "27648", "--vocab-size", "152064", "--gpu", "L4",
         "--tp", "4", "--engine", "sglang", "--gpu-memory-utilization", "0.85", "--ctx",
         "131072"), "0.4",
        weights_gib="15.54", kv_gib="2.84", kv_tokens=46_611),
    Log("80GB-70B-w8a8-v1", "https://github.com/vllm-project/vllm/pull/12569",
        "vLLM V1 of January 2025 (0.7: 2,048 batched tokens and 1,024 sequences for the API "
        "server, arg_utils.py EngineArgs._override_v1_engine_args), an 80 GB card (H100 "
        "assumed), neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8 (int8 weights, a "
        "scale per output channel), TP 1, --max-model-len 2048 --gpu-memory-utilization 0.98; "
        "the logged 1,381 blocks (6.74 GiB) lie inside the tool's 5.76–8.18 GiB range: its "
        "pessimistic end counts the dummy sampler's sort over 1,024 rows, which a 0.7 profile "
        "run may not have done (the uncertain term)",
        ("--config", L70, "--weights", "int8", "--gpu", "H100", "--ctx", "2048",
         "--gpu-memory-utilization", "0.98", "--max-num-batched-tokens", "2048",
         "--max-num-seqs", "1024"), "0.10",
        weights_gib="67.7229", kv_tokens=1381 * 16, concurrency="10.79", formats=("int8",)),
    Log("A100x4-Qwen2.5-VL-72B", "https://github.com/vllm-project/vllm/issues/16570",
        "vLLM 0.8.3 (V0: worker.py's memory profile, rank 0), 4 × A100-PCIE-40GB "
        "(total_gpu_memory 39.38 GiB), Qwen2.5-VL-72B-Instruct bf16 with its vision tower, TP "
        "4, --gpu_memory_utilization 0.95 --max_num_seqs 2 --max_model_len 8192 (8,192 batched "
        "tokens without chunked prefill). The issue's first command also passes "
        "mm_processor_kwargs max_pixels 1,280; the logged 2.51 GiB activation peak is a large "
        "image's, so the row keeps the processor's default max_pixels (the logged turn's own "
        "command is not quoted). The tool follows V1's profile run (the encoder on the largest "
        "image, its outputs held beside the language model's dummy run), V0 runs the encoder "
        "inside the dummy forward",
        ("--config", QWEN_VL, "--gpu-mem", "39.38GiB", "--tp", "4", "--ctx", "8192",
         "--gpu-memory-utilization", "0.95", "--max-num-seqs", "2",
         "--max-num-batched-tokens", "8192"), "0.10",
        weights_gib="34.43", kv_gib="0.04"),
    Log("H100-Qwen2.5-VL-7B", "https://github.com/QwenLM/Qwen3-VL/issues/1057",
        "vLLM 0.8.2 (V1), H100-SXM-80GB, Qwen2.5-VL-7B-Instruct bf16 with its vision tower, TP "
        "1, the LLM class's defaults on a card of 70 GiB or more (16,384 batched tokens, 1,024 "
        "sequences, utilization 0.9; arg_utils.py), max_model_len 128,000; the log prints "
        "\"Encoder cache will be initialized with a budget of 16384 tokens, and profiled with "
        "1 image items of the maximum feature size\", the tool's budget and item count",
        ("--config", QWEN_VL7, "--gpu", "H100", "--ctx", "128000",
         "--max-num-batched-tokens", "16384", "--max-num-seqs", "1024"), "0.10",
        weights_gib="15.6271", kv_tokens=905_648, concurrency="7.08"),
    Log("Gaudi-R1-tp8", "https://github.com/HabanaAI/vllm-fork/issues/809",
        "vLLM (HPU fork), 8 devices, DeepSeek-R1 (DeepSeek-V3's fp8 128×128 blocks), TP 8: "
        "weights only (\"Pre-loading model weights on hpu:0 took 79.41 GiB\")",
        ("deepseek-ai/DeepSeek-V3", "--weights", "fp8-block", "--gpu-mem", "96GiB", "--tp", "8",
         "--ctx", "4096"), "0.10",
        weights_gib="79.41", formats=("fp8-block",)),
)


def run(log: Log, root: Path, with_version: bool) -> dict:
    argv = list(log.argv) + ["--format", "json"]
    if with_version and log.version:
        argv += ["--engine-version", log.version]
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-m", "accounting", "serve", *argv], cwd=root,
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{log.key}: exit {out.returncode}: {out.stderr.strip()[:300]}")
    return json.loads(out.stdout)


def concurrency(d: dict) -> Fraction:
    """Sequences of --ctx tokens the pool holds, fractional (as vLLM prints it)."""
    a = d["assumptions"]
    block = a["block_size"]
    per_seq = -(-a["ctx"] // block) * block * d["kv_bytes_per_token_per_gpu"] \
        + d.get("state_bytes_per_sequence_per_gpu", 0)
    return Fraction(max(d["kv_pool_bytes_per_gpu"], 0), per_seq)


def rows(root: Path, with_version: bool) -> list[tuple[Log, dict]]:
    return [(log, run(log, root, with_version)) for log in LOGS]


def ratios(results) -> dict[str, list[Fraction]]:
    out = {"weights": [], "KV pool": [], "KV tokens": [], "concurrency": []}
    for log, d in results:
        if log.weights_gib:
            out["weights"].append(Fraction(d["weights_bytes_per_gpu"], GiB)
                                  / Fraction(log.weights_gib))
        if log.kv_gib and Fraction(log.kv_gib) > 0:
            out["KV pool"].append(Fraction(max(d["kv_pool_bytes_per_gpu"], 0), GiB)
                                  / Fraction(log.kv_gib))
        if log.kv_tokens:
            out["KV tokens"].append(Fraction(d["kv_pool_tokens"], log.kv_tokens))
        if log.concurrency:
            out["concurrency"].append(concurrency(d) / Fraction(log.concurrency))
    return out


def summary(results) -> list[str]:
    lines = []
    for what, rs in ratios(results).items():
        if not rs:
            continue
        worst = max(rs, key=lambda r: abs(r - 1) if r >= 1 else abs(1 / r - 1) if r else 99)
        lines.append(f"| {what} | {len(rs)} | {float(statistics.median(rs)):.3f} | "
                     f"{float(worst):.3f} |")
    return lines


def _g(x) -> str:
    return f"{float(x):.2f}"


def markdown(results) -> str:
    out = ["# `serve` against published start-up logs", "",
           "Generated by `python benchmarks/serve_logs.py --write` (issue 43): each log's own "
           "settings through `python -m accounting serve ... --format json`, the tool's figures "
           "(the pessimistic end of its ranges, what the verdict uses) beside the ones the "
           "engine printed. Weights and pools in GiB per GPU; tokens are the engine's KV "
           "capacity (vLLM's blocks × block size or \"GPU KV cache size\", SGLang's "
           "`#tokens`); concurrency is sequences of the log's max_model_len.", "",
           "| log | settings | weights logged / tool | KV pool logged / tool | tokens logged / "
           "tool | concurrency logged / tool |", "| --- | --- | --- | --- | --- | --- |"]
    for log, d in results:
        w = f"{log.weights_gib} / {_g(Fraction(d['weights_bytes_per_gpu'], GiB))}" \
            if log.weights_gib else ""
        k = f"{log.kv_gib} / {_g(Fraction(d['kv_pool_bytes_per_gpu'], GiB))}" \
            if log.kv_gib else ""
        t = f"{log.kv_tokens:,} / {d['kv_pool_tokens']:,}" if log.kv_tokens else ""
        c = f"{log.concurrency} / {float(concurrency(d)):.2f}" if log.concurrency else ""
        out.append(f"| [{log.key}]({log.url}) | {log.what} | {w} | {k} | {t} | {c} |")
    out += ["", "Ratios (the tool's over the log's; the worst is the farthest from 1):", "",
            "| quantity | logs | median | worst |", "| --- | --- | --- | --- |"]
    out += summary(results)
    neg = [(log, d) for log, d in results if log.kv_gib and Fraction(log.kv_gib) <= 0]
    for log, d in neg:
        out.append("")
        out.append(f"{log.key}: the engine printed a KV budget of {log.kv_gib} GiB and refused "
                   f"to start; the tool says fits = {str(d['fits']).lower()} (pool "
                   f"{_g(Fraction(d['kv_pool_bytes_per_gpu'], GiB))} GiB at its pessimistic "
                   f"end, {_g(Fraction(d['kv_pool_bytes_per_gpu_range'][1], GiB))} at the "
                   f"optimistic one).")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write {DOC.relative_to(ROOT)}")
    p.add_argument("--before", metavar="DIR", help="another checkout: its summary only")
    ns = p.parse_args(argv)
    if ns.before:
        before = rows(Path(ns.before).resolve(), with_version=False)
        print("\n".join(["| quantity | logs | median | worst |", "| --- | --- | --- | --- |"]
                        + summary(before)))
        for log, d in before:
            print(log.key, "fits" if d["fits"] else "does not fit",
                  _g(Fraction(d["kv_pool_bytes_per_gpu"], GiB)), "GiB pool")
        return 0
    text = markdown(rows(ROOT, with_version=True))
    if ns.write:
        DOC.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
