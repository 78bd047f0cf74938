"""The serving engines as data (issue 43): one frozen, registered record per engine and version
whose start-up rules differ, each rule read from the engine's source and cited. The plan
(serving/plan.py) asks the record; nothing outside this module branches on an engine's name.

vLLM V1 (vllm/v1/worker/gpu_worker.py, Worker.init_device and determine_available_memory;
vllm/utils memory_profiling; read at commit 35d5cda of vllm-project/vllm):
    requested   = total · gpu_memory_utilization, total = torch.cuda.mem_get_info()'s total,
                  taken in init_device after the CUDA context and the distributed set-up
                  (those sit in the (1 − utilization) headroom)
    pool        = requested − weights − the profile run's torch peak − the non-torch increase
                  since that snapshot (cuBLAS workspaces, NCCL's buffers, made lazily at the
                  first collective, the custom all-reduce's) [− the CUDA-graph estimate]
    The profile run (gpu_model_runner.py, profile_run) is a forward over max_num_batched_tokens
    tokens and, on the last pipeline stage, the sampler over min(max_num_seqs, tokens) rows
    (serving/activation.py).
    CUDA graphs: 0.10 – 0.20 capture them after the pool is allocated, in the headroom;
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (vllm/envs.py; vllm PR #30515) estimates them
    during profiling and, on by default since 0.21.0 ("CUDA graph memory profiling is enabled
    (default since v0.21.0)", the 0.27.1 start-up log in gpustack/runner PR #251), takes the
    estimate off the pool (serving/startup.py).
    blocks      = pool // (block_size · Σ over layers of bytes per token); block_size 16.
    Defaults (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults): gpu_memory_utilization
    0.9; max_num_batched_tokens 8192 and max_num_seqs 1024 on a GPU of at least 70 GiB that is
    not an A100, else 2048 and 256.

SGLang (python/sglang/srt/model_executor/model_runner.py, ModelRunner.profile_max_num_token;
server_args.py, ServerArgs._handle_gpu_memory_settings):
    rest        = free memory after loading − start · (1 − mem_fraction_static), start = the
                  free memory after the CUDA context and the distributed set-up (its NCCL and
                  custom all-reduce buffers)
    tokens      = rest // cell_size; page size 1.
    mem_fraction_static default = round((gpu_mem − reserved) / gpu_mem, 3), gpu_mem nvidia-smi's
    memory.total in MiB (get_nvgpu_memory_capacity), reserved in MiB by release:
      0.4:  (9.5 + tp·pp/2) GiB under 90 GiB, (12 + tp·pp/2) under 160, 32 GiB above
            (2.8 + tp·pp/10 GiB under 35 GiB);
      0.5 (the 2026 rule):  512 + 1.5 · max(chunked_prefill_size, 2048) + 2 · cuda_graph_max_bs
            + tp·pp/8 · 1024, at least 10,240 above 60 GiB; chunked_prefill_size and
            cuda_graph_max_bs by GPU memory (2048 and 8 under 20 GiB; 2048 and 24 (80 at TP ≥ 4)
            under 35; 4096 and 32 (160) under 60; 8192 and 256 (512) under 160; 16384 and 512
            above).
    The activations and CUDA graphs live in the reserve (not profiled).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from accounting.registry import registrar
from accounting.runtime.errors import UsageError, shorten
from accounting.serving import launch
from accounting.units import GiB, MiB

VLLM, SGLANG = "vllm", "sglang"
ENGINES = (VLLM, SGLANG)  # the engines with start-up records below
# llama.cpp is planned by its own rules (serving/llamacpp.py: its whole-context cache, no
# pool rule, no versions here), so it has no record; `serve --engine` offers it beside them
LLAMA_CPP = "llama.cpp"
CHOICES = ENGINES + (LLAMA_CPP,)  # serve --engine


@dataclass(frozen=True)
class Defaults:
    utilization: Fraction  # vLLM gpu_memory_utilization / SGLang mem_fraction_static
    max_num_batched_tokens: int  # vLLM; SGLang's chunked_prefill_size
    max_num_seqs: int
    block_size: int  # tokens per page
    why: str


def _vllm_defaults(device_name: str | None, total: int, smi_bytes: int, tp: int, pp: int,
                   mla: bool) -> Defaults:
    """EngineArgs.get_batch_defaults tests the device name torch reports
    (current_platform.get_device_name(), the GPU record's device_name): "a100" not in it."""
    big = total >= 70 * GiB and "a100" not in (device_name or "").lower()
    # FlashMLA's page: vLLM raises block_size to 64 for MLA on Hopper
    # (vllm/platforms/cuda.py, CudaPlatform.check_and_update_config: "Forcing kv cache
    # block size to 64 for FlashMLA backend")
    block = 64 if mla else 16
    return Defaults(Fraction(9, 10), 8192 if big else 2048, 1024 if big else 256, block,
                    "vLLM defaults: gpu_memory_utilization 0.9; max_num_batched_tokens "
                    + ("8192, max_num_seqs 1024 (≥ 70 GiB, not an A100)" if big else
                       "2048, max_num_seqs 256") + f"; block_size {block}"
                    + (" (MLA: FlashMLA's 64)" if mla else ""))


def _sglang_fraction(mem_mib: int, reserved: Fraction, chunk: int, why: str) -> Defaults:
    if mem_mib <= reserved:
        raise UsageError(f"SGLang's default mem_fraction_static is not positive on a GPU of "
                         f"{mem_mib:,} MiB (it reserves {float(reserved):g} MiB); give "
                         f"--gpu-memory-utilization F")
    frac = Fraction(round(Fraction(mem_mib - reserved, mem_mib), 3)).limit_denominator(1000)
    return Defaults(frac, chunk, 1024, 1,
                    f"SGLang defaults: mem_fraction_static {float(frac)} = (GPU MiB − reserved "
                    f"{float(reserved):g} MiB) / GPU MiB ({why}); chunked_prefill_size {chunk}; "
                    f"page size 1")


def _sglang_04_defaults(gpu_name, total, smi_bytes, tp, pp, mla) -> Defaults:
    mem_mib = smi_bytes // MiB
    par = Fraction(tp * pp, 2)
    if mem_mib < 35 * 1024:
        reserved = (Fraction(28, 10) + Fraction(tp * pp, 10)) * 1024
    elif mem_mib < 90 * 1024:
        reserved = (Fraction(19, 2) + par) * 1024
    elif mem_mib < 160 * 1024:
        reserved = (12 + par) * 1024
    else:
        reserved = Fraction(32 * 1024)
    chunk = 2048 if mem_mib < 35 * 1024 else 8192 if mem_mib < 160 * 1024 else 16384
    return _sglang_fraction(mem_mib, reserved, chunk, "0.4's reserve by memory tier")


def _sglang_05_defaults(gpu_name, total, smi_bytes, tp, pp, mla) -> Defaults:
    mem_mib = smi_bytes // MiB
    big = tp >= 4
    if mem_mib < 20 * 1024:
        chunk, bs = 2048, 8
    elif mem_mib < 35 * 1024:
        chunk, bs = 2048, 80 if big else 24
    elif mem_mib < 60 * 1024:
        chunk, bs = 4096, 160 if big else 32
    elif mem_mib < 160 * 1024:
        chunk, bs = 8192, 512 if big else 256
    else:
        chunk, bs = 16384, 512
    reserved = (512 + Fraction(3, 2) * max(chunk, 2048) + 2 * bs
                + Fraction(tp * pp, 8) * 1024)
    if mem_mib > 60 * 1024:
        reserved = max(reserved, Fraction(10 * 1024))
    return _sglang_fraction(mem_mib, reserved, chunk,
                            f"reserved = 512 + 1.5·{max(chunk, 2048)} + 2·{bs} (cuda_graph_max_bs)"
                            f" + {tp * pp}/8·1024" + (", at least 10,240" if mem_mib > 60 * 1024
                                                      else ""))


@dataclass(frozen=True)
class Engine:
    """One engine at one range of releases: its defaults and how its KV budget is taken."""
    name: str  # the registry key, "vllm-0.21"
    engine: str  # vllm | sglang
    version: str  # the first release of the rule, "0.21"
    releases: str  # "0.21 and later (current)"
    source: str  # where the rules are read (file, function, commit or release)
    defaults: Callable[..., Defaults]
    profiled: bool  # the profile run's activation peak comes off the pool (vLLM)
    graphs_in_pool: bool  # the CUDA-graph estimate comes off the pool
    start_after_comms: bool  # the budget's start is measured after NCCL's set-up (SGLang)
    # a vision-language model's encoder is run in the profile run on the largest image the
    # processor allows, its outputs held as the encoder cache (vLLM V1's profile_run,
    # gpu_model_runner.py; serving/vision.py); SGLang profiles nothing
    profiles_encoder: bool = False
    # a multimodal model's default memory fraction scaled by its tower's size (SGLang's
    # adjust_mem_fraction_for_vlm, serving/vision.py sglang_vlm_factor)
    vlm_fraction: bool = False
    # --limit-mm-per-prompt 0 builds no tower (vLLM's _mark_tower_model, current models)
    skips_disabled_tower: bool = False
    # ---- what the other modules ask of an engine, never its name ------------------------------
    # the environment switch that lets it start past the model's context (max_len.py)
    allow_long_env: str = ""
    # aiconfigurator-core's folder of its measured kernels (systems/data/<system>/<op>/<here>/,
    # timing/tables.py): the engine's own GEMM, attention and custom all-reduce tables
    kernel_tables: str = ""
    # aiconfigurator-core's backend adds a per-request prefill dispatch to TTFT (its
    # sdk/backends/vllm_backend.py _prefill_dispatch_overhead_ms; timing/serve.py)
    prefill_dispatch: bool = False
    # its launch command (serving/launch.py): the program, the writer of its flags, and the
    # KV-transfer roles of a disaggregated prefill and decode worker
    launch_argv: tuple[str, ...] = ()
    launcher: Callable[..., list[str]] | None = None
    disagg_roles: tuple[str, str] = ("", "")
    # its setting that caps the sequences run at once (serving/views.py names it): vLLM's
    # SchedulerConfig.max_num_seqs, SGLang's ServerArgs.max_running_requests
    max_seqs_flag: str = ""

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version} ({self.releases})"

    def pool(self, total: int, utilization: Fraction, weights: int, activation: int,
             non_torch: int, graphs: int) -> int:
        """The KV budget in bytes (negative: does not fit). vLLM: total · utilization less the
        non-KV terms; SGLang: the free memory after loading less (1 − fraction) of the start
        (`non_torch`: what was taken before the start)."""
        if self.profiled:
            return (int(total * utilization) - weights - activation - non_torch
                    - (graphs if self.graphs_in_pool else 0))
        start = total - non_torch
        return int((start - weights) - start * (1 - utilization))


REGISTRY: dict[str, Engine] = {}
register = registrar(REGISTRY, "engine")
_VLLM_SOURCE = ("vllm/v1/worker/gpu_worker.py determine_available_memory (commit 35d5cda); "
                "vllm/envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; "
                "gpu_model_runner.py profile_cudagraph_memory")
_SGLANG_SOURCE = ("python/sglang/srt/model_executor/model_runner.py profile_max_num_token; "
                  "server_args.py _handle_gpu_memory_settings")
# vLLM: vllm/envs.py VLLM_ALLOW_LONG_MAX_MODEL_LEN; `vllm serve`; kv_role of its
# KVTransferConfig. SGLang: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN
# (python/sglang/srt/configs/model_config.py); sglang.launch_server; --disaggregation-mode.
_VLLM = dict(profiles_encoder=True, allow_long_env="VLLM_ALLOW_LONG_MAX_MODEL_LEN", kernel_tables=VLLM,
             prefill_dispatch=True, launch_argv=(VLLM, "serve"), launcher=launch.vllm_args,
             disagg_roles=("kv_producer", "kv_consumer"), max_seqs_flag="max_num_seqs")
_SGLANG = dict(allow_long_env="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", kernel_tables=SGLANG,
               launch_argv=("python", "-m", "sglang.launch_server", "--model-path"),
               launcher=launch.sglang_args, disagg_roles=("prefill", "decode"),
               max_seqs_flag="max_running_requests")
register(Engine("vllm-0.10", VLLM, "0.10", "0.10 – 0.20", _VLLM_SOURCE, _vllm_defaults,
                profiled=True, graphs_in_pool=False, start_after_comms=False, **_VLLM))
register(Engine("vllm-0.21", VLLM, "0.21", "0.21 and later, current", _VLLM_SOURCE,
                _vllm_defaults, profiled=True, graphs_in_pool=True, start_after_comms=False,
                skips_disabled_tower=True, **_VLLM))
register(Engine("sglang-0.4", SGLANG, "0.4", "0.4 – 0.5.x of 2025", _SGLANG_SOURCE,
                _sglang_04_defaults, profiled=False, graphs_in_pool=False,
                start_after_comms=True, **_SGLANG))
register(Engine("sglang-0.5", SGLANG, "0.5", "the 2026 reserve rule, current", _SGLANG_SOURCE,
                _sglang_05_defaults, profiled=False, graphs_in_pool=False,
                start_after_comms=True, vlm_fraction=True, **_SGLANG))
DEFAULT_VERSION = {VLLM: "0.21", SGLANG: "0.5"}


def allow_long_env(engine: str) -> str:
    """The engine's switch to start past the model's context (every release's the same)."""
    return get_engine(engine).allow_long_env


def versions(engine: str) -> list[str]:
    return [e.version for e in REGISTRY.values() if e.engine == engine]


def get_engine(engine: str, version: str | None = None) -> Engine:
    if engine not in ENGINES:
        raise UsageError(f"unknown --engine {engine!r}; choose {', '.join(ENGINES)}")
    v = DEFAULT_VERSION[engine] if version is None else version.strip().removeprefix("v")
    key = f"{engine}-{v}"
    if key not in REGISTRY:
        # a release inside a record's range: the latest record at or before it
        known = sorted(versions(engine), key=_release)
        # a post-release ("0.5.3.post3", PEP 440: after 0.5.3, SGLang's own version strings)
        # is inside its release's range
        base = re.sub(r"\.post\d+$", "", v)
        before = [k for k in known if _release(k) <= _release(base)] if _parses(base) else []
        if not before:
            raise UsageError(f"unknown --engine-version {shorten(version)} for {engine}; choose one "
                             f"of {', '.join(known)} (or a later release)")
        key = f"{engine}-{before[-1]}"
    return REGISTRY[key]


def _parses(v: str) -> bool:
    """A release number: up to four dot-separated parts of up to six digits."""
    parts = v.split(".")
    return 0 < len(parts) <= 4 and all(p.isdigit() and len(p) <= 6 for p in parts)


def _release(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def defaults(engine: str, gpu_name: str | None, memory_bytes: int, tp: int, pp: int,
             mla: bool, version: str | None = None, smi_bytes: int | None = None) -> Defaults:
    """The engine's defaults on a GPU of `memory_bytes` (torch's total; `smi_bytes`:
    nvidia-smi's, which SGLang reads, default the same)."""
    return get_engine(engine, version).defaults(gpu_name, memory_bytes,
                                                smi_bytes or memory_bytes, tp, pp, mla)
