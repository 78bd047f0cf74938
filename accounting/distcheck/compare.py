"""The plan of one rank beside what torch.distributed did on it: one row per quantity.

Pure Python (the measurement arrives as a dict), so the comparison can run in the process
that launched the measuring ones.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from accounting.architecture.config import ModelConfig
from accounting.architecture.presets import get_preset
from accounting.planning.memory import get_precision
from accounting.planning.parallel import comms as C
from accounting.planning.parallel import activations as A
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.shards import BLOCK, split
from accounting.planning.parallel.plan import parallel_plan
from accounting.planning.parallel.plan_records import StagePlan
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import DEFAULT_STACK, get_stack

GROUPS = {C.TENSOR: "tp", C.DATA: "dp", C.PIPELINE: "pp", C.EXPERT: "ep", C.EXPERT_DATA: "edp"}


@dataclass(frozen=True)
class Row:
    what: str
    planned: int
    measured: int
    why: str = ""  # where plan and engine differ by design, the reason (then they must match
    #                after it is accounted: `planned` already includes it)

    @property
    def agrees(self) -> bool:
        return self.planned == self.measured


def config_of(model: dict) -> ModelConfig:
    """{"preset": name, **overrides} (e.g. fewer layers of a real shape) or all the fields."""
    if "preset" in model:  # JSON gives lists where the spec keeps tuples (dense_layers, …)
        rest = {k: tuple(v) if isinstance(v, list) else v for k, v in model.items()
                if k != "preset"}
        return get_preset(model["preset"]).with_overrides(**rest)
    return ModelConfig(**model)


def layout_of(case: dict) -> Layout:
    return Layout(case["world"], case["tp"], case["pp"], case["dp"], case.get("ep", 1), case["sp"],
                  case["zero"], case["micro_batch"],
                  case["micro_batch"] * case["micro_batches"] * case["dp"])


def plan_for(case: dict, stage: int = 0, attention_as_run: bool = False) -> StagePlan:
    """The plan of the measured rank: TP fastest in the rank order, then data parallel.

    The suite runs model/'s blocks with the case's attention (naive: its two matmuls), also
    for a stack whose own model runs a fused kernel (torchtitan's Llama: SDPA, planned so by
    StackRun.as_run, whose flash backward recomputes the scores QK^T: 2·B·h·T²·d_k more
    per layer). On the CPU that kernel is not what runs, and FlopCounterMode (torch 2.13,
    utils/flop_counter.py) has no formula for the CPU's
    _scaled_dot_product_flash_attention_for_cpu, so the measured FLOPs are the case's
    attention's: `attention_as_run=False` plans those (the stack record without
    fused_attention); True plans what the stack runs on a GPU."""
    lo = layout_of(case)
    rank = case["rank"]
    tp_rank = rank % case["tp"]
    dp_rank = (rank // case["tp"]) % case["dp"]
    record = get_stack(case.get("stack", DEFAULT_STACK))
    if not attention_as_run:
        record = replace(record, fused_attention=False)
    p = parallel_plan(config_of(case["model"]), lo, case["seq"],
                      precision=get_precision("fp32" if record.torch_engines else "bf16-mixed"),
                      stages=[stage], tp_rank=tp_rank, dp_rank=dp_rank,
                      stack=StackRun(record))
    return p.stages[0]


def activation_rows(case: dict) -> list[A.Row]:
    """The saved tensors of the measured rank (fp32, no recomputation)."""
    return A.rows(split(config_of(case["model"])), layout_of(case), case["seq"],
                  tp_rank=case["rank"] % case["tp"])  # the layout's micro-batch


def compare(measured: dict) -> list[Row]:
    case = measured["case"]
    if case["pp"] > 1:
        return compare_pipeline(measured)
    s = plan_for(case)
    st, m = s.states, measured["state"]
    items = {i.name: i.bytes.at(case["micro_batch"]) for i in s.items}
    rows = [Row("parameter elements", st.params_unpadded, m["param_numel"]),
            Row("parameter bytes (storage)", st.params * 4, m["param_bytes"],
                "FSDP2 pads each shard to ⌈rows/d⌉ rows" if case["zero"] >= 2 and case["dp"] > 1 else "")]
    whole = items.get("embedding grad computed whole (torch DTensor)", 0)
    fsdp = case["zero"] >= 2 and case["dp"] > 1
    # the whole gradient stays as .grad unless FSDP2 takes it, or the tied LM head's sharded
    # gradient is there first (accumulating into it keeps the LM head's placement)
    tied = bool(config_of(case["model"]).tie_embeddings)
    kept = 0 if fsdp or tied else whole
    rows.append(Row("gradient bytes (storage)", st.grads * 4 + kept, m["grad_bytes"],
                    "DTensor computes the vocab-parallel embedding's gradient whole (V × d_model) "
                    "and keeps it as .grad" if kept else
                    "FSDP2 reduce-scatters into one padded buffer per unit" if fsdp else
                    "tied: the embedding's whole gradient is added into the LM head's sharded one"
                    if whole else ""))
    rows.append(Row("AdamW m and v elements", 2 * st.moments, m["moment_numel"]))
    rows.append(Row("AdamW step counters", st.owned_tensors, m["step_counters"]))
    # torchtitan's stack: the plan counts torchtitan's own Llama (the builder's TORCHTITAN
    # implementation in bf16, checked on the CPU by tests/test_stack_implementations.py);
    # this suite runs model/'s blocks under FSDP2's bf16 policy (fp32 buffers such as the
    # RoPE tables promoting what they touch), another model: not compared (measured for
    # Llama 3.1 8B's shape, 2 blocks, T = 32: 16,165,376 bytes saved); its states, bf16
    # all-gathers, fp32 reduce-scatters and FLOPs are compared
    if (measured.get("block_saved_bytes") is not None
            and get_stack(case.get("stack", DEFAULT_STACK)).torch_engines):
        count = dict(s.kinds)  # blocks of each kind (DeepSeek's dense and MoE ones)
        planned = sum(count.get(r.record.repeat, 0) * r.bytes.at(case["micro_batch"])
                      for r in activation_rows(case) if r.place == BLOCK and r.record.saved)
        rows.append(Row("activation bytes the blocks save (saved_tensors_hooks)",
                        planned, measured["block_saved_bytes"]))
    if case.get("ep", 1) > 1:
        rows.append(Row("routed expert parameter elements on this rank",
                        st.expert_numel if case["zero"] < 2 else
                        sum(t.shard(u.group(layout_of(case)), case["rank"] // case["ep"])
                            for u in st.units if u.expert for t in u.tensors),
                        measured["state"]["expert_param_numel"]))
    mb = case["micro_batches"]
    rows.append(Row("matmul FLOPs, forward (FlopCounterMode)", mb * s.flops.forward,
                    measured["flops"]["forward"]))
    rows.append(Row("matmul FLOPs, backward (FlopCounterMode)", mb * s.flops.backward,
                    measured["flops"]["backward"]))
    planned = Counter()
    calls = Counter()
    for c in s.collectives:
        key = (GROUPS[c.group], c.op, c.phase)
        planned[key] += c.bytes
        calls[key] += c.calls
    got = {(c["group"], c["op"], c["phase"]): c for c in measured["collectives"]}
    for key in sorted(set(planned) | set(got)):
        g = got.get(key, {"calls": 0, "bytes": 0})
        name = f"{key[0]} {key[1]} ({key[2]})"
        rows.append(Row(f"{name}: calls", calls[key], g["calls"]))
        rows.append(Row(f"{name}: bytes", planned[key], g["bytes"]))
    hook = sum(c["calls"] for c in measured["collectives"])
    cdm = sum(measured["comm_debug_counts"].values())
    rows.append(Row("collective calls: the hook's vs CommDebugMode's", hook, cdm))
    rows.append(Row("collectives the hook did not recognize", 0, sum(measured["unrecognized"].values())))
    if routed(measured):
        rows = [r for r in rows if not r.what.startswith(ROUTING_DEPENDENT)
                and not (r.what.startswith("ep all-to-all") and r.what.endswith("bytes"))]
    return rows


# Dropless experts on a real routing: what a rank runs and receives follows its router, so
# these are compared over each expert-parallel group (compare_expert_group: their sum is ep
# times the balanced plan, since every row sent is received once); the rest rank by rank.
ROUTING_DEPENDENT = ("activation bytes", "matmul FLOPs")


def routed(measured: dict) -> bool:
    return measured.get("routing") == "real" and measured["case"].get("ep", 1) > 1


def compare_expert_group(group: list[dict]) -> list[Row]:
    """The ranks of one expert-parallel group (ep of them, one case) under real dropless
    routing: matmul FLOPs and all-to-all bytes summed over the group against ep × the plan's
    balanced rank. (Their saved activations are not: the uneven path also saves the index
    that regroups the received rows by expert, as torchtitan's _permute does.)"""
    case = group[0]["case"]
    ep, s = case["ep"], plan_for(case)
    assert len(group) == ep and all(routed(m) for m in group)
    mb = case["micro_batches"]
    rows = [Row("matmul FLOPs, forward, EP group sum", ep * mb * s.flops.forward,
                sum(m["flops"]["forward"] for m in group)),
            Row("matmul FLOPs, backward, EP group sum", ep * mb * s.flops.backward,
                sum(m["flops"]["backward"] for m in group))]
    for phase in ("forward", "backward"):
        planned = sum(c.bytes for c in s.collectives if c.group == C.EXPERT and c.phase == phase)
        got = sum(c["bytes"] for m in group for c in m["collectives"]
                  if (c["group"], c["phase"]) == ("ep", phase))
        rows.append(Row(f"ep all-to-all ({phase}) bytes, EP group sum", ep * planned, got))
    return rows


def compare_pipeline(measured: dict) -> list[Row]:
    """A pipeline stage (rank = stage): its tensors, its matmul FLOPs over the step, and its
    point-to-point messages (1F1B interleaves forward and backward, so both are summed)."""
    case = measured["case"]
    s = plan_for(case, stage=case["rank"])
    st, m = s.states, measured["state"]
    rows = [Row("parameter elements", st.params_unpadded, m["param_numel"]),
            Row("parameter bytes", st.params * 4, m["param_bytes"]),
            Row("gradient bytes", st.grads * 4, m["grad_bytes"]),
            Row("AdamW m and v elements", 2 * st.moments, m["moment_numel"]),
            Row("AdamW step counters", st.owned_tensors, m["step_counters"]),
            Row("matmul FLOPs, forward and backward (FlopCounterMode)",
                case["micro_batches"] * (s.flops.forward + s.flops.backward),
                measured["flops"]["forward and backward"])]
    for op in (C.SEND, C.RECV):
        plan = [c for c in s.collectives if c.op == op]
        got = [c for c in measured["collectives"] if c["op"] == op and c["phase"] == "step"]
        rows.append(Row(f"pp {op}: calls", sum(c.calls for c in plan), sum(c["calls"] for c in got)))
        rows.append(Row(f"pp {op}: bytes", sum(c.bytes for c in plan), sum(c["bytes"] for c in got)))
    rows.append(Row("micro-batches in flight at most (forward done, backward not yet)",
                    s.activations.in_flight, measured["in_flight_peak"]))
    rows.append(Row("micro-batches in flight after the step", 0, measured["in_flight_end"]))
    other = [c for c in measured["collectives"] if c["op"] not in (C.SEND, C.RECV)]
    rows.append(Row("other collectives", 0, sum(c["calls"] for c in other)))
    rows.append(Row("collectives the hook did not recognize", 0, sum(measured["unrecognized"].values())))
    return rows
