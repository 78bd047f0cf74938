"""Hybrid configs' key aliases (issue 45: unguarded): a Nemotron-H config.json may spell its
Mamba keys as Nemotron-H's own checkpoints do (mamba_n_groups, mamba_d_conv,
mamba_chunk_size, mamba_conv_bias, mamba_dt_min) and its layer list as layer_types;
transformers' NemotronHConfig reads each as the canonical attribute (__post_init__ pops
them; attribute_map for layer_types). Asserted on transformers' own object, and the spec the
tool reads from the alias must equal the one from the canonical key."""
from __future__ import annotations

import dataclasses

import pytest

from accounting.architecture.hf_config import translate
from test_hf_nemotron_h import DATA


def _spec(data):
    return translate(data, "config.json", "nemotron-h-tiny").config


@pytest.mark.parametrize("canonical,alias,value", [
    ("n_groups", "mamba_n_groups", 4),
    ("conv_kernel", "mamba_d_conv", 3),
    ("chunk_size", "mamba_chunk_size", 32),
    ("use_conv_bias", "mamba_conv_bias", False),
    ("time_step_min", "mamba_dt_min", 0.01),
])
def test_nemotron_h_mamba_aliases_read_as_transformers_reads_them(canonical, alias, value):
    transformers = pytest.importorskip("transformers")
    base = {k: v for k, v in DATA.items() if k not in ("architectures", "torch_dtype",
                                                       "model_type", canonical)}
    assert getattr(transformers.NemotronHConfig(**base, **{alias: value}), canonical) == value
    via_alias = _spec({**DATA, alias: value} if canonical not in DATA else
                      {**{k: v for k, v in DATA.items() if k != canonical}, alias: value})
    assert via_alias == _spec({**DATA, canonical: value})
    if canonical != "time_step_min":  # (a count-free key: the spec holds no field for it)
        assert via_alias != _spec(DATA)  # the value was read, not the default kept


def test_nemotron_h_layer_types_alias():
    transformers = pytest.importorskip("transformers")
    assert transformers.NemotronHConfig.attribute_map["layer_types"] == "layers_block_type"
    pattern = ["mamba", "attention", "mlp", "mamba"]  # "M*-M"
    base = {k: v for k, v in DATA.items() if k != "hybrid_override_pattern"}
    a = _spec({**base, "layer_types": pattern})
    b = _spec({**base, "layers_block_type": pattern})
    assert a == b == _spec(DATA)
    assert dataclasses.asdict(a)["layer_types"] == ("mamba", "global", "mlp", "mamba")
