"""Behaviour lives in its records (issue 38, Must 1): the serving engines, the training stacks
and the optimizers are frozen records registered through accounting/registry.py, each
carrying what the planners ask of it (fields and functions), so that adding one is one
record in one file. No other module tests a name: a name of one of these registries written
as a string literal anywhere else in accounting/ fails here. The CLI's choices are the
registries' keys (`choices=list(ENGINES)`), not literals.

Read from the source (ast), not by importing: only string constants count, so docstrings,
comments and messages that mention a stack ("--stack megatron runs ...") do not; an f-string's
constant parts count only if one of them is a name on its own.
"""
from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from accounting.planning.optimizers import OPTIMIZERS
from accounting.planning.parallel.stacks import STACKS
from accounting.serving import engines

ROOT = Path(__file__).resolve().parents[1]

# registry -> (its table, the one module that may spell its names). The engines' table holds
# one record per engine and range of releases ("vllm-0.21"), each naming its engine ("vllm")
ENGINES = engines.REGISTRY
REGISTRIES = {
    "engine": (ENGINES, "accounting/serving/engines.py"),
    "stack": (STACKS, "accounting/planning/parallel/stacks.py"),
    "optimizer": (OPTIMIZERS, "accounting/planning/optimizers.py"),
}
# serve --engine: the engines of the records, and llama.cpp (planned by its own rules,
# serving/llamacpp.py, without a start-up record)
ENGINE_CHOICES = tuple(dict.fromkeys(r.engine for r in ENGINES.values())) + (engines.LLAMA_CPP,)

# The same spellings meaning something else, each counted (a new occurrence in one of these
# files fails too): "torch" the Python module and the cross-check's torch FlopCounterMode
# column; "megatron" the Megatron-LM formula of the literature (estimates.py's key);
# "megatron"/"torchtitan" the builder's implementations of the model (the code each stack
# runs, named in ledger/builder/common.py and chosen by the stack records); "adamw" the
# AdamW-update entry of the FLOPs (StepFlops.adamw, a JSON key).
OTHER_MEANINGS = Counter({
    ("accounting/runtime/safe_io.py", "torch"): 1,  # "torch" in sys.modules
    ("accounting/runtime/fork.py", "torch"): 1,  # sys.modules.get("torch")
    ("accounting/runtime/optional.py", "torch"): 1,  # the optional modules' names
    ("accounting/crosscheck/compare.py", "torch"): 1,  # TORCH: the FlopCounterMode column
    ("accounting/crosscheck/measure.py", "torch"): 1,
    ("accounting/crosscheck/result.py", "torch"): 1,
    ("accounting/crosscheck/views.py", "torch"): 1,
    ("accounting/reporting/crosscheck_view.py", "torch"): 1,
    ("accounting/ledger/builder/common.py", "megatron"): 1,  # the builder's implementations
    ("accounting/ledger/builder/common.py", "torchtitan"): 1,
    ("accounting/literature/compare.py", "megatron"): 2,  # the literature's formula key
    ("accounting/literature/estimates.py", "megatron"): 2,
    ("accounting/literature/memory_compare.py", "megatron"): 2,
    ("accounting/reporting/families.py", "megatron"): 1,
    ("accounting/reporting/style.py", "megatron"): 1,
    ("accounting/planning/export.py", "adamw"): 4,  # StepFlops.adamw's key
    ("accounting/planning/parallel/export.py", "adamw"): 1,
    # aiconfigurator-core's folder of vLLM's measured kernels (systems/data/<system>/<op>/vllm/),
    # a data path: the tables that time training's GEMMs (no engine is chosen by it)
    ("accounting/timing/tables.py", "vllm"): 1,
})


def names() -> dict[str, str]:
    """Every registered name -> its registry's module: the records' keys, and the engines'
    names (a record's `.engine`, and llama.cpp's)."""
    out = {name: module for table, module in REGISTRIES.values() for name in table}
    out.update({name: REGISTRIES["engine"][1] for name in ENGINE_CHOICES})
    return out


def literals(root: Path, known: dict[str, str]) -> Counter:
    """(file, name) -> how often a registered name is a string constant in a file of
    accounting/ other than its registry's module."""
    out = Counter()
    for path in sorted((root / "accounting").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value in known and known[node.value] != rel):
                out[rel, node.value] += 1
    return out


def test_no_module_tests_a_registered_name():
    found = literals(ROOT, names())
    extra = found - OTHER_MEANINGS
    assert not extra, ("a registered name written outside its registry (put the behaviour "
                       f"in the record, a field or a function): {dict(extra)}")


def test_the_scan_finds_a_planted_name(tmp_path):
    """A branch on a stack's name planted in a module is found; the registry's own module,
    a docstring and a message naming the stack are not."""
    pkg = tmp_path / "accounting" / "planning" / "parallel"
    pkg.mkdir(parents=True)
    (pkg / "stacks.py").write_text('TORCH = "torch"\n')
    (pkg / "plan.py").write_text('"""Plans the deepspeed stack."""\n'
                                 'def f(stack):\n'
                                 '    if stack.name == "deepspeed":\n'
                                 '        raise ValueError("--stack deepspeed plans ZeRO")\n')
    known = {"torch": "accounting/planning/parallel/stacks.py",
             "deepspeed": "accounting/planning/parallel/stacks.py"}
    assert literals(tmp_path, known) == Counter({("accounting/planning/parallel/plan.py",
                                                  "deepspeed"): 1})


@pytest.mark.parametrize("what", list(REGISTRIES))
def test_each_registry_refuses_a_second_record_of_a_name(what):
    from accounting.registry import registrar
    table, _ = REGISTRIES[what]
    first = next(iter(table.values()))
    copy = dict(table)
    with pytest.raises(ValueError, match="registered twice"):
        registrar(copy, what)(first)


@pytest.mark.parametrize("what", list(REGISTRIES))
def test_records_are_frozen(what):
    table, _ = REGISTRIES[what]
    record = next(iter(table.values()))
    assert dataclasses.is_dataclass(record)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.name = "renamed"


def test_the_cli_choices_are_the_registries():
    """--engine, --stack and --optimizer offer exactly the registered names."""
    from accounting.cli.plan import parser as plan_parser
    from accounting.cli.serve import parser as serve_parser
    choices = {a.dest: a.choices for p in (plan_parser(), serve_parser()) for a in p._actions
               if a.dest in ("engine", "stack", "optimizer")}
    assert list(choices["engine"]) == list(ENGINE_CHOICES) == list(engines.CHOICES)
    assert list(choices["stack"]) == list(STACKS)
    assert list(choices["optimizer"]) == list(OPTIMIZERS)


def test_gpu_records_take_keywords_only():
    """A card is written field by field (gpu_cards.py): 20 positional arguments cannot be
    misplaced silently."""
    from accounting.planning.gpus import GPU, GPUS
    card = GPUS["H100-SXM"]
    with pytest.raises(TypeError):
        GPU(*[getattr(card, f.name) for f in dataclasses.fields(GPU)])
    assert GPU(**{f.name: getattr(card, f.name) for f in dataclasses.fields(GPU)}) == card


def test_each_stack_names_the_module_that_emits_it():
    """A stack record's `emitter` is a module of planning/emit/ with a text(plan) writer, and
    `plan --emit` offers exactly the records' emitters (issue 42's targets: accelerate for
    torch's engines, and megatron, deepspeed, torchtitan's own)."""
    import importlib

    from accounting.cli.plan import parser as plan_parser
    emitters = [s.emitter for s in STACKS.values()]
    assert sorted(emitters) == ["accelerate", "deepspeed", "megatron", "torchtitan"]
    for name in emitters:
        assert callable(importlib.import_module(f"accounting.planning.emit.{name}").text)
    (emit,) = [a for a in plan_parser()._actions if a.dest == "emit"]
    assert list(emit.choices) == emitters


def test_each_engine_record_answers_what_the_other_modules_ask():
    """Every engine record carries its long-context switch (vllm/envs.py; SGLang's
    model_config.py), its launch program and the two disaggregated roles; its kernel tables
    are a folder of the installed aiconfigurator-core wheel (read from the wheel, when
    installed)."""
    from accounting.timing import tables
    switches = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
                "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"}
    for rec in ENGINES.values():
        assert rec.allow_long_env == switches[rec.engine]
        assert rec.launch_argv and callable(rec.launcher) and all(rec.disagg_roles)
        root = tables.root()
        if root is not None:
            assert (root / "data" / "h100_sxm" / "gemm" / rec.kernel_tables).is_dir()
