"""The page's questions and fields, read from the CLI's own parsers; a query -> the CLI's argv.

A field is one option of a subcommand's argparse parser (its help, choices, default and
group), named in the query string by its long flag without the dashes, '-' -> '_'
(--kv-dtype -> kv_dtype). So a flag a subcommand gains appears on the page by itself,
and the page passes exactly what the CLI accepts: never a second list of choices. Names
without choices come from the library's registries (SUGGEST: GPUs, weight schemes,
presets) as suggestions; the CLI still decides.
"""
from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass, field
from importlib import import_module
from typing import Callable, Mapping

CHECK, TRI, CHOICE, TEXT = "check", "tri", "choice", "text"
YES, NO = "yes", "no"
TRUE_WORDS = ("1", "on", "true", "yes")

# Options the page sets itself or leaves out: the output options (the page asks for text
# and JSON), --list, --config (a textarea: config_path), --verify, --brief and
# --compare-formulas (other outputs, and a cross-check is seconds to minutes of torch).
SKIPPED = frozenset({"help", "list", "format", "output", "config", "verify", "brief",
                     "compare_formulas", "version",
                     "checkpoint"})  # a path or hub id: the server's files, or its network


# An option that names a file is not a field: a page (a Space) must not read or write the
# server's files. --config is the page's textarea, written to a private folder (answer.py).
FILE_METAVARS = frozenset({"FILE", "PATH", "DIR", "FOLDER"})


def _main_parser():
    return import_module("accounting.cli.main").parser()


def _subparser(name: str) -> Callable[[], argparse.ArgumentParser]:
    return lambda: import_module(f"accounting.cli.{name}").parser()


@dataclass(frozen=True)
class Question:
    key: str
    title: str
    prefix: tuple[str, ...]  # the subcommand
    fixed: tuple[str, ...]  # flags the page always passes
    parser: Callable[[], argparse.ArgumentParser]
    defaults: Mapping[str, str] = field(default_factory=dict)  # the page's starting values
    open_groups: tuple[str, ...] = ()  # argparse group titles shown open (prefix match)
    one_gpu: bool = False  # a change to this question drops the many-GPU layout's inputs


QUESTIONS: dict[str, Question] = {q.key: q for q in (
    Question("flops", "FLOPs and where they go", (), ("--no-verify",), _main_parser,
             {"ctx": "16384"}, ("workload",)),
    Question("plan", "Training plan (one GPU)", ("plan",), (), _subparser("plan"),
             {"gpu": "H100"}, ("hardware", "workload", "time", "training", "recipe"), True),
    Question("serve", "Serving plan", ("serve",), (), _subparser("serve"),
             {"gpu": "H100", "ctx": "8192"}, ("hardware", "weights", "workload")),
    Question("layouts", "Layouts for many GPUs", ("plan",), (), _subparser("plan"),
             {"gpu": "H100", "gpus": "8", "search": "1", "ctx": "4096", "precision": "bf16-mixed",
              "recompute": "full"},
             ("hardware", "workload", "many GPUs", "training", "recipe")),
)}
DEFAULT_QUESTION = "flops"
DEFAULT_MODEL = "gpt2-xl"


def _suggest() -> dict[str, list[str]]:
    """Names a text field may take, from the library's registries (suggestions only)."""
    from accounting.formats.schemes import SCHEMES
    from accounting.planning.gpus import GPUS, nicknames
    return {"gpu": [n for n, _ in nicknames()] + list(GPUS), "weights": list(SCHEMES)}


@dataclass(frozen=True)
class Field:
    name: str  # query parameter
    flag: str  # the CLI's long option
    kind: str
    help: str
    group: str
    choices: tuple[str, ...] = ()
    default: str = ""  # argparse's default, shown as a placeholder

    def argv(self, value: str) -> list[str]:
        value = value.strip()
        if not value:
            return []
        if self.kind == CHECK:
            return [self.flag] if value.lower() in TRUE_WORDS else []
        if self.kind == TRI:
            if value.lower() in TRUE_WORDS:
                return [self.flag]
            return ["--no-" + self.flag[2:]] if value.lower() in (NO, "0", "off", "false") else []
        return [f"{self.flag}={value}"]  # '=': a value starting with '-' stays a value


def _long(action: argparse.Action) -> str | None:
    longs = [s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")]
    return longs[0] if longs else None


def _field(action: argparse.Action, group: str, suggest: dict) -> Field | None:
    flag = _long(action)
    if flag is None:
        return None
    name = flag[2:].replace("-", "_")
    if name in SKIPPED or action.dest in SKIPPED:
        return None
    if str(action.metavar or "").upper() in FILE_METAVARS:  # never a path on the server's disk
        return None
    default = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS) else str(default)
    help_text = (action.help or "") if action.help != argparse.SUPPRESS else ""
    if isinstance(action, argparse._StoreTrueAction):
        return Field(name, flag, CHECK, help_text, group)
    if isinstance(action, argparse.BooleanOptionalAction):
        return Field(name, flag, TRI, help_text, group)
    if action.nargs == 0:  # store_const and the like: not a value a form gives
        return None
    if action.choices:
        return Field(name, flag, CHOICE, help_text, group,
                     tuple(str(c) for c in action.choices), shown)
    return Field(name, flag, TEXT, help_text, group, tuple(suggest.get(name, ())), shown)


def fields(q: Question) -> list[Field]:
    """The question's fields in the parser's order, each with its --help group's title."""
    p, suggest, out, seen = q.parser(), _suggest(), [], set()
    for g in p._action_groups:  # argparse keeps each option's group only here
        for action in g._group_actions:
            f = _field(action, g.title or "options", suggest)
            if f is not None and f.name not in seen:
                seen.add(f.name)
                out.append(f)
    return out


def presets() -> list[str]:
    from accounting.architecture.presets import PRESETS
    return list(PRESETS)


def question_of(query: Mapping[str, str]) -> Question:
    return QUESTIONS.get(query.get("question", ""), QUESTIONS[DEFAULT_QUESTION])


def with_defaults(query: Mapping[str, str]) -> dict[str, str]:
    """The query, with the question's starting values where the page opens bare
    (no model and no config: nothing asked yet)."""
    q = question_of(query)
    out = dict(query)
    out["question"] = q.key
    if "model" not in query and not query.get("config", "").strip():
        out["model"] = DEFAULT_MODEL
        for k, v in q.defaults.items():
            out.setdefault(k, v)
    return out


SWITCH = "switch"  # set by the page's script when the question changes


def switched(query: Mapping[str, str]) -> dict[str, str]:
    """After a change of question: the query with the new question's starting values for
    the inputs it does not give (a GPU for a plan), the switch mark dropped, empties left out."""
    q = question_of(query)
    out = {k: v for k, v in query.items() if v and k != SWITCH}
    if q.one_gpu:  # the layout's flags, as `plan` lists them (cli/plan_parallel.py)
        from accounting.cli.plan_parallel import LAYOUT_FLAGS
        for k in ("gpus",) + tuple(LAYOUT_FLAGS):
            out.pop(k, None)
    for k, v in q.defaults.items():
        out.setdefault(k, v)
    return out


CONFIG_NAME = "config.json"  # how the page's pasted config is named in argv and messages


def argv(query: Mapping[str, str], config_path: str | None = None, json: bool = False,
         overrides: Mapping[str, str] | None = None, fmt: str | None = None) -> list[str]:
    """The CLI's argv for a query (`config_path`: where the pasted config was written;
    json, or fmt: the output format, which goes before the model: after a '--' it would be
    a positional)."""
    q = question_of(query)
    values = {**query, **(overrides or {})}
    out = list(q.prefix) + list(q.fixed)
    for f in fields(q):
        out += f.argv(values.get(f.name, ""))
    if config_path:
        out.append(f"--config={config_path}")
    if json or fmt:
        out.append(f"--format={fmt or 'json'}")
    model = values.get("model", "").strip()
    if model:
        out += (["--", model] if model.startswith("-") else [model])
    return out


def command(args: list[str], config_path: str | None = None) -> str:
    """The command a person types for the same answer."""
    shown = [a.replace(config_path, CONFIG_NAME) if config_path else a for a in args]
    return "python -m accounting " + shlex.join(shown)


# What the page bounds beyond the CLI: a layout search grows with the divisors of --gpus
# (4,096 GPUs: about 1 s; 720,720 or 10^6: about 9 s on one core here), and one run
# holds the page's lock. 4,096 is also `serve --gpus`'s own bound.
MAX_SEARCH_GPUS = 4096


def page_refusal(query: Mapping[str, str]) -> tuple[str, str] | None:
    """(field, one line) for an input the page bounds tighter than the CLI, else None."""
    gpus = query.get("gpus", "").strip().replace(",", "").replace("_", "")
    if query.get("search", "").lower() in TRUE_WORDS and gpus.isdigit() and \
            int(gpus) > MAX_SEARCH_GPUS:
        return "gpus", (f"the page searches the layouts of at most {MAX_SEARCH_GPUS:,} GPUs "
                        f"(a larger one takes seconds while the page waits); run the command below in a terminal")
    return None


_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")
_KEYWORDS = (("unknown model", "model"), ("no model given", "model"), ("model name", "model"),
             ("unknown GPU", "gpu"), ("weight scheme", "weights"), (CONFIG_NAME, "config"))


def field_of(message: str, names: set[str]) -> str | None:
    """The field a CLI error line is about: a phrase the library's messages use (first), else the first --flag it names that is
    a field; None: the whole form."""
    for phrase, name in _KEYWORDS:
        if phrase in message:
            return name
    for m in _FLAG.finditer(message):
        name = m.group(1).removeprefix("no-").replace("-", "_")
        if name in names:
            return name
        if name == "config":
            return "config"
    return None
