"""Multi-token prediction (MTP) modules (DeepSeek-V3 §2.2, GLM-4.5: num_nextn_predict_layers):
their parameters and training FLOPs, from the one ledger.

Module k (DeepSeek-V3 §2.2, eq. 21-23; transformers' MtpLayer, modeling_layers.py) reads the
main model's last hidden state h and the embedding of the token k positions ahead:
    h' = Block(W_eh [RMSNorm_e(emb(t_{i+k})); RMSNorm_h(h_i)]),  logits = Head(RMSNorm(h'))
with W_eh a (d_model, 2·d_model) projection, Block one more decoder block of the last layer's
kind (MtpModel builds type(layers[-1])), and the embedding and the output head SHARED with the
main model (tie_with_main_model). So each module adds: two norms and a final norm (the norm of
ln_final), W_eh, and one block. Its forward runs over the same T positions: the block, W_eh
(2·B·T·2d·d) and the head (2·B·T·d·V); the backward is 2 × that, as the ledger's rule for
every matmul (one gradient matmul per operand).

transformers' causal LM does not build them (it loads them apart, MtpModel, for speculative
decoding with generate(use_mtp=True)), so the model's parameter count, its inference and the
cross-check leave them out; training runs them (DeepSeek-V3 trains with the MTP loss, weight
λ), and the checkpoints hold them. DeepSeek-V3's checkpoint also stores the shared embedding
and head again in the MTP layer (embed_tokens, shared_head.head: 2·V·d more), which its
"685B" counts. Pure Python: the block's numbers are the ledger's records of the last layer's
group, nothing written twice.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger.ledger import ledger
from accounting.architecture.config import ModelConfig


@dataclass(frozen=True)
class MTP:
    modules: int
    block_params: int  # one decoder block of the last layer's kind
    glue_params: int  # W_eh (2·d²) and the three norms
    forward_flops: int  # matmul FLOPs of all modules at (seq, batch), executed count
    backward_flops: int
    checkpoint_copies: int  # the embedding and head stored again per module (DeepSeek-V3's)

    @property
    def params_each(self) -> int:
        return self.block_params + self.glue_params

    @property
    def params(self) -> int:
        """Every module's own parameters (the shared embedding and head counted once, with
        the main model)."""
        return self.modules * self.params_each

    @property
    def train_flops(self) -> int:
        return self.forward_flops + self.backward_flops


def mtp(c: ModelConfig, seq: int = 1, batch: int = 1) -> MTP | None:
    """The MTP modules of `c` (None without any) at one workload."""
    if not c.mtp_layers:
        return None
    lg = ledger(c)
    v = lg.values(seq, batch)
    last = lg.group_of(c.num_layers - 1)
    block = sum(p.numel(v) for p in lg.params if p.repeat == last)
    norm = sum(p.numel(v) for p in lg.params if p.module == "ln_final")
    d = c.d_model
    glue = 2 * d * d + 3 * norm
    rows = batch * seq
    own = 2 * rows * 2 * d * d  # W_eh: (B·T, 2d) @ (2d, d)
    fwd = sum(r.flops(v) for r in lg.forward if r.repeat == last)
    bwd = sum(g.flops(v) for r in lg.forward if r.repeat == last for g in r.gradients())
    head = sum(r.flops(v) for r in lg.forward if r.module == "lm_head")
    head_bwd = sum(g.flops(v) for r in lg.forward if r.module == "lm_head" for g in r.gradients())
    n = c.mtp_layers
    copies = 2 * c.vocab_size * d
    return MTP(n, block, glue, n * (fwd + own + head), n * (bwd + 2 * own + head_bwd), n * copies)
