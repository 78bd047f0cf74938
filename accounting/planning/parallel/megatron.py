"""What Megatron-Core with Transformer Engine saves for the backward pass (the `--stack
megatron` plan): the one ledger built with the builder's MEGATRON implementation
(accounting/ledger/builder/megatron.py: TE's fused norm + linear, fused bias-GeLU/SwiGLU,
flash or unfused attention, dropout masks, fused RoPE, the vocab-parallel cross-entropy),
bf16 parameters without autocast, reduced here as Megatron splits it: the
sequence-parallel shards saved (Korthikanti et al. 2022 §4.2.2: the column-parallel
inputs are saved as their shard and all-gathered again in the backward pass) and the
vocabulary padded to a multiple of 128·tp. This file writes no op list: only which ledger,
and which of its tensors are which of Korthikanti et al.'s terms.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from accounting.ledger.builder.common import MEGATRON
from accounting.planning.parallel import activations as A
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.shards import BLOCK, Split, split
from accounting.architecture.config import ModelConfig
from accounting.units import BF16, FP8_E4M3

FLASH, UNFUSED = "flash", "unfused"
KERNELS = {FLASH: "Transformer Engine's flash/fused attention (Q, K, V, O and the softmax "
                  "statistics saved; Megatron-Core's default)",
           UNFUSED: "unfused attention (the softmax output saved, as²b; Korthikanti et al.'s "
                    "accounting)"}
# Korthikanti et al. 2022's terms (their §4.1), named once for the reconciliation
K_NORM_IN, K_QKV_IN, K_QK, K_V, K_SOFTMAX, K_ATT_MASK, K_ATT_DROP = (
    "LayerNorm inputs", "QKV input", "Q and K", "V", "softmax output", "attention dropout mask",
    "attention dropout output")
K_PROJ_IN, K_HID_MASK, K_FC1_IN, K_ACT_IN, K_FC2_IN = (
    "output projection input", "hidden dropout masks", "MLP input", "GELU input",
    "second linear input")
# the ledger's tensors (builder labels) that are each of the paper's terms; a tensor not
# here (the norms' fp32 statistics, the flash kernel's log-sum-exp) is not in the paper
TERMS = {"ln1 input": K_NORM_IN, "ln2 input": K_NORM_IN, "ln1 output": K_QKV_IN,
         "ln2 output": K_FC1_IN, "Q projection output": K_QK, "K projection output": K_QK,
         "Q after RoPE": K_QK, "K after RoPE": K_QK, "V projection output": K_V,
         "softmax output": K_SOFTMAX, "attention dropout mask (1 byte)": K_ATT_MASK,
         "attention dropout output": K_ATT_DROP, "attention output (fused kernel)": K_PROJ_IN,
         "attention-weighted values, heads merged": K_PROJ_IN,
         "attention's hidden dropout mask (1 byte)": K_HID_MASK,
         "MLP's hidden dropout mask (1 byte)": K_HID_MASK, "W1 output": K_ACT_IN,
         "W3 output": K_ACT_IN, "activation output (W2 input)": K_FC2_IN}
# under TE's fp8 (--precision fp8-te) a TE linear's input is saved as an fp8 copy: the same
# term in 1 byte (flash attention's O stays the bf16 term: linear_proj's copy is extra)
TERMS.update({f"{name} ({FP8_E4M3} copy)": TERMS[name] for name in (
    "ln1 output", "ln2 output", "attention-weighted values, heads merged",
    "activation output (W2 input)")})


def padded_vocab(c: ModelConfig, tp: int, divisible_by: int = 128) -> int:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by · tp
    (megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding; default 128)."""
    m = divisible_by * tp
    return -(-c.vocab_size // m) * m


@lru_cache(maxsize=256)
def ledger_split(c: ModelConfig, recompute: str, dropout: bool, kernel: str = FLASH,
                 fp8: str | None = None) -> Split:
    """The ledger Megatron runs: the builder's MEGATRON implementation, bf16 parameters (its
    Float16Module), no autocast; the attention kernel as given. fp8 (TE, --fp8-format
    hybrid): TE's modules' GEMMs in fp8; what they save follows (Trace._fp8_linear)."""
    config = replace(c, attention="sdpa" if kernel == FLASH else "naive")
    return split(config, None, recompute, MEGATRON, BF16, dropout, fp8)


def rows(c: ModelConfig, layout: Layout, seq: int, dropout: bool, kernel: str,
         recompute: str | None = None, tp_rank: int = 0,
         fp8: str | None = None) -> tuple[Split, list[A.Row]]:
    """The saved tensors of one GPU's T = `seq` tokens, as Megatron splits them."""
    sp = ledger_split(c, layout.recompute if recompute is None else recompute, dropout, kernel,
                      fp8)
    return sp, A.rows(sp, layout, seq, megatron_sp=True, tp_rank=tp_rank,
                      vocab=padded_vocab(c, layout.tp))


def layer(c: ModelConfig, layout: Layout, seq: int, dropout: bool,
          kernel: str = FLASH, fp8: str | None = None) -> list[tuple[str, str | None, int]]:
    """(name, Korthikanti's term or None, bytes at b = 1) of what one block of the first kind
    saves on TP rank 0; with full recomputation its input only, no term."""
    sp, rs = rows(c, layout, seq, dropout, kernel, fp8=fp8)
    kind = sp.ledger.groups[0][0]
    full = layout.recompute == "full"
    return [(r.record.name, None if full else TERMS.get(r.record.name), r.bytes.at(1))
            for r in rs if r.place == BLOCK and r.record.repeat == kind]
