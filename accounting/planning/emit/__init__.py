"""A many-GPU plan as the settings that launch it (issue 42, `plan … --gpus N --emit STACK`):
torchtitan's TOML job config, Megatron-LM's arguments, a DeepSpeed config JSON, an
accelerate FSDP config YAML. One module a stack, each `text(plan) -> str` from the plan's
layout and recipe (nothing recomputed); a layout a stack cannot express is a UsageError
naming what it lacks. The tests parse each with the stack's own parser or schema.

Which module writes a stack's settings is the stack record's `emitter` (planning/parallel/
stacks.py): `--emit` offers those, and a module here is found by that name."""
from __future__ import annotations

from importlib import import_module

from accounting.planning.parallel.stacks import STACKS as _STACKS

# --emit NAME -> the module of this folder that writes it, one per stack record
EMITTERS = {s.emitter: s.emitter for s in _STACKS.values() if s.emitter}


def emit(target: str, plan) -> str:
    return import_module(f"accounting.planning.emit.{EMITTERS[target]}").text(plan)


def precision_name(plan) -> str:
    return plan.precision.name


def check_precision(plan, module: str, allowed: tuple[str, ...]) -> None:
    """`module`: the emitting module's __name__, whose last part is its --emit value."""
    from accounting.runtime.errors import UsageError
    stack = module.rpartition(".")[2]
    if plan.precision.name not in allowed:
        raise UsageError(f"--emit {stack}: the plan's precision {plan.precision.name} has no "
                         f"setting there (it takes {', '.join(allowed)}); plan with one of them")
