"""pandas views of multi-GPU plans, for notebooks (pandas is imported here only).

    from accounting.planning.parallel import plan_frame, search_frame
    plan_frame("meta-llama/Llama-3.1-8B", gpus=8, tp=8, zero=3, batch=64, gpu="H100")
"""
from __future__ import annotations


import pandas as pd

from accounting.architecture.config import ModelConfig
from accounting.architecture.presets import get_preset
from accounting.planning.gpus import interconnect
from accounting.planning.memory import BF16_MIXED, FP32, get_precision
from accounting.planning.parallel.export import flat_rows, to_dict
from accounting.planning.parallel.layout import Layout, resolve
from accounting.planning.parallel.plan import ParallelPlan, parallel_plan
from accounting.planning.parallel.search import Search, search
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import DEFAULT_STACK, get_stack
from accounting.planning.plan import hardware as _hardware

INT_COLUMNS = ("value",)  # exact Python ints (past 2**63 too)


def _config(c: ModelConfig | str) -> ModelConfig:
    return get_preset(c) if isinstance(c, str) else c


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col in INT_COLUMNS:
        if col in df:
            df[col] = df[col].astype(object)
    return df


def build(config, gpus: int, *, tp: int = 1, pp: int = 1, dp: int | None = None, sp: bool = False,
          zero: int = 0, micro_batch: int = 1, batch: int | None = None, seq: int | None = None,
          recompute: str = "none", precision: str = FP32, gpu: str | None = None,
          mfu="0.5", margin="0", ep: int = 1, stack: str = DEFAULT_STACK, dropout: float = 0.0,
          attention_kernel: str = "flash") -> ParallelPlan:
    """A ParallelPlan from keyword arguments (the CLI's flags; a stack other than torch
    plans in bf16, its own precision)."""
    config = _config(config)
    run = StackRun(get_stack(stack), dropout, attention_kernel)
    p = get_precision(BF16_MIXED if run.stack.bf16 else precision)
    dp = resolve(gpus, tp, pp, dp)
    lo = Layout(gpus, tp, pp, dp, ep, sp, zero, micro_batch,
                batch if batch is not None else dp * micro_batch * pp, recompute)
    hw = _hardware(gpu, compute=p.compute) if gpu else None
    return parallel_plan(config, lo, seq, precision=p, hardware=hw,
                         net=interconnect(gpu) if gpu else None, mfu=mfu, margin=margin,
                         stack=run)


def plan_frame(config_or_plan, gpus: int | None = None, **kwargs) -> pd.DataFrame:
    """One row per memory item, FLOP count and collective of each stage shown, exact integer
    values (dtype object); section tells which."""
    p = config_or_plan if isinstance(config_or_plan, ParallelPlan) else build(config_or_plan, gpus, **kwargs)
    return _frame(flat_rows(to_dict(p)))


def search_frame(config_or_search, gpus: int | None = None, *, batch: int | None = None,
                 seq: int | None = None, recompute: str = "none", precision: str = FP32,
                 gpu: str = "H100", mfu="0.5", margin="0") -> pd.DataFrame:
    """One row per layout of the search, feasible ones first (fastest first), then the
    rejected ones with their reason."""
    if isinstance(config_or_search, Search):
        s = config_or_search
    else:
        config = _config(config_or_search)
        p = get_precision(precision)
        base = Layout(gpus, global_batch=batch or gpus, recompute=recompute)
        s = search(config, base, seq or config.context_length, precision=p,
                   hardware=_hardware(gpu, compute=p.compute), net=interconnect(gpu), mfu=mfu,
                   margin=margin)
    rows = []
    for rank, p in enumerate(s.ranked, 1):
        lo = p.layout
        rows.append({"rank": rank, "tp": lo.tp, "pp": lo.pp, "dp": lo.dp, "ep": lo.ep, "sp": lo.sp,
                     "cp": lo.cp, "virtual_stages": lo.vpp,
                     "zero": lo.sharding, "micro_batch": lo.micro_batch, "fits": True,
                     "memory_bytes": p.memory, "headroom_bytes": p.fit.headroom,
                     "largest_micro_batch": p.fit.largest,
                     "bubble": float(p.bubble), "step_seconds": float(p.step_seconds),
                     "tokens_per_second": float(p.tokens_per_second),
                     "reason": ""})
    for r in s.rejected:
        lo = r.layout
        rows.append({"rank": None, "tp": lo.tp, "pp": lo.pp, "dp": lo.dp, "ep": lo.ep, "sp": lo.sp,
                     "cp": lo.cp, "virtual_stages": lo.vpp, "zero": lo.sharding, "micro_batch": lo.micro_batch, "fits": False,
                     "memory_bytes": None, "headroom_bytes": None, "largest_micro_batch": None,
                     "bubble": None, "step_seconds": None, "tokens_per_second": None,
                     "reason": r.reason + (f" (short by {r.shortfall:,} bytes)" if r.shortfall else "")})
    df = pd.DataFrame(rows)
    df["rank"] = df["rank"].astype("Int64")  # empty for the rejected layouts
    for col in ("memory_bytes", "headroom_bytes"):
        df[col] = df[col].astype(object)
    return df
