"""The docs' generated tables: each written from the one record that states its facts, never
by hand. A page holds one as

    <!-- generated: NAME -->
    ...
    <!-- end generated: NAME -->

and tests/test_readme.py checks that the text between the markers is what BLOCKS[NAME]()
returns now (`python tests/test_readme.py --update` rewrites it). Each generator imports
what it needs on call, so that `import accounting` stays light."""
from __future__ import annotations

from typing import Callable


def _gpus() -> str:
    from accounting.planning import gpu_table
    return gpu_table.markdown()


def _gpu_names() -> str:
    from accounting.planning.gpus import GPUS, nicknames
    names = ", ".join(f"`{n}`" for n in GPUS)
    aliases = " and ".join(f"`{nick}` means {name}" for nick, name in nicknames())
    return f"Known GPUs: {names} ({aliases}).\n"


def _spec_flags() -> str:
    from accounting.cli.args import flag_table
    return "\n".join(flag_table()) + "\n"


BLOCKS: dict[str, Callable[[], str]] = {
    "gpu-table": _gpus,
    "gpu-names": _gpu_names,
    "spec-flags": _spec_flags,
}
