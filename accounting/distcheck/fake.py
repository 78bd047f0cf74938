"""One rank of a large group on PyTorch's fake process-group backend: nothing is
communicated and, with FakeTensorMode, nothing is allocated, so a real preset runs at 8 to
64 ranks in a few seconds on a CPU. The model is built on the meta device, sharded (TP with
DTensor, then FSDP2), and materialized as fake tensors.

    python -m accounting.distcheck.fake '<Case as JSON>' ...   # prints one JSON per case

Each case runs in its own forked process: DTensor caches sharding decisions per process
(the local shapes of a rank), so a second rank in the same process would reuse the first
one's (measured: a view of an unevenly split LM head then fails on the later rank).
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

from accounting.distcheck.measure import Case, quiet_known_warnings, run_step, state_bytes
from accounting.planning.parallel.stacks import get_stack
from accounting.distcheck.parallelize import (apply_lora, expert_parallel, fully_shard_experts,
                                              fully_shard_model, import_before_fork,
                                              tensor_parallel)


def mesh_for(case: Case):
    if case.tp > 1 and case.dp > 1:
        return init_device_mesh("cpu", (case.dp, case.tp), mesh_dim_names=("dp", "tp"))
    return init_device_mesh("cpu", (case.world,), mesh_dim_names=("tp" if case.tp > 1 else "dp",))


def mp_policy(case: Case):
    """torchtitan's FSDP2 policy (torchtitan/models/llama3/infra/parallelize.py, apply_fsdp:
    MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)); None for torch's."""
    if not get_stack(case.stack).fsdp2_bf16:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def run_case(case: Case) -> dict:
    from model import TransformerLM
    if case.pp != 1 or (case.dp > 1 and case.zero < 2):
        raise ValueError("the fake backend runs FSDP2 and TP (DDP needs real tensors)")
    dist.init_process_group("fake", store=FakeStore(), rank=case.rank, world_size=case.world)
    try:
        config = case.config()
        with torch.device("meta"):
            lm = TransformerLM.from_config(config, context_length=max(case.seq, config.context_length)
                                           if config.positions != "learned" else None)
        if case.lora_rank:
            if case.tp > 1 or case.ep > 1:
                raise ValueError("the fake backend runs LoRA under FSDP2 only")
            apply_lora(lm, case.lora_rank)
        if case.ep > 1:
            groups = _expert_parallel(case, lm, config)
        else:
            mesh = mesh_for(case)
            names = mesh.mesh_dim_names
            groups = {mesh[n].get_group().group_name if len(names) > 1
                      else mesh.get_group().group_name: n for n in names}
            if case.tp > 1:
                tensor_parallel(lm, mesh["tp"] if len(names) > 1 else mesh, case.sp)
            if case.dp > 1:
                fully_shard_model(lm, mesh["dp"] if len(names) > 1 else mesh, case.zero,
                                  mp_policy(case))
        with FakeTensorMode(allow_non_fake_inputs=True):
            lm.to_empty(device="cpu")
            opt = torch.optim.AdamW([p for p in lm.parameters() if p.requires_grad])
            ids = torch.zeros(case.micro_batch, case.seq, dtype=torch.long)
            out = run_step(lm, opt, lambda i: (ids, ids), case.micro_batches, blocks=lm.layers)
            out["state"] = state_bytes(lm, opt)
        for c in out["collectives"]:
            c["group"] = groups.get(c["group"], c["group"])
            if c["group"] == "ep|dp":
                c["group"] = "ep" if c["op"] == "all-to-all" else "dp"
        out["case"] = case.to_json()
        return out
    finally:
        dist.destroy_process_group()


def _expert_parallel(case: Case, lm, config) -> dict:
    """EP groups of ep consecutive ranks inside the dp ones (layout.py), FSDP2 as torchtitan
    (parallelize.fully_shard_experts); the process groups' names -> "dp", "ep", "edp"."""
    if case.tp != 1 or case.dp != case.world or case.zero < 2:
        raise ValueError("the fake backend runs expert parallelism with FSDP2 over all ranks")
    dp_mesh = init_device_mesh("cpu", (case.world,), mesh_dim_names=("dp",))
    em = init_device_mesh("cpu", (case.dp // case.ep, case.ep), mesh_dim_names=("edp", "ep"))
    expert_parallel(lm, em["ep"])
    fully_shard_experts(lm, dp_mesh, em["edp"], case.zero, config.num_experts)
    names = {dp_mesh.get_group().group_name: "dp", em["edp"].get_group().group_name: "edp"}
    # ep = dp: the EP group is the dp ranks (one process group name); its all-to-alls are EP's
    names[em["ep"].get_group().group_name] = "ep|dp" if case.ep == case.dp else "ep"
    return names


def _child(case: Case, conn) -> None:
    from accounting.runtime import fork
    fork.worker_signals()  # Ctrl-C is the parent's to decide; it ends this process with it
    quiet_known_warnings()
    try:
        conn.send(json.dumps(run_case(case)))
    except BaseException as e:  # the parent reports it
        conn.send(json.dumps({"error": f"{type(e).__name__}: {e}"}))
    finally:
        conn.close()


def run_cases(cases: list[Case]) -> list[dict]:
    """Each case in a fresh forked process (one process group, one rank, clean caches)."""
    import multiprocessing as mp

    from accounting.runtime import fork
    ctx = mp.get_context("fork")
    import_before_fork(cases)
    out = []
    for case in cases:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(case, child))
        with fork.signals_held():  # until the child has set its own (fork.worker_signals)
            p.start()
        result = None
        try:
            child.close()
            result = json.loads(parent.recv())
        finally:
            if result is None and p.is_alive():
                p.kill()  # interrupted: the child ends with the run
            p.join()
        if "error" in result:
            raise RuntimeError(f"{case.label or case}: {result['error']}")
        out.append(result)
    return out


def main(argv: list[str]) -> int:
    for result in run_cases([Case(**json.loads(text)) for text in argv]):
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
