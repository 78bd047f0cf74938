"""Argument parsing shared by the subcommands: one-line errors, configs from flags, output.

Every parse error becomes a UsageError, which cli.main prints on one line with exit 2.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from accounting.config import ModelConfig, config_from_json, default_d_ff, get_preset
from accounting.errors import UsageError

FORMATS = ("text", "markdown", "csv", "json")


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def positive_int(flag: str):
    def parse(text: str) -> int:
        try:
            value = int(text.replace(",", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a positive integer, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
        return value
    parse.__name__ = "positive integer"
    return parse


def positive_float(flag: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
        return value
    parse.__name__ = "positive number"
    return parse


_SIZE_FLAGS = (("--vocab-size", "vocab_size"), ("--context-length", "context_length"),
               ("--num-layers", "num_layers"), ("--d-model", "d_model"),
               ("--num-heads", "num_heads"), ("--d-ff", "d_ff"))


def add_model_args(p: argparse.ArgumentParser, model_required: bool = False) -> None:
    p.add_argument("model", nargs=None if model_required else "?",
                   help="preset name: gpt2-small, gpt2-medium, gpt2-large, gpt2-xl")
    g = p.add_argument_group("custom config (each flag also overrides a preset)")
    g.add_argument("--config", metavar="FILE",
                   help="JSON object with vocab_size, context_length, num_layers, d_model, "
                        "num_heads and optionally d_ff, rope_theta, name")
    for flag, dest in _SIZE_FLAGS:
        g.add_argument(flag, dest=dest, type=positive_int(flag), metavar="N")
    g.add_argument("--rope-theta", type=positive_float("--rope-theta"), metavar="X")


def config_from_args(ns: argparse.Namespace) -> ModelConfig:
    overrides = {dest: getattr(ns, dest) for _, dest in _SIZE_FLAGS}
    overrides["rope_theta"] = ns.rope_theta
    if ns.model and ns.config:
        raise UsageError("give either a model name or --config FILE, not both")
    if ns.model:
        return get_preset(ns.model).with_overrides(**overrides)
    if ns.config:
        return config_from_json(ns.config).with_overrides(**overrides)
    missing = [flag for flag, dest in _SIZE_FLAGS[:5] if overrides[dest] is None]
    if missing:
        raise UsageError("no model given: name a preset (gpt2-small, gpt2-medium, gpt2-large, "
                         "gpt2-xl), pass --config FILE, or give " + ", ".join(missing))
    if overrides["d_ff"] is None:  # the model's SwiGLU default
        overrides["d_ff"] = default_d_ff(overrides["d_model"])
    if overrides["rope_theta"] is None:
        del overrides["rope_theta"]
    return ModelConfig(**overrides)


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (default), markdown, csv or json (json holds exact integers)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE (atomically: a temporary file, then rename) instead of stdout")


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write the whole file or nothing: a temporary file in the same folder, then rename."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"output {str(path)!r} is a directory; give a file name")
    if not path.parent.exists() and str(path.parent):
        raise UsageError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist")
    mode = "wb" if isinstance(data, bytes) else "w"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as e:
        raise UsageError(f"cannot write {str(path)!r}: {e.strerror}") from None
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8", "newline": ""})) as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def emit(text: str, output: str | None) -> None:
    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
