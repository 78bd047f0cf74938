"""One rank's training step under torch.distributed, measured: the bytes of its parameters,
gradients and AdamW state, its matmul FLOPs (FlopCounterMode on its local shapes), and its
collectives (calls and bytes, by kind, group and phase), beside CommDebugMode's counts.

A Case says what to build; `run_step` runs m micro-batches (gradient accumulation) and the
optimizer step on the current process group and returns a JSON-able dict.
"""
from __future__ import annotations

import warnings
import weakref
from collections import Counter
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode

from accounting.planning.parallel.stacks import DEFAULT_STACK
from accounting.distcheck.hooks import Collectives, LocalFlopCounter


# torch's warnings that every run of these engines printed on every rank (about 40 lines
# before the answer), none of them about what is measured:
KNOWN_WARNINGS = (
    # CommDebugMode's module tracker registers full backward hooks; a model's inputs are
    # token ids (integers), so no input can require a gradient
    (UserWarning, r"Full backward hook is firing when gradients are computed with respect "
                  r"to module outputs since no inputs require gradients"),
    # FSDP2 on the model's logits (a view); loss_of and backward below use them out of
    # place, which is what the warning asks for
    (UserWarning, r"FSDP2-wrapped module \(\w+\) returned a view tensor"),
    # torch.distributed.pipelining pickles its own tree specs with torch's deprecated class
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
)


def quiet_known_warnings() -> None:
    """In a rank's own process (a forked gloo worker or fake-backend child): hide the
    KNOWN_WARNINGS; any other warning still prints."""
    for category, message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


@dataclass(frozen=True)
class Case:
    model: dict  # ModelConfig fields, or {"preset": name, **overrides}
    world: int
    tp: int = 1
    dp: int = 1
    pp: int = 1
    sp: bool = False
    ep: int = 1  # expert parallelism, carved out of dp (accounting/planning/parallel/layout.py)
    zero: int = 0
    seq: int = 16
    micro_batch: int = 1
    micro_batches: int = 2
    rank: int = 0
    label: str = ""
    # torchtitan: FSDP2 with MixedPrecisionPolicy(bf16 params, fp32 reduce)
    stack: str = DEFAULT_STACK
    lora_rank: int = 0  # > 0: PEFT's LoRA on every linear layer but the LM head, base frozen

    def to_json(self) -> dict:
        return asdict(self)

    def config(self):
        from accounting.distcheck.compare import config_of
        return config_of(self.model)


def local(t: torch.Tensor) -> torch.Tensor:
    return t._local_tensor if isinstance(t, DTensor) else t


def _storage_key(t: torch.Tensor):
    return t.untyped_storage()._cdata


def state_bytes(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Elements and storage bytes of this rank's parameters, gradients and AdamW moments."""
    params = list(module.parameters())
    out = {"param_numel": sum(local(p).numel() for p in params),
           "param_bytes": _unique_bytes(local(p) for p in params),
           "param_tensors": len(params)}
    grads = [local(p.grad) for p in params if p.grad is not None]
    out["grad_numel"] = sum(g.numel() for g in grads)
    out["grad_bytes"] = _unique_bytes(grads)
    moments = [local(v) for s in optimizer.state.values() for k, v in s.items()
               if k in ("exp_avg", "exp_avg_sq")]
    out["moment_numel"] = sum(m.numel() for m in moments)
    out["moment_bytes"] = sum(m.numel() * m.element_size() for m in moments)
    out["step_counters"] = sum(1 for s in optimizer.state.values() if "step" in s)
    # model/moe.py's stacked routed experts (E/ep of them per rank under expert parallelism)
    out["expert_param_numel"] = sum(local(p).numel() for n, p in module.named_parameters()
                                    if ".ffn.experts.w" in n)
    return out


def _unique_bytes(tensors) -> int:
    """Bytes of the distinct storages (FSDP2 keeps a unit's gradients in one buffer)."""
    seen = {}
    for t in tensors:
        seen[_storage_key(t)] = t.untyped_storage().nbytes()
    return sum(seen.values())


class BlockSaves:
    """Bytes of the storages autograd saves while the blocks run their forward pass (each
    storage once; parameters — DTensor shards and FSDP2's gathered ones included — left
    out) and still holds when the backward pass starts (`freeze()`, called then), the way
    tests/test_architectures.py measures one GPU's: a tensor saved by an op off the
    gradient path (an MoE router's choice, of which only indices leave) is freed with its
    node before that."""

    def __init__(self, model: torch.nn.Module, blocks):
        self.model, self.blocks, self.depth, self.seen = model, list(blocks), 0, {}
        self.frozen = None

    def __enter__(self):
        def enter(module, args):
            self.depth += 1

        def leave(module, args, output):
            self.depth -= 1
        self.handles = [b.register_forward_pre_hook(enter) for b in self.blocks]
        self.handles += [b.register_forward_hook(leave) for b in self.blocks]

        def pack(t):
            if self.depth:
                params = {_storage_key(local(p)) for p in self.model.parameters()}
                x = local(t)
                key = _storage_key(x)
                if key not in params:
                    # A key (the storage's address) whose tensors are all gone names a freed
                    # storage: a new one at the same address is counted afresh, not at the
                    # old one's size (the address is reused only once the old one is freed,
                    # so it sometimes was, run to run: an MoE router's freed choice)
                    entry = self.seen.get(key)
                    if entry is None or not any(r() is not None for r in entry[1]):
                        entry = (x.untyped_storage().nbytes(), [])
                    entry[1].append(weakref.ref(t))
                    self.seen[key] = entry
            return t
        self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
        for h in self.handles:
            h.remove()

    def freeze(self) -> None:
        """Count what is held now (before the backward pass frees it all)."""
        self.frozen = sum(n for n, refs in self.seen.values() if any(r() is not None for r in refs))

    @property
    def bytes(self) -> int:
        return self.frozen


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if isinstance(logits, DTensor):
        from torch.distributed.tensor.parallel import loss_parallel
        with loss_parallel():
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def backward(loss: torch.Tensor) -> None:
    if isinstance(loss, DTensor):
        from torch.distributed.tensor.parallel import loss_parallel
        with loss_parallel():
            loss.backward()
    else:
        loss.backward()


def run_step(model: torch.nn.Module, optimizer, ids_fn, micro_batches: int,
             before_forward=None, blocks=None) -> dict:
    """m forward/backward passes then optimizer.step(), every collective and matmul recorded,
    and (given the blocks) the bytes the first micro-batch's blocks save for the backward
    pass. `ids_fn(i)` gives micro-batch i's (token ids, targets)."""
    rec = Collectives()
    flops = {"forward": 0, "backward": 0}
    counts = Counter()
    saves = None
    with rec:
        for i in range(micro_batches):
            ids, targets = ids_fn(i)
            if before_forward is not None:
                before_forward(i)
            # a fresh CommDebugMode per micro-batch: its module tracker loses its parent
            # list across a second forward pass (torch 2.13: IndexError in _fw_set_module_hook)
            with CommDebugMode() as comm:
                rec.phase = "forward"
                with LocalFlopCounter() as fc:
                    if i == 0 and blocks is not None:
                        with BlockSaves(model, blocks) as saves:
                            logits = model(ids)
                    else:
                        logits = model(ids)
                    loss = loss_of(logits, targets)
                    if i == 0 and saves is not None:
                        saves.freeze()
                flops["forward"] += fc.get_total_flops()
                rec.phase = "backward"
                with LocalFlopCounter() as fc:
                    backward(loss)
                flops["backward"] += fc.get_total_flops()
            counts.update(comm.get_comm_counts())
        rec.phase = "optimizer step"
        with CommDebugMode() as comm:
            optimizer.step()
        counts.update(comm.get_comm_counts())
    by = Counter()
    size = Counter()
    for c in rec.calls:
        by[(c.group, c.op, c.phase)] += 1
        size[(c.group, c.op, c.phase)] += c.bytes
    return {"flops": flops,
            "collectives": [{"group": g, "op": o, "phase": p, "calls": by[(g, o, p)],
                             "bytes": size[(g, o, p)]} for (g, o, p) in sorted(by)],
            "comm_debug_counts": {str(k): v for k, v in counts.items()},
            "block_saved_bytes": None if saves is None else saves.bytes,
            "unrecognized": dict(rec.unknown)}
