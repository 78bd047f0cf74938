"""fp8 training (issue 30, Must 4): the precisions fp8-torchao and fp8-te.

What a Float8Linear saves is measured on the CPU: transformers' tiny models converted by
torchao.float8.convert_to_float8_training(config=Float8LinearConfig(emulate=True)) (the
CPU has no fp8 matmul; emulate runs the same casts and saves), one forward and loss run
under saved-tensor hooks, every saved storage that is not a parameter counted by size and
dtype (tests/test_architectures.py saved_tensors) and compared with the ledger built with
fp8="torchao" — in fp32, with bf16 parameters, and under the CPU's autocast. The expected
values are the real library's; the hand algebra below checks the rest (Transformer
Engine's state, read from its source: it needs a GPU).
"""
from collections import Counter
from dataclasses import replace
from fractions import Fraction

import pytest
from fresh_probe import run_probe

from accounting.cli.main import main
from accounting.ledger.ledger import ledger
from accounting.planning.memory import MemoryModel, get_precision
from accounting.planning import fp8 as F8
from accounting.architecture.presets import get_preset

torch = pytest.importorskip("torch")


def _converted(name, param_dtype):
    pytest.importorskip("torchao")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from test_transformers_saves import build
    model = build(name, param_dtype)
    convert_to_float8_training(model, config=Float8LinearConfig(emulate=True))
    kinds = Counter(type(m).__name__ for m in model.modules())
    assert kinds["Float8Linear"] > 0 and kinds["Linear"] == 0  # every nn.Linear, the head too
    return model


@pytest.mark.parametrize("name,mode", [("llama", "fp32"), ("llama", "bf16"),
                                       ("llama", "autocast"), ("qwen3_moe", "bf16")])
def test_float8_linear_saves_what_the_ledger_says(name, mode):
    from accounting.architecture.hf_config import translate
    from test_transformers_saves import CONFIGS, MODES, measured, SIZE, DTYPE
    autocast, param_dtype = MODES[mode]
    config = replace(translate(CONFIGS[name], "test", name).config, attention="sdpa")
    model = _converted(name, param_dtype)
    B, T = 2, 5
    lg = ledger(config, autocast, "none", "transformers", param_dtype, fp8="torchao")
    v = lg.values(T, B)
    want = Counter()
    for a in lg.activations:
        if a.saved:
            want[(SIZE[a.dtype] * a.elements.evaluate(v) // a.copies,
                  str(DTYPE[a.dtype]).removeprefix("torch."))] += a.copies * a.count(v)
    assert measured(model, B, T, autocast) == want
    # no fp8 tensor is saved (the casts are made again in the backward pass), and without
    # autocast the saves are the unconverted model's: the weight is the parameter itself
    assert not any("float8" in d for _, d in want)
    if autocast is None:
        plain = ledger(config, None, "none", "transformers", param_dtype)
        assert sum(a.elements.evaluate(v) * a.bytes_per_element for a in lg.activations if a.saved) \
            == sum(a.elements.evaluate(v) * a.bytes_per_element for a in plain.activations if a.saved)


def _items(name, precision):
    m = MemoryModel(get_preset(name), get_precision(precision))
    v = m.values(1024, 1)
    return {t.name: t.bytes.evaluate(v) for t in m.terms}


def test_torchao_drops_autocasts_weight_copies_and_nothing_else():
    """Under CUDA autocast F.linear saves a bf16 copy of each weight; a Float8Linear saves
    the fp32 parameter itself (float8_linear.py: weight_hp_t = self.weight.t(), never
    cast): the difference is 2 bytes per matmul weight of gpt2-small (hand count below)."""
    a, b = _items("gpt2-small", "bf16-mixed"), _items("gpt2-small", "fp8-torchao")
    L, d, f, V = 12, 768, 3072, 50257
    n_matmul = 4 * L * d * d + 3 * L * d * f + d * V
    assert a.pop("bf16 copies of the matmul weights") == 2 * n_matmul
    a["parameters (fp32)"] = a.pop("parameters (fp32 master copy)")
    assert a == b


def test_transformer_engine_state_by_hand():
    """fp8-te on gpt2-small (no bias, untied head, 7 te.Linear per block, the LM head bf16):
    fp8 weight and transpose, 2 bytes per linear weight element; DelayedScaling: per
    te.Linear scale [3] + amax_history [1024, 3] forward, [2] + [1024, 2] backward, fp32."""
    items = _items("gpt2-small", "fp8-te")
    L, d, f = 12, 768, 3072
    assert items["fp8 weight copies (Transformer Engine: weight and transpose, e4m3)"] == \
        2 * L * (4 * d * d + 3 * d * f)
    assert items["fp8 scaling state (DelayedScaling: scales, amax history)"] == \
        7 * L * 4 * (3 + 3 * 1024 + 2 + 2 * 1024)
    # each te.Linear saves a 1-byte copy of its input instead of the bf16 activation: six
    # of d_model wide per block (x̂ of the attention norm for W_q, W_k, W_v; the attention
    # output for W_o; x̂ of the FFN norm for W1, W3) and one of d_ff (the gated product for
    # W2); the bf16 ones only the linears saved drop out: the two x̂, the attention output
    # and the gated product (RMSNorm's backward saves its input, SwiGLU's product its factors)
    bf = _items("gpt2-small", "bf16-master")
    B, T = 1, 1024
    assert bf["activations: all L blocks"] - items["activations: all L blocks"] == \
        L * B * T * (2 * 3 * d - 1 * (6 * d + f) + 2 * f)


def test_the_fp8_flops_and_the_effective_peak():
    """gpt2-small, B = 1, T = 1,024: the fp8 GEMMs are the linear layers' (torchao: the LM
    head too), 3 × 2·B·T·(4d² + 3df + dV) per step; the effective peak is the harmonic
    mix total / (f8/P8 + rest/P16) (H100 SXM: 1,979 and 989 TFLOP/s dense)."""
    c = get_preset("gpt2-small")
    lg = ledger(c, "cuda", fp8="torchao")
    v = lg.values(1024, 1)
    L, d, f, V, T = 12, 768, 3072, 50257, 1024
    f8 = 3 * 2 * T * (L * (4 * d * d + 3 * d * f) + d * V)
    assert F8.matmul_flops(lg, v) == f8
    total = 10 ** 12
    p = F8.effective_peak(total, f8, Fraction(1979), Fraction(989))
    assert Fraction(f8) / 1979 + Fraction(total - f8) / 989 == total / p
    te = ledger(c, None, param_dtype="bf16", fp8="te")
    assert F8.matmul_flops(te, v) == f8 - 3 * 2 * T * d * V  # Megatron's head is not TE's


def test_fp8_on_a_gpu_without_fp8_is_one_line(capsys):
    assert main(["plan", "gpt2-small", "--precision", "fp8-torchao", "--gpu", "A100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no fp8 Tensor Cores" in err[0]


def _gpus(*args):
    import json
    import io
    from contextlib import redirect_stdout
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["plan", "gpt2-small", "--gpus", "8", "--gpu", "H100", "--ctx", "256",
                     "--format", "json", *args]) == 0
    d = json.loads(out.getvalue())
    return d, {i["name"]: i["bytes"] for i in d["stages"][0]["items"]}


def test_many_gpus_te_copies_follow_the_tp_split():
    """fp8-te on 8 GPUs, TP 2: each rank's fp8 weight copies are 2 bytes per element of its
    TP-local linear weights (every block matrix split in two: d_model·d_model and
    d_model·d_ff are even), its scaling state 20,500 bytes per te.Linear (7 a block)."""
    _, items = _gpus("--precision", "fp8-te", "--tp", "2")
    L, d, f = 12, 768, 3072
    assert items["fp8 weight copies (Transformer Engine: weight and transpose, e4m3)"] == \
        2 * L * (4 * d * d + 3 * d * f) // 2
    assert items["fp8 scaling state (DelayedScaling: scales, amax history)"] == 20_500 * 7 * L


def test_torchtitan_with_float8_saves_as_its_bf16_run_and_steps_faster():
    """torchtitan's float8 converter: the blocks' saves are torchtitan's own (bf16, no
    weight copies: a Float8Linear saves its input and the gathered parameter), the
    all-gathers stay bf16 (enable_fsdp_float8_all_gather False by default); only the time
    changes: the linear GEMMs at the fp8 peak."""
    # the fp8 peak's arithmetic at a given rate (issue 39: --mfu an override; timed from the
    # kernels, gpt2-small's 256-token GEMMs gain nothing from fp8)
    rate = ("--mfu", "0.5", "--mfu-scope", "compute")
    a, ia = _gpus("--stack", "torchtitan", "--zero", "3", *rate)
    b, ib = _gpus("--stack", "torchtitan", "--zero", "3", "--precision", "fp8-torchao", *rate)
    assert ia == ib and a["memory_per_gpu_bytes"] == b["memory_per_gpu_bytes"]
    assert b["step_time"]["seconds"]["approx"] < a["step_time"]["seconds"]["approx"]


def test_te_current_scaling_keeps_no_amax_history():
    """Float8CurrentScaling (TE quantization.py Float8CurrentScalingRecipeState: no buffer):
    fp8-te less its scaling state, everything else alike."""
    te, cur = _items("gpt2-small", "fp8-te"), _items("gpt2-small", "fp8-te-current")
    assert te.pop("fp8 scaling state (DelayedScaling: scales, amax history)") == 20_500 * 7 * 12
    assert te == cur


def test_the_fp8_gemms_reach_the_json_and_the_time():
    """plan --format json: flops_per_step.fp8_linear_gemms is the hand count of
    test_the_fp8_flops_and_the_effective_peak; the time to train divides the step's FLOPs
    by MFU × the mixed peak (H100 SXM: 1,979 fp8, 989 bf16 TFLOP/s dense)."""
    import io
    import json
    from contextlib import redirect_stdout
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["plan", "gpt2-small", "--precision", "fp8-torchao", "--gpu", "H100",
                     "--steps", "1", "--mfu", "0.5", "--format", "json"]) == 0
    d = json.loads(out.getvalue())
    L, dm, f, V, T = 12, 768, 3072, 50257, 1024
    f8 = 3 * 2 * T * (L * (4 * dm * dm + 3 * dm * f) + dm * V)
    flops = d["flops_per_step"]
    assert flops["fp8_linear_gemms"] == f8
    total = flops["total"]
    seconds = (Fraction(f8, 1979 * 10**12) + Fraction(total - f8, 989 * 10**12)) / Fraction(1, 2)
    got = d["time_to_train"]["seconds"]
    assert Fraction(got["numerator"], got["denominator"]) == seconds


def test_fsdp_fp8_all_gather_by_hand():
    """fp8-torchao-fsdp (Float8LinearConfig(enable_fsdp_float8_all_gather=True)), gpt2-small
    on 8 GPUs, ZeRO-3: FSDP2 gathers each Float8Linear weight in fp8 (1 byte) and the rest
    in fp32 (4), each tensor's first dimension padded to a multiple of 8. A block: 4·768² +
    3·768·3,072 = 9,437,184 linear elements and two 768-element norms; the root: the
    50,257 × 768 embedding (50,264 rows padded), the LM head (a Float8Linear: 1 byte) and the
    final norm. The gathered units held (root + 2 blocks) and the forward all-gathers of
    the 12 blocks; one fp32 amax all-reduce per fp8 weight per gather."""
    d, items = _gpus("--zero", "3", "--precision", "fp8-torchao-fsdp", "--ctx", "1024")
    lin, norm, rows = 4 * 768 ** 2 + 3 * 768 * 3072, 768, 50264
    block = lin * 1 + 2 * norm * 4
    root = rows * 768 * 4 + rows * 768 * 1 + norm * 4
    assert items["FSDP2 gathered fp32 units (root + 2 blocks)"] == root + 2 * block
    coll = d["stages"][0]["collectives"]
    ag = next(c for c in coll if c["what"] == "parameters of the blocks")
    assert ag["bytes"] == 12 * block and ag["calls"] == 12
    amax = next(c for c in coll if c["what"].startswith("amax of each fp8 weight of the blocks"))
    assert amax["calls"] == 7 * 12 and amax["bytes"] == 7 * 12 * 4
    # without the option: every weight gathered in fp32, no amax all-reduce
    d0, items0 = _gpus("--zero", "3", "--precision", "fp8-torchao", "--ctx", "1024")
    assert items0["FSDP2 gathered fp32 units (root + 2 blocks)"] == \
        rows * 768 * 8 + norm * 4 + 2 * (lin + 2 * norm) * 4
    assert not any(c["what"].startswith("amax") for c in d0["stages"][0]["collectives"])


# one rank of 4 on the fake backend, in a fresh interpreter (a forked one can hang on the
# threads earlier tests started); prints the collectives as JSON
_FSDP_FP8_GATHERS = """
import json, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from accounting.distcheck.hooks import Collectives
dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=4)
mesh = init_device_mesh("cpu", (4,))
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(64, 128, bias=False), nn.Linear(128, 64, bias=False), nn.LayerNorm(64))
convert_to_float8_training(m, config=Float8LinearConfig(emulate=True,
                                                        enable_fsdp_float8_all_gather=True))
for layer in m[:2]:
    fully_shard(layer, mesh=mesh)
fully_shard(m, mesh=mesh)
with Collectives() as c:
    m(torch.randn(2, 64))
print(json.dumps([(call.op, call.bytes) for call in c.calls]))
dist.destroy_process_group()
"""


@pytest.mark.slow  # a fresh interpreter importing torchao: about 14 s on one core
def test_fsdp_fp8_all_gather_on_the_fake_backend():
    """torchao's fp8 all-gather under FSDP2 (4 ranks of the fake backend, emulate=True): the
    root unit (a LayerNorm, fp32: 2·64·4 bytes) gathers as usual; each Float8Linear unit
    all-reduces its weight's amax (one fp32) and all-gathers the weight at one byte an
    element — the plan's rule (FSDP_FP8_ALL_GATHER_BYTES, comms.AMAX_BYTES)."""
    pytest.importorskip("torchao")
    from accounting.planning.parallel import comms as C
    calls = [tuple(c) for c in run_probe(_FSDP_FP8_GATHERS)]
    amax, ag = C.AMAX_BYTES, F8.FSDP_FP8_ALL_GATHER_BYTES
    assert calls == [("all-gather", 2 * 64 * 4), ("all-reduce", amax), ("all-gather", 64 * 128 * ag),
                     ("all-reduce", amax), ("all-gather", 128 * 64 * ag)]
    assert (amax, ag) == (4, 1)
