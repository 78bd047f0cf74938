"""--compile-components model|model,loss (issue 44): what --compile compiles, named as
torchtitan names it (torchtitan/config/configs.py CompileConfig.components, default
["model", "loss"]; at e7c0cae, June 2025, `training.compile` compiled both: components/
loss.py build_cross_entropy_loss, `loss_fn = torch.compile(loss_fn)`, since bbb1b61 of
2025-04-02). Each stack's default is its record's (parallel/stacks.py
Stack.compile_components); what compiling the loss changes is the stack's loss rule
(loss_memory.py: torchtune's chunked loss, compile_loss; torchtitan's whole
F.cross_entropy, Stack.compiles_standard_loss). Parsing only."""
from __future__ import annotations

from accounting.runtime.errors import UsageError

MODEL, LOSS = "model", "loss"
# the choices: the model alone, or the model and the loss (torchtitan's CompileConfig
# accepts the loss alone too; no plan here compiles a loss without its blocks)
CHOICES = {MODEL: frozenset({MODEL}), f"{MODEL},{LOSS}": frozenset({MODEL, LOSS})}


def parse(text: str | None) -> frozenset[str] | None:
    """The components named (None: the stack's default); an unknown list in one line."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if frozenset(parts) not in CHOICES.values():
        raise UsageError(f"--compile-components takes {' or '.join(CHOICES)}, got {text!r}")
    return frozenset(parts)


def resolve(compile: bool, components: frozenset[str] | None,
            default: tuple[str, ...]) -> frozenset[str]:
    """What is compiled: nothing without --compile (--compile-components alone is refused),
    else the components given or the stack's default."""
    if components is not None and not compile:
        raise UsageError("--compile-components says what --compile compiles: give --compile "
                         "with it, or leave it out")
    if not compile:
        return frozenset()
    return frozenset(default) if components is None else components


def describe(loss_compiled: bool) -> str:
    """What --compile compiled, for a plan's first screen."""
    return "the blocks and the loss" if loss_compiled else "the blocks"


__all__ = ["CHOICES", "LOSS", "MODEL", "describe", "parse", "resolve"]
