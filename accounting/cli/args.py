"""Argument parsing shared by the subcommands: one-line errors, configs from flags, output.

Every parse error becomes a UsageError, which cli.main prints on one line with exit 2.
"""
from __future__ import annotations

import argparse
import re

from accounting.tables import output
from accounting.runtime import safe_io
from accounting.analysis.workload import MAX_WORKLOAD
from accounting.architecture import fields as fields_meta
from accounting.architecture.config import (LAYER_TYPES, MAX_CONFIG_BYTES, MAX_LAYERS, MAX_NAME, MAX_SIZE, MLPS,
                                    ModelConfig)
from accounting.architecture.hf_config import supported_types
from accounting.architecture.loaders import read_config
from accounting.architecture.presets import PRESETS, get_preset
from accounting.hub.cache import is_repo_id
from accounting.runtime.errors import UsageError, shorten

FORMATS = output.FORMATS  # the one output path's (accounting/tables/output.py)
PROGRAM = "python -m accounting"  # how the usage lines name the program
LIMITS = (f"Limits, checked before any work: the spec's sizes (every N flag from --vocab-size "
          f"to --v-head-dim) up to 10^12, --num-layers up to {MAX_LAYERS:,}; --rope-theta, "
          f"--norm-eps, --routed-scaling-factor, --capacity-factor up to 10^18; counts (--ctx, "
          f"--batch, --steps, --tokens, --position) up "
          f"to 10^15; decimal numbers (--mfu, --margin, --gpu-flops, --gpu-bw) of at most 100 "
          f"characters with exponents within ±100; --gpu-mem up to 10^18 bytes; config files up "
          f"to {MAX_CONFIG_BYTES // 2**20} MiB, names up to {MAX_NAME} characters. ")
EXIT_STATUS = ("Exit status: 0 an answer, 1 the cross-check disagrees, 2 bad input or an "
               "unusable environment (one line on stderr), 3 an internal error (a bug: please "
               "report it), 128 + N ended by signal N: 130 interrupted (Ctrl-C), 143 SIGTERM, "
               "129 SIGHUP.")
_QUOTED = re.compile(r"'((?:[^'\\]|\\.){48,})'")
HELP_ALL = "--help-all"


_LIST_TAKES = frozenset({"help", "list", "format", "output", "version"})


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting, names the
    program as it was started (PROGRAM), states the input limits under --help, and checks
    the -o target as part of parsing (before any work)."""

    def __init__(self, *args, prog: str | None = None, **kwargs):
        if prog is not None and prog.startswith("python -m accounting"):
            prog = PROGRAM + prog[len("python -m accounting"):]
        kwargs.setdefault("epilog", LIMITS + EXIT_STATUS)
        super().__init__(*args, prog=prog, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        message = _QUOTED.sub(lambda m: shorten(m.group(1), 48), message)
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def format_help(self) -> str:
        """--help: the question's own flags first, the model's after them, and the spec's
        per-field flags (one per field of ModelConfig, overriding a preset or a config) left
        to --help-all, with one line that says so. The parser itself is not reordered: the
        web form reads its groups in their own order (accounting/web/form.py)."""
        spec = [a for a in self._actions if getattr(a, "spec_flag", False)]
        model = {g.title for g in self._action_groups} & set(fields_meta.GROUPS)
        saved = (list(self._action_groups), [(a, a.help) for a in spec],
                 [(g, g.description) for g in self._action_groups])
        own = self._action_groups[:2]  # argparse's positional arguments and options
        self._action_groups = own + [g for g in self._action_groups[2:] if g.title not in model] \
            + [g for g in self._action_groups[2:] if g.title in model]
        if spec and not getattr(self, "help_all", False):
            for a in spec:
                a.help = argparse.SUPPRESS
            first = next(g for g in self._action_groups if g.title in model)
            first.description = (
                f"The architecture's own flags, one per field of the spec ({len(spec)}: "
                f"{spec[0].option_strings[0]} ... {spec[-1].option_strings[0]}), each overriding "
                f"the preset or the config file, are listed by {HELP_ALL} (and in docs/cli.md, "
                f"'The spec's flags').")
        try:
            return super().format_help()
        finally:
            self._action_groups = saved[0]
            for a, text in saved[1]:
                a.help = text
            for g, text in saved[2]:
                g.description = text

    def _print_message(self, message: str, file=None) -> None:
        # --help and --version: through safe_io, so that an ASCII-only stdout gets ASCII
        # spellings and a closed one is a one-line error, not a traceback
        if message:
            safe_io.write_stdout(message)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        ns = super().parse_args(args, namespace)
        if getattr(ns, "list", False):
            self._list_alone(ns)
        if getattr(ns, "output", None) is not None:
            target = safe_io.output_target(ns.output)
            source = getattr(ns, "config", None)
            if target is not None and source and safe_io.same_file(target, source):
                raise UsageError(f"-o {shorten(ns.output, 80)} is the --config file: the "
                                 f"answer would replace its own input; give another name")
        return ns

    def _list_alone(self, ns: argparse.Namespace) -> None:
        """--list lists the presets and exits: another argument (a model, --ctx) would be
        ignored silently (issue 32), so it is refused. The output's form and target may go."""
        for a in self._actions:
            if a.dest in _LIST_TAKES or getattr(ns, a.dest, a.default) == a.default:
                continue
            what = (a.option_strings[0] if a.option_strings else
                    f"the {a.dest} {shorten(getattr(ns, a.dest), 40)}")
            raise UsageError(f"--list lists the presets and exits, so {what} would be ignored; "
                             f"drop it (or drop --list)")


# An integer as the command line takes it: ASCII digits, optionally in thousands groups
# ('1,024', '1,000,000'). Not Python's int() syntax: '8_0' and '8,0' are no numerals a
# user means as 80 (issue 32), nor are other scripts' digits.
_INTEGER = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)$", re.ASCII)


def exact_number(flag: str, ok, must: str, kind: str = "number"):
    """An argparse type: a number read exactly and bounded (planning/compute.py's exact()),
    kept where ok(x), else "must be {must}, got TEXT" (the flag's one-line error)."""
    def parse(text: str):
        from accounting.planning.compute import exact
        from accounting.runtime.errors import UsageError, shorten
        try:
            x = exact(text, flag)
        except UsageError as e:
            raise argparse.ArgumentTypeError(
                str(e).removeprefix(flag + ": ").removeprefix(flag + " ")) from None
        if not ok(x):
            raise argparse.ArgumentTypeError(f"must be {must}, got {shorten(text)}")
        return x
    parse.__name__ = kind
    return parse


def integer_digits(text: str) -> str | None:
    """The sign and digits of an integer numeral (separators dropped), or None."""
    text = text.strip()
    return text.replace(",", "") if _INTEGER.match(text) else None


def positive_int(flag: str, maximum: int = MAX_WORKLOAD, limit_text: str = "10^15"):
    """An integer in [1, maximum], digits with optional thousands separators ('1,024')."""
    def parse(text: str) -> int:
        digits = integer_digits(text)
        if digits is None:
            raise argparse.ArgumentTypeError(
                f"must be a positive integer, got {shorten(text)}") from None
        if len(digits.lstrip("+-0")) > len(str(maximum)):
            raise argparse.ArgumentTypeError(
                f"must be at most {limit_text}, got a {len(digits.lstrip('+-0')):,}-digit number")
        value = int(digits)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {limit_text}, got {value:,}")
        return value
    parse.__name__ = "positive integer"
    return parse


def positive_float(flag: str, allow_zero: bool = False):
    """A finite float > 0 (or ≥ 0 with allow_zero)."""
    what = "non-negative" if allow_zero else "positive"

    def parse(text: str) -> float:
        try:
            if "_" in text or not text.isascii():  # float()'s Python syntax: '8_0', '８'
                raise ValueError
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {what} number, got {shorten(text)}") from None
        if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a {what} finite number, got {shorten(text)}")
        return value
    parse.__name__ = f"{what} number"
    return parse


def _int_list(flag: str, words: tuple[str, ...] = ()):
    """'0,1,2' -> (0, 1, 2); with `words`, 'local,global' -> ('local', 'global')."""
    def parse(text: str) -> tuple:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        if words:
            bad = [x for x in items if x not in words]
            if bad:
                raise argparse.ArgumentTypeError(f"must list {' or '.join(words)}, got {bad[0]!r}")
            return items
        digits = [integer_digits(x) for x in items]
        if any(d is None for d in digits):
            raise argparse.ArgumentTypeError(f"must list layer indices, got {shorten(text)}")
        return tuple(int(d) for d in digits)
    parse.__name__ = "list"
    return parse


_BIASES = ("qkv_bias", "out_bias", "mlp_bias")  # what --bias sets at once
_REQUIRED = ("vocab_size", "context_length", "num_layers", "d_model", "num_heads")


def _non_negative_int(flag: str):
    """An integer in [0, MAX_SIZE] (a count that may be zero: shared experts)."""
    positive = positive_int(flag, MAX_SIZE, "10^12")

    def parse(text: str) -> int:
        digits = integer_digits(text)
        if digits is not None and digits.lstrip("+-0") == "":
            return 0
        return positive(text)
    parse.__name__ = "non-negative integer"
    return parse


def _spec_flag(group, f, m) -> None:
    """One spec field's flag, from its metadata (accounting/architecture/fields.py)."""
    kw = {"dest": f.name, "help": m.help}
    if m.kind == fields_meta.SIZE:
        kw.update(type=positive_int(m.flag, MAX_SIZE, "10^12"), metavar="N")
    elif m.kind == fields_meta.COUNT:
        kw.update(type=_non_negative_int(m.flag), metavar="N")
    elif m.kind in (fields_meta.NUMBER, fields_meta.NUMBER0):
        kw.update(type=positive_float(m.flag, allow_zero=m.kind == fields_meta.NUMBER0), metavar="X")
    elif m.kind == fields_meta.CHOICE:
        kw.update(choices=tuple(m.choices))
        if len(",".join(m.choices)) > 40:  # argparse cannot break {a,b,…} in the usage line
            missing = [c for c in m.choices if c not in m.help]
            kw.update(metavar=f.name.upper(), help=m.help + (f"; also {', '.join(missing)}"
                                                              if missing else ""))
    elif m.kind == fields_meta.FLAG:
        kw.update(action=argparse.BooleanOptionalAction, default=None)
    elif m.kind == fields_meta.LAYERS:
        kw.update(type=_int_list(m.flag), metavar="0,1,…")
    elif m.kind == fields_meta.TYPES:
        kw.update(type=_int_list(m.flag, tuple(m.choices)), metavar="local,global,…")
    else:
        raise AssertionError(f"no flag kind {m.kind!r} for {f.name}")
    group.add_argument(m.flag, **kw).spec_flag = True  # listed by --help-all only


class _HelpAll(argparse.Action):
    """--help-all: --help with every flag, the spec's per-field ones included."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.help_all = True
        try:
            parser.print_help()
        finally:
            parser.help_all = False
        parser.exit()


def add_model_args(p: argparse.ArgumentParser, model_required: bool = False) -> None:
    # every preset, from the one list --list shows (was: a hand-written list that stopped at
    # Llama-3.1-8B, issue 32)
    p.add_argument("model", nargs=None if model_required else "?",
                   help="a preset (--list says what each is): " + ", ".join(PRESETS)
                        + "; or any hub id ORG/NAME, read from the Hugging Face cache "
                          "(HF_HUB_CACHE or HF_HOME/hub), else from the hub (config.json only)")
    p.add_argument("--list", action="store_true",
                   help="list the presets with their architecture and parameter count, and exit")
    p.add_argument(HELP_ALL, action=_HelpAll,
                   help="show this help with the architecture's flags too (one per spec field: "
                        "--num-layers, --num-kv-heads, --mlp, ...), and exit")
    groups = {name: p.add_argument_group(name) for name in fields_meta.GROUPS}
    groups[fields_meta.SIZES].add_argument(
        "--config", metavar="FILE",
        help="JSON object with vocab_size, context_length, num_layers, d_model, num_heads and "
             "optionally d_ff, rope_theta, name and the architecture fields below (their names "
             "with underscores), or a Hugging Face config.json (model_type: "
             + supported_types() + ")")
    groups[fields_meta.SIZES].add_argument(
        "--strict", action="store_true",
        help="--config: refuse every config.json key the Hugging Face table does not list, "
             "without judging it (by default such a key is judged by building transformers' "
             "model on the meta device with and without it: accepted, with a note, when "
             "nothing the tool counts changes)")
    from accounting.cli import checkpoint  # issue 42
    checkpoint.add_arg(groups[fields_meta.SIZES])
    for f, m in fields_meta.flagged(ModelConfig):
        _spec_flag(groups[m.group], f, m)
        if f.name == _BIASES[-1]:
            groups[m.group].add_argument("--bias", action=argparse.BooleanOptionalAction,
                                         default=None, help="all three kinds of bias at once "
                                                            "(GPT-2)").spec_flag = True


def _overrides(ns: argparse.Namespace) -> dict:
    """Every spec field's flag as given (None: not given); --bias sets the three biases."""
    out = {f.name: getattr(ns, f.name) for f, _ in fields_meta.flagged(ModelConfig)}
    for dest in _BIASES:
        value, flag = out[dest], "--" + dest.replace("_", "-")
        if ns.bias is not None and value is not None and value != ns.bias:
            raise UsageError(f"{'--bias' if ns.bias else '--no-bias'} contradicts "
                             f"{flag if value else '--no-' + flag[2:]}; give one of them")
        out[dest] = ns.bias if value is None else value
    return out


def _check_needs(overrides: dict, base: ModelConfig | None) -> None:
    """A flag whose field means nothing without another (a MoE option on a dense model)
    would change no count: refused, not silently ignored (before the config is built, so
    that the message names the flags; ModelConfig refuses it too, in its field names)."""
    for f, m in fields_meta.flagged(ModelConfig):
        needed_value = overrides.get(m.needs) if m.needs else None
        if needed_value is None and m.needs and base is not None:
            needed_value = getattr(base, m.needs)
        if m.needs and overrides.get(f.name) is not None and needed_value is None:
            needed = next(n.flag for g, n in fields_meta.flagged(ModelConfig) if g.name == m.needs)
            name = base.name if base is not None else "custom"
            if m.needs != "num_experts":
                raise UsageError(f"{m.flag} means nothing without {needed}, and {name} has "
                                 f"none; give {needed} too (or leave {m.flag} out)")
            raise UsageError(f"{m.flag} applies to a mixture of experts, and {name} has "
                             f"none; give {needed} too (or leave {m.flag} out)")


def config_from_args(ns: argparse.Namespace, drop: tuple[str, ...] = ()) -> ModelConfig:
    """The spec the flags name (`drop`: config.json keys another reader handles)."""
    overrides = _overrides(ns)
    if ns.model and ns.config:
        raise UsageError("give either a model name or --config FILE, not both")
    if ns.model and ns.model not in PRESETS and is_repo_id(ns.model):  # issue 42: a hub id
        from accounting.hub import resolve
        base, ns.hf_read, ns.hub_path = resolve.read(ns.model, None if ns.strict else judge_keys,
                                                     drop)
    elif ns.model:
        base = get_preset(ns.model)
    elif ns.config and str(ns.config).endswith(".gguf"):  # issue 42: llama.cpp's file
        from accounting.checkpoint.gguf_file import read_spec
        base, ns.hf_read = read_spec(ns.config, None if ns.strict else judge_keys)
    elif ns.config:
        base, ns.hf_read = read_config(ns.config, None if ns.strict else judge_keys, drop)
    else:
        missing = ["--" + f.replace("_", "-") for f in _REQUIRED if overrides[f] is None]
        if missing:
            raise UsageError("no model given: name a preset (see --list), pass --config FILE, or "
                             "give " + ", ".join(missing))
        base = None
    positions = overrides["positions"] or (base.positions if base else "rope")
    if ns.rope_theta is not None and positions != "rope":
        raise UsageError(f"--rope-theta is given but positions are {positions!r}; RoPE's theta "
                         f"needs --positions rope")
    _check_needs(overrides, base)
    if base is not None:
        config = base.with_overrides(**overrides)
    else:
        if overrides["d_ff"] is None:  # the MLP's default width
            overrides["d_ff"] = MLPS[overrides["mlp"] or "swiglu"].default_d_ff(overrides["d_model"])
            if overrides["d_ff"] > MAX_SIZE:
                raise UsageError(f"the default d_ff for d_model {overrides['d_model']:,} is "
                                 f"{overrides['d_ff']:,}, past the 10^12 limit; give --d-ff")
        config = ModelConfig(**{k: v for k, v in overrides.items() if v is not None})
    return config


def flag_table() -> list[str]:
    """The spec's flags as Markdown rows (flag | field | kind and bound | meaning), from the
    fields' metadata: the docs' table, generated (accounting/cli/generated.py)."""
    bounds = {fields_meta.SIZE: "integer, 1 to 10^12", fields_meta.COUNT: "integer, 0 to 10^12",
              fields_meta.NUMBER: "number > 0, finite", fields_meta.NUMBER0: "number ≥ 0, finite",
              fields_meta.FLAG: "--x / --no-x", fields_meta.LAYERS: "layer indices, comma-separated",
              fields_meta.TYPES: f"a layer kind per layer ({', '.join(LAYER_TYPES)}), "
                                 "comma-separated"}
    rows = ["| flag | spec field | value | meaning |", "| --- | --- | --- | --- |"]
    for f, m in fields_meta.flagged(ModelConfig):
        value = ", ".join(m.choices) if m.kind == fields_meta.CHOICE else bounds[m.kind]
        rows.append(f"| `{m.flag}` | `{f.name}` | {value} | {m.help} |")
    return rows


def hf_source_from_args(ns: argparse.Namespace):
    """The Hugging Face config.json the model came from (a shipped preset's, or --config's
    when it is in Hugging Face's format), else None: for the transformers cross-check and
    the table of what was read. Call after config_from_args (which reports bad input)."""
    from accounting.architecture import hf_config, presets
    if ns.model:
        return presets.hf_source(ns.model) or getattr(ns, "hf_read", None)
    if ns.config:
        if hasattr(ns, "hf_read"):  # read (and judged) once, by config_from_args
            return ns.hf_read
        return hf_config.load(ns.config, None if ns.strict else judge_keys)
    return None


def judge_keys(data, unknown: tuple, t, where: str) -> tuple:
    """hf_config.translate's judge for the CLI (not with --strict): keys in no list of the
    table, judged by building transformers' model with and without them
    (accounting/crosscheck/hf_keys.py); refused in one line where that cannot run here."""
    from importlib.util import find_spec
    from accounting.runtime.optional import missing
    absent = missing("or remove the key") or (None if find_spec("transformers") else
                                              "transformers")
    if absent:
        raise UsageError(f"{where}: unknown key(s) {', '.join(shorten(k, 30) for k in unknown)}: "
                         f"the tool judges a key its table does not list by building "
                         f"transformers' model with and without it, which needs {absent}, not "
                         f"importable here; install the hf extra (pip install -e '.[hf]') or "
                         f"remove the key")
    from accounting.crosscheck import transformers_version  # a broken install: named (issue 32)
    transformers_version("pass --strict to refuse the key without judging")
    from accounting.crosscheck.hf_keys import judge
    return judge(data, unknown, t, where)



def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default=output.TEXT,
                   help="text (default), markdown, csv or json (json holds exact integers)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE atomically (a temporary file beside it, then a rename; "
                        "its permissions kept) instead of stdout; FILE must be a regular file "
                        "or a new name, never a folder or a device; - is stdout")
