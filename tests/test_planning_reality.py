"""The planner against a real training step of model.TransformerLM on the CPU (fp32).

  - parameters, gradients and AdamW state: the bytes of the tensors torch holds;
  - activations: the tensors autograd saves for the backward pass, caught with
    torch.autograd.graph.saved_tensors_hooks (each storage counted once, parameters
    excluded), attributed to the module running when they are first saved, and compared
    row by row with the records of accounting/planning/memory.py; the course's list is
    then compared with what is saved, item by item;
  - training FLOPs: FlopCounterMode over forward, cross-entropy and backward;
  - AdamW's update: the aten ops torch.optim.AdamW runs (single-tensor and foreach paths).
"""
from collections import Counter, defaultdict

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from accounting.architecture.config import ModelConfig
from accounting.planning import (
    ADAMW_OPS,
    PRECISIONS,
    MemoryModel,
    step_flops,
)
from accounting.ledger.ledger import ledger
from accounting.planning.memory import COURSE, MODEL, bytes_per_element, values
from model import TransformerLM
from test_architectures import relative, saved_tensors

# Sizes chosen pairwise distinct so that tensors of different roles differ in size.
SMALL = ModelConfig(vocab_size=37, context_length=8, num_layers=2, d_model=24, num_heads=2, d_ff=40)
WORKLOADS = [(2, 5), (3, 8)]  # (B, T): T below and at context_length
FP32 = PRECISIONS["fp32"]
DTYPE = {"float": torch.float32, "bool": torch.bool, "int64": torch.int64}


def build(seed=0):
    torch.manual_seed(seed)
    return TransformerLM(**SMALL.model_kwargs())


def batch(B, T):
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, SMALL.vocab_size, (B, T), generator=g),
            torch.randint(0, SMALL.vocab_size, (B, T), generator=g))


def loss_of(model, ids, targets):
    logits = model(ids)
    return F.cross_entropy(logits.reshape(-1, SMALL.vocab_size), targets.reshape(-1))


def nbytes(t):
    return t.numel() * t.element_size()


def item(tm, prefix):
    return sum(i.bytes for i in tm.items if i.name.startswith(prefix))


# ---- parameters, gradients, optimizer state ----------------------------------------------

@pytest.mark.parametrize("B,T", WORKLOADS)
def test_parameter_gradient_and_adamw_state_bytes(B, T):
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    loss_of(model, *batch(B, T)).backward()
    opt.step()
    tm = MemoryModel(SMALL, FP32, MODEL).at(B, T)
    assert item(tm, "parameters") == sum(nbytes(p) for p in model.parameters())
    assert item(tm, "gradients") == sum(nbytes(p.grad) for p in model.parameters())
    state = list(opt.state.values())
    assert item(tm, "AdamW first moment") == sum(nbytes(s["exp_avg"]) for s in state)
    assert item(tm, "AdamW second moment") == sum(nbytes(s["exp_avg_sq"]) for s in state)
    # AdamW's step counters are tensors too: one 0-dim float32 per parameter tensor, on the
    # CPU (default AdamW, not fused or capturable), hence off the GPU total.
    steps = [s["step"] for s in state]
    assert all(s.dim() == 0 and s.dtype == torch.float32 and s.device.type == "cpu" for s in steps)
    assert item(tm, "AdamW step counters") == sum(nbytes(s) for s in steps)
    assert set(opt.state[next(model.parameters())]) == {"step", "exp_avg", "exp_avg_sq"}
    # The RoPE cos/sin tables are buffers: on the device, not parameters, not in state_dict.
    assert item(tm, "RoPE") == sum(nbytes(b) for b in model.buffers())


# ---- activations ---------------------------------------------------------------------------

# The saved tensors of this model (and of every architecture variant), record by record:
# tests/test_architectures.py::test_saved_activations_equal_the_ledger.


def test_course_list_against_what_autograd_saves():
    """The course's activation list vs the saved tensors, item by item (B = 2, T = 5)."""
    B, T = 2, 5
    seen = saved_tensors(build(), *batch(B, T))
    saved = sum(n for _, n, _ in seen.values())
    tm = MemoryModel(SMALL, FP32, COURSE).at(B, T)
    course = tm.activation_bytes
    rows = {r.record.name: r.bytes for r in tm.activation_rows}
    acts = ledger(SMALL).activations
    only_course = {a.name for a in acts if a.course and not a.saved}
    only_saved = {a.name for a in acts if a.saved and not a.course}
    # The course counts outputs no backward formula needs (V and the weighted values are
    # saved, but as the copies einsum and rearrange make of them, listed on their own) ...
    assert only_course == {"Q projection output", "K projection output", "V projection output",
                           "QKᵀ scores", "attention-weighted values", "output projection output",
                           "W2 output", "logits (output embedding)"}
    # ... and misses what autograd does keep:
    assert only_saved == {
        "ln1 rms", "ln1 x / rms", "ln1 output", "ln2 rms", "ln2 x / rms", "ln2 output",
        "ln_final rms", "ln_final x / rms", "ln_final output",  # RMSNorm internals, matmul inputs
        "RoPE cos and sin at the positions", "Q after RoPE", "K after RoPE",  # RoPE
        "V (heads layout)", "attention-weighted values, heads merged",  # the copies
        "causal mask", "masked scores (softmax input)", "softmax row max", "exp(scores − max)",
        "softmax row sum",  # the model's own softmax
        "sigmoid(W1 output)", "gated product (W2 input)",  # SwiGLU
        "token ids", "targets", "nll_loss total weight"}  # embedding and loss bookkeeping
    # Each of those rows by hand (fp32, 4 bytes; int64 8; bool 1), L = 2, B = 2, T = 5,
    # n = B·T = 10, d = 24, h = 2, d_k = 12, d_ff = 40, V = 37; per-layer rows × L:
    n, L, d, h, dk, f, V = B * T, 2, 24, 2, 12, 40, 37
    hand_saved = {
        **{f"{ln} rms": L * 4 * n for ln in ("ln1", "ln2")}, "ln_final rms": 4 * n,
        **{f"{ln} {what}": L * 4 * n * d for ln in ("ln1", "ln2") for what in ("x / rms", "output")},
        "ln_final x / rms": 4 * n * d, "ln_final output": 4 * n * d,
        # cos and sin indexed at the positions, (1, T, d_k/2), once for Q and once for K
        "RoPE cos and sin at the positions": L * 4 * 4 * T * dk // 2,
        "Q after RoPE": L * 4 * B * h * T * dk, "K after RoPE": L * 4 * B * h * T * dk,
        "V (heads layout)": L * 4 * n * d, "attention-weighted values, heads merged": L * 4 * n * d,
        "causal mask": L * T * T, "masked scores (softmax input)": L * 4 * B * h * T * T,
        "softmax row max": L * 4 * B * h * T, "exp(scores − max)": L * 4 * B * h * T * T,
        "softmax row sum": L * 4 * B * h * T,
        "sigmoid(W1 output)": L * 4 * n * f, "gated product (W2 input)": L * 4 * n * f,
        "token ids": 8 * n, "targets": 8 * n, "nll_loss total weight": 4}
    hand_course = {
        **{f"{x} projection output": L * 4 * n * d for x in ("Q", "K", "V", "output")},
        "QKᵀ scores": L * 4 * B * h * T * T, "attention-weighted values": L * 4 * B * h * T * dk,
        "W2 output": L * 4 * n * d, "logits (output embedding)": 4 * n * V}
    assert {k: rows[k] for k in only_saved} == hand_saved
    assert {k: rows[k] for k in only_course} == hand_course
    # the measured total differs from the course's by exactly those rows (26,974 − 13,800)
    assert saved - course == sum(hand_saved.values()) - sum(hand_course.values()) == 13_174
    # Hand numbers for this config (fp32 bytes; L = 2, B = 2, T = 5, d = 24, h = 2, d_ff = 40,
    # V = 37): course = 4·[2·(8·BTd + 3·BTd_ff + 2·BhT²) + BTd + 2·BTV] = 4·[2·(1,920 + 1,200
    # + 200) + 240 + 740] = 30,480; saved = 43,654 (the sum of the hooked storages).
    assert course == 30_480 and saved == 43_654


# ---- FLOPs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("B,T", WORKLOADS)
def test_training_flops_equal_flop_counter(B, T):
    model = build()
    ids, targets = batch(B, T)
    with FlopCounterMode(display=False) as fwd:
        loss = loss_of(model, ids, targets)  # cross-entropy: no matmul, no FLOPs counted
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    s = step_flops(SMALL, T, B)
    assert fwd.get_total_flops() == s.forward
    assert bwd.get_total_flops() == s.backward == 2 * s.forward


class OpLog(TorchDispatchMode):
    """Every aten op with the elements it works on (lists summed for _foreach_ ops)."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = args[0] if args else None
        if isinstance(first, (list, tuple)):
            for t in first:
                self.ops[(func.__name__, t.numel())] += 1
        elif isinstance(first, torch.Tensor):
            self.ops[(func.__name__, first.numel())] += 1
        return out


# aten ops that do no arithmetic (state creation, reading a scalar, wrapping constants)
NO_ARITHMETIC = {"zeros_like", "lift_fresh", "_local_scalar_dense", "detach", "alias", "copy_",
                 "_to_copy", "empty_like", "clone"}


def base(op_name: str) -> str:
    """'_foreach_mul_.Scalar' or 'mul_.Tensor' -> 'mul'; 'div.Tensor' -> 'div'."""
    name = op_name.split(".")[0].removeprefix("_foreach_")
    return name.rstrip("_")


@pytest.mark.parametrize("foreach", [False, True])
def test_adamw_update_ops_match_records(foreach):
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=foreach)
    for _ in range(2):  # log the second step (the first also creates the state)
        opt.zero_grad()
        loss_of(model, *batch(2, 5)).backward()
        with OpLog() as log:
            opt.step()
    seen = Counter()
    for (op, numel), k in log.ops.items():
        name = op.split(".")[0].removeprefix("_foreach_")
        if name.rstrip("_") in NO_ARITHMETIC or name in NO_ARITHMETIC:
            continue
        seen[(base(op), numel)] += k
    sizes = [p.numel() for p in model.parameters()]
    expected = Counter()
    for o in ADAMW_OPS:
        for n in sizes:
            expected[(o.op.rstrip("_"), n if o.per == "parameter" else 1)] += 1
    assert seen == expected
    # FLOPs by the records' convention: 14 per parameter + 1 per tensor (step += 1)
    per_op = {o.op.rstrip("_"): o.flops_per_element for o in ADAMW_OPS}
    flops = sum(per_op[op] * n * k for (op, n), k in seen.items())
    assert flops == 14 * sum(sizes) + len(sizes) == step_flops(SMALL, 5, 2).adamw
