"""The serving engines' rules, each stated once, with where it is read:

vLLM (v1 engine; vllm/v1/worker/gpu_worker.py, Worker.determine_available_memory, and
vllm/utils memory_profiling; read at commit 35d5cda of vllm-project/vllm):
    requested   = total_memory · gpu_memory_utilization            (Worker.init_device)
    pool        = requested − (weights + torch activation peak of the profile run at
                  max_num_batched_tokens + non-torch increase)      (non_kv_cache_memory)
    CUDA graphs are captured after the pool is allocated (compile_or_warm_up_model); at that
    commit their memory is not subtracted from it but must fit in the (1 − utilization)
    headroom (the worker only logs a suggested --kv-cache-memory that accounts it). Newer
    vLLM profiles the graphs too (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, vllm/envs.py:
    "Profile CUDA graph memory during memory profiling for more accurate KV cache sizing")
    and subtracts them: --cuda-graph-mem SIZE (default 0, the older rule).
    blocks      = pool // (block_size · Σ over layers of bytes per token) (v1 kv_cache_utils:
                  one page of block_size tokens per layer); block_size 16 (CacheConfig).
    Defaults (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, `vllm serve`):
    gpu_memory_utilization 0.9; max_num_batched_tokens 8192 and max_num_seqs 1024 on a GPU
    of at least 70 GiB that is not an A100, else 2048 and 256.

SGLang (python/sglang/srt/model_executor/model_runner.py, ModelRunner.profile_max_num_token;
server_args.py, the mem_fraction_static default):
    rest        = free memory after loading − total_at_start · (1 − mem_fraction_static)
                = mem_fraction_static · total_at_start − weights − load-time non-torch memory
    tokens      = rest // cell_size, cell_size = kv heads per rank · head_dim · layers · 2 ·
                  dtype bytes (latent attention: (kv_lora_rank + qk_rope_head_dim) · layers ·
                  dtype bytes); page size 1.
    mem_fraction_static default = (gpu_mem − reserved) / gpu_mem (MiB, rounded to 3 places),
    reserved = (9.5 + tp·pp/2) GiB under 90 GiB (H100, A100), (12 + tp·pp/2) GiB under
    160 GiB (H200), 32 GiB above; chunked_prefill_size 8192 on H100/H200/A100. The
    activations and CUDA graphs live in the reserve (not profiled).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from typing import Callable

from accounting.registry import registrar
from accounting.runtime.errors import UsageError
from accounting.units import GiB, MiB


@dataclass(frozen=True)
class Defaults:
    utilization: Fraction  # vLLM gpu_memory_utilization / SGLang mem_fraction_static
    max_num_batched_tokens: int  # vLLM; SGLang's chunked_prefill_size
    max_num_seqs: int
    block_size: int  # tokens per page
    why: str


def _vllm_defaults(device_name: str | None, memory_bytes: int, tp: int, pp: int,
                   mla: bool) -> Defaults:
    """EngineArgs.get_batch_defaults tests the device name torch reports
    (current_platform.get_device_name(), the GPU record's device_name): "a100" not in it."""
    big = memory_bytes >= 70 * GiB and "a100" not in (device_name or "").lower()
    # FlashMLA's page: vLLM raises block_size to 64 for MLA on Hopper
    # (vllm/platforms/cuda.py, CudaPlatform.check_and_update_config: "Forcing kv cache
    # block size to 64 for FlashMLA backend")
    block = 64 if mla else 16
    return Defaults(Fraction(9, 10), 8192 if big else 2048, 1024 if big else 256, block,
                    "vLLM defaults: gpu_memory_utilization 0.9; max_num_batched_tokens "
                    + ("8192, max_num_seqs 1024 (≥ 70 GiB, not an A100)" if big else
                       "2048, max_num_seqs 256") + f"; block_size {block}"
                    + (" (MLA: FlashMLA's 64)" if mla else ""))


def _sglang_defaults(device_name: str | None, memory_bytes: int, tp: int, pp: int,
                     mla: bool) -> Defaults:
    mem_mib = memory_bytes // MiB
    par = Fraction(tp * pp, 2)
    if mem_mib < 35 * 1024:
        reserved = (Fraction(28, 10) + Fraction(tp * pp, 10)) * 1024
    elif mem_mib < 90 * 1024:
        reserved = (Fraction(19, 2) + par) * 1024
    elif mem_mib < 160 * 1024:
        reserved = (12 + par) * 1024
    else:
        reserved = Fraction(32 * 1024)
    if mem_mib <= reserved:
        raise UsageError(f"SGLang's default mem_fraction_static is not positive on a GPU of "
                         f"{mem_mib:,} MiB (it reserves {float(reserved):g} MiB); give "
                         f"--gpu-memory-utilization F")
    frac = Fraction(round(Fraction(mem_mib - reserved, mem_mib), 3)).limit_denominator(1000)
    chunk = 2048 if mem_mib < 35 * 1024 else 8192 if mem_mib < 160 * 1024 else 16384
    return Defaults(frac, chunk, 1024, 1,
                    f"SGLang defaults: mem_fraction_static {float(frac)} = (GPU MiB − "
                    f"reserved {float(reserved):g} MiB) / GPU MiB; chunked_prefill_size "
                    f"{chunk}; page size 1")


def vllm_pool(memory_bytes: int, utilization: Fraction, weights: int, activation: int,
              non_torch: int, cuda_graphs: int = 0) -> int:
    """vLLM's available KV cache memory (may be negative: does not fit)."""
    return int(memory_bytes * utilization) - weights - activation - non_torch - cuda_graphs


# Memory outside torch per GPU, an assumption (a term vLLM and SGLang measure, not derive):
# the CUDA context and library workspaces, 0.5 GiB (vLLM printed non_torch_memory 0.35 GiB
# on an RTX 3090, vllm issue #10517). SGLang measures its start memory after the distributed
# set-up, so with TP or PP its NCCL and custom all-reduce buffers come off too: 2 GiB more
# (vLLM 0.6.4 printed 1.79 GiB more at TP 2 than at TP 1 for Llama-3-8B, vllm PR #10511).
# vLLM now builds NCCL before its memory snapshot, outside the budget (gpu_worker.py,
# init_device: "Initialize the distributed environment BEFORE taking memory snapshot").
NON_TORCH_BYTES = GiB // 2
NCCL_BYTES = 2 * GiB


def _non_torch_outside_nccl(gpus: int) -> int:
    """vLLM: NCCL is built before the memory snapshot, outside the budget."""
    return NON_TORCH_BYTES


def _non_torch_with_nccl(gpus: int) -> int:
    """SGLang: with TP or PP its NCCL buffers come off the start memory too."""
    return NON_TORCH_BYTES + (NCCL_BYTES if gpus > 1 else 0)


def sglang_pool(memory_bytes: int, fraction: Fraction, weights: int, activation: int,
                non_torch: int, cuda_graphs: int = 0) -> int:
    """SGLang's rest_memory: the free memory after loading less the (1 − fraction) share of
    the memory at start (here the card's memory less the non-torch share already taken). The
    activations and CUDA graphs live in the reserve: `activation` and `cuda_graphs` are not
    subtracted (the one signature of Engine.pool)."""
    start = memory_bytes - non_torch
    return int((start - weights) - start * (1 - fraction))


# ---- the engines: one record each; adding an engine is one record here ---------------------
@dataclass(frozen=True)
class Engine:
    """A serving engine: its defaults and its KV pool rule, each a function of this module."""
    name: str  # the --engine value
    title: str
    defaults: Callable[..., Defaults]  # (device_name, memory_bytes, tp, pp, mla)
    # (memory_bytes, utilization, weights, activation, non_torch, cuda_graphs) -> pool bytes
    pool: Callable[..., int]
    non_torch: Callable[[int], int]  # GPUs of the deployment -> non-torch bytes per GPU
    # True: a profile run's activation peak comes off the pool, which is paged in blocks of
    # block_size tokens (vLLM); False: the activations live in the reserve, pages of 1 token
    profile_run: bool
    # the note when the context exceeds max_num_batched_tokens ({ctx}, {chunk}); None: none
    chunked_prefill_note: str | None = None


ENGINES: dict[str, Engine] = {}
register = registrar(ENGINES, "engine")

VLLM = register(Engine(
    "vllm", "vLLM (v1 engine)", _vllm_defaults, vllm_pool, _non_torch_outside_nccl, True,
    "vLLM prefills a {ctx:,}-token prompt in chunks of {chunk:,} (max_num_batched_tokens; "
    "chunked prefill)"))
SGLANG = register(Engine("sglang", "SGLang", _sglang_defaults, sglang_pool, _non_torch_with_nccl,
                         False))
DEFAULT_ENGINE = VLLM


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise UsageError(f"unknown --engine {name!r}; choose {', '.join(ENGINES)}") from None


def defaults(engine: str, device_name: str | None, memory_bytes: int, tp: int, pp: int,
             mla: bool) -> Defaults:
    """The engine's defaults on a GPU (device_name: what torch reports, GPU.device_name)."""
    return get_engine(engine).defaults(device_name, memory_bytes, tp, pp, mla)


def non_torch_default(engine: str, gpus: int) -> int:
    return get_engine(engine).non_torch(gpus)
