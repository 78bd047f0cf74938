"""Any optimizer and precision in the many-GPU plans (issue 30, item 2), against torch.

ZeRO-1: torch.distributed.optim.ZeroRedundancyOptimizer on PyTorch's fake process-group
backend (one rank of 4 in this process: the broadcasts are no-ops, the partition and the
local optimizer are torch's own), wrapping each real optimizer class (SGD with momentum,
Adafactor, bitsandbytes' AdamW8bit, AdamW) over model.TransformerLM; after one real step
the bytes of the local optimizer's state (storages counted once) equal the plan's
optimizer items for that data-parallel rank. FSDP2: fully_shard on the fake backend,
SGD's momentum buffers on every rank's shards. The master copy of bf16-master is the
optimizer's fp32 copy of the tensors the rank updates (DeepSpeed's / Megatron-LM's
layout: formula checked by hand).
"""
import multiprocessing as mp
import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402  (imported before the ranks fork: quick ranks)
from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402
from test_optimizers_reality import build, real_state, step  # noqa: E402

from accounting.planning.memory import get_precision
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.plan import parallel_plan
from accounting.cli.main import main

WORLD = 4
HERE = os.path.dirname(os.path.abspath(__file__))
KW = {"sgd": dict(lr=0.1, momentum=0.9), "adafactor": {}, "adamw": {}, "adamw8bit": {}}


def _classes(name):
    if name == "adamw8bit":
        bitsandbytes = pytest.importorskip("bitsandbytes")
        return bitsandbytes.optim.AdamW8bit
    return {"sgd": torch.optim.SGD, "adafactor": torch.optim.Adafactor,
            "adamw": torch.optim.AdamW}[name]


def _zero1_rank(args):
    name, rank, out = args
    try:
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=WORLD)
        try:
            model = build()
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=_classes(name),
                                          **KW[name])
            step(model, [opt])
            per, seen, counts, steps = real_state([opt.optim], model)
            out.put((rank, sum(seen.values()), len(steps)))
        finally:
            dist.destroy_process_group()
    except BaseException as e:  # the parent reports it (not a 120 s wait on an empty queue)
        out.put((rank, f"{type(e).__name__}: {e}"))


def _measure(fn, name):
    # one process group per process; forkserver, not fork: a process forked from a pytest
    # worker can hang on threads (or a process group) that earlier tests left in it, where
    # the fork server is a clean process that has imported torch once, and what each rank
    # would import again: this module (the rank's function is pickled by reference), with
    # test_optimizers_reality, accounting and model/ (about 1.4 s of CPU), and bitsandbytes
    # (1.6 s): imported once there, not in each of the 16 ranks. The fork server imports them
    # from its own path: this folder is put on it (PYTHONPATH while it starts; a module it
    # cannot import is left to the ranks, as before).
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "bitsandbytes", __name__])
    q = ctx.Queue()
    procs = [ctx.Process(target=fn, args=((name, r, q),)) for r in range(WORLD)]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE] + ([old] if old else []))
    try:
        procs[0].start()  # (the fork server starts with the first rank, if not yet running)
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    for p in procs[1:]:
        p.start()
    got = dict((r, rest) for r, *rest in (q.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(60)
    return got


def _planned(layout, rank, name, precision="fp32"):
    from test_optimizers_reality import SMALL
    plan = parallel_plan(SMALL, layout, 8, precision=get_precision(precision), dp_rank=rank,
                         optimizer=name)
    items = plan.stages[0].items
    state = sum(i.bytes.c for i in items if i.model_state and not
                i.name.startswith(("parameters", "gradients", "fp32 master")))
    counters = [i for i in items if "step counters" in i.name]
    return state, (counters[0].bytes.c // 4 if counters else 0)


# four forked ranks each (about 10 s on one core for Adafactor: marked slow, not skipped)
@pytest.mark.parametrize("name", ["sgd", pytest.param("adafactor", marks=pytest.mark.slow),
                                  "adamw8bit", "adamw"])
def test_zero1_state_per_rank_equals_zero_redundancy_optimizer(name):
    _classes(name)  # imported here, before the fork
    got = _measure(_zero1_rank, name)
    lo = Layout(WORLD, dp=WORLD, zero=1, micro_batch=1, global_batch=WORLD)
    for rank in range(WORLD):
        state, counters = _planned(lo, rank, name)
        # bitsandbytes keeps its step as a Python int (no tensor): no counters either side
        assert not isinstance(got[rank][0], str), got[rank][0]  # the rank's error
        assert got[rank] == [state, counters], (rank, got[rank], state, counters)


def test_bf16_master_shards_the_master_copy_with_the_moments():
    """By hand: bf16 parameters and gradients (2 + 2 bytes an element, replicated under
    ZeRO-1) and the fp32 master copy beside AdamW's fp32 m and v (4 + 4 + 4 bytes an element
    of the tensors this rank owns): the ZeRO paper's 2 + 2 + K/N_d with K = 12."""
    from test_optimizers_reality import SMALL
    lo = Layout(WORLD, dp=WORLD, zero=1, micro_batch=1, global_batch=WORLD)
    plan = parallel_plan(SMALL, lo, 8, precision=get_precision("bf16-master"), dp_rank=0)
    items = {i.name: i.bytes.c for i in plan.stages[0].items}
    n = sum(t.numel for u in plan.stages[0].states.units for t in u.tensors)
    assert items["parameters (bf16)"] == items["gradients (bf16)"] == 2 * n
    mine = items["fp32 master copy of the parameters (optimizer)"]
    assert items["AdamW moments: first moment m (fp32)"] == mine == 4 * plan.stages[0].states.moments


def test_fsdp_sgd_momentum_is_one_adamw_moment_per_shard():
    """Under FSDP2 SGD's momentum buffer is clone(grad) of the rank's local shard: as many
    fp32 elements as one AdamW moment (the moment shards are measured on FSDP2 by
    accounting/distcheck), on every rank of an uneven split."""
    from test_optimizers_reality import SMALL
    lo = Layout(3, dp=3, zero=3, micro_batch=1, global_batch=3)
    for rank in range(3):
        sgd, adamw = (parallel_plan(SMALL, lo, 8, precision=get_precision("fp32"),
                                    dp_rank=rank, optimizer=o).stages[0] for o in ("sgd", "adamw"))
        a = {i.name: i.bytes.c for i in adamw.items}
        s = {i.name: i.bytes.c for i in sgd.items}
        assert s["optimizer state: SGD momentum buffer (fp32)"] == \
            a["AdamW moments: first moment m (fp32)"] == 4 * adamw.states.moments


def test_refusals_are_one_line(capsys):
    for args in (["--optimizer", "muon", "--zero", "3"], ["--optimizer", "adafactor", "--fsdp"],
                 ["--optimizer", "muon", "--zero", "1"]):
        assert main(["plan", "gpt2-small", "--gpus", "8", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not modelled" in err[0]


def test_the_update_flops_are_the_optimizers_on_the_rank_s_tensors():
    """AdamW through the registry gives step.py's own count (14 per element, 1 per tensor:
    the update FLOPs measured by tests/test_optimizers_reality.py); SGD's is 4 per element
    of the same tensors, no per-tensor term."""
    from test_optimizers_reality import SMALL
    lo = Layout(WORLD, dp=WORLD, zero=1, micro_batch=1, global_batch=WORLD)
    from accounting.planning.parallel.optimizer_state import update_flops
    a, s = (parallel_plan(SMALL, lo, 8, precision=get_precision("fp32"), dp_rank=1,
                          optimizer=o).stages[0] for o in ("adamw", "sgd"))
    units = list(a.states.units)
    assert update_flops(units, lo, a.states, "adamw") == a.flops.adamw == \
        14 * a.states.moments + a.states.owned_tensors
    assert s.flops.adamw == 4 * a.states.moments


def test_bf16_parameters_send_bf16_activations():
    """With bf16 parameters (no autocast) the residual stream is bf16: the pipeline's
    receive buffers hold m·b·T·d_model·2 bytes — gpt2-small, 8 GPUs as tp 2 × pp 2 × dp 2,
    global batch dp·b·pp = 4, so m = 2 micro-batches of b = 1 on stage 0 (gradients from
    the next stage only): 2·1·1,024·768·2 = 3,145,728 (fp32: twice that)."""
    import io
    import json
    from contextlib import redirect_stdout

    def receive(precision):
        out = io.StringIO()
        with redirect_stdout(out):
            main(["plan", "gpt2-small", "--gpus", "8", "--tp", "2", "--pp", "2", "--precision",
                  precision, "--format", "json"])
        items = json.loads(out.getvalue())["stages"][0]["items"]
        return next(i["bytes"] for i in items if i["name"] == "pipelining receive buffers")
    assert receive("bf16") == receive("bf16-master") == 2 * 1 * 1024 * 768 * 2
    assert receive("fp32") == 2 * 1 * 1024 * 768 * 4
