"""`plan`'s recipe flags (issue 44): --loss standard|chunked|fused-linear, --loss-chunks N,
--compile, --compile-components, and the `activations` option of --offload (the flag
itself is plan_parallel's, shared with the model states' options). Parsing only: the rules
are accounting/planning/loss_memory.py's, activation_offload.py's, compile_memory.py's and
compile_components.py's."""
from __future__ import annotations

import argparse

from accounting.cli.args import positive_int
from accounting.planning import compile_components as CC
from accounting.planning.loss_memory import DEFAULT_CHUNKS, LOSSES, MAX_CHUNKS, STANDARD
from accounting.planning.parallel.offload import ACTIVATIONS, parse
from accounting.runtime.errors import UsageError


def add_args(w: argparse._ArgumentGroup) -> None:
    w.add_argument("--loss", choices=tuple(LOSSES), default=STANDARD,
                   help="the LM head's loss: standard (F.cross_entropy on the full logits), "
                        "chunked (torchtune's chunked output and CEWithChunkedOutputLoss: "
                        "float32 one chunk at a time) or fused-linear (Liger's fused linear "
                        "cross-entropy: no logits; the gradient computed in the forward pass)")
    w.add_argument("--loss-chunks", type=positive_int("--loss-chunks", MAX_CHUNKS, "2^20"),
                   metavar="N", help=f"--loss chunked: chunks of the sequence (default "
                                     f"{DEFAULT_CHUNKS}, torchtune's)")
    w.add_argument("--compile", action="store_true",
                   help="torch.compile (inductor): its min-cut partitioner saves fewer "
                        "tensors and recomputes pointwise ops in the backward pass; with "
                        "--loss chunked the loss's cross-entropy too (torchtune's "
                        "compile_loss: the bf16 chunks saved, no float32 log-softmax)")
    w.add_argument("--compile-components", metavar="|".join(CC.CHOICES),
                   help="with --compile, what it compiles, as torchtitan's "
                        "compile.components names it: model (the blocks; the loss eager) or "
                        "model,loss (the loss too: torchtune's chunked loss under --stack "
                        "torch, torchtitan's cross-entropy under --stack torchtitan). Default: the "
                        "stack's (model,loss for both, as torchtune's recipes and torchtitan "
                        "since 2025-04-02 compile)")


def offload_activations(ns: argparse.Namespace) -> bool:
    """Whether --offload names activations; the one-GPU plan takes no other option."""
    options = parse(ns.offload)
    if options - {ACTIVATIONS} and ns.gpus is None:
        other = ",".join(sorted(options - {ACTIVATIONS}))
        raise UsageError(f"--offload {other} moves a layout's model states; give --gpus N "
                         f"with it (--offload activations runs on one GPU too)")
    return ACTIVATIONS in options


def plan_kwargs(ns: argparse.Namespace) -> dict:
    return {"loss": ns.loss, "loss_chunks": ns.loss_chunks, "compile": ns.compile,
            "offload_activations": offload_activations(ns),
            "compile_components": components(ns)}


def components(ns: argparse.Namespace) -> frozenset[str] | None:
    """--compile-components parsed (None: the stack's default); refused without --compile."""
    out = CC.parse(ns.compile_components)
    CC.resolve(ns.compile, out, ())
    return out


__all__ = ["add_args", "components", "offload_activations", "plan_kwargs"]
