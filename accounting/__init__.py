"""Exact resource accounting for a decoder-only Transformer LM (CS336 ch. 3 architecture).

Pure Python: importing this package imports neither torch, pandas nor matplotlib.

    >>> from accounting import analyze, get_preset
    >>> a = analyze(get_preset("gpt2-xl"), seq=1024)
    >>> a.matmul_flops()
    4513336524800
"""
from accounting.runtime import startup as _startup  # noqa: F401  (first: Ctrl-C at start-up)
from accounting.analysis.workload import Analysis, analyze
from accounting.architecture.presets import PRESETS, get_preset
from accounting.architecture.config import ModelConfig, default_d_ff
from accounting.runtime.errors import UsageError
from accounting.units import FLOPS_PER_MAC


def config_from_json(path):
    """A config from a JSON file: the tool's own format or a Hugging Face config.json (the
    Hugging Face translation imported on call, so that `import accounting` stays light)."""
    import os
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path (a str or a pathlib.Path), got "
                        f"{type(path).__name__}")
    from accounting.architecture.loaders import config_from_json as f
    return f(path)


def matmul_frame(*args, **kwargs):
    """Per-record DataFrame for one workload (pandas imported on call); see frames.py."""
    from accounting.frames import matmul_frame as f
    return f(*args, **kwargs)


def sweep(*args, **kwargs):
    """Long-form DataFrame over configs × context lengths (pandas imported on call)."""
    from accounting.frames import sweep as f
    return f(*args, **kwargs)


def flops_grid(*args, **kwargs):
    """Exact matmul FLOPs over a grid of contexts × batches, vectorised from the ledger's
    closed forms (numpy imported on call); see grid.py."""
    from accounting.analysis.grid import flops_grid as f
    return f(*args, **kwargs)


def formulas_frame(*args, **kwargs):
    """The literature's FLOP formulas beside the exact count, as a DataFrame (pandas
    imported on call); see frames.py and literature.py."""
    from accounting.frames import formulas_frame as f
    return f(*args, **kwargs)


def formula_terms_frame(*args, **kwargs):
    """Each formula's term-by-term reconciliation, as a DataFrame (pandas imported on call)."""
    from accounting.frames import formula_terms_frame as f
    return f(*args, **kwargs)


__all__ = ["Analysis", "analyze", "PRESETS", "ModelConfig", "config_from_json", "default_d_ff",
           "get_preset", "UsageError", "FLOPS_PER_MAC", "matmul_frame", "sweep", "flops_grid",
           "formulas_frame", "formula_terms_frame"]
