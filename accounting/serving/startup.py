"""What a serving engine's start-up takes from a GPU besides the weights and the KV pool, each
term read from the engine's (or NCCL's) source and, where the source leaves a choice to the
machine, given as a range (low, high): the plan says "fits" only when the high end fits.

Communicators (per GPU, TP·PP > 1):
  NCCL     each channel's receive connection holds one buffer per protocol: SIMPLE 4 MiB
           (DEFAULT_BUFFSIZE), LL128 120·640·8·8 = 4,915,200 bytes, LL 8·512·8·16 = 524,288
           (src/init.cc, DEFAULT_*_BUFFSIZE): 9,633,792 bytes a connection. A ring has one
           connection per channel, a tree up to three more; NCCL picks 2 to 8 channels over
           PCIe and 16 to 32 over NVLink (MAXCHANNELS 32). Low end: one ring connection on the
           fewest channels; high end: ring and tree on the most. NVLink SHARP (NVLS) buffers on
           NVSwitch systems are not counted (NCCL_NVLS_ENABLE=0 removes them).
  custom all-reduce  vLLM's CustomAllreduce (vllm/distributed/device_communicators/
           custom_all_reduce.py, _complete_init, read at commit 00d618a): a metadata buffer of
           meta_size + max_size, an IPC buffer of max_size and rank_data of 8 MiB, max_size
           8,192·1,024; only at TP 2, 4, 6 or 8 (and over NVLink when TP > 2). SGLang carries
           the same kernel (sgl-kernel's custom all-reduce).

CUDA graphs (vLLM V1; vllm/config/compilation.py, the default capture sizes; vllm/v1/worker/
gpu_model_runner.py, profile_cudagraph_memory):
  sizes    [1, 2, 4] + range(8, 256, 8) + range(256, M + 1, 16), M = min(2·max_num_seqs, 512,
           max_num_batched_tokens) (max_cudagraph_capture_size);
  modes    FULL_AND_PIECEWISE (the default cudagraph_mode): one set of graphs per mode;
  estimate vLLM captures the largest graph of each mode first (its memory is shared by the
           rest) and extrapolates the second's marginal cost, at least 1 MiB ("driver
           overhead"), to the others: estimate = max over modes of the first capture + Σ over
           modes of per-graph · (n − 1). The first capture holds the forward's activations at
           M tokens (activation.forward_peak); per-graph is 1 MiB at the low end and 24 MiB at
           the high end (the FULL graphs measured in vllm issue #50780, "the real FULL graphs
           cost ~24 MiB each").
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.units import MiB

NCCL_SIMPLE = 1 << 22  # DEFAULT_BUFFSIZE
NCCL_LL128 = 120 * 640 * 8 * 8  # NCCL_LL128_ELEMS_PER_THREAD · MAX_NTHREADS · STEPS · 8 bytes
NCCL_LL = 8 * 512 * 8 * 16  # NCCL_LL_LINES_PER_THREAD · MAX_NTHREADS · STEPS · 16 bytes
NCCL_CONNECTION = NCCL_SIMPLE + NCCL_LL128 + NCCL_LL
NCCL_CHANNELS_PCIE = (2, 8)
NCCL_CHANNELS_NVLINK = (16, 32)
NCCL_CONNECTIONS = (1, 4)  # ring only; ring and a tree's three
CUSTOM_AR_MAX = 8192 * 1024  # CustomAllreduce max_size
CUSTOM_AR_META = 256  # ops.meta_size(): the Signal struct's synchronization flags (an estimate)
CUSTOM_AR_RANK_DATA = 8 * 1024 * 1024
CUSTOM_AR_SIZES = (2, 4, 6, 8)  # CustomAllreduce._SUPPORTED_WORLD_SIZES
PER_GRAPH = (MiB, 24 * MiB)  # vLLM's floor; issue #50780's measured FULL graph
GRAPH_MODES = 2  # FULL_AND_PIECEWISE
MAX_CAPTURE = 512


@dataclass(frozen=True)
class Span:
    """A term that is a range: low and high ends, bytes, and how it is made."""
    low: int
    high: int
    why: str

    @staticmethod
    def exact(n: int, why: str) -> Span:
        return Span(n, n, why)

    def __add__(self, other: Span) -> Span:
        return Span(self.low + other.low, self.high + other.high,
                    "; ".join(w for w in (self.why, other.why) if w))


ZERO = Span(0, 0, "")


def custom_all_reduce(tp: int, nvlink: bool) -> int:
    if tp not in CUSTOM_AR_SIZES or (tp > 2 and not nvlink):
        return 0
    return CUSTOM_AR_META + CUSTOM_AR_MAX + CUSTOM_AR_MAX + CUSTOM_AR_RANK_DATA


def communicators(tp: int, pp: int, nvlink: bool) -> Span:
    """NCCL's buffers and the custom all-reduce's per GPU."""
    if tp * pp == 1:
        return ZERO
    lo_ch, hi_ch = NCCL_CHANNELS_NVLINK if nvlink else NCCL_CHANNELS_PCIE
    groups = (tp > 1) + (pp > 1)  # a TP ring and a PP send/recv pair
    ar = custom_all_reduce(tp, nvlink) if tp > 1 else 0
    low = groups * lo_ch * NCCL_CONNECTIONS[0] * NCCL_CONNECTION + ar
    high = groups * hi_ch * NCCL_CONNECTIONS[1] * NCCL_CONNECTION + ar
    return Span(low, high, f"NCCL {lo_ch}–{hi_ch} channels × {NCCL_CONNECTIONS[0]}–"
                           f"{NCCL_CONNECTIONS[1]} connections × 9.19 MiB"
                + (f", custom all-reduce {ar / MiB:.0f} MiB" if ar else ""))


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default cudagraph_capture_sizes."""
    m = min(2 * max_num_seqs, MAX_CAPTURE, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= m]
    sizes += list(range(8, min(m + 1, 256), 8))
    sizes += list(range(256, m + 1, 16))
    return sizes


def cuda_graphs(first_capture: int, sizes: list[int]) -> Span:
    """vLLM's profile_cudagraph_memory estimate: the largest graph's pool, shared, plus the
    marginal cost of every other graph of each mode."""
    rest = GRAPH_MODES * (len(sizes) - 1)
    return Span(first_capture + rest * PER_GRAPH[0], first_capture + rest * PER_GRAPH[1],
                f"{len(sizes)} sizes up to {sizes[-1]} × {GRAPH_MODES} modes: the largest "
                f"graph's activations + 1–24 MiB per other graph")


# The CUDA context and torch's CUDA set-up: free memory fell by 552,402,944 bytes (0.51 GiB)
# when torch 2.11 (CUDA 13.0) first touched this project's H200 (torch.cuda.mem_get_info:
# free 149,557,477,376 of 150,109,880,320). SGLang measures its start after it; vLLM's
# snapshot is taken after it too, so it is in vLLM's headroom, not its budget.
CONTEXT_BYTES = 552_402_944
# vLLM's non-torch increase during the profile run on one GPU: at least one cuBLAS workspace
# (accounting/planning/cuda_peak.py), at most 0.5 GiB (vLLM printed non_torch_memory 0.35 GiB
# on an RTX 3090, vllm issue #10517; 0.20 GiB on 3090s at TP 4, vllm PR #14447).
VLLM_NON_TORCH_HIGH = 512 * MiB


def non_torch(profiled: bool, tp: int, pp: int, nvlink: bool, arch: str | None) -> Span:
    """Memory outside torch that comes off the KV budget: vLLM's non-torch increase during its
    profile run (`profiled`), or what SGLang's start measurement already lacks."""
    comms = communicators(tp, pp, nvlink)
    if profiled:
        from accounting.planning.cuda_peak import cublas_workspace_bytes
        base = Span(cublas_workspace_bytes(arch), VLLM_NON_TORCH_HIGH,
                    "cuBLAS workspace – 0.5 GiB")
    else:
        base = Span.exact(CONTEXT_BYTES, "CUDA context 0.51 GiB (measured, H200)")
    return base + comms
