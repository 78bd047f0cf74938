"""`serve`'s hostile inputs as hypothesis strategies, and its contract as a judge (issue 45):
a checkpoint's quantization_config of every quant_method the formats read, well and badly
formed (group sizes of 0, −2, "128", true; compressed-tensors groups that are lists or
strings, weights [4], block structures of one element or of zeros; fp8 blocks of booleans;
bitsandbytes 4- and 8-bit together), beside the serving flags (--ctx past the model's
context, --prompt past --ctx, TP and PP, KV dtypes, max-num-seqs) and models that keep
nothing per sequence. Shared by tests/test_fuzz_serve.py (in process, seeded, bounded: CI)
and benchmarks/fuzz_serve.py (a subprocess per batch, under the checkout being judged:
`python tests/serve_fuzz.py < cases.json` prints one verdict per case).

The contract: exit 0 with an answer or 2 with exactly one stderr line, never 3 (a
traceback's exception) nor anything else; and an answer must not be one of the silent
wrong numbers the issue found: negative bytes, "does not fit" for a model that keeps
nothing per sequence, a --ctx past the model's context answered without the engine's
switch, a --prompt longer than --ctx answered, or a block the reading library refuses
answered. The oracle for the last is written here from the libraries' documented rules
(transformers' GPTQConfig/BitsAndBytesConfig/FineGrainedFP8Config, compressed-tensors'
QuantizationArgs), not read from the code under test.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile

from hypothesis import strategies as st

CTX = 4096  # the base models' max_position_embeddings
LLAMA = {"model_type": "llama", "vocab_size": 1024, "hidden_size": 512,
         "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4, "max_position_embeddings": CTX}
NO_CACHE = {"model_type": "nemotron_h", "vocab_size": 96, "hidden_size": 32,
            "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 8, "hybrid_override_pattern": "---",
            "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 4, "n_groups": 2,
            "conv_kernel": 4, "chunk_size": 8, "max_position_embeddings": CTX}
HYBRID = {**NO_CACHE, "hybrid_override_pattern": "M*-"}
MODELS = {"llama": LLAMA, "no-cache": NO_CACHE, "hybrid": HYBRID}

_HOSTILE = (0, -1, -2, -64, -128, 1, 3, 7, 100, 128, 10**12, True, False, None, "128", "",
            1.5, float("nan"), [], [4], [128, 128], [True, True], [0, 128], [-128, -128],
            [128], "128x128", "abc", {}, {"a": 1}, "bogus")
_ANY = st.sampled_from(_HOSTILE)


def _maybe(valid):
    """A valid value most of the time, a hostile one else, or the key left out."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), _ANY, st.just("<absent>"))


def _block(draw, fields: dict) -> dict:
    out = {}
    for k, valid in fields.items():
        v = draw(_maybe(valid))
        if v != "<absent>":
            out[k] = v
    return out


@st.composite
def ct_args(draw):
    return _block(draw, {"num_bits": (4, 8), "type": ("int", "float", "FLOAT"),
                         "symmetric": (True, False),
                         "strategy": ("group", "channel", "tensor", "block"),
                         "group_size": (128, 64, -1), "block_structure": ([128, 128], "64x64"),
                         "dynamic": (True, False)})


@st.composite
def quant_blocks(draw):
    method = draw(st.sampled_from(("awq", "gptq", "compressed-tensors", "compressed-tensors",
                                   "fp8", "fp8", "fbgemm_fp8", "bitsandbytes", "mxfp4",
                                   "hqq", None, 3)))
    q = {"quant_method": method}
    if method == "awq":
        q.update(_block(draw, {"bits": (4,), "group_size": (128, 64, -1), "zero_point": (True,),
                               "version": ("gemm", "GEMM", "gemv_fast")}))
    elif method == "gptq":
        q.update(_block(draw, {"bits": (4, 8, 2), "group_size": (128, 32, -1),
                               "desc_act": (True, False), "sym": (True, False)}))
    elif method == "fp8":
        q.update(_block(draw, {"activation_scheme": ("dynamic", "static", "Dynamic"),
                               "weight_block_size": ([128, 128], [64, 128], None),
                               "scale_fmt": ("float", "ue8m0")}))
    elif method == "bitsandbytes":
        q.update(_block(draw, {"load_in_4bit": (True, False), "load_in_8bit": (False, True),
                               "bnb_4bit_quant_type": ("nf4", "fp4"),
                               "bnb_4bit_use_double_quant": (True, False)}))
    elif method == "compressed-tensors":
        q["format"] = draw(_maybe(("pack-quantized", "float-quantized", "int-quantized")))
        if q["format"] == "<absent>":
            del q["format"]
        entry = draw(st.one_of(
            st.builds(lambda w, a: {"targets": ["Linear"], "weights": w,
                                    **({} if a is None else {"input_activations": a})},
                      st.one_of(ct_args(), ct_args(), _ANY), st.one_of(st.none(), ct_args(),
                                                                        _ANY)),
            _ANY))
        shape = draw(st.sampled_from(("one", "one", "one", "list", "two")))
        q["config_groups"] = ({"group_0": entry} if shape == "one" else
                              [entry] if shape == "list" else
                              {"group_0": entry, "group_1": entry})
    if method in ("awq", "fp8", "fbgemm_fp8", "mxfp4") and draw(st.booleans()):
        q["modules_to_not_convert"] = draw(st.sampled_from((["lm_head"], None, "lm_head",
                                                            [1], [])))
    return q


FLAG_VALUES = {
    "--ctx": ("1024", "4096", "4097", "8192", "2000000", "1"),
    "--prompt": ("100", "1000", "4096", "200000"),
    "--tp": ("1", "2", "4"), "--pp": ("1", "2", "3"),
    "--kv-dtype": ("bf16", "fp8"), "--max-num-seqs": ("1", "10", "256"),
    "--concurrency": ("1", "8", "100000"), "--engine": ("vllm", "sglang"),
}


@st.composite
def cases(draw) -> dict:
    model = draw(st.sampled_from(("llama", "llama", "llama", "no-cache", "hybrid")))
    quant = draw(st.one_of(quant_blocks(), quant_blocks(), st.none())) \
        if model == "llama" else None
    flags = []
    for flag in draw(st.lists(st.sampled_from(sorted(FLAG_VALUES)), max_size=4, unique=True)):
        flags += [flag, draw(st.sampled_from(FLAG_VALUES[flag]))]
    long_ok = draw(st.sampled_from((False, False, False, True)))
    return {"model": model, "quant": quant, "flags": flags, "allow_long": long_ok}


# ---- the oracle: what the libraries refuse ------------------------------------------------
def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def refused_by_library(q) -> str | None:
    """Why the library that reads this block refuses it (or it is no size at all), else
    None. Only the classes the issue found: not a complete schema."""
    if not isinstance(q, dict):
        return None
    m = q.get("quant_method")
    if m in ("awq", "gptq"):
        g = q.get("group_size", 128)
        if g is None or not _int(g) or (g <= 0 and g != -1):
            return f"{m} group_size {g!r} (GPTQConfig.post_init: > 0 or -1)"
    if m == "fp8":
        b = q.get("weight_block_size")
        if b is not None and not (isinstance(b, list) and len(b) == 2
                                  and all(_int(x) and x > 0 for x in b)):
            return f"fp8 weight_block_size {b!r} (two positive integers)"
        a = q.get("activation_scheme", "dynamic")
        if not isinstance(a, str):
            return f"fp8 activation_scheme {a!r} (FineGrainedFP8Config lowers a string)"
    if m == "bitsandbytes" and q.get("load_in_4bit") is True and q.get("load_in_8bit") is True:
        return "bitsandbytes 4- and 8-bit together (BitsAndBytesConfig)"
    if m == "compressed-tensors":
        groups = q.get("config_groups")
        if not isinstance(groups, dict) or len(groups) != 1:
            return None  # (refused for another reason, or more groups: not this oracle's)
        (g,) = groups.values()
        if not isinstance(g, dict):
            return "a config_groups entry that is not an object (QuantizationScheme)"
        for key in ("weights", "input_activations"):
            w = g.get(key)
            if w is None:
                continue
            if not isinstance(w, dict):
                return f"{key} {w!r} is not an object (QuantizationArgs)"
            t = w.get("type", "int")
            if not isinstance(t, str) or t.lower() not in ("int", "float"):
                return f"{key} type {t!r} (QuantizationType)"
            gs, strategy = w.get("group_size"), w.get("strategy")
            if gs is not None and (not _int(gs) or gs < -1 or gs == 0):
                return f"{key} group_size {gs!r} (QuantizationArgs)"
            if isinstance(strategy, str) and strategy.lower() == "group" and (
                    gs is None or not _int(gs) or gs <= 0):
                return f"{key} strategy group without a positive group_size"
            if isinstance(strategy, str) and strategy.lower() == "block":
                bs = w.get("block_structure")
                ok = (isinstance(bs, list) and len(bs) == 2
                      and all(_int(x) and x > 0 for x in bs)) or (
                    isinstance(bs, str) and len(bs.split("x")) == 2
                    and all(p.isdigit() and int(p) > 0 for p in bs.split("x")))
                if not ok:
                    return f"{key} block_structure {bs!r} (two positive integers)"
    return None


def _numbers(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield path, x


def judge(case: dict, rc, out: str, err: str) -> list[str]:
    """The defects of one run (empty: it kept the contract)."""
    if rc not in (0, 2):
        return [f"exit {rc}: {err.strip()[-200:]}"]
    if rc == 2:
        lines = err.splitlines()
        return [] if len(lines) == 1 and lines[0].startswith("accounting: error: ") else \
            [f"exit 2 with {len(lines)} stderr lines"]
    try:
        d = json.loads(out)
    except ValueError:
        return ["exit 0 without a JSON answer"]
    found = [f"negative {p} = {v}" for p, v in _numbers(d)
             if "bytes" in p and not p.startswith(".config") and v < 0]
    if d.get("kv_bytes_per_token_per_gpu") == 0 and d.get("state_bytes_per_sequence_per_gpu") == 0 \
            and d.get("kv_pool_bytes_per_gpu", 0) > 0 and not d.get("fits"):
        found.append("a model that keeps nothing per sequence told it does not fit")
    flags = dict(zip(case["flags"][::2], case["flags"][1::2]))
    ctx = int(flags.get("--ctx", CTX))
    if ctx > CTX and not case["allow_long"]:
        found.append(f"--ctx {ctx} past the model's {CTX} answered without the engine's switch")
    if "--prompt" in flags and int(flags["--prompt"]) > ctx:
        found.append(f"--prompt {flags['--prompt']} longer than --ctx {ctx} answered")
    why = refused_by_library(case["quant"])
    if why:
        found.append(f"answered a block its library refuses: {why}")
    return found


def run_case(case: dict, folder: str) -> tuple[int | None, str, str]:
    """main(serve ...) in this process: (exit status or None for an escaped exception,
    stdout, stderr)."""
    from accounting.cli.main import main
    data = dict(MODELS[case["model"]])
    if case["quant"] is not None:
        data["quantization_config"] = case["quant"]
    path = os.path.join(folder, "config.json")
    with open(path, "w") as f:
        json.dump(data, f)
    argv = ["serve", "--config", path, "--gpu", "H100", *case["flags"], "--format", "json"]
    switches = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")
    saved = {k: os.environ.pop(k, None) for k in switches}
    if case["allow_long"]:
        os.environ.update({k: "1" for k in switches})
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except BaseException as e:  # noqa: BLE001 - anything out of main() is a defect
        rc, err = None, io.StringIO(f"{type(e).__name__}: {e}")
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
    return rc, out.getvalue(), err.getvalue()


def classify(case: dict) -> str:
    q = case["quant"]
    return (f"quant {q.get('quant_method')}" if isinstance(q, dict) else
            f"model {case['model']}" if case["model"] != "llama" else "serving flags")


def main() -> int:
    """Judge the cases on stdin (JSON list): one verdict line each on stdout."""
    cases_ = json.loads(sys.stdin.read())
    with tempfile.TemporaryDirectory(prefix="serve-fuzz-") as folder:
        for case in cases_:
            rc, out, err = run_case(case, folder)
            print(json.dumps({"class": classify(case), "rc": rc,
                              "defects": judge(case, rc, out, err)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
