"""Memory the engines allocate beyond parameters, gradients, AdamW state and activations:
DDP's gradient buckets, FSDP2's gathered units and unsharded gradients, DTensor's whole
embedding gradient under tensor parallelism, torch pipelining's receive buffers, and the
RoPE tables every block holds. Formula only: the torch.distributed checks compare the
persistent states, not allocations.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from accounting.planning.memory import Precision
from accounting.planning.fp8 import weight_names as fp8_names
from accounting.planning.parallel.activations import Linear
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.shards import FIRST, Split
from accounting.planning.parallel.states import States
from accounting.ledger.symbols import product


@dataclass(frozen=True)
class Item:
    name: str
    formula: str
    bytes: Linear  # a·b + c in the micro-batch size b
    on_gpu: bool = True
    note: str = ""
    activations: bool = False  # the in-flight activations (their count depends on m)
    model_state: bool = False  # parameters, gradients, master copy, optimizer moments
    per_element: int = 0  # a model state's bytes per element (12: master, m and v together)
    backward_only: bool = False  # allocated in the passes only, freed before the optimizer step
    # a gradient buffer of this backward pass, first allocated by the head's backward or later
    # (the root unit's unsharded gradients, a block's, DTensor's whole embedding gradient):
    # not yet live at the loss's backward nor at the forward's end (peak.Moment.pass_grads)
    pass_grads: bool = False
    # a gradient accumulated over the micro-batches (FSDP2 under pipelining's no-sync): it
    # exists from the first micro-batch's backward pass on (peak.py's moments)
    accumulated: bool = False
    # live only at the embedding's backward and FSDP2's post-backward of the root unit that
    # follows it (the last nodes of stage 0's backward pass): peak.Moment.embedding
    embedding: bool = False
    # an accumulated item's bytes (its constant) per local model chunk of an interleaved
    # rank, in the rank's chunk order (chunk_accumulated): the one-round interleaved
    # schedule reduces each chunk's accumulation after that chunk's last backward
    # (peak.Moment.chunk)
    per_chunk: tuple[int, ...] = ()
    # device memory the caching allocator does not hand out (async TP's symmetric-memory
    # workspace: CUDASymmetricMemoryAllocator's cuMemCreate): counted in the allocated peak
    # and the fit verdict, never in the reserved figure (torch.cuda.max_memory_reserved's
    # segments; planning/reserved.py stage)
    outside_allocator: bool = False
    # of `bytes`, FSDP2's gathered blocks that are resharded after their forward (ZeRO-3
    # without pipelining: torch's fully_shard per block, torchtune's shard_model, torchtitan's
    # apply_fsdp at 31a17bf, reshard_after_forward on every block): none is gathered at the
    # forward's end nor at the loss's backward, before the last block's pre-backward
    # all-gathers it (measured on the fake backend: tests/test_fsdp_loss_moment.py)
    resharded_after_forward: int = 0


def stage_buffers(sp: Split, values: dict[str, int], kinds: tuple[tuple[str, int], ...]) -> int:
    """Bytes of the buffers of a stage's blocks (each block builds its own RoPE tables;
    DeepSeek-V3's MoE blocks hold their router's correction bias), `kinds` the stage's
    blocks of each kind (Split.kinds)."""
    count = dict(kinds)
    return sum(count.get(b.repeat, 0) * b.bytes_per_element * product(b.shape, values)
               for b in sp.ledger.buffers if b.per_layer)


def engine_buffers(sp: Split, layout: Layout, p: Precision, st: States, stage: int,
                   values: dict[str, int], seq: int, tp_rank: int = 0,
                   bf16_gathers: bool = False, keep_unsharded: bool = False) -> list[Item]:
    """What the engines allocate besides the model states and activations (formula only).
    `bf16_gathers`: FSDP2 under MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
    (torchtitan): it gathers bf16 units, and each unit's unsharded bf16 gradients are cast
    to fp32 for the reduce-scatter (both held then). `keep_unsharded`: under pipeline
    parallelism the stage's units stay gathered from forward to backward (Stack.
    pp_keeps_unsharded: torchtitan's reshard_after_forward policy).

    Under pipeline parallelism FSDP2 accumulates every unit's gradient unsharded across the
    micro-batches and reduce-scatters once, after the last one: torch's PipelineStage
    (torch/distributed/pipelining/stage.py _PipelineStageBase.backward_maybe_with_nosync)
    calls set_requires_gradient_sync(False) and set_reshard_after_backward(False) on an
    FSDPModule for every backward but the last; FSDP2 keeps the accumulated gradient in its
    reduce_dtype (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
    to_accumulated_grad_if_needed)."""
    out = []
    z, d = layout.sharding, layout.dp
    # the weights gathered in fp8, one byte an element (Precision.fsdp_fp8_gather: torchao)
    f8 = fp8_names(sp.ledger) if p.fsdp_fp8_gather else frozenset()
    chunks = chunk_layers(sp, layout, stage)
    if d > 1 and z >= 2 and bf16_gathers:
        out += _fsdp_bf16(layout, st, f8, keep_unsharded, chunks, stage)
    elif d > 1 and z <= 1:
        out.append(Item("DDP grad buckets", f"{p.grad_bytes}·N_stage",
                        Linear(0, st.stage_numel * p.grad_bytes),
                        note="a flat copy of the gradients (gradient_as_bucket_view=False, "
                             "the default)"))
    elif d > 1 and z >= 2:
        gathered = p.master_bytes  # no MixedPrecisionPolicy: autocast makes the bf16 copies
        blocks, root = _fsdp_units(layout, st, grads=True)
        bb, rb = _fsdp_units(layout, st, gathered, f8)  # in bytes (fp8 weights: 1 each)
        held = sum(bb) if z == 2 else sum(sorted(bb)[-2:])
        out.append(Item("FSDP2 gathered fp32 units" + (" (every unit, forward to backward)"
                                                       if z == 2 else " (root + 2 blocks)"),
                        f"{gathered}·d·Σ⌈rows/d⌉·cols" + (" (fp8 weights: 1)" if f8 else ""),
                        Linear(0, rb + held), backward_only=True,
                        note="the root unit stays gathered through each pass; at stage 3 one "
                             "block is gathered while the next is prefetched",
                        resharded_after_forward=held if z == 3 and layout.pp == 1 else 0))
        if layout.pp > 1:  # accumulated unsharded over the micro-batches (stage.py)
            out.append(Item("FSDP2 unsharded grads accumulated over the micro-batches "
                            "(every unit: pipelining's set_requires_gradient_sync(False))",
                            f"{p.grad_bytes}·d·Σ⌈rows/d⌉·cols",
                            Linear(0, (root + sum(blocks)) * p.grad_bytes), backward_only=True,
                            accumulated=True, per_chunk=chunk_accumulated(
                                layout, st, stage, chunks, p.grad_bytes)))
        else:
            out.append(Item("FSDP2 unsharded grads before reduce-scatter (root + 1 block)",
                            f"{p.grad_bytes}·d·Σ⌈rows/d⌉·cols",
                            Linear(0, (root + max(blocks, default=0)) * p.grad_bytes),
                            backward_only=True, pass_grads=True))
    table = next((t for t in sp.tensors if t.place == FIRST and t.dims[0] == ("V",)), None)
    # a frozen table (a LoRA plan's base) has no gradient to compute
    if layout.tp > 1 and stage == 0 and table is not None and not table.frozen:
        whole = prod(table.sizes(values, 1))
        local = prod(table.sizes(values, layout.tp, tp_rank))
        if d > 1 and z >= 2:
            out += _fsdp_embedding(layout, p, whole, local, seq * sp.config.d_model,
                                   bf16_gathers)
        else:
            out.append(Item("embedding grad computed whole (torch DTensor)",
                            f"{p.grad_bytes}·(V − ⌈V/tp⌉)·d_model",
                            Linear(0, (whole - local) * p.grad_bytes),
                            backward_only=True, pass_grads=True,
                            note="aten.embedding_dense_backward has no vocabulary-sharded "
                                 "strategy in torch 2.13: each TP rank computes the "
                                 "V×d_model gradient, then keeps its rows"))
    if layout.pp > 1:
        size = p.message_bytes  # plan.activation_bytes
        x = layout.micro_batch * seq // (layout.tp if layout.sp else 1) * sp.config.d_model * size
        k = (stage > 0) + (stage < layout.pp - 1)
        out.append(Item("pipelining receive buffers", f"{k}·m·b·T·d_model·{size}",
                        Linear(0, k * layout.micro_batches * x),
                        note="torch PipelineStage allocates one per micro-batch for activations "
                             "(not on the first stage) and gradients (not on the last)"))
    return out


def _fsdp_units(layout: Layout, st: States, width: int = 1,
                f8: frozenset[str] = frozenset(), grads: bool = False) -> tuple[list[int], int]:
    """Elements FSDP2 gathers per block (a block with its routed experts' unit) and for the
    root; or their bytes at `width` bytes an element, the weights named in f8 at one.
    `grads`: the elements of their unsharded gradients instead (the trained tensors': a
    frozen one has none, states.py FROZEN)."""
    def size(u, n: int) -> int:
        if grads:
            return u.unsharded_grads(n)
        e8 = u.gathered_of(n, f8)[0] if f8 else 0
        return (u.unsharded_padded(n) - e8) * width + e8
    per_layer: dict[int, int] = {}
    for u in st.units:
        if not u.root:
            per_layer[u.layer] = per_layer.get(u.layer, 0) + size(u, u.group(layout))
    root = sum(size(u, layout.dp) for u in st.units if u.root)
    return list(per_layer.values()), root


def chunk_layers(sp: Split, layout: Layout, stage: int) -> tuple[tuple[int, ...], ...]:
    """The blocks of each local model chunk of this rank, in the rank's chunk order (chunk
    stage + j·pp of the layer split is its j-th; one chunk without virtual stages)."""
    from accounting.planning.parallel.layout import layer_split
    sizes = layer_split(sp.config, layout)
    starts = [sum(sizes[:c]) for c in range(len(sizes))]
    return tuple(tuple(range(starts[c], starts[c] + sizes[c]))
                 for c in range(stage, len(sizes), layout.pp))


def chunk_accumulated(layout: Layout, st: States, stage: int,
                      chunks: tuple[tuple[int, ...], ...], width: int) -> tuple[int, ...]:
    """FSDP2's unsharded gradient accumulation per local chunk, in bytes at `width` an
    element (Item.per_chunk; () without virtual stages). Each chunk is its own FSDP2 module
    (torchtitan's pipeline_llama applies fully_shard to every model part); the root unit
    (the embedding, the final norm and the head) is on the first virtual stage (the rank's
    chunk 0 on stage 0) and the last (the rank's last chunk on the last stage)."""
    if layout.vpp == 1:
        return ()
    out = [0] * len(chunks)
    where = {layer: j for j, c in enumerate(chunks) for layer in c}
    for u in st.units:
        if u.root:
            j = 0 if stage == 0 else len(chunks) - 1
            out[j] += u.unsharded_grads(layout.dp) * width
        else:
            out[where.get(u.layer, len(chunks) - 1)] += u.unsharded_grads(u.group(layout)) * width
    return tuple(out)


def _fsdp_bf16(layout: Layout, st: States, f8: frozenset[str] = frozenset(),
               keep_unsharded: bool = False, chunks: tuple[tuple[int, ...], ...] = (),
               stage: int = 0) -> list[Item]:
    blocks, root = _fsdp_units(layout, st, grads=True)
    bb, rb = _fsdp_units(layout, st, 2, f8)
    every = layout.sharding == 2 or (keep_unsharded and layout.pp > 1)
    held = sum(bb) if every else sum(sorted(bb)[-2:])
    one = root + max(blocks, default=0)
    gathered = Item("FSDP2 all-gathered bf16 units" + (" (every unit, forward to backward)"
                                                       if every else " (root + 2 blocks)"),
                    "2·d·Σ⌈rows/d⌉·cols" + (" (fp8 weights: 1)" if f8 else ""),
                    Linear(0, rb + held), backward_only=True,
                    resharded_after_forward=0 if every or layout.pp > 1 else held,
                    note="MixedPrecisionPolicy(param_dtype=bf16): the gathered copies are bf16"
                         + ("; kept gathered under PP (reshard_after_forward policy)"
                            if every and layout.sharding == 3 else ""))
    if layout.pp > 1:  # fp32 accumulated over the micro-batches, one block's bf16 in flight
        return [gathered,
                Item("FSDP2 unsharded fp32 grads accumulated over the micro-batches (every "
                     "unit)", "4·d·Σ⌈rows/d⌉·cols", Linear(0, 4 * (root + sum(blocks))),
                     backward_only=True, accumulated=True,
                     per_chunk=chunk_accumulated(layout, st, stage, chunks, 4),
                     note="pipelining's set_requires_gradient_sync(False) until the last "
                          "micro-batch; FSDP2 accumulates in reduce_dtype=fp32 (measured: "
                          "tests/test_pipeline_live.py)"),
                Item("FSDP2 one block's unsharded bf16 grads (before their fp32 "
                     "accumulation)", "2·(one block)", Linear(0, 2 * one), backward_only=True,
                      pass_grads=True)]
    # at a block's backward: the root unit's bf16 gradients (the LM head's, made first), this
    # block's, and the previous block's fp32 copy in its reduce-scatter; the root's own fp32
    # copy is made at the backward's end (FSDP2 reduce-scatters the root unit last), when no
    # activation is live: not a peak moment, so not counted here
    rs = 4 * max(blocks, default=0)
    return [gathered,
            Item("FSDP2 unsharded bf16 grads (root + 1 block) and one block's fp32 copy for "
                 "the reduce-scatter", "2·d·Σ⌈rows/d⌉·cols + 4·(one block)",
                 Linear(0, 2 * one + rs), backward_only=True, pass_grads=True,
                 note="reduce_dtype=fp32: each unit's bf16 gradient is cast before its "
                      "reduce-scatter")]


def _fsdp_embedding(layout: Layout, p: Precision, whole: int, local: int, tokens_d: int,
                    bf16_gathers: bool) -> list[Item]:
    """The vocab-parallel embedding's gradient under FSDP2 × TP (torchtitan's tok_embeddings
    under RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))), read from
    torch 2.13 (cf30153) and measured on the fake backend (tests/embedding_grad_measure.py):

      * aten.embedding_dense_backward has no vocabulary-sharded strategy
        (torch/distributed/tensor/_ops/_embedding_ops.py): DTensor all-gathers the
        sequence-sharded gradient of the output (b·T·d_model, the output's dtype) and
        computes the whole V×d_model gradient in the unsharded parameter's dtype (bf16
        under MixedPrecisionPolicy(param_dtype=bf16)), a Replicate DTensor that autograd
        stores as the unsharded parameter's .grad;
      * FSDP2 redistributes it to the parameter's Shard(0) only when it reads it for the
        reduce-scatter (_fsdp_param.py FSDPParam._get_grad_inner_tensor, from
        FSDPParamGroup.post_backward): without pipelining the whole bf16 gradient lives from
        the embedding's backward to the root unit's post-backward, the last nodes of the
        backward pass, when no block's recomputed activations are live;
      * under pipelining's no-sync (set_requires_gradient_sync(False) for every micro-batch
        but the last) FSDPParam.to_accumulated_grad_if_needed casts the whole .grad to
        reduce_dtype (`unsharded_grad.to(self.reduce_dtype)` on the Replicate DTensor):
        the accumulated fp32 gradient is V×d_model, not V/tp rows, from the first
        micro-batch's backward until the last one's reduce-scatter."""
    g = 2 if bf16_gathers else p.grad_bytes  # embedding_dense_backward: grad_output's dtype
    acc = 4 if bf16_gathers else g  # reduce_dtype=fp32 under torchtitan's policy
    out = [Item("embedding grad computed whole (torch DTensor), at the embedding's backward",
                f"{g}·V·d_model" + (f" + b·T·d_model·{g}" if layout.sp else ""),
                Linear(tokens_d * g if layout.sp else 0, whole * g), backward_only=True,
                embedding=True,
                note="aten.embedding_dense_backward has no vocabulary-sharded strategy in "
                     "torch 2.13: each TP rank computes the V×d_model gradient (from the "
                     "all-gathered gradient of the output under SP); FSDP2 takes its rows at "
                     "the root unit's post-backward (measured: tests/test_embedding_grad.py)")]
    if layout.pp > 1:  # the rest of the whole table beside the root's V/tp rows, counted in
        # "FSDP2 unsharded ... grads accumulated" already
        out.append(Item("embedding grad accumulated whole (FSDP2 no-sync on the DTensor)",
                        f"{acc}·(V − ⌈V/tp⌉)·d_model", Linear(0, (whole - local) * acc),
                        backward_only=True, accumulated=True,
                        per_chunk=((whole - local) * acc,) + (0,) * (layout.vpp - 1)
                        if layout.vpp > 1 else (),
                        note="to_accumulated_grad_if_needed casts the whole V×d_model "
                             ".grad to reduce_dtype and keeps it across the micro-batches "
                             "(measured: tests/test_embedding_grad.py)"))
    return out


def largest_module(st: States) -> int:
    """Elements of the largest module on this stage (its own parameters), DeepSpeed's
    `largest_layer_params` (estimate_zero3_model_states_mem_needs_all_live)."""
    sizes: dict[tuple, int] = {}
    for u in st.units:
        for t in u.tensors:
            key = (u.layer, t.tensor.module)
            sizes[key] = sizes.get(key, 0) + t.numel
    return max(sizes.values(), default=0)
