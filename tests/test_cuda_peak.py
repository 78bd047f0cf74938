"""The step's peak on CUDA (accounting/planning/cuda_peak.py), checked without a GPU.

Independent sources:
  * the H200 measurements in ../shared/gpu/README.md (torch 2.11, CUDA 13; protocol in its
    step_peak.py and peak_moments.py): every case's allocator peak against the plan, within
    ±3% (the goal of issue 28, Must 5), and with device="cpu" the "plan" column of 798fcbb
    to the byte (the CPU-measured rules kept beside the CUDA ones);
  * hand algebra, rule by rule (each written out below);
  * the CPU running the same composite code CUDA runs (the math attention; the loss's ops
    in CUDA autocast's order), measured with saved-tensor hooks and tests/test_peak.py's
    live-storage tracker;
  * PyTorch's own autocast dispatcher on fake CUDA tensors (child process), and PyTorch's
    autocast lists in the installed headers (torch/include/ATen/autocast_mode.h).
"""
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import accounting
from accounting.planning import PRECISIONS, MemoryModel
from accounting.planning import cuda_peak as CP
from accounting.architecture.config import ModelConfig

GPU = Path(__file__).resolve().parents[2] / "shared" / "gpu"
if not GPU.is_dir():
    GPU = Path("/work/shared/gpu")
MIXTRAL = "configs/Mixtral-small.json"
WORKSPACES = 2 * 32 * 2**20  # two cuBLAS workspaces of 4096 KiB × 8 (sm90)
GB = 10**9

# ../shared/gpu/README.md, "Step peak (bytes)": (config, T, B, precision, recompute,
# 798fcbb's plan, the allocator's peak: torch.cuda.max_memory_allocated over step 2)
STEP_PEAK = [
    ("gpt2-small", 1024, 16, "bf16-mixed", "none", 24_089_211_400, 22_537_195_520),
    ("meta-llama/Llama-3.2-1B", 4096, 4, "bf16-mixed", "none", 82_634_170_376, 78_499_653_120),
    ("meta-llama/Llama-3.2-1B", 8192, 4, "bf16-mixed", "full", 71_291_002_888, 62_952_728_064),
    (MIXTRAL, 2048, 4, "fp32", "none", 9_621_958_664, 11_871_155_200),
    (MIXTRAL, 2048, 4, "bf16-mixed", "none", 8_673_259_528, 8_228_022_784),
]
# the same README, "The two moments on CUDA": (..., plan boundary, measured boundary,
# tracker peak, allocator peak)
MOMENTS = [
    ("meta-llama/Llama-3.2-1B", 4096, 2, "bf16-mixed", "none",
     50_244_542_472, 43_940_503_816, 48_143_196_428, 48_210_322_944),
    ("meta-llama/Llama-3.2-1B", 4096, 2, "bf16-mixed", "full",
     29_741_735_944, 23_437_697_032, 27_640_389_644, 27_708_548_608),
    ("gpt2-small", 1024, 8, "bf16-mixed", "none",
     13_342_355_976, 10_872_124_104, 12_518_945_484, 12_627_835_392),
    ("gpt2-small", 1024, 8, "fp32", "none",
     16_678_276_104, 16_376_286_408, 16_376_286_408, 16_444_195_840),
    (MIXTRAL, 2048, 4, "fp32", "none",
     9_621_958_664, 11_801_948_168, 11_801_948_168, 11_870_328_832),
    (MIXTRAL, 2048, 4, "bf16-mixed", "none",
     8_673_259_528, 7_100_395_560, 8_148_971_564, 8_220_750_336),
]
# the same README, "transformers' own model": LlamaForCausalLM, T 4,096, B 2, bf16 autocast,
# SDPA, peaked at 49.18 GB (two decimals)
TRANSFORMERS_PEAK_GB = 49.18


def config(name: str, T: int) -> ModelConfig:
    if name.endswith(".json"):
        path = GPU / name
        if not path.exists():
            pytest.skip(f"{path} absent")
        c = accounting.config_from_json(str(path))
    else:
        c = accounting.get_preset(name)
    c = replace(c, attention="sdpa")  # step_peak.py: replace(cfg, attention="sdpa")
    return c if c.context_length >= T else replace(c, context_length=T)


def label(name, T, B, precision, recompute):
    return f"{name.split('/')[-1]}-T{T}-B{B}-{precision}-{recompute}"


def test_the_typed_figures_are_the_readmes():
    readme = GPU / "README.md"
    if not readme.exists():
        pytest.skip("../shared/gpu/README.md absent: the figures above are typed from it")
    text = readme.read_text()
    numbers = {int(n.replace(",", "")) for n in re.findall(r"\d{1,3}(?:,\d{3}){2,}", text)}
    for row in STEP_PEAK + MOMENTS:
        assert set(row[5:]) <= numbers, row
    assert f"peaked at {TRANSFORMERS_PEAK_GB} GB" in text


@pytest.mark.parametrize("name,T,B,precision,recompute,plan_798fcbb,allocator", STEP_PEAK,
                         ids=[label(*r[:5]) for r in STEP_PEAK])
def test_the_plan_holds_on_the_gpu(name, T, B, precision, recompute, plan_798fcbb, allocator):
    c = config(name, T)
    cpu = MemoryModel(c, PRECISIONS[precision], "model", recompute, device="cpu")
    assert cpu.peak(B, T) == plan_798fcbb  # the CPU-measured rules are 798fcbb's plan
    plan = MemoryModel(c, PRECISIONS[precision], "model", recompute).peak(B, T)
    assert abs(allocator / plan - 1) <= 0.03, allocator / plan
    print(f"{label(name, T, B, precision, recompute)}: measured/plan "
          f"{allocator / plan_798fcbb:.4f} -> {allocator / plan:.4f}")


@pytest.mark.parametrize("name,T,B,precision,recompute,boundary_798fcbb,boundary,tracker,"
                         "allocator", MOMENTS, ids=[label(*r[:5]) for r in MOMENTS])
def test_each_moment_on_the_gpu(name, T, B, precision, recompute, boundary_798fcbb, boundary,
                                tracker, allocator):
    c = config(name, T)
    cpu = MemoryModel(c, PRECISIONS[precision], "model", recompute, device="cpu")
    cuda = MemoryModel(c, PRECISIONS[precision], "model", recompute)
    v = cuda.ledger.values(T, B)
    assert cpu.peak_terms[0].bytes.evaluate(v) == boundary_798fcbb
    plan = cuda.peak(B, T)
    assert abs(allocator / plan - 1) <= 0.03, allocator / plan
    # the tracker counts live storages, host ones too, and no cuBLAS workspace: it is the
    # plan less the workspaces plus the flash/efficient kernels' host philox seed and
    # offset (16 bytes a layer, none under full recomputation: nothing of SDPA is kept)
    # and, under autocast, the 4-byte gradient of the loss autograd's engine makes
    host = 0 if recompute == "full" or (precision == "fp32" and name == MIXTRAL) else \
        CP.PHILOX_HOST_BYTES * v["L"]
    seed = 4 if precision == "bf16-mixed" else 0
    assert tracker == plan - WORKSPACES + host + seed


def test_transformers_own_model_on_the_gpu():
    c = config("meta-llama/Llama-3.2-1B", 4096)
    m = MemoryModel(c, PRECISIONS["bf16-mixed"], "model", "none", "transformers")
    assert round(m.peak(2, 4096) / GB, 2) == TRANSFORMERS_PEAK_GB


# ---- the rules, one by one, by hand -------------------------------------------------------
SMALL = dict(vocab_size=300, context_length=64, num_layers=3, d_model=32, d_ff=48,
             num_heads=4)


def moments(c, precision, recompute="none", implementation="course", B=2, T=32):
    """(boundary, optimizer) on CUDA minus on the CPU, at (B, T)."""
    out = []
    for device in ("cuda", "cpu"):
        m = MemoryModel(c, PRECISIONS[precision], "model", recompute, implementation,
                        device=device)
        v = m.ledger.values(T, B)
        out.append([ph.bytes.evaluate(v) for ph in m.peak_terms])
    return out[0][0] - out[1][0], out[0][1] - out[1][1]


def test_the_loss_under_cuda_autocast_by_hand():
    # bf16 logits: log_softmax keeps its bf16 result (2 bytes), nll_loss its float32 copy
    # (4), and nll_loss_backward's gradient (4) is the peak: 10 bytes per logit against the
    # CPU's 12 (a float32 result, two float32 gradients). The naive attention core has
    # no SDPA rule, so that is the whole difference, and the workspaces.
    B, T, V = 2, 32, SMALL["vocab_size"]
    c = ModelConfig(**SMALL, attention="naive")
    assert moments(c, "bf16-mixed", B=B, T=T) == ((2 + 4 + 4 - 12) * B * T * V + WORKSPACES,
                                                  WORKSPACES)
    # float32 logits (no autocast): the CPU's ops
    assert moments(c, "fp32", B=B, T=T) == (WORKSPACES, WORKSPACES)


def test_the_memory_efficient_kernel_merges_the_heads_in_place_by_hand():
    # fp32 SDPA without grouped K/V: the memory-efficient kernel (flash takes bf16/fp16
    # only); its output is laid out (B, T, h, d_k), so (B, T, h·d_k) is a view and the
    # output projection saves no copy: 4·B·T·d_model bytes less in every block
    B, T, L, d = 2, 32, SMALL["num_layers"], SMALL["d_model"]
    c = ModelConfig(**SMALL, attention="sdpa")
    assert moments(c, "fp32", B=B, T=T) == (-4 * B * T * d * L + WORKSPACES, WORKSPACES)
    # bf16: flash, whose output takes q's (B, h, T, d_k) layout: the merge copies, as on
    # the CPU; only the loss differs
    V = SMALL["vocab_size"]
    assert moments(c, "bf16-mixed", B=B, T=T) == (-2 * B * T * V + WORKSPACES, WORKSPACES)
    # recomputed: nothing of the kernel is kept, so nothing differs
    for recompute in ("full", "selective"):
        assert moments(c, "fp32", recompute, B=B, T=T) == (WORKSPACES, WORKSPACES)


def test_math_attention_for_grouped_kv_in_fp32_by_hand():
    # fp32 with grouped K/V: neither flash (fp32) nor memory-efficient (grouped K/V, torch
    # <= 2.11): the math composite. It saves q·s and kᵀ·s (h heads each), V repeated to h
    # heads and the softmax's B·h·T², float32; it does not save the kernel's q, k, v
    # (h_kv heads for k and v), output and log-sum-exp (B·h·T)
    B, T, L, h, kv = 2, 32, SMALL["num_layers"], SMALL["num_heads"], 2
    dk = SMALL["d_model"] // h
    c = ModelConfig(**SMALL, num_kv_heads=kv, attention="sdpa")
    math = 3 * B * h * T * dk + B * h * T * T
    fused = B * h * T * dk + 2 * B * kv * T * dk + B * h * T * dk + B * h * T
    assert moments(c, "fp32", B=B, T=T) == (4 * (math - fused) * L + WORKSPACES, WORKSPACES)


def test_transformers_loss_by_hand():
    # transformers' loss upcasts the logits (no CUDA autocast difference) and its model's
    # output keeps the bf16 logits: 2·B·T·V more
    B, T, V = 2, 32, SMALL["vocab_size"]
    c = ModelConfig(**SMALL, num_kv_heads=2, attention="sdpa", name="llama-like",
                    norm="rmsnorm")
    d_boundary, d_update = moments(c, "bf16-mixed", implementation="transformers", B=B, T=T)
    assert (d_boundary, d_update) == (2 * B * T * V + WORKSPACES, WORKSPACES)


def test_torchtune_standard_loss_is_float32_and_frees_its_logits():
    # torchtune's decoder returns self.output(h).float() (modules/transformer.py, 0.6.1 and
    # pytorch/torchtune@1814feb) and full_finetune_single_device's _loss_step runs
    # nn.CrossEntropyLoss on them, then `del logits` before the backward pass. That pattern,
    # measured on the CPU with bf16 weights (tests/test_peak.py's live-storage tracker):
    # at log_softmax's backward the float32 log-softmax and its two float32 gradients are
    # live, 12·B·T·V bytes, no logits (0-dim scalars aside). The plan held transformers'
    # rule (the bf16 logits kept: 2·B·T·V over the ledger's bf16 log-softmax and two bf16
    # gradients, 6·B·T·V); torchtune's makes it 12: 3·(4 − 2)·B·T·V more than the CPU ledger
    import torch
    import torch.nn.functional as F
    from test_peak import LiveBytes
    B, T, V, D = 2, 32, SMALL["vocab_size"], SMALL["d_model"]
    g = torch.Generator().manual_seed(0)
    h = torch.randn(B, T, D, generator=g).to(torch.bfloat16).requires_grad_()
    w = torch.randn(V, D, generator=g).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, V, (B * T,), generator=g)
    tracker = LiveBytes([h, w, labels])
    base = tracker.total
    with tracker:
        logits = F.linear(h, w).float()
        loss = torch.nn.CrossEntropyLoss()(logits.reshape(-1, V), labels)
        del logits
        loss.backward()
    live = tracker.marks["aten._log_softmax_backward_data.default"] - base
    assert 12 * B * T * V <= live <= 12 * B * T * V + 64
    c = ModelConfig(**SMALL, num_kv_heads=2, attention="sdpa", name="llama-like",
                    norm="rmsnorm")
    d_boundary, d_update = moments(c, "bf16", implementation="torchtune", B=B, T=T)
    assert (d_boundary, d_update) == ((12 - 3 * 2) * B * T * V + WORKSPACES, WORKSPACES)
    # under autocast the CPU ledger's log-softmax is float32 already: no change
    assert moments(c, "bf16-mixed", implementation="torchtune", B=B, T=T) == \
        (WORKSPACES, WORKSPACES)


@pytest.mark.parametrize("dtype,d,grouped,masked,backend", [
    ("bf16", 64, False, False, CP.FLASH),
    ("bf16", 128, True, False, CP.FLASH),       # flash takes grouped K/V natively
    ("bf16", 256, True, False, CP.FLASH),
    ("bf16", 320, False, False, CP.EFFICIENT),  # flash: head dim <= 256
    ("bf16", 64, False, True, CP.EFFICIENT),    # flash: no mask
    ("bf16", 64, True, True, CP.MATH),          # a mask and grouped K/V
    ("fp32", 64, False, False, CP.EFFICIENT),   # flash: fp16/bf16 only
    ("fp32", 64, True, False, CP.MATH),
    ("fp32", 66, False, False, CP.MATH),        # memory-efficient: d a multiple of 4 in fp32
    ("bf16", 324, False, False, CP.MATH),       # ... and of 8 in bf16
])
def test_the_backend_each_dtype_selects(dtype, d, grouped, masked, backend):
    # sdp_utils.cpp select_sdp_backend's default order and each backend's checks
    assert CP.select_backend(dtype, d, d, grouped, masked) == backend


def test_the_rules_registry_refuses_a_duplicate():
    with pytest.raises(ValueError):
        CP._rule(CP.LOSS, "", "")
    with pytest.raises(accounting.runtime.errors.UsageError):
        MemoryModel(ModelConfig(**SMALL), PRECISIONS["fp32"], device="tpu")


# ---- the same composite code, run on the CPU -------------------------------------------
def test_the_math_composite_saves_what_the_rule_says():
    """aten._scaled_dot_product_attention_math is CompositeImplicit: the CPU runs CUDA's
    code. Every storage it saves, against the rule's bytes for one block."""
    torch = pytest.importorskip("torch")
    B, h, kv, T, dk = 2, 4, 2, 8, 16
    for dtype in (torch.float32, torch.bfloat16):
        q = torch.randn(B, h, T, dk, dtype=dtype, requires_grad=True) * 1
        k = torch.randn(B, kv, T, dk, dtype=dtype, requires_grad=True) * 1
        v = torch.randn(B, kv, T, dk, dtype=dtype, requires_grad=True) * 1
        saved = {}

        def pack(t):
            s = t.untyped_storage()
            saved[s.data_ptr()] = s.nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, None, 0.0, True, None, scale=None, enable_gqa=True)[0]
        # q·s, kᵀ·s, V repeated to h heads (B·h·T·d_k each) and the softmax (B·h·T²),
        # float32 whatever the inputs (half inputs are upcast)
        assert sum(saved.values()) == 4 * (3 * B * h * T * dk + B * h * T * T), dtype
        assert out.dtype == dtype and out.is_contiguous()  # (B, h, T, d): the merge copies


def test_the_loss_in_cuda_autocasts_order_on_the_cpu():
    """The ops CUDA autocast runs for F.cross_entropy on bf16 logits (log_softmax with the
    logits' dtype, then nll_loss on a float32 copy), replayed on the CPU under the live-
    storage tracker: the forward keeps 6·B·T·V bytes, the peak is nll_loss_backward's
    gradient on top (10·B·T·V), and at log_softmax's backward 6·B·T·V are live — the
    README's measured boundary, the CPU plan's 12·B·T·V less 6·B·T·V."""
    torch = pytest.importorskip("torch")
    from test_peak import MARKS, LiveBytes
    N, V = 64, 1000
    head = torch.randn(N, 8, requires_grad=True)
    w = torch.randn(8, V, dtype=torch.bfloat16)
    targets = torch.randint(0, V, (N,))
    tracker = LiveBytes([head, w, targets])
    with tracker:
        tracker.phase = "forward"
        logits = head.to(torch.bfloat16) @ w  # (N, V) bf16, as the LM head under autocast
        lp = torch.log_softmax(logits, 1, dtype=torch.bfloat16)  # LossNLL.cpp's call
        loss = torch.nn.functional.nll_loss(lp.float(), targets)  # the fp32 policy's cast
        del logits, lp
        kept = tracker.total
        tracker.phase = "backward"
        loss.backward()
    base = sum(t.untyped_storage().nbytes() for t in (head, w, targets))
    small = 4 + 4  # the loss and nll_loss's total weight (0-dim, float32)
    assert kept - base - small == (2 + 4) * N * V
    assert tracker.peak - base - small == (2 + 4 + 4) * N * V + 4  # + the loss's gradient
    # at log_softmax's backward: its bf16 result and gradient, the cast's bf16 gradient;
    # nll_loss's copy and float32 gradient, and the loss's gradient, released
    assert tracker.marks[MARKS[0]] - base - small == (2 + 2 + 2) * N * V


_DISPATCH = r"""
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
try:
    mode = FakeTensorMode()
    with mode:
        torch.empty(1, device="cuda")
except Exception as e:
    print("UNSUPPORTED", type(e).__name__); raise SystemExit(0)

class Ops(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not str(func).startswith("prim."):
            ins = [str(a.dtype) for a in args if isinstance(a, torch.Tensor)]
            first = out[0] if isinstance(out, tuple) else out
            print(str(func), ",".join(ins), "->", first.dtype)
        return out

with mode:
    logits = torch.empty(6, 11, device="cuda", dtype=torch.bfloat16)
    targets = torch.zeros(6, dtype=torch.long, device="cuda")
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    torch.set_autocast_enabled("cuda", True)
    try:
        with Ops():
            torch.nn.functional.cross_entropy(logits, targets)
    finally:
        torch.set_autocast_enabled("cuda", False)
"""


def test_cuda_autocasts_dispatcher_runs_the_loss_so():
    """PyTorch's AutocastCUDA kernels on fake CUDA tensors (no kernel runs): log_softmax in
    bf16, then a float32 copy for nll_loss."""
    pytest.importorskip("torch")
    run = subprocess.run([sys.executable, "-c", _DISPATCH], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    if run.stdout.startswith("UNSUPPORTED"):
        pytest.skip(run.stdout.strip())
    assert run.stdout.splitlines() == [
        "aten._log_softmax.default torch.bfloat16 -> torch.bfloat16",
        "aten._to_copy.default torch.bfloat16 -> torch.float32",
        "aten.nll_loss_forward.default torch.float32,torch.int64 -> torch.float32"]


def test_cudas_autocast_lists_in_the_installed_headers():
    """autocast_mode.h, as installed with torch: cross_entropy_loss is not on CUDA's float32
    list (the CPU's has it, autocast_mode.cpp), nll_loss is, and log_softmax is on the
    set-the-dtype list (an explicit dtype is left alone)."""
    torch = pytest.importorskip("torch")
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        pytest.skip("torch's headers are not installed")
    text = header.read_text()

    def block(macro):
        body = text.split(f"#define {macro}(_)", 1)[1]
        return re.findall(r"_\(([^)]*)\)", body.split("\n\n", 1)[0])
    fp32 = block("AT_FORALL_FP32")
    assert "nll_loss" in fp32 and "cross_entropy_loss" not in fp32
    assert "log_softmax, int" in block("AT_FORALL_FP32_SET_OPT_DTYPE")


def test_the_rules_reach_json_and_csv():
    from accounting.planning import plan
    from accounting.planning.export import rows, to_dict
    B, T, V = 2, 32, SMALL["vocab_size"]
    p = plan(ModelConfig(**SMALL, attention="naive"), T, B, precision="bf16-mixed")
    peak = to_dict(p)["peak"]
    assert peak["device"] == "cuda"
    got = {r["rule"]: r["bytes"] for r in peak["cuda_rules"]}
    assert got == {CP.LOSS: -2 * B * T * V, CP.CUBLAS_WORKSPACE: WORKSPACES}  # by hand above
    csv = {r["item"]: r["value"] for r in rows(p) if r["section"] == "peak"}
    assert csv[f"CUDA rule: {CP.LOSS}"] == -2 * B * T * V
    assert max(v for k, v in csv.items() if not k.startswith("CUDA")) == peak["peak_bytes"]
