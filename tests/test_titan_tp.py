"""torchtitan's tensor parallelism (accounting/planning/parallel/titan_tp.py; issue 44), held
to torch run on the CPU: one TP rank of 4 on torch's fake process group, in a fresh
interpreter (tests/titan_tp_measure.py).

Expected values: measured (torch's MemTracker for the loss's peaks, saved_tensors_hooks for
the block's saved bytes), and hand algebra where written out; the rule itself read from
the installed torch (torch/distributed/tensor/parallel/loss.py)."""
import inspect
import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from accounting.architecture.config import ModelConfig
from accounting.planning import cuda_peak as CP
from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel import titan_tp as TT
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import TORCH, TORCHTITAN, get_stack

ROOT = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=None)  # each script run once (a fresh interpreter: one process group each)
def _run_measure(script: str) -> dict:
    """The JSON object tests/`script` prints, run in a fresh interpreter from the repo root."""
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(ROOT / "tests" / script)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def _measured() -> dict:
    return _run_measure("titan_tp_measure.py")


@pytest.mark.slow  # a fresh interpreter on the fake process group (torchao): ~10 s
def test_loss_parallel_backward_holds_three_temporaries():
    """Measured: torchtitan's loss on vocab-sharded logits under loss_parallel peaks at 4 fp32
    tensors the size of the rank's logits (the saved log-probabilities and the fused
    backward's zeros_like, exp and sum), F.cross_entropy on the same logits at 3 (the saved
    log-probabilities and its two gradients); both forwards peak lower (3.5 and 2.5: the bf16
    logits, their fp32 copy, and shifted/exp or the log-probabilities). The remainder is the
    LM head's input and weight and the labels, under a quarter of one."""
    got = _measured()["loss"]
    e = got["logits_fp32"]
    lp, plain = got["loss_parallel"], got["plain"]
    rule = TT.loss_gradients(get_stack(TORCHTITAN), 4)
    assert rule is not None and rule.count == 3
    # the saved log-probabilities (activations.py: the "log-softmax of the logits" row) + the
    # temporaries peak.py adds at the loss's backward
    assert lp["peak"] // e == 1 + rule.count and lp["peak"] % e < e // 4, lp
    assert plain["peak"] // e == 1 + 2 and plain["peak"] % e < e // 4, plain
    assert lp["forward_peak"] < lp["peak"] and plain["forward_peak"] < plain["peak"]
    # (2·forward_peak: 7 and 5 half-tensors, the bf16 logits being one)
    assert 2 * lp["forward_peak"] // e == 7 and 2 * plain["forward_peak"] // e == 5


def test_the_rule_is_torchs_fused_backward():
    loss = pytest.importorskip("torch.distributed.tensor.parallel.loss")
    src = inspect.getsource(loss._nll_loss_and_log_softmax_backward)
    assert "grad_input = torch.zeros_like(x)" in src
    assert "return (grad_input + torch.exp(x)) * grad_output" in src
    # the log_softmax backward it pairs with does no computation of its own
    assert "return grad_output.to(input_dtype)" in inspect.getsource(
        loss._log_softmax_backward_handler)


def test_only_torchtitan_with_tp_runs_loss_parallel():
    assert TT.loss_gradients(get_stack(TORCHTITAN), 1) is None  # no TP: F.cross_entropy
    assert TT.loss_gradients(get_stack(TORCH), 8) is None


V, T, B = 1000, 32, 2


def _plan(config, tp=4, **layout):
    lo = Layout(8, tp=tp, dp=8 // tp, zero=3, sp=tp > 1, global_batch=8 // tp * B,
                micro_batch=B, **layout)
    return parallel_plan(config, lo, T, precision=PRECISIONS["bf16-mixed"],
                         stack=StackRun(get_stack(TORCHTITAN)))


def _config(a=16, g=8):
    return ModelConfig(vocab_size=V, context_length=T, num_layers=2, d_model=64, num_heads=a,
                       num_kv_heads=g, head_dim=8, d_ff=96, name="titan-tp")


def test_plan_adds_the_temporaries_at_the_loss_backward():
    """The loss's backward moment of the last stage, by hand: the cuBLAS workspaces, the
    0-dim fp32 loss, and 3·b·T·⌈V/tp⌉·4 (2· without TP)."""
    ws = CP.workspace(None).bytes.evaluate({})
    for tp, n in ((4, 3), (1, 2)):
        stage = _plan(_config(), tp).stages[-1]
        m = next(m for m in stage.moments if m.name.startswith("start of the backward pass"))
        assert m.extra.at(B) == ws + 4 + n * B * T * -(-V // tp) * 4, tp


@pytest.mark.slow  # a fresh interpreter on the fake process group (torchao): ~10 s
def test_tp_block_saves_what_the_rows_count():
    """A torchtitan block parallelized as apply_tp does it saves the torchtitan stack's
    per-layer bytes, less the block's input (the measurement leaves it out): the norms'
    sequence shards and rstd, the two gathered full-sequence inputs (each saved once by the
    linears that read it), the rank's heads and d_ff/tp columns."""
    got = _measured()["block"]["gqa"]
    c = _config()
    p = _plan(c)
    h, tp = c.d_model, 4
    assert p.per_layer_activation_bytes - 2 * B * (T // tp) * h == got["saved"]
    # by hand: 2 norms (input shard 2b(T/tp)h, rstd 4b(T/tp)), 2 gathered inputs 2bTh,
    # Q, K, V (repeated) and the output at a/tp heads, the log-sum-exp, 4 tensors of d_ff/tp
    a, d, f = c.num_heads // tp, c.d_k, c.d_ff // tp
    assert got["saved"] == (2 * B * (T // tp) * h + 4 * 2 * B * (T // tp) + 2 * 2 * B * T * h
                            + 4 * 2 * B * T * a * d + 4 * B * a * T + 4 * 2 * B * T * f)


@pytest.mark.slow  # a fresh interpreter on the fake process group (torchao): ~10 s
def test_one_kv_head_a_rank_repeat_kv_is_a_view():
    """Measured: where a rank holds one KV head (Llama 3 70B and 405B at TP 8), repeat_kv's
    expand + reshape is a view, so SDPA saves the rank's one-head K and V, not copies of a/tp
    heads; the rows count the copies: an overcount (the plan errs high) of exactly
    2·(2·b·T·(a/tp)·d − 2·b·T·1·d) bytes per block."""
    got = _measured()["block"]["one_kv_head"]
    c = _config(8, 4)
    p = _plan(c)
    h, tp, d = c.d_model, 4, c.d_k
    counted = p.per_layer_activation_bytes - 2 * B * (T // tp) * h
    assert counted - got["saved"] == 2 * (2 * B * T * (8 // tp) * d - 2 * B * T * 1 * d)


def _simulate(events, expandable: bool) -> tuple[int, int]:
    """(allocated peak, reserved peak) of a caching allocator following
    c10/cuda/CUDACachingAllocator.cpp's rules for large blocks, as planning/allocator.py reads
    them (round_size, get_allocation_size; best fit among free blocks, a block split when
    more than kSmallSize remains, neighbours of one segment merged when freed; with
    expandable_segments one segment grown at its end by 20 MiB pages, a free block at its
    end grown into). `events`: ("+", name, bytes) or ("-", name)."""
    from accounting.planning import allocator as AL
    segs: list[list[list]] = []  # segments: ordered blocks [size, owner or None]
    where, live, peak, reserved = {}, 0, 0, 0
    for ev in events:
        if ev[0] == "-":
            seg, blk = where.pop(ev[1])
            live -= blk[0]
            blk[1] = None
            i = next(k for k, x in enumerate(seg) if x is blk)
            for j in (i + 1, i):  # merge with the free neighbours in the segment
                if 0 < j < len(seg) and seg[j][1] is None and seg[j - 1][1] is None:
                    seg[j - 1][0] += seg.pop(j)[0]
            continue
        _, name, n = ev
        size = AL.round_size(n)
        free = [(b[0], s, b) for s in segs for b in s if b[1] is None and b[0] >= size]
        if free:
            _, seg, blk = min(free, key=lambda f: f[0])
        elif expandable and segs:
            seg = segs[0]
            tail = seg[-1] if seg[-1][1] is None else None
            grow = -(-(size - (tail[0] if tail else 0)) // AL.KLARGE_BUFFER) * AL.KLARGE_BUFFER
            reserved += grow
            if tail is None:
                seg.append([0, None])
            blk = seg[-1]
            blk[0] += grow
        else:
            grow = -(-size // AL.KLARGE_BUFFER) * AL.KLARGE_BUFFER if expandable \
                else AL.allocation_size(size)
            reserved += grow
            seg = [[grow, None]]
            segs.append(seg)
            blk = seg[0]
        if blk[0] - size > AL.KSMALL_SIZE or (expandable and blk[0] > size):
            seg.insert(next(k for k, x in enumerate(seg) if x is blk) + 1, [blk[0] - size, None])
            blk[0] = size
        blk[1] = name
        where[name] = (seg, blk)
        live += blk[0]
        peak = max(peak, live)
    return peak, reserved


def _loss_events(e: int, parallel: bool):
    """torchtitan's loss from the head's bf16 logits L (e/2 bytes) to its backward's
    temporaries, fp32 tensors of e bytes, in the order its source allocates and frees them."""
    half = e // 2
    if parallel:  # loss.py _log_softmax, then _nll_loss_and_log_softmax_backward
        fwd = [("+", "L", half), ("+", "F", e), ("+", "shifted", e), ("+", "exp", e),
               ("-", "exp"), ("+", "logp", e), ("-", "shifted"), ("-", "F"), ("-", "L")]
        bwd = [("+", "zeros", e), ("+", "exp2", e), ("+", "sum", e), ("-", "exp2"),
               ("+", "grad", e), ("-", "sum"), ("-", "zeros"), ("-", "logp")]
    else:  # F.cross_entropy: log_softmax's output, nll_loss's gradient, log_softmax's
        fwd = [("+", "L", half), ("+", "F", e), ("+", "logp", e), ("-", "F"), ("-", "L")]
        bwd = [("+", "nll", e), ("+", "grad", e), ("-", "nll"), ("-", "logp")]
    return fwd + bwd + [("+", "grad16", half), ("-", "grad")]


@pytest.mark.parametrize("expandable", [False, True])
@pytest.mark.parametrize("parallel", [True, False])
def test_freed_logits_stay_reserved(parallel, expandable):
    """Replayed on the allocator's rules: the loss's reserved peak is its allocated peak
    plus the freed bf16 logits' block, with and without expandable segments (torchtitan's
    run_train.sh sets them) — the rule titan_tp.freed_logits adds at the loss's backward.
    e: a 16 × 8,192-token micro-batch's fp32 logits at V/tp = 16,032 (Table 4's 70B row)."""
    e = 16 * 8192 * 16032 * 4
    allocated, reserved = _simulate(_loss_events(e, parallel), expandable)
    assert allocated == (4 if parallel else 3) * e
    rule = TT.freed_logits(get_stack(TORCHTITAN), 16 * 8192, 16032)
    assert rule.bytes.at(1) == e // 2
    # (expandable segments map whole 20 MiB pages: up to one more)
    from accounting.planning.allocator import KLARGE_BUFFER
    assert e // 2 <= reserved - allocated < e // 2 + (KLARGE_BUFFER if expandable else 1)


def test_plan_reserves_the_freed_logits():
    """By hand: the loss's backward moment keeps b·T·⌈V/tp⌉·2 bytes reserved (torchtitan,
    with and without TP); the reserved peak holds them above the allocated one."""
    for tp in (4, 1):
        p = _plan(_config(), tp)
        m = next(m for m in p.stages[-1].moments if m.name.startswith("start of the backward"))
        assert m.history.at(B) == B * T * -(-V // tp) * 2
        # (the peak may be a block's backward, whose root gradients the loss's moment has
        # not yet allocated: Moment.pass_grads; the reserved peak covers the loss's moment)
        assert p.reserved >= p.stages[-1].moment_bytes(m, B) + m.history.at(B)
    assert TT.freed_logits(get_stack(TORCH), T, V) is None


@pytest.mark.slow  # a fresh interpreter on the fake process group (torchao): ~10 s
def test_float8_tp_block_saves_fp8_inputs():
    """Measured: the block under torchtitan's float8 TP (torchao's Float8Linear, emulated)
    saves its gathered inputs in fp8 (1 byte), w2's input in fp8 instead of bf16, and an
    fp8 copy of wo's input beside SDPA's bf16 output; the plan's per-layer bytes under
    --precision fp8-torchao (less the block's input) equal it. By hand: the bf16 block's
    bytes − 2·(b·T·h) (the two gathered inputs' second byte) − b·T·(f/tp) (w2's input) +
    b·T·(a/tp)·d (wo's input's fp8 copy)."""
    got = _measured()["block"]
    if "float8" not in got:
        pytest.skip("torchao is not installed (the hf extra)")
    c, tp = _config(), 4
    h, a, d, f = c.d_model, c.num_heads // tp, c.d_k, c.d_ff // tp
    assert got["float8"]["saved"] == got["gqa"]["saved"] - 2 * B * T * h - B * T * f \
        + B * T * a * d
    lo = Layout(8, tp=tp, dp=2, zero=3, sp=True, global_batch=2 * B, micro_batch=B)
    p = parallel_plan(c, lo, T, precision=PRECISIONS["fp8-torchao"],
                      stack=StackRun(get_stack(TORCHTITAN)))
    assert p.per_layer_activation_bytes - 2 * B * (T // tp) * h == got["float8"]["saved"]
    # without TP, Float8Linear saves the bf16 input it is handed: no change
    assert not TT.float8_tp(get_stack(TORCHTITAN), PRECISIONS["fp8-torchao"],
                            Layout(8, dp=8, zero=3, global_batch=8, micro_batch=1))


def _table_4(async_tp: bool):
    from accounting.cli.published_table import answer
    from accounting.literature import published_runs as PR
    return answer(next(r for n, r in PR.RUNS.items() if n.startswith("torchtitan Table 4")
                       and n.endswith("AsyncTP") == async_tp))


def test_table_4_async_tp_row_within_ten_percent():
    """torchtitan's published Table 4 (benchmarks/llama3_h100_202412_torchtitan.md: Llama 3.1
    70B, FSDP 32 × TP 8, local batch 16, full AC, Float8, async TP; max_memory_reserved 67.6
    GiB): the plan's reserved peak is no more than 10% below it (0.83 before the two loss
    rules; torch.compile is the only setting the flags leave out)."""
    from fractions import Fraction
    a = _table_4(True)
    assert a.ratio >= Fraction(9, 10), (a.run.name, float(a.ratio))


@pytest.mark.xfail(strict=True, reason="a known gap: the same run without async TP reserved "
                   "71.9 GiB, 4.3 GiB more than with it; compile's candidates "
                   "(planning/parallel/titan_compile.py: the compiled block's saved tensors, "
                   "measured, its TP transients, float8's weight casts, async TP's fused "
                   "kernels and workspace) add no byte inside max_memory_reserved at the "
                   "plan's peak, nor does the forward's allocator history replayed (under 1 "
                   "GiB); the cause is not found; the plan is 0.88 (63.3 GiB reserved)")
def test_table_4_row_without_async_tp_within_ten_percent():
    from fractions import Fraction
    a = _table_4(False)
    assert a.ratio >= Fraction(9, 10), (a.run.name, float(a.ratio))


def test_float8_tp_rule_reads_linears_only():
    """A block torchtitan runs as model/'s ops (a GELU MLP: not its Llama) with unfused
    attention: under float8 TP the rule changes what the linears save (the gathered inputs,
    the output projection's and W2's inputs) and nothing the attention core's matmuls save
    (Q, K, the softmax output, V: bf16 as before)."""
    from dataclasses import replace
    from accounting.planning.parallel import stack_memory as SM
    c = replace(_config(), mlp="gelu", name="titan-gelu")
    run = StackRun(get_stack(TORCHTITAN))
    assert SM.implementation(run, c) == "course"
    lo = Layout(4, tp=4, sp=True, global_batch=B, micro_batch=B)
    _, bf16 = SM.ledger_rows(run, c, lo, T, recompute="none")
    _, fp8 = SM.ledger_rows(run, c, lo, T, recompute="none", float8_tp=True)
    was = {r.record.name: r.bytes.at(B) for r in bf16}
    now = {r.record.name: r.bytes.at(B) for r in fp8}
    cast = "(fp8: float8 TP's input cast)"
    # the gathered inputs and W2's (GELU's output): only linears save them, now in fp8
    for n in ("ln1 output", "ln2 output", "GELU output"):
        assert n not in now and now[f"{n} {cast}"] * 2 == was[n], n
    # the output projection's input, saved by the linear only in model/'s attention
    n = "attention-weighted values, heads merged"
    assert now[f"{n} {cast}"] * 2 == was[n]
    for n in ("softmax output", "Q after RoPE", "K after RoPE", "V (heads layout)"):
        assert now[n] == was[n], n


# ---- torch.compile under TP, without and with async TP (titan_compile.py) -------------------
def _compiled() -> dict:
    return _run_measure("titan_compile_measure.py")


@pytest.mark.slow  # a fresh interpreter compiling two blocks on the fake process group: ~30 s
def test_compiled_checkpointed_tp_block_saves_its_input_only():
    """Measured (tests/titan_compile_measure.py): a torchtitan TP block compiled inside its
    checkpoint, as apply_ac then apply_compile run it, saves nothing beyond its input but a
    generator state (torch.get_rng_state()'s bytes: nothing per token), the rule the
    candidates' first row states; its backward graph gathers again. By hand: it recomputes
    the two all-gathers and the attention's reduce-scatter (the second norm reads the sum),
    and each collective's autograd runs its dual on the gradient (a reduce-scatter's
    backward all-gathers, an all-gather's reduce-scatters): 2 + 2 all-gathers, 1 + 2
    reduce-scatters."""
    from collections import Counter
    import titan_compile_measure as TM
    got = _compiled()
    full = got["full"]
    assert full["saved"] == got["rng_state_bytes"] and len(full["tensors"]) == 1
    ag, rs = "all_gather_into_tensor", "reduce_scatter_tensor"
    assert Counter(op for op, _ in full["forward"]) == {ag: 2, rs: 2}
    assert Counter(op for op, _ in full["backward"]) == {ag: 2 + 2, rs: 1 + 2}
    rule = next(x for x in _table_4_candidates(False) if x.name.startswith("saved by"))
    assert rule.bytes == 0 and rule.at_peak
    # without checkpointing the gathered inputs are saved (force_save_collectives: a
    # collective outside a checkpoint region is never recomputed), as the eager rows count
    gathered = [t for t in got["none"]["tensors"] if t[0] == TM.B * TM.T * TM.H * 2]
    assert len(gathered) == 2, got["none"]["tensors"]
    # and the block on local tensors stands for the DTensor one (apply_tp's own plan over
    # torchtitan's modules), compiled where DTensor compiles on this backend (no checkpoint)
    assert got["dtensor_none"] == got["none"]["saved"]


def test_force_save_collectives_spares_checkpointed_ones():
    """The partitioner's rule the measurement follows, read from the installed torch."""
    part = pytest.importorskip("torch._functorch.partitioners")
    src = inspect.getsource(part.force_save_collectives)
    assert 'node.target.namespace == "_c10d_functional"' in src
    assert "and not must_recompute(node)" in src


def test_async_tp_fused_kernels_allocate_the_unfused_bytes():
    """torch's async-TP kernels (what micro_pipeline_tp substitutes) still allocate the whole
    gathered input and the whole partial output, and take their workspace from symmetric
    memory, not from the caching allocator (read from the installed torch)."""
    sm = pytest.importorskip("torch.distributed._symmetric_memory")
    ag = inspect.getsource(sm._fused_all_gather_matmul_impl)
    assert "A_flat = A_shard_flat.new_empty(" in ag and "A_shard_flat.shape[0] * group.size()" in ag
    rs = inspect.getsource(sm._fused_matmul_reduce_scatter_impl)
    assert "stacked_partials = x.new_empty(x.shape[0], B.shape[1]" in rs
    assert "_SymmetricMemory.empty_strided_p2p" in inspect.getsource(sm.get_symm_mem_workspace)
    post = pytest.importorskip("torch._inductor.fx_passes.post_grad")
    assert "micro_pipeline_tp_pass(gm.graph)" in inspect.getsource(post.post_grad_passes)
    cfg = pytest.importorskip("torch._inductor.config")
    assert cfg.reorder_for_compute_comm_overlap is False  # torchtitan 9dec370 leaves it


def _table_4_candidates(async_tp: bool):
    from accounting.cli.titan_compile_table import table_4
    return next(c for name, _, c, _ in table_4() if name.endswith("AsyncTP") == async_tp)


def test_table_4_candidates_by_hand():
    """At Table 4's shape (16 × 8,192 tokens a rank, d_model 8,192, TP 8, float8 TP): the
    two fp8 gathered inputs 2·16·8192·8192·1 = 2 GiB, the two bf16 partial outputs 4 GiB,
    the workspace max(b·T/tp·h·1, 2·b·T/tp·h·2) = 0.5 GiB (async TP only, outside the
    caching allocator); none inside max_memory_reserved at the loss's backward."""
    from accounting.planning.parallel import titan_compile as TC
    G = 2 ** 30
    for async_tp in (False, True):
        c = {x.name.split(" (")[0]: x for x in _table_4_candidates(async_tp)}
        assert c["the two sublayers' gathered inputs"].bytes == 2 * G
        assert c["the two row-parallel partial outputs before their reduce-scatters"].bytes == 4 * G
        ws = c.get("async TP's symmetric-memory workspace")
        assert (ws is not None) == async_tp
        if ws:
            assert ws.bytes == G // 2 and ws.at_peak and not ws.in_reserved
        assert TC.explained(list(c.values())) == 0
        # the transients, by hand: 2 + 4 GiB and the fp8 weights and transposes, 2·(h·(a/tp
        # + 2·g/tp)·d + (a/tp)·d·h + 3·h·(d_ff/tp)) = 2·(8192·10·128 + 8·128·8192 +
        # 3·8192·3584) bytes; with them all live a block's backward stays below the
        # loss's backward, the peak (the plan's moments)
        assert TC.transients(list(c.values())) == 6 * G + 2 * (8192 * 10 * 128 + 8 * 128 * 8192
                                                               + 3 * 8192 * 3584)
    from accounting.cli.titan_compile_table import table_4
    for _, a, cands, block in table_4():
        assert block + TC.transients(cands) < a.allocated and a.moment.startswith("start of")


@pytest.mark.slow  # a fresh interpreter compiling three blocks on the fake process group: ~40 s
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_compiled_tp_block_saves_what_the_plan_keeps(recompute):
    """Measured (tests/titan_compile_measure.py, one TP rank of 4, sequence parallel): what a
    compiled torchtitan block saves under each checkpointing mode, plus its input (the
    measurement leaves it out), equals the plan's per-block bytes under --compile, read off
    the backward's start as tests/test_compile_memory.py does without TP. By hand, what the
    partitioner drops against the eager block: no checkpointing, the SiLU output
    (2·b·T·(d_ff/tp)); per-op SAC, the W2 output (2·b·T·h, its last mm) and the
    reduce-scattered feed-forward output (2·b·(T/tp)·h: saved by the policy's
    reduce_scatter_tensor, read by no backward op); full, nothing but the generator's
    state (torch.get_rng_state's bytes: the recomputed attention's RNG, functionalized)."""
    import titan_compile_measure as TM
    from accounting.planning.parallel.peak import AT_BACKWARD
    got = _compiled()
    measured = got[recompute]["saved"] + 2 * TM.B * (TM.T // TM.TP) * TM.H
    if recompute == "full":
        measured -= got["rng_state_bytes"]
    c = ModelConfig(vocab_size=V, context_length=TM.T, num_layers=2, d_model=TM.H,
                    num_heads=TM.A, num_kv_heads=TM.KV, head_dim=TM.D, d_ff=TM.FF,
                    name="titan-tp")
    lo = Layout(8, tp=TM.TP, dp=2, zero=3, sp=True, global_batch=2 * TM.B,
                micro_batch=TM.B, recompute=recompute)
    plans = [parallel_plan(c, lo, TM.T, precision=PRECISIONS["bf16-mixed"],
                           stack=StackRun(get_stack(TORCHTITAN)), compile=on,
                           # the blocks alone: the compiled loss is test_compiled_whole_loss's
                           compile_components=frozenset({"model"}) if on else None)
             for on in (False, True)]
    at = [next(s.moment_bytes(m, TM.B) for m in s.moments if m.name.startswith(AT_BACKWARD))
          for s in (p.stages[0] for p in plans)]
    assert plans[0].per_layer_activation_bytes + (at[1] - at[0]) // c.num_layers == measured
    b, t, h, f = TM.B, TM.T, TM.H, TM.FF // TM.TP
    assert plans[0].per_layer_activation_bytes - measured == {
        "none": 2 * b * t * f, "selective": 2 * b * t * h + 2 * b * (t // TM.TP) * h,
        "full": 0}[recompute]


def _table_4_forward(blocks: int) -> list:
    """The allocations of Table 4's forward on one rank (16 × 8,192 tokens, d_model 8,192,
    TP 8, float8 TP, full checkpointing), block by block in the order a block's ops make and
    free them (tests/titan_compile_measure.py's block: norm and fp8 cast, fp8 all-gather,
    Q/K/V at 8/1/1 heads, RoPE, repeat_kv's copies, SDPA, wo's fp8 input, its bf16 partial
    output, the reduce-scatter, the residual; then the MLP's): each block keeps its output
    only; then the final norm and the LM head's gathered input (saved by its matmul)."""
    tok, h, f, sh = 16 * 8192, 8192, 28672 // 8, 16 * 8192 // 8 * 8192
    ev = [("+", "x0", 2 * sh)]
    for i in range(blocks):
        def a(n, s, i=i):
            ev.append(("+", f"{i}{n}", s))

        def d(*ns, i=i):
            ev.extend(("-", f"{i}{n}") for n in ns)
        a("n8", sh), a("ag", tok * h), d("n8")
        a("q", tok * 1024 * 2), a("k", tok * 256), a("v", tok * 256)
        a("qr", tok * 1024 * 2), d("q"), a("kr", tok * 256), d("k", "ag")
        a("kx", tok * 1024 * 2), a("vx", tok * 1024 * 2), d("kr", "v")
        a("o", tok * 1024 * 2), a("lse", 16 * 8 * 8192 * 4), d("qr", "kx", "vx")
        a("o8", tok * 1024), d("o", "lse"), a("p", tok * h * 2), d("o8")
        a("rs", 2 * sh), d("p"), a("x1", 2 * sh), d("rs")
        a("m8", sh), a("ag2", tok * h), d("m8"), a("w1", tok * f * 2), a("w3", tok * f * 2)
        d("ag2"), a("h8", tok * f), d("w1", "w3"), a("p2", tok * h * 2), d("h8")
        a("rs2", 2 * sh), d("p2")
        ev.append(("+", f"x{i + 1}", 2 * sh))
        d("rs2", "x1")
    return ev + [("+", "norm", 2 * sh), ("+", "head input", tok * h * 2), ("-", "norm")]


@pytest.mark.parametrize("expandable", [True, False])
def test_forward_history_leaves_little_reserved_at_table_4s_loss(expandable):
    """The likely cause the docs weigh for Table 4's gap, replayed on the allocator's rules
    (_simulate): what the 80 blocks' forward transients, freed, leave reserved and unusable
    at the loss's backward, beyond what the same loss leaves on the saved tensors alone
    (the freed bf16 logits, titan_tp.freed_logits, and the final norm's block beside
    them). With expandable segments (torchtitan's run_train.sh) under 1 GiB, without them
    under 3 GiB: not the 8.9 GiB of the first row's gap, nor the 4.3 GiB between the rows.
    (A block's op order as its eager ops run it: inductor's fusions and buffer reuse would
    change the blocks, not their sizes.)"""
    e = 16 * 8192 * 16032 * 4
    loss = _loss_events(e, True)
    alone = [("+", f"x{i}", 2 * 16 * 1024 * 8192) for i in range(81)] + \
        _table_4_forward(0)[1:] + loss
    allocated, history = _simulate(_table_4_forward(80) + loss, expandable)
    same, without = _simulate(alone, expandable)
    assert allocated == same
    assert 0 <= history - without < (1 if expandable else 3) * 2 ** 30
