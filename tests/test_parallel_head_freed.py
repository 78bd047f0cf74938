"""A block's backward pass on the last stage no longer holds the final norm's, the LM head's
and the loss's saved tensors (planning/parallel/activations.py StageActivations.head): the
loss's and the head's autograd nodes run first, and the engine frees each node's saved
tensors once it has run (torch/csrc/autograd/engine.cpp evaluate_function:
fn.release_variables() unless retain_graph). Before, the many-GPU plan counted them at
every block's backward (torchtune's Llama 3.1 70B LoRA row on 8 A100s: 1.15 → 1.08).

Expected values: torch's autograd on the CPU (what is still saved at the last block's
backward), and hand algebra over a tiny model's shapes."""
import weakref
from dataclasses import replace

from accounting.architecture.config import ModelConfig
from accounting.planning import PRECISIONS
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.peak import AT_BLOCK_BACKWARD
from accounting.planning.parallel.plan import parallel_plan


def test_autograd_frees_the_heads_and_losss_saves_before_any_blocks_backward():
    # measured: every tensor autograd saves, tagged by the part of the model that saved it,
    # alive until the engine drops its packed holder
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    B, T, d, V = 2, 16, 32, 1000
    emb = torch.nn.Embedding(V, d)
    blocks = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(2))
    head = torch.nn.Linear(d, V, bias=False)
    live, tag, seen = {}, ["blocks"], {}

    class Held:
        def __init__(self, t):
            self.t = t

    def pack(t):
        h = Held(t)
        live[id(h)] = (tag[0], t.numel() * t.element_size())
        weakref.finalize(h, live.pop, id(h), None)
        return h

    def head_bytes():
        return sum(n for who, n in live.values() if who == "head and loss")

    def at_last_block(module, grad_output):
        seen["last block"] = head_bytes()  # (returns None: the gradient unchanged)

    blocks[-1].register_full_backward_pre_hook(at_last_block)
    tokens = torch.randint(0, V, (B, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.t):
        x = emb(tokens)
        for blk in blocks:
            x = x + F.silu(blk(x))
        tag[0] = "head and loss"
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        loss = F.cross_entropy(head(h).float().view(-1, V), tokens.view(-1))
    saved = head_bytes()
    loss.backward()
    assert saved >= B * T * V * 4  # the log-softmax of the logits, float32, was saved
    assert seen["last block"] == 0


def test_a_blocks_backward_holds_no_saves_of_the_head_or_the_loss():
    # a tiny model on 2 GPUs (FSDP, full recomputation, bf16 autocast), micro-batch 2:
    # by hand, what the modules after the blocks save, B = 2, T = 64, d = 32, V = 1,000:
    # the final RMSNorm's float32 input, its rms and x / rms (4·B·T·d, 4·B·T, 4·B·T·d), the
    # head's bf16 input and autocast's bf16 copy of its weight (2·B·T·d, 2·V·d), the loss's
    # int64 targets, float32 log-softmax and total weight (8·B·T, 4·B·T·V, 4)
    B, T, d, V = 2, 64, 32, 1000
    c = ModelConfig(vocab_size=V, context_length=T, num_layers=2, d_model=d, num_heads=4,
                    num_kv_heads=2, head_dim=8, d_ff=64, attention="sdpa", name="tiny")
    plan = parallel_plan(c, Layout(2, dp=2, zero=3, global_batch=4, recompute="full"), T,
                         precision=PRECISIONS["bf16-mixed"])
    s = plan.stages[0]
    block = next(m for m in s.moments if m.name.startswith(AT_BLOCK_BACKWARD))
    freed = (4 * B * T * d + 4 * B * T + 4 * B * T * d) + (2 * B * T * d + 2 * V * d) \
        + (8 * B * T + 4 * B * T * V + 4)
    assert freed == 618_500
    assert s.moment_bytes(replace(block, head_freed=False), B) - s.moment_bytes(block, B) \
        == freed
