"""A searched layout as the engine's launch command (`serve --search --emit vllm|sglang`).

One command line per worker kind (aggregated: one; disaggregated: the prefill worker's and
the decode worker's, joined by " ; "), each started once per worker of the replica.
Flag names as the engines' argument parsers declare them:
  vLLM: vllm/engine/arg_utils.py, EngineArgs.add_cli_args (vllm-project/vllm at
    99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b): --tensor-parallel-size,
    --pipeline-parallel-size, --max-model-len, --max-num-seqs, --kv-cache-dtype,
    --quantization, --kv-transfer-config (a KVTransferConfig as JSON: kv_connector
    "NixlConnector", kv_role "kv_producer" / "kv_consumer", vllm/config/kv_transfer.py).
  SGLang: python/sglang/srt/server_args.py, ServerArgs.add_cli_args (sgl-project/sglang at
    469c63e54e7d94591617ef9590c6aa26d54dc1bb): --model-path, --tp-size, --pp-size,
    --context-length, --max-running-requests, --kv-cache-dtype (fp8_e4m3), --quantization,
    --disaggregation-mode prefill|decode, --disaggregation-transfer-backend nixl.
"""
from __future__ import annotations

import json
import shlex

EMIT = ("vllm", "sglang")


def _vllm(model: str, wk, ctx: int, role: str | None) -> list[str]:
    a = ["vllm", "serve", model, "--tensor-parallel-size", str(wk.tp)]
    if wk.pp > 1:
        a += ["--pipeline-parallel-size", str(wk.pp)]
    a += ["--max-model-len", str(ctx), "--max-num-seqs", str(wk.batch)]
    if wk.online_fp8:
        a += ["--quantization", "fp8"]
    if wk.kv_dtype != "bf16":
        a += ["--kv-cache-dtype", "fp8"]
    if role is not None:
        a += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector",
                                                  "kv_role": role}, separators=(",", ":"))]
    return a


def _sglang(model: str, wk, ctx: int, role: str | None) -> list[str]:
    a = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(wk.tp)]
    if wk.pp > 1:
        a += ["--pp-size", str(wk.pp)]
    a += ["--context-length", str(ctx), "--max-running-requests", str(wk.batch)]
    if wk.online_fp8:
        a += ["--quantization", "fp8"]
    if wk.kv_dtype != "bf16":
        a += ["--kv-cache-dtype", "fp8_e4m3"]
    if role is not None:
        a += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl"]
    return a


def command(layout, engine: str, model: str, ctx: int) -> str:
    """The layout's launch command(s), shell-quoted; workers counts as a prefix comment."""
    build = _vllm if engine == "vllm" else _sglang
    if not layout.disaggregated:
        return shlex.join(build(model, layout.decode, ctx, None))
    roles = ("kv_producer", "kv_consumer") if engine == "vllm" else ("prefill", "decode")
    pre = shlex.join(build(model, layout.prefill, ctx, roles[0]))
    dec = shlex.join(build(model, layout.decode, ctx, roles[1]))
    return f"{pre} ; {dec}"
