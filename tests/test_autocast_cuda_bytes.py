"""The bytes a training step saves under torch.autocast("cuda", dtype=torch.bfloat16), derived
by hand for the course's block and checked against what planning reports for
`--precision bf16-mixed` (issue 23: until now only a README snapshot held this number).

No GPU is needed, and none is assumed:
  * the derivation below walks model/'s forward op by op and writes down what autograd
    saves (derivatives.yaml: mul saves the other factor, div both operands, exp and
    sigmoid and sqrt their result, amax its input and result, where its condition, bmm both
    operands, index its indices, log_softmax its result, nll_loss its input, target and
    total weight) and in which dtype autocast leaves it, by PyTorch's documented policies
    (https://pytorch.org/docs/stable/amp.html, "Autocast Op Reference"): matmuls
    (bmm) run in bf16 on bf16 copies of their inputs, on CUDA exp, pow, sum and the loss
    (log_softmax, nll_loss) run in float32; on the CPU only the loss does;
  * the same derivation with the CPU policies is compared with a real
    torch.autocast("cpu") step on small CPU tensors (every storage autograd saves), which
    checks the op-by-op walk itself; CUDA differs from it only where the policies differ;
  * the CUDA policies the derivation uses are checked against PyTorch's own AutocastCUDA
    kernels on fake CUDA tensors (torch._subclasses.FakeTensorMode: the dispatcher's
    autocast layer runs, no kernel does), in a child process.
"""
import subprocess
import sys
from dataclasses import dataclass

import pytest

from accounting.planning import PRECISIONS, MemoryModel
from accounting.planning.memory import values
from accounting.architecture.config import ModelConfig


@dataclass(frozen=True)
class Tiny:
    V: int
    L: int
    d: int
    h: int
    kv: int
    f: int
    ctx: int = 16

    @property
    def dk(self) -> int:
        return self.d // self.h

    def config(self) -> ModelConfig:
        # the course's architecture: pre-norm RMSNorm, RoPE, SwiGLU, untied head, no biases,
        # the naive attention core (explicit scores, mask and softmax)
        return ModelConfig(vocab_size=self.V, context_length=self.ctx, num_layers=self.L,
                           d_model=self.d, num_heads=self.h, num_kv_heads=self.kv, d_ff=self.f,
                           name="tiny")


SHAPES = [Tiny(V=37, L=2, d=24, h=3, kv=3, f=40), Tiny(V=37, L=2, d=32, h=4, kv=2, f=48)]
WORKLOADS = [(5, 2), (8, 3)]  # (T, B)
CASES = [(s, T, B) for s in SHAPES for T, B in WORKLOADS]
IDS = [f"h{s.h}kv{s.kv}-T{T}-B{B}" for s, T, B in CASES]


def saved_bytes_by_hand(s: Tiny, T: int, B: int, device: str) -> tuple[int, int]:
    """(activation bytes, bf16 weight-copy bytes) autograd saves in one forward pass under
    bf16 autocast on `device`; n = B·T tokens, fp32 4 bytes, bf16 2, bool 1, int64 8."""
    n, d, h, kv, dk, f, V = B * T, s.d, s.h, s.kv, s.dk, s.f, s.V
    q_w, kv_w = h * dk, kv * dk
    wide = {"cuda": 4, "cpu": 2}[device]  # exp and sum: fp32 on CUDA, bf16 on the CPU
    # RMSNorm (model/layers.py, in float32 on the fp32 residual stream): pow saves x,
    # sqrt its result rms, div x and rms, the gain's mul x/rms.
    norm = 4 * n * d + 4 * n + 4 * n * d
    attention = (
        # q, k, v projections: each einsum's bmm saves a bf16 copy of the fp32 norm output
        3 * 2 * n * d
        # RoPE: cos and sin indexed and cast to bf16 (1, T, d_k/2) per rotation (q, then k);
        # the muls save them (the rotated tensor needs no gradient from them)
        + 2 * 2 * 2 * T * (dk // 2)
        # QKᵀ: bmm saves the rotated q and k (bf16)
        + 2 * B * h * T * dk + 2 * B * kv * T * dk
        # where(mask, scores, -inf) saves the (T, T) bool mask
        + T * T
        # softmax by hand: amax saves its input (bf16 scores) and result (bf16 row max)
        + 2 * B * h * T * T + 2 * B * h * T
        # exp saves its result, sum's result is saved by the div (both fp32 on CUDA)
        + wide * B * h * T * T + wide * B * h * T
        # scores·V: bmm saves bf16 weights (a copy of fp32 ones on CUDA, the bf16 div
        # output on the CPU: the same bytes) and V (bf16, K/V heads only: broadcast)
        + 2 * B * h * T * T + 2 * B * kv * T * dk
        # output projection: its bmm saves the (B, T, h·d_k) bf16 heads, rearranged
        + 2 * n * q_w)
    # SwiGLU: W1 and W3 each save a bf16 copy of the norm output; sigmoid saves its result,
    # SiLU's mul both factors (W1 x and the sigmoid), the gate's mul both (SiLU and W3 x),
    # W2's bmm its bf16 input: five (B, T, d_ff) bf16 tensors
    ffn = 2 * 2 * n * d + 5 * 2 * n * f
    block = norm + attention + norm + ffn
    # outside: the embedding's index saves the int64 ids; the final norm; the LM head's bmm
    # a bf16 copy of its input; cross_entropy (fp32 under either autocast) casts the bf16
    # logits to fp32, log_softmax saves its result (and nll_loss the same), nll_loss the
    # int64 targets and its 0-dim fp32 total weight
    outside = 8 * n + norm + 2 * n * d + 4 * n * V + 8 * n + 4
    # each matmul casts its weight (the einsum's view is not a leaf: no autocast cache)
    copies = 2 * s.L * (d * q_w + 2 * d * kv_w + q_w * d + 3 * d * f) + 2 * d * V
    return s.L * block + outside, copies


@pytest.mark.parametrize("s,T,B", CASES, ids=IDS)
def test_the_plan_saves_what_cuda_autocast_saves(s, T, B):
    m = MemoryModel(s.config(), PRECISIONS["bf16-mixed"])
    assert m.precision.autocast == "cuda"
    v = values(s.config(), T, B)
    terms = {t.name: t.bytes.evaluate(v) for t in m.terms}
    activations = sum(b for k, b in terms.items() if k.startswith("activations"))
    assert (activations, terms["bf16 copies of the matmul weights"]) == \
        saved_bytes_by_hand(s, T, B, "cuda")


def test_cuda_and_cpu_differ_by_the_softmax_exp_and_sum_only():
    # per block: e (B·h·T²) and its row sums (B·h·T) in 4 bytes instead of 2
    s, T, B = SHAPES[0], 8, 3
    cuda, cpu = saved_bytes_by_hand(s, T, B, "cuda"), saved_bytes_by_hand(s, T, B, "cpu")
    assert cuda[0] - cpu[0] == s.L * 2 * (B * s.h * T * T + B * s.h * T) and cuda[1] == cpu[1]


@pytest.mark.parametrize("s,T,B", CASES, ids=IDS)
def test_the_walk_is_what_a_real_cpu_autocast_step_saves(s, T, B):
    """The derivation with the CPU's policies against torch.autocast("cpu") on real
    tensors: every storage autograd saves, counted once, parameters left out."""
    torch = pytest.importorskip("torch")
    from model import TransformerLM
    torch.manual_seed(0)
    model = TransformerLM.from_config(s.config())
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, s.V, (B, T), generator=g)
    targets = torch.randint(0, s.V, (B, T), generator=g)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            saved[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids)
            torch.nn.functional.cross_entropy(logits.reshape(-1, s.V), targets.reshape(-1))
    assert sum(saved.values()) == sum(saved_bytes_by_hand(s, T, B, "cpu"))


_POLICIES = r"""
import sys, warnings
import torch
try:
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    with mode:
        torch.empty(1, device="cuda")
except Exception as e:
    print("UNSUPPORTED", type(e).__name__, e)
    sys.exit(0)
f32, bf16 = torch.float32, torch.bfloat16
out = {}
with mode:
    x32 = torch.empty(2, 3, 4, device="cuda")
    x16 = x32.to(bf16)
    w32 = torch.empty(5, 4, device="cuda")
    mask = torch.empty(3, 3, dtype=torch.bool, device="cuda")
    s16 = torch.empty(3, 3, dtype=bf16, device="cuda")  # (no indexing: it needs a CUDA guard)
    torch.set_autocast_dtype("cuda", bf16)
    torch.set_autocast_enabled("cuda", True)
    try:
        out["einsum fp32·fp32"] = torch.einsum("bsi,oi->bso", x32, w32).dtype
        out["bmm fp32·fp32"] = torch.bmm(x32, x32.transpose(1, 2)).dtype
        out["conv1d fp32·fp32"] = torch.nn.functional.conv1d(
            x32, torch.empty(3, 1, 2, device="cuda"), groups=3).dtype
        out["exp bf16"] = torch.exp(x16).dtype
        out["sum bf16"] = x16.sum(-1, keepdim=True).dtype
        out["pow bf16"] = x16.pow(2).dtype
        out["rsqrt bf16"] = torch.rsqrt(x16).dtype
        out["sdpa fp32"] = torch.nn.functional.scaled_dot_product_attention(
            x32, x32, x32, is_causal=True).dtype
        out["log_softmax bf16"] = torch.log_softmax(x16, -1).dtype
        out["amax bf16"] = x16.amax(-1, keepdim=True).dtype
        out["sub bf16"] = (x16 - x16).dtype
        out["div bf16"] = (x16 / x16).dtype
        out["div fp32"] = (x32 / x32).dtype
        out["mul bf16"] = (x16 * x16).dtype
        out["sigmoid bf16"] = torch.sigmoid(x16).dtype
        out["sqrt fp32"] = torch.sqrt(x32).dtype
        out["where bf16"] = torch.where(mask, s16, float("-inf")).dtype
    finally:
        torch.set_autocast_enabled("cuda", False)
for k, v in out.items():
    print(k, "=", str(v).replace("torch.", ""))
"""


def test_the_cuda_policies_are_pytorchs_own():
    """Each policy the derivation uses, as torch's AutocastCUDA kernels apply it."""
    pytest.importorskip("torch")
    run = subprocess.run([sys.executable, "-c", _POLICIES], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    if run.stdout.startswith("UNSUPPORTED"):
        pytest.skip(f"fake CUDA tensors unavailable in this torch: {run.stdout.strip()}")
    got = dict(line.split(" = ") for line in run.stdout.splitlines())
    assert got == {
        # lower precision: the matmuls (einsum reaches bmm)
        "einsum fp32·fp32": "bfloat16", "bmm fp32·fp32": "bfloat16",
        # (a depthwise conv1d, as the Mamba-2 and DeltaNet layers' torch path runs it)
        "conv1d fp32·fp32": "bfloat16",
        # CUDA's float32 list
        "sdpa fp32": "bfloat16",
        "exp bf16": "float32", "sum bf16": "float32", "pow bf16": "float32",
        "rsqrt bf16": "float32", "log_softmax bf16": "float32",
        # no policy: the input's dtype
        "amax bf16": "bfloat16", "sub bf16": "bfloat16", "div bf16": "bfloat16",
        "div fp32": "float32", "mul bf16": "bfloat16", "sigmoid bf16": "bfloat16",
        "sqrt fp32": "float32", "where bf16": "bfloat16"}
    # and the ledger's CUDA table (accounting/ledger/autocast.py), entry by entry: each op
    # it lists has the policy PyTorch applies, and none is missing from the probes above
    from accounting.ledger.autocast import FP32, LOWER, POLICIES
    probe = {"bmm": "bmm fp32·fp32", "conv1d": "conv1d fp32·fp32", "sdpa": "sdpa fp32", "aten.exp": "exp bf16",
             "aten.sum": "sum bf16", "aten.pow": "pow bf16", "aten.rsqrt": "rsqrt bf16",
             "cross_entropy": "log_softmax bf16"}
    assert set(POLICIES["cuda"]) == set(probe)
    for op, policy in POLICIES["cuda"].items():
        assert got[probe[op]] == {LOWER: "bfloat16", FP32: "float32"}[policy], op
