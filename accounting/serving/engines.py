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

from accounting.runtime.errors import UsageError
from accounting.units import GiB, MiB

VLLM, SGLANG = "vllm", "sglang"
ENGINES = (VLLM, SGLANG)


@dataclass(frozen=True)
class Defaults:
    utilization: Fraction  # vLLM gpu_memory_utilization / SGLang mem_fraction_static
    max_num_batched_tokens: int  # vLLM; SGLang's chunked_prefill_size
    max_num_seqs: int
    block_size: int  # tokens per page
    why: str


def defaults(engine: str, gpu_name: str | None, memory_bytes: int, tp: int, pp: int,
             mla: bool) -> Defaults:
    if engine == VLLM:
        big = memory_bytes >= 70 * GiB and "a100" not in (gpu_name or "").lower()
        # FlashMLA's page: vLLM raises block_size to 64 for MLA on Hopper
        # (vllm/platforms/cuda.py, CudaPlatform.check_and_update_config: "Forcing kv cache
        # block size to 64 for FlashMLA backend")
        block = 64 if mla else 16
        return Defaults(Fraction(9, 10), 8192 if big else 2048, 1024 if big else 256, block,
                        "vLLM defaults: gpu_memory_utilization 0.9; max_num_batched_tokens "
                        + ("8192, max_num_seqs 1024 (≥ 70 GiB, not an A100)" if big else
                           "2048, max_num_seqs 256") + f"; block_size {block}"
                        + (" (MLA: FlashMLA's 64)" if mla else ""))
    if engine == SGLANG:
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
    raise UsageError(f"unknown --engine {engine!r}; choose {', '.join(ENGINES)}")


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


def non_torch_default(engine: str, gpus: int) -> int:
    return NON_TORCH_BYTES + (NCCL_BYTES if engine == SGLANG and gpus > 1 else 0)


def sglang_pool(memory_bytes: int, fraction: Fraction, weights: int, non_torch: int) -> int:
    """SGLang's rest_memory: the free memory after loading less the (1 − fraction) share of
    the memory at start (here the card's memory less the non-torch share already taken)."""
    start = memory_bytes - non_torch
    return int((start - weights) - start * (1 - fraction))
