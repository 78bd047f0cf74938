"""--loss chunked|fused-linear (issue 44): the plan's moments against the libraries.

chunked: a real CPU training step of the course model whose head runs chunk by chunk as
torchtune's TransformerDecoder.chunked_output writes it (`[self.output(chunk) for chunk in
last_hidden_state.chunk(n, dim=1)]`), with torchtune 0.6.1's own CEWithChunkedOutputLoss
(loaded from its file, tests/torchtune_files.py) and the recipe's `del logits` before the
backward pass, measured by tests/test_peak.py's live-storage tracker: the live bytes at the
forward's last log_softmax and at the backward's first log_softmax backward must be the
plan's two moments. The tolerance is the 0-dim scalars the ledger does not itemise (each
chunk's nll_loss total weight and loss: 8 bytes a chunk).

fused-linear: Liger's kernels are Triton (a GPU), so its rule is read from liger_kernel
0.8.5's source (planning/loss_memory.py) and checked here by hand algebra: its chunk size
against the worked example in fused_linear_cross_entropy_forward's own comment, and the
plan's moments against the terms written out for Llama-3.2-1B's published config.json
(V = 128,256, d_model = 2,048).
"""
import json

import pytest

torch = pytest.importorskip("torch")

from accounting.architecture.config import ModelConfig  # noqa: E402
from accounting.planning import PRECISIONS, MemoryModel  # noqa: E402
from accounting.planning.loss_memory import fused_chunk_rows  # noqa: E402
from accounting.planning.plan import plan  # noqa: E402
from cli_run import refused_in_one_line, run  # noqa: E402
from test_peak import LiveBytes  # noqa: E402
from torchtune_files import load  # noqa: E402


class _Chunked(torch.nn.Module):
    """torchtune's TransformerDecoder.chunked_output (torchtune/modules/transformer.py)."""

    def __init__(self, output, n):
        super().__init__()
        self.output, self.num_output_chunks = output, n

    def forward(self, last_hidden_state):
        return [self.output(chunk) for chunk in last_hidden_state.chunk(self.num_output_chunks, dim=1)]


class _Marks(LiveBytes):
    """LiveBytes, and the live bytes after the forward pass's last log_softmax."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.phase == "forward" and str(func) == "aten._log_softmax.default":
            self.forward_end = self.total
        return out


def _measure(c, B, T, n):
    loss_fn = load("modules/loss/ce_chunked_output_loss.py").CEWithChunkedOutputLoss(n)
    from model import TransformerLM
    torch.manual_seed(0)
    model = TransformerLM.from_config(c)
    model.lm_head = _Chunked(model.lm_head, n)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, c.vocab_size, (B, T), generator=g)
    targets = torch.randint(0, c.vocab_size, (B, T), generator=g)

    def step(tracker=None):
        opt.zero_grad(set_to_none=True)
        if tracker:
            tracker.phase = "forward"
        logits = model(ids)
        loss = loss_fn(logits, targets)
        del logits  # the recipe's _loss_step: "free logits otherwise it peaks backward memory"
        if tracker:
            tracker.phase = "backward"
        loss.backward()
        if tracker:
            tracker.phase = "optimizer"
        opt.step()
    step()
    state = [t for s in opt.state.values() for t in s.values()]
    steps = sum(s["step"].untyped_storage().nbytes() for s in opt.state.values())
    tracker = _Marks([*model.parameters(), *model.buffers(), ids, targets, *state])
    with tracker:
        step(tracker)
    return tracker, steps


@pytest.mark.parametrize("B,T,n", [(1, 64, 8), (2, 64, 8), (2, 64, 1), (3, 96, 4)])
def test_chunked_moments_are_a_torchtune_step(B, T, n):
    c = ModelConfig(vocab_size=3000, context_length=T, num_heads=2, attention="sdpa",
                    num_layers=2, d_model=16, d_ff=24)
    tracker, steps = _measure(c, B, T, n)
    m = MemoryModel(c, PRECISIONS["fp32"], "model", device="cpu", loss="chunked", loss_chunks=n)
    v = m.values(T, B)
    start, update, forward = (ph.bytes.evaluate(v) for ph in m.peak_terms)
    scalars = 8 * n
    assert 0 <= tracker.forward_end - steps - forward <= scalars
    # nll_loss's backward has just freed the last chunk's copy of its targets (B > 1): the
    # plan keeps every chunk's, an upper bound by 8·B·T_c there
    freed = 8 * B * v["T_c"] * v["[B>1]"]
    assert -freed <= tracker.marks["aten._log_softmax_backward_data.default"] - steps - start \
        <= scalars
    assert -freed <= tracker.peak - steps - max(start, forward) <= scalars + 8  # the loss's grad
    # under the standard loss's step (its B·T·V gradients); one fp32 chunk is that step
    standard = MemoryModel(c, PRECISIONS["fp32"], "model", device="cpu").peak(B, T)
    assert max(start, forward) == standard if n == 1 else max(start, forward) < standard


def test_chunked_uneven_chunks_are_an_upper_bound():
    # T = 60 in 8 chunks: torch.chunk gives seven of 8 and one of 4; the backward's first
    # chunk is the small last one, so the plan's ⌈T/n⌉ chunk bounds it from above
    c = ModelConfig(vocab_size=3000, context_length=60, num_heads=2, attention="sdpa",
                    num_layers=2, d_model=16, d_ff=24)
    tracker, steps = _measure(c, 3, 60, 8)
    m = MemoryModel(c, PRECISIONS["fp32"], "model", device="cpu", loss="chunked")
    assert tracker.peak - steps <= m.peak(3, 60) + 8 * 8
    assert m.values(60, 3)["T_c"] == 8


def test_liger_chunk_rows_follow_its_own_worked_example():
    # liger_kernel/ops/fused_linear_cross_entropy.py: "for ex: BT = 4096*4, V = 32000,
    # H = 4096 ==> inc_factor = 8, chunk_size = 2048"
    assert fused_chunk_rows(4096 * 4, 32000, 4096) == 2048
    # next_power_of_2 rounds up; min(…, BT) caps it: BT = 3000, V = 128,256, H = 2,048:
    # ⌈V/H⌉ = 63, ⌈3000/63⌉ = 48 → 64; BT = 40 rows → ⌈40/63⌉ = 1 → 1
    assert fused_chunk_rows(3000, 128256, 2048) == 64
    assert fused_chunk_rows(40, 128256, 2048) == 1


def _peaks(capsys, *argv):
    code, out, err = run(capsys, "plan", "meta-llama/Llama-3.2-1B", "--ctx", "2048",
                         "--batch", "2", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)["peak"]


def test_fused_linear_moments_by_hand(capsys):
    # Llama-3.2-1B (config.json): V = 128,256, d_model = 2,048, tied embeddings; bf16-mixed
    # (fp32 parameters, the residual stream fp32, the head's matmul in bf16). B = 2, T = 2,048.
    B, T, V, D = 2, 2048, 128256, 2048
    std = plan("meta-llama/Llama-3.2-1B", T, B).memory.model
    fl = plan("meta-llama/Llama-3.2-1B", T, B, loss="fused-linear").memory.model
    v = fl.values(T, B)
    s_start = std.peak_terms[0].bytes.evaluate(v)
    f_start, _, f_forward = (ph.bytes.evaluate(v) for ph in fl.peak_terms)
    # standard, at its backward's start: log_softmax's fp32 output (4·BTV) and two fp32
    # gradients (8·BTV), the head's bf16 input copy (2·BTD) and weight copy (2·VD), nll's
    # 0-dim fp32 total weight, and transformers' bf16 logits its output keeps (2·BTV)
    standard_region = 4 * B * T * V + 8 * B * T * V + 2 * B * T * D + 2 * V * D + 4 + 2 * B * T * V
    # Liger: grad_input zeros_like(the fp32 hidden state) and grad_weight zeros_like(the
    # fp32 weight), saved for the backward pass
    liger_region = 4 * B * T * D + 4 * V * D
    assert s_start - f_start == standard_region - liger_region
    # the forward's last chunk: C rows of bf16 logits and of their product with the
    # weight, the fp32 loss_1d, autocast's cached bf16 copy of the weight
    C = 128  # ⌈128,256/2,048⌉ = 63; ⌈4,096/63⌉ = 66; the next power of two: 128
    assert C == v["C_fl"] == 128
    # (the 0-dim loss the backward's start holds does not exist yet: 4 bytes fewer)
    assert f_forward - f_start == 2 * C * V + 2 * C * D + 4 * B * T + 2 * V * D - 4


def test_the_json_peak_follows_the_loss(capsys):
    std, ch, fl = (_peaks(capsys, *a) for a in ((), ("--loss", "chunked"),
                                                ("--loss", "fused-linear")))
    assert fl["peak_bytes"] < ch["peak_bytes"] < std["peak_bytes"]
    assert all(p["reserved_bytes"] >= p["peak_bytes"] for p in (std, ch, fl))
    more = _peaks(capsys, "--loss", "chunked", "--loss-chunks", "32")
    assert more["peak_bytes"] < ch["peak_bytes"]


def test_bad_loss_flags_are_refused_in_one_line(capsys):
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.2-1B", "--loss-chunks", "4",
                        expected="give --loss chunked")
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.2-1B", "--loss", "chunky",
                        expected="--loss")
    refused_in_one_line(capsys, "plan", "gpt2-small", "--final-softcap", "30", "--loss", "chunked",
                        expected="soft-capping")
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.2-1B", "--offload", "optimizer",
                        expected="give --gpus N")


def test_many_gpus_follow_the_loss_on_the_last_stage(capsys):
    # Llama-3.2-1B, 8 GPUs, FSDP, micro-batch 1, T = 2,048, transformers' ops in bf16-mixed:
    # at the standard loss's backward start the last stage holds log_softmax's fp32 output
    # (4·T·V), its two fp32 gradients (8·T·V) and transformers' bf16 logits (2·T·V); the
    # chunked loss's forward end: the fp32 log-softmax (4·T·V), the bf16 logits chunks
    # (2·T·V) and the last chunk's fp32 copy (4·(T/8)·V); B = 1: no copies of the targets
    T, V = 2048, 128256
    code, out, err = run(capsys, "plan", "meta-llama/Llama-3.2-1B", "--ctx", str(T),
                         "--gpus", "8", "--fsdp", "--format", "json")
    standard = json.loads(out)["memory_per_gpu_bytes"]
    code, out, err = run(capsys, "plan", "meta-llama/Llama-3.2-1B", "--ctx", str(T),
                         "--gpus", "8", "--fsdp", "--loss", "chunked", "--format", "json")
    chunked = json.loads(out)
    moment = {m["name"]: m["bytes"] for m in chunked["stages"][-1]["moments"]}
    fwd_end = moment["end of the forward pass (--loss chunked)"]
    assert standard - fwd_end == 14 * T * V - (6 * T * V + 4 * T // 8 * V)
    # the tied embedding's fp32 gradient (FSDP2's root unit, 4·V·d bytes unsharded, plus
    # one block's) is made by the head's backward, after the loss's chunks are freed
    # (peak.Moment.pass_grads); a block's backward holds neither the loss's nor the head's
    # saves (freed when their nodes ran: tests/test_parallel_head_freed.py), so the chunked
    # loss's peak is the forward's end (before: a block's backward, the loss's saves counted)
    block = moment["a block's backward pass"]
    assert chunked["memory_per_gpu_bytes"] == max(moment.values()) == fwd_end > block
    assert chunked["memory_per_gpu_reserved_bytes"] >= chunked["memory_per_gpu_bytes"]
    assert (chunked["loss"], chunked["loss_chunks"], chunked["compile"],
            chunked["offload_activations"]) == ("chunked", 8, False, False)
    assert chunked["peak_moment"] == "end of the forward pass (--loss chunked)"


def test_compiled_chunked_loss_saves_the_chunk():
    # torchtune's compile_loss (training/_compile.py, pytorch/torchtune@1814feb and 0.6.1)
    # compiles CEWithChunkedOutputLoss.compute_cross_entropy. Measured here with saved-tensor
    # hooks on the CPU, torchtune's own class, bf16 chunks: the compiled graph saves each
    # chunk in bf16, its targets, and two float32 numbers a row, where eager saves the
    # float32 log-softmax. The plan's compiled region (loss_memory.compiled_chunked) must
    # keep exactly the measured bytes in place of the eager ones. Before: --compile left
    # the loss eager (4·B·T·V of float32 log-softmax kept).
    B, T, V, n = 2, 64, 3000, 4
    tt = load("modules/loss/ce_chunked_output_loss.py")
    g = torch.Generator().manual_seed(0)
    chunks = [torch.randn(B, T // n, V, generator=g).to(torch.bfloat16).requires_grad_()
              for _ in range(n)]
    labels = torch.randint(0, V, (B, T), generator=g)

    def saved_bytes(loss_fn):
        seen = {}

        def pack(t):  # 0-dim scalars (nll_loss's total weight) are not itemised
            if t.dim():
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = loss_fn(chunks, labels)
        loss.backward()
        return sum(seen.values())
    eager = saved_bytes(tt.CEWithChunkedOutputLoss(n))
    compiled_fn = tt.CEWithChunkedOutputLoss(n)
    compiled_fn.compute_cross_entropy = torch.compile(compiled_fn.compute_cross_entropy)
    compiled = saved_bytes(compiled_fn)
    # hand algebra of what each saves: eager the float32 log-softmax and the targets' chunk
    # copies (8·B·T: non-contiguous at B > 1); compiled the bf16 chunk, the targets, 2 × 4·B·T
    assert eager == 4 * B * T * V + 8 * B * T
    assert compiled == 2 * B * T * V + 8 * B * T + 2 * 4 * B * T
    c = ModelConfig(vocab_size=V, context_length=T, num_heads=2, attention="sdpa",
                    num_layers=2, d_model=16, d_ff=24)
    kept = {}
    for comp in (False, True):
        m = MemoryModel(c, PRECISIONS["bf16"], "model", loss="chunked", loss_chunks=n,
                        compile=comp)
        kept[comp] = m.loss_region.kept.evaluate(m.values(T, B))
    assert kept[True] - kept[False] == compiled - eager


def test_compiled_chunked_loss_on_many_gpus(capsys):
    # the many-GPU plan compiles the chunked loss under --compile as the one-GPU plan does
    # (planning/parallel/peak.py _loss_linear): Llama-3.2-1B (V 128,256) on 8 GPUs, FSDP,
    # micro-batch B 2 of T 4,096 (T_c 512), bf16 logits under autocast. By hand: the
    # forward's end loses the float32 log-softmax and last chunk copy and keeps two float32
    # numbers a token, −(4·B·T·V + 4·B·T_c·V) + 8·B·T; the backward's start swaps the
    # log-softmax and one chunk's two float32 gradients for the bf16 chunks, one bf16
    # chunk gradient and the row numbers: −(4·B·T·V + 8·B·T_c·V) + 2·B·T·V + 8·B·T +
    # 2·B·T_c·V + 4·B·T_c. Before: the loss stayed eager there (no change)
    B, T, Tc, V = 2, 4096, 512, 128256
    moments = []
    for extra in ((), ("--compile",)):
        code, out, err = run(capsys, "plan", "meta-llama/Llama-3.2-1B", "--gpus", "8",
                             "--fsdp", "--batch", "16", "--micro-batch", "2", "--ctx", "4096",
                             "--loss", "chunked", "--recompute", "full", *extra,
                             "--format", "json")
        assert code == 0, err
        moments.append({m["name"]: m["bytes"] for st in json.loads(out)["stages"]
                        for m in st["moments"]})
    eager, compiled = moments
    assert compiled["end of the forward pass (--loss chunked)"] - \
        eager["end of the forward pass (--loss chunked)"] == \
        -(4 * B * T * V + 4 * B * Tc * V) + 8 * B * T
    start = "start of the backward pass (the loss's backward)"
    assert compiled[start] - eager[start] == \
        -(4 * B * T * V + 8 * B * Tc * V) + 2 * B * T * V + 8 * B * T + 2 * B * Tc * V + 4 * B * Tc
