"""What each field of the spec is, for the people who set it: its flag, help, bound and
choices, carried on the field itself (dataclasses' field metadata) and read from there by
the command line (accounting/cli/args.py generates its flags), the tool's own JSON format
(accounting/architecture/own_format.py) and the docs' flag table. One fact, one place: a new spec
field is one line in ModelConfig with its metadata, and every door learns of it."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

# Kinds of value: each has one parser on the command line and one bound.
SIZE = "size"  # a positive integer up to MAX_SIZE (config.py)
COUNT = "count"  # a non-negative integer up to MAX_SIZE
NUMBER = "number"  # a positive finite decimal
NUMBER0 = "number0"  # a non-negative finite decimal
CHOICE = "choice"  # one name of a table (config.py's MLPS, NORMS, ...)
FLAG = "flag"  # true or false: --x / --no-x
LAYERS = "layers"  # a list of layer indices
TYPES = "types"  # a list of layer kinds (global, local)
TEXT = "text"  # a name (no flag)

# The --help groups, in order.
SIZES = "custom config (each flag also overrides a preset)"
ARCHITECTURE = "architecture (defaults: the CS336 model; each overrides a preset)"
EXTRAS = "sliding windows, mixtures of experts, latent attention"
GROUPS = (SIZES, ARCHITECTURE, EXTRAS)


@dataclass(frozen=True)
class Meta:
    """A spec field's face: flag (None: set only in a config file), kind, help, --help group,
    choices (a table of names -> descriptions), and the field it needs to mean anything
    (a MoE option without num_experts changes no count: refused, not ignored)."""
    kind: str
    help: str
    flag: str | None = None
    group: str = ARCHITECTURE
    choices: Mapping[str, object] | None = None
    needs: str | None = None


def spec(default=dataclasses.MISSING, /, **meta) -> dataclasses.Field:
    """A ModelConfig field with its metadata (see Meta)."""
    return dataclasses.field(default=default, metadata={"spec": Meta(**meta)})


def meta(f: dataclasses.Field) -> Meta:
    return f.metadata["spec"]


def flagged(cls) -> list[tuple[dataclasses.Field, Meta]]:
    """The fields that have a command-line flag, in the spec's order."""
    return [(f, meta(f)) for f in dataclasses.fields(cls) if meta(f).flag]
