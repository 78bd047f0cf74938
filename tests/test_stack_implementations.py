"""The activations of the deepspeed and torchtitan stacks come from the one ledger, built with
the implementation each stack runs (stack_memory.implementation), and are checked here
against the real modules on the CPU under saved_tensors_hooks:

  * DeepSpeed wraps the model given: transformers' LlamaForCausalLM, its parameters in bf16
    (DeepSpeed's bf16 engine calls module.bfloat16(); no autocast). Measured: every storage
    one decoder layer saves (tests/test_architectures.py saved_tensors).
  * torchtitan runs its own Llama (torchtitan/models/llama3/model/model.py, read from source:
    torchtitan is not installed): a block written here as that file writes it — nn.Linear
    wq/wk/wv/wo, apply_rotary_emb's complex product with a slice of the freqs_cis buffer,
    repeat_kv's copies, SDPA with the output transposed back, w2(silu(w1 x)·w3 x) — in bf16,
    as FSDP2's MixedPrecisionPolicy(param_dtype=bf16) runs it. Its RMSNorm is nn.RMSNorm,
    which on CUDA dispatches to aten::_fused_rms_norm (saves its input, the fp32 rstd and the
    weight: derivatives.yaml); the CPU build has no such kernel (its composite saves fp32
    copies), so the block's norm here is an autograd Function saving what the CUDA kernel
    saves, the only stand-in.
"""
import pytest

torch = pytest.importorskip("torch")

from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel.stack_memory import StackRun, implementation
from accounting.planning.parallel.stacks import get_stack
from accounting.architecture.config import ModelConfig

BF16 = PRECISIONS["bf16-mixed"]


def _plan(config, stack, seq, recompute="none"):
    return parallel_plan(config, Layout(2, dp=2, zero=2, global_batch=2, recompute=recompute),
                         seq, precision=BF16, stack=StackRun(get_stack(stack)))


def test_deepspeed_layer_is_transformers_model_in_bf16():
    """One decoder layer of transformers' Llama (GQA, head_dim ≠ d/h, biases) in bf16 saves
    exactly the deepspeed stack's per-layer bytes; the whole model's saves, the stage's
    activations of one micro-batch."""
    pytest.importorskip("transformers")
    from dataclasses import replace
    from accounting.architecture.hf_config import translate
    from hf_examples import CONFIGS
    from test_architectures import saved_tensors
    from test_transformers_saves import build
    config = replace(translate(CONFIGS["llama"], "test", "llama").config, attention="sdpa")
    T = 16
    model = build("llama", "bf16")
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, config.vocab_size, (1, T), generator=g) for _ in range(2))
    # the model's own loss (ForCausalLMLoss: float32 log-softmax), as DeepSpeed runs it
    seen = saved_tensors(model, ids, targets, use_cache=False, labels=True)
    layer = sum(n for m, n, _ in seen.values() if m.startswith("model.layers.1."))
    p = _plan(config, "deepspeed", T)
    assert implementation(p.stack, config) == "transformers"
    assert p.per_layer_activation_bytes == layer
    # at b = 1 the saved shifted labels are a view of the (1, T + 1) padded labels: one
    # int64 more than the tensor's T the plan counts (hand algebra; builder/hf_loss.py)
    assert p.worst.activations.per_micro_batch.at(1) == sum(n for _, n, _ in seen.values()) - 8


class _FusedRMSNorm(torch.autograd.Function):
    """What aten::_fused_rms_norm keeps on CUDA: its input and the fp32 rstd (and the weight)."""

    @staticmethod
    def forward(ctx, x, w):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
        ctx.save_for_backward(x, rstd, w)
        return (x.float() * rstd).to(x.dtype) * w

    @staticmethod
    def backward(ctx, g):
        x, rstd, w = ctx.saved_tensors
        n = x.float() * rstd
        gn = (g * w).float()
        gx = rstd * (gn - n * (gn * n).mean(-1, keepdim=True))
        return gx.to(x.dtype), (g.float() * n).sum((0, 1)).to(w.dtype)


def _titan_block(h, a, g, d, f, T):
    """torchtitan's TransformerBlock (models/llama3/model/model.py), b = 1."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk = nn.Linear(h, a * d, bias=False), nn.Linear(h, g * d, bias=False)
            self.wv, self.wo = nn.Linear(h, g * d, bias=False), nn.Linear(a * d, h, bias=False)
            self.w1, self.w2 = nn.Linear(h, f, bias=False), nn.Linear(f, h, bias=False)
            self.w3 = nn.Linear(h, f, bias=False)
            self.n1, self.n2 = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
            self.register_buffer("freqs_cis", None)

        def rope(self, x):  # apply_rotary_emb
            x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            out = torch.view_as_real(x_ * self.freqs_cis[:T].view(1, T, 1, d // 2)).flatten(3)
            return out.type_as(x)

        def forward(self, x):
            B = x.shape[0]
            y = _FusedRMSNorm.apply(x, self.n1)
            q = self.rope(self.wq(y).view(B, T, a, d))
            k = self.rope(self.wk(y).view(B, T, g, d))
            v = self.wv(y).view(B, T, g, d)
            rep = a // g  # repeat_kv: unsqueeze, expand, reshape (a copy)
            k = k.unsqueeze(3).expand(B, T, g, rep, d).reshape(B, T, a, d)
            v = v.unsqueeze(3).expand(B, T, g, rep, d).reshape(B, T, a, d)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.wo(o.transpose(1, 2).contiguous().view(B, T, a * d))
            y = _FusedRMSNorm.apply(x, self.n2)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))
    block = Block().to(torch.bfloat16)  # (FSDP2's policy casts the parameters only:)
    freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
    angles = torch.outer(torch.arange(T).float(), freqs)
    block.freqs_cis = torch.polar(torch.ones_like(angles), angles)  # complex64, as torchtitan's
    return block


def test_torchtitan_block_as_its_model_runs_it():
    """The bytes one torchtitan block saves (b = 1, every storage once, the parameters and
    the freqs_cis buffer excluded) equal the torchtitan stack's per-layer count."""
    h, a, g, d, f, T = 64, 8, 2, 8, 96, 16
    block = _titan_block(h, a, g, d, f, T)
    owned = {t.untyped_storage().data_ptr() for t in (*block.parameters(), *block.buffers())}
    x = torch.randn(1, T, h, dtype=torch.bfloat16, requires_grad=True)
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in owned:
            seen[s.data_ptr()] = s.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = block(x)
    y.sum().backward()
    c = ModelConfig(vocab_size=128, context_length=T, num_layers=2, d_model=h, num_heads=a,
                    num_kv_heads=g, head_dim=d, d_ff=f, name="titan")
    p = _plan(c, "torchtitan", T)
    assert implementation(p.stack, c) == "torchtitan"
    assert p.per_layer_activation_bytes == sum(seen.values())
    # by hand: two norms (input 2Th, rstd 4T, output 2Th), Q after RoPE, K and V repeated to
    # a heads, the output and its log-sum-exp, W1 and W3 outputs, SiLU's and the product
    assert sum(seen.values()) == 2 * (2 * T * h + 4 * T + 2 * T * h) + 3 * 2 * T * a * d \
        + 2 * T * a * d + 4 * a * T + 4 * 2 * T * f
    # full activation checkpointing: the block's input only
    assert _plan(c, "torchtitan", T, "full").per_layer_activation_bytes == 2 * T * h


@pytest.mark.parametrize("stack,zeros", [("megatron", {0, 1}), ("deepspeed", {0, 1, 2, 3}),
                                         ("torchtitan", {2, 3})])
def test_search_under_a_stack(capsys, stack, zeros):
    """--search with --stack: every ranked layout planned under that stack, among its own
    sharding stages (DeepSpeed's data parallelism only); the first one's memory is the
    single-layout plan's for the same layout and stack."""
    import json
    from accounting import get_preset
    from tests.cli_run import run
    code, out, _ = run(capsys, "plan", "meta-llama/Llama-3.2-1B", "--gpus", "8", "--search",
                       "--ctx", "2048", "--batch", "16", "--gpu", "H100", "--stack", stack,
                       "--format", "json")
    assert code == 0
    d = json.loads(out)
    assert d["stack"] == stack and d["ranked"]
    for p in d["ranked"]:
        assert p["stack"]["name"] == stack
        assert p["layout"]["zero"] in zeros or p["layout"]["dp"] == 1
        if stack == "deepspeed":
            assert p["layout"]["tp"] == p["layout"]["pp"] == 1
    first = d["ranked"][0]["layout"]
    lo = Layout(8, tp=first["tp"], pp=first["pp"], dp=first["dp"], sp=first["sp"],
                zero=first["zero"], global_batch=16, vpp=first["virtual_stages"])
    one = parallel_plan(get_preset("meta-llama/Llama-3.2-1B"), lo, 2048, precision=BF16,
                        stack=StackRun(get_stack(stack)))
    assert one.memory == d["ranked"][0]["memory_per_gpu_bytes"]
