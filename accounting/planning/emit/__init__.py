"""A many-GPU plan as the settings that launch it (issue 42, `plan … --gpus N --emit STACK`):
torchtitan's TOML job config, Megatron-LM's arguments, a DeepSpeed config JSON, an
accelerate FSDP config YAML. One module a stack, each `text(plan) -> str` from the plan's
layout and recipe (nothing recomputed); a layout a stack cannot express is a UsageError
naming what it lacks. The tests parse each with the stack's own parser or schema."""
from __future__ import annotations

from importlib import import_module

STACKS = {"torchtitan": "torchtitan", "megatron": "megatron", "deepspeed": "deepspeed",
          "accelerate": "accelerate"}


def emit(stack: str, plan) -> str:
    return import_module(f"accounting.planning.emit.{STACKS[stack]}").text(plan)


def precision_name(plan) -> str:
    return plan.precision.name


def check_precision(plan, stack: str, allowed: tuple[str, ...]) -> None:
    from accounting.runtime.errors import UsageError
    if plan.precision.name not in allowed:
        raise UsageError(f"--emit {stack}: the plan's precision {plan.precision.name} has no "
                         f"setting there (it takes {', '.join(allowed)}); plan with one of them")
