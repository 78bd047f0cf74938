"""Model configs: one frozen dataclass, presets looked up by exact name, JSON files."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

from accounting.errors import UsageError


def default_d_ff(d_model: int) -> int:
    """8/3·d_model rounded up to a multiple of 64 (CS336 §3.5.2), in integers."""
    return -(-8 * d_model // (3 * 64)) * 64


@dataclass(frozen=True)
class ModelConfig:
    """The architecture of model.TransformerLM: RMSNorm, SwiGLU, RoPE, untied LM head."""

    vocab_size: int
    context_length: int
    num_layers: int
    d_model: int
    num_heads: int
    d_ff: int
    rope_theta: float = 10000.0
    name: str = "custom"

    def __post_init__(self) -> None:
        for f in ("vocab_size", "context_length", "num_layers", "d_model", "num_heads", "d_ff"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{f} must be a positive integer, got {value!r}")
            if value <= 0:
                raise UsageError(f"{f} must be a positive integer, got {value}")
        if isinstance(self.rope_theta, bool) or not isinstance(self.rope_theta, (int, float)) \
                or not self.rope_theta > 0:
            raise UsageError(f"rope_theta must be a positive number, got {self.rope_theta!r}")
        if self.d_model % self.num_heads:
            raise UsageError(
                f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}; "
                f"choose num_heads dividing d_model (e.g. {_near_divisor(self.d_model, self.num_heads)})")
        if self.d_k % 2:
            raise UsageError(
                f"head dimension d_model/num_heads = {self.d_k} is odd; RoPE rotates pairs, "
                f"so choose d_model and num_heads with an even quotient")

    @property
    def d_k(self) -> int:
        """Head dimension; d_v = d_k (CS336 §3.5.5)."""
        return self.d_model // self.num_heads

    def model_kwargs(self) -> dict:
        """Keyword arguments for model.TransformerLM."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}

    def with_overrides(self, **overrides) -> "ModelConfig":
        changed = {k: v for k, v in overrides.items() if v is not None}
        if not changed:
            return self
        return replace(self, name=self.name if self.name == "custom" else f"{self.name} (modified)",
                       **changed)


def _near_divisor(n: int, target: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - target), d))


def _gpt2(name: str, num_layers: int, d_model: int, num_heads: int) -> ModelConfig:
    return ModelConfig(vocab_size=50257, context_length=1024, num_layers=num_layers,
                       d_model=d_model, num_heads=num_heads, d_ff=4 * d_model, name=name)


# GPT-2 shapes (Radford et al. 2019) on this architecture; sizes are this model's
# parameter counts (SwiGLU has three d_model×d_ff matrices, the LM head is untied).
PRESETS: dict[str, ModelConfig] = {c.name: c for c in (
    _gpt2("gpt2-small", 12, 768, 12),     # 190,460,160 parameters
    _gpt2("gpt2-medium", 24, 1024, 16),   # 505,629,696
    _gpt2("gpt2-large", 36, 1280, 20),    # 1,072,469,760
    _gpt2("gpt2-xl", 48, 1600, 25),       # 2,127,057,600
)}


def get_preset(name: str) -> ModelConfig:
    """Exact-name lookup; an unknown name suggests the closest presets, never guesses."""
    try:
        return PRESETS[name]
    except KeyError:
        near = difflib.get_close_matches(name, list(PRESETS), n=3, cutoff=0.0)
        raise UsageError(f"unknown model {name!r}; closest presets: {', '.join(near)} "
                         f"(or give sizes with --config FILE or --num-layers/--d-model/...)") from None


_JSON_KEYS = {f.name for f in fields(ModelConfig)}


def config_from_json(path: str | Path) -> ModelConfig:
    """A config from a JSON object with ModelConfig's field names (d_ff may be omitted)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"config file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"config file {str(path)!r} is a directory, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read config file {str(path)!r}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"config file {str(path)!r} is not valid JSON: {e.msg} "
                         f"at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config file {str(path)!r} must hold a JSON object, "
                         f"got {type(data).__name__}")
    unknown = sorted(set(data) - _JSON_KEYS)
    if unknown:
        raise UsageError(f"config file {str(path)!r} has unknown key(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(sorted(_JSON_KEYS))}")
    if "d_ff" not in data and isinstance(data.get("d_model"), int):
        data["d_ff"] = default_d_ff(data["d_model"])
    missing = sorted({"vocab_size", "context_length", "num_layers", "d_model", "num_heads"}
                     - set(data))
    if missing:
        raise UsageError(f"config file {str(path)!r} is missing key(s) {', '.join(missing)}")
    data.setdefault("name", path.stem)
    try:
        return ModelConfig(**data)
    except UsageError as e:
        raise UsageError(f"config file {str(path)!r}: {e}") from None
