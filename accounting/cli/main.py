"""`python -m accounting`: thin argument handling over the library. main(argv) -> int.

    python -m accounting gpt2-xl --ctx 16384        # where the FLOPs and parameters go
    python -m accounting gpt2-xl --compare-formulas # Kaplan, Chinchilla, Megatron, PaLM, 6N
    python -m accounting report                     # regenerate reports/gpt2_sizes.md
    python -m accounting plan gpt2-xl --gpu A100    # memory, batch that fits, time to train
    python -m accounting serve meta-llama/Llama-3.1-8B --gpu H100 --ctx 8192  # serving
    python -m accounting web                        # the same, as a local web page

Exit status: 0 an answer, 1 the cross-check found a disagreement, 2 bad input or an
unusable environment (one line on stderr), 3 an internal error (a bug), 128 + N ended by
signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
Every exception is decided in accounting/runtime/errors.py (outcome); main() never raises.
"""
from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module
from typing import NoReturn

from accounting.cli import args as cli_args
from accounting.cli import checkpoint
from accounting.runtime import errors, names, safe_io
from accounting.cli import summary
from accounting.present import export, views
from accounting.tables import output
from accounting.tables.data import csv_text
from accounting.analysis.workload import analyze
from accounting.cli.args import (Parser, add_model_args, add_output_args, config_from_args,
                                 hf_source_from_args, positive_int)
from accounting.runtime.errors import UsageError
from accounting.ledger.records import BACKWARD, EXECUTED, FORWARD, PHASES, TRAIN, USEFUL

# Subcommands live in their own modules, imported only when used.
SUBCOMMANDS = {"report": "accounting.cli.report", "plan": "accounting.cli.plan",
               "serve": "accounting.cli.serve", "web": "accounting.web.command"}


def parser() -> Parser:
    p = Parser(prog="python -m accounting",
               description="Exact parameter, memory and FLOPs accounting of a decoder-only "
                           "Transformer LM (the CS336 ch. 3 architecture and the variants of "
                           "GPT-2, Llama, Qwen and OLMo), cross-checked on the real model. Subcommands: 'report' (GPT-2 size report), 'plan' (capacity "
                           "planning), 'serve' (serving capacity: weights as stored, the "
                           "engine's KV pool, concurrency, TTFT, TPOT), 'web' (a local web page over "
                           "them); see 'python -m "
                           "accounting plan --help'.")
    add_model_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--ctx", type=positive_int("--ctx"), metavar="T",
                   help="sequence length analysed (default: context_length; longer means this "
                        "architecture at T tokens; at most 10^15)")
    w.add_argument("--batch", type=positive_int("--batch"), default=1, metavar="B",
                   help="batch size (default 1; at most 10^15)")
    w.add_argument("--pass", dest="phase", choices=tuple(PHASES), default=FORWARD,
                   help="forward (default), backward, or train = forward + backward")
    w.add_argument("--count", dest="counting", choices=(EXECUTED, USEFUL), default=EXECUTED,
                   help="attention-core FLOPs in totals and shares: executed (full T×T, what the "
                        "model and FLOP counters do; default) or useful (T(T+1)/2 causal pairs); "
                        "both always appear in the breakdown")
    add_image_args(w)
    add_train_vision_args(w)  # with --verify under --pass train/backward: what requires grad
    v = p.add_argument_group("cross-check")
    v.add_argument("--verify", action=argparse.BooleanOptionalAction, default=None,
                   help="run the real model on the meta device under fvcore and FlopCounterMode "
                        "and compare (default: on when torch and fvcore are importable, except "
                        "with --brief; up to 1,024 layers, 256 by default, and tensors torch "
                        "can size)")
    add_output_args(p)
    p.add_argument("--brief", action="store_true",
                   help="text/markdown: the answer, the component breakdown, totals and closed "
                        "forms; no cross-check unless --verify is given")
    p.add_argument("--compare-formulas", action="store_true",
                   help="the literature's FLOP formulas (Kaplan, Chinchilla, Megatron-LM, "
                        "Korthikanti, PaLM, nanoGPT, 6N) for this config and workload, beside "
                        "the exact count, reconciled term by term; forward and training "
                        "(--pass and --count do not apply); analytic unless --verify is given")
    return p


def add_train_vision_args(group) -> None:
    """Which of a vision-language model's tower trains (issue 41): plan's memory and step,
    and the main command's --verify under --pass train/backward."""
    group.add_argument("--train-vision", action="store_true",
                       help="a vision-language config.json: train its vision tower and "
                            "projector too (their gradients, optimizer state, and the "
                            "activations they save for the images each sequence holds: "
                            "--image/--images, per sequence). Default: frozen, LLaMA-Factory's "
                            "freeze_vision_tower and freeze_multi_modal_projector defaults, its "
                            "weights alone beside the language model's step")
    group.add_argument("--train-projector", action="store_true",
                       help="a vision-language config.json: train its projector (merger) with "
                            "the tower frozen, as LLaVA's stage 1 (--tune_mm_mlp_adapter) and "
                            "LLaMA-Factory's freeze_multi_modal_projector: false do: the "
                            "projector's gradients and optimizer state, the activations it "
                            "saves for the images; the tower's forward alone, nothing saved "
                            "in it")


def vision_training(ns, tower: bool = True):
    """--train-vision (True: tower and projector), --train-projector ("projector": the
    projector alone, planning/vision_train.py PROJECTOR) or neither (False); refused in one
    line together, or without a tower (`tower` False)."""
    if ns.train_vision and ns.train_projector:
        raise UsageError("--train-vision trains the tower and the projector, --train-projector "
                         "the projector alone: give one of them")
    trained = "projector" if ns.train_projector else ns.train_vision
    if trained and not tower:
        raise UsageError(f"{'--train-projector' if ns.train_projector else '--train-vision'} "
                         f"needs a vision-language config.json whose tower the tool reads; "
                         f"drop it for a language model")
    return trained


def add_image_args(group) -> None:
    """Images as a workload of a vision-language config.json (issue 41)."""
    group.add_argument("--image", action="append", metavar="HxW",
                       help="an image of H×W pixels (repeatable): its tokens as the model's "
                            "processor makes them, and the vision encoder's FLOPs; a "
                            "vision-language config.json only")
    group.add_argument("--images", type=positive_int("--images", 10**4, "10,000"), metavar="N",
                       help="N images of the --image size (default: the tower's own input "
                            "size, where it resizes every image)")
    add_pixel_args(group)


def add_pixel_args(group) -> None:
    """Qwen's image processor bounds (analysis, and serve: vLLM's mm_processor_kwargs)."""
    group.add_argument("--min-pixels", type=positive_int("--min-pixels", 10**10, "10^10"), metavar="N",
                       help="Qwen's image processor: min_pixels (default: the family's "
                            "published preprocessor_config.json, 3,136 for Qwen2/2.5-VL, "
                            "65,536 for Qwen3-VL and Qwen3.5)")
    group.add_argument("--max-pixels", type=positive_int("--max-pixels", 10**10, "10^10"), metavar="N",
                       help="Qwen's image processor: max_pixels (default 12,845,056 for "
                            "Qwen2/2.5-VL, 16,777,216 for Qwen3-VL and Qwen3.5)")
    group.add_argument("--processor", metavar="FILE",
                       help="the model's preprocessor_config.json: the image processor's "
                            "settings config.json does not carry (Mistral 3's longest edge, "
                            "Idefics3/SmolVLM's resize and splitting, InternVL's tiles, Gemma "
                            "3's pan-and-scan, Qwen's pixel bounds), read over the assumed ones "
                            "the answer names")
    group.add_argument("--pan-and-scan", action="store_true",
                       help="Gemma 3's image processor: do_pan_and_scan (off by default, as "
                            "Gemma3Processor has it): an image of aspect ratio 1.2 or more "
                            "also runs as 2 to 4 crops, mm_tokens_per_image tokens each")


def processed(ns, tower):
    """The tower with --processor's preprocessor_config.json read over its assumed
    settings (accounting/architecture/processor.py), and --pan-and-scan over them;
    unchanged without the flags."""
    given = [f for f, on in (("--processor", getattr(ns, "processor", None)),
                             ("--pan-and-scan", getattr(ns, "pan_and_scan", False))) if on]
    if not given:
        return tower
    if tower is None:
        raise UsageError(f"{given[0]} needs a vision-language config.json whose tower the "
                         f"tool reads; drop it for a language model")
    from accounting.architecture import processor
    if ns.processor:
        tower = processor.apply(tower, processor.load(ns.processor),
                                f"--processor {ns.processor}")
    return processor.pan_and_scan(tower) if getattr(ns, "pan_and_scan", False) else tower


def pixel_bounds(ns, tower) -> tuple[int, int] | None:
    """--min-pixels/--max-pixels as Qwen's processor's (min_pixels, max_pixels), None when
    neither is given; refused in one line on a tower that resizes every image, or none."""
    if not (ns.min_pixels or ns.max_pixels):
        return None
    if tower is None:
        raise UsageError("--min-pixels/--max-pixels need a vision-language config.json whose "
                         "tower the tool reads; drop them for a language model")
    if tower.pixels is None:
        raise UsageError(f"--min-pixels and --max-pixels set Qwen's image processor; "
                         f"{tower.family} resizes every image to {tower.image_size}²")
    pixels = (ns.min_pixels or tower.pixels[0], ns.max_pixels or tower.pixels[1])
    if pixels[0] > pixels[1]:
        raise UsageError(f"--min-pixels {pixels[0]:,} is above --max-pixels {pixels[1]:,}")
    return pixels


def vision_workload(ns, hf):
    """The tower and the images of a vision-language config.json (None: a language model;
    image flags on one are refused)."""
    asked = ns.image or ns.images is not None or ns.min_pixels or ns.max_pixels or \
        ns.processor or getattr(ns, "pan_and_scan", False)
    tower = getattr(hf, "vision", None)
    if tower is None:
        if asked:
            raise UsageError("--image/--images need a vision-language config.json whose tower "
                             "the tool reads (qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe, "
                             "gemma3, llava); drop them "
                             "for a language model")
        return None
    from dataclasses import replace
    from accounting.analysis import images
    tower = processed(ns, tower)  # --processor's file; --min-pixels/--max-pixels over it
    pixels = pixel_bounds(ns, tower)
    return replace(images.workload(tower, ns.image, ns.images, pixels),
                   processor=ns.processor or "",
                   over="--pan-and-scan" if getattr(ns, "pan_and_scan", False) else "")


def _crosscheck(verify: bool | None, a=None, why_not: str = "--no-verify", hf=None):
    """(the cross-check module, None) if it should run for analysis `a`, else (None, the
    reason it does not, for the answer's cross-check line). With `hf` (the config.json the
    config came from), a value transformers' config class refuses is exit 2 here, before
    any work, not a failed check later."""
    if verify is False:
        return None, f"not run ({why_not})"
    from accounting.runtime.optional import missing
    absent = missing()
    if absent:
        if verify:
            raise UsageError(f"--verify needs {absent}, which is not importable; install it "
                             f"(pip install -e .) or pass --no-verify")
        safe_io.say(f"note: cross-check skipped ({absent} not importable); analytic counts only")
        return None, f"skipped ({absent} not importable)"
    if a is not None:
        from accounting.analysis import verifiable
        problem = verifiable.problem(a.config, a.seq, a.batch, explicit=bool(verify))
        if problem and verify:
            raise UsageError(f"--verify: {problem}; drop --verify for the analytic counts")
        if problem:
            safe_io.say(f"note: cross-check skipped: {problem}")
            return None, "skipped (see the note on stderr)"
    module = import_module("accounting.crosscheck")
    if hf is not None and a is not None:
        refused = module.refusal(a, hf)
        if refused:
            raise UsageError(f"{hf.origin}: transformers refuses it ({refused}); correct the "
                             f"value, or pass --no-verify for the analytic counts")
    if _whole_process:  # this process ends after the check: torch may be set up for good
        from accounting.crosscheck.measure import prepare_process
        prepare_process()
    return module, None


def _run_check(check, a, hf, vw, trained=False):
    """The cross-check; with images (vw), transformers' whole model with them too (its
    tower frozen, trained or its projector alone under a backward: `trained`)."""
    if vw is not None and vw.images:
        return check.cross_check(a, hf=hf, vision=vw, vision_trained=trained)
    return check.cross_check(a, hf=hf)


def _check_tables(result) -> list:
    """The cross-check's tables, none when it did not run (its views import torch's side)."""
    if result is None:
        return []
    from accounting.crosscheck import views as crosscheck_views
    return crosscheck_views.tables(result)


def _check_summary(result) -> str:
    from accounting.crosscheck import views as crosscheck_views
    return crosscheck_views.summary(result)


def analyse_main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    if ns.list:
        output.emit(ns.format, ns.output, lambda: [views.presets_table()])
        return 0
    config = config_from_args(ns)
    if ns.compare_formulas:
        return compare_main(ns, config)
    hf = hf_source_from_args(ns)
    ck = checkpoint.check(ns, config, hf)
    vw = vision_workload(ns, hf)
    trained = vision_training(ns, vw is not None)
    if trained and BACKWARD not in PHASES[ns.phase]:
        raise UsageError(f"{'--train-projector' if ns.train_projector else '--train-vision'} "
                         f"sets what the whole model's cross-check trains in a backward pass: "
                         f"give --pass train (or backward) with it, or plan a step with "
                         f"'plan --config FILE ...'")
    a = analyze(config, ns.ctx, ns.batch, ns.phase, ns.counting)
    if vw is not None and vw.image_tokens > a.seq:
        raise UsageError(f"the images' {vw.image_tokens:,} tokens do not fit in T = {a.seq:,} "
                         f"(--ctx is the language model's whole sequence, image tokens "
                         f"included); give --ctx {vw.image_tokens:,} or more")
    verify = False if ns.brief and ns.verify is None else ns.verify
    check, skipped = _crosscheck(verify, a, "--brief: add --verify" if ns.brief and verify is False
                                 and ns.verify is None else "--no-verify", hf)
    result = None
    if ns.format in (output.TEXT, output.MARKDOWN):
        def show(tables):
            return output.tables_text(tables, ns.format, ns.output)
        from accounting.present import vision_views

        def answer(verdict=None):
            return vision_views.with_vision(
                checkpoint.answer(summary.analysis_answer(a), ck, verdict=verdict), vw,
                a.param_count, a.seq)
        details = _tables(a, hf, ns.brief)
        details[1:1] = vision_views.tables(vw)
        stream = ns.output in (None, "-")
        if stream and check is not None:  # the analytic answer at once; the verdict follows
            output.write(show([answer()]), None)
        if check is not None:
            result = _run_check(check, a, hf, vw, trained)
        tables = ([answer(summary.verdict_line(result, skipped))] + details
                  + _check_tables(result))
        text = show(tables)
        if stream and check is not None:
            head = show([answer()])
            text = text[len(head):] if text.startswith(head) else text
        output.write(text, ns.output)
    else:
        if check is not None:
            result = _run_check(check, a, hf, vw, trained)

        def data():
            from accounting.present import vision_views
            d = vision_views.add_to_dict(export.to_dict(a), vw)
            if result is not None:
                d["cross_check"] = result.to_dict()
            return checkpoint.add_json(d, ck)
        output.emit(ns.format, ns.output, None, data, lambda: export.to_csv(a))
    if result is not None and not result.agrees:
        safe_io.say(f"accounting: cross-check DISAGREES: {_check_summary(result)}")
        return 1
    return checkpoint.status(ck)


def compare_main(ns, config) -> int:
    """--compare-formulas: the literature table first, reconciliations after. The cross-check
    (of the training pass the exact counts come from) runs only when --verify is given."""
    from accounting.literature import compare as literature, views as literature_views
    c = literature.compare(config, ns.ctx, ns.batch)
    train = analyze(config, ns.ctx, ns.batch, TRAIN) if ns.verify else None
    check, _ = _crosscheck(True, train) if ns.verify else (None, None)
    result = check.cross_check(train) if check else None

    def data():
        d = {"config": export.config_dict(config), **literature_views.to_dict(c)}
        if result is not None:
            d["cross_check"] = result.to_dict()
        return d
    output.emit(ns.format, ns.output,
                lambda: literature_views.tables(c) + _check_tables(result), data,
                lambda: csv_text(literature_views.csv_rows(c), literature_views.CSV_COLUMNS))
    if result is not None and not result.agrees:
        safe_io.say(f"accounting: cross-check DISAGREES: {_check_summary(result)}")
        return 1
    return 0


def _tables(a, hf, brief: bool):
    """The analysis details; for a Hugging Face config, what was read from it, second."""
    tables = views.tables(a, brief=brief)
    if hf is not None and not brief:
        from accounting.present.hf_views import translation_table
        tables.insert(1, translation_table(hf))
    return tables


def program_name(argv0: str) -> str:
    """How the usage lines name the program: 'python -m accounting' when started as a
    module, else the console script's own name ('accounting')."""
    base = os.path.basename(argv0 or "")
    if not base or base in ("__main__.py", "-c", "-m") or base.endswith(".py"):
        return "python -m accounting"
    return base


def _run(argv: list[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        return import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
    return analyse_main(argv)


# True while main() runs as the whole process (argv None: the console script, python -m
# accounting): the cross-check may then set torch up for good (crosscheck/measure.py,
# prepare_process), as it does in its worker processes. Never in a caller's process.
_whole_process = False


def run() -> NoReturn:
    """The console script and `python -m accounting`: main() as the whole process, ended
    by safe_io.end_process (without torch's teardown where torch was imported)."""
    safe_io.end_process(main())


def main(argv: list[str] | None = None) -> int:
    """Run one command; every way it can end is an exit status (accounting/runtime/errors.py)."""
    global _whole_process
    old_program, process = cli_args.PROGRAM, argv is None
    if process:  # the console script or python -m accounting: the run is the process
        argv = sys.argv[1:]
        cli_args.PROGRAM = program_name(sys.argv[0] if sys.argv else "")
    _whole_process = process
    try:
        with safe_io.handling_signals(process_exit=process):
            try:
                with names.command_line():  # messages name flags, not API arguments
                    return _run(list(argv))
            except SystemExit as e:  # --help and --version exit through argparse
                code = e.code if isinstance(e.code, int) else 0
                return code if code in (0, 2) else 2
            except BaseException as e:
                if safe_io.interrupted() and not isinstance(e, (UsageError, KeyboardInterrupt)):
                    # a library turned Ctrl-C into its own exception (torch can): it is the
                    # interrupt that ended the run
                    e = errors.Interrupted(safe_io.interrupted())
                if errors.debugging() and not isinstance(e, (UsageError, KeyboardInterrupt)):
                    raise
                status, line = errors.outcome(e)
                safe_io.say(line)
                return status
    finally:
        cli_args.PROGRAM, _whole_process = old_program, False
