"""The reserved peak beside the allocated one (issue 44): the tensors live at the moment the
step peaks, as the plans know them, packed by the caching allocator's rules (allocator.py);
reserved = the allocated peak + what the allocator reserves beyond those tensors' bytes.
One GPU: MemoryModel's moments (planning/memory.py); many GPUs: a stage's moments
(parallel/peak.py). Tensors the plan holds only as a sum (a moment's remainder) count as
one block.

Two parts of the step's history, on one GPU and on a layout's stage (allocator.py `cached`,
streams), from the second step on:

  * HISTORY: the previous step's gradients. zero_grad(set_to_none=True) frees them as the
    step starts; their segments stay reserved and serve (best fit) only what the step
    allocates after: autocast's weight copies and the activations of the forward pass, the
    loss's gradients; the states and the cuBLAS workspaces predate them. At a moment that
    holds few activations (--offload activations, full recomputation) they sit idle.
    Not under FSDP2, whose sharded gradients are allocated in its reduce-scatter stream:
    there they are that stream's pool, reserved beside (parallel/fsdp_streams.py).
  * OFFLOAD_STREAM: --offload activations, as torchtune 0.6.1's OffloadActivations runs on
    CUDA (use_streams=True; torchtune/training/_activation_offloading.py
    unpack_tensor_with_streams): each tensor brought back for the backward pass is
    allocated on its second stream (`with torch.cuda.stream(self.s1): gpu_tensor =
    maybe_gpu_tensor.to("cuda", non_blocking=True)`) and freed there (a block's tensors
    deleted after s1.wait_event; record_stream(s0) only where a view outlives the node).
    The caching allocator never serves a request from another stream's free block
    (CUDACachingAllocator.cpp get_free_block: `(*it)->stream != p.stream()`), so those
    copies hold segments of their own: one block's offloaded tensors (the plan's in-flight
    bound) packed apart, reserved beside the compute stream's segments from the first
    backward pass on. The copies to the CPU go to pinned host memory (torch.empty_like(...,
    pin_memory=True), CUDA's host allocator): nothing reserved on the device.

  * FIRST_STEP: under --offload activations the first step's order of allocation decides
    the reserve: its loss's B·T·V tensors cut segments that the first backward's gradients
    and AdamW's lazily made state then fill (the offloaded activations cut no other free
    blocks), so every later step's loss cuts them again. The moment packing above cannot
    see it: the reserved figure is the larger of that packing and two steps replayed
    through the allocator (reserved_steps.py), where those rules hold."""
from __future__ import annotations

from accounting.planning import activation_offload as AO
from accounting.planning import allocator as AL
from accounting.planning import compile_memory as CM
from accounting.planning import cuda_peak as CP
from accounting.planning import loss_memory as LM
from accounting.planning import reserved_steps as RSQ


def _state_groups(model, v, terms) -> list[tuple[int, int]]:
    """Each state term spread over the parameter tensors (one tensor per parameter each)."""
    numels = [t.numel for t in model.tensors for _ in range(t.copies)]
    out: list[tuple[int, int]] = []
    for t in terms:
        out += AL.split_over(t.bytes.evaluate(v), numels)
    return out


def one_gpu(model, batch: int, seq: int, expandable: bool = False,
            capacity: int | None = None) -> tuple[int, str]:
    """(reserved bytes, the moment) at the one-GPU step's peak (model scope). `capacity`:
    the GPU's memory, where known: the history's free segments are released before a
    cudaMalloc would fail (CUDACachingAllocator.cpp malloc: release_cached_blocks, then
    retry), so they never take the figure past it (nor below the moment's own packing)."""
    v = model.values(seq, batch)
    phases = model.peak_terms
    peak = max(phases, key=lambda ph: ph.bytes.evaluate(v))
    allocated = peak.bytes.evaluate(v)
    backward = peak.activations
    states = [t for t in model.state_terms if t.on_gpu and (
        not t.name.startswith("gradients") if backward else not t.name.startswith("bf16 copies"))]
    # what the allocator held before the step's first allocation: the states (the weights'
    # bf16 copies aside: autocast makes them in the forward pass) and the cuBLAS workspaces
    groups = _state_groups(model, v, [t for t in states if not t.name.startswith("bf16 copies")])
    if model.device == CP.CUDA:
        groups.append((CP.cublas_workspace_bytes(model.arch), CP.CUBLAS_WORKSPACES))
    fresh = len(groups)
    groups += _state_groups(model, v, [t for t in states if t.name.startswith("bf16 copies")])
    cached, stream = [], 0
    if backward:
        # a loss recipe's or the offloading's own tensors count in the remainder below
        region = model.loss_region
        moved = set(AO.offloaded_names(model.ledger.activations, v)) \
            if model.offload_activations else set()
        for r in model.ledger.activations:
            if r.saved and r.name not in region.replaced and r.name not in moved:
                groups.append((r.elements.evaluate(v) * r.bytes_per_element,
                               v[r.repeat] if r.repeat else 1))
        lsm = next((r for r in model.ledger.activations
                    if r.name == "log-softmax of the logits"), None)
        if region.cuda_loss:  # the standard loss: its two B·T·V gradients
            groups.append((lsm.elements.evaluate(v) * lsm.bytes_per_element, 2))
        elif lsm is None:  # a fused cross-entropy kernel's one gradient of the logits
            logits = next(r for r in model.ledger.activations if r.name == LM.LOGITS)
            groups.append((logits.elements.evaluate(v) * logits.bytes_per_element, 1))
        # the previous step's gradients, freed by zero_grad(set_to_none=True) as this step
        # starts: their segments stay reserved (the allocator releases none without
        # empty_cache) and serve only what this step allocates after (HISTORY)
        # (none with the optimizer stepped in the backward pass: each gradient is freed
        # as its tensor is stepped, no set of them is ever held)
        cached = [] if model.optimizer_in_backward else AL.segments(_state_groups(model, v, [
            t for t in model.state_terms if t.on_gpu and t.name.startswith("gradients")]))
        if model.offload_activations and model.device == CP.CUDA:  # OFFLOAD_STREAM
            stream = AL.reserved(AO.flight_groups(
                model.ledger.activations, v,
                CM.removed_shares(model.ledger.activations, model.precision.autocast)
                if model.compile else None), expandable)
    rest = allocated - sum(n * c for n, c in groups)
    if rest > 0:
        groups.append((rest, 1))
    total = allocated + max(0, AL.slack(groups, expandable, cached, fresh)) + stream
    if model.offload_activations and not expandable:  # FIRST_STEP: two steps replayed
        steps = RSQ.two_steps(model, batch, seq)
        total = max(total, steps[0]) if steps is not None else total
    if capacity is not None and total > capacity:
        total = max(capacity, allocated + max(0, AL.slack(groups, expandable)))
    return total, peak.name


def stage(s, b: int, per_layer, in_flight_layers: int, arch: str | None,
          expandable: bool = False, capacity: int | None = None,
          offload_stream=(), pools=None) -> int:
    """The reserved peak of one GPU of a layout (a StagePlan `s` at micro-batch b):
    `per_layer` (name, bytes) of what one block saves, `in_flight_layers` the blocks'
    copies live (layers × micro-batches in flight). HISTORY as on one GPU: at a moment of
    the passes that holds no gradient (one micro-batch per step; no persistent gradient
    buffer), the previous step's gradient segments stay reserved and serve only what the
    step allocates after them (not the model states); `capacity` as one_gpu's.
    `offload_stream`: under --offload activations, one block's (name, bytes) saved
    tensors: those of at least MIN_OFFLOAD_SIZE come back on the offload stream, in a pool
    of their own (OFFLOAD_STREAM). `pools`: FSDP2's side streams' segments
    (parallel/fsdp_streams.py SidePools), reserved beside the default stream's; its sharded
    gradients live in the reduce-scatter stream's, so they are not HISTORY here."""
    allocated, moment = s.peak_moment(b)
    # device memory the caching allocator does not hand out (Item.outside_allocator: async
    # TP's symmetric-memory workspace) is in the allocated peak and the verdict, never in
    # its segments: the reserved figure is what torch.cuda.max_memory_reserved shows
    outside = s.outside_allocator(b, moment)
    allocated -= outside
    if capacity is not None:
        capacity -= outside
    if moment is None:
        return allocated
    numels = [t.numel for u in s.states.units for t in u.tensors]
    states: list[tuple[int, int]] = []
    groups: list[tuple[int, int]] = []
    grads: list[tuple[int, int]] = []
    for i in s.items:
        if i.activations or not i.on_gpu or getattr(i, "outside_allocator", False):
            continue
        if not moment.holds(i):
            if moment.activations and i.model_state and i.name.startswith("gradients"):
                grads += AL.split_over(i.bytes.at(b), numels)
            continue
        if i.model_state:
            if pools is not None and i.name.startswith("gradients"):
                continue  # FSDP2's: in the reduce-scatter stream's pool (fsdp_streams.py)
            states += AL.split_over(i.bytes.at(b), numels)
        else:  # (at the forward's end and the loss's backward, no resharded block gathered)
            groups.append((i.bytes.at(b) - (getattr(i, "resharded_after_forward", 0)
                                            if getattr(moment, "after_forward", False) else 0), 1))
    states.append((CP.cublas_workspace_bytes(arch), CP.CUBLAS_WORKSPACES))
    if moment.activations:
        groups += [(x, in_flight_layers) for _, x in per_layer]
    groups = states + groups
    rest = allocated - sum(n * c for n, c in groups)
    if rest > 0:
        groups.append((rest, 1))
    if pools is not None:  # the gradients' segments belong to FSDP2's reduce-scatter stream
        grads = []
    total = allocated + max(0, AL.slack(groups, expandable, AL.segments(grads), len(states)))
    if pools is not None:
        total += pools.beside(moment.gradients and not s.accumulating(moment))
    # a block the step's history leaves reserved and this moment cannot use (peak.Moment
    # .history: torchtitan's freed bf16 logits at the loss's backward, parallel/titan_tp.py)
    total += moment.history.at(b)
    if moment.activations:
        total += AL.reserved([(x, 1) for _, x in offload_stream if x >= AO.MIN_OFFLOAD_SIZE],
                             expandable)
    if capacity is not None and total > capacity:
        total = max(capacity, allocated + max(0, AL.slack(groups, expandable)))
    return total
