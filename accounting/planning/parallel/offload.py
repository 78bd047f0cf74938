"""--offload: model states a stack keeps in CPU memory instead of the GPU's (issue 44), as
data on each stack's record (stacks.py, Stack.offload: option -> Policy): which model-state
items move, at which sharding stages, and the library that does it. A stack or option not
listed is refused in one line. The policies (defined below, attached to the stacks there):

  * DeepSpeed ZeRO-Offload, `offload_optimizer` (ZeRO 1-3): the fp32 master copy, Adam's
    moments and the gradient partitions live on the CPU, where DeepSpeedCPUAdam steps them;
    the GPU keeps the 16-bit parameters (deepspeed/runtime/zero/stage_1_and_2.py
    estimate_zero2_model_states_mem_needs(cpu_offload=True): gpu_mem = 2·Ψ;
    stage3.py estimate_zero3_model_states_mem_needs(cpu_offload=True,
    cpu_offload_params=False): 4·largest_layer + 2·Ψ/N). `offload_param` (ZeRO-3 only, with
    offload_optimizer): the 16-bit partitions too (cpu_offload_params=True: 4·largest_layer).
    tests/test_stacks.py holds the plan to the installed estimators.
  * torch's FSDP2, CPUOffloadPolicy (torch/distributed/fsdp/_fully_shard/_fsdp_api.py): the
    sharded parameters, their gradients and the optimizer's state live on the CPU, the
    optimizer steps there; the units are copied in for each all-gather (the gathered units
    stay GPU items). `--offload params` at --zero 2 or 3.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from accounting.runtime.errors import UsageError

OPTIMIZER, PARAMS = "optimizer", "params"
# activations: torchtune's OffloadActivations, a recipe rather than a stack's model-state
# policy (accounting/planning/activation_offload.py); check() and apply() leave it out
ACTIVATIONS = "activations"
CHOICES = (OPTIMIZER, ACTIVATIONS, PARAMS)
EVERY_STATE = ""  # a prefix every model-state item's name starts with


@dataclass(frozen=True)
class Policy:
    moves: tuple[str, ...]  # the model-state items moved, by the start of their names
    zero: tuple[int, ...]  # the sharding stages it runs at
    needs: tuple[str, ...]  # the options it needs beside it
    what: str


# DeepSpeed's two options, and torch's FSDP2 CPUOffloadPolicy (the docstring's sources)
DEEPSPEED_POLICIES = {
    OPTIMIZER: Policy(("gradients", "optimizer state"), (1, 2, 3), (),
                      "DeepSpeed offload_optimizer (ZeRO-Offload)"),
    PARAMS: Policy(("parameters",), (3,), (OPTIMIZER,), "DeepSpeed offload_param (ZeRO-3)"),
}
FSDP2_POLICIES = {
    PARAMS: Policy((EVERY_STATE,), (2, 3), (),
                   "FSDP2 CPUOffloadPolicy: parameters, gradients, optimizer state"),
}


def parse(text: str | None) -> frozenset[str]:
    """'optimizer,params' -> {'optimizer', 'params'}."""
    if text is None:
        return frozenset()
    parts = [x.strip() for x in str(text)[:200].split(",")]
    bad = [x for x in parts if x not in CHOICES]
    if bad or not parts:
        raise UsageError(f"--offload takes {' or '.join(CHOICES)}, comma-separated, got "
                         f"{str(text)[:60]!r}")
    return frozenset(parts)


def check(offload: frozenset[str], stack, zero: int) -> None:
    """`stack`: the stack's record (stacks.Stack), whose `offload` holds its policies."""
    for option in sorted(offload - {ACTIVATIONS}):
        policy = stack.offload.get(option)
        if policy is None:
            has = sorted(stack.offload)
            raise UsageError(f"--offload {option} is not planned for --stack {stack.name}"
                             + (f" (it offloads {', '.join(has)})" if has else
                                " (offloading: --stack deepspeed or torch)"))
        if zero not in policy.zero:
            raise UsageError(f"--offload {option} with --stack {stack.name} runs at --zero "
                             f"{' or '.join(map(str, policy.zero))} ({policy.what}), not "
                             f"--zero {zero}")
        missing = [n for n in policy.needs if n not in offload]
        if missing:
            raise UsageError(f"--offload {option} with --stack {stack.name} needs --offload "
                             f"{','.join(sorted(offload | set(missing)))} ({policy.what})")


def moves_optimizer(offload: frozenset[str], stack) -> bool:
    """Whether the optimizer steps on the CPU (its update's temporaries are not the GPU's)."""
    return any(p.moves == (EVERY_STATE,) or "optimizer state" in p.moves
               for o, p in stack.offload.items() if o in offload)


def apply(items, offload: frozenset[str], stack) -> list:
    """The items with the offloaded model states off the GPU."""
    prefixes = tuple(x for o, p in stack.offload.items() if o in offload for x in p.moves)
    if not prefixes:
        return list(items)
    return [replace(i, on_gpu=False, note=(i.note + "; " if i.note else "") + "offloaded to "
                    "the CPU (--offload)")
            if i.model_state and i.on_gpu and i.name.startswith(prefixes) else i
            for i in items]
