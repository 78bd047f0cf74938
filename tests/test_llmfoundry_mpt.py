"""llm-foundry's MPT as its published benchmarks run it (--implementation llm-foundry;
ledger/builder/megatron.py low_precision_norm, flash_cross_entropy; planning/recipes.py),
against a block written here as llm-foundry writes it (llmfoundry is not installed; read
from mosaicml/llm-foundry@c90b9b3: models/layers/norm.py LPLayerNorm, layers/ffn.py MPTMLP,
layers/blocks.py MPTBlock, layers/attention.py's fused Wqkv), run on the CPU under
torch.autocast(bfloat16) over fp32 parameters (Composer's amp_bf16 with FSDP mixed
precision DEFAULT: fp32 parameters), saved_tensors_hooks counting every storage once:

  * LPLayerNorm: `downcast_x = _cast_if_autocast_enabled(x)`, the weight likewise, then
    F.layer_norm with autocast off: native_layer_norm saves the bf16 input and the fp32
    mean and 1/σ (one per token);
  * Wqkv (one fused linear), q, k, v its chunks; the attention kernel saves q, k, v, the
    output and its log-sum-exp: the CPU's SDPA (flash kernel for CPU) stands in for
    flash-attn's / the Triton kernel, which save the same (flash_attn_triton.py
    _FlashAttnFunc.forward: ctx.save_for_backward(q, k, v, o, lse, bias));
  * out_proj, then MPTMLP: up_proj, nn.GELU(approximate="none") (saves its input), down_proj;
  * no dropout (resid_pdrop 0).
The loss (flash-attn's Triton cross-entropy) needs a GPU: read from source
(flash_attn/ops/triton/cross_entropy.py: saves the logits, the fp32 lse and the labels; its
backward writes one gradient of the logits' dtype), checked here by hand.
"""
import pytest

from accounting.architecture.config import ModelConfig
from accounting.ledger.builder.common import LLMFOUNDRY
from accounting.ledger.builder.megatron import FLASH_CE_LSE
from accounting.ledger.ledger import ledger
from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.runtime.errors import UsageError

torch = pytest.importorskip("torch")

H, A, F, T, V = 64, 4, 256, 16, 128


def _config(bias=False):
    # bias: MPTConfig's no_bias False (the published benchmarks': biases on every linear and
    # both LayerNorms)
    return ModelConfig(vocab_size=V, context_length=T, num_layers=2, d_model=H, num_heads=A,
                       d_ff=F, mlp="gelu", norm="layernorm" if bias else "layernorm_nobias",
                       positions="none", tie_embeddings=True, qkv_bias=bias, out_bias=bias,
                       mlp_bias=bias, attention="sdpa", name="mpt-tiny")


def _cast_if_autocast_enabled(t):  # llmfoundry/models/layers/norm.py
    if torch.is_autocast_enabled("cpu"):
        return t.to(dtype=torch.get_autocast_dtype("cpu"))
    return t


class _LPLayerNorm(torch.nn.LayerNorm):  # llmfoundry/models/layers/norm.py LPLayerNorm
    def forward(self, x):
        dx, dw = _cast_if_autocast_enabled(x), _cast_if_autocast_enabled(self.weight)
        db = None if self.bias is None else _cast_if_autocast_enabled(self.bias)
        with torch.autocast(enabled=False, device_type=x.device.type):
            return torch.nn.functional.layer_norm(dx, self.normalized_shape, dw, db, self.eps)


def _mpt_block(bias=False):
    nn, Fn = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_1 = _LPLayerNorm(H, bias=bias)
            self.Wqkv = nn.Linear(H, 3 * H, bias=bias)
            self.out_proj = nn.Linear(H, H, bias=bias)
            self.norm_2 = _LPLayerNorm(H, bias=bias)
            self.up_proj, self.act = nn.Linear(H, F, bias=bias), nn.GELU(approximate="none")
            self.down_proj = nn.Linear(F, H, bias=bias)

        def forward(self, x):
            B = x.shape[0]
            q, k, v = self.Wqkv(self.norm_1(x)).chunk(3, dim=2)
            heads = [t.view(B, T, A, H // A).transpose(1, 2) for t in (q, k, v)]
            o = Fn.scaled_dot_product_attention(*heads, is_causal=True)
            x = x + self.out_proj(o.transpose(1, 2).reshape(B, T, H))
            return x + self.down_proj(self.act(self.up_proj(self.norm_2(x))))
    return Block()


def _saved(block, x):
    """(bytes of the activations, bytes of autocast's bf16 weight copies) the block saves."""
    owned = {p.untyped_storage().data_ptr() for p in block.parameters()}
    weights = {tuple(p.shape[::-1]) for p in block.parameters() if p.dim() == 2}
    acts, copies = {}, {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() in owned or tuple(t.shape) == (H,):
            return t  # a parameter, or LPLayerNorm's d-wide weight copy (2·d bytes, not planned)
        # F.linear saves autocast's bf16 copy of its weight, transposed
        (copies if tuple(t.shape) in weights else acts)[s.data_ptr()] = s.nbytes()
        return t
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = block(x)
    y.float().sum().backward()
    return sum(acts.values()), sum(copies.values())


def _plan(recompute="none", bias=False):
    return parallel_plan(_config(bias), Layout(2, dp=2, zero=3, global_batch=2, recompute=recompute),
                         T, precision=PRECISIONS["bf16-mixed"], implementation=LLMFOUNDRY)


@pytest.mark.parametrize("bias", [False, True])
def test_mpt_block_saves_what_the_plan_counts(bias):
    torch.manual_seed(0)
    x = torch.randn(1, T, H, requires_grad=True)  # the fp32 residual stream (fp32 wte)
    acts, copies = _saved(_mpt_block(bias), x)
    lg = ledger(_config(bias), "cuda", "none", LLMFOUNDRY)
    v = lg.values(T, 1)
    rows = [r for r in lg.activations if r.saved and r.per_layer]
    planned = sum(r.elements.evaluate(v) * r.bytes_per_element for r in rows
                  if not r.weight_copy)
    planned_copies = sum(r.elements.evaluate(v) * r.bytes_per_element for r in rows
                         if r.weight_copy)
    # the CPU's native_layer_norm keeps mean and 1/σ in the input's dtype (bf16), CUDA's in
    # fp32 (layer_norm_kernel.cu: the accumulate type): 2·(4 − 2)·T bytes per norm more
    assert planned == acts + 2 * 2 * (4 - 2) * T
    assert planned_copies == copies == 2 * (3 * H * H + H * H + 2 * H * F)
    assert _plan(bias=bias).per_layer_activation_bytes == planned + planned_copies
    # by hand: two LPLayerNorms (bf16 input 2Th, fp32 mean and 1/σ 4T each, bf16 output
    # 2Th saved by the next linear), Wqkv's output (q, k, v: 6Th), the attention output
    # 2Th (already (b, s, h, d): out_proj reads a view) and its fp32 lse 4·a·T, up_proj's
    # output (GELU's input) 2Tf, GELU's output 2Tf
    assert planned == 2 * (2 * T * H + 2 * 4 * T + 2 * T * H) + 6 * T * H + 2 * T * H \
        + 4 * A * T + 2 * 2 * T * F


def test_full_checkpointing_keeps_the_fp32_block_input():
    # Composer's activation checkpointing of each MPTBlock: its input, the fp32 residual
    assert _plan("full").per_layer_activation_bytes == 4 * T * H


def test_loss_is_flash_attn_cross_entropy():
    lg = ledger(_config(), "cuda", "none", LLMFOUNDRY)
    names = {r.name for r in lg.activations if r.saved}
    assert FLASH_CE_LSE in names and "log-softmax of the logits" not in names
    # the peak's loss gradient: one B·T·V tensor in the logits' dtype (bf16), not 2 fp32
    p = _plan()
    last = p.stages[-1]
    moment = next(m for m in last.moments if "loss's backward" in m.name)
    assert "1·b·(T/cp)·⌈V/tp⌉·2" in moment.what


def test_refusals_in_one_line():
    import subprocess
    import sys
    from dataclasses import replace
    from accounting.planning.recipes import resolve
    with pytest.raises(UsageError, match="MPT's blocks"):
        resolve(replace(_config(), norm="rmsnorm"), False, LLMFOUNDRY)
    assert resolve(_config(), False, LLMFOUNDRY)[0].implementation == LLMFOUNDRY
    base = [sys.executable, "-m", "accounting", "plan", "gpt2-small", "--mlp", "gelu", "--norm",
            "layernorm_nobias", "--implementation", LLMFOUNDRY, "--precision", "bf16-mixed"]
    for extra, word in ((["--mlp", "swiglu"], "MPT's"), (["--gpus", "2", "--mlp", "swiglu"], "MPT's"),
                        (["--loss", "chunked"], "fused cross-entropy")):
        run = subprocess.run(base + extra, capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and word in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    run = subprocess.run(base + ["--gpus", "2", "--format", "json"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_one_gpu_plan_holds_the_fused_losses_one_gradient():
    # issue 44c: the one-GPU plan (planning/peak_moments.py) of --implementation llm-foundry
    # was refused ("a many-GPU plan"); now planned. Expected by hand, llm-foundry's ops as
    # the module docstring reads them, on the CPU device (no cuBLAS workspace), B = 2:
    from accounting.planning.memory import MemoryModel
    B, L = 2, 2
    m = MemoryModel(_config(), PRECISIONS["bf16-mixed"], implementation=LLMFOUNDRY,
                    device="cpu")
    start, update = (ph.bytes.evaluate(m.values(T, B)) for ph in m.peak_terms)
    # parameters: per block Wqkv, out_proj 4H², up/down 2HF, two LayerNorm weights 2H; the
    # final LayerNorm's H; the tied wte V·H. fp32 parameters, m and v: 12 bytes each
    n = L * (4 * H * H + 2 * H * F + 2 * H) + H + V * H
    # per block (test_mpt_block_saves_what_the_plan_counts, CUDA's fp32 statistics) and its
    # bf16 weight copies; outside: token ids (int64), ln_f's bf16 input, fp32 mean and 1/σ,
    # its bf16 output (the head's input), the head's bf16 weight copy, the bf16 logits
    # flash-attn's loss saves, the int64 targets and its fp32 log-sum-exp
    block = 2 * (2 * T * H + 2 * 4 * T + 2 * T * H) + 6 * T * H + 2 * T * H + 4 * A * T \
        + 2 * 2 * T * F
    copies = 2 * (4 * H * H + 2 * H * F)
    outside = 8 * T + 2 * T * H + 2 * 4 * T + 2 * T * H + 2 * T * V + 8 * T + 4 * T
    kept = L * (B * block + copies) + B * outside + 2 * V * H
    # the loss's backward: the float32 loss and ONE bf16 gradient of the logits (flash-attn's
    # CrossEntropyLossFunction backward), not F.cross_entropy's two fp32 ones
    assert start == 12 * n + kept + 4 + 2 * B * T * V
    # the update: parameters, gradients, m, v and foreach's √v (4 bytes each), the loss,
    # the int64 token ids and targets
    assert update == 20 * n + 4 + 2 * 8 * B * T
    # the many-GPU planner on one GPU (parallel/peak.py, its own code path) agrees on CUDA
    from accounting.planning.plan import plan
    one = plan(_config(), T, B, precision="bf16-mixed", implementation=LLMFOUNDRY)
    many = parallel_plan(_config(), Layout(1, global_batch=B, micro_batch=B), T,
                         precision=PRECISIONS["bf16-mixed"], implementation=LLMFOUNDRY)
    assert one.memory.model.peak(B, T) == many.stages[0].peak_moment(B)[0]
