"""Every absent key means what transformers means (issue 34): for every supported model_type
in the one type table (accounting/architecture/hf_config.py TYPES, so a type added later is swept
too, and must bring an example), each key the table reads with a default is removed from a
small example config.json, and the tool's reading of the file is compared with what
transformers 5.23 itself makes of the same file:

- its config class (AutoConfig.for_model): the value it takes for the absent key (the
  class default, or what __post_init__ derives) is written back into the file explicitly,
  and the tool must read the explicit file as the same spec as the file without the key;
  so a wrong default in the table (phi3's partial_rotary_factor 1.0 → 0.5) shows as two
  different specs, with every count that follows from them (parameters, FLOPs, KV cache);
- the model it builds on the meta device (AutoModelForCausalLM.from_config, eager
  attention): parameters, forward matmul FLOPs (FlopCounterMode) and the KV cache after the
  prefill against the ledger (accounting/crosscheck/hf_compare.py), and the RoPE inverse-
  frequency buffer's length (rotated dims / 2) against the spec's rotated dims.

A key the table marks Required (a size transformers would fill with a reference model's)
is refused in one line. The expected values come from transformers, never from the table.
"""
from __future__ import annotations

import copy
import dataclasses
import json

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from accounting import analyze  # noqa: E402
from accounting.crosscheck import hf_counter  # noqa: E402
from accounting.crosscheck.hf_compare import compare_hf  # noqa: E402
from accounting.crosscheck.mapping import analytic_flops  # noqa: E402
from accounting.crosscheck.result import ELSEWHERE  # noqa: E402
from accounting.ledger.records import COMPONENTS  # noqa: E402
from accounting.runtime.errors import UsageError  # noqa: E402
from accounting.architecture.hf_config import TYPES, Required, translate  # noqa: E402
from cli_run import refused_in_one_line  # noqa: E402
from prepared_worker import module_worker  # noqa: E402


def _examples() -> dict[str, dict]:
    """The first small example of each model_type in the test modules that hold them."""
    import hf_examples
    import hf_h3_examples
    import hf_moe_examples
    import test_hf_cohere
    import test_hf_arcee
    import test_hf_apertus
    import test_hf_mamba2
    import test_hf_cohere2
    import test_hf_deepseek_v32
    import test_hf_falcon_h1
    import test_hf_frontier_dense
    import test_hf_frontier_moe
    import test_hf_gemma
    import test_hf_kimi_linear
    import test_hf_jamba
    import test_hf_gemma4
    import test_hf_phimoe
    import test_hf_granitemoehybrid
    import test_hf_lfm2
    import test_hf_llama4
    import test_hf_nemotron_h
    import test_hf_parallel
    import test_hf_qwen3_next
    import test_hf_qwen3_5
    out: dict[str, dict] = {}
    for m in (hf_examples, hf_moe_examples, hf_h3_examples, test_hf_parallel, test_hf_gemma,
              test_hf_cohere, test_hf_cohere2, test_hf_llama4, test_hf_deepseek_v32, test_hf_frontier_dense,
              test_hf_frontier_moe, test_hf_qwen3_5):
        for data in m.CONFIGS.values():
            out.setdefault(data["model_type"], data)
    for m in (test_hf_lfm2, test_hf_qwen3_next, test_hf_nemotron_h,
              test_hf_kimi_linear, test_hf_falcon_h1, test_hf_jamba, test_hf_gemma4,
              test_hf_phimoe, test_hf_granitemoehybrid, test_hf_arcee, test_hf_mamba2,
              test_hf_apertus):  # one example each
        out.setdefault(m.DATA["model_type"], m.DATA)
    return out


EXAMPLES = _examples()


# (model_type, key) -> why: a disagreement known and not yet fixed, strict xfail (it must
# fail until fixed). Empty: the three the sweep found in the 2026 rows (deepseek_v3's and
# glm4_moe's MTP default, qwen2_moe's sliding_window 0) are fixed, and qwen3_next's shared width
# that no expert width divides (read as the spec's shared_d_ff).
KNOWN: dict[tuple[str, str], str] = {}


def _cases():
    """(model_type, key) for every key of every row: defaulted or Required."""
    for mt, t in TYPES.items():
        for key in t.keys:
            why = KNOWN.get((mt, key.hf))
            yield pytest.param(mt, key.hf, id=f"{mt}-{key.hf}", marks=() if why is None else
                               pytest.mark.xfail(strict=True, reason=why))


def test_every_model_type_has_an_example():
    # a type added to the table without an example here would escape the sweep
    assert sorted(set(TYPES) - set(EXAMPLES)) == []


def _key(mt: str, hf: str):
    return next(k for k in TYPES[mt].keys if k.hf == hf)


def _inner(data: dict, mt: str) -> dict:
    """The object the row's keys are read from (Llama 4's text_config in a multimodal file)."""
    nested = TYPES[mt].nested
    return data[nested] if nested else data


def _without(data: dict, mt: str, key) -> dict:
    """A deep copy of data without the key and every alias of it ("a.b": b inside a)."""
    out = copy.deepcopy(data)
    inner = _inner(out, mt)
    for path in (key.hf, *key.aliases):
        head, _, rest = path.partition(".")
        if rest and isinstance(inner.get(head), dict):
            inner[head].pop(rest, None)
        elif not rest:
            inner.pop(head, None)
    return out


def _theirs(data: dict, mt: str, key):
    """transformers' value for the key, as its config class holds it after loading data
    (the first of the key's spellings it has); a KeyError when it has none."""
    cfg = _config(data)
    if TYPES[mt].nested:
        cfg = getattr(cfg, TYPES[mt].nested)
    d = cfg.to_dict()
    for path in (key.hf, *key.aliases):
        head, _, rest = path.partition(".")
        if rest:
            if isinstance(d.get(head), dict) and rest in d[head]:
                return d[head][rest]
        elif head in d:
            return d[head]
    # transformers 5's RoPE per layer type (Gemma 3: rope_parameters[full_attention] holds
    # the global layers' theta, the spec's rope_theta)
    per_type = (d.get("rope_parameters") or {}).get("full_attention")
    if isinstance(per_type, dict) and key.hf in per_type:
        return per_type[key.hf]
    return _NONE


_CONFIGS: dict = {}


def _config(data: dict):
    """hf_counter.transformers_config(data), once per file (_theirs and _built_and_measured
    read the same file's config object, neither changes it); a refusal is raised each time."""
    key = json.dumps(data, sort_keys=True, default=repr)
    if key not in _CONFIGS:
        _CONFIGS[key] = hf_counter.transformers_config(data)
    return _CONFIGS[key]


def _meaning(c) -> dict:
    """The spec's fields with a null resolved to what it means (num_kv_heads null: h; head_dim
    null: d/h; rotary_dim null: the whole head), and the counts that follow at T = 16, B = 2:
    parameters, forward FLOPs (matmul and not), the KV cache's elements per token."""
    a = analyze(c, 16, 2, "forward")
    return {**dataclasses.asdict(c), "num_kv_heads": c.kv_heads, "head_dim": c.d_k,
            "rotary_dim": c.rotary_dim or c.d_k, "layer_kinds": c.layer_kinds,
            "params": a.param_count, "forward_flops": a.matmul_flops() + a.elementwise_flops,
            "kv_cache": [str(e.expr()) for e in a.ledger.cache]}


_NONE = object()  # transformers' config class holds no such attribute


def _rotated_dims(model) -> set[int]:
    """Twice each RoPE inv_freq buffer's length: the dims per head transformers rotates."""
    return {2 * b.numel() for n, b in model.named_buffers() if n.endswith("inv_freq")}


# (model_type, storage dtype, transformers' config as a dict, T, B) -> (its measurement, the
# dims its RoPE rotates). Most files without a key make the config transformers makes of
# another one (the key's default is the example's value: 552 files that read, 230 distinct
# configs; of the 102 files with a null that transformers' config class takes, 83), and the
# model transformers builds, on the meta device, follows from that config alone
# (hf_counter.build: its class for model_type, the dtype, the experts' kernel of the type's
# row): so it is built and measured once per config, each file still compared with it.
_MEASURED: dict = {}
# Built and measured in one forked child set up as `python -m accounting --verify`'s worker
# is (torch's C++ meta kernels: about half the CPU time of torch's Python ones here; the
# counts the same, tests/test_crosscheck_workers.py), kept for the module (WORKER below).
WORKER, _worker = module_worker()


def _measured_here(data: dict, T: int, B: int):
    """hf_counter.measure(data, T, B, "forward") and _rotated_dims of the model it counted."""
    model = hf_counter.build(data)  # built once: measured, then its RoPE buffers read
    return hf_counter.measure(data, T, B, "forward", model=model), _rotated_dims(model)


def _built_and_measured(data: dict, T: int, B: int):
    """_measured_here(data, T, B), once per transformers config (in WORKER)."""
    cfg = _config(data)
    key = (data["model_type"], hf_counter.storage_dtype(data),
           json.dumps(cfg.to_dict(), sort_keys=True, default=repr), T, B)
    if key not in _MEASURED:
        _MEASURED[key] = WORKER(_measured_here, data, T, B)
    return _MEASURED[key]


@pytest.mark.parametrize("mt,hf_key", list(_cases()))
def test_an_absent_key_means_what_transformers_means(mt, hf_key):
    key = _key(mt, hf_key)
    data = _without(EXAMPLES[mt], mt, key)
    try:
        hf = translate(data, "config.json", "t")
    except UsageError as e:  # refused in one line: only where transformers needs the key
        assert "\n" not in str(e)
        if isinstance(key.default, Required):  # it would take a reference model's size
            return
        with pytest.raises(Exception):  # transformers fails to build or run it (said in e)
            WORKER(hf_counter.measure, data, 8, 1, "forward")
        return
    assert not isinstance(key.default, Required), f"{mt} without {hf_key} is not refused"
    # (1) transformers' config class: its value for the absent key, written back, reads the
    # same; a key its class holds no attribute for is read by the modeling code with a
    # getattr default (head_dim: d/h), which (2) checks
    value = _theirs(data, mt, key)
    if value is not _NONE:
        explicit = copy.deepcopy(data)
        _inner(explicit, mt)[key.hf] = value
        again = translate(explicit, "config.json", "t")
        assert _meaning(again.config) == _meaning(hf.config), (
            f"{mt} without {hf_key}: transformers takes {value!r}, the tool reads "
            f"{key.default!r}")
    # (2) the model transformers builds from the file without the key, on the meta device
    T, B = 8, 1
    a = analyze(hf.config, T, B, "forward")
    measured, rotated = _built_and_measured(data, T, B)
    check = compare_hf(a, measured, hf)
    assert check.agrees, check.disagreements()
    ours, _ = analytic_flops(a)
    # every component either side counts ('recurrent mixing' only where a model has one)
    comps = [c for c in COMPONENTS if ("forward", c) in check.flops or c in ours["forward"]]
    assert ({c: check.flops.get(("forward", c), 0) for c in comps}
            == {c: ours["forward"].get(c, 0) for c in comps})
    assert check.flops[("forward", ELSEWHERE)] == 0
    assert all(not layer.mismatches for layer in check.layers)
    if hf.config.positions == "rope" and rotated:
        c = hf.config
        mine = {c.rotary_dim or c.d_k} if not c.mla else {c.qk_rope_head_dim}
        if c.global_shape:  # Gemma 4's full layers: their own head (proportional RoPE)
            mine.add(c.global_d_k)
        assert rotated == mine, f"{mt} without {hf_key}: transformers rotates {rotated} dims"


@pytest.mark.parametrize("mt", sorted(TYPES))
def test_a_required_key_is_refused_in_one_line_by_the_cli(capsys, tmp_path, mt):
    """The first Required key of each row, removed: exit 2, one line naming it (the CLI)."""
    required = [k for k in TYPES[mt].keys if isinstance(k.default, Required)]
    if not required:
        pytest.skip(f"{mt} has no Required key")
    key = required[0]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_without(EXAMPLES[mt], mt, key)))
    refused_in_one_line(capsys, "--config", str(p), "--no-verify", expected=f"missing {key.hf}")


# ---- null where the table allows it: only where transformers builds the model (issue 32) ----
def _nullable():
    for mt, t in TYPES.items():
        for key in t.keys:
            if key.kind.endswith("or null"):
                yield pytest.param(mt, key.hf, id=f"{mt}-{key.hf}")


@pytest.mark.parametrize("mt,hf_key", list(_nullable()))
def test_null_is_read_only_where_transformers_builds_it(mt, hf_key):
    """head_dim: null on qwen2 was "transformers' default" to the tool, while Qwen2's
    RoPE init fails on it (None ** float): a config transformers rejects was answered."""
    data = copy.deepcopy(EXAMPLES[mt])
    _inner(data, mt)[hf_key] = None
    try:
        _built_and_measured(data, 4, 1)  # hf_counter.measure(data, 4, 1, "forward")
        builds = True
    except Exception:  # noqa: BLE001 - its config class or model refuses it (WorkerGone,
        # a broken worker, is no Exception: it fails the test)
        builds = False
    try:
        translate(data, "config.json", "t")
        read = True
    except UsageError:
        read = False
    assert read == builds, f"{mt} {hf_key} null: transformers {'builds' if builds else 'fails'}"


@pytest.mark.parametrize("mt,builds", [("deepseek_v3", False), ("deepseek_v2", True)])
def test_deepseek_head_dim_null_is_read_as_transformers_reads_it(mt, builds):
    """DeepSeek-V3's RoPE is sized by head_dim, so null fails its RoPE init: refused;
    DeepseekV2Config's head_dim is int | None and builds."""
    data = {**copy.deepcopy(EXAMPLES[mt]), "head_dim": None}
    try:
        WORKER(hf_counter.measure, data, 4, 1, "forward")
        built = True
    except Exception:  # noqa: BLE001
        built = False
    assert built == builds
    if builds:
        translate(data, "config.json", "t")
    else:
        # (the row's rule: head_dim absent or qk_rope_head_dim, hf_types_moe.V3_HEAD_DIM)
        with pytest.raises(UsageError, match="head_dim = None means a rotary embedding of "
                                             "another size than qk_rope_head_dim"):
            translate(data, "config.json", "t")
    translate({**data, "head_dim": data.get("qk_rope_head_dim", 64)}, "config.json", "t")
