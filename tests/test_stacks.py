"""Named training stacks (`plan … --stack megatron|deepspeed|torchtitan`) against independent
sources: Korthikanti et al. 2022's per-layer activation formulas (their Table 2, typed here
from the paper), Megatron's theoretical_memory_usage.py (bytes per parameter, typed from
its source), the ZeRO paper's Figure 1 (from the CLI), DeepSpeed's own estimators (the
installed library) and hand algebra of what Transformer Engine's modules save.
"""
import json
from fractions import Fraction

import pytest

from accounting import get_preset
from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import get_stack
from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from tests.cli_run import refused_in_one_line, run

BF16 = PRECISIONS["bf16-mixed"]
# GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d = 12,288, 96 heads, GELU MLP of 4d,
# LayerNorm, learned positions, biases, tied embedding; s = 2,048
GPT3 = ModelConfig(vocab_size=50257, context_length=2048, num_layers=96, d_model=12288,
                   num_heads=96, d_ff=49152, mlp="gelu", norm="layernorm", positions="learned",
                   qkv_bias=True, out_bias=True, mlp_bias=True, tie_embeddings=True, name="gpt3")
GPT3_FLAGS = ("--vocab-size 50257 --context-length 2048 --num-layers 96 --d-model 12288 "
              "--num-heads 96 --d-ff 49152 --mlp gelu --norm layernorm --positions learned "
              "--bias --tie-embeddings").split()


def megatron(config, gpus, tp=1, sp=False, recompute="none", dropout=0.1, kernel="unfused",
             seq=2048, **layout):
    pp = layout.pop("pp", 1)
    lo = Layout(gpus, tp=tp, pp=pp, dp=gpus // tp // pp, sp=sp, recompute=recompute,
                global_batch=layout.pop("global_batch", gpus // tp), **layout)
    return parallel_plan(config, lo, seq, precision=BF16,
                         stack=StackRun(get_stack("megatron"), dropout, kernel))


# ---- Korthikanti et al. 2022, Table 2 (activation bytes per layer; s, b, h, a, t) -----------
def table2(row, s, b, h, a, t):
    sbh = s * b * h
    return {"no parallelism": sbh * (34 + Fraction(5 * a * s, h)),
            "tensor parallel": sbh * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t)),
            "tensor + sequence parallel": Fraction(sbh, t) * (34 + Fraction(5 * a * s, h)),
            "tensor parallel + selective": sbh * (10 + Fraction(24, t)),
            "tensor + sequence parallel + selective": Fraction(34 * sbh, t),
            "full recompute": 2 * sbh}[row]


ROWS = [("no parallelism", dict(gpus=1)),
        ("tensor parallel", dict(gpus=8, tp=8)),
        ("tensor + sequence parallel", dict(gpus=8, tp=8, sp=True)),
        ("tensor parallel + selective", dict(gpus=8, tp=8, recompute="selective")),
        ("tensor + sequence parallel + selective", dict(gpus=8, tp=8, sp=True,
                                                        recompute="selective")),
        ("full recompute", dict(gpus=1, recompute="full"))]


@pytest.mark.parametrize("row,kw", ROWS, ids=[r for r, _ in ROWS])
def test_korthikanti_table_2_gpt3(row, kw):
    """The paper's assumptions (16-bit activations, 1-byte dropout masks, GELU MLP of 4h,
    unfused attention): its terms come out exactly; the stack's count adds only the
    LayerNorms' fp32 mean and 1/σ (TE's LayerNormLinear saves mu and rsigma, one each per
    token and norm), which the paper leaves out as a small buffer."""
    s, b, h, a, t = 2048, 1, 12288, 96, kw.get("tp", 1)
    p = megatron(GPT3, **kw)
    paper = table2(row, s, b, h, a, t)
    terms = p.stack.megatron_layer(GPT3, p.layout, s)
    assert sum(x for _, term, x in terms if term) == paper or kw.get("recompute") == "full"
    stats = 0 if kw.get("recompute") == "full" else 2 * 2 * 4 * s * b // (t if kw.get("sp") else 1)
    assert p.per_layer_activation_bytes == paper + stats


def test_korthikanti_gpt3_figures():
    """The issue's figures for GPT-3 175B per layer (s = 2,048, b = 1): sbh(34 + 5as/h) =
    2,868,903,936 bytes and, with TP 8 + SP + selective, 34sbh/t = 106,954,752."""
    assert table2("no parallelism", 2048, 1, 12288, 96, 1) == 2_868_903_936
    assert table2("tensor + sequence parallel + selective", 2048, 1, 12288, 96, 8) == 106_954_752
    p = megatron(GPT3, 8, tp=8, sp=True, recompute="selective")
    assert p.per_layer_activation_bytes == 106_954_752 + 2 * 2 * 4 * 2048 // 8


def test_korthikanti_from_the_cli_json(capsys):
    code, out, _ = run(capsys, "plan", *GPT3_FLAGS, "--gpus", "1", "--batch", "1", "--stack",
                       "megatron", "--dropout", "0.1", "--attention-kernel", "unfused",
                       "--format", "json")
    assert code == 0
    d = json.loads(out)
    assert d["per_layer_activation_bytes"] == 2_868_903_936 + 2 * 2 * 4 * 2048
    assert d["stack"]["per_layer_korthikanti_bytes"] == 2_868_903_936
    assert d["stack"]["name"] == "megatron" and d["stack"]["dropout"] == 0.1


def test_megatron_flash_llama_hand_algebra():
    """Llama 3.1 8B (h = 4,096, 32 heads of 128, 8 KV heads, SwiGLU d_ff = 14,336, RMSNorm)
    at TP 8 + SP, s = 8,192, no dropout, flash attention. Per layer on one rank, in bytes:
    two norms, each its input 2sbh/t, its output 2sbh/t (TE saves the shard), 1/σ 4sb/t;
    Q 2·s·(a/t)·d, K and V 2·s·(g/t)·d each, O 2·s·(a/t)·d, the log-sum-exp 4·(a/t)·s;
    fc1's output 2·s·2f/t (SwiGLU's input), fc2's input 2·s·f/t."""
    s, h, a, g, d, f, t = 8192, 4096, 32, 8, 128, 14336, 8
    expected = 2 * (2 * s * h // t + 2 * s * h // t + 4 * s // t) \
        + 2 * s * (a // t) * d + 2 * 2 * s * (g // t) * d + 2 * s * (a // t) * d + 4 * (a // t) * s \
        + 2 * s * 2 * f // t + 2 * s * f // t
    p = megatron(get_preset("meta-llama/Llama-3.1-8B"), 8, tp=8, sp=True, dropout=0,
                 kernel="flash", seq=s)
    assert p.per_layer_activation_bytes == expected


# ---- Megatron's theoretical_memory_usage.py: bytes per parameter ---------------------------
def _small(**kw):
    # every tensor a multiple of 64 elements, V a multiple of 128: no padding anywhere
    return ModelConfig(**dict(dict(vocab_size=1024, context_length=256, num_layers=2,
                                   d_model=128, num_heads=4, d_ff=512, name="small"), **kw))


def test_megatron_bytes_per_parameter():
    """compute_weight_and_optimizer_memory: 18 bytes per parameter without the distributed
    optimizer, 6 + 12/d with it (megatron/training/theoretical_memory_usage.py)."""
    c = _small()
    n = 1024 * 128 * 2 + 2 * (4 * 128 * 128 + 3 * 128 * 512 + 2 * 128) + 128  # by hand
    plain = megatron(c, 8, dropout=0, seq=256, zero=0, global_batch=8)
    assert plain.model_states == 18 * n
    dist = megatron(c, 8, dropout=0, seq=256, zero=1, global_batch=8)
    assert n % 128 == 0 and dist.model_states == (6 + Fraction(12, 8)) * n


def test_megatron_distributed_optimizer_padding():
    """An unaligned model: each parameter starts at a multiple of 64 elements (Megatron
    iterates params[::-1]) and the buffer ends at a multiple of lcm(d, 128); the optimizer
    shard is 1/d of it (param_and_grad_buffer.py)."""
    c = _small(d_model=96, num_heads=3, d_ff=200, vocab_size=1000)
    p = megatron(c, 16, dropout=0, seq=256, zero=1, global_batch=16)
    # state-dict order: embedding (1024·96: V padded to 1,024), per block ln1 96, q, k, v,
    # o 96·96 each, ln2 96, w1 200·96, w3 200·96, w2 96·200; final norm 96; head 1024·96
    sizes = [1024 * 96] + [96, 9216, 9216, 9216, 9216, 96, 19200, 19200, 19200] * 2 \
        + [96, 1024 * 96]
    from accounting.planning.parallel.states import stage_tensors  # noqa: F401 (order)
    end = 0
    for size in reversed(sizes):
        end = -(-end // 64) * 64 + size
    buffer = -(-end // 128) * 128  # lcm(16, 128)
    shard = buffer // 16
    assert p.model_states == 2 * buffer + 4 * buffer + 12 * shard


# ---- DeepSpeed: the ZeRO paper's Figure 1, from the CLI ------------------------------------
# Ψ = 7.5B: 36 GPT layers of d = 4,096 (12d² + 13d with biases), V = 59,904, 2,048 positions,
# tied embedding, final LayerNorm: 7,503,437,824 parameters (Figure 1 uses Ψ = 7.5B)
ZERO_FLAGS = ("--vocab-size 59904 --context-length 2048 --num-layers 36 --d-model 4096 "
              "--num-heads 32 --d-ff 16384 --mlp gelu --norm layernorm --positions learned "
              "--bias --tie-embeddings --gpus 64 --stack deepspeed --format json").split()
PSI = 36 * (12 * 4096**2 + 13 * 4096) + 59904 * 4096 + 2048 * 4096 + 2 * 4096
STATE_WORDS = ("parameters", "gradients", "master copy", "moments", "optimizer state")


@pytest.mark.parametrize("zero,figure,exact", [(0, "120", 16 * PSI),
                                               (1, "31.4", 4 * PSI + Fraction(12 * PSI, 64)),
                                               (2, "16.6", 2 * PSI + Fraction(14 * PSI, 64)),
                                               (3, "1.88", Fraction(16 * PSI, 64))])
def test_zero_figure_1_from_the_cli(capsys, zero, figure, exact):
    """Rajbhandari et al. 2020, Figure 1: 120, 31.4, 16.6 and 1.88 GB per GPU (Ψ = 7.5B,
    N_d = 64, K = 12)."""
    assert PSI == 7_503_437_824
    code, out, _ = run(capsys, "plan", *ZERO_FLAGS, "--zero", str(zero))
    assert code == 0
    d = json.loads(out)
    items = d["stages"][0]["items"]
    states = sum(i["bytes"] for i in items if any(w in i["name"] for w in STATE_WORDS))
    assert states == d["model_states_per_gpu_bytes"] == exact
    digits = len(figure.split(".")[1]) if "." in figure else 0
    assert f"{states / 1e9:.{digits}f}" == figure


def test_deepspeed_estimators():
    """DeepSpeed's own estimators (the installed library) against the stack, term by term.
    ZeRO-2: gpu = 2Ψ + 18Ψ/N ("2 = params_16bit, 18 = 2_grads_16bit + 4_grads_32bit +
    4_params_32bit + 8_optimizer_states_32bit"): the stack's 2Ψ + 2Ψ/N + 12Ψ/N plus the fp32
    gradient partition DeepSpeed makes at the step (4Ψ/N, the item's note). ZeRO-3: gpu =
    4·largest_layer + 18Ψ/N: the stack's 16Ψ/N + its 4·largest working set, plus the fp32
    gradient partition (4Ψ/N), less the 16-bit gradient partition (2Ψ/N) the estimator does
    not count."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    c = get_preset("meta-llama/Llama-3.2-1B")
    n = 64
    run = StackRun(get_stack("deepspeed"))
    p2 = parallel_plan(c, Layout(n, dp=n, zero=2, global_batch=n), 2048, precision=BF16, stack=run)
    psi = sum(t.numel for u in p2.worst.states.units for t in u.tensors)
    assert psi == 1_235_814_400 and psi % (2 * n) == 0  # no alignment padding
    _, gpu2 = estimate_zero2_model_states_mem_needs(psi, 8, 8, cpu_offload=False)
    assert gpu2 == p2.model_states + 4 * psi // n
    p3 = parallel_plan(c, Layout(n, dp=n, zero=3, global_batch=n), 2048, precision=BF16, stack=run)
    largest = 128256 * 2048  # the tied embedding table, the largest module
    _, gpu3, largest_bytes = estimate_zero3_model_states_mem_needs(psi, largest, 8, 8,
                                                                    cpu_offload=False)
    working = next(i.bytes.c for i in p3.worst.items if "working set" in i.name)
    assert working == largest_bytes
    assert gpu3 == p3.model_states + working + 4 * psi // n - 2 * psi // n


# ---- torchtitan: FSDP2 with bf16 all-gathers ----------------------------------------------
def test_torchtitan_gathers_bf16():
    """The gathered units are bf16: half of torch's FSDP2 (fp32) gathered parameters, unit by
    unit; the sharded fp32 states are torch's."""
    c = get_preset("meta-llama/Llama-3.2-1B")
    lo = Layout(8, dp=8, zero=3, global_batch=8)
    torch_plan = parallel_plan(c, lo, 2048, precision=BF16)
    tt = parallel_plan(c, lo, 2048, precision=BF16, stack=StackRun(get_stack("torchtitan")))
    item = {i.name: i.bytes.c for i in torch_plan.worst.items}
    gathered = next(i.bytes.c for i in tt.worst.items if "all-gathered bf16" in i.name)
    assert 2 * gathered == item["FSDP2 gathered fp32 units (root + 2 blocks)"]
    assert tt.model_states == torch_plan.model_states


# ---- refusals (exit 2, one line) ----------------------------------------------------------
@pytest.mark.parametrize("args,words", [
    (["--stack", "megatron", "--zero", "3"], "--zero among 0, 1"),
    (["--stack", "torch", "--dropout", "0.1"], "--stack megatron"),
    (["--stack", "megatron", "--dropout", "1.5"], "[0, 1)"),
    (["--stack", "megatron", "--precision", "fp32"], "leave --precision out"),
    (["--stack", "deepspeed", "--tp", "2"], "--tp 1 --pp 1"),
    (["--stack", "torchtitan", "--recompute", "selective", "--block", "parallel"], "per-op"),
    (["--stack", "torchtitan", "--tp", "2"], "add --sp"),  # torchtitan's TP is always + SP
])
def test_refusals(capsys, args, words):
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.2-1B", "--gpus", "8", *args,
                        expected=words)


# ---- Must 2: the literature's memory formulas beside the plan -----------------------------
def _plans():
    llama = get_preset("meta-llama/Llama-3.1-8B")
    small = get_preset("meta-llama/Llama-3.2-1B")
    yield megatron(GPT3, 8, tp=8)
    yield megatron(GPT3, 8, tp=8, sp=True, recompute="selective")
    yield megatron(GPT3, 8, tp=8, recompute="full")
    yield megatron(llama, 64, tp=8, sp=True, dropout=0, kernel="flash", seq=8192, zero=1,
                   pp=2, global_batch=16)
    for stack, zero in (("torch", 3), ("torch", 1), ("deepspeed", 2), ("torchtitan", 3)):
        yield parallel_plan(small, Layout(8, dp=8, zero=zero, global_batch=8), 2048,
                            precision=BF16, stack=StackRun(get_stack(stack)))
    yield parallel_plan(small, Layout(8, tp=2, pp=2, dp=2, sp=True, zero=1, global_batch=8,
                                      recompute="full"), 2048, precision=BF16)


def test_every_formula_closes_term_by_term():
    """formula + Σ terms = the plan's exact bytes, for every formula, quantity, stack and
    layout above; no term is a remainder ('unexplained' never appears)."""
    from accounting.literature.memory_compare import compare
    for p in _plans():
        for e in compare(p):
            assert e.closes, (p.stack.name, p.layout, e.key, e.quantity)
            assert not any("unexplained" in t.label for t in e.terms)


def test_formula_values_gpt3():
    """The formulas' own values for GPT-3 175B at TP 8 + SP + selective, typed from their
    sources: Korthikanti 34sbh/t; Megatron's per layer sbh(18 + 4·ffn/h)/t = the same for
    ffn = 4h; its weights and optimizer: the most loaded shard (block/pp + embedding)/tp,
    layer = 2h(ffn + 2) + 2h²·2 (LayerNorm: norm_size 2), block + final norm 2h, V padded
    to 51,200 (128·8), times 18 bytes; the ZeRO paper's baseline 16Ψ/(tp·pp)."""
    from accounting.literature.memory_compare import compare
    s, h, t = 2048, 12288, 8
    p = megatron(GPT3, 8, tp=8, sp=True, recompute="selective")
    got = {(e.key, e.quantity.split()[0]): e.formula for e in compare(p)}
    assert got[("korthikanti", "activations")] == 34 * s * h // t == 106_954_752
    assert got[("megatron", "activations")] == s * h * (18 + 16) // t
    layer = 2 * h * (4 * h + 2) + 2 * h * h * 2
    shard = Fraction(96 * layer + 2 * h + h * 51200, t)
    assert got[("megatron", "model")] == 18 * shard
    psi = 96 * (12 * h * h + 13 * h) + 50257 * h + 2048 * h + 2 * h
    assert got[("zero", "model")] == Fraction(16 * psi, t)


def test_compare_formulas_cli_json(capsys):
    code, out, _ = run(capsys, "plan", *GPT3_FLAGS, "--gpus", "8", "--tp", "8", "--sp",
                       "--recompute", "selective", "--stack", "megatron", "--dropout", "0.1",
                       "--batch", "1", "--compare-formulas", "--format", "json")
    assert code == 0
    d = json.loads(out)
    k = next(e for e in d["literature_memory"] if e["key"] == "korthikanti")
    assert k["formula_bytes"]["numerator"] == 106_954_752
    assert k["exact_bytes"] == d["per_layer_activation_bytes"]


@pytest.mark.parametrize("stack,zero,tp,pp", [("torch", 0, 2, 2), ("torch", 1, 1, 2),
                                              ("torch", 3, 2, 1), ("megatron", 1, 2, 2),
                                              ("deepspeed", 3, 1, 1), ("torchtitan", 2, 2, 2)])
def test_model_state_items_named_as_the_contract_says(stack, zero, tp, pp):
    """The JSON contract: the model states are the items whose names say parameters,
    gradients, master copy, moments or optimizer state — and only those."""
    c = get_preset("meta-llama/Llama-3.2-1B")
    lo = Layout(8, tp=tp, pp=pp, dp=8 // tp // pp, sp=tp > 1, zero=zero, global_batch=16)
    p = parallel_plan(c, lo, 1024, precision=BF16, stack=StackRun(get_stack(stack)))
    for s in p.stages:
        for i in s.items:
            if i.on_gpu:
                assert i.model_state == any(w in i.name for w in STATE_WORDS), i.name


def test_megatron_embedding_and_loss_against_theoretical_memory_usage():
    """compute_activation_memory's non-layer terms (with SP; everything / t): the input to
    the embedding 8·s·b and its dropout s·b·h (first stage); the output layer and the loss
    4·s·b·h·(1 + V/h) (the final norm's 2sbh and the head's input 2sbh, the fp32 softmax
    4sbV). Megatron's own count divides the token ids by t too (every TP rank keeps them
    whole) and leaves out the norm's statistics and the loss's target mask and int64
    masked targets: those are the differences, by hand."""
    from accounting.planning.parallel import megatron as M
    from accounting.planning.parallel.shards import FIRST, LAST
    s, h, t = 2048, 12288, 8
    v = 51200  # 50,257 padded to a multiple of 128·8
    lo = Layout(8, tp=t, dp=1, sp=True, global_batch=1)
    _, rows = M.rows(GPT3, lo, s, True, M.UNFUSED)
    first = sum(r.bytes.at(1) for r in rows if r.place == FIRST)
    # + 8·s: GPT-3's learned positions, whose ids (arange(s) expanded over b: one storage)
    # nn.Embedding's backward keeps too; theoretical_memory_usage.py counts the token ids only
    assert first == (8 * s + s * h) // t + 8 * s * (t - 1) // t + 8 * s
    last = sum(r.bytes.at(1) for r in rows if r.place == LAST)
    assert last == 4 * s * h * (1 + Fraction(v, h)) / t + 8 * s // t + 9 * s


# ---- torchtitan's per-op selective checkpointing, on the CPU -------------------------------
def _titan_block(torch, h, a, g, d, f, gated):
    """A transformer block written as torchtitan's Llama (models/llama3/model/model.py):
    nn.Linear projections wq, wk, wv, SDPA, wo; feed-forward w2(silu(w1 x)·w3 x) (or
    w2(gelu(w1 x)) without the gate); RMSNorm before each. RoPE is left out: its elementwise
    ops are recomputed under the policy, so it changes nothing saved."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk = nn.Linear(h, a * d, bias=False), nn.Linear(h, g * d, bias=False)
            self.wv, self.wo = nn.Linear(h, g * d, bias=False), nn.Linear(a * d, h, bias=False)
            self.w1, self.w2 = nn.Linear(h, f, bias=False), nn.Linear(f, h, bias=False)
            self.w3 = nn.Linear(h, f, bias=False) if gated else None
            self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)

        def forward(self, x):
            B, T, _ = x.shape
            y = self.n1(x)
            q = self.wq(y).view(B, T, a, d).transpose(1, 2)
            k = self.wk(y).view(B, T, g, d).transpose(1, 2).repeat_interleave(a // g, dim=1)
            v = self.wv(y).view(B, T, g, d).transpose(1, 2).repeat_interleave(a // g, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.wo(o.transpose(1, 2).contiguous().view(B, T, a * d))
            y = self.n2(x)
            z = F.silu(self.w1(y)) * self.w3(y) if gated else F.gelu(self.w1(y))
            return x + self.w2(z)
    return Block().to(torch.bfloat16)


@pytest.mark.parametrize("mlp", ["swiglu", "gelu"])
def test_torchtitan_op_sac_on_cpu(mlp):
    """torchtitan's policy (its _op_sac_save_list and 'every second mm recomputed', typed from
    torchtitan/models/llama3/infra/parallelize.py) under torch.utils.checkpoint's selective
    checkpointing: the bytes of the outputs it saves plus the block's input equal the
    stack's per-layer count (the torchtitan ledger under the builder's policy region). The
    CPU's flash kernel stands in for CUDA's in the save list."""
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import (CheckpointPolicy, checkpoint,
                                        create_selective_checkpoint_contexts)
    ops = torch.ops
    save = {ops.aten.mm.default, ops.aten._scaled_dot_product_flash_attention.default,
            ops.aten._scaled_dot_product_efficient_attention.default,
            ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
            ops._c10d_functional.reduce_scatter_tensor.default, ops.aten.max.default}
    saved, storages = [0], set()

    def context():
        meta = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            if func == ops.aten.mm.default:
                meta[mode] += 1
            keep = func in save and not (func == ops.aten.mm.default and meta[mode] % 2 == 0)
            if keep and not ctx.is_recompute:
                outs = ctx.op_output if isinstance(ctx.op_output, tuple) else (ctx.op_output,)
                for o in outs:
                    if isinstance(o, torch.Tensor) and o.untyped_storage()._cdata not in storages:
                        storages.add(o.untyped_storage()._cdata)
                        saved[0] += o.untyped_storage().nbytes()
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
        return create_selective_checkpoint_contexts(policy)

    h, a, g, d, f, T = 64, 8, 2, 8, 96, 16
    block = _titan_block(torch, h, a, g, d, f, mlp == "swiglu")
    x = torch.randn(1, T, h, dtype=torch.bfloat16, requires_grad=True)
    y = checkpoint(block, x, use_reentrant=False, context_fn=context)
    y.sum().backward()
    measured = saved[0] + x.untyped_storage().nbytes()
    c = ModelConfig(vocab_size=128, context_length=T, num_layers=1, d_model=h, num_heads=a,
                    num_kv_heads=g, head_dim=d, d_ff=f, mlp=mlp, name="titan")
    if mlp == "gelu":  # torchtitan's Llama is SwiGLU: another block is refused
        refused = "per-op"
        with pytest.raises(UsageError, match=refused):
            parallel_plan(c, Layout(2, dp=2, zero=3, global_batch=2, recompute="selective"), T,
                          precision=BF16, stack=StackRun(get_stack("torchtitan")))
        return
    p = parallel_plan(c, Layout(2, dp=2, zero=3, global_batch=2, recompute="selective"), T,
                      precision=BF16, stack=StackRun(get_stack("torchtitan")))
    assert p.per_layer_activation_bytes == measured


def test_torchtitan_selective_plan():
    """The plan uses the per-op list for every block (Llama 3.1 8B, 8 GPUs, ZeRO-3)."""
    c = get_preset("meta-llama/Llama-3.1-8B")
    p = parallel_plan(c, Layout(8, dp=8, zero=3, global_batch=8, recompute="selective"), 8192,
                      precision=BF16, stack=StackRun(get_stack("torchtitan")))
    s, h, a, g, d, f = 8192, 4096, 32, 8, 128, 14336
    # input, wq out, attention out + lse, wv out, w1 out, w2 out (mm 1, 3, 5, 7)
    assert p.per_layer_activation_bytes == 2 * s * h + 2 * s * a * d + 2 * s * a * d \
        + 4 * a * s + 2 * s * g * d + 2 * s * f + 2 * s * h


def test_torchtitan_selective_under_tp_sp_by_hand(capsys):
    """torchtitan's per-op SAC on a TP 2 + SP layout, from its source (pytorch/torchtitan
    @cfb9326, torchtitan/distributed/activation_checkpoint.py _custom_policy: "Saves output
    of all compute ops, except every second mm" — a per-block mm counter, MUST_SAVE for ops
    in models/llama3/infra/parallelize.py _op_sac_save_list, which holds aten.mm, the SDPA
    kernels and _c10d_functional.reduce_scatter_tensor; apply_tp: SequenceParallel norms,
    ColwiseParallel wq/wk/wv/w1/w3, RowwiseParallel(output_layouts=Shard(1)) wo/w2). Llama
    3.1 8B (h 4,096, 32 heads, 8 KV heads of 128, f 14,336), s = 131,072, b = 1, t = 2, bf16.
    The block's mm in order: wq 1 saved, wk 2 recomputed, wv 3 saved, wo 4 recomputed (its
    reduce-scatter saved), w1 5 saved, w3 6 recomputed, w2 7 saved (a Partial: the full
    sequence, h wide) and its reduce-scatter saved. The all-gathers before wq and w1 are not
    in the list: recomputed. Read from `plan --format json` (per_layer_activations)."""
    code, out, _ = run(capsys, "plan", "meta-llama/Llama-3.1-8B", "--gpus", "8", "--tp", "2",
                       "--sp", "--stack", "torchtitan", "--recompute", "selective",
                       "--format", "json")
    assert code == 0
    d = json.loads(out)
    s, h, a, g, dh, f, t = 131072, 4096, 32, 8, 128, 14336, 2
    assert d["seq"] == s and d["layout"]["micro_batch"] == 1
    by_hand = {
        "block input, sequence shard (checkpoint's input)": 2 * (s // t) * h,
        "wq out (mm 1), heads split": 2 * s * (a * dh // t),
        "wv out (mm 3), KV heads split": 2 * s * (g * dh // t),
        "flash output": 2 * s * (a * dh // t),
        "flash log-sum-exp, fp32 per head and row": 4 * (a // t) * s,
        "wo out reduce-scattered": 2 * (s // t) * h,
        "w1 out (mm 5), f split": 2 * s * (f // t),
        "w2 out (mm 7), a partial sum": 2 * s * h,
        "w2 out reduce-scattered": 2 * (s // t) * h,
    }
    assert d["per_layer_activation_bytes"] == sum(by_hand.values()) == 5_779_750_912
    assert sorted(x["bytes"] for x in d["per_layer_activations"]) == sorted(by_hand.values())


def test_torchtitan_search_ranks_tp_with_sp_only(capsys):
    """`--stack torchtitan --search`: the table named the sharding stage of a dp = 1 layout
    from the stack's engines, which hold 2 and 3 only (exit 3, KeyError: 0); and a TP
    layout without SP is rejected as torchtitan cannot run it (its apply_tp always shards the
    sequence)."""
    argv = ("plan", "meta-llama/Llama-3.2-1B", "--gpus", "4", "--stack", "torchtitan",
            "--search", "--gpu", "H100", "--ctx", "2048")
    code, out, err = run(capsys, *argv)
    assert code == 0 and "internal error" not in err, err
    code, out, _ = run(capsys, *argv, "--format", "json")
    d = json.loads(out)
    assert d["ranked"] and all(r["layout"]["sp"] for r in d["ranked"] if r["layout"]["tp"] > 1)
    assert any("add --sp" in r["reason"] for r in d["rejected"])


def test_megatron_pipeline_stage_activations_by_hand():
    """A 4-layer GPT (h = 256, 4 heads, GELU 4h, LayerNorm, s = 128) on 2 stages, 4
    micro-batches of 1, dropout on, unfused attention: stage 0 holds min(m, p) = 2
    micro-batches of 2 layers — each sbh(34 + 5as/h) + 16sb (the norms' statistics) —
    and the embedding's token ids (8sb), position ids (8s: arange(s) expanded over the batch,
    one storage, kept by nn.Embedding's backward) and dropout mask (sbh); the last stage 1 micro-batch
    of its 2 layers, the final norm (2sbh + 8sb), the head's input (2sbh), the fp32 softmax
    (4sbV, V = 512 already a multiple of 128) and the loss's target mask and ids (9sb). With
    full recomputation: 2sbh per layer kept, and one layer's whole set while it recomputes."""
    c = ModelConfig(vocab_size=512, context_length=128, num_layers=4, d_model=256, num_heads=4,
                    d_ff=1024, mlp="gelu", norm="layernorm", positions="learned", name="gpt")
    s, h, a, v = 128, 256, 4, 512
    layer = s * h * 34 + 5 * a * s * s + 16 * s
    p = megatron(c, 2, pp=2, seq=s, global_batch=4)
    first, last = p.stages[0], p.stages[-1]
    assert first.activations.total.at(1) == 2 * (2 * layer + 8 * s + 8 * s + s * h)
    assert last.activations.total.at(1) == 2 * layer + 2 * s * h + 8 * s + 2 * s * h \
        + 4 * s * v + 9 * s
    full = megatron(c, 2, pp=2, seq=s, global_batch=4, recompute="full")
    assert full.stages[0].activations.total.at(1) == 2 * (2 * 2 * s * h + 8 * s + 8 * s + s * h) \
        + layer - 2 * s * h
