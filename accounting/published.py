"""Published, measured training throughputs (tokens/s per GPU), each with where it was
read, and the planner's prediction for the same run: the cases docs/timing.md's table is
generated from (benchmarks/published_runs.py). A figure here is the source's own number;
nothing is fitted to it.

The runs are planned as the command line plans them (`plan MODEL --gpus N ...`), model/'s
ops with the stack's memory rules, eager PyTorch (torch.compile's fusions are not
modelled: a compiled run is expected faster than the prediction), on the GPU table's card.

A room of its own, on the top floor: predict() runs the command line (cli/main.py), so it
sits above cli/ (tests/test_layout.py's floors); the timing package it checks sits below.
A run names its stack by the stack record's name (planning/parallel/stacks.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.planning.optimizers import DEFAULT_OPTIMIZER, OPTIMIZERS
from accounting.planning.parallel.stacks import MEGATRON, TORCHTITAN

TT_H100 = ("torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, "
           "2024-12; Grand Teton H100 96 GB HBM2e at 500 W, planned as H100-SXM)")
TT_A100 = ("torchtitan docs/performance.md (commit 0413364; 64 A100 80GB, FSDP2, "
           "T = 8,192)")
TT_H200 = ("torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy, 2025-06, "
           "torchtitan e7c0cae; compile, float8 with fp8 all-gathers)")
NEMO = ("NeMo docs/source/performance/performance_summary.md (NeMo 24.07, DGX-H100, FP8; "
        "commit 070a0bb)")

# model shapes beyond the presets, as flags of `plan` (Meta's config.json values)
LLAMA31_70B = ("meta-llama/Llama-3.1-8B", "--num-layers", "80", "--d-model", "8192",
               "--num-heads", "64", "--num-kv-heads", "8", "--d-ff", "28672")
LLAMA31_405B = ("meta-llama/Llama-3.1-8B", "--num-layers", "126", "--d-model", "16384",
                "--num-heads", "128", "--num-kv-heads", "8", "--d-ff", "53248")
LLAMA2_7B = ("meta-llama/Llama-3.1-8B", "--num-kv-heads", "32", "--d-ff", "11008",
             "--vocab-size", "32000")
LLAMA2_70B = ("meta-llama/Llama-3.1-8B", "--num-layers", "80", "--d-model", "8192",
              "--num-heads", "64", "--num-kv-heads", "8", "--d-ff", "28672",
              "--vocab-size", "32000")
LLAMA31_8B = ("meta-llama/Llama-3.1-8B",)


@dataclass(frozen=True)
class Run:
    name: str
    model: tuple[str, ...]  # the preset and any field flags
    gpu: str
    gpus: int
    ctx: int
    batch: int  # global, sequences
    layout: tuple[str, ...]  # --tp/--pp/--cp/--zero/--micro-batch/... flags
    precision: str
    recompute: str
    stack: str
    measured: float  # tokens/s per GPU, as published
    source: str
    note: str = ""

    def argv(self) -> list[str]:
        return ["plan", *self.model, "--gpus", str(self.gpus), "--gpu", self.gpu,
                "--ctx", str(self.ctx), "--batch", str(self.batch), *self.layout,
                "--precision", self.precision, "--recompute", self.recompute,
                "--attention", "sdpa", "--stack", self.stack, "--format", "json"]


def _tt(name, model, gpus, ctx, batch, layout, precision, recompute, measured, note="",
        gpu="H100", source=TT_H100):
    return Run(name, model, gpu, gpus, ctx, batch, layout, precision, recompute, TORCHTITAN,
               measured, source, note)


FSDP = ("--zero", "3")
RUNS: tuple[Run, ...] = (
    _tt("8B, 8 GPUs, FSDP, b 2 (Table 1)", LLAMA31_8B, 8, 8192, 16,
        FSDP + ("--micro-batch", "2"), "bf16-mixed", "selective", 5762),
    _tt("8B, 8 GPUs, FSDP + compile (Table 1)", LLAMA31_8B, 8, 8192, 16,
        FSDP + ("--micro-batch", "2"), "bf16-mixed", "selective", 6667, "compiled"),
    _tt("8B, 8 GPUs, FSDP + compile + Float8 (Table 1)", LLAMA31_8B, 8, 8192, 16,
        FSDP + ("--micro-batch", "2"), "fp8-torchao", "selective", 8532, "compiled"),
    _tt("8B, 8 GPUs, FSDP 8, T 32k (Table 2)", LLAMA31_8B, 8, 32768, 8,
        FSDP + ("--micro-batch", "1"), "fp8-torchao", "full", 3890, "compiled"),
    _tt("8B, 8 GPUs, FSDP 4 CP 2, T 64k (Table 2)", LLAMA31_8B, 8, 65536, 4,
        FSDP + ("--micro-batch", "1", "--cp", "2"), "fp8-torchao", "full", 2540, "compiled"),
    _tt("8B, 8 GPUs, FSDP 2 CP 4, T 128k (Table 2)", LLAMA31_8B, 8, 131072, 2,
        FSDP + ("--micro-batch", "1", "--cp", "4"), "fp8-torchao", "full", 1071, "compiled"),
    _tt("8B, 128 GPUs, FSDP, b 2 (Table 3)", LLAMA31_8B, 128, 8192, 256,
        FSDP + ("--micro-batch", "2"), "bf16-mixed", "selective", 5605),
    _tt("8B, 128 GPUs, FSDP + compile (Table 3)", LLAMA31_8B, 128, 8192, 256,
        FSDP + ("--micro-batch", "2"), "bf16-mixed", "selective", 6514, "compiled"),
    _tt("8B, 128 GPUs, FSDP + compile + Float8 (Table 3)", LLAMA31_8B, 128, 8192, 256,
        FSDP + ("--micro-batch", "2"), "fp8-torchao", "selective", 8380, "compiled"),
    _tt("70B, 256 GPUs, FSDP 32 TP 8, b 16 (Table 4)", LLAMA31_70B, 256, 8192, 512,
        FSDP + ("--tp", "8", "--sp", "--micro-batch", "16"), "fp8-torchao", "full", 829, "compiled"),
    _tt("70B, 256 GPUs, FSDP 32 TP 8 + async TP (Table 4)", LLAMA31_70B, 256, 8192, 512,
        FSDP + ("--tp", "8", "--sp", "--micro-batch", "16", "--async-tp"), "fp8-torchao", "full",
        876, "compiled; async TP"),
    # Table 5's local batch of 32 in as many micro-batches as pipeline stages, torchtitan's
    # default then: n_microbatches = pipeline_parallel_microbatches or pipeline_parallel_degree
    # (torchtitan/parallelisms/pipelining_utils.py build_pipeline_schedule, 2024): 8 of 4
    _tt("405B, 512 GPUs, FSDP 8 TP 8 PP 8, 1F1B (Table 5)", LLAMA31_405B, 512, 8192, 256,
        FSDP + ("--tp", "8", "--sp", "--pp", "8", "--micro-batch", "4", "--async-tp"),
        "fp8-torchao", "full", 100,
        "compiled; async TP; m = pp = 8 micro-batches"),
    _tt("405B, 512 GPUs, interleaved 1F1B (Table 5)", LLAMA31_405B, 512, 8192, 256,
        FSDP + ("--tp", "8", "--sp", "--pp", "8", "--micro-batch", "4", "--virtual-stages", "2",
                "--async-tp"),
        "fp8-torchao", "full", 128, "compiled; async TP; m = 8; interleaving degree assumed 2"),
    _tt("8B, 64 A100, FSDP, b 1, selective layer", LLAMA31_8B, 64, 8192, 64,
        FSDP + ("--micro-batch", "1"), "bf16-mixed", "selective", 2904, gpu="A100",
        source=TT_A100),
    _tt("70B, 64 A100, FSDP, b 1, full AC", LLAMA31_70B, 64, 8192, 64,
        FSDP + ("--micro-batch", "1"), "bf16-mixed", "full", 331, gpu="A100", source=TT_A100),
    _tt("8B, 32 H200, FSDP, b 2, compile + Float8", LLAMA31_8B, 32, 8192, 64,
        FSDP + ("--micro-batch", "2"), "fp8-torchao-fsdp", "selective", 10938, "compiled",
        gpu="H200", source=TT_H200),
    _tt("8B, 64 H200, FSDP, b 2, compile + Float8", LLAMA31_8B, 64, 8192, 128,
        FSDP + ("--micro-batch", "2"), "fp8-torchao-fsdp", "selective", 10753, "compiled",
        gpu="H200", source=TT_H200),
    Run("LLAMA3-8B, 8 GPUs, CP 2, GBS 128", LLAMA31_8B, "H100", 8, 8192, 128,
        ("--cp", "2", "--micro-batch", "1", "--zero", "1"), "fp8-te", "none",
        MEGATRON, 12036, NEMO, "distributed optimizer"),
    Run("LLAMA3-70B, 64 GPUs, TP 4 PP 4 CP 2 VP 5", LLAMA31_70B, "H100", 64, 8192, 128,
        ("--tp", "4", "--pp", "4", "--cp", "2", "--virtual-stages", "5", "--micro-batch", "1",
         "--zero", "1", "--sp"), "fp8-te", "none", MEGATRON, 1533, NEMO),
    Run("LLAMA2-7B, 8 GPUs, GBS 128, T 4k", LLAMA2_7B, "H100", 8, 4096, 128,
        ("--micro-batch", "1", "--zero", "1"), "fp8-te", "none", MEGATRON, 16847, NEMO),
    Run("LLAMA2-70B, 64 GPUs, TP 4 PP 4 VP 20, T 4k", LLAMA2_70B, "H100", 64, 4096, 128,
        ("--tp", "4", "--pp", "4", "--virtual-stages", "20", "--micro-batch", "1", "--zero",
         "1", "--sp"), "fp8-te", "none", MEGATRON, 1707, NEMO),
)


# the done-when run's hardware as torchtitan's benchmark page states it (TT_H100): "96GB
# HBM2e with 2.4 TB/sec peak memory bandwidth", "the default 500W power limit", and (its
# footnote 2) "the actual peak TFLOPs number is between SXM and NVL"; "the 1D Llama 3.1 8B
# model training on 8 or 128 H100 GPUs without Float8 achieves 33% to 39% MFU" (33% eager)
TT_H100_BANDWIDTH_TBS = Fraction(24, 10)
TT_H100_MFU = Fraction(33, 100)
# H100 NVL, bf16 dense: NVIDIA's H100 datasheet gives 1,671 TFLOPS with sparsity (half dense)
H100_NVL_BF16_TFLOPS = Fraction(1671, 2)


def done_when() -> tuple[Run, dict, list]:
    """Issue 39's done-when run (the first of Table 1) planned: (run, .step_time, .utilization
    with the measured throughput)."""
    import contextlib
    import io
    import json

    from accounting.cli.main import main
    run = next(r for r in RUNS if r.name.startswith("8B, 8 GPUs, FSDP, b 2"))
    out = io.StringIO()
    argv = run.argv() + ["--measured-tokens-per-s", str(run.measured * run.gpus)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
    d = json.loads(out.getvalue())
    return run, d["step_time"], d["utilization"]


def predict(run: Run) -> tuple[float | None, str, str]:
    """(tokens/s per GPU predicted, the time's source, a problem) for one run."""
    import contextlib
    import io
    import json

    from accounting.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(run.argv())
    if code != 0:
        return None, "", err.getvalue().strip().splitlines()[-1] if err.getvalue() else f"exit {code}"
    d = json.loads(out.getvalue())
    st = d.get("step_time") or {}
    tps = (st.get("tokens_per_second") or {}).get("approx")
    return (None if tps is None else tps / run.gpus), st.get("source", ""), ""


# The project's own H200 measurements (shared/gpu/README.md, 2026-11-26, torch 2.11.0+cu130),
# each predicted by the rule that matches how it was run (tests/test_timing.py holds ±10%).
H200_SOURCE = "shared/gpu/README.md (one H200, torch 2.11.0+cu130, 2026-11-26)"
H200_CASES = (
    ("Llama-3.1-8B prefill, transformers + SDPA, T 8,192", "prefill", 8192, 1, 0.2505),
    ("Llama-3.1-8B prefill, transformers + SDPA, T 32,768", "prefill", 32768, 1, 1.3873),
    ("Llama-3.1-8B CUDA-graph decode step, B 1, t 4,096 (GEMMs + SDPA)", "decode", 4096, 1,
     0.005047),
    ("Llama-3.1-8B CUDA-graph decode step, B 32, t 4,096 (GEMMs + SDPA)", "decode", 4096, 32,
     0.008791),
    ("Llama-3.2-1B training step, T 4,096, B 4, bf16-mixed, SDPA", "train-none", 4096, 4, 0.386),
    ("Llama-3.2-1B training step, T 8,192, B 4, full recomputation", "train-full", 8192, 4,
     0.965),
    ("gpt2-small training step, T 1,024, B 16, bf16-mixed, SDPA", "train-gpt2", 1024, 16, 0.120),
    ("Llama-3.1-8B shape, 4 layers, training step, T 8,192, B 2 (issue 39's run)", "train-8b4",
     8192, 2, 0.3624),
    ("the same, selective recomputation (issue 39's run)", "train-8b4-selective", 8192, 2,
     0.3722),
)

# Measured for issue 39 on one H200 (torch 2.11.0+cu130; CUDA events, the median of 20 calls
# of F.linear, 10 of SDPA, 5 training steps): bf16 GEMMs (m, n, k, ms) as F.linear(x[m, k],
# w[n, k]) at a training step's shapes and decode's, and causal SDPA without grouped heads
# (B, T, h, d, forward ms, forward + backward ms).
KERNEL_SOURCE = ("measured for issue 39 on one H200, torch 2.11.0+cu130, eager calls timed "
                 "with CUDA events")
GEMMS_MEASURED = ((16384, 4096, 4096, 0.728), (16384, 14336, 4096, 2.600),
                  (16384, 4096, 14336, 2.808), (16384, 1024, 4096, 0.261),
                  (16384, 128256, 4096, 25.165), (4096, 4096, 16384, 0.907),
                  (4096, 14336, 16384, 2.994), (8192, 8192, 8192, 1.526),
                  (2048, 2048, 2048, 0.052), (32, 14336, 4096, 0.056), (1, 4096, 4096, 0.046))
SDPA_MEASURED = ((2, 8192, 32, 128, 1.761, 7.200), (1, 8192, 32, 128, 1.006, 3.752),
                 (4, 4096, 32, 64, 0.730, 2.676))


def kernel_predictions() -> tuple[list, list]:
    """(GEMM rows (m, n, k, measured ms, table ms), SDPA rows (B, T, h, d, measured forward,
    table forward, measured forward + backward, predicted forward + backward)): the
    measured kernels beside the H200 tables' values the planner uses."""
    from accounting.timing import ops as O
    m = _h200()
    gemms = [(a, b, c, ms, float(O.gemm_seconds(m, a, b, c)[0]) * 1e3)
             for a, b, c, ms in GEMMS_MEASURED]
    sdpa = []
    for b, t, h, d, fwd, both in SDPA_MEASURED:
        f = float(O.attention_seconds(m, "context", b, t, h, h, d)[0]) * 1e3
        sdpa.append((b, t, h, d, fwd, f, both, f * float(1 + O.FA_BACKWARD_RATIO)))
    return gemms, sdpa


def _h200():
    from accounting.planning.gpus import get_gpu
    from accounting.timing import ops as O
    from accounting.timing import tables
    from accounting.units import TERA
    g = get_gpu("H200")
    return O.Machine(g.name, tables.system_of(g.name), g.peak_tflops["bf16"] * TERA,
                     g.peak_tflops["fp8"] * TERA, g.bandwidth_tbs * TERA)


def h200_predictions() -> list[tuple[str, float, float]]:
    """(case, measured seconds, predicted seconds) of H200_CASES."""
    import dataclasses

    from accounting.analysis import arguments as A
    from accounting.ledger.ledger import ledger
    from accounting.planning import recipes
    from accounting.planning.memory import MemoryModel, get_precision
    from accounting.timing import ops as O
    from accounting.timing import step as S
    m = _h200()
    c8 = dataclasses.replace(A.config("meta-llama/Llama-3.1-8B"), attention="sdpa")
    lg8 = ledger(c8, "cuda", implementation="transformers", param_dtype="bf16")
    out = []
    for name, kind, t, b, measured in H200_CASES:
        if kind == "prefill":
            s = S.prefill_eager(lg8, lg8.values(t, b), m).seconds
        elif kind == "decode":
            parts = S.decode(lg8, lg8.values(1, b), t, m).by_category()
            s = parts[O.GEMMS] + parts[O.ATTENTION]
        else:
            preset = {"train-gpt2": "gpt2-small", "train-8b4": "meta-llama/Llama-3.1-8B",
                      "train-8b4-selective": "meta-llama/Llama-3.1-8B"}.get(
                          kind, "meta-llama/Llama-3.2-1B")
            rc = {"train-full": "full", "train-8b4-selective": "selective"}.get(kind, "none")
            c = dataclasses.replace(A.config(preset), attention="sdpa")
            if kind.startswith("train-8b4"):
                c = dataclasses.replace(c, num_layers=4)
            _, c = recipes.resolve(c, False, "course", "bf16-mixed", DEFAULT_OPTIMIZER, rc, True,
                                   "model")
            p = get_precision("bf16-mixed")
            mm = MemoryModel(c, p, "model", rc, "course", DEFAULT_OPTIMIZER, None, None)
            s = S.training_step(mm.ledger, mm.values(t, b), m, p,
                                OPTIMIZERS[DEFAULT_OPTIMIZER]).seconds
        out.append((name, measured, float(s)))
    return out
