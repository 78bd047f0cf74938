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


def _model_types() -> str:
    """The Hugging Face table's model_types (hf_config.TYPES, in its order): transformers'
    class and the rules with no key, in the row's own words; then the refused ones."""
    from accounting.architecture.hf_config import TYPES, UNSUPPORTED
    rows = ["| `model_type` | transformers' model | rules with no key (the table's own words) |",
            "| --- | --- | --- |"]
    rows += [f"| `{t.model_type}` | `{t.transformers_class}` | {t.rules} |" for t in TYPES.values()]
    refused = ", ".join(f"`{mt}`" for mt in UNSUPPORTED)
    tail = (f"\nRefused in one line with the reason (`UNSUPPORTED`, what the spec cannot express): "
            f"{refused}.\n" if UNSUPPORTED else "")
    return "\n".join(rows) + "\n" + tail


def _model_type_names() -> str:
    from accounting.architecture.hf_config import supported_types
    return ("Supported `model_type`s (accounting/architecture/hf_config.py TYPES): "
            + ", ".join(f"`{mt}`" for mt in supported_types().split(", ")) + ".\n")


def _serve_answers() -> str:
    from accounting.cli.serve_answers import markdown
    return markdown()


def _published_runs() -> str:
    from accounting.cli.published_table import markdown
    return markdown()


def _recipes_h200() -> str:  # issue 44: the recipe flags against an H200 step
    from accounting.planning.recipes_measured import markdown
    return markdown()


def _titan_compile_tp() -> str:  # issue 44: Table 4's rows against compile's candidates
    from accounting.cli.titan_compile_table import markdown
    return markdown()


BLOCKS: dict[str, Callable[[], str]] = {
    "gpu-table": _gpus,
    "gpu-names": _gpu_names,
    "spec-flags": _spec_flags,
    "model-types": _model_types,
    "model-type-names": _model_type_names,
    "serve-answers": _serve_answers,
    "published-runs": _published_runs,
    "recipes-h200": _recipes_h200,
    "titan-compile-tp": _titan_compile_tp,
}
