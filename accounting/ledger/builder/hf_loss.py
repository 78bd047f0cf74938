"""transformers' own loss: what `model(input_ids, labels=labels).loss` runs (Trainer, TRL, any
loop that passes labels), as facts for the ledger's loss region.

Every *ForCausalLM the builder plans under implementation "transformers" (Llama, Mistral,
Qwen2/3, Qwen3-MoE, Qwen3-Next, Qwen3.5, Mixtral, OLMo-2/3, Gemma 2/3/4 after their final
soft-cap, Cohere/Cohere 2 after logit_scale, Granite after 1/logits_scaling, GPT-2, gpt-oss,
DeepSeek-V2/V3/V3.2, Llama 4, Nemotron-H after its own `.float()`) calls
`self.loss_function(logits, labels, vocab_size, **kwargs)` on the logits it returns, and
PreTrainedModel.loss_function is LOSS_MAPPING["ForCausalLM"] = ForCausalLMLoss
(transformers 5.23.0, loss/loss_utils.py):

    logits = logits.float()                        # a float32 copy unless float32 already
    labels = nn.functional.pad(labels, (0, 1), value=ignore_index)   # int64 (B, T + 1)
    shift_labels = labels[..., 1:].contiguous()    # int64 (B, T): a copy
    logits = logits.view(-1, vocab_size); shift_labels = shift_labels.view(-1)   # views
    fixed_cross_entropy: F.cross_entropy(logits, shift_labels, ignore_index=-100,
                         reduction="mean")  ("sum", then / num_items_in_batch, when the
                         Trainer passes num_items_in_batch: a 0-dim division)

So log_softmax runs on the float32 copy (its saved output, both gradients at the backward
pass's start and the loss are float32) whatever the parameters' dtype: under pure bf16 too,
where F.cross_entropy on the model's bf16 logits would keep bf16. The padded labels die when
ForCausalLMLoss returns (a forward transient, B·(T+1)·8 bytes, at no moment the plan takes);
nll_loss saves the shifted labels (the ledger's "targets", int64 B·T: a copy when B > 1;
when B = 1, labels[..., 1:] of a (1, T + 1) tensor is contiguous already, so .contiguous()
returns that view and the storage saved is the padded labels', 8 bytes more: counted as
the tensor's B·T, which keeps the record linear in B). The engine releases it when
NllLossBackward has run, just before the first log_softmax backward (the plan's boundary):
there the loop's own labels (Trainer's inputs dict) are the one int64 B·T live, as with
F.cross_entropy on the loop's targets — the same bytes, at B = 1 too (measured:
tests/test_transformers_saves.py assert_two_moments). The router's auxiliary loss (MoE
families) is added only when output_router_logits is set, False in every MoE config class
planned (Mixtral, Qwen3-MoE, gpt-oss, Qwen3-Next: 5.23 configuration_*.py): not planned.
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym, Trace
from accounting.units import FP32


def for_causal_lm_loss(t: Trace, logits: Sym) -> tuple[Sym, Sym]:
    """ForCausalLMLoss up to its F.cross_entropy: the logits it passes (float32) and the
    targets (the labels' shifted int64 copy) — the caller runs the cross-entropy."""
    logits = t.cast(logits, FP32, "logits (fp32 copy: ForCausalLMLoss's logits.float())")
    targets = t.name(t.fresh(("B", "T"), R.INT64), "targets")  # shift_labels' contiguous copy
    return logits, targets
