"""Async TP's symmetric-memory workspace and the reserved figure (issue 44).

torch allocates the workspace (torch/distributed/_symmetric_memory get_symm_mem_workspace
→ _SymmetricMemory.empty_strided_p2p) with the symmetric-memory backend's own allocator,
CUDASymmetricMemoryAllocator::alloc (torch/csrc/distributed/c10d/symm_mem/
CUDASymmetricMemory.cu: the driver's cuMemCreate, mapped by cuMemMap), not with c10's
caching allocator: torch.cuda.max_memory_reserved, what torchtitan reports, does not count
it. The plan's reserved figure must not either; its allocated peak (the verdict's figure)
still does, and the JSON names it apart (memory_per_gpu_outside_allocator_bytes).
"""
import contextlib
import io
import json

from accounting.cli.main import main

# torchtitan's Table 4 shape (Llama 3.1 70B: d_model 8,192; FSDP 32 × TP 8, micro-batch 16
# of 8,192 tokens, float8 TP), the published rows' flags (accounting/literature/
# published_runs.py)
FLAGS = ["meta-llama/Llama-3.1-8B", "--stack", "torchtitan", "--gpu-mem", "96GB",
         "--num-layers", "80", "--d-model", "8192", "--num-heads", "64", "--num-kv-heads", "8",
         "--d-ff", "28672", "--gpus", "256", "--tp", "8", "--sp", "--fsdp", "--batch", "512",
         "--micro-batch", "16", "--ctx", "8192", "--recompute", "full",
         "--precision", "fp8-torchao"]


def _plan(*extra: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["plan", *FLAGS, *extra, "--format", "json"]) == 0
    return json.loads(out.getvalue())


def test_workspace_is_outside_the_reserved_figure():
    """By hand: the workspace is the larger of a fused all-gather matmul's fp8 shard,
    b·(T/tp)·d_model·1 = 16·1,024·8,192 = 128 MiB, and a fused matmul reduce-scatter's two
    bf16 chunks, 2·b·(T/tp)·d_model·2 = 512 MiB: 2^29 bytes. With async TP the allocated
    peak (and so the verdict's headroom) moves by exactly that, the reserved figure
    (torch.cuda.max_memory_reserved's segments) not at all (before the fix it moved by the
    same 512 MiB: the workspace was packed as one of the allocator's blocks)."""
    ws = max(16 * (8192 // 8) * 8192 * 1, 2 * 16 * (8192 // 8) * 8192 * 2)
    assert ws == 2 ** 29
    plain, asyn = _plan(), _plan("--async-tp")
    assert plain["memory_per_gpu_outside_allocator_bytes"] == 0
    assert asyn["memory_per_gpu_outside_allocator_bytes"] == ws
    assert asyn["memory_per_gpu_bytes"] - plain["memory_per_gpu_bytes"] == ws
    assert asyn["memory_per_gpu_reserved_bytes"] == plain["memory_per_gpu_reserved_bytes"]
    assert plain["fit"]["headroom_bytes"] - asyn["fit"]["headroom_bytes"] == ws


def test_first_screen_names_it_apart():
    """The text view's memory line says how much of the allocated peak is outside the
    caching allocator, and only where there is some."""
    def text(*extra):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert main(["plan", *FLAGS, *extra]) == 0
        return out.getvalue()
    assert "outside the caching allocator" in text("--async-tp")
    assert "outside the caching allocator" not in text()

