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
            plan["ln2"] = SequenceParallel()
        parallelize_module(block, mesh, plan)
        block.attn.num_heads //= tp
        block.attn.num_kv_heads //= tp
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


def fully_shard_model(lm: torch.nn.Module, mesh, zero: int, mp_policy=None) -> None:
    from torch.distributed.fsdp import fully_shard
    kw = {"reshard_after_forward": zero == 3}
    if mp_policy is not None:
        kw["mp_policy"] = mp_policy
    for block in lm.layers:
        fully_shard(block, mesh=mesh, **kw)
    fully_shard(lm, mesh=mesh, **kw)
