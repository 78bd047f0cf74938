"""The Python API's argument space (the notebook user's door) as hypothesis strategies, and
its contract as a judge (issue 23). Shared by tests/test_fuzz_api.py (in process, seeded,
bounded: CI) and benchmarks/fuzz_cli.py (a subprocess per batch, under the checkout being
judged: `python tests/api_fuzz.py < calls.json` prints one verdict per call).

The contract: every public call (accounting/__init__.py's exports, Analysis's public
methods, accounting.planning.plan, the DataFrame functions) either answers or raises
ValueError (UsageError is one) or TypeError; never AttributeError, KeyError, OverflowError
or anything else, never past the hang bound; and an argument that is plainly not one the
call accepts (a counting, phase, component, precision, scope or recompute name it does not
list; an unknown preset name; a count that is not a whole number of at least 1; a flag that
is not a bool) is refused, not answered: answering it was the issue's silent wrong number
(matmul_flops('Executed') gave the useful count, flops_grid(component='attention_core')
[[0]]). The accepted values below are the documentation's (README, the docstrings), written
out here, not read from the code under test.

A call is data (JSON): {"fn": name, "args": [...], "kwargs": {...}}, each value a tagged
list (decode()), so that the benchmark can hand the same calls to another checkout.
"""
from __future__ import annotations

import json
import signal
import sys
from fractions import Fraction

from hypothesis import strategies as st

HANG_SECONDS = 10.0

# ---- the accepted values, as documented ---------------------------------------------------
CHOICES = {
    "counting": ("executed", "useful"),
    "phase": ("forward", "backward", "train"),
    "component": ("attention projections", "attention core", "feed-forward", "LM head"),
    "precision": ("fp32", "bf16-mixed"),
    "scope": ("model", "course"),
    "recompute": ("none", "full", "selective"),
}
PRESETS = ("gpt2-small", "openai-community/gpt2", "meta-llama/Llama-3.2-1B",
           "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3", "mistralai/Mixtral-8x7B-v0.1")
TINY = {"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, "num_heads": 4,
        "d_ff": 128, "name": "tiny"}

# ---- values: tagged, so that a call is JSON -------------------------------------------------
_JUNK = [
    ["none"], ["bool", True], ["bool", False], ["int", 0], ["int", -1], ["int", 2**70],
    ["int", 10**15 + 1], ["float", "64.0"], ["float", "nan"], ["float", "inf"], ["float", "0.5"],
    ["str", ""], ["str", "64"], ["str", "bogus"], ["str", "Executed"], ["str", "FORWARD"],
    ["str", "attention_core"], ["str", "gpt2-smal"], ["str", "x" * 300], ["bytes", "forward"],
    ["list"], ["list", ["int", 64]], ["dict"], ["object"], ["fraction", 1, 2], ["np", 64],
    ["np", -3], ["range", 16, 18], ["str", "a\nb\u2028c"], ["str", "gpt2-small"],
]


def decode(v):
    tag, *rest = v
    if tag == "none":
        return None
    if tag in ("bool", "int", "str"):
        return rest[0]
    if tag == "float":
        return float(rest[0])
    if tag == "bytes":
        return rest[0].encode()
    if tag == "list":
        return [decode(x) for x in rest]
    if tag == "dict":
        return {}
    if tag == "object":
        return object()
    if tag == "fraction":
        return Fraction(*rest)
    if tag == "np":
        import numpy as np
        return np.int64(rest[0])
    if tag == "range":
        return range(*rest)
    if tag == "config":
        from accounting import get_preset
        return get_preset(rest[0])
    if tag == "tiny":
        from accounting import ModelConfig
        return ModelConfig(**TINY)
    raise ValueError(tag)


def show(v) -> str:
    tag, *rest = v
    if tag in ("config", "tiny"):
        return f"<{tag} {rest[0] if rest else ''}>".replace(" >", ">")
    if tag == "list":
        return "[" + ", ".join(show(x) for x in rest) + "]"
    if tag in ("str", "bytes"):
        return repr(rest[0][:40])
    return f"{tag}({', '.join(map(str, rest))})" if rest else tag


# ---- which arguments are plainly not accepted ------------------------------------------------
def _count_ok(v) -> bool:
    return (v[0] in ("int", "np") and v[1] >= 1)


def plainly_wrong(kind: str, v) -> bool:
    """True when value v is plainly not one an argument of this kind accepts. Kinds:
    a choice name (CHOICES), 'config', 'configs', 'count', 'counts', 'bool', 'preset', each
    with '?' when None is documented (the default of that argument)."""
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    if kind == "any":
        return False  # no claim
    if v[0] == "none":
        return not optional
    if kind in CHOICES:
        return not (v[0] == "str" and v[1] in CHOICES[kind])
    if kind in ("config", "preset"):
        if v[0] in ("config", "tiny"):
            return kind == "preset"
        return not (v[0] == "str" and v[1] in PRESETS) if v[0] == "str" else True
    if kind == "configs":
        if v[0] == "list":
            return any(plainly_wrong("config", x) for x in v[1:])
        return plainly_wrong("config", v)
    if kind == "count":
        return not _count_ok(v)
    if kind == "counts":
        if v[0] == "range":
            return v[1] < 1
        return not (v[0] == "list" and all(_count_ok(x) for x in v[1:]))
    if kind == "bool":
        return v[0] != "bool"
    raise ValueError(kind)


# ---- the public calls and their arguments ---------------------------------------------------
WORKLOAD = [("config", "config"), ("seq", "count?"), ("batch", "count"), ("phase", "phase"),
            ("counting", "counting")]
SIGNATURES: dict[str, list[tuple[str, str]]] = {
    "analyze": WORKLOAD,
    "Analysis": [("config", "config"), ("seq", "count"), ("batch", "count"), ("phase", "phase"),
                 ("counting", "counting")],
    "flops_grid": [("config", "config"), ("seqs", "counts"), ("batches", "counts"),
                   ("phase", "phase"), ("counting", "counting"), ("component", "component?")],
    "plan": [("config", "config"), ("seq", "count?"), ("batch", "count"),
             ("precision", "precision"), ("scope", "scope"), ("recompute", "recompute"),
             ("gpu", "any"), ("memory_bytes", "count?"), ("mfu", "any"), ("margin", "any"),
             ("steps", "count?"), ("tokens", "count?"), ("position", "count?")],
    "get_preset": [("name", "preset")],
    "config_from_json": [("path", "any")],
    "default_d_ff": [("d_model", "count")],
    "matmul_frame": [("config", "config"), ("seq", "count?"), ("batch", "count"),
                     ("phase", "phase"), ("include_non_matmul", "bool")],
    "sweep": [("configs", "configs"), ("seqs", "counts"), ("batch", "count"),
              ("phase", "phase")],
    "formulas_frame": [("configs", "configs"), ("seqs", "any"), ("batch", "count")],
    "formula_terms_frame": [("config", "config"), ("seq", "count?"), ("batch", "count")],
}
METHODS: dict[str, list[tuple[str, str]]] = {
    "matmul_flops": [("counting", "counting?"), ("phase", "any")],
    "component_flops": [("counting", "counting?")],
    "component_shares": [("counting", "counting?")],
    "component_flops_per_layer": [("counting", "counting?")],
    "flops_per_token": [("counting", "counting?")],
    "ratio_to_context_length": [("counting", "counting?")],
    "crossover": [("counting", "counting?")],
    "matmul_expr": [("counting", "counting?"), ("component", "component?"), ("phase", "phase?")],
    "matmul_polynomial": [("counting", "counting?"), ("component", "component?"),
                          ("phase", "phase?")],
}
DEFAULTS = {"seq": ["int", 16], "batch": ["int", 1], "seqs": ["list", ["int", 16]],
            "batches": ["list", ["int", 1]], "config": ["tiny"], "configs": ["tiny"],
            "name": ["str", "gpt2-small"], "d_model": ["int", 64], "path": ["str", "missing.json"]}


def _good(name: str, kind: str):
    """Values an argument accepts (so that a call reaches its other arguments)."""
    k = kind.rstrip("?")
    if k in CHOICES:
        return st.sampled_from([["str", c] for c in CHOICES[k]])
    if k in ("config", "configs"):
        return st.sampled_from([["tiny"], ["str", "gpt2-small"], ["config", "gpt2-small"],
                                ["str", "Qwen/Qwen3-30B-A3B"], ["tiny"]])
    if k == "count":
        return st.sampled_from([["int", 16], ["int", 1], ["int", 64], ["np", 32], ["int", 8]])
    if k == "counts":
        return st.sampled_from([["list", ["int", 16], ["int", 64]], ["range", 1, 4],
                                ["list", ["np", 8]]])
    if k == "bool":
        return st.sampled_from([["bool", True], ["bool", False]])
    if name == "gpu":
        return st.sampled_from([["str", "H100"], ["str", "A100-40GB"], ["none"]])
    if name in ("mfu", "margin"):
        return st.sampled_from([["str", "0.5"], ["fraction", 1, 3], ["float", "0.25"]])
    return st.just(DEFAULTS.get(name, ["none"]))


def _value(name: str, kind: str):
    return st.one_of(_good(name, kind), _good(name, kind), _good(name, kind),
                     st.sampled_from(_JUNK))


@st.composite
def calls(draw) -> dict:
    """One public call with each argument drawn: mostly accepted values, some junk."""
    fn = draw(st.sampled_from(sorted(SIGNATURES) + [f"Analysis.{m}" for m in sorted(METHODS)]))
    params = METHODS[fn.split(".")[1]] if fn.startswith("Analysis.") else SIGNATURES[fn]
    args, kwargs = [], {}
    for i, (name, kind) in enumerate(params):
        required = i == 0 and not fn.startswith("Analysis.") or (fn == "Analysis" and i < 2) \
            or (fn in ("flops_grid", "sweep") and i < 2)
        if not required and draw(st.integers(0, 2)) == 0:
            continue  # left to its default
        value = draw(_value(name, kind))
        if required and not kwargs:
            args.append(value)
        else:
            kwargs[name] = value
    call = {"fn": fn, "args": args, "kwargs": kwargs}
    if fn.startswith("Analysis."):
        call["of"] = draw(st.sampled_from(["forward", "train", "backward"]))
    return call


# ---- running and judging ----------------------------------------------------------------------
ALLOWED = (ValueError, TypeError)  # UsageError is a ValueError


def _target(fn: str, of: str | None):
    import accounting
    if fn.startswith("Analysis."):
        a = accounting.analyze(accounting.ModelConfig(**TINY), 16, 2, of or "forward")
        return getattr(a, fn.split(".")[1])
    if fn == "plan":
        from accounting.planning import plan
        return plan
    return getattr(accounting, fn)


def _params(call: dict) -> list[tuple[str, str, list]]:
    fn = call["fn"]
    params = METHODS[fn.split(".")[1]] if fn.startswith("Analysis.") else SIGNATURES[fn]
    kinds = dict(params)
    out = [(params[i][0], params[i][1], v) for i, v in enumerate(call["args"])]
    return out + [(name, kinds[name], v) for name, v in call["kwargs"].items()]


def judge(call: dict) -> tuple[str, list[str]]:
    """(outcome, defects): outcome 'answer' or 'refused (ValueError)' ...; a defect is an
    exception of another kind, an answer to a plainly wrong argument, or a hang."""
    f = _target(call["fn"], call.get("of"))
    args = [decode(v) for v in call["args"]]
    kwargs = {k: decode(v) for k, v in call["kwargs"].items()}
    wrong = [name for name, kind, v in _params(call) if plainly_wrong(kind, v)]

    def alarm(signum, frame):
        raise TimeoutError("hang bound")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        f(*args, **kwargs)
    except TimeoutError:
        return "hang", [f"no answer within {HANG_SECONDS:g} s"]
    except ALLOWED as e:
        kind = "UsageError" if type(e).__name__ == "UsageError" else \
            "TypeError" if isinstance(e, TypeError) else "ValueError"
        return f"refused ({kind})", []
    except Exception as e:  # noqa: BLE001 - the defect being looked for
        return f"{type(e).__name__}", [f"{type(e).__name__}: {str(e)[:160]}"]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if wrong:
        return "answer", [f"answered a plainly wrong {', '.join(wrong)}"]
    return "answer", []


def describe(call: dict) -> str:
    parts = [show(v) for v in call["args"]] + [f"{k}={show(v)}" for k, v in call["kwargs"].items()]
    of = f" (of a {call['of']} analysis)" if call.get("of") else ""
    return f"{call['fn']}({', '.join(parts)}){of}"


def main() -> int:
    """Read a JSON list of calls on stdin; print one JSON verdict per line."""
    import warnings
    warnings.simplefilter("ignore")  # a library's deprecation notes are not the subject
    for call in json.load(sys.stdin):
        outcome, defects = judge(call)
        print(json.dumps({"outcome": outcome, "defects": defects, "call": describe(call)}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
