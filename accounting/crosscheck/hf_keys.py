"""A config.json key the Hugging Face table does not list, judged by what transformers builds.

hf_config.translate refuses a key none of its lists name unless its caller hands it a judge;
the CLI hands it `judge` below (not with --strict). transformers' own model is built on the
meta device from the config.json object with and without the key (hf_counter.build:
AutoModelForCausalLM.from_config, eager attention), and run for a few tokens; the key is
accepted when the two builds are the same in everything the tool counts:

  * the parameters: every name and shape (named_parameters), and the buffers;
  * the module tree: every module's name and class (an activation is a module);
  * the forward pass: FlopCounterMode's FLOPs per operator, and the op counter's records
    (accounting/crosscheck/dispatch.py: every aten op's FLOPs under the tool's convention,
    by module: elementwise work too);
  * the KV cache after that prefill: each layer's class and key/value shapes (a sliding
    window that changes only the cache shows here);
  * a training step in train mode (forward and backward, the op counter's records): what
    only training runs, dropout, a router's jitter, the recomputation a true
    gradient_checkpointing turns on (the builds are otherwise in eval mode: issue 32).

Otherwise it is refused, naming the key and the first thing that changed. Imports torch and
transformers: accounting.cli.args imports this module only to judge unknown keys.

The shrink. On the meta device nothing is allocated or computed, so widths cost nothing
(measured, transformers 5.23.0 on 2 shared CPUs: Llama-3-70B's widths at 2 layers build and
run in 0.06 s, after the one-time import of transformers and its modeling module, a few
seconds that --verify pays too); what costs is the number of layers (80 layers: 3.2 s per
build). So only
the layer count is shrunk, the same way in both builds, and the widths are kept: a key that
sets a width can then never coincide with a shrunk size and hide. Fewer layers could hide a
key that acts on some layers only (an index, a period, "from layer k on"), so the builds keep
min(L, m + 2) layers, at least 2, where m is the largest integer below L in the unknown keys'
values and in the row's per-layer keys (the keys its derive rules read: first_k_dense_replace,
max_window_layers, decoder_sparse_step, mlp_only_layers, ...): layer m and one below it exist
in both builds.
An unknown key holding a list of L entries (one per layer) is judged at full depth. A list of
L entries in a known key (layer_types) is cut to the kept layers, as transformers' config
requires. Where the shrunk copy cannot be built, the full config is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch.utils.flop_counter import FlopCounterMode

from accounting.crosscheck import hf_counter, other_version
from accounting.crosscheck.dispatch import OpCounter
from accounting.runtime.errors import UsageError, shorten
from accounting.runtime.progress import Ticker
from accounting.architecture.hf_schema import HFType

SEQ = 4  # tokens of the judging forward pass: enough for every op; a few ms on meta
# the most layers judged at full depth (a list-valued unknown key): 80 layers build in about
# 3 s on meta here, and the judge builds each model twice and runs a training step
FULL_DEPTH_LAYERS = 128


@dataclass(frozen=True)
class Build:
    """What the tool counts of one transformers build, as comparable values."""
    params: tuple  # (name, shape) of each parameter
    buffers: tuple  # (name, shape) of each buffer
    modules: tuple  # (name, class name) of each module
    flops: tuple  # (operator, FLOPs): FlopCounterMode's totals of the forward pass
    ops: tuple  # the op counter's records that count: (module, op, kind, FLOPs), FLOPs > 0
    cache: tuple  # per layer: ("layer i", its class and K/V shapes in words)
    # a training step in train mode (forward and backward, op counter): what only training
    # runs (dropout, a router's jitter, the recomputation gradient_checkpointing turns on)
    training: tuple = ()


WHAT = {"params": "the parameters", "buffers": "the buffers", "modules": "the modules",
        "flops": "FlopCounterMode's forward FLOPs", "ops": "the forward pass's operators",
        "cache": "the KV cache",
        "training": "a training step's operators (train mode, forward and backward)"}


def probe(data: Mapping) -> Build:
    """transformers' model of `data` on meta, run for SEQ tokens."""
    model = hf_counter.build(data)
    ids = torch.zeros((1, SEQ), dtype=torch.long, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as fcm, OpCounter(model) as counter:
        out = model(input_ids=ids, use_cache=True)
    per_op = fcm.get_flop_counts().get("Global", {})  # the whole forward, by operator
    layers = getattr(getattr(out, "past_key_values", None) or getattr(out, "cache_params", None),
                     "layers", ())
    return _build(model, ids, per_op, counter, layers)


def _train_step(model, ids) -> tuple:
    """The op counter's records (FLOPs > 0) of one training step of `model`: train mode,
    forward with an all-ones attention mask (no cache: a training step's), backward of the
    logits' sum. A step that cannot run is recorded as why, so that it differs only where
    the key makes the difference."""
    model.train()
    try:
        with OpCounter(model) as counter:
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
            out.logits.float().sum().backward()
    except Exception as e:  # noqa: BLE001 - the same failure both ways is no difference
        return (("the training step", "fails", _why(e)),)
    finally:
        model.eval()
    return tuple(sorted((c.phase, c.module, c.op, c.kind, c.flops) for c in counter.counts()
                        if c.flops))


def _build(model, ids, per_op, counter, layers) -> Build:
    return Build(
        tuple((n, tuple(p.shape)) for n, p in model.named_parameters()),
        tuple((n, tuple(b.shape)) for n, b in model.named_buffers()),
        tuple((n, type(m).__name__) for n, m in model.named_modules()),
        tuple(sorted((str(k), int(v)) for k, v in per_op.items())),
        # zero-FLOP ops (views, slices, casts) may differ without a count changing
        tuple(sorted((c.module, c.op, c.kind, c.flops) for c in counter.counts() if c.flops)),
        tuple((f"layer {i}", f"{type(x).__name__} (K {_shape(x, 'keys')}, V "
                              f"{_shape(x, 'values')})") for i, x in enumerate(layers)),
        _train_step(model, ids))


def _shape(layer, which: str) -> str:
    t = getattr(layer, which, None)
    return "×".join(map(str, t.shape)) if isinstance(t, torch.Tensor) else "none"


def difference(a: Build, b: Build) -> str | None:
    """The first thing that differs between two builds, in words; None if none does."""
    for f in ("params", "buffers", "modules", "flops", "ops", "cache", "training"):
        x, y = getattr(a, f), getattr(b, f)
        if x == y:
            continue
        if f == "flops":
            return (f"{WHAT[f]} at T = {SEQ} go from {sum(v for _, v in x):,} to "
                    f"{sum(v for _, v in y):,}")
        # records keyed by all but their last value: what changed, what came or went
        before = {r[:-1]: r[-1] for r in x if r not in set(y)}
        after = {r[:-1]: r[-1] for r in y if r not in set(x)}
        for key in list(before) + list(after):
            name = " ".join(str(v) for v in key) or "(the model)"
            if key in before and key in after:
                return f"{WHAT[f]}: {name} {before[key]} becomes {after[key]}"
            return (f"{WHAT[f]}: {name} ({after[key] if key in after else before[key]}) is "
                    f"{'added' if key in after else 'removed'}")
    return None


def _ints(value):
    """Every integer in a JSON value (bools are not integers here)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield abs(value)
    elif isinstance(value, list):
        for v in value:
            yield from _ints(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _ints(v)


def _lists(value, n: int) -> bool:
    """A list of n entries anywhere in a JSON value."""
    if isinstance(value, list):
        return len(value) == n or any(_lists(v, n) for v in value)
    return isinstance(value, dict) and any(_lists(v, n) for v in value.values())


def layer_keys(t: HFType, data: Mapping) -> tuple[list[str], int | None]:
    """The config.json keys that hold the layer count (the row's num_layers key and its
    aliases present), and the count (None when absent or not an integer)."""
    key = next((k for k in t.keys if "num_layers" in k.fields), None)
    if key is None:
        return [], None
    names = [p for p in (key.hf, *key.aliases) if "." not in p and p in data]
    values = {data[p] for p in names if isinstance(data[p], int) and not isinstance(data[p], bool)}
    return names, (values.pop() if len(values) == 1 else None)


def _has_list(value) -> bool:
    """A list anywhere in a JSON value."""
    if isinstance(value, list):
        return True
    return isinstance(value, dict) and any(_has_list(v) for v in value.values())


def kept_layers(data: Mapping, unknown: tuple[str, ...], t: HFType) -> int | None:
    """How many layers the judging builds keep (the module docstring); None: all of them.
    An unknown key holding a list, of any length, is judged at full depth: a list one entry
    longer or shorter than the layers may be one entry per layer that transformers cannot
    run at the last layer (issue 32: a 7-entry kv_sharing_modes on 6 layers passed at 2)."""
    names, L = layer_keys(t, data)
    if L is None or any(_has_list(data[k]) for k in unknown):
        return None
    per_layer = {k for d in t.derived for k in d.keys} & set(data)
    # an integer of L or more names no layer (Qwen's max_window_layers = L: none slides)
    found = [i for k in (*unknown, *per_layer) for i in _ints(data[k]) if i < L]
    n = min(L, max(2, max(found, default=0) + 2))
    return None if n >= L else n


def shrink(data: Mapping, t: HFType, n: int | None) -> dict:
    """A copy of `data` with n layers (None: unchanged); per-layer lists cut to n."""
    out = dict(data)
    if n is None:
        return out
    names, L = layer_keys(t, data)
    for k, v in data.items():
        if isinstance(v, list) and len(v) == L and k not in names:
            out[k] = v[:n]
    out.update({k: n for k in names})
    return out


def _why(e: Exception) -> str:
    return shorten(" ".join(f"{type(e).__name__}: {e}".split()), 200)


def judge(data: Mapping, unknown: tuple[str, ...], t: HFType, where: str) -> tuple[str, ...]:
    """Notes saying how each unknown key was judged count-free; UsageError (one line) naming
    a key that changes what transformers builds, or why it cannot be judged."""
    shown = ", ".join(shorten(k, 30) for k in unknown)
    without = {k: v for k, v in data.items() if k not in unknown}
    n = kept_layers(data, unknown, t)
    L = layers_of(t, data)
    if n is None and L is not None and L > FULL_DEPTH_LAYERS:
        raise UsageError(f"{where}: unknown key(s) {shown}: judging "
                         f"{'it' if len(unknown) == 1 else 'them'} needs transformers' model "
                         f"at all {L:,} layers (a list value, which may hold one entry per "
                         f"layer), past the {FULL_DEPTH_LAYERS} layers judged in seconds; "
                         f"remove the key(s), or give a model_type whose table reads them")
    tick = Ticker(f"judging {shown[:60]}", 1 + len(unknown) + (len(unknown) > 1),
                  "builds of transformers' model")
    tick(0)
    try:
        base = probe(shrink(without, t, n))
    except Exception:
        n = None
        try:
            base = probe(without)
        except Exception as e:
            import transformers
            other = other_version(transformers.__version__)  # the install's fault (issue 32)
            raise UsageError(f"{where}: unknown key(s) {shown}: transformers' "
                             f"{t.transformers_class} could not be built without them to judge "
                             f"whether they change a count ({_why(e)}); "
                             + (f"{other}: install that (pip install -e '.[hf]'), or remove the "
                                f"key(s)" if other else "correct the config or remove the key(s)")
                             ) from None
    changed = []
    for i, k in enumerate(unknown + ((unknown,) if len(unknown) > 1 else ())):
        keys = k if isinstance(k, tuple) else (k,)
        if isinstance(k, tuple) and changed:
            break  # a key alone already changes the count
        copy = {**without, **{x: data[x] for x in keys}}
        tick(i + 1)
        try:
            try:
                got = probe(shrink(copy, t, n))
            except Exception:
                if n is None:
                    raise
                n, base = None, probe(without)  # the shrunk copy may be what fails: full depth
                got = probe(copy)
        except Exception as e:
            changed.append(f"{' and '.join(keys)}: transformers' {t.transformers_class} cannot "
                           f"be built with {'it' if len(keys) == 1 else 'them'} ({_why(e)})")
            continue
        diff = difference(base, got)
        if diff:
            changed.append(f"{' and '.join(keys)} = "
                           f"{', '.join(shorten(data[x], 30) for x in keys)} changes what "
                           f"transformers' {t.transformers_class} builds: {diff}")
    if changed:
        raise UsageError(f"{where}: unknown key(s) {shown}, judged by building transformers' "
                         f"model with and without them: {'; '.join(changed)}; the tool cannot "
                         f"count that, so it refuses (remove the key, or use a model_type "
                         f"that has it)")
    depth = "all layers" if n is None else f"{n} of {layers_of(t, data)} layers"
    return (f"{shown}: not in the tool's table for {t.model_type}; judged count-free: "
            f"transformers' {t.transformers_class} built on the meta device with and without "
            f"{'it' if len(unknown) == 1 else 'them'} ({depth}, T = {SEQ}) has the same "
            f"parameters, modules, operators, FLOPs, KV cache and training step (--strict refuses "
            f"{'it' if len(unknown) == 1 else 'them'} instead).",)


def layers_of(t: HFType, data: Mapping) -> int | None:
    return layer_keys(t, data)[1]
