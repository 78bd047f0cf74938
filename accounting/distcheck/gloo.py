"""A real process group: N CPU processes on gloo train a tiny model/ for a few steps, each
rank measuring its last step (accounting/distcheck/measure.py).

Engines, one per sharding stage and parallelism the planner describes:
  ddp       DistributedDataParallel (ZeRO-0), gradient accumulation with no_sync; its
            all-reduce goes through a comm hook (DDP's own API) so that the dispatcher sees it
  zero1     ZeroRedundancyOptimizer over DDP (ZeRO-1)
  fsdp      FSDP2 fully_shard (ZeRO-2/3), optionally on a (dp, tp) mesh with DTensor TP/SP
  pipeline  torch.distributed.pipelining: the model traced and split into pp stages
            (pipeline(), SplitPoint), run by Schedule1F1B

    run_group(cases) -> one measurement dict per case and rank
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from accounting.distcheck.measure import Case, quiet_known_warnings, run_step, state_bytes

# Steps before the measured one: DDP rebuilds its buckets at the start of its second step
# (broadcasting their layout), so its third step is the steady one; the others settle after one.
WARMUP = {"ddp": 2, "fsdp": 1, "pipeline": 1}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batches(case: Case, config, rank_seed: int):
    g = torch.Generator().manual_seed(rank_seed)
    return [(torch.randint(0, config.vocab_size, (case.micro_batch, case.seq), generator=g),
             torch.randint(0, config.vocab_size, (case.micro_batch, case.seq), generator=g))
            for _ in range(case.micro_batches)]


def _model(config, seed: int = 0):
    from model import TransformerLM
    torch.manual_seed(seed)
    return TransformerLM.from_config(config)


def _ddp(case: Case, config, rank: int) -> dict:
    from contextlib import ExitStack

    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    lm = _model(config)
    if case.lora_rank:  # PEFT's LoRA, the base frozen: DDP reduces the adapters' gradients
        from accounting.distcheck.parallelize import apply_lora
        apply_lora(lm, case.lora_rank)
    ddp = DDP(lm)
    ddp.register_comm_hook(dist.group.WORLD, allreduce_hook)
    if case.zero == 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW)
    else:
        opt = torch.optim.AdamW([p for p in ddp.parameters() if p.requires_grad])
    data = _batches(case, config, rank)
    sync = ExitStack()

    def accumulate(i: int) -> None:
        """no_sync for every micro-batch but the last: one all-reduce per step."""
        sync.close()
        if i < case.micro_batches - 1:
            sync.enter_context(ddp.no_sync())
    for _ in range(WARMUP["ddp"]):
        opt.zero_grad(set_to_none=True)
        for i, (ids, tgt) in enumerate(data):
            accumulate(i)
            torch.nn.functional.cross_entropy(ddp(ids).flatten(0, 1), tgt.flatten()).backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    out = run_step(ddp, opt, lambda i: data[i], case.micro_batches, accumulate, lm.layers)
    out["state"] = state_bytes(lm, opt.optim if case.zero == 1 else opt)
    world = dist.group.WORLD.group_name
    for c in out["collectives"]:
        c["group"] = "dp" if c["group"] == world else c["group"]
    return out


def _fsdp(case: Case, config, rank: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    from accounting.distcheck.parallelize import fully_shard_model, tensor_parallel
    if case.ep > 1:
        return _fsdp_experts(case, config, rank)
    if case.tp > 1:
        mesh = init_device_mesh("cpu", (case.dp, case.tp), mesh_dim_names=("dp", "tp"))
        tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
    else:
        dp_mesh, tp_mesh = init_device_mesh("cpu", (case.world,), mesh_dim_names=("dp",)), None
    lm = _model(config)
    if tp_mesh is not None:
        tensor_parallel(lm, tp_mesh, case.sp)
    if case.dp > 1:
        fully_shard_model(lm, dp_mesh, case.zero)
    opt = torch.optim.AdamW(lm.parameters())
    data = _batches(case, config, rank // case.tp)  # TP ranks see the same data
    from accounting.distcheck.measure import backward, loss_of
    for _ in range(WARMUP["fsdp"]):
        opt.zero_grad(set_to_none=True)
        for ids, tgt in data:
            backward(loss_of(lm(ids), tgt))
        opt.step()
    opt.zero_grad(set_to_none=True)
    out = run_step(lm, opt, lambda i: data[i], case.micro_batches, blocks=lm.layers)
    out["state"] = state_bytes(lm, opt)
    groups = {}
    if tp_mesh is not None:
        groups[tp_mesh.get_group().group_name] = "tp"
    groups[dp_mesh.get_group().group_name] = "dp"
    for c in out["collectives"]:
        c["group"] = groups.get(c["group"], c["group"])
    return out


def _fsdp_experts(case: Case, config, rank: int) -> dict:
    """FSDP2 with expert parallelism (parallelize.expert_parallel, fully_shard_experts): EP
    groups of ep consecutive ranks, the experts' FSDP2 units over the dp/ep ranks that hold
    the same experts."""
    from torch.distributed.device_mesh import init_device_mesh

    from accounting.distcheck.measure import backward, loss_of
    from accounting.distcheck.parallelize import expert_parallel, fully_shard_experts
    dp_mesh = init_device_mesh("cpu", (case.world,), mesh_dim_names=("dp",))
    em = init_device_mesh("cpu", (case.dp // case.ep, case.ep), mesh_dim_names=("edp", "ep"))
    lm = _model(config)  # the same weights on every rank; each keeps its experts' slice
    expert_parallel(lm, em["ep"])
    fully_shard_experts(lm, dp_mesh, em["edp"], case.zero, config.num_experts)
    opt = torch.optim.AdamW(lm.parameters())
    data = _batches(case, config, rank)
    for _ in range(WARMUP["fsdp"]):
        opt.zero_grad(set_to_none=True)
        for ids, tgt in data:
            backward(loss_of(lm(ids), tgt))
        opt.step()
    opt.zero_grad(set_to_none=True)
    out = run_step(lm, opt, lambda i: data[i], case.micro_batches, blocks=lm.layers)
    out["state"] = state_bytes(lm, opt)
    # dropless on real data, each rank runs the rows its router sent it (compare.py)
    out["routing"] = "real" if config.moe_capacity_factor is None else "capacity"
    groups = {dp_mesh.get_group().group_name: "dp", em["ep"].get_group().group_name: "ep",
              em["edp"].get_group().group_name: "edp"}
    for c in out["collectives"]:
        c["group"] = groups.get(c["group"], c["group"])
    return out


def _traced(case: Case, config):
    """The model traced and split into case.pp stages (torch.distributed.pipelining.pipeline:
    torch.export of the whole model), the same on every rank (the same seeded model)."""
    from itertools import accumulate

    from torch.distributed.pipelining import SplitPoint, pipeline

    from accounting.planning.parallel.layout import split_layers
    lm = _model(config)
    # the planner's split: even, or one layer fewer on the first and last stage (Llama 3's)
    starts = list(accumulate(split_layers(config.num_layers, case.pp)))[:-1]
    split = {f"layers.{start}": SplitPoint.BEGINNING for start in starts}
    return pipeline(lm, mb_args=(_batches(case, config, 0)[0][0],), split_spec=split)


# case index -> its _traced pipe, made by run_group before it forks the ranks, which inherit
# it: one trace (about 1.7 s of CPU) instead of one in each rank. A pure speed-up: each rank
# builds its stage from the trace it made itself before.
_TRACED: dict = {}


def _pipeline(case: Case, config, rank: int, pipe=None) -> dict:
    from torch.distributed.pipelining import Schedule1F1B

    from accounting.distcheck.hooks import Collectives, LocalFlopCounter
    data = _batches(case, config, 0)
    pipe = _traced(case, config) if pipe is None else pipe
    stage = pipe.build_stage(rank, torch.device("cpu"))
    module = stage.submod

    def loss_fn(logits, targets):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    schedule = Schedule1F1B(stage, case.micro_batches, loss_fn=loss_fn)
    ids = torch.cat([d[0] for d in data])
    targets = torch.cat([d[1] for d in data])
    opt = torch.optim.AdamW(module.parameters())
    first, last = rank == 0, rank == case.pp - 1

    def one_step():
        opt.zero_grad(set_to_none=True)
        args = (ids,) if first else ()
        kw = {"target": targets} if last else {}
        schedule.step(*args, **kw)
    for _ in range(WARMUP["pipeline"]):
        one_step()
        opt.step()
    flight = {"live": 0, "peak": 0}

    def forward_done(module, args, output):
        flight["live"] += 1
        flight["peak"] = max(flight["peak"], flight["live"])

    def backward_done(module, grad_input, grad_output):
        flight["live"] -= 1
    hooks = [module.register_forward_hook(forward_done),
             module.register_full_backward_hook(backward_done)]
    rec = Collectives()
    with rec, LocalFlopCounter() as fc:
        rec.phase = "step"
        one_step()
        rec.phase = "optimizer step"
        opt.step()
    for h in hooks:
        h.remove()
    by: dict = {}
    for c in rec.calls:
        k = ("pp", c.op, c.phase)
        n, b = by.get(k, (0, 0))
        by[k] = (n + 1, b + c.bytes)
    return {"flops": {"forward and backward": fc.get_total_flops()},
            "collectives": [{"group": g, "op": o, "phase": p, "calls": n, "bytes": b}
                            for (g, o, p), (n, b) in sorted(by.items())],
            "comm_debug_counts": {}, "unrecognized": dict(rec.unknown),
            "state": state_bytes(module, opt), "in_flight_peak": flight["peak"],
            "in_flight_end": flight["live"]}


ENGINES = {"ddp": _ddp, "fsdp": _fsdp, "pipeline": _pipeline}


def engine_of(case: Case) -> str:
    if case.pp > 1:
        return "pipeline"
    if case.dp > 1 and case.zero <= 1:
        return "ddp"
    return "fsdp"


def _worker(rank: int, world: int, port: int, cases: list[dict], out_dir: str) -> None:
    from accounting.runtime import fork
    fork.worker_signals()  # Ctrl-C is the parent's to decide; it ends this process with it
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    quiet_known_warnings()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for i, c in enumerate(cases):
            case = Case(**{**c, "rank": rank})
            engine = engine_of(case)
            result = _pipeline(case, case.config(), rank, _TRACED.get(i)) \
                if engine == "pipeline" else ENGINES[engine](case, case.config(), rank)
            result["case"] = case.to_json()
            Path(out_dir, f"{i}-{rank}.json").write_text(json.dumps(result))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def run_group(cases: list[Case]) -> list[dict]:
    """Run every case on one gloo group of cases[0].world processes; each rank's result."""
    world = cases[0].world
    assert all(c.world == world for c in cases)
    from accounting.runtime import fork
    if any(c.lora_rank for c in cases):  # (else nothing more is imported here)
        from accounting.distcheck.parallelize import import_before_fork
        import_before_fork(cases)
    # (_model seeds torch, the trace warns as the ranks' work does: this process's state kept)
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        quiet_known_warnings()
        _TRACED.update({i: _traced(c, c.config()) for i, c in enumerate(cases)
                        if engine_of(c) == "pipeline"})
    with tempfile.TemporaryDirectory() as d:
        # fork: the children start with torch already imported (spawn re-imports it in each);
        # with the signals held until each has set its own (fork.worker_signals), so that
        # a Ctrl-C to the group is the parent's alone (was: each rank printed the CLI's
        # 'interrupted' line too, issue 23)
        with fork.signals_held():
            group = mp.start_processes(_worker, args=(world, _port(), [c.to_json() for c in cases],
                                                      d), nprocs=world, start_method="fork",
                                       join=False)
        try:
            while not group.join():
                pass
        finally:
            _end(group.processes)
            _TRACED.clear()
        return [json.loads(Path(d, f"{i}-{r}.json").read_text())
                for i in range(len(cases)) for r in range(world)]


def _end(processes) -> None:
    """Each rank still running (the parent was interrupted, or another rank failed) killed
    and waited for."""
    for p in processes:
        if p.is_alive():
            p.kill()
    for p in processes:
        p.join()
