"""Presets, looked up by exact name: GPT-2's four shapes on the CS336 architecture (the
course's question), and real checkpoints under their Hugging Face ids, read from their
config.json files as shipped (accounting/hf_configs/). Each row's parameter count is in
its comment; tests/test_presets.py derives each by hand algebra and cites the published
figure beside it.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from accounting.architecture.config import ModelConfig
from accounting.architecture.own_format import read_json
from accounting.runtime.errors import UsageError

if TYPE_CHECKING:
    from accounting.architecture.hf_config import HFConfig

_HF_SOURCES: dict[str, HFConfig] = {}


def hf_source(name: str) -> HFConfig | None:
    """The shipped config.json of a preset that is a real checkpoint (None for the others),
    read and translated on first use (accounting/hf_configs/<id>.json)."""
    if name not in HF_IDS:
        return None
    if name not in _HF_SOURCES:
        from accounting.architecture import hf_config  # on first use: `import accounting` stays light
        data, source = read_json(hf_config.PACKAGED / f"{name}.json")
        _HF_SOURCES[name] = hf_config.translate(data, f"shipped {name}.json", name, name)
    return _HF_SOURCES[name]


def _cs336(name: str, num_layers: int, d_model: int, num_heads: int) -> tuple[str, ModelConfig]:
    """GPT-2's shape (Radford et al. 2019) on the CS336 architecture: SwiGLU with three
    d_model×4·d_model matrices, RMSNorm, RoPE, untied head, no biases."""
    return name, ModelConfig(vocab_size=50257, context_length=1024, num_layers=num_layers,
                             d_model=d_model, num_heads=num_heads, d_ff=4 * d_model, name=name)


def _hf(hf_id: str) -> tuple[str, None]:
    """A real checkpoint, from its config.json as shipped (accounting/hf_configs/<id>.json,
    read by accounting/architecture/hf_config.py on first use): the file is the one source of its
    architecture."""
    return hf_id, None


def _table() -> dict[str, ModelConfig | None]:
    """Name -> config, in the order --list shows; None: a real checkpoint, read on first use."""
    return dict((
        # CS336 architecture at GPT-2's shapes (the course's GPT-2 XL question)
        _cs336("gpt2-small", 12, 768, 12),     # 190,460,160 parameters
        _cs336("gpt2-medium", 24, 1024, 16),   # 505,629,696
        _cs336("gpt2-large", 36, 1280, 20),    # 1,072,469,760
        _cs336("gpt2-xl", 48, 1600, 25),       # 2,127,057,600
        # OpenAI GPT-2 as released
        _hf("openai-community/gpt2"),          # 124,439,808
        _hf("openai-community/gpt2-medium"),   # 354,823,168
        _hf("openai-community/gpt2-large"),    # 774,030,080
        _hf("openai-community/gpt2-xl"),       # 1,557,611,200
        # Meta Llama 3
        _hf("meta-llama/Llama-3.2-1B"),        # 1,235,814,400
        _hf("meta-llama/Llama-3.1-8B"),        # 8,030,261,248
        # Mistral 7B: v0.1 with its 4,096-token sliding window, v0.3 without one
        _hf("mistralai/Mistral-7B-v0.1"),      # 7,241,732,096
        _hf("mistralai/Mistral-7B-v0.3"),      # 7,248,023,552
        # Mixtral 8x7B: 8 experts, top-2 (active per token: 12,879,925,248)
        _hf("mistralai/Mixtral-8x7B-v0.1"),    # 46,702,792,704
        # Qwen2.5 and Qwen3
        _hf("Qwen/Qwen2.5-0.5B"),              # 494,032,768
        _hf("Qwen/Qwen2.5-7B"),                # 7,615,616,512
        _hf("Qwen/Qwen3-0.6B"),                # 596,049,920
        _hf("Qwen/Qwen3-8B"),                  # 8,190,735,360
        # Qwen3 MoE: 128 experts, top-8 (active per token: 3,353,032,704)
        _hf("Qwen/Qwen3-30B-A3B"),             # 30,532,122,624
        # AI2 OLMo 2
        _hf("allenai/OLMo-2-1124-7B"),         # 7,298,617,344
        # DeepSeek-V3: latent attention, 256 experts top-8 and a shared one, 3 dense layers;
        # the multi-token-prediction module is not counted (active: 37,552,282,624)
        _hf("deepseek-ai/DeepSeek-V3"),        # 671,026,404,352
    ))


# What each preset is, for output headers and --list.
NOTES = {
    "gpt2-small": "GPT-2 small's shape on the CS336 architecture",
    "gpt2-medium": "GPT-2 medium's shape on the CS336 architecture",
    "gpt2-large": "GPT-2 large's shape on the CS336 architecture",
    "gpt2-xl": "GPT-2 XL's shape on the CS336 architecture",
    "openai-community/gpt2": "OpenAI GPT-2 small (124M) as released",
    "openai-community/gpt2-medium": "OpenAI GPT-2 medium (355M) as released",
    "openai-community/gpt2-large": "OpenAI GPT-2 large (774M) as released",
    "openai-community/gpt2-xl": "OpenAI GPT-2 XL (1.5B) as released",
    "meta-llama/Llama-3.2-1B": "Meta Llama 3.2 1B",
    "meta-llama/Llama-3.1-8B": "Meta Llama 3.1 8B",
    "mistralai/Mistral-7B-v0.1": "Mistral 7B v0.1 (sliding window 4,096)",
    "mistralai/Mistral-7B-v0.3": "Mistral 7B v0.3",
    "mistralai/Mixtral-8x7B-v0.1": "Mixtral 8x7B (mixture of experts)",
    "Qwen/Qwen2.5-0.5B": "Qwen2.5 0.5B",
    "Qwen/Qwen2.5-7B": "Qwen2.5 7B",
    "Qwen/Qwen3-0.6B": "Qwen3 0.6B",
    "Qwen/Qwen3-8B": "Qwen3 8B",
    "Qwen/Qwen3-30B-A3B": "Qwen3 30B-A3B (mixture of experts)",
    "allenai/OLMo-2-1124-7B": "AI2 OLMo 2 7B (November 2024)",
    "deepseek-ai/DeepSeek-V3": "DeepSeek-V3 (without its multi-token-prediction module)",
}


_ROWS = _table()
HF_IDS = tuple(name for name, config in _ROWS.items() if config is None)


class _Presets(Mapping):
    """The presets by name, as a read-only mapping. A real checkpoint's config.json is read
    and translated when its name is first looked up, not at `import accounting` (16 files:
    about 10 ms a process that needs none of them, e.g. a sweep of the CS336 shapes)."""

    def __getitem__(self, name: str) -> ModelConfig:
        config = _ROWS[name]
        return config if config is not None else hf_source(name).config

    def __contains__(self, name: object) -> bool:  # without reading the file
        return name in _ROWS

    def __iter__(self) -> Iterator[str]:
        return iter(_ROWS)

    def __len__(self) -> int:
        return len(_ROWS)

    def __repr__(self) -> str:
        return f"<{len(self)} presets: {', '.join(self)}>"


PRESETS: Mapping[str, ModelConfig] = _Presets()


def get_preset(name: str) -> ModelConfig:
    """Exact-name lookup; an unknown name suggests the closest presets, never guesses."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a preset name (a key of accounting.PRESETS), got "
                        f"{type(name).__name__}")
    try:
        return PRESETS[name]
    except KeyError:
        import difflib
        near = difflib.get_close_matches(name[:200], list(PRESETS), n=3, cutoff=0.0)
        shown = name if len(name) <= 40 else name[:39] + "…"
        raise UsageError(f"unknown model {shown!r}; closest presets: {', '.join(near)} "
                         f"(see --list, or give sizes with --config FILE or "
                         f"--num-layers/--d-model/...)") from None


def note(config: ModelConfig) -> str:
    """What a config is: its preset's note, or 'custom' (or 'modified <preset>')."""
    if config.name in NOTES:
        return NOTES[config.name]
    base = config.name.removesuffix(" (modified)")
    if base in NOTES:
        return f"modified from {NOTES[base]}"
    return "custom config"


def title(config: ModelConfig) -> str:
    """A config's name and what it is, said once: 'gpt2-xl (GPT-2 XL's shape …)', or for a
    preset changed by flags 'gpt2-xl (modified from GPT-2 XL's shape …)' (the name's own
    ' (modified)' is the note's 'modified from', not a second mark)."""
    base = config.name.removesuffix(" (modified)")
    if config.name != base and base in NOTES:
        return f"{base} ({note(config)})"
    return f"{config.name} ({note(config)})"
