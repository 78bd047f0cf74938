"""FSDP2 at the forward's end and the loss's backward (ZeRO-3, no pipelining): every block
was resharded after its forward (reshard_after_forward=True: torch's fully_shard per block,
torchtune's shard_model, torchtitan's apply_fsdp at 31a17bf), and the last block's
pre-backward all-gather comes after the loss's backward, so no block is gathered there:
the plan's "root + 2 blocks" holds only the root unit at those two moments
(buffers.Item.resharded_after_forward). Before, both moments counted two gathered blocks:
torchtune's Llama 3.1 405B QLoRA row on 8 A100s, whose peak is its standard loss's
backward, 1.40 → 1.32.

Expected values: FSDP2 itself on the fake backend (which blocks are unsharded at each
moment), and hand algebra over tiny models' shapes."""
from dataclasses import replace

import pytest
from fresh_probe import run_probe

from accounting.architecture.config import ModelConfig
from accounting.distcheck.compare import config_of
from accounting.planning import PRECISIONS
from accounting.planning.finetune import LoRA, resolve
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.peak import AT_BACKWARD
from accounting.planning.parallel.plan import parallel_plan

# one rank of 4 on the fake backend, in a fresh interpreter: three blocks sharded as
# torchtune's shard_model shards them (or, "keep-last", the last one not resharded), the
# root after; a probe in the loss's backward (between nll_loss's and log_softmax's) reads
# each block's FSDPParamGroup state
_PROBE = """
import json, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore
dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=4)
mesh = init_device_mesh("cpu", (4,))
V, d, n = 64, 16, 3


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, V, bias=False)

    def forward(self, t):
        x = self.emb(t)
        for layer in self.layers:
            x = x + F.silu(layer(x))
        return self.head(self.norm(x))


out = {}
for keep_last in (False, True):
    torch.manual_seed(0)
    m = LM()
    for i, layer in enumerate(m.layers):
        fully_shard(layer, mesh=mesh, reshard_after_forward=not (keep_last and i == n - 1))
    fully_shard(m, mesh=mesh)
    seen = {}

    def state():
        return [layer._get_fsdp_state()._fsdp_param_group.is_unsharded for layer in m.layers]

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            seen["loss"] = state()
            return g

    t = torch.randint(0, V, (2, 8))
    logits = m(t)
    seen["forward"] = state()
    F.nll_loss(Probe.apply(F.log_softmax(logits.float(), -1)).view(-1, V), t.view(-1)).backward()
    out["keep-last" if keep_last else "every"] = seen
print(json.dumps(out))
dist.destroy_process_group()
"""


@pytest.mark.slow  # a fresh interpreter importing torch.distributed: a few seconds
def test_no_block_is_gathered_at_the_forwards_end_nor_at_the_losss_backward():
    seen = run_probe(_PROBE)
    assert seen["every"] == {"forward": [False] * 3, "loss": [False] * 3}
    # the probe sees a gathered block where one is kept (torchtitan's pre-31a17bf policy)
    assert seen["keep-last"] == {"forward": [False, False, True], "loss": [False, False, True]}


def _loss_moment(plan, b: int) -> tuple[int, int]:
    """(the plan's loss's-backward bytes, the same with the blocks still gathered)."""
    s = plan.stages[-1]
    m = next(m for m in s.moments if m.name.startswith(AT_BACKWARD))
    return s.moment_bytes(m, b), s.moment_bytes(replace(m, after_forward=False), b)


def test_the_losss_backward_holds_the_root_unit_without_blocks():
    # 2 GPUs, FSDP (ZeRO-3), bf16 autocast over fp32 parameters: FSDP2 gathers fp32 units.
    # By hand, one block: Q, O 32·32, K, V 32·16 (2 KV heads × 8), gate, up 64·32, down
    # 32·64, two RMSNorm gains 32 = 9,280 parameters (every row count even: no padding
    # over 2 ranks), two of them gathered in fp32: 2 · 4 · 9,280 bytes
    c = ModelConfig(vocab_size=1000, context_length=64, num_layers=3, d_model=32, num_heads=4,
                    num_kv_heads=2, head_dim=8, d_ff=64, attention="sdpa", name="tiny")
    plan = parallel_plan(c, Layout(2, dp=2, zero=3, global_batch=4, recompute="full"), 64,
                         precision=PRECISIONS["bf16-mixed"])
    now, before = _loss_moment(plan, 2)
    assert before - now == 2 * 4 * 9_280
    # ZeRO-2 (reshard_after_forward=False): every block stays gathered, nothing changes
    plan2 = parallel_plan(c, Layout(2, dp=2, zero=2, global_batch=4, recompute="full"), 64,
                          precision=PRECISIONS["bf16-mixed"])
    now2, before2 = _loss_moment(plan2, 2)
    assert now2 == before2


def test_qlora_keeps_only_the_root_units_bf16_tables_gathered_at_the_loss():
    # QLoRA over 8 ranks (tests/test_lora_gpus.py's model: d 96, V 1,000, untied): at the
    # loss's backward the gathered units are the root's alone, which QLoRA keeps in bf16
    # (the embedding, the LM head, the final norm's gain: 2·(2·1,000·96 + 96) bytes; every
    # row count a multiple of 8), its adapters none (the root has no LoRA target)
    model = {"vocab_size": 1000, "context_length": 64, "num_layers": 2, "d_model": 96,
             "num_heads": 4, "d_ff": 256}
    ft = resolve(config_of(model), LoRA(rank=8), None, "cuda", "nf4")
    plan = parallel_plan(config_of(model), Layout(8, dp=8, zero=3, global_batch=16), 16,
                         precision=PRECISIONS["bf16-mixed"], finetune=ft)
    s = plan.stages[0]
    gathered = next(i for i in s.items if i.name.startswith("FSDP2 gathered units"))
    assert gathered.bytes.at(2) - gathered.resharded_after_forward == 2 * (2 * 1000 * 96 + 96)
    now, before = _loss_moment(plan, 2)
    assert before - now == gathered.resharded_after_forward > 0
