"""Whether optional heavy dependencies are importable, found without importing them
(importing torch takes a second; the analytic path must stay instant)."""
from __future__ import annotations

from importlib.util import find_spec


def missing() -> str | None:
    """Name of the first missing dependency of the cross-check, or None."""
    for module in ("torch", "fvcore", "einops"):
        if find_spec(module) is None:
            return module
    return None
