"""The tool's own JSON config format: an object with ModelConfig's field names (d_ff may be
omitted), and the reading of any JSON config file (bounded, UTF-8, one object)."""
from __future__ import annotations

import json
from dataclasses import MISSING, fields
from collections.abc import Mapping
from pathlib import Path

from accounting.runtime.errors import UsageError, escape
from accounting.runtime.safe_io import read_small_file
from accounting.architecture.checks import one_of as _one_of, short_value as _short
from accounting.architecture.config import MAX_CONFIG_BYTES, MAX_SIZE, MLPS, ModelConfig
from accounting.architecture.fields import meta

_JSON_KEYS = {f.name for f in fields(ModelConfig)}
# the fields with no default, but d_ff (its default follows from the MLP and d_model)
_REQUIRED = tuple(f.name for f in fields(ModelConfig)
                  if f.default is MISSING and f.name != "d_ff")


def config_from_dict(data: dict, source: str) -> ModelConfig:
    """A config from a dict with ModelConfig's field names (d_ff may be omitted)."""
    unknown = sorted(set(data) - _JSON_KEYS)
    if unknown:
        raise UsageError(f"{source} has unknown key(s) {', '.join(_short(k, 30) for k in unknown[:5])}"
                         f"{' …' if len(unknown) > 5 else ''}; allowed: {', '.join(sorted(_JSON_KEYS))}")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise UsageError(f"{source} is missing key(s) {', '.join(missing)}")
    for f in fields(ModelConfig):  # as the CLI refuses its flag (cli/args.py _check_needs)
        needs = meta(f).needs
        if needs and f.name in data and data.get(needs) is None:
            raise UsageError(f"{source}: {f.name} is given but {needs} is "
                             f"{'null' if needs in data else 'absent'}; {f.name} means nothing "
                             f"without it, so give {needs} too (or leave {f.name} out)")
    if "rope_theta" in data and data.get("positions", "rope") != "rope":
        raise UsageError(f"{source}: rope_theta is given but positions is "
                         f"{_short(data.get('positions'))}; RoPE's theta needs positions = rope")
    data = dict(data)
    for key in ("layer_types", "dense_layers"):  # JSON lists -> the spec's tuples
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    if "d_ff" not in data:
        mlp = data.get("mlp", "swiglu")
        kind = MLPS[mlp] if _one_of(mlp, MLPS) else None
        if kind is None:
            raise UsageError(f"{source}: mlp must be one of {', '.join(MLPS)}, got {_short(data['mlp'])}")
        d = data["d_model"]
        if isinstance(d, bool) or not isinstance(d, int) or not 0 < d <= MAX_SIZE:
            raise UsageError(f"{source}: d_model must be a positive integer up to 10^12, got {_short(d)}")
        data["d_ff"] = kind.default_d_ff(d)
    try:
        return ModelConfig(**data)
    except UsageError as e:
        raise UsageError(f"{source}: {e}") from None


MAX_DEPTH = 64  # objects and lists within each other: a config.json nests a few levels


def check_depth(data, source: str) -> None:
    """UsageError for a value nested deeper than MAX_DEPTH (walked without recursion): the
    copies and comparisons downstream recurse, and 990 levels in task_specific_params ended
    in a RecursionError, exit 3 (issue 32)."""
    todo = [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise UsageError(f"{source} nests objects or lists more than {MAX_DEPTH} levels "
                             f"deep; a config holds a few levels, so correct the file")
        if isinstance(value, Mapping):
            todo.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            todo.extend((v, depth + 1) for v in value)


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json's object_pairs_hook: an object whose keys repeat is refused."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def read_json(path: str | Path) -> tuple[dict, str]:
    """A JSON file's object and how to name the file in messages; UsageError otherwise."""
    path = Path(path)
    text = repr(str(path))  # a long path keeps its end: the file's name
    source = f"config file {escape(text) if len(text) <= 80 else '…' + escape(text[-79:])}"
    raw = read_small_file(path, source, MAX_CONFIG_BYTES)  # not a FIFO, a device, a folder
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"{source} is not UTF-8 text (byte {e.start:,})") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:  # was: the last one silently won (issue 23)
        raise UsageError(f"{source} has the key {_short(e.args[0], 60)} twice in one object; "
                         "keep one (JSON leaves open which of the two counts)") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{source} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # a 5,000-digit integer; nesting 100,000 deep
        raise UsageError(f"{source} cannot be read as JSON: {_short(str(e), 80)}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source} must hold a JSON object, got {type(data).__name__}")
    check_depth(data, source)
    return data, source
