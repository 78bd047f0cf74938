"""Argument parsing shared by the subcommands: one-line errors, configs from flags, output.

Every parse error becomes a UsageError, which cli.main prints on one line with exit 2.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from accounting.runtime import safe_io
from accounting.analysis.workload import MAX_WORKLOAD
from accounting.spec.config import (ATTENTIONS, MAX_CONFIG_BYTES, MAX_LAYERS, MAX_NAME, MAX_SIZE, MLPS,
                                    NORM_PLACEMENTS, NORMS, POSITIONS, QK_NORMS, ModelConfig)
from accounting.spec.loaders import config_from_json
from accounting.spec.presets import get_preset
from accounting.runtime.errors import UsageError, shorten

FORMATS = ("text", "markdown", "csv", "json")
PROGRAM = "python -m accounting"  # how the usage lines name the program
LIMITS = (f"Limits, checked before any work: sizes (--vocab-size ... --d-ff, --num-kv-heads, "
          f"--head-dim) up to 10^12, --num-layers up to {MAX_LAYERS:,}; --rope-theta, "
          f"--norm-eps, --capacity-factor up to 10^18; counts (--ctx, --batch, --steps, "
          f"--tokens, --position) up "
          f"to 10^15; decimal numbers (--mfu, --margin, --gpu-flops, --gpu-bw) of at most 100 "
          f"characters with exponents within ±100; --gpu-mem up to 10^18 bytes; config files up "
          f"to {MAX_CONFIG_BYTES // 2**20} MiB, names up to {MAX_NAME} characters. ")
EXIT_STATUS = ("Exit status: 0 an answer, 1 the cross-check disagrees, 2 bad input or an "
               "unusable environment (one line on stderr), 3 an internal error (a bug: please "
               "report it), 128 + N ended by signal N: 130 interrupted (Ctrl-C), 143 SIGTERM, "
               "129 SIGHUP.")
_QUOTED = re.compile(r"'((?:[^'\\]|\\.){48,})'")


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting, names the
    program as it was started (PROGRAM), states the input limits under --help, and checks
    the -o target as part of parsing (before any work)."""

    def __init__(self, *args, prog: str | None = None, **kwargs):
        if prog is not None and prog.startswith("python -m accounting"):
            prog = PROGRAM + prog[len("python -m accounting"):]
        kwargs.setdefault("epilog", LIMITS + EXIT_STATUS)
        super().__init__(*args, prog=prog, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        message = _QUOTED.sub(lambda m: shorten(m.group(1), 48), message)
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def _print_message(self, message: str, file=None) -> None:
        # --help and --version: through safe_io, so that an ASCII-only stdout gets ASCII
        # spellings and a closed one is a one-line error, not a traceback
        if message:
            safe_io.write_stdout(message)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        ns = super().parse_args(args, namespace)
        if getattr(ns, "output", None) is not None:
            safe_io.output_target(ns.output)
        return ns


def positive_int(flag: str, maximum: int = MAX_WORKLOAD, limit_text: str = "10^15"):
    """An integer in [1, maximum], digits with optional thousands separators ('1,024')."""
    def parse(text: str) -> int:
        digits = text.strip().replace(",", "").replace("_", "")
        if not digits.isascii() or not digits.lstrip("+-").isdigit():
            raise argparse.ArgumentTypeError(
                f"must be a positive integer, got {shorten(text)}") from None
        if len(digits.lstrip("+-0")) > len(str(maximum)):
            raise argparse.ArgumentTypeError(
                f"must be at most {limit_text}, got a {len(digits.lstrip('+-0')):,}-digit number")
        value = int(digits)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {limit_text}, got {value:,}")
        return value
    parse.__name__ = "positive integer"
    return parse


def positive_float(flag: str, allow_zero: bool = False):
    """A finite float > 0 (or ≥ 0 with allow_zero)."""
    what = "non-negative" if allow_zero else "positive"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {what} number, got {shorten(text)}") from None
        if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a {what} finite number, got {shorten(text)}")
        return value
    parse.__name__ = f"{what} number"
    return parse


_SIZE_FLAGS = (("--vocab-size", "vocab_size"), ("--context-length", "context_length"),
               ("--num-layers", "num_layers"), ("--d-model", "d_model"),
               ("--num-heads", "num_heads"), ("--d-ff", "d_ff"))
_ARCH_SIZES = (("--num-kv-heads", "num_kv_heads", "key/value heads (default: num_heads; 1 = "
                "multi-query; fewer = grouped-query attention)"),
               ("--head-dim", "head_dim", "head dimension (default: d_model/num_heads)"))
_ARCH_CHOICES = (("--mlp", "mlp", MLPS, "feed-forward: swiglu (default), geglu, gelu (exact), "
                  "gelu_tanh (GPT-2)"),
                 ("--norm", "norm", NORMS, "rmsnorm (default) or layernorm (with bias)"),
                 ("--norm-placement", "norm_placement", NORM_PLACEMENTS,
                  "pre (default) or post (OLMo-2: norm on each sublayer's output)"),
                 ("--positions", "positions", POSITIONS,
                  "rope (default), learned (a table of context_length positions) or none"),
                 ("--qk-norm", "qk_norm", QK_NORMS, "none (default), head (Qwen3) or full (OLMo-2)"),
                 ("--attention", "attention", ATTENTIONS,
                  "how the attention core runs: naive (default: the course's explicit scores, "
                  "mask and softmax) or sdpa (the fused kernel, F.scaled_dot_product_attention)"))
# Sliding windows, mixtures of experts, latent attention (issue 15): flag, field, parser, help.
_EXTRA_SIZES = (
    ("--sliding-window", "sliding_window", "a local layer attends its last W keys (every layer "
     "local unless --layer-types says which)"),
    ("--num-experts", "num_experts", "routed experts per MoE layer (a mixture of experts)"),
    ("--experts-per-token", "experts_per_token", "top-k: experts each token runs (default 2)"),
    ("--moe-d-ff", "moe_d_ff", "each expert's inner width (default: d_ff)"),
    ("--kv-lora-rank", "kv_lora_rank", "multi-head latent attention: the K/V latent width "
     "(with --qk-nope-head-dim, --qk-rope-head-dim, --v-head-dim)"),
    ("--q-lora-rank", "q_lora_rank", "latent attention: the query latent width (default: none)"),
    ("--qk-nope-head-dim", "qk_nope_head_dim", "latent attention: per-head Q/K dims without RoPE"),
    ("--qk-rope-head-dim", "qk_rope_head_dim", "latent attention: per-head Q/K dims with RoPE"),
    ("--v-head-dim", "v_head_dim", "latent attention: per-head value dims"),
)


def _int_list(flag: str, words: tuple[str, ...] = ()):
    """'0,1,2' -> (0, 1, 2); with `words`, 'local,global' -> ('local', 'global')."""
    def parse(text: str) -> tuple:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        if words:
            bad = [x for x in items if x not in words]
            if bad:
                raise argparse.ArgumentTypeError(f"must list {' or '.join(words)}, got {bad[0]!r}")
            return items
        try:
            return tuple(int(x) for x in items)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must list layer indices, got {text!r}") from None
    parse.__name__ = "list"
    return parse


_BIASES = (("--qkv-bias", "qkv_bias", "biases on the Q, K, V projections"),
           ("--out-bias", "out_bias", "bias on the attention output projection"),
           ("--mlp-bias", "mlp_bias", "biases on the MLP matrices"))


def add_model_args(p: argparse.ArgumentParser, model_required: bool = False) -> None:
    p.add_argument("model", nargs=None if model_required else "?",
                   help="a preset (see --list): gpt2-small … gpt2-xl (GPT-2 shapes on the CS336 "
                        "architecture), openai-community/gpt2 … gpt2-xl, meta-llama/Llama-3.2-1B, "
                        "meta-llama/Llama-3.1-8B")
    p.add_argument("--list", action="store_true",
                   help="list the presets with their architecture and parameter count, and exit")
    g = p.add_argument_group("custom config (each flag also overrides a preset)")
    g.add_argument("--config", metavar="FILE",
                   help="JSON object with vocab_size, context_length, num_layers, d_model, "
                        "num_heads and optionally d_ff, rope_theta, name and the architecture "
                        "fields below (their names with underscores)")
    for flag, dest in _SIZE_FLAGS:
        g.add_argument(flag, dest=dest, type=positive_int(flag, MAX_SIZE, "10^12"), metavar="N")
    g.add_argument("--rope-theta", type=positive_float("--rope-theta"), metavar="X")
    a = p.add_argument_group("architecture (defaults: the CS336 model; each overrides a preset)")
    for flag, dest, text in _ARCH_SIZES:
        a.add_argument(flag, dest=dest, type=positive_int(flag, MAX_SIZE, "10^12"), metavar="N",
                       help=text)
    for flag, dest, choices, text in _ARCH_CHOICES:
        a.add_argument(flag, dest=dest, choices=tuple(choices), help=text)
    a.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction, default=None,
                   help="the LM head reads the token embedding table (default: untied)")
    for flag, dest, text in _BIASES:
        a.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=text)
    a.add_argument("--bias", action=argparse.BooleanOptionalAction, default=None,
                   help="all three kinds of bias at once (GPT-2)")
    a.add_argument("--norm-eps", type=positive_float("--norm-eps", allow_zero=True), metavar="X",
                   help="the norms' epsilon (changes no count)")
    x = p.add_argument_group("sliding windows, mixtures of experts, latent attention")
    for flag, dest, text in _EXTRA_SIZES:
        x.add_argument(flag, dest=dest, type=positive_int(flag), metavar="N", help=text)
    x.add_argument("--layer-types", type=_int_list("--layer-types", ("local", "global")),
                   metavar="local,global,…", help="each layer's attention, one per layer")
    x.add_argument("--dense-layers", type=_int_list("--dense-layers"), metavar="0,1,…",
                   help="layers that keep a dense MLP among MoE layers (DeepSeek's first k)")
    x.add_argument("--shared-experts", dest="num_shared_experts", type=positive_int("--shared-experts"),
                   metavar="N", help="experts every token runs beside its top-k (DeepSeek)")
    x.add_argument("--router", choices=("softmax", "sigmoid"),
                   help="softmax over the experts (Mixtral, Qwen3) or a sigmoid each (DeepSeek-V3)")
    x.add_argument("--capacity-factor", dest="moe_capacity_factor",
                   type=positive_float("--capacity-factor"), metavar="X",
                   help="each expert runs ⌈X·B·T·k/E⌉ rows (padding or dropping); default dropless")


def _arch_overrides(ns: argparse.Namespace) -> dict:
    out = {dest: getattr(ns, dest) for _, dest, _ in _ARCH_SIZES}
    out.update({dest: getattr(ns, dest) for _, dest, _, _ in _ARCH_CHOICES})
    out["tie_embeddings"] = ns.tie_embeddings
    out["norm_eps"] = ns.norm_eps
    out.update({dest: getattr(ns, dest) for _, dest, _ in _EXTRA_SIZES})
    for dest in ("layer_types", "dense_layers", "num_shared_experts", "router", "moe_capacity_factor"):
        out[dest] = getattr(ns, dest)
    for flag, dest, _ in _BIASES:
        value = getattr(ns, dest)
        if ns.bias is not None and value is not None and value != ns.bias:
            raise UsageError(f"{'--bias' if ns.bias else '--no-bias'} contradicts "
                             f"{flag if value else '--no-' + flag[2:]}; give one of them")
        out[dest] = ns.bias if value is None else value
    return out


def config_from_args(ns: argparse.Namespace) -> ModelConfig:
    overrides = {dest: getattr(ns, dest) for _, dest in _SIZE_FLAGS}
    overrides["rope_theta"] = ns.rope_theta
    overrides.update(_arch_overrides(ns))
    if ns.model and ns.config:
        raise UsageError("give either a model name or --config FILE, not both")
    if ns.model:
        base = get_preset(ns.model)
    elif ns.config:
        base = config_from_json(ns.config)
    else:
        missing = [flag for flag, dest in _SIZE_FLAGS[:5] if overrides[dest] is None]
        if missing:
            raise UsageError("no model given: name a preset (see --list), pass --config FILE, or "
                             "give " + ", ".join(missing))
        base = None
    positions = overrides["positions"] or (base.positions if base else "rope")
    if ns.rope_theta is not None and positions != "rope":
        raise UsageError(f"--rope-theta is given but positions are {positions!r}; RoPE's theta "
                         f"needs --positions rope")
    if base is not None:
        return base.with_overrides(**overrides)
    if overrides["d_ff"] is None:  # the MLP's default width
        overrides["d_ff"] = MLPS[overrides["mlp"] or "swiglu"].default_d_ff(overrides["d_model"])
        if overrides["d_ff"] > MAX_SIZE:
            raise UsageError(f"the default d_ff for d_model {overrides['d_model']:,} is "
                             f"{overrides['d_ff']:,}, past the 10^12 limit; give --d-ff")
    return ModelConfig(**{k: v for k, v in overrides.items() if v is not None})


def hf_source_from_args(ns: argparse.Namespace):
    """The Hugging Face config.json the model came from (a shipped preset's, or --config's
    when it is in Hugging Face's format), else None: for the transformers cross-check and
    the table of what was read. Call after config_from_args (which reports bad input)."""
    from accounting.spec import hf_config, presets
    if ns.model:
        return presets.hf_source(ns.model)
    if ns.config:
        return hf_config.load(ns.config)
    return None


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (default), markdown, csv or json (json holds exact integers)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE atomically (a temporary file beside it, then a rename; "
                        "its permissions kept) instead of stdout; FILE must be a regular file "
                        "or a new name, never a folder or a device; - is stdout")


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write the whole file or nothing (accounting.runtime.safe_io)."""
    safe_io.write_atomic(path, data)


def emit(text: str, output: str | None) -> None:
    """The command's output: standard output (in its encoding), or -o FILE atomically."""
    safe_io.emit(text, output)


def terminal_width(output: str | None) -> int | None:
    """The width to fit text tables to: the terminal's when stdout is one (or COLUMNS is
    set), for output to stdout; None (no wrapping: the full lines, byte-stable) otherwise."""
    return safe_io.terminal_width() if output in (None, "-") else None
