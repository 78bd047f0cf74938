"""The docs' table of serving answers (docs/serving.md, the generated block "serve-answers"):
each command's plan through the CLI's own argument parsing, one row of figures, every one the
plan's (ranges where the plan has them). On the CLI's floor (it parses as `serve` does), not
serving's: serving/ sits below cli/ (tests/test_layout.py)."""
from __future__ import annotations

from fractions import Fraction

from accounting.units import GB, decimal, grouped

L70 = "--config tests/data/serving/Llama-3.1-70B.json"
AWQ70 = "--config tests/data/serving/Llama-3.1-70B-Instruct-AWQ-INT4.json"
OSS = "--config tests/data/serving/gpt-oss-120b.json"
COMMANDS = (
    f"{L70} --gpu H100 --gpus 2", f"{L70} --gpu H100 --gpus 2 --kv-dtype fp8",
    f"{L70} --gpu H100 --gpus 4", f"{L70} --gpu A100 --gpus 4",
    f"{L70} --gpu A100 --gpus 4 --engine sglang",
    f"{AWQ70} --gpu H100 --gpus 2", f"{AWQ70} --gpu H100 --gpus 4",
    "meta-llama/Llama-3.1-8B --gpu H100 --concurrency 128",
    "deepseek-ai/DeepSeek-V3 --gpu H200 --gpus 8",
    f"{OSS} --gpu H100 --ctx 131072", f"{OSS} --gpu H100 --ctx 131072 --engine-version 0.10",
)
DEFAULT_CTX = 8192


def _gb(lo: int, hi: int) -> str:
    f = (lambda n: decimal(Fraction(max(n, 0), GB), 2))
    return f(hi) if f(lo) == f(hi) else f"{f(lo)}–{f(hi)}"


def _n(lo: int, hi: int) -> str:
    return grouped(lo) if lo == hi else f"{grouped(lo)}–{grouped(hi)}"


def row(command: str) -> str:
    import shlex
    from accounting.cli.serve import parser, plan_from_args
    argv = shlex.split(command)
    if "--ctx" not in argv:
        argv += ["--ctx", str(DEFAULT_CTX)]
    p = plan_from_args(parser().parse_args(argv))
    fits = "yes" if p.fits else (f"no, {decimal(Fraction(p.shortfall_bytes, GB), 2)} GB short"
                                 + ("; may fit" if p.may_fit else ""))
    t = p.time
    return (f"| `{command}` | {p.engine} {p.engine_version} | {fits} | "
            f"{_gb(p.weights_bytes_per_gpu_low, p.weights_bytes_per_gpu)} | "
            f"{grouped(p.kv_bytes_per_token_per_gpu)} | "
            f"{_gb(p.kv_pool_bytes_per_gpu, p.kv_pool_bytes_per_gpu_high)} | "
            f"{_n(p.max_concurrency, p.max_concurrency_high)} | "
            f"{decimal(t.ttft_seconds * 1000, 0)} | {decimal(t.tpot_seconds * 1000, 1)} |")


def markdown() -> str:
    head = ("| command (`python -m accounting serve …`; ctx 8,192 unless given) | engine | fits |"
            " weights/GPU GB (as loaded) | KV B/token/GPU | pool/GPU GB | max conc. | TTFT ms |"
            " TPOT ms |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    return head + "\n".join(row(c) for c in COMMANDS) + "\n"
