"""`python -m accounting`: thin argument handling over the library. main(argv) -> int.

    python -m accounting gpt2-xl --ctx 16384        # where the FLOPs and parameters go
    python -m accounting gpt2-xl --compare-formulas # Kaplan, Chinchilla, Megatron, PaLM, 6N
    python -m accounting report                     # regenerate reports/gpt2_sizes.md
    python -m accounting plan gpt2-xl --gpu A100    # memory, batch that fits, time to train

Exit status: 0 ok, 1 the cross-check found a disagreement, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from importlib import import_module

from accounting import export, render, views
from accounting.analysis import analyze
from accounting.args import (
    Parser,
    add_model_args,
    add_output_args,
    config_from_args,
    emit,
    positive_int,
)
from accounting.errors import UsageError
from accounting.records import EXECUTED, PHASES, USEFUL

# Subcommands live in their own modules, imported only when used.
SUBCOMMANDS = {"report": "accounting.reporting.cli", "plan": "accounting.planning.cli"}


def parser() -> Parser:
    p = Parser(prog="python -m accounting",
               description="Exact parameter, memory and FLOPs accounting of a decoder-only "
                           "Transformer LM (the CS336 ch. 3 architecture and the variants of "
                           "GPT-2, Llama, Qwen and OLMo), cross-checked on the real model. Subcommands: 'report' (GPT-2 size report), 'plan' (capacity "
                           "planning); see 'python -m accounting plan --help'.")
    add_model_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--ctx", type=positive_int("--ctx"), metavar="T",
                   help="sequence length analysed (default: context_length; longer means this "
                        "architecture at T tokens)")
    w.add_argument("--batch", type=positive_int("--batch"), default=1, metavar="B",
                   help="batch size (default 1)")
    w.add_argument("--pass", dest="phase", choices=tuple(PHASES), default="forward",
                   help="forward (default), backward, or train = forward + backward")
    w.add_argument("--count", dest="counting", choices=(EXECUTED, USEFUL), default=EXECUTED,
                   help="attention-core FLOPs in totals and shares: executed (full T×T, what the "
                        "model and FLOP counters do; default) or useful (T(T+1)/2 causal pairs); "
                        "both always appear in the breakdown")
    v = p.add_argument_group("cross-check")
    v.add_argument("--verify", action=argparse.BooleanOptionalAction, default=None,
                   help="run the real model on the meta device under fvcore and FlopCounterMode "
                        "and compare (default: on when torch and fvcore are importable)")
    add_output_args(p)
    p.add_argument("--brief", action="store_true",
                   help="text/markdown: only the component breakdown, totals and closed forms")
    p.add_argument("--compare-formulas", action="store_true",
                   help="the literature's FLOP formulas (Kaplan, Chinchilla, Megatron-LM, "
                        "Korthikanti, PaLM, nanoGPT, 6N) for this config and workload, beside "
                        "the exact count, reconciled term by term; forward and training "
                        "(--pass and --count do not apply); analytic unless --verify is given")
    return p


def _crosscheck(verify: bool | None):
    """The cross-check module if it should run, else None (with a note when it can't)."""
    if verify is False:
        return None
    from accounting.optional import missing
    absent = missing()
    if absent:
        if verify:
            raise UsageError(f"--verify needs {absent}, which is not importable; install it "
                             f"(pip install -e .) or pass --no-verify")
        print(f"note: cross-check skipped ({absent} not importable); analytic counts only",
              file=sys.stderr)
        return None
    return import_module("accounting.crosscheck")


def analyse_main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    if ns.list:
        emit(render.text([views.presets_table()]) if ns.format != "markdown"
             else render.markdown([views.presets_table()]), ns.output)
        return 0
    config = config_from_args(ns)
    if ns.compare_formulas:
        return compare_main(ns, config)
    a = analyze(config, ns.ctx, ns.batch, ns.phase, ns.counting)
    check = _crosscheck(ns.verify)
    stream = ns.output is None and ns.format in ("text", "markdown")
    body = {"text": lambda t: render.text(t), "markdown": lambda t: render.markdown(t)}
    result = None
    if ns.format in body:
        first = body[ns.format](views.tables(a, brief=ns.brief))
        if stream:  # the analytic answer appears at once; the cross-check follows
            emit(first, None)
        if check is not None:
            result = check.cross_check(a)
            second = "\n" + body[ns.format](result.tables())
            if stream:
                emit(second, None)
            else:
                first += second
        if not stream:
            emit(first, ns.output)
    elif ns.format == "csv":
        if check is not None:
            result = check.cross_check(a)
        emit(export.to_csv(a), ns.output)
    else:
        data = export.to_dict(a)
        if check is not None:
            result = check.cross_check(a)
            data["cross_check"] = result.to_dict()
        emit(json.dumps(data, indent=2, ensure_ascii=False) + "\n", ns.output)
    if result is not None and not result.agrees:
        print(f"accounting: cross-check DISAGREES: {result.summary()}", file=sys.stderr)
        return 1
    return 0


def compare_main(ns, config) -> int:
    """--compare-formulas: the literature table first, reconciliations after. The cross-check
    (of the training pass the exact counts come from) runs only when --verify is given."""
    from accounting import literature, literature_views
    c = literature.compare(config, ns.ctx, ns.batch)
    check = _crosscheck(True) if ns.verify else None
    result = check.cross_check(analyze(config, ns.ctx, ns.batch, "train")) if check else None
    if ns.format in ("text", "markdown"):
        tables = literature_views.tables(c) + (result.tables() if result else [])
        emit((render.text if ns.format == "text" else render.markdown)(tables), ns.output)
    elif ns.format == "csv":
        emit(export.csv_text(literature_views.csv_rows(c), literature_views.CSV_COLUMNS), ns.output)
    else:
        data = {"config": export.config_dict(config), **literature_views.to_dict(c)}
        if result is not None:
            data["cross_check"] = result.to_dict()
        emit(json.dumps(data, indent=2, ensure_ascii=False) + "\n", ns.output)
    if result is not None and not result.agrees:
        print(f"accounting: cross-check DISAGREES: {result.summary()}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv and argv[0] in SUBCOMMANDS:
            return import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
        return analyse_main(argv)
    except UsageError as e:
        print(f"accounting: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help and --version exit through argparse
        return e.code if isinstance(e.code, int) else 0
    except BrokenPipeError:  # `python -m accounting ... | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("accounting: interrupted", file=sys.stderr)
        return 130
