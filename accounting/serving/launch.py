"""A searched layout as the engine's launch command (`serve --search --emit vllm|sglang`).

One command line per worker kind (aggregated: one; disaggregated: the prefill worker's and
the decode worker's, joined by " ; "), each started once per worker of the replica.
Flag names as the engines' argument parsers declare them (read from their source):
  vLLM: vllm/engine/arg_utils.py, EngineArgs.add_cli_args (vllm-project/vllm, the v0.9-era
    version stored in the code index): --tensor-parallel-size (ParallelConfig group),
    --pipeline-parallel-size, --max-model-len and --quantization (ModelConfig group),
    --kv-cache-dtype (CacheConfig), --max-num-seqs (SchedulerConfig; a DP rank's), --data-parallel-size and
    --enable-expert-parallel (ParallelConfig), --kv-transfer-config
    (a KVTransferConfig as JSON: kv_connector "NixlConnector", kv_role "kv_producer" on the
    prefill worker, "kv_consumer" on the decode worker).
  SGLang: the 0.5.23 wheel from PyPI: flags made from the ServerArgs fields by
    sglang/srt/arg_groups/arg_utils.py _field_to_cli_name ("--" + name with "-" for "_"):
    --model-path, --context-length, --quantization, --kv-cache-dtype ("fp8_e4m3") in
    fields/model.py; --tp-size, --pp-size in fields/parallel.py; --max-running-requests in
    fields/schedule.py; --disaggregation-mode ("prefill" | "decode") and
    --disaggregation-transfer-backend (choices.py DISAGG_TRANSFER_BACKEND_CHOICES: "nixl")
    in fields/disagg.py.
Each engine's record (serving/engines.py) names its program (launch_argv), its writer below
(launcher) and its disaggregated workers' roles (disagg_roles): nothing here tests a name.
"""
from __future__ import annotations

import json
import shlex

# Speculative decoding: vLLM's --speculative-config JSON (vllm/config/speculative.py
# SpeculativeMethod: "mtp" among MTPModelTypes, "draft_model" with "model"); SGLang's
# --speculative-algorithm NEXTN (the MTP head) or STANDALONE (a draft model,
# --speculative-draft-model-path), --speculative-num-steps K, --speculative-eagle-topk 1,
# --speculative-num-draft-tokens K + 1 (sglang 0.5.23 arg_groups/fields/spec.py).


def _spec_vllm(spec) -> list[str]:
    if spec is None:
        return []
    cfg = {"method": "mtp", "num_speculative_tokens": spec.tokens} if spec.method == "mtp" \
        else {"method": "draft_model", "model": spec.method,
              "num_speculative_tokens": spec.tokens}
    return ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]


def _spec_sglang(spec) -> list[str]:
    if spec is None:
        return []
    a = ["--speculative-algorithm", "NEXTN" if spec.method == "mtp" else "STANDALONE"]
    if spec.method != "mtp":
        a += ["--speculative-draft-model-path", spec.method]
    return a + ["--speculative-num-steps", str(spec.tokens), "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", str(spec.tokens + 1)]


def vllm_args(argv: tuple[str, ...], model: str, wk, ctx: int, role: str | None) -> list[str]:
    a = [*argv, model, "--tensor-parallel-size", str(wk.tp)]
    if wk.pp > 1:
        a += ["--pipeline-parallel-size", str(wk.pp)]
    if wk.dp > 1:  # attention DP + EP (ParallelConfig: --data-parallel-size, -expert-parallel)
        a += ["--data-parallel-size", str(wk.dp), "--enable-expert-parallel"]
    a += ["--max-model-len", str(ctx), "--max-num-seqs", str(wk.rank_batch)]
    if wk.online_fp8:
        a += ["--quantization", "fp8"]
    if wk.kv_dtype != "bf16":
        a += ["--kv-cache-dtype", "fp8"]
    if role != "kv_producer":  # the decode side drafts (prefill emits one token)
        a += _spec_vllm(wk.spec)
    if role is not None:
        a += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector",
                                                  "kv_role": role}, separators=(",", ":"))]
    return a


def sglang_args(argv: tuple[str, ...], model: str, wk, ctx: int, role: str | None) -> list[str]:
    a = [*argv, model, "--tp-size", str(wk.tp * wk.dp)]
    if wk.dp > 1:  # fields/parallel.py: attn_dp_size, ep_size
        a += ["--attn-dp-size", str(wk.dp), "--ep-size", str(wk.tp * wk.dp)]
    if wk.pp > 1:
        a += ["--pp-size", str(wk.pp)]
    a += ["--context-length", str(ctx), "--max-running-requests", str(wk.batch)]
    if wk.online_fp8:
        a += ["--quantization", "fp8"]
    if wk.kv_dtype != "bf16":
        a += ["--kv-cache-dtype", "fp8_e4m3"]
    if role != "prefill":
        a += _spec_sglang(wk.spec)
    if role is not None:
        a += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl"]
    return a


def command(layout, engine, model: str, ctx: int) -> str:
    """The layout's launch command(s), shell-quoted, for `engine` (its record,
    serving/engines.py); workers counts as a prefix comment."""
    def build(wk, role):
        return shlex.join(engine.launcher(engine.launch_argv, model, wk, ctx, role))
    if not layout.disaggregated:
        return build(layout.decode, None)
    pre, dec = engine.disagg_roles
    return f"{build(layout.prefill, pre)} ; {build(layout.decode, dec)}"
