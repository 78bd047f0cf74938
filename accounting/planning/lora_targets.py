"""PEFT 0.21.2's own reading of LoRA target names on transformers 5's models, as data.

Two rules of PEFT decide what a list of `target_modules` wraps besides the plain suffix
match on module paths (planning/finetune.py):

* MoE checkpoint conversion (peft/utils/transformers_weight_conversion.py
  _convert_peft_config_moe, called by convert_peft_config_for_transformers from
  get_peft_model): on a model_type that transformers 5.23 converts to stacked experts
  (transformers/conversion_mapping.py _MODEL_TO_CONVERSION_PATTERN, to which PEFT adds
  "mixtral") with pattern "mixtral" or "qwen2_moe", a target equal to one of the pattern's
  v4 names (_MOE_TARGET_MODULE_MAPPING) is moved from target_modules to target_parameters:
  the routed experts' stacked `gate_up_proj` or `down_proj` (E, out, in) are then wrapped
  by lora.ParamWrapper (lora_A: (E·r, in), lora_B: (out, E·r)), and the name no longer
  matches any nn.Linear (the shared experts' and dense layers' down_proj are left alone).
  The fused pair (gate_proj and up_proj, Mixtral's w1 and w3) must be named together
  ("Cannot convert PEFT target(s) ... because they are fused into gate_up_proj"), and is
  then one ParamWrapper of rank 2·r and alpha 2·alpha (rank_pattern, alpha_pattern). The
  router's `gate` becomes `gate.weight`.
* Mamba (peft/tuners/tuners_utils.py _check_lora_target_modules_mamba): on model_types
  falcon_h1, mamba, mamba2, falcon_mamba and nemotron_h, a targeted module named out_proj
  or conv1d is refused ("... is incompatible with Mamba-based models").

tests/test_lora_peft_targets.py checks these tables against PEFT's and transformers' own
objects and the resolution against get_peft_model on every family's small config.
"""
from __future__ import annotations

from types import MappingProxyType

# _MOE_TARGET_MODULE_MAPPING: v4 name -> what it becomes on transformers 5's model. The ledger
# holds each expert's W1 (gate), W3 (up) and W2 (down) as stacked parameters w1, w3, w2.
MIXTRAL, QWEN2_MOE = "mixtral", "qwen2_moe"
TARGET_MAPPING = MappingProxyType({
    MIXTRAL: MappingProxyType({"gate": "gate.weight", "w1": "gate_up_proj",
                               "w3": "gate_up_proj", "w2": "down_proj"}),
    QWEN2_MOE: MappingProxyType({"gate": "gate.weight", "gate_proj": "gate_up_proj",
                                 "up_proj": "gate_up_proj", "down_proj": "down_proj"}),
})
# _MOE_FUSED_TARGETS: the v4 names fused into one stacked parameter
FUSED = MappingProxyType({MIXTRAL: ("w1", "w3"), QWEN2_MOE: ("gate_proj", "up_proj")})
# transformers 5.23 _MODEL_TO_CONVERSION_PATTERN (PEFT's copy, with "mixtral" added), the
# model_types this tool reads whose pattern PEFT converts
CONVERSION_PATTERN = MappingProxyType({
    "mixtral": MIXTRAL, "minimax_m2": MIXTRAL,
    **{t: QWEN2_MOE for t in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "ernie4_5_moe",
                              "glm4_moe", "olmoe", "qwen3_moe", "qwen3_next")}})
# the stacked parameter on transformers' model -> the ledger's expert weights it holds
LEDGER_EXPERTS = MappingProxyType({"gate_up_proj": ("w1", "w3"), "down_proj": ("w2",)})
ROUTER_WEIGHT = "gate.weight"

# Linear layers PEFT wraps whose adapter never runs: the model reads the wrapped layer's
# .weight (the base weight) instead of calling it. transformers 5.23
# models/jamba/modeling_jamba.py JambaMambaMixer: time_step = self.dt_proj.weight @ ...
UNUSED_ADAPTERS = MappingProxyType({
    "jamba": MappingProxyType({"dt_proj": "JambaMambaMixer reads dt_proj.weight directly, so "
                                          "its LoRA adapter would hold parameters that never run"}),
})

MAMBA_MODEL_TYPES = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})
MAMBA_INCOMPATIBLE = frozenset({"out_proj", "conv1d"})


def converted(model_type: str | None, targets: tuple[str, ...]) -> tuple[tuple[str, ...], dict]:
    """(the names left as target_modules, {stacked parameter: the v4 names that chose it})
    after PEFT's conversion; raises ValueError with PEFT's words for half a fused pair."""
    pattern = CONVERSION_PATTERN.get(model_type or "")
    if pattern is None:
        return targets, {}
    mapping = TARGET_MAPPING[pattern]
    left, params = [], {}
    for name in targets:
        old = next((o for o in mapping if name == o or name.endswith("." + o)), None)
        if old is None:
            left.append(name)
        else:
            params.setdefault(mapping[old], set()).add(old)
    fused = FUSED[pattern]
    present = params.get("gate_up_proj", set())
    if 0 < len(present) < len(fused):
        missing = ", ".join(sorted(set(fused) - present))
        raise ValueError(f"Cannot convert PEFT target(s) {', '.join(sorted(present))} without "
                         f"also targeting {missing} because they are fused into gate_up_proj.")
    return tuple(left), {k: tuple(sorted(v)) for k, v in params.items()}


def mamba_refused(model_type: str | None, names) -> str | None:
    """The first targeted module name PEFT refuses on this Mamba-based model_type, or None."""
    if model_type in MAMBA_MODEL_TYPES:
        return next((n for n in names if n in MAMBA_INCOMPATIBLE), None)
    return None
