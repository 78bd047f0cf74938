"""The longest context an engine starts with, and a prompt's bound: refused as the engine
refuses them.

vLLM (vllm/config/model.py, _get_and_verify_max_len; read at commit 0052a5b8) derives the
model's maximum from its config.json (the smallest of max_position_embeddings, n_positions,
max_seq_len, seq_length, ...; model_max_length over them) times a RoPE scaling factor (any
rope_type but su, longrope and llama3, whose tables are already long; yarn scales
original_max_position_embeddings; Gemma 3's is already scaled), and refuses a larger
max_model_len with a ValueError unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set ("positions
exceeding derived_max_model_len lead to nan" with RoPE; "a CUDA array out-of-bounds error"
with absolute positions). SGLang refuses the same unless
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (python/sglang/srt/configs/model_config.py); each
switch is its engine record's allow_long_env (serving/engines.py).
A learned position table has no rows past its length: no switch makes it longer (the
tool's ledger refuses it, accounting/ledger/ledger.py check_seq).

A prompt is refused per request when it is longer than max_model_len (vLLM's input
processor, vllm/v1/engine/processor.py: "The decoder prompt (length N) is longer than the
maximum model length of M").
"""
from __future__ import annotations

from collections.abc import Mapping

from accounting.runtime.errors import UsageError
from accounting.serving import engines

UNSCALED = ("su", "longrope", "llama3", "default")  # vLLM applies no factor for these


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def derived_max_len(context_length: int, data: Mapping | None) -> int:
    """vLLM's derived max_model_len for a config.json `data` whose position limit the tool
    read as `context_length` (never below it: a factor the tool cannot read refuses nothing
    more than before)."""
    if not isinstance(data, Mapping):
        return context_length
    if _number(data.get("model_max_length")):  # Command-R's key wins over the others
        return max(context_length, int(data["model_max_length"]))
    base, factor = context_length, 1
    if "gemma3" not in str(data.get("model_type")):
        for key in ("rope_scaling", "rope_parameters"):
            rp = data.get(key)
            if not isinstance(rp, Mapping):
                continue
            # transformers 5: one dict, or one per layer type (all scaled alike)
            each = [v for v in rp.values() if isinstance(v, Mapping)] or [rp]
            for r in each:
                kind = r.get("rope_type", r.get("type", "default"))
                if kind in UNSCALED or not _number(r.get("factor")):
                    continue
                factor = r["factor"]
                if kind == "yarn" and _number(r.get("original_max_position_embeddings")):
                    base = int(r["original_max_position_embeddings"])
    return max(context_length, int(base * factor))


def check(config, ctx: int, prompt: int | None, engine: str, max_len: int,
          allow_long: bool) -> tuple[str, ...]:
    """Notes for a context the engine starts with; UsageError for one it refuses."""
    if prompt is not None and prompt > ctx:
        raise UsageError(f"--prompt {prompt:,} is longer than --ctx {ctx:,}: the engine refuses "
                         f"a prompt longer than its max_model_len; give --prompt up to "
                         f"{ctx:,} or a longer --ctx")
    if ctx <= max_len:
        return ()
    if config.positions == "learned":
        raise UsageError(f"--ctx {ctx:,} is longer than {config.name}'s learned position "
                         f"table ({config.context_length:,} positions); give --ctx up to "
                         f"{config.context_length:,}")
    switch = engines.allow_long_env(engine)
    if not allow_long:
        raise UsageError(f"--ctx {ctx:,} is past {config.name}'s {max_len:,}-token context; "
                         f"{engine} refuses a longer max_model_len unless {switch}=1 is set "
                         f"(then RoPE runs past its trained length); give --ctx up to "
                         f"{max_len:,}, or set {switch}=1")
    return (f"--ctx {ctx:,} is past the model's {max_len:,}-token context: {engine} starts "
            f"only because {switch}=1 is set, and RoPE past its trained length may give nan "
            f"(the engine's own warning)",)
