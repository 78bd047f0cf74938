"""torch.compile under torchtitan's tensor parallelism, without and with async TP (issue 44;
torchtitan's Table 4, Llama 3.1 70B on FSDP 32 × TP 8, "2D" 71.9 GiB and "2D + AsyncTP"
67.6 GiB max_memory_reserved). The two runs differ in one setting: apply_tp's
enable_async_tp (torchtitan/parallelisms/parallelize_llama.py at 9dec370) sets
torch._inductor.config._micro_pipeline_tp and enables symmetric memory on the TP group;
both compile each checkpointed block (apply_ac, then apply_compile). Each way a compiled
block can hold bytes the eager rules do not, read from its source or measured on the CPU,
with the bytes it holds per rank and whether they are live at the plan's peak moment (the
loss's backward: no block runs then) and inside torch.cuda.max_memory_reserved (the
caching allocator's segments, what torchtitan reports):

  * what the compiled block saves: under full checkpointing its input only. Measured
    (tests/titan_compile_measure.py: a torchtitan TP block on its local tensors with
    torch's functional collectives, compiled inside a non-reentrant checkpoint with
    AOTAutograd's min-cut partitioner on the fake process group; DTensor's own block does
    not compile inside a checkpoint there, and without one saves what this block saves):
    the forward saves the input (and the generator's state: the recomputed attention's
    RNG, functionalized), the backward graph gathers the inputs again.
    torch/_functorch/partitioners.py force_save_collectives (torch 2.13) forces a
    collective's output to be saved only outside an activation-checkpoint region
    (`not must_recompute(node)`). micro_pipeline_tp runs after the partition, on the
    forward and backward graphs apart (torch/_inductor/fx_passes/post_grad.py), so async
    TP saves the same;
  * a sublayer's gathered input (float8 TP: fp8, cast before the all-gather) and a
    row-parallel linear's partial output before its reduce-scatter: transients of a
    block's forward and recomputation; async TP's fused kernels allocate the same bytes
    (torch/distributed/_symmetric_memory/__init__.py: _fused_all_gather_matmul_impl's
    gathered A_flat, _fused_matmul_reduce_scatter_impl's stacked_partials);
  * torchao's float8 casts of the block's weights (Float8Linear: the weight cast to e4m3
    for the forward's mm and again, transposed, for the backward's): transients of a
    linear;
  * async TP's symmetric-memory workspace (stack_memory.async_tp_workspace): allocated by
    _SymmetricMemory.empty_strided_p2p (get_symm_mem_workspace), not by the caching
    allocator, so outside max_memory_reserved;
  * inductor's compute/communication reordering (torch/_inductor/config.py
    reorder_for_compute_comm_overlap, default False; torchtitan 9dec370 sets only
    _micro_pipeline_tp): none in either run;
  * NCCL's recordStream on the collectives' tensors (their blocks' reuse delayed until the
    NCCL stream is done): torchtitan's init_distributed (torchtitan/utils.py, read at 0011fb9)
    sets TORCH_NCCL_AVOID_RECORD_STREAMS=1 "to mitigate the memory issue that collectives
    using async_op=True hold memory longer than they should such as those in tensor
    parallelism", read by each process group made after it (the device mesh's TP group):
    none in either run (not a row of the table).

None is live inside the reserved figure at the loss's backward: the rows' gaps (the
measured figure less the plan's reserved) are not explained here. Nor by the caching
allocator's history of the forward: the 80 blocks' transients, replayed in their ops'
order on the allocator's rules at Table 4's shape (tests/test_titan_tp.py
test_forward_history_leaves_little_reserved_at_table_4s_loss), leave 0.25 GiB of unusable
reserve at the loss's backward beyond the freed logits' block with expandable segments,
2.4 GiB without. The cause is not found: not planned. A later measurement of the same
model (torchtitan issue #1185, 2025-05-20, data of 2025-03-25: Llama 3 70B, 128 H100s,
full AC, FSDP 16 × TP 8, bf16) put vanilla and async TP 0.43 GiB apart (71.51 and 71.08
GiB: torchtitan's log line of max_memory_reserved, written "GB" in the comment), so the
4.3 GiB between Table 4's rows is not taken as a rule of async TP (published_runs.py types
those runs; docs/parallel.md, Published runs).
"""
from __future__ import annotations

from dataclasses import dataclass

PEAK = "the loss's backward"  # the plan's peak moment at Table 4's rows (no block runs)


@dataclass(frozen=True)
class Candidate:
    """One way a compiled TP block holds bytes the eager rules do not."""
    name: str
    bytes: int  # per rank, one block (both sublayers where each has one)
    at_peak: bool  # live at the loss's backward
    in_reserved: bool  # inside torch.cuda.max_memory_reserved (the caching allocator)
    async_tp: str  # what async TP changes
    source: str


def candidates(config, micro_batch: int, seq: int, tp: int, fp8_gather: bool,
               async_tp: bool) -> list[Candidate]:
    """The candidates at a torchtitan TP plan's shape (rank 0 of tp, sequence parallel)."""
    c, b = config, micro_batch
    h, d = c.d_model, c.d_k
    rows, shard = b * seq, b * -(-seq // tp)
    g = 1 if fp8_gather else 2
    heads, kv, ff = -(-c.num_heads // tp), -(-c.num_kv_heads // tp), -(-c.d_ff // tp)
    weights = h * (heads + 2 * kv) * d + heads * d * h + 3 * h * ff  # the rank's block weights
    out = [
        Candidate("saved by the compiled block beyond its input (full checkpointing)", 0,
                  True, True, "none (micro_pipeline_tp rewrites the partitioned graphs)",
                  "measured: tests/titan_compile_measure.py; partitioners.py "
                  "force_save_collectives spares checkpointed collectives"),
        Candidate(f"the two sublayers' gathered inputs ({'fp8' if fp8_gather else 'bf16'})",
                  2 * rows * h * g, False, True,
                  "the same bytes (_fused_all_gather_matmul_impl's A_flat)",
                  "apply_tp's PrepareModuleInput (Shard(1) -> Replicate())"),
        Candidate("the two row-parallel partial outputs before their reduce-scatters (bf16)",
                  2 * rows * h * 2, False, True,
                  "the same bytes (_fused_matmul_reduce_scatter_impl's stacked_partials)",
                  "apply_tp's RowwiseParallel(output_layouts=Shard(1))"),
    ]
    if fp8_gather:
        out.append(Candidate("float8 casts of the block's weights and their transposes",
                             2 * weights, False, True, "none",
                             "torchao float8_linear.py (e4m3 weight, cast per mm)"))
    if async_tp:
        out.append(Candidate("async TP's symmetric-memory workspace",
                             max(shard * h * g, 2 * shard * h * 2), True, False,
                             "async TP's own",
                             "_symmetric_memory get_symm_mem_workspace: "
                             "_SymmetricMemory.empty_strided_p2p"))
    out.append(Candidate("inductor's compute/communication reordering", 0, False, True,
                         "none", "_inductor/config.py reorder_for_compute_comm_overlap = False"))
    return out


def transients(cands: list[Candidate]) -> int:
    """The bytes of the candidates live only while a block runs (not at the loss's backward),
    all at once: an upper bound of what they add to a block's backward moment."""
    return sum(x.bytes for x in cands if not x.at_peak)


def explained(cands: list[Candidate]) -> int:
    """The bytes the candidates add inside the reserved figure at the peak moment."""
    return sum(x.bytes for x in cands if x.at_peak and x.in_reserved)
