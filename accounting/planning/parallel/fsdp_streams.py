"""FSDP2's side streams and what they keep reserved (issue 44): the reserved peak of a GPU
that runs FSDP2 (the torch stack's --zero 2|3 and torchtitan's) holds, beside the default
stream's segments, the segments of the two streams FSDP2 allocates on. Read from torch
2.13's torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py and _fsdp_param_group.py
(the same two allocations, in the same streams, in FSDP2's first version,
torch/distributed/_composable/fsdp/_fsdp_collectives.py at pytorch 01d66d2, 2024: before
and after torchtitan's 2024-12 benchmark tables, run on torch 1963fc8, not read itself)
and measured on the CPU (tests/test_fsdp_streams.py: FSDP2 on the fake process group,
which stream each of its buffers is allocated in):

  * GRADIENTS, the reduce-scatter stream's pool. foreach_reduce allocates each unit's
    reduce-scatter output in the reduce-scatter stream (`with device_handle.stream(
    reduce_scatter_stream): reduce_output = reduce_scatter_comm.allocate(...)`, one flat
    buffer of the unit's padded shard in reduce_dtype) and the sharded gradients are views
    of it (`torch.as_strided(reduce_output, ...)`; "The RS output is allocated in the RS
    stream and used in the default stream (for optimizer)"). optimizer.zero_grad(
    set_to_none=True) frees them as the next step starts; the caching allocator keeps
    their segments and never serves another stream's request from them
    (c10/cuda/CUDACachingAllocator.cpp get_free_block: `(*it)->stream != p.stream()`;
    with expandable_segments, one segment per stream and pool). So at a moment that holds
    no sharded gradient (one micro-batch per step; or pipelining's no-sync, where FSDP2
    accumulates unsharded gradients on the default stream until the last micro-batch:
    buffers.py) those segments stay reserved beside the moment's tensors, and serve none
    of them (not the default stream's activations, as a gradient autograd made would:
    reserved.py HISTORY).
  * GATHERS, the all-gather copy-in stream's pool. foreach_all_gather allocates each
    unit's flat all-gather output in the copy-in stream (`with device_handle.stream(
    all_gather_copy_in_stream): ... all_gather_output = all_gather_comm.allocate((
    all_gather_input_numel * world_size,), ...)`), in the gathered dtype (bf16 under
    MixedPrecisionPolicy(param_dtype=bf16); the fp8 weights one byte an element and the
    whole buffer uint8 when dtypes mix); foreach_all_gather_copy_out copies it into the
    unit's own unsharded parameters on the default stream. In the forward pass FSDP2
    keeps that output until the next unit has all-gathered ("[Note: Overlapping
    all-gather copy-in and all-gather]": wait_for_unshard saves it in
    comm_ctx.all_gather_state and the next unit frees it after its own unshard): two
    consecutive units' outputs are live at once, in forward order (the root unit, then
    the blocks). Their segments stay reserved after the forward pass: at least the
    largest such pair's segments (get_allocation_size: each ≥ 10 MiB request its own
    segment, rounded to 2 MiB), beside every later moment.

Both are lower bounds, as the rest of planning/allocator.py's model. Not modelled: the
reduce-scatter's fp32 input (allocated on the default stream, at the end of the last
micro-batch's backward pass, when the step holds no activation), and torchao's fp8 weight
copies in the forward pass of a float8 all-gather (on the copy-in stream too: one unit's
shard, a 1/d of its gather).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.planning import allocator as AL
from accounting.units import DTYPE_BYTES, BF16

GRADIENTS = ("FSDP2's reduce-scatter stream: the previous step's sharded gradients, each "
             "unit's reduce_output (_fsdp_collectives.py foreach_reduce), freed by zero_grad, "
             "reserved for that stream")
GATHERS = ("FSDP2's all-gather copy-in stream: two consecutive units' flat all-gather "
           "outputs live in the forward pass (_fsdp_param_group.py wait_for_unshard, "
           "all_gather_state), reserved for that stream")


@dataclass(frozen=True)
class SidePools:
    """The segments FSDP2's two side streams keep reserved on one GPU (bytes each)."""
    gradients: tuple[int, ...]  # the reduce-scatter stream's: the units' reduce outputs
    gathers: tuple[int, ...]  # the copy-in stream's: the largest consecutive pair's outputs

    def beside(self, sharded_grads_live: bool) -> int:
        """Bytes reserved beside the default stream's segments at a moment: the gathers'
        always; the gradients' where the moment holds no sharded gradient (where it does,
        they are those tensors, already in the allocated peak)."""
        return sum(self.gathers) + (0 if sharded_grads_live else sum(self.gradients))


def side_pools(layout, st, items, stack, precision, f8: frozenset[str] = frozenset(),
               trained: bool = True) -> SidePools | None:
    """FSDP2's side pools on a GPU with these states (`st`, its units) and items, or None
    where FSDP2 does not run (no sharding, one data-parallel rank, another engine) or
    trains a LoRA plan's adapters (`trained` False: its frozen base reduces nothing).
    `f8`: the weights all-gathered in fp8 (Precision.fsdp_fp8_gather)."""
    fsdp2 = stack.stack.fsdp2_bf16 or stack.stack.torch_engines
    if not (fsdp2 and trained and layout.sharding >= 2 and layout.dp > 1):
        return None
    # each unit's reduce output: its padded shard (States.grads elements in all) in the
    # gradients' bytes per element (reduce_dtype: fp32 under both stacks' policies)
    grads = [i for i in items if i.on_gpu and i.model_state and i.name.startswith("gradients")]
    per = Fraction(sum(i.bytes.c for i in grads), st.grads) if grads and st.grads else 0
    # (the trained tensors' only: a frozen one reduces nothing, states.py FROZEN)
    outputs = [int(u.unsharded_grads(u.group(layout)) // u.group(layout) * per)
               for u in st.units] if per else []
    # each unit's flat all-gather output, in forward order (the root's pre-forward first)
    width = DTYPE_BYTES[BF16] if stack.stack.fsdp2_bf16 else precision.master_bytes
    order = [u for u in st.units if u.root] + [u for u in st.units if not u.root]
    flats = []
    for u in order:
        d = u.group(layout)
        e8 = u.gathered_of(d, f8)[0] if f8 else 0
        flats.append((u.unsharded_padded(d) - e8) * width + e8)
    pair = max(((a, b) for a, b in zip(flats, flats[1:])),
               key=lambda ab: AL.allocation_size(AL.round_size(ab[0]))
               + AL.allocation_size(AL.round_size(ab[1])), default=None)
    gathers = tuple(AL.segments([(n, 1) for n in pair])) if pair else \
        tuple(AL.segments([(n, 1) for n in flats[:1]]))
    return SidePools(tuple(AL.segments([(n, 1) for n in outputs])), gathers)
