"""model/ under torch.distributed: the layouts the planner describes, applied with torch's own
APIs (model/ is left as the course wrote it).

Tensor parallelism (DTensor, parallelize_module), Megatron-LM's scheme as torchtitan writes
it for Llama: Q, K, V, W1, W3 column-parallel, the output projection and W2 row-parallel,
each sublayer's input made a DTensor once (PrepareModuleInput), so one collective per
sublayer and direction; the token embedding vocab-parallel (RowwiseParallel on its rows)
and the LM head column-parallel over the vocabulary, its logits left sharded for
loss_parallel's vocab-parallel cross-entropy. With sequence parallelism the norms run on
sequence shards (SequenceParallel) and the sublayers gather their input and scatter their
output along T.

Two adaptations, both outside model/:
  * torch's ColwiseParallel and RowwiseParallel accept only nn.Linear and nn.Embedding;
    model.Linear (an einsum with weight (out, in)) and model.Embedding (weight[ids]) have
    the same weight layout, so the styles below apply the same partition to them;
  * DTensor cannot index (aten.index) a table sharded on the indexed dimension: model/'s
    `weight[ids]` would all-to-all the whole table (measured: tests/test_distributed.py).
    The vocab-parallel embedding calls F.embedding(ids, weight) instead — the same lookup,
    which DTensor shards over the vocabulary with a masked partial sum (as it does for
    nn.Embedding).
Each attention module is told its local head counts (num_heads/tp, num_kv_heads/tp), as
torchtitan does, because its rearrange splits the local projection into heads.

FSDP2: fully_shard on every block, then on the whole model (the root unit: embeddings,
final norm, LM head); reshard_after_forward False for ZeRO-2, True for ZeRO-3.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch.distributed.tensor import Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)

import model as M
from model.moe import MoE


class Colwise(ColwiseParallel):
    def _apply(self, module, mesh):
        return distribute_module(module, mesh, _skip_dtensors(self._partition_linear_fn),
                                 partial(self._prepare_input_fn, self.input_layouts,
                                         self.desired_input_layouts),
                                 partial(self._prepare_output_fn, self.output_layouts,
                                         self.use_local_output))


class Rowwise(RowwiseParallel):
    def _apply(self, module, mesh):
        if isinstance(module, M.Embedding):
            fn, self.desired_input_layouts = self._partition_embedding_fn, (Replicate(),)
        else:
            fn, self.desired_input_layouts = self._partition_linear_fn, (Shard(-1),)
        return distribute_module(module, mesh, _skip_dtensors(fn),
                                 partial(self._prepare_input_fn, self.input_layouts,
                                         self.desired_input_layouts),
                                 partial(self._prepare_output_fn, self.output_layouts,
                                         self.use_local_output))


def _skip_dtensors(fn):
    """Partition only what is not a DTensor yet (a tied weight already split by the LM head)."""
    from torch.distributed.tensor import DTensor

    def partition(name, module, mesh):
        if any(isinstance(p, DTensor) for p in module.parameters(recurse=False)):
            return
        fn(name, module, mesh)
    return partition


def tensor_parallel(lm: M.TransformerLM, mesh, sp: bool) -> None:
    tp = mesh.size()
    seq = Shard(1) if sp else Replicate()
    learned = hasattr(lm, "position_embeddings")
    emb = lm.token_embeddings
    emb.forward = lambda ids: F.embedding(ids, emb.weight)  # see the module docstring
    for block in lm.layers:
        plan = {"attn": PrepareModuleInput(input_layouts=(seq, None),
                                           desired_input_layouts=(Replicate(), None)),
                "ffn": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
                "attn.q_proj": Colwise(), "attn.k_proj": Colwise(), "attn.v_proj": Colwise(),
                "attn.output_proj": Rowwise(output_layouts=seq),
                "ffn.w1": Colwise(), "ffn.w2": Rowwise(output_layouts=seq)}
        if hasattr(block.ffn, "w3"):
            plan["ffn.w3"] = Colwise()
        if sp:
            plan["ln1"] = SequenceParallel()
            if hasattr(block, "ln2"):  # a parallel block with one shared norm has none
                plan["ln2"] = SequenceParallel()
        parallelize_module(block, mesh, plan)
        block.attn.num_heads //= tp
        block.attn.num_kv_heads //= tp
        if getattr(block.attn, "alibi", False):  # ALiBi: this rank's heads' slopes
            n = block.attn.num_heads
            block.attn.alibi_slopes = block.attn.alibi_slopes[mesh.get_local_rank() * n:][:n]
    tied = lm.lm_head.weight is emb.weight
    parallelize_module(lm, mesh, {"lm_head": Colwise(input_layouts=seq, use_local_output=False)})
    if tied:
        emb.weight = lm.lm_head.weight  # one vocab-parallel table for both
    # learned positions are added to the whole sequence: the embedding all-reduces, and the
    # first block takes its own slice along T
    plan = {"token_embeddings": Rowwise(input_layouts=Replicate(),
                                        output_layouts=Replicate() if learned else seq)}
    if sp:
        plan["ln_final"] = SequenceParallel()
        if learned:
            plan["layers.0"] = PrepareModuleInput(input_layouts=(Replicate(),),
                                                  desired_input_layouts=(Shard(1),),
                                                  use_local_output=True)
    parallelize_module(lm, mesh, plan)


# the course model's linear layers, PEFT's "all-linear" (the LM head left out): PEFT's
# all-linear shorthand needs a transformers PreTrainedModel, so the names are given
COURSE_LINEARS = ("q_proj", "k_proj", "v_proj", "output_proj", "w1", "w2", "w3")


def import_before_fork(cases) -> None:
    """What the cases' forked processes would each import, imported once here before they
    are forked (fake.run_cases, gloo.run_group), so that they inherit it: PEFT, with the
    transformers it imports (about 4 s of CPU a process), for a LoRA case. A pure speed-up:
    the same modules and the same code run (tests/test_lora_gpus.py: three fake ranks and
    two gloo ranks imported it each)."""
    if any(c.lora_rank for c in cases):
        import peft.tuners.lora.layer  # noqa: F401  (apply_lora's imports)


def apply_lora(lm: torch.nn.Module, rank: int) -> None:
    """PEFT's LoRA (inject_adapter_in_model, peft/mapping.py) on model.TransformerLM, the base
    frozen as PeftModel does (tuners_utils.BaseTuner._mark_only_adapters_as_trainable:
    requires_grad False on every parameter without "lora_" in its name); the embedding's
    output made to require grad (transformers' enable_input_require_grads)."""
    from peft import LoraConfig, inject_adapter_in_model
    from peft.tuners.lora.layer import Linear as LoraLinear
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(COURSE_LINEARS))
    cfg._register_custom_module({M.Linear: LoraLinear})  # model/'s Linear, as PEFT's own
    inject_adapter_in_model(cfg, lm)
    for name, p in lm.named_parameters():
        p.requires_grad_("lora_" in name)
    # transformers' enable_input_require_grads, as the LoRA ledger assumes (builder/lora.py):
    # the embedding's output requires grad, so the first block runs the backward the others do
    lm.token_embeddings.register_forward_hook(lambda mod, i, o: o.requires_grad_(True))


def fully_shard_model(lm: torch.nn.Module, mesh, zero: int, mp_policy=None) -> None:
    from torch.distributed.fsdp import fully_shard
    kw = {"reshard_after_forward": zero == 3}
    if mp_policy is not None:
        kw["mp_policy"] = mp_policy
    for block in lm.layers:
        fully_shard(block, mesh=mesh, **kw)
    fully_shard(lm, mesh=mesh, **kw)


# ---- expert parallelism -------------------------------------------------------------------
# torchtitan's scheme (distributed/expert_parallel.py ExpertParallel, models/llama4/infra/
# parallelize.py apply_fsdp), on model/moe.py's MoE without touching its maths: each rank of
# an expert-parallel group keeps E/ep whole experts (a plain local slice of the stacked
# w1, w2, w3, as Megatron-LM's local experts); MoE.forward runs as written up to the routed
# token slots, which an all-to-all (torch.distributed._functional_collectives'
# all_to_all_single_autograd) sends to the ranks holding their experts and a second brings
# back; the router and shared experts stay replicated like dense weights. Dropless, the
# split sizes come from an all-to-all of the E token counts first (torchtitan's
# _token_dispatch); with a capacity factor every expert has C rows (E·C per rank, equal
# splits; DeepSpeed-MoE's MOELayer). Where a tensor has no values (the meta device, or
# FakeTensorMode on the fake backend) the slots are dealt to the experts in turn, as
# MoE.forward does on meta: routing balanced.

def _no_values(x: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return x.is_meta or isinstance(x, FakeTensor)


def expert_parallel(lm: M.TransformerLM, mesh) -> None:
    """Shard every MoE block's routed experts over the 1-D expert-parallel `mesh` and route
    its tokens with all-to-alls."""
    ep, rank = mesh.size(), mesh.get_local_rank()
    group = mesh.get_group()
    for block in lm.layers:
        moe = block.ffn
        if not isinstance(moe, MoE):
            continue  # a dense block (DeepSeek's first layers)
        ex = moe.experts
        local = ex.num_experts // ep
        for name in ("w1", "w2", "w3")[:3 if ex.gated else 2]:  # relu2 experts: no w3
            w = getattr(ex, name)
            mine = w.detach()[rank * local:(rank + 1) * local].clone()
            setattr(ex, name, torch.nn.Parameter(mine))
        ex.num_experts = local  # Experts.forward's batched path reshapes by it
        moe.forward = partial(_moe_forward, moe, group, ep, rank)


def _moe_forward(moe, group, ep: int, rank: int, x: torch.Tensor) -> torch.Tensor:
    """model/moe.py MoE.forward with the routed slots sent to their experts' ranks."""
    from model.moe import expert_capacity  # the model's own capacity: this runs model/moe.py's layer
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    weights, experts = moe.route(x)
    h, x = x, x if moe.fc1_latent is None else moe.fc1_latent(x)  # Nemotron-H's latent experts
    shape = (*shape[:-1], x.shape[-1])
    n, k = (int(s) for s in experts.shape)
    E = moe.E
    flat = experts.reshape(-1)
    dealt = _no_values(x)
    if dealt:
        order = torch.cat([torch.arange(n * k, device=x.device)[e::E] for e in range(E)])
        counts = [len(range(e, n * k, E)) for e in range(E)]
    else:
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=E).tolist()
    slot_token = torch.arange(n, device=x.device).repeat_interleave(k)[order]
    slot_weights = weights.reshape(-1)[order]
    routed = x[slot_token]
    if moe.capacity_factor is None:
        out = _dropless(moe, routed, counts, group, ep, rank, dealt)
    else:
        capacity = expert_capacity(moe.capacity_factor, n * k, E)
        trash = E * capacity
        if dealt:
            dest = order
        else:
            c = torch.tensor(counts, device=x.device)
            starts = torch.cumsum(c, 0) - c
            sorted_experts = flat[order]
            place = torch.arange(n * k, device=x.device) - starts[sorted_experts]
            dest = torch.where(place < capacity, sorted_experts * capacity + place, trash)
        dispatched = x.new_zeros(trash + 1, shape[-1]).index_copy(0, dest, routed)
        ran = _exchange(moe, dispatched[:trash], [capacity] * E, group, ep, rank)
        out = torch.cat((ran, ran.new_zeros(1, shape[-1])))[dest]
    y = x.new_zeros(n, shape[-1]).index_add(0, slot_token, out * slot_weights.unsqueeze(-1))
    if moe.fc2_latent is not None:
        y = moe.fc2_latent(y)
    if moe.shared is not None:
        y = y + moe.shared(h)
    return y.reshape(*shape[:-1], y.shape[-1])


def _dropless(moe, routed, counts, group, ep, rank, dealt):
    """The split sizes first: every rank's E token counts, all-to-all (torchtitan)."""
    from torch.distributed._functional_collectives import all_to_all_single
    local = moe.E // ep
    with torch.no_grad():
        got = all_to_all_single(torch.tensor(counts, device=routed.device), None, None, group)
        got = torch.ops._c10d_functional.wait_tensor(got)
    if dealt:  # every rank dealt its slots alike: it gets what it sends to itself
        received = [counts[rank * local:(rank + 1) * local]] * ep
    else:
        received = got.view(ep, local).tolist()
    return _exchange(moe, routed, counts, group, ep, rank, received)


def _exchange(moe, rows, counts, group, ep, rank, received=None):
    """Dispatch `rows` (grouped by expert, counts[e] for expert e) to the experts' ranks, run
    the local experts on what arrives, and combine: the outputs back in `rows`' order.
    `received[j][l]`: rows source rank j sends for local expert l (None: counts alike on
    every rank, as under a capacity factor)."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd
    local = moe.E // ep
    if received is None:
        received = [counts[rank * local:(rank + 1) * local]] * ep
    send = [sum(counts[j * local:(j + 1) * local]) for j in range(ep)]
    recv = [sum(r) for r in received]
    got = all_to_all_single_autograd(rows, recv, send, group)
    if all(c == received[0][0] for r in received for c in r):
        # (source, local expert, rows) -> (local expert, source, rows): one copy, no index
        c = received[0][0]
        grouped = got.view(ep, local, c, -1).transpose(0, 1).reshape(local * ep * c, -1)
        ran = moe.experts(grouped, [ep * c] * local)
        back = ran.view(local, ep, c, -1).transpose(0, 1).reshape(ep * local * c, -1)
    else:  # routed unevenly: gather each local expert's rows from every source
        starts, at = {}, 0
        for j in range(ep):
            for l in range(local):
                starts[j, l] = at
                at += received[j][l]
        idx = torch.tensor([i for l in range(local) for j in range(ep)
                            for i in range(starts[j, l], starts[j, l] + received[j][l])],
                           dtype=torch.long, device=rows.device)
        ran = moe.experts(got[idx], [sum(received[j][l] for j in range(ep)) for l in range(local)])
        inverse = torch.empty_like(idx)
        inverse[idx] = torch.arange(len(idx), device=rows.device)
        back = ran[inverse]
    return all_to_all_single_autograd(back, send, recv, group)


def fully_shard_experts(lm: torch.nn.Module, dp_mesh, edp_mesh, zero: int, experts: int) -> None:
    """FSDP2 with expert parallelism, as torchtitan's apply_fsdp: each MoE block's routed
    experts are a unit of their own on the expert-data-parallel mesh (dp/ep ranks; on dim 1
    when efsdp·ep > E), then every block and the root on the dp mesh."""
    from torch.distributed.fsdp import fully_shard
    kw = {"reshard_after_forward": zero == 3}
    ep = dp_mesh.size() // edp_mesh.size()
    placement = (lambda p: Shard(1)) if edp_mesh.size() * ep > experts else None
    for block in lm.layers:
        if isinstance(block.ffn, MoE):
            fully_shard(block.ffn.experts, mesh=edp_mesh, shard_placement_fn=placement, **kw)
        fully_shard(block, mesh=dp_mesh, **kw)
    fully_shard(lm, mesh=dp_mesh, **kw)
