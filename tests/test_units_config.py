"""Units, formatting and config handling."""
import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting import units
from accounting.architecture.presets import PRESETS, get_preset
from accounting.architecture.config import ModelConfig, default_d_ff
from accounting.architecture.loaders import config_from_json
from accounting.runtime.errors import UsageError


def test_decimal_rounds_exactly_half_even():
    assert units.decimal(Fraction(2, 3), 3) == "0.667"
    assert units.decimal(Fraction(5, 2), 0) == "2"  # half to even
    assert units.decimal(Fraction(-1, 8), 2) == "-0.12"
    # a value beyond float precision keeps its digits
    assert units.decimal(10**30 + 1, 0) == "1000000000000000000000000000001"


def test_si_and_bytes():
    assert units.si(4_513_336_524_800, "FLOPs") == "4.513 TFLOPs"
    assert units.gigabytes(8_508_230_400) == "8.51 GB"
    assert units.gibibytes(8_508_230_400) == "7.92 GiB"  # 8,508,230,400 / 2^30 = 7.924


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=12))
def test_rounded_percents_add_to_100(weights):
    total = sum(weights)
    shown = units.rounded_percents([Fraction(w, total) for w in weights])
    assert sum(Fraction(s.rstrip("%")) for s in shown) == 100
    for s, w in zip(shown, weights):  # each within one display unit of the exact value
        assert abs(Fraction(s.rstrip("%")) - Fraction(100 * w, total)) < Fraction(1, 100)


def test_presets_match_gpt2_shapes():
    # Radford et al. 2019, table 2: layers / d_model; heads from the released configs.
    shapes = {"gpt2-small": (12, 768, 12), "gpt2-medium": (24, 1024, 16),
              "gpt2-large": (36, 1280, 20), "gpt2-xl": (48, 1600, 25)}
    for name, (L, d, h) in shapes.items():
        c = PRESETS[name]
        assert (c.num_layers, c.d_model, c.num_heads, c.d_ff, c.vocab_size, c.context_length) == \
            (L, d, h, 4 * d, 50257, 1024)
        assert c.d_k == 64


def test_unknown_preset_suggests_near_names():
    with pytest.raises(UsageError, match="gpt2-xl"):
        get_preset("gpt2-xxl")


def test_default_d_ff():
    # 8/3·d rounded up to a multiple of 64: 768 -> 2048 exactly; 1024 -> 2730.67 -> 2752
    assert default_d_ff(768) == 2048 and default_d_ff(1024) == 2752 and default_d_ff(1) == 64


@pytest.mark.parametrize("kwargs,message", [
    (dict(d_model=100, num_heads=3), "not divisible"),
    (dict(d_model=96, num_heads=32), "odd"),  # d_k = 3
    (dict(d_model=0, num_heads=1), "positive"),
    (dict(d_model=-64, num_heads=1), "positive"),
    (dict(d_model=64.0, num_heads=1), "integer"),
    (dict(d_model=True, num_heads=1), "integer"),
])
def test_bad_configs(kwargs, message):
    base = dict(vocab_size=10, context_length=8, num_layers=1, d_ff=16)
    with pytest.raises(UsageError, match=message):
        ModelConfig(**base, **kwargs)


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        PRESETS["gpt2-xl"].d_model = 1


def test_config_from_json(tmp_path):
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps({"vocab_size": 100, "context_length": 64, "num_layers": 2,
                             "d_model": 64, "num_heads": 4}))
    c = config_from_json(p)
    assert c.d_ff == 192 and c.name == "tiny"  # 8/3·64 = 170.7 -> 192


def test_config_json_with_architecture_fields(tmp_path):
    p = tmp_path / "qwen-ish.json"
    p.write_text(json.dumps({"vocab_size": 100, "context_length": 64, "num_layers": 2,
                             "d_model": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 32,
                             "qk_norm": "head", "qkv_bias": True, "mlp": "gelu"}))
    c = config_from_json(p)
    # d_ff defaults to 4·d_model for a plain (two-matrix) GELU MLP
    assert (c.kv_heads, c.d_k, c.qk_norm, c.qkv_bias, c.d_ff) == (2, 32, "head", True, 256)


@pytest.mark.parametrize("text,message", [
    ("{", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"vocab_size": 10}', "missing"),
    ('{"vocab_size": 10, "context_length": 8, "num_layers": 1, "d_model": 64, "num_heads": 4, "dmodel": 3}', "unknown key"),
    ('{"vocab_size": "10", "context_length": 8, "num_layers": 1, "d_model": 64, "num_heads": 4}', "vocab_size"),
    ('{"vocab_size": 10, "context_length": 8, "num_layers": 1, "d_model": 64, "num_heads": 4, "num_kv_heads": 3}', "not divisible by num_kv_heads"),
    ('{"vocab_size": 10, "context_length": 8, "num_layers": 1, "d_model": 64, "num_heads": 4, "positions": "learned", "rope_theta": 5}', "rope_theta"),
    ('{"vocab_size": 10, "context_length": 8, "num_layers": 1, "d_model": 64, "num_heads": 4, "tie_embeddings": "yes"}', "true or false"),
    ('{"vocab_size": 10, "context_length": 8, "num_layers": 1, "d_model": 64, "num_heads": 4, "rope_theta": Infinity}', "finite"),
])
def test_bad_config_files(tmp_path, text, message):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(UsageError, match=message) as e:
        config_from_json(p)
    assert "bad.json" in str(e.value)


# ---- one table for units, dtypes and phases -----------------------------------------------

def test_dtype_bytes_are_torch_element_sizes():
    # independent source: torch's own element sizes (IEEE 754 binary32/16/64, bfloat16's 16
    # bits, one byte for int8 and bool, eight for int64)
    import torch
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
              "int8": torch.int8, "fp64": torch.float64, "int64": torch.int64, "bool": torch.bool,
              "uint8": torch.uint8, "int32": torch.int32, "fp8_e4m3": torch.float8_e4m3fn,
              "fp8_e5m2": torch.float8_e5m2, "complex64": torch.complex64}
    assert units.DTYPE_BYTES == {name: torch.empty(0, dtype=d).element_size()
                                 for name, d in dtypes.items()}
    # the parameter-memory table's rows: the dtypes users ask about, in this order
    assert list(units.BYTES_PER_ELEMENT.items()) == [("fp32", 4), ("bf16", 2), ("fp16", 2),
                                                     ("int8", 1)]


def test_unit_scales():
    assert (units.KILO, units.MEGA, units.GIGA, units.TERA) == (1e3, 1e6, 1e9, 1e12)
    assert (units.GB, units.TB) == (units.GIGA, units.TERA)
    assert (units.KiB, units.MiB, units.GiB, units.TiB) == (1024, 1024**2, 1024**3, 1024**4)


# Each fact's one home; a module-level constant anywhere else that restates one of these
# values (a dtype or phase name, a unit scale, a dtype's byte size) fails here.
_PHASES = {"forward", "backward", "train"}
_DTYPES = {"fp32", "bf16", "fp16", "int8", "fp64", "int64", "bool"}
_UNIT_NAMES = {"KILO", "MEGA", "GIGA", "TERA", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB",
               "TiB", "GBps", "FP32", "BF16", "FORWARD", "BACKWARD", "TRAIN"}
# what each home may state: units.py every unit and dtype, records.py the phase names
_HOMES = {"accounting/units.py": (set(), set()),
          "accounting/ledger/records.py": (_DTYPES, _UNIT_NAMES - {"FORWARD", "BACKWARD", "TRAIN"})}


def _restated(root):
    import ast
    import pathlib
    found = []
    for path in sorted(pathlib.Path(root, "accounting").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        names_of_facts, unit_names = _HOMES.get(rel, (_PHASES | _DTYPES, _UNIT_NAMES))
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])
                     if isinstance(n, ast.Name)]
            literals = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
            restates = (any(v in names_of_facts for v in literals if isinstance(v, str))
                        or (set(names) & unit_names and literals)
                        or (rel != "accounting/units.py"
                            # a bare size (FP32_BYTES = 4), not a multiple of a unit (2 * GiB)
                            and not isinstance(node.value, ast.BinOp)
                            and any(n.endswith("_BYTES") and n != "MAX_CONFIG_BYTES"
                                    and any(v in (1, 2, 4, 8) for v in literals if type(v) is int)
                                    for n in names)))
            if restates:
                found.append(f"{rel}:{node.lineno} {', '.join(names)}")
    return found


def test_each_fact_is_stated_once():
    import pathlib
    assert _restated(pathlib.Path(__file__).resolve().parents[1]) == []


def test_the_restatement_check_can_fail(tmp_path):
    (tmp_path / "accounting").mkdir()
    for text in ('FP32 = "fp32"\n', "TERA = 10**12\n", 'FORWARD, STEP = "forward", "step"\n',
                 "LOSS_BYTES = 4\n", 'PRECISION = {"fp32": 4}\n'):
        (tmp_path / "accounting" / "m.py").write_text(text)
        assert _restated(tmp_path) == ["accounting/m.py:1 " + text.split(" =")[0]], text
    (tmp_path / "accounting" / "m.py").write_text("from accounting.units import TERA\nX = TERA\n")
    assert _restated(tmp_path) == []
