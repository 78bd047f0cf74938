"""Cross-check the analytic counts against counters run on the real model (meta device).

    from accounting import analyze, get_preset
    from accounting.crosscheck import cross_check, views
    result = cross_check(analyze(get_preset("gpt2-xl"), seq=16384))
    result.agrees, result.to_dict(), views.tables(result), views.summary(result)

Counters: fvcore's FlopCountAnalysis (with an exact aten::einsum handle, the stock one
kept for comparison where it can run), torch's FlopCounterMode (forward and backward),
an op counter (TorchDispatchMode) for the non-matmul FLOPs, and for a Hugging Face
config, transformers' own model of it (hf_counter.py). Imports torch and fvcore:
accounting.cli.main imports this package only for --verify.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from importlib.util import find_spec

from accounting.runtime import fork
from accounting.analysis.workload import Analysis
from accounting.crosscheck.compare import compare
from accounting.crosscheck.result import (Check, ComponentRow, CrossCheck, LayerCheck,
                                          LayerMismatch, NonMatmulRow)
from accounting.crosscheck.measure import Measurement, measure
from accounting.architecture.hf_config import TRANSFORMERS_VERSION, HFConfig, for_transformers
from accounting.runtime.errors import UsageError
from accounting.ledger.records import BACKWARD, PHASES


def cross_check(analysis: Analysis, fvcore: bool = True, stock: bool = True,
                hf: HFConfig | None = None, vision=None, vision_trained=False) -> CrossCheck:
    """The language model's cross-check (_cross_check); with `vision` (the images'
    analysis.images.VisionWorkload of a vision-language config.json), transformers' whole
    model is also run with those images and compared by component (hf_vision.py,
    vision_check.py), in the analysis' pass: with a backward, the tower frozen
    (vision_trained False), trained (True) or its projector alone ("projector")."""
    result = _cross_check(analysis, fvcore, stock, hf)
    if vision is None or not vision.images or hf is None:
        return result
    return replace(result, vision=_with_images(analysis, hf, vision, vision_trained))


def _with_images(analysis: Analysis, hf: HFConfig, vision, trained=False):
    from accounting.crosscheck import vision_check
    if vision_check.room(analysis, vision):
        return vision_check.skipped(analysis, vision, vision_check.room(analysis, vision))
    if BACKWARD in PHASES[analysis.phase] and analysis.config.attention != "naive":
        return vision_check.skipped(analysis, vision, _transformers_input(analysis, hf)[1]
                                    or "the tool's attention is not eager attention's")
    if find_spec("transformers") is None:  # the environment, not a disagreement
        return vision_check.skipped(analysis, vision, "transformers is not installed (pip "
                                    "install -e '.[hf]' adds it, at the pinned version)")
    from accounting.crosscheck import hf_vision
    try:
        m = hf_vision.measure(hf.whole or hf.data, vision, analysis.seq, analysis.batch,
                              analysis.phase, trained)
    except Exception as e:  # transformers refuses the inputs the tool made: said, exit 1
        why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        return vision_check.failed(analysis, vision, f"it could not run them ({why})")
    return vision_check.compare(analysis, vision, m)


def _cross_check(analysis: Analysis, fvcore: bool = True, stock: bool = True,
                 hf: HFConfig | None = None) -> CrossCheck:
    """Run the model for `analysis`'s workload under every counter and compare. With `hf`
    (the Hugging Face config.json the config came from), transformers' own model of it is
    a further counter, when transformers is installed (hf_counter.py); where a worker can
    be forked (accounting/runtime/fork.py) it runs in one, beside the tool's model's counters."""
    data = skipped = None
    if hf is not None:
        data, skipped = _transformers_input(analysis, hf)
    run_hf = hf is not None and not skipped
    worker = nullcontext()
    if run_hf and fork.available():
        from accounting.crosscheck import hf_counter
        worker = fork.Forked(hf_counter.measure, data, analysis.seq, analysis.batch,
                             analysis.phase)
    with worker:
        m = measure(analysis.config, analysis.seq, analysis.batch, analysis.phase,
                    fvcore=fvcore, stock=stock)
        if hf is None:
            return compare(analysis, m)
        if skipped:
            return compare(analysis, m, hf_skipped=f"transformers' model not run: {skipped}")
        from accounting.crosscheck import hf_counter
        from accounting.crosscheck.hf_compare import compare_hf
        try:
            if isinstance(worker, fork.Forked):
                got = worker.result()
            else:
                got = hf_counter.measure(data, analysis.seq, analysis.batch, analysis.phase)
        except Exception as e:  # transformers refuses what the tool read: a disagreement, said
            why = " ".join(f"{type(e).__name__}: {e}".split())
            result = compare(analysis, m, hf_skipped=f"transformers' model not run: it could "
                                                     f"not be built ({why[:300]})")
            return replace(result, checks=result.checks + (Check(
                "transformers builds its model from the config.json the tool read",
                why[:300], False),))
    experts = None
    if hf.type.experts_implementation is not None:  # its other expert implementations, on CPU
        from accounting.crosscheck import hf_experts
        try:
            experts = hf_experts.check(data)
        except Exception as e:
            experts = " ".join(f"{type(e).__name__}: {e}".split())[:300]
    return compare(analysis, m, compare_hf(analysis, got, hf, experts, data))


def refusal(analysis: Analysis, hf: HFConfig) -> str | None:
    """Why transformers refuses the config.json its model would be built from (its config
    class's own checks: a token id that is not an integer, use_cache "yes", a dtype that
    names no torch dtype), or None. Run before any counting: a value transformers refuses
    is bad input (exit 2), not a cross-check that disagrees (issue 23)."""
    data, skipped = _transformers_input(analysis, hf)
    if data is None or skipped:
        return None
    from accounting.crosscheck import hf_counter
    version = transformers_version()
    try:
        hf_counter.transformers_config(data)
    except Exception as e:  # whatever transformers raises for a value it refuses
        why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        if other_version(version):  # the install, not the file (issue 32)
            raise UsageError(f"{other_version(version)}: it cannot read "
                             f"{hf.origin} ({why[:160]}); install the pinned one (pip install "
                             f"transformers=={TRANSFORMERS_VERSION}) or pass --no-verify") from None
        return why
    return None


def other_version(version: str) -> str | None:
    """The words naming an installed transformers other than the tables' (issue 32: the
    install, not the file), or None for the pinned one."""
    if version == TRANSFORMERS_VERSION:
        return None
    return (f"transformers {version} is installed, and the tool's tables are read from "
            f"{TRANSFORMERS_VERSION}")


def transformers_version(skip: str = "pass --no-verify") -> str:
    """transformers.__version__; UsageError naming the fix when the installed transformers
    cannot be imported at all (a broken install is the environment's problem, never the
    config's: issue 32). `skip`: how the caller's command does without it (--verify's
    --no-verify; the judge of unknown keys, cli/args.py: --strict)."""
    try:
        import transformers
        return str(transformers.__version__)
    except Exception as e:  # a half-installed package fails in many ways
        why = " ".join(f"{type(e).__name__}: {e}".split())[:160]
        raise UsageError(f"transformers is installed but cannot be imported ({why}); the "
                         f"environment is the problem, not the config: reinstall it (pip "
                         f"install --force-reinstall transformers=={TRANSFORMERS_VERSION}) or "
                         f"{skip}") from None


def _transformers_input(analysis: Analysis, hf: HFConfig):
    """(the config.json object transformers is given, why it is not run or None)."""
    data, skipped = for_transformers(hf, analysis.config)
    if data is not None and analysis.config.attention != "naive" and \
            BACKWARD in PHASES[analysis.phase]:
        skipped = ("the tool's model runs the fused attention kernel (--attention "
                   f"{analysis.config.attention}), whose backward recomputes QKᵀ (5 T×T matmuls "
                   "per head, eager attention's 4), and transformers' model runs eager attention "
                   "here: their backward attention cores differ by design (compare with "
                   "--pass forward, or --attention naive)")
    c = analysis.config
    if data is not None and c.layer_types and all(k.mixer not in ("attention", "hybrid")
                                                  for k in c.layer_kinds) \
            and hf.type.model_type != "mamba2":
        # found by tests/test_fuzz_cli.py's hybrid seeds (an LFM2 of conv layers only); a
        # hybrid layer (Falcon-H1) runs attention beside its Mamba-2 mixer. Mamba2Model's
        # forward asks its cache for no length (modeling_mamba2.py): it runs
        skipped = ("transformers 5.23's cache of a model without attention layers cannot give "
                   "its length (DynamicCache.get_seq_length raises for recurrent layers only), "
                   "so its forward fails on every input: the tool's own counters only")
    if data is not None and find_spec("transformers") is None:
        skipped = ("transformers is not installed (pip install -e '.[hf]' adds it, at the "
                   "pinned version)")
    return data, skipped


__all__ = ["cross_check", "refusal", "compare", "measure", "Measurement", "CrossCheck", "ComponentRow",
           "LayerCheck", "LayerMismatch", "NonMatmulRow", "Check"]
