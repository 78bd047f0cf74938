"""Hugging Face config.json -> the architecture spec (ModelConfig): one table per model_type.

A config.json is recognised by its "model_type". Each supported type is one HFType row in
one of the hf_types_*.py modules (the list, family by family: accounting/architecture/
__init__.py), and nothing else in the tool knows about it:

  * `keys`: the keys that change a count and the spec fields they set, with the default
    transformers uses when a key is absent (or Required: a size whose class default is
    some reference model's, which is never what a user means);
  * `derive`: the spec fields that several keys decide together, by transformers' own rule
    (Qwen's use_sliding_window/max_window_layers/layer_types -> which layers are local;
    Qwen3-MoE's decoder_sparse_step/mlp_only_layers and DeepSeek-V3's first_k_dense_replace
    -> which layers keep a dense MLP);
  * `fixed`: the model_type's rules that have no key (Qwen2's Q/K/V biases, Qwen3's
    per-head QK-norm, OLMo-2's full-width QK-norm and post-sublayer norms, DeepSeek-V3's
    sigmoid router with its correction bias);
  * `must`: keys the spec honours at some values only (DeepSeek-V3's scoring_func sigmoid);
  * `noted`: keys accepted with a note in the output (dropout: not counted);
  * `free`: keys that change no count, listed so that an unknown key is a decision;
  * `names`: the module names transformers gives the ledger's modules (for its cross-check).

Every key of a file falls in one of these, in the shared lists (COMMON_FREE, COMMON_MUST,
REFUSED) or is refused as unknown: no key is dropped silently. Defaults and rules are read
from transformers 5.23.0: models/<type>/configuration_<type>.py (class defaults) and
modeling_<type>.py (which biases and norms each type builds). Pure Python.

Layout: hf_schema.py (the row's schema, the shared lists, the registry), the 17
hf_types_*.py modules (the rows, vision-language wrappers included; imported below), this
module (translation, back to config.json, files).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from accounting.architecture.config import MAX_LAYERS, MAX_NAME, MAX_SIZE, ModelConfig
from accounting.architecture.fields import meta
from accounting.architecture.own_format import check_depth, config_from_dict, read_json
from accounting.runtime.errors import UsageError, escape
# the schema and the registry, re-exported: callers read them as hf_config.X
from accounting.architecture.hf_schema import (  # noqa: F401
    BOOL, CHOICE, INTEGER, PATTERN, WINDOW_PATTERN, COMMON_FREE, COMMON_MUST, EPS, FREE_VALUES,
    INT, INT_OR_ABSENT, INT_OR_NULL, LIST, NONNEG, NONNEG_OR_NULL, PROB,
    NUMBER_OR_NULL, REFUSED, THETA, real,
    TRANSFORMERS_VERSION, TYPES, UNSUPPORTED, WRAPPERS, Derived, HFType, Key, ModuleNames, Must, Noted,
    Required, register, short)
# the rows: registered into TYPES on import
# (in this order: the order --help, the errors and the docs list the types in)
from accounting.architecture import (  # noqa: F401
    hf_types_dense, hf_types_parallel, hf_types_gemma, hf_types_moe, hf_types_gpt_oss,
    hf_types_llama4, hf_types_cohere, hf_types_moe2, hf_types_dense2,
    hf_types_hybrid, hf_types_kimi, hf_types_falcon_h1, hf_types_jamba, hf_types_qwen35,
    hf_types_gemma4, hf_types_phimoe, hf_types_mamba_moe, hf_types_dense3, hf_types_vlm)

def supported_types() -> str:
    """The model_types a config.json may name, in the table's order: the one list --help,
    the errors and the docs (accounting/cli/generated.py) are written from."""
    return ", ".join([*TYPES, *WRAPPERS])


# ---- translation ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class HFConfig:
    """A config.json read: the spec it means, and what the output should say about it."""
    model_type: str
    data: Mapping  # the config.json object as read (a private copy)
    config: ModelConfig
    origin: str  # the file, or the preset's Hugging Face id
    mapped: tuple[tuple[str, object, tuple[str, ...], bool], ...]  # key, value, fields, given
    notes: tuple[str, ...] = ()
    dtype: str | None = None  # torch_dtype / dtype, when given
    judged: tuple[str, ...] = ()  # keys of no list, accepted by the judge (see translate)
    # a vision-language config's tower (accounting/architecture/vision.py), None for a language model
    vision: object = None
    # a vision-language wrapper's whole config.json (data is then its language model's):
    # what transformers' whole model is built from (crosscheck/hf_vision.py); None: data
    whole: Mapping | None = None

    @property
    def type(self) -> HFType:
        return TYPES[self.model_type]


_MISSING = object()


def _get(data: Mapping, path: str):
    """data[path], or data[a][b] for 'a.b'; _MISSING when absent."""
    head, _, rest = path.partition(".")
    value = data.get(head, _MISSING)
    if not rest or value is _MISSING:
        return value
    return value.get(rest, _MISSING) if isinstance(value, dict) else _MISSING


def _check_kind(key: Key, value, where: str) -> None:
    ok = {
        INT: lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SIZE,
        INT_OR_ABSENT: lambda v: isinstance(v, int) and not isinstance(v, bool)
        and 0 < v <= MAX_SIZE,
        INT_OR_NULL: lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                             and 0 < v <= MAX_SIZE),
        NONNEG: lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SIZE,
        NONNEG_OR_NULL: lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                                and 0 <= v <= MAX_SIZE),
        LIST: lambda v: v is None or isinstance(v, list),
        PATTERN: lambda v: v is None or (isinstance(v, str) and len(v) <= MAX_LAYERS),
        BOOL: lambda v: isinstance(v, bool),
        THETA: lambda v: _number(v) and v > 0,
        NUMBER_OR_NULL: lambda v: v is None or (_number(v) and v > 0),
        EPS: lambda v: _number(v) and v >= 0,
        PROB: lambda v: _number(v) and 0 <= v < 1,
        CHOICE: lambda v: isinstance(v, str) and v in key.choices,
        INTEGER: lambda v: isinstance(v, int) and not isinstance(v, bool) and abs(v) <= MAX_SIZE,
        WINDOW_PATTERN: lambda v: v is None or (isinstance(v, str) and 0 < len(v) <= 1000) or (
            isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SIZE),
    }[key.kind]
    if not ok(value):
        wanted = (f"{CHOICE} {', '.join(key.choices)} (the activations the tool's spec has)"
                  if key.kind == CHOICE else key.kind)
        raise UsageError(f"{where}: {key.hf} must be {wanted}, got {short(value)}")


def _number(v) -> bool:
    return real(v)  # ints and floats alike, bounded (hf_schema.real)


def _same(a, b) -> bool:
    """One value however spelt: 500000 and 500000.0 are one rope_theta (JSON does not tell
    them apart in meaning; transformers reads both as the number); otherwise equal reprs."""
    def number(v):  # (not _number: math.isfinite overflows on a huge int)
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if number(a) and number(b):
        return a == b
    return type(a) is type(b) and repr(a) == repr(b)


def _read(key: Key, data: Mapping, where: str):
    """The key's value (from it or an alias), checked; contradicting spellings refused."""
    found = [(p, _get(data, p)) for p in (key.hf, *key.aliases)]
    found = [(p, v) for p, v in found if v is not _MISSING]
    if any(not _same(v, found[0][1]) for _, v in found):
        shown = ", ".join(f"{p} = {short(v)}" for p, v in found)
        raise UsageError(f"{where}: contradictory keys {shown}; transformers reads them as one "
                         f"setting, so give one value")
    if not found:
        if isinstance(key.default, Required):
            raise UsageError(f"{where} is missing {key.hf}; add it (transformers would silently "
                             f"use its class default {key.default.transformers_default!r}, a "
                             f"reference model's size)")
        return key.default
    value = found[0][1]
    _check_kind(key, value, where)
    return value


# A judge of keys no list names: judge(data, unknown keys, the row, where) -> notes saying
# how they were found count-free, or UsageError refusing them. The CLI's builds transformers'
# model with and without them (accounting/crosscheck/hf_keys.py); none (--strict, and every
# caller that passes none) refuses them all.
Judge = Callable[[Mapping, tuple, HFType, str], tuple]


def translate(data: Mapping, source: str, name: str, origin: str = "",
              judge: Judge | None = None) -> HFConfig:
    """The spec a Hugging Face config.json object means; UsageError naming the key when a
    key would change a count the tool cannot represent, or is wrong or missing, or is
    unknown (in no list) and not judged count-free by `judge` (none: refused)."""
    check_depth(data, source)  # (the Python API's dicts too: the copies below recurse)
    mt = data.get("model_type")
    if isinstance(mt, str) and mt in WRAPPERS:  # a vision-language config: its language model
        inner, said = WRAPPERS[mt](data, f"{source} ({mt})")
        # the language model's own unknown keys are judged as a file of its type would be
        hf = translate(inner, f"{source} (text_config)", name, origin or source, judge)
        from accounting.architecture.vision import read_vision
        return replace(hf, notes=said + hf.notes,
                       vision=read_vision(data, f"{source} ({mt})", hf.config.d_model),
                       whole=MappingProxyType(copy.deepcopy(dict(data))))
    if isinstance(mt, str) and mt in UNSUPPORTED:
        raise UsageError(f"{source}: model_type {mt} is not supported: it {UNSUPPORTED[mt]}; "
                         f"refusing rather than approximating it (supported: {supported_types()})")
    if not isinstance(mt, str) or mt not in TYPES:
        raise UsageError(f"{source}: model_type {short(mt)} is not supported; supported: "
                         f"{supported_types()} (or write the tool's own format: see --help)")
    t = TYPES[mt]
    where = f"{source} ({mt})"
    if t.nested:
        return _translate_nested(t, data, source, name, origin, where, judge)
    for k, why in REFUSED.items():
        if data.get(k) is not None and not t.declares(k):
            raise UsageError(f"{where}: {k} = {short(data[k])} is {why}; refusing rather than "
                             f"dropping it")
    known = (COMMON_FREE | set(REFUSED) | {m.hf for m in COMMON_MUST} | {k.hf for k in t.keys}
             | {a for k in t.keys for a in k.aliases if "." not in a} | {m.hf for m in t.must}
             | {n.hf for n in t.noted} | t.free)
    unknown = tuple(sorted(k for k in data if k not in known))
    if unknown and judge is None:
        shown = ", ".join(short(k, 30) for k in unknown[:4]) + (" …" if len(unknown) > 4 else "")
        raise UsageError(f"{where}: unknown key(s) {shown}: the tool cannot tell whether "
                         f"{'it changes' if len(unknown) == 1 else 'they change'} a count, so it "
                         f"refuses rather than drop {'it' if len(unknown) == 1 else 'them'} "
                         f"(the keys it reads: accounting/architecture/hf_config.py, model_type {mt}; "
                         f"without --strict, the CLI judges such a key by building "
                         f"transformers' model with and without it)")
    for m in [m for m in COMMON_MUST if not t.declares(m.hf)] + list(t.must):
        value = data.get(m.hf, m.default)
        if not m.ok(value, data):
            absent = "" if m.hf in data else " (absent: transformers' default)"
            raise UsageError(f"{where}: {m.hf} = {short(value)}{absent} means {m.what}; the tool "
                             f"counts only {m.hf} {m.wanted}")
    for k, (ok, wanted) in (list(FREE_VALUES.items())
                            + [(n.hf, n.valid) for n in t.noted if n.valid]):
        if k in data and not ok(data[k]):
            raise UsageError(f"{where}: {k} = {short(data[k])} is not {wanted}; transformers "
                             f"refuses it (it changes no count, but the value is wrong)")
    spec: dict = {"name": name}
    mapped = []
    for key in t.keys:
        value = _read(key, data, where)
        given = any(_get(data, p) is not _MISSING for p in (key.hf, *key.aliases))
        mapped.append((key.hf, value, key.fields, given))
        if value is None:
            continue  # null: the spec's default is transformers' meaning (see Key)
        for f in key.fields:
            spec[f] = key.choices[value] if key.kind == CHOICE else value
    for a, b in t.divides:
        if spec[_field(t, b)] % spec[_field(t, a)]:
            raise UsageError(f"{where}: {b} {spec[_field(t, b)]} is not divisible by {a} "
                             f"{spec[_field(t, a)]}; transformers' {t.transformers_class} refuses "
                             f"it (even with head_dim given)")
    values = {k: v for k, v, _, _ in mapped}
    notes: list[str] = [k.absent for k, (_, _, _, given) in zip(t.keys, mapped)
                        if k.absent and not given]
    for d in t.derived:
        fields, said = d.rule(values, where)
        spec.update(fields)
        notes += said
    spec.update(t.fixed)
    for f in _SPEC_FIELDS:  # a dense reading (Qwen-MoE's num_experts 0): the table's
        needs = meta(f).needs      # MoE keys build nothing in transformers, so they are not
        if needs and spec.get(needs) is None:  # the spec's (whose own JSON refuses them)
            spec.pop(f.name, None)
    try:
        config = config_from_dict(spec, where)
    except UsageError as e:
        raise UsageError(_in_hf_words(str(e), t)) from None
    noisy: dict[str, list[str]] = {}  # a note once, for all the keys it is about
    for n in t.noted:
        if n.hf in data and not n.quiet(data[n.hf]):
            noisy.setdefault(n.note, []).append(f"{n.hf} = {data[n.hf]!r}")
    notes += [note.format(settings=", ".join(s)) for note, s in noisy.items()]
    notes += _rope_notes(data)
    if unknown:  # last: everything else about the file is checked before any build
        notes += judge(MappingProxyType(copy.deepcopy(dict(data))), unknown, t, where)
    dtype = storage_dtype(data)  # a name of TORCH_DTYPES or None (FREE_VALUES, above)
    return HFConfig(mt, MappingProxyType(copy.deepcopy(dict(data))), config, origin or source,
                    tuple(mapped), tuple(notes), dtype, unknown)


def _translate_nested(t: HFType, data: Mapping, source: str, name: str, origin: str,
                      where: str, judge: Judge | None = None) -> HFConfig:
    """A multimodal file (Llama 4): its top-level keys checked against the type's `outer`
    list, the language model read from data[t.nested] as a file of the text type, and the
    vision tower said to be uncounted. HFConfig.data stays the whole file: transformers'
    AutoModelForCausalLM builds the text model from it (Llama4ForCausalLM of text_config)."""
    inner = data.get(t.nested)
    if not isinstance(inner, dict):
        raise UsageError(f"{where}: {t.nested} must be an object (the language model's "
                         f"config), got {short(inner)}")
    known = COMMON_FREE | COMMON_MUST_KEYS | t.outer | {t.nested}
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(short(k, 30) for k in unknown[:4])}: "
                         f"the tool cannot tell whether they change a count, so it refuses "
                         f"rather than drop them (model_type {t.model_type})")
    for k, (ok, wanted) in FREE_VALUES.items():
        if k in data and not ok(data[k]):
            raise UsageError(f"{where}: {k} = {short(data[k])} is not {wanted}; transformers "
                             f"refuses it (it changes no count, but the value is wrong)")
    text_type = f"{t.model_type}_text"
    if inner.get("model_type", text_type) != text_type:
        raise UsageError(f"{where}: {t.nested}.model_type must be {text_type}, got "
                         f"{short(inner.get('model_type'))}")
    hf = translate({**inner, "model_type": text_type}, f"{source} {t.nested}", name, origin,
                   judge)
    mapped = tuple((f"{t.nested}.{k}", v, f, g) for k, v, f, g in hf.mapped)
    from accounting.architecture.vision import read_vision  # the towers the tool reads (issue 41)
    tower = read_vision(data, where, hf.config.d_model) if "vision_config" in data else None
    vision = ("vision_config: the vision tower and the multi-modal projector (the "
              "vision-language model's) are " + ("counted beside the language model "
                                                 "(parameters.vision); the language model's "
                                                 "counts" if tower else "not counted; the counts")
              + f" are {t.nested}'s, as AutoModelForCausalLM builds it ({t.transformers_class}, "
              f"whose head is tied by {t.nested}.tie_word_embeddings, not the top-level key).")
    return HFConfig(t.model_type, MappingProxyType(copy.deepcopy(dict(data))), hf.config,
                    origin or source, mapped, hf.notes + (vision,), storage_dtype(data),
                    hf.judged, tower)


_SPEC_FIELDS = fields(ModelConfig)
COMMON_MUST_KEYS = frozenset(m.hf for m in COMMON_MUST)


def storage_dtype(data: Mapping):
    """The checkpoint's dtype: "dtype" (transformers 5's spelling) unless null, else
    "torch_dtype", as transformers' PreTrainedConfig reads them; a multimodal file's
    text_config's when the file gives none at the top."""
    dtype = data["dtype"] if data.get("dtype") is not None else data.get("torch_dtype")
    if dtype is None and isinstance(data.get("text_config"), dict):
        return storage_dtype(data["text_config"])
    return dtype


def _field(t: HFType, hf_key: str) -> str:
    return next(k.fields[0] for k in t.keys if k.hf == hf_key)


def _rope_notes(data: Mapping) -> list[str]:
    out = []
    for k in ("rope_scaling", "rope_parameters"):
        v = data.get(k)
        if isinstance(v, dict) and v.get("rope_type", v.get("type", "default")) != "default":
            out.append(f"{k} {v.get('rope_type', v.get('type'))}: rescales RoPE's frequencies "
                       f"(changes no count)")
    return out


def _in_hf_words(message: str, t: HFType) -> str:
    """A spec error, with the config.json keys of the spec fields it names."""
    said = [(f, k.hf) for k in t.keys for f in k.fields if re.search(rf"\b{f}\b", message)
            and f != k.hf]
    if not said:
        return message
    return message + " [in config.json: " + ", ".join(f"{f} is {hf}" for f, hf in said) + "]"


def name_for(path: Path, data: Mapping) -> str:
    """A config.json's model name: its _name_or_path, else its folder (for a file named
    config.json, as checkpoints ship it), else the file's stem."""
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        name = given.strip()
    elif path.name == "config.json" and path.resolve().parent.name:
        name = path.resolve().parent.name
    else:
        name = path.stem
    # a name the file's path or bookkeeping gives is shown, never refused (issue 32): control
    # characters escaped and cut to the length a name may have, as the own format does
    return escape(name)[:MAX_NAME]


# ---- back to config.json, for a config modified by flags ----------------------------------
RUNTIME_FIELDS = ("attention",)  # spec fields of how model/ runs, not of the architecture
def for_transformers(hf: HFConfig, config: ModelConfig) -> tuple[dict | None, str]:
    """The config.json object that builds `config` in transformers: hf's own when unchanged;
    with the keys of changed fields rewritten (flags like --num-layers); or (None, why) when
    a changed field has no key in this model_type or the result would not mean `config`."""
    data = copy.deepcopy(dict(hf.data))
    t = hf.type
    if t.nested:  # the text model's keys, rewritten inside the nested object
        inner = translate({**data[t.nested], "model_type": f"{t.model_type}_text"},
                          "config.json", hf.config.name, judge=_already(hf))
        text, why = for_transformers(inner, config)
        if text is None:
            return None, why
        text["model_type"] = data[t.nested].get("model_type", text["model_type"])
        if "model_type" not in data[t.nested]:
            del text["model_type"]
        return {**data, t.nested: text}, ""
    # how the tool's model runs its attention is no key of config.json (the transformers
    # counter always runs eager attention): it is not written back
    config = replace(config, **{f: getattr(hf.config, f) for f in RUNTIME_FIELDS
                                if hasattr(config, f)})
    mine = hf.config
    if replace(config, name="") == replace(mine, name=""):
        return data, ""  # the config.json itself, whatever the tool read from it
    for key in t.keys:
        values = {getattr(config, f) for f in key.fields}
        if all(getattr(config, f) == getattr(mine, f) for f in key.fields):
            continue
        if len(values) != 1:
            return None, (f"{' and '.join(key.fields)} differ, and {t.model_type}'s "
                          f"{key.hf} sets both")
        value = values.pop()
        if key.kind == CHOICE:
            inverse = [hf_v for hf_v, spec_v in key.choices.items() if spec_v == value]
            if not inverse:
                return None, f"{key.fields[0]} {value!r} has no {key.hf} in {t.model_type}"
            value = inverse[0]
        for p in (key.hf, *key.aliases):
            if _get(data, p) is not _MISSING or p == key.hf:
                head, _, rest = p.partition(".")
                if rest:
                    data[head] = {**data[head], rest: value}
                else:
                    data[head] = value
    for d in t.derived:
        if all(getattr(config, f) == getattr(mine, f) for f in d.fields):
            continue
        keys = d.write(config) if d.write is not None else None
        if keys is None:
            return None, (f"{', '.join(d.fields)} as changed cannot be written as "
                          f"{', '.join(d.keys)} of {t.model_type}")
        data.update(keys)
    changed = [f.name for f in fields(config) if f.name != "name"
               and getattr(config, f.name) != getattr(mine, f.name)]
    fixed = [f for f in changed if f in t.fixed]
    if fixed:
        return None, (f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} fixed by "
                      f"model_type {t.model_type} (no config.json key sets "
                      f"{'it' if len(fixed) == 1 else 'them'})")
    try:
        again = translate(data, "the rewritten config.json", config.name,
                          judge=_already(hf)).config
    except UsageError as e:
        return None, str(e)
    if replace(again, name="") != replace(config, name=""):
        return None, "the flags' changes cannot be written as config.json keys"
    return data, ""


def _already(hf: HFConfig) -> Judge:
    """A judge accepting the keys judged count-free when hf was read, and no other."""
    def judged(d, unknown, t, where):
        if set(unknown) <= set(hf.judged):
            return ()
        raise UsageError(f"{where}: keys not judged: {', '.join(unknown)}")
    return judged


# ---- files ---------------------------------------------------------------------------------
def is_hf(data) -> bool:
    """A JSON object in Hugging Face's format (it names its model_type)."""
    return isinstance(data, dict) and "model_type" in data


def from_file(path: str | Path, data: Mapping, source: str, name: str | None = None,
              judge: Judge | None = None) -> HFConfig:
    """A parsed config.json file (own_format.read_json reads and parses it)."""
    path = Path(path)
    return translate(data, source, name or name_for(path, data), str(path), judge)


def load(path: str | Path, judge: Judge | None = None) -> HFConfig | None:
    """The HFConfig of a JSON file in Hugging Face's format; None for the tool's own format."""
    data, source = read_json(path)
    return from_file(path, data, source, judge=judge) if is_hf(data) else None


# The presets' config.json files, as shipped (package data; accounting/architecture/presets.py reads them).
PACKAGED = Path(__file__).resolve().parents[1] / "hf_configs"  # accounting/hf_configs
