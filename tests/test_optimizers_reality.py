"""Optimizer state and precision recipes against a real step on the CPU.

Each optimizer of accounting/planning/optimizers.py runs one real step (torch.optim.AdamW
foreach and fused, SGD with momentum, Adafactor, Muon with AdamW beside it,
bitsandbytes' AdamW8bit, torchao's AdamW8bit) on model.TransformerLM; the bytes of the
tensors in optimizer.state (storages counted once; torchao's OptimState8bit as its codes,
scale and qmap) are compared with the planner's, parameter tensor by parameter tensor, and
in total with the memory items. Each precision recipe runs a real step too and the
parameter, gradient, master-copy and state bytes torch holds are compared with its items.
"""
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from accounting.ledger.ledger import ledger
from accounting.planning import training_state as TS
from accounting.planning.memory import MemoryModel, get_precision
from accounting.planning.optimizers import OPTIMIZERS, get_optimizer
from accounting.architecture.config import ModelConfig
from model import TransformerLM

# Sizes chosen so that some tensors are under bitsandbytes' min_8bit_size (4,096: the norms,
# K and V at 32×64 = 2,048), some over it and a multiple of 256 (W1: 96×64 = 6,144), and
# some over it but not a multiple of 256 (the embedding and head: 101×64 = 6,464, which
# torchao keeps in full precision and bitsandbytes quantizes in ⌈6,464/256⌉ = 26 blocks).
SMALL = ModelConfig(vocab_size=101, context_length=8, num_layers=2, d_model=64, num_heads=4,
                    num_kv_heads=2, d_ff=96)
TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


def named_params():
    """(state-dict name, ledger record, real shape) of every parameter tensor, block by block."""
    lg = ledger(SMALL)
    v = lg.values(SMALL.context_length, 1)
    out = []
    for p in lg.params:
        layers = dict(lg.groups)[p.repeat] if p.repeat else (None,)
        out += [(p.key(i), p, p.sizes(v)) for i in layers]
    return out


def build(dtype="fp32"):
    torch.manual_seed(0)
    return TransformerLM(**SMALL.model_kwargs()).to(TORCH_DTYPE[dtype])


def step(model, optimizers, autocast=False):
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, SMALL.vocab_size, (2, 5), generator=g) for _ in range(2))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(ids)
    F.cross_entropy(logits.reshape(-1, SMALL.vocab_size).float(), targets.reshape(-1)).backward()
    for o in optimizers:
        o.step()


def make(name, model):
    """The real optimizer(s) of a registry entry, over the model's parameters."""
    params = list(model.parameters())
    if name == "adamw":
        return [torch.optim.AdamW(params, foreach=True)]
    if name == "adamw-fused":
        return [torch.optim.AdamW(params, fused=True)]
    if name == "sgd":
        return [torch.optim.SGD(params, lr=0.1, momentum=0.9)]
    if name == "adafactor":
        return [torch.optim.Adafactor(params)]
    if name == "adamw8bit":
        bnb = pytest.importorskip("bitsandbytes")
        return [bnb.optim.AdamW8bit(params)]
    if name == "paged-adamw8bit":  # on the CPU its buffers are not paged (the same bytes)
        bnb = pytest.importorskip("bitsandbytes")
        return [bnb.optim.PagedAdamW8bit(params)]
    if name == "adamw8bit-torchao":
        ao = pytest.importorskip("torchao.optim")
        return [ao.AdamW8bit(params)]
    if name == "muon":  # Muon on the hidden 2-D matrices, AdamW on the rest (the recipe)
        names = [n for n, _ in model.named_parameters()]
        hidden = {n for n, p, sizes in named_params() if TS.role(p, sizes) == "hidden matrix"}
        named = dict(model.named_parameters())
        return [torch.optim.Muon([named[n] for n in names if n in hidden]),
                torch.optim.AdamW([named[n] for n in names if n not in hidden])]
    raise AssertionError(name)


def tensors_of(value):
    """The plain tensors a state entry holds (torchao's 8-bit state: codes, scale, qmap)."""
    if not torch.is_tensor(value):
        return []
    inner = [getattr(value, a) for a in ("codes", "scale", "qmap") if hasattr(value, a)]
    return inner or [value]


def real_state(optimizers, model):
    """{parameter name: bytes of its own state}, shared bytes, step tensors (count, bytes)."""
    names = {p: n for n, p in model.named_parameters()}
    per, seen, counts = defaultdict(int), defaultdict(int), defaultdict(int)
    step_tensors = []
    for o in optimizers:
        for p, state in o.state.items():
            for key, value in state.items():
                if key == "step":
                    if torch.is_tensor(value):
                        step_tensors.append(value)
                    continue
                for t in tensors_of(value):
                    s = t.untyped_storage()
                    counts[s.data_ptr()] += 1
                    if s.data_ptr() not in seen:
                        seen[s.data_ptr()] = s.nbytes()
                        per[names[p]] += s.nbytes()
    return per, seen, counts, step_tensors


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
# torchao's first step compiles its kernels (10 s on one core): marked slow, not skipped
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if "torchao" in n
                                  else n for n in sorted(OPTIMIZERS)])
def test_state_per_tensor_equals_the_real_optimizer(name, dtype):
    model = build(dtype)
    opts = make(name, model)
    step(model, opts)
    per, seen, counts, steps = real_state(opts, model)
    opt = get_optimizer(name)
    v = ledger(SMALL).values(SMALL.context_length, 1)
    planned = {n: sum(s.bytes for s in opt.state(sizes, dtype, TS.role(p, sizes)))
               for n, p, sizes in named_params()}
    assert set(planned) == {n for n, _ in model.named_parameters()}
    shared = {k: b for k, b in seen.items() if counts[k] > 1}  # bitsandbytes' code books
    total_real = sum(seen.values())
    total_planned = sum(planned.values()) + sum(s.bytes for s in opt.shared())
    assert total_real == total_planned
    if not shared:  # tensor by tensor (a shared storage is booked to its first holder)
        assert dict(per) == {n: b for n, b in planned.items() if b}
    # the step counters: one 0-dim float32 tensor per tensor the optimizer counts (a Python
    # int for bitsandbytes, none for SGD and for Muon's matrices)
    ts = TS.tensors(SMALL)
    assert len(steps) == TS.step_counters(opt, ts)
    assert all(s.dim() == 0 and s.dtype == torch.float32 for s in steps)
    # the memory items: their sum is the real state, and the contract's names
    mm = MemoryModel(SMALL, get_precision("fp32" if dtype == "fp32" else "bf16"), optimizer=name)
    items = [t for t in mm.state_terms if "moment" in t.name or "optimizer state" in t.name]
    assert sum(t.bytes.evaluate(v) for t in items) == total_real
    counters = [t for t in mm.state_terms if "step counters" in t.name]
    assert sum(t.bytes.evaluate(v) for t in counters) == 4 * len(steps)


# ---- precision recipes --------------------------------------------------------------------

def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


def items(mm, prefix):
    v = ledger(SMALL).values(SMALL.context_length, 1)
    return sum(t.bytes.evaluate(v) for t in mm.state_terms if t.name.startswith(prefix))


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed", "bf16", "bf16-master"])
def test_precision_recipe_equals_a_real_step(precision):
    """fp32 and bf16-mixed: fp32 parameters and AdamW (autocast for the second); bf16:
    model.to(torch.bfloat16), AdamW over it; bf16-master: bf16 parameters, an fp32 copy of
    each that AdamW updates (Megatron-LM's Float16OptimizerWithFloat16Params: the bf16
    gradients are copied into the fp32 copy's .grad, the step runs there, the result is
    copied back)."""
    p = get_precision(precision)
    model = build(p.param_dtype)
    params = list(model.parameters())
    master = [q.detach().float().clone().requires_grad_() for q in params] if p.master else None
    opt = torch.optim.AdamW(master or params, foreach=True)
    step(model, [], autocast=p.autocast is not None)
    if master:
        for m, q in zip(master, params):
            m.grad = q.grad.float()
    opt.step()
    if master:
        with torch.no_grad():
            for m, q in zip(master, params):
                q.copy_(m)
    mm = MemoryModel(SMALL, p)
    assert {q.dtype for q in params} == {TORCH_DTYPE[p.param_dtype]}
    assert items(mm, "parameters") == nbytes(params)
    assert items(mm, "gradients") == nbytes(q.grad for q in params)
    assert {q.grad.dtype for q in params} == {TORCH_DTYPE[p.grad_dtype]}
    assert items(mm, "fp32 master copy") == (nbytes(master) if master else 0)
    state = list(opt.state.values())
    assert {s["exp_avg"].dtype for s in state} == {TORCH_DTYPE[p.state_dtype]}
    assert items(mm, "AdamW first moment") == nbytes(s["exp_avg"] for s in state)
    assert items(mm, "AdamW second moment") == nbytes(s["exp_avg_sq"] for s in state)


def test_bf16_parameters_saved_tensors_equal_the_ledger():
    """model/ in bf16 (no autocast): the saved tensors, by size and dtype, are the ledger's
    with param_dtype bf16 (the norms' fp32 copies, the bf16 residual stream, bf16 logits
    and log-probabilities)."""
    from collections import Counter
    from test_architectures import saved_tensors
    model = build("bf16")
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, SMALL.vocab_size, (2, 5), generator=g) for _ in range(2))
    seen = saved_tensors(model, ids, targets)
    got = Counter((n, dtype) for _, n, dtype in seen.values())
    lg = ledger(SMALL, None, "none", "course", "bf16")
    v = lg.values(5, 2)
    want = Counter()
    size = {"fp32": 4, "bf16": 2, "int64": 8, "bool": 1}
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "int64": torch.int64, "bool": torch.bool}
    for a in lg.activations:
        if a.saved:
            want[(size[a.dtype] * a.elements.evaluate(v) // a.copies, dt[a.dtype])] += \
                a.copies * a.count(v)
    assert got == want


@pytest.mark.parametrize("shape", [(64, 96), (96, 64), (64, 64)])
def test_muon_newton_schulz_flops_equal_flop_counter(shape):
    """Muon's five Newton-Schulz steps: FlopCounterMode's count of the step's mm and addmm
    equals 5·(4m²n + 2m³) with m = min(rows, cols), n = max."""
    from torch.utils.flop_counter import FlopCounterMode
    p = torch.nn.Parameter(torch.randn(*shape))
    p.grad = torch.randn_like(p)
    opt = torch.optim.Muon([p])
    with FlopCounterMode(display=False) as counter:
        opt.step()
    m, n = min(shape), max(shape)
    assert counter.get_total_flops() == 5 * (4 * m * m * n + 2 * m ** 3)
    assert counter.get_total_flops() == get_optimizer("muon").newton_schulz_flops(shape)


class OpFlops:
    """The update's FLOPs counted from the aten ops the real optimizer runs, under the
    project's convention (accounting/ledger/records.py CONVENTION): 1 per output element of
    an elementwise op, 2 for add_/sub_ with an alpha (multiply and add), 3 for lerp_,
    addcmul_ and addcdiv_, 1 per input element of a reduction (mean, sum), 2 per input
    element of a norm (square, add) and 1 per output (sqrt), 2 per multiply-add of a
    matmul; copies and scalar reads 0."""
    ELEMENTWISE = {"add", "sub", "mul", "div", "rsqrt", "clamp", "pow", "square", "sqrt"}
    FUSED = {"lerp", "addcmul", "addcdiv"}
    FREE = {"clone", "_to_copy", "_local_scalar_dense", "permute", "copy", "detach", "alias",
            "zeros_like", "empty_like", "lift_fresh", "_record_function_enter_new",
            "_record_function_exit", "expand", "view", "reshape", "_unsafe_view"}

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                outer.flops += outer.count(func.__name__.split(".")[0], args, kwargs or {}, out)
                return out
        self.flops, self.mode = 0, Mode()

    def count(self, op, args, kwargs, out):
        base = op.removeprefix("_foreach_").rstrip("_")
        if base in self.FREE:
            return 0
        if base in ("mm", "addmm", "bmm"):
            a, b = args[-2], args[-1]
            return 2 * a.numel() * b.shape[-1]
        n = out.numel() if torch.is_tensor(out) else 0
        if base in self.FUSED:
            return 3 * n
        if base in ("add", "sub") and kwargs.get("alpha", 1) != 1:
            return 2 * n
        if base in self.ELEMENTWISE:
            return n
        if base in ("mean", "sum"):
            return args[0].numel()
        if base == "linalg_vector_norm":
            return 2 * args[0].numel() + n
        raise AssertionError(f"no convention for {op}")


# torch.optim.Muon takes 2-D tensors only (the recipe gives the rest to AdamW)
@pytest.mark.parametrize("name,shape", [(n, s) for n in ("sgd", "adafactor", "muon")
                                        for s in ((6, 8), (8, 6), (48,), (3, 4, 5))
                                        if n != "muon" or len(s) == 2])
def test_update_flops_equal_the_real_optimizers_ops(name, shape):
    """The second step's ops (the first creates the state), counted by OpFlops, equal the
    registry's update FLOPs."""
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(*shape))
    opt = {"sgd": lambda: torch.optim.SGD([p], lr=0.1, momentum=0.9),
           "adafactor": lambda: torch.optim.Adafactor([p], foreach=False),
           "muon": lambda: torch.optim.Muon([p])}[name]()
    for i in range(2):
        p.grad = torch.randn_like(p)
        if i == 0:
            opt.step()
            continue
        counter = OpFlops()
        with counter.mode:
            opt.step()
    role = "hidden matrix" if name == "muon" else ""
    assert counter.flops == get_optimizer(name).update_flops(shape, role)


@pytest.mark.slow  # torchao's step compiles its kernel (about 10 s on one core)
def test_torchao_adamw8bit_step_buffers():
    # torchao's AdamW8bit steps tensor by tensor through torch.compile(single_param_adam):
    # read from inductor's output code for one bf16 tensor of 768 × 1,024 (8-bit state: a
    # multiple of the 256-element block), the buffers it allocates of the tensor's size
    # are the new m and v in float32 before their block quantization: 2 × 4 bytes an
    # element (the optimizer's step_temporary), beside per-block scales. And the plan's
    # update moment adds them once, for its largest tensor (one tensor at a time). Before:
    # no step buffer (torchtune's Optimization flags "+ 8-bit AdamW" planned at 0.86)
    import re
    ao = pytest.importorskip("torchao.optim")
    from torch._inductor.utils import run_and_get_code
    shape = (768, 1024)
    n = shape[0] * shape[1]
    p = torch.nn.Parameter(torch.randn(*shape, dtype=torch.bfloat16))
    opt = ao.AdamW8bit([p], lr=1e-3)
    p.grad = torch.randn_like(p)
    _, codes = run_and_get_code(opt.step)
    sizes = [(tuple(int(x) for x in dims.split(",") if x.strip()), dtype) for code in codes
             for dims, dtype in re.findall(
                 r"empty_strided_\w+\(\(([\d, ]+)\), \([\d, ]*\), torch\.(\w+)\)", code)]
    full = [(d, t) for d, t in sizes if d[0] * (d[1] if len(d) > 1 else 1) == n]
    assert full == [((n // 256, 256), "float32")] * 2, sizes
    assert get_optimizer("adamw8bit-torchao").step_temporary == 2 * 4
    c = ModelConfig(vocab_size=4096, context_length=16, num_layers=2, d_model=64, d_ff=128,
                    num_heads=4)
    update, states = {}, {}
    for name in ("adamw8bit", "adamw8bit-torchao"):
        m = MemoryModel(c, get_precision("bf16"), "model", optimizer=name)
        v = m.values(16, 2)
        update[name] = m.peak_terms[1].bytes.evaluate(v)
        states[name] = sum(t.bytes.evaluate(v) for t in m.state_terms if t.on_gpu
                           and not t.name.startswith(("parameters", "gradients")))
    # the two differ in their states (torchao's scales and code books per tensor) and in
    # torchao's step buffers for the largest tensor, the 4,096 × 64 embedding or head
    assert update["adamw8bit-torchao"] - update["adamw8bit"] == \
        8 * 4096 * 64 + states["adamw8bit-torchao"] - states["adamw8bit"]


def test_torchao_step_buffers_on_many_gpus(capsys):
    # the many-GPU plan's update moment (planning/parallel/peak.py) holds the same step
    # buffers: Llama-3.2-1B (config.json: V 128,256, d_model 2,048, tied) on 8 GPUs under
    # ZeRO-1, at the optimizer update (its peak at 256 tokens): torchao's AdamW8bit against
    # bitsandbytes' differs by 2 × 4 bytes × the embedding's 128,256 × 2,048 elements, its
    # largest tensor, beside the two 8-bit states' own few bytes (under 1 MiB). Before:
    # the states' difference alone
    import json
    from cli_run import run
    peak = {}
    for name in ("adamw8bit", "adamw8bit-torchao"):
        code, out, err = run(capsys, "plan", "meta-llama/Llama-3.2-1B", "--gpus", "8", "--zero",
                             "1", "--batch", "8", "--ctx", "256", "--optimizer", name,
                             "--format", "json")
        assert code == 0, err
        d = json.loads(out)
        assert d["peak_moment"] == "optimizer update"
        peak[name] = d["memory_per_gpu_bytes"]
    assert 0 <= peak["adamw8bit-torchao"] - peak["adamw8bit"] - 8 * 128256 * 2048 < 2**20
