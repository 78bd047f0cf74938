"""The CLI's argument space and config files as hypothesis strategies, a scratch folder of
hostile output targets, and the exit-status contract as a judge. Shared by
tests/test_fuzz_cli.py (in process, seeded, bounded: CI) and benchmarks/fuzz_cli.py
(subprocesses, hostile environments, Ctrl-C, many more examples).

The contract judged here (README, "Exit status"; issues 11 and 23):
  0 an answer · 1 a cross-check disagreement (stderr says DISAGREES) · 2 bad input or an
  unusable environment, exactly one line on stderr · 128 + N ended by signal N (130
  Ctrl-C, 143 SIGTERM, 129 SIGHUP), one line · nothing else (3 = an internal error is a
  defect too: it is a bug report, not an outcome).
  No traceback ever; no run longer than the hang bound; a failed or interrupted run leaves
  every file in the scratch folder exactly as it was (bytes, permissions, file type) and no
  new entries; a successful run changes only its -o target (a regular file or a new path).

Nothing here imports the package under test: the runners take the command to run, so the
benchmark can judge an older checkout with the same cases.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from fuzz_judge import EXISTING, HANG_SECONDS
from hypothesis import strategies as st

SENTINEL = b"previous output: must survive every failed or interrupted run\n"

# ---- the scratch folder -------------------------------------------------------------------
# Names an argument may refer to (relative to the run's working directory).
# EXISTING (fuzz_judge.py): a regular file with SENTINEL, mode 0644
OUTPUT_TARGETS = (
    EXISTING, "new.txt", "", "-", "dir", "dir/", "fifo", "link", "dangling", "missing/out.txt",
    f"{EXISTING}/x", "x" * 300, ".", "dev", "report/gpt2_sizes.md",
    # issue 32: the --config input itself, and a file with a second hard link
    "config.json", "hardlink",
)
CONFIG_PATHS = ("config.json", "config.json", "config.json", "fifo", "dir", "missing.json",
                "/dev/null", EXISTING, "", "x" * 300, "dev")
REPORT_DIRS = (EXISTING, "fifo", "missing/deeper", "", "figures_is_a_file",
               "report_is_a_folder", "dev",
               "report")  # issue 32: report/figures/ holds the user's own my_plot.png


def make_scratch(root: Path, config: bytes | None) -> None:
    """The hostile targets: a FIFO, a folder, links, a device node (as root: mknod needs it;
    a private null device in the scratch folder, never /dev/null; else a second FIFO)."""
    (root / EXISTING).write_bytes(SENTINEL)
    os.chmod(root / EXISTING, 0o644)
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")
    os.symlink(EXISTING, root / "link")
    os.symlink("nowhere.txt", root / "dangling")
    (root / "config.json").write_bytes(b'{"vocab_size": 64}' if config is None else config)
    figs = root / "figures_is_a_file"
    figs.mkdir()
    (figs / "figures").write_bytes(SENTINEL)
    (figs / "gpt2_sizes.md").write_bytes(SENTINEL)
    md = root / "report_is_a_folder"
    (md / "gpt2_sizes.md").mkdir(parents=True)
    (md / "figures").mkdir()
    (md / "figures" / "old.png").write_bytes(SENTINEL)
    (root / "report").mkdir()
    (root / "report" / "gpt2_sizes.md").write_bytes(SENTINEL)
    # issue 32: files no run may delete or change (fuzz_judge.USER_FILES), and a hard link
    (root / "report" / "figures").mkdir()
    (root / "report" / "figures" / "my_plot.png").write_bytes(SENTINEL)
    (root / "report_old").mkdir()  # a previous report's folder (the signalled report runs)
    (root / "report_old" / "gpt2_sizes.md").write_bytes(SENTINEL)
    (root / "linked.txt").write_bytes(SENTINEL)
    os.link(root / "linked.txt", root / "hardlink")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.mknod(root / "dev", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    else:  # not root: another FIFO, so that 'dev' is never a new path (report --out dev
        os.mkfifo(root / "dev")  # would make it and run the whole report)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root (links not followed): kind, permission bits, content hash."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st_ = os.lstat(p)
            kind = stat.S_IFMT(st_.st_mode)
            extra, links = "", 1
            if stat.S_ISREG(st_.st_mode):
                extra, links = hashlib.sha256(p.read_bytes()).hexdigest(), st_.st_nlink
            elif stat.S_ISLNK(st_.st_mode):
                extra = os.readlink(p)
            out[str(p.relative_to(root))] = (kind, stat.S_IMODE(st_.st_mode), extra, links)
    return out


# ---- strategies ---------------------------------------------------------------------------
PRESETS = ("gpt2-small", "gpt2-xl", "openai-community/gpt2", "openai-community/gpt2-xl",
           "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.1",
           "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen3-0.6B",
           "Qwen/Qwen3-30B-A3B", "allenai/OLMo-2-1124-7B", "deepseek-ai/DeepSeek-V3")
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=24)
LONG = ("x" * 5000, "9" * 5001, "é" * 2000, "a\nb", "line one\nline two", "\x1b[31mred\x1b[0m",
        "tab\there", "\r", "‮rtl", "z" * 100_000)
JUNK = st.one_of(_TEXT, st.sampled_from(LONG))

_SMALL = st.one_of(st.integers(1, 4096), st.sampled_from((1, 2, 4, 8, 64, 1024, 16384)))
INTS = st.one_of(
    _SMALL.map(str), _SMALL.map(str), _SMALL.map(str),
    st.sampled_from(("0", "-1", "1,024", "1_024", "1e3", "1.0", "", " ", "+5", "٣", "0x10",
                     "1024", "16384", str(10**12), str(10**12 + 1), str(10**15),
                     str(10**15 + 1), str(2**63), str(10**30), "9" * 5000, "1" * 4400,
                     "nan", "inf", "12abc", "--1", "１２")),
    st.integers(-10**20, 10**20).map(str),
    JUNK)
FRACTIONS = st.one_of(
    st.sampled_from(("0.5", "0.4", "1", "0.05", "0.3", "989", "19.5", "3.35")),
    st.sampled_from(("0.5", "1", "0", "-0.1", "0.05", "0.4", "1e999999999", "1e-999999999",
                     "-1e999999999", "nan", "inf", "-inf", "1/3", "0/0", "1/0", "0x10", "1e308",
                     "1e-308", "5e-1", "1e30", "1e-30", "", "abc", "1" * 5000,
                     "0." + "0" * 5000 + "1", "1_0", "½", "1e99", "1e-99", "989", "3.35",
                     "2e1000", "1e-400", " 0.5 ")),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(0, 1).map(str),
    JUNK)
SIZES = st.one_of(
    st.sampled_from(("80", "80GB", "80GiB", "81920MiB", "1B", "0.5B", "1e9", "9" * 50 + "TB",
                     "foo", "", "-1", "0", "80 GB", "80gb", "1.5TiB", "0.1B", "9" * 5000,
                     "99999999999999999999999", "1" + "0" * 40 + "B", "10TB", "2", "8")),
    JUNK)


def _choice(valid: tuple[str, ...]):
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), JUNK)


# small positive integers most of the time (so that layouts and experts divide), the
# hostile ones of INTS otherwise
DEGREES = st.one_of(st.sampled_from(("1", "2", "4", "8", "16", "3", "64", "1024")),
                    st.sampled_from(("1", "2", "4", "8")), INTS)
# (one argument is at most 128 KiB on Linux, MAX_ARG_STRLEN: longer ones cannot be run)
LAYER_LISTS = st.one_of(
    st.lists(st.sampled_from(("local", "global", "local", "sliding_attention",
                              "full_attention", "LOCAL", "", " global", "x")),
             min_size=0, max_size=70).map(",".join),
    st.sampled_from(("local,global", "local", "global", "local," * 12, "local," * 20_000,
                     ",", ",,", "local,,global", "local;global", "local global")),
    JUNK)
INDEX_LISTS = st.one_of(
    st.lists(st.integers(-2, 70).map(str), min_size=0, max_size=6).map(",".join),
    st.sampled_from(("0", "0,1,2", "0,0", "2,1", "", ",", "0,", "-1", "1e3", "0x1",
                     str(10**30), "0," * 50_000, ",".join(map(str, range(2000))), "٣")),
    JUNK)


MODEL_FLAGS = {
    "--vocab-size": INTS, "--context-length": INTS, "--num-layers": INTS, "--d-model": INTS,
    "--num-heads": INTS, "--d-ff": INTS, "--rope-theta": FRACTIONS, "--num-kv-heads": INTS,
    "--head-dim": INTS, "--norm-eps": FRACTIONS,
    "--mlp": _choice(("swiglu", "geglu", "geglu_erf", "gelu", "gelu_tanh")),
    "--norm": _choice(("rmsnorm", "layernorm")),
    "--norm-placement": _choice(("pre", "post")),
    "--positions": _choice(("rope", "learned", "none")),
    "--qk-norm": _choice(("none", "head", "full")),
    "--attention": _choice(("naive", "sdpa")),
    # sliding windows, mixtures of experts, latent attention
    "--sliding-window": INTS, "--layer-types": LAYER_LISTS, "--num-experts": DEGREES,
    "--experts-per-token": DEGREES, "--moe-d-ff": INTS, "--shared-experts": DEGREES,
    "--dense-layers": INDEX_LISTS, "--router": _choice(("softmax", "sigmoid")),
    "--capacity-factor": FRACTIONS, "--kv-lora-rank": INTS, "--q-lora-rank": INTS,
    "--qk-nope-head-dim": INTS, "--qk-rope-head-dim": INTS, "--v-head-dim": INTS,
}
MODEL_SWITCHES = ("--tie-embeddings", "--no-tie-embeddings", "--bias", "--no-bias", "--qkv-bias",
                  "--no-qkv-bias", "--out-bias", "--mlp-bias", "--no-mlp-bias", "--list")
WORKLOAD_FLAGS = {"--ctx": INTS, "--batch": INTS,
                  "--format": _choice(("text", "markdown", "csv", "json")),
                  "-o": st.sampled_from(OUTPUT_TARGETS), "--output": st.sampled_from(OUTPUT_TARGETS),
                  "--config": st.sampled_from(CONFIG_PATHS)}
ANALYSE_FLAGS = {**MODEL_FLAGS, **WORKLOAD_FLAGS, "--pass": _choice(("forward", "backward", "train")),
                 "--count": _choice(("executed", "useful"))}
PLAN_FLAGS = {
    **MODEL_FLAGS, **WORKLOAD_FLAGS,
    "--gpu": _choice(("A100", "H100", "A100-40GB", "H100-SXM", "a100-80gb")),
    "--gpu-mem": SIZES, "--gpu-flops": FRACTIONS, "--gpu-bw": FRACTIONS,
    "--margin": FRACTIONS, "--mfu": FRACTIONS, "--steps": INTS, "--tokens": INTS,
    "--position": INTS, "--precision": _choice(("fp32", "bf16-mixed", "bf16", "bf16-master")),
    "--implementation": _choice(("course", "transformers")),
    "--optimizer": _choice(("adamw", "adamw-fused", "adamw8bit", "adamw8bit-torchao",
                            "paged-adamw8bit", "adafactor", "sgd", "muon")),
    "--recompute": _choice(("none", "full", "selective")),
    "--scope": _choice(("model", "course")),
    # fine-tuning (issue 28)
    "--lora-rank": INTS, "--lora-alpha": FRACTIONS, "--lora-dropout": FRACTIONS,
    "--lora-targets": _choice(("all-linear", "q_proj,v_proj", "c_attn", "w1,w2,w3", "experts")),
    "--base-weights": _choice(("nf4",)),
    # the recipe flags (issue 44)
    "--loss": _choice(("standard", "chunked", "fused-linear")), "--loss-chunks": INTS,
}
# the multi-GPU planner (plan --gpus N ...)
PARALLEL_FLAGS = {
    "--gpus": DEGREES, "--tp": DEGREES, "--pp": DEGREES, "--dp": DEGREES, "--ep": DEGREES,
    "--zero": _choice(("0", "1", "2", "3")),
    "--fsdp": _choice(("no_shard", "shard_grad_op", "full_shard")),
    "--micro-batch": DEGREES, "--nvlink-gbs": FRACTIONS, "--network-gbs": FRACTIONS,
    "--gpus-per-node": DEGREES, "--cp": DEGREES, "--virtual-stages": DEGREES,
    "--stage-layers": st.one_of(st.sampled_from(("7,8,8,7", "1,2,2,1", "4", "0,4", "", "1,,2",
                                                 "9" * 30)), JUNK),
    "--mfu-convention": _choice(("executed", "causal", "6N")),
    "--mfu-scope": _choice(("compute", "end-to-end")), "--measured-tokens-per-s": FRACTIONS,
    "--offload": st.one_of(_choice(("optimizer", "params", "optimizer,params", "params,params",
                                    "activations", ",")), JUNK),  # issue 44
    # the stacks (issue 42) and their flags
    "--stack": _choice(("torch", "torchtitan", "megatron", "deepspeed")),
    "--attention-kernel": _choice(("flash", "fused", "unfused")), "--dropout": FRACTIONS,
}
# --async-tp (torchtitan's async TP) and --compare-formulas: switches of the many-GPU planner
PARALLEL_SWITCHES = ("--sp", "--search", "--fsdp", "--hfu", "--async-tp", "--compare-formulas")
# serving capacity (serve MODEL --gpu NAME ...), issue 29
SERVE_FLAGS = {
    **MODEL_FLAGS,
    "--gpu": _choice(("H100", "H200", "A100", "A100-40GB", "B200")),
    "--gpu-mem": SIZES, "--gpu-flops": FRACTIONS, "--gpu-bw": FRACTIONS,
    "--gpus": DEGREES, "--tp": DEGREES, "--pp": DEGREES, "--ctx": INTS, "--prompt": INTS,
    "--concurrency": INTS, "--max-num-batched-tokens": INTS, "--max-num-seqs": INTS,
    "--block-size": INTS, "--group-size": INTS, "--mfu": FRACTIONS,
    "--bandwidth-efficiency": FRACTIONS, "--gpu-memory-utilization": FRACTIONS,
    "--activation-peak": SIZES, "--non-torch": SIZES, "--cuda-graph-mem": SIZES,
    "--kv-dtype": _choice(("bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "int4")),
    "--weights": _choice(("bf16", "awq", "gptq", "gptq-act-order", "w4a16", "fp8",
                          "fp8-block", "int8", "mxfp4", "nf4", "bnb-int8", "int3")),
    "--engine": _choice(("vllm", "sglang", "trtllm")),
}


def _model():
    return st.one_of(st.sampled_from(PRESETS), st.sampled_from(PRESETS), st.just(None),
                     st.sampled_from(("gpt2", "GPT2-XL", "gpt2-xxl", "", "-", "llama",
                                      "meta-llama/Llama-3.2-1B/", "../etc/passwd")), JUNK)


@st.composite
def _flags(draw, table: dict, switches: tuple[str, ...], max_flags: int = 4) -> list[str]:
    out: list[str] = []
    for _ in range(draw(st.integers(0, max_flags))):
        if switches and draw(st.integers(0, 4)) == 0:
            out.append(draw(st.sampled_from(switches)))
            continue
        flag = draw(st.sampled_from(sorted(table)))
        value = draw(table[flag])
        # "--flag=value" and "--flag value" both; a value starting with '-' only as '='
        if value.startswith("-") or draw(st.booleans()):
            out.append(f"{flag}={value}" if flag.startswith("--") else f"{flag}{value}")
        else:
            out += [flag, value]
    return out


def _custom_sizes():
    """A valid-looking custom shape now and then (so custom configs reach the analysis)."""
    return st.sampled_from((
        [], [], [],
        ["--vocab-size", "100", "--context-length", "64", "--num-layers", "2", "--d-model", "64",
         "--num-heads", "4"],
        ["--vocab-size", "50257", "--context-length", "1024", "--num-layers", "12",
         "--d-model", "768", "--num-heads", "12", "--d-ff", "3072"],
        ["--vocab-size", str(10**12), "--context-length", str(10**12), "--num-layers", str(10**12),
         "--d-model", str(10**12), "--num-heads", str(10**6), "--d-ff", str(10**12)],
        # valid shapes of the newer kinds (so that they reach the analysis and the planner)
        ["--vocab-size", "100", "--context-length", "64", "--num-layers", "4", "--d-model", "64",
         "--num-heads", "4", "--num-experts", "8", "--experts-per-token", "2"],
        ["--vocab-size", "100", "--context-length", "64", "--num-layers", "4", "--d-model", "64",
         "--num-heads", "4", "--num-experts", "4", "--experts-per-token", "2",
         "--shared-experts", "1", "--dense-layers", "0", "--router", "sigmoid",
         "--moe-d-ff", "32", "--capacity-factor", "1.25"],
        ["--vocab-size", "100", "--context-length", "64", "--num-layers", "4", "--d-model", "64",
         "--num-heads", "4", "--sliding-window", "16", "--layer-types",
         "local,global,local,global"],
        ["--vocab-size", "100", "--context-length", "64", "--num-layers", "2", "--d-model", "64",
         "--num-heads", "4", "--kv-lora-rank", "32", "--q-lora-rank", "48",
         "--qk-nope-head-dim", "16", "--qk-rope-head-dim", "8", "--v-head-dim", "16"],
        ["--num-experts", str(10**12), "--experts-per-token", str(10**12),
         "--moe-d-ff", str(10**12), "--shared-experts", str(10**12)],
        ["--sliding-window", str(10**12), "--kv-lora-rank", str(10**12),
         "--qk-nope-head-dim", str(10**12), "--qk-rope-head-dim", str(10**12),
         "--v-head-dim", str(10**12)],
    ))


def _gpus():
    """The multi-GPU planner's flags: a plausible layout now and then, any flags else."""
    return st.one_of(
        st.sampled_from((
            [], [],
            ["--gpus", "8", "--gpu", "H100"],
            ["--gpus", "8", "--tp", "2", "--pp", "2", "--gpu", "A100"],
            ["--gpus", "16", "--tp", "4", "--sp", "--zero", "3", "--gpu", "H100"],
            ["--gpus", "64", "--search", "--gpu", "H100"],
            ["--gpus", "8", "--ep", "8", "--gpu", "H100"],
            ["--gpus", "8", "--fsdp", "--micro-batch", "4", "--gpu", "H200"],
            # async TP (its workspace outside the caching allocator), a LoRA compile
            ["--gpus", "8", "--tp", "2", "--sp", "--stack", "torchtitan", "--async-tp",
             "--gpu", "H100"],
            ["--gpus", "8", "--zero", "1", "--optimizer", "adamw8bit-torchao", "--gpu", "H100"],
            ["--gpus", str(10**15), "--search", "--gpu", "H100"],
            ["--gpus", "1024", "--search", "--gpu-mem", "80GB", "--gpu-flops", "989",
             "--gpu-bw", "3.35"],
        )),
        _flags(PARALLEL_FLAGS, PARALLEL_SWITCHES, 3))


@st.composite
def argvs(draw) -> list[str]:
    """One command line that should finish in well under a second: the cross-check only
    where sizes are past what torch can index (refused before any model runs)."""
    kind = draw(st.sampled_from(("analyse", "analyse", "compare", "plan", "plan", "serve",
                                 "report", "misc")))
    model = draw(_model())
    head = [] if model is None else [model]
    if kind == "report":
        args = draw(st.sampled_from((["--help"], ["--bogus"], ["--out"], ["--verify"], [])))
        if not args or draw(st.booleans()):
            args = ["--no-verify", "--out", draw(st.sampled_from(REPORT_DIRS))]
        return ["report"] + args
    if kind == "misc":
        return draw(st.sampled_from((["--help"], ["plan", "--help"], ["--list"], ["plan", "--list"],
                                     ["serve", "--help"], ["serve", "--list"], ["serve"],
                                     [], ["plan"], ["--version"], ["--brief"], ["report", "-h"],
                                     ["--list", "--format", "json"], ["--list", "-o", EXISTING])))
    sizes, most = draw(_custom_sizes()), 5
    if draw(st.integers(0, 3)) == 0:  # the drawn config file (often a Hugging Face one),
        head, sizes, most = ["--config", "config.json"], [], 2  # few flags: it can answer
        # --strict: a drawn key in no list of the Hugging Face table is refused, not judged
        # by building transformers' model (seconds to import it: past the hang bound on
        # shared CPUs; the judging has its own tests, tests/test_hf_hubconfigs.py)
        head.append("--strict")
    if kind == "plan":
        return (["plan"] + head + sizes + draw(_flags(PLAN_FLAGS, MODEL_SWITCHES + ("--no-double-quant",
                                                                                 "--optimizer-in-backward",
                                                                                 "--compile",
                                                                                 "--prepare-kbit-training"),
                                                      most))
                + draw(_gpus()))
    if kind == "serve":
        gpu = draw(st.sampled_from((["--gpu", "H100"], ["--gpu", "H200"], [])))
        return ["serve"] + head + sizes + gpu + draw(_flags(SERVE_FLAGS, MODEL_SWITCHES, most))
    extra = draw(_flags(ANALYSE_FLAGS, MODEL_SWITCHES + ("--brief",), most))
    if kind == "compare":
        extra.append("--compare-formulas")
    verify = draw(st.integers(0, 9)) == 0
    if verify:  # the cross-check at a length torch cannot index: refused before it runs
        extra += ["--verify", "--ctx", draw(st.sampled_from((str(10**10), str(10**12), str(10**15))))]
    else:
        extra.append("--no-verify")
    return head + sizes + extra


# ---- config files -------------------------------------------------------------------------
_BASE = {"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, "num_heads": 4}
_FIELDS = ("vocab_size", "context_length", "num_layers", "d_model", "num_heads", "d_ff",
           "rope_theta", "name", "num_kv_heads", "head_dim", "norm", "norm_eps",
           "norm_placement", "mlp", "positions", "tie_embeddings", "qkv_bias", "out_bias",
           "mlp_bias", "qk_norm", "attention",
           # issue 32: mixture-of-experts keys that mean nothing without num_experts
           "num_shared_experts", "experts_per_token", "moe_d_ff", "dense_layers")
_VALUES = st.one_of(
    st.integers(-10, 4096), st.integers(-10**13, 10**13),
    st.sampled_from((10**12, 10**12 + 1, 10**400)),
    st.floats(allow_nan=True, allow_infinity=True), _TEXT, st.none(), st.booleans(),
    st.lists(st.integers(), max_size=3), st.dictionaries(_TEXT, st.integers(), max_size=2),
    st.sampled_from(("swiglu", "gelu", "layernorm", "learned", "none", "head", "sdpa", "x" * 5000,
                     "a\nb")))
_SPECIAL = (
    b"", b"\xef\xbb\xbf{}", b"\xff\xfe\x00", b"null", b"[]", b"1", b'"str"', b"{", b"{'a': 1}",
    b'{"vocab_size": ' + b"9" * 5001 + b"}",
    b'{"vocab_size": ' + b"9" * 4000 + b"}",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b'{"name": ' + b"[" * 900 + b"]" * 900 + b"}",
    b'{"vocab_size": 1e999, "context_length": 64, "num_layers": 2, "d_model": 64, "num_heads": 4}',
    b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, "num_heads": 4, '
    b'"rope_theta": Infinity}',
    b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, "num_heads": 4, '
    b'"rope_theta": NaN}',
    b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": "64", "num_heads": 4}',
    b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": null, "num_heads": 4}',
    b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64.0, "num_heads": 4}',
    b'{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}',
    b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, "num_heads": 4, '
    b'"name": "' + b"n" * 100_000 + b'"}',
    b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, "num_heads": 4, '
    b'"name": "two\\nlines\\u0007"}',
    b'{"vocab_size": 100, "vocab_size": 200, "context_length": 64, "num_layers": 2, '
    b'"d_model": 64, "num_heads": 4}',
    b" " * 2_000_000 + b"{}",
)


# Hugging Face config.json files: the ones the tool ships (read as files: nothing here
# imports the package), mutated.
HF_DIR = Path(__file__).resolve().parents[1] / "accounting" / "hf_configs"
HF_CONFIGS = tuple(sorted((p.relative_to(HF_DIR).as_posix(), json.loads(p.read_text()))
                          for p in HF_DIR.rglob("*.json")))
# issue 31: a small hybrid config of each layer kind (no shipped file has one): Qwen3-Next's
# gated DeltaNet with gated attention and experts, Nemotron-H's Mamba-2 pattern, LFM2's convs
HYBRID_SEEDS = (
    ("qwen3_next", {"model_type": "qwen3_next", "vocab_size": 96, "hidden_size": 32,
                    "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 8, "full_attention_interval": 4,
                    "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                    "linear_key_head_dim": 4, "linear_value_head_dim": 4,
                    "linear_conv_kernel_dim": 4, "num_experts": 4, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 8, "shared_expert_intermediate_size": 12,
                    "max_position_embeddings": 64}),
    ("nemotron_h", {"model_type": "nemotron_h", "vocab_size": 96, "hidden_size": 32,
                    "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 8, "hybrid_override_pattern": "M*-M",
                    "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 4,
                    "n_groups": 2, "conv_kernel": 4, "chunk_size": 8}),
    ("lfm2", {"model_type": "lfm2", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
              "layer_types": ["conv", "full_attention", "conv"], "conv_L_cache": 3,
              "max_position_embeddings": 64}),
)
_HF_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
            "rope_theta", "rms_norm_eps", "tie_word_embeddings", "attention_bias", "mlp_bias",
            "hidden_act", "sliding_window", "use_sliding_window", "max_window_layers",
            "layer_types", "num_experts", "num_local_experts", "n_routed_experts",
            "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
            "first_k_dense_replace", "decoder_sparse_step", "mlp_only_layers", "scoring_func",
            "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
            "n_embd", "n_layer", "n_head", "n_positions", "n_inner", "activation_function",
            "rope_scaling", "quantization_config", "norm_topk_prob", "topk_group", "n_group",
            "moe_layer_freq", "layer_norm_epsilon", "router_aux_loss_coef",
            # issue 32: number-valued keys of the newer rows, a training switch, a per-layer
            # list of transformers' cache, a value that may nest deep
            "rotary_pct", "partial_rotary_factor", "attn_logit_softcapping",
            "final_logit_softcapping", "embedding_multiplier", "residual_multiplier",
            "logits_scaling", "routed_scaling_factor", "gradient_checkpointing",
            "task_specific_params", "kv_sharing_modes", "router_jitter_noise",
            # issue 31: the hybrid families' keys (layer patterns, recurrent sizes, MTP, DSA)
            "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
            "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
            "hybrid_override_pattern", "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
            "n_groups", "chunk_size", "conv_kernel", "conv_L_cache", "full_attn_idxs",
            "shared_expert_intermediate_size", "num_nextn_predict_layers", "index_topk",
            "index_n_heads", "index_head_dim")
_HF_VALUES = st.one_of(
    _VALUES, st.sampled_from((0, -1, 1, 2, 8, 10**12, 10**12 + 1, 10**15, 10**18, 2**63,
                              10**40, float("nan"), float("inf"), float("-inf"), 1e308, 0.5,
                              True, False, "8", "", [], {}, [None], ["full_attention"] * 3,
                              ["sliding_attention"] * 500, list(range(100)), [-1], [10**9],
                              "sigmoid", "softmax", "silu", "gelu_new", "relu", "tanh",
                              {"type": "yarn", "factor": float("inf")}, {"a": {"b": [1]}},
                              # issue 32: integers past any float, one past the bound
                              10**400, -10**400, 10**19, ["none"] * 7,
                              # issue 31: hybrid layer patterns, well and badly formed
                              ["linear_attention", "linear_attention", "full_attention"],
                              ["conv", "full_attention"] * 2, "M-M*", "M*-", "MEM-", "Z")))
_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "olmo2", "mixtral", "qwen3_moe",
                "deepseek_v3", "bert", "llama4", "", "GPT2", "deepseek_v2", None, 3, ["llama"],
                "qwen3_next", "nemotron_h", "lfm2", "deepseek_v32", "glm4_moe",
                "x" * 5000, "a\nb")


@st.composite
def hf_config_texts(draw) -> bytes:
    """A shipped config.json with keys removed, wrong types, huge numbers, NaN/Infinity,
    nested junk, another or an unknown model_type, bad mixture-of-experts values."""
    _, data = draw(st.sampled_from(HF_CONFIGS + HYBRID_SEEDS))
    data = dict(data)
    for _ in range(draw(st.sampled_from((0, 0, 1, 1, 2, 3, 4)))):  # often light: it answers
        op = draw(st.integers(0, 7))
        if op <= 2:
            data[draw(st.sampled_from(_HF_KEYS))] = draw(_HF_VALUES)
        elif op == 3 and data:
            data.pop(draw(st.sampled_from(sorted(data))))
        elif op == 4:
            data["model_type"] = draw(st.sampled_from(_MODEL_TYPES))
        elif op == 5:
            data[draw(_TEXT)] = draw(_HF_VALUES)
        elif op == 6:
            key = draw(st.sampled_from(_HF_KEYS))
            value = draw(_HF_VALUES)
            for _ in range(draw(st.sampled_from((2, 50, 500, 990, 5000)))):
                value = {"x": value} if draw(st.booleans()) else [value]
            data[key] = value
        else:  # another shipped file's keys merged in (a hybrid of two model types)
            _, other = draw(st.sampled_from(HF_CONFIGS))
            data.update({k: v for k, v in other.items() if draw(st.booleans())})
    try:
        return json.dumps(data).encode()
    except (ValueError, RecursionError):
        return b"{}"


@st.composite
def config_texts(draw) -> bytes:
    """A config file's bytes: this tool's format or a Hugging Face config.json mutated
    (wrong types, huge numbers, bad keys, deep nesting, missing fields), or something that
    is not such a file at all."""
    pick = draw(st.integers(0, 7))
    if pick <= 1:
        return draw(st.sampled_from(_SPECIAL))
    if pick <= 4:
        return draw(hf_config_texts())
    data: dict = dict(_BASE)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.integers(0, 5))
        if op <= 2:
            data[draw(st.sampled_from(_FIELDS))] = draw(_VALUES)
        elif op == 3 and data:
            data.pop(draw(st.sampled_from(sorted(data))))
        elif op == 4:
            data[draw(_TEXT)] = draw(_VALUES)
        else:
            key = draw(st.sampled_from(_FIELDS))
            depth = draw(st.sampled_from((2, 50, 500, 5000)))
            value = draw(_VALUES)
            for _ in range(depth):
                value = [value]
            data[key] = value
    try:
        return json.dumps(data).encode()
    except (ValueError, RecursionError):
        return b"{}"


# the judge (tests/fuzz_judge.py), here too for the callers that know it as cli_fuzz's
from fuzz_judge import (ANSWER, DISAGREEMENT, ERROR, INTERRUPTED, Result, Verdict,  # noqa: E402,F401
                        _output_target, _report_dir, judge, stderr_lines)
