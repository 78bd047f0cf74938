"""`plan`'s fine-tuning flags (issue 28): --lora-rank, --lora-targets, --lora-alpha,
--lora-dropout, --base-weights nf4 (QLoRA), --no-double-quant. Parsing only: the plan is
accounting/planning/finetune.py's."""
from __future__ import annotations

import argparse
from fractions import Fraction

from accounting.cli.args import positive_int
from accounting.planning.compute import MAX_EXPONENT, exact
from accounting.runtime.errors import UsageError, shorten


def _fraction(flag: str):
    def parse(text: str) -> Fraction:
        # the plan's one bounded reader of a user's decimal (Fraction("1e999999999") would
        # expand a billion-digit integer: a hang the CLI fuzz found)
        try:
            if len(text) > 40:
                raise ValueError
            return exact(text.strip(), flag)
        except (ValueError, ZeroDivisionError, UsageError):
            raise argparse.ArgumentTypeError(f"must be a number with an exponent within "
                                             f"±{MAX_EXPONENT}, got {shorten(text)}") from None
    parse.__name__ = "number"
    return parse


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(","))
    if not text.strip() or any(not n or len(n) > 100 for n in names):
        raise argparse.ArgumentTypeError(
            f"must be all-linear or module names separated by commas (q_proj,v_proj), got "
            f"{shorten(text)}")
    return names


_names.__name__ = "names"


def add_args(p: argparse.ArgumentParser) -> None:
    from accounting.planning.finetune import ALL_LINEAR, BASE_WEIGHTS, DEFAULT_ALPHA
    f = p.add_argument_group("fine-tuning (LoRA, QLoRA: PEFT's LoraConfig)")
    f.add_argument("--lora-rank", type=positive_int("--lora-rank", 10**6, "10^6"), metavar="R",
                   help="train LoRA adapters of rank R on a frozen base (PEFT's r); the base "
                        "keeps no gradient and no optimizer state")
    f.add_argument("--lora-targets", type=_names, metavar=f"{ALL_LINEAR}|NAME,NAME…",
                   help=f"PEFT's target_modules: {ALL_LINEAR} (default: every linear layer but "
                        "the LM head) or module names (q_proj,v_proj; GPT-2: c_attn)")
    f.add_argument("--lora-alpha", type=_fraction("--lora-alpha"), metavar="ALPHA",
                   help=f"PEFT's lora_alpha (default {DEFAULT_ALPHA}; scaling alpha/r changes no count)")
    f.add_argument("--lora-dropout", type=_fraction("--lora-dropout"), metavar="P",
                   help="PEFT's lora_dropout (default 0: no dropout; above 0 each adapter keeps "
                        "its dropout's output and a bool mask)")
    f.add_argument("--base-weights", choices=BASE_WEIGHTS, metavar="nf4",
                   help="QLoRA: the base's linear layers in bitsandbytes' NF4 (4-bit) layout, "
                        "compute in bf16 (needs --lora-rank and --precision bf16-mixed)")
    f.add_argument("--no-double-quant", action="store_true",
                   help="QLoRA without double quantization (float32 absmax per block of 64)")
    f.add_argument("--prepare-kbit-training", action="store_true",
                   help="QLoRA after PEFT's prepare_model_for_kbit_training (TRL's SFTTrainer "
                        "calls it on a 4-bit model): the embeddings, norms and LM head in fp32, "
                        "so the residual stream and each block's input are fp32")


def plan_kwargs(ns: argparse.Namespace) -> dict:
    """plan()'s fine-tuning arguments from the flags."""
    from accounting.planning.finetune import ALL_LINEAR, DEFAULT_ALPHA, LoRA
    lora_flags = [f for f in ("lora_targets", "lora_alpha", "lora_dropout")
                  if getattr(ns, f) is not None]
    if ns.lora_rank is None:
        if lora_flags:
            raise UsageError(f"--{lora_flags[0].replace('_', '-')} describes LoRA adapters; "
                             "give --lora-rank R with it")
        if ns.no_double_quant or ns.prepare_kbit_training:
            flag = "--no-double-quant" if ns.no_double_quant else "--prepare-kbit-training"
            raise UsageError(f"{flag} is QLoRA's; give --base-weights nf4 --lora-rank R")
        return {"base_weights": ns.base_weights}
    if ns.no_double_quant and ns.base_weights is None:
        raise UsageError("--no-double-quant is QLoRA's; give --base-weights nf4 with it")
    lora = LoRA(ns.lora_rank, Fraction(DEFAULT_ALPHA) if ns.lora_alpha is None else ns.lora_alpha,
                Fraction(0) if ns.lora_dropout is None else ns.lora_dropout,
                ns.lora_targets or (ALL_LINEAR,))
    from accounting.cli.args import hf_source_from_args
    h = hf_source_from_args(ns)
    names = h.type.module_names(h.data) if h is not None else None
    return {"lora": lora, "base_weights": ns.base_weights,
            "double_quant": not ns.no_double_quant, "module_names": names,
            "kbit_upcast": ns.prepare_kbit_training}
