"""The tool's answer beside each published run (published_runs.py): the plan's JSON for the
run's flags, its peak per GPU (the figure the source measured: reserved for torchtitan, the
allocated peak for torchtune's active bytes), the ratio answer / measured, and whether the
card it ran on fits it. docs/parallel.md's "Published runs" table is `markdown()`
(accounting/cli/generated.py); `python -m accounting.cli.published_table` prints it, with the
median and worst ratio. On the CLI's floor (each answer is `plan`'s own run, cli/main.py), not
literature's: literature/ sits below cli/ (tests/test_layout.py), as cli/serve_answers.py."""
from __future__ import annotations

import contextlib
import io
import json
import statistics
from dataclasses import dataclass
from fractions import Fraction

from accounting.literature.published_runs import MAX_CTX, OOM, RAN, RESERVED, RUNS, Run
from accounting.units import GiB

@dataclass(frozen=True)
class Answer:
    run: Run
    allocated: int  # bytes per GPU, the worst GPU's allocated peak
    reserved: int  # the caching allocator's segments at that moment
    fits: bool | None  # the verdict on the card it ran on (None: no card known)
    moment: str
    longest: int | None = None  # one GPU: the plan's longest context at the run's batch
    capacity: int | None = None  # one GPU: the card's bytes the verdict is against

    @property
    def compared(self) -> int:
        """The tool's figure of the kind the source measured."""
        return self.reserved if self.run.metric == RESERVED else self.allocated

    @property
    def ratio(self) -> Fraction | None:
        if self.run.measured_gib is None:
            return None
        return Fraction(self.compared, GiB) / self.run.measured_gib

    @property
    def context_ratio(self) -> Fraction | None:
        """A max-context row (MAX_CTX): the plan's longest context / the one that ran."""
        if self.run.max_ctx is None or self.longest is None:
            return None
        return Fraction(self.longest, self.run.max_ctx)


def answer(run: Run) -> Answer:
    from accounting.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", run.model, *run.flags, "--format", "json"])
    if code != 0:
        raise RuntimeError(f"{run.name}: the plan exited {code}: {err.getvalue().strip()}")
    d = json.loads(out.getvalue())
    if "memory_per_gpu_bytes" in d:  # many GPUs
        fit = d.get("fit")
        allocated, reserved = d["memory_per_gpu_bytes"], d["memory_per_gpu_reserved_bytes"]
        fits = None if not fit else fit["shortfall_bytes"] == 0
        return Answer(run, allocated, reserved, fits, d.get("peak_moment") or "")
    peak = d["peak"]
    fits = None if d.get("fit") is None else peak["peak_bytes"] <= d["fit"]["usable_bytes"]
    moment = max(peak["moments"], key=lambda m: m["bytes"])["name"]
    return Answer(run, peak["peak_bytes"], peak["reserved_bytes"], fits, moment,
                  (d.get("fit") or {}).get("longest_context"),
                  (d.get("fit") or {}).get("capacity_bytes"))


def answers() -> list[Answer]:
    return [answer(r) for r in RUNS.values()]


def summary(rows: list[Answer]) -> tuple[Fraction, Fraction, Fraction]:
    """(median ratio, lowest ratio, highest ratio) over the runs."""
    ratios = [a.ratio for a in rows if a.ratio is not None]
    return statistics.median(ratios), min(ratios), max(ratios)


def _gib(n) -> str:
    return f"{float(Fraction(n) / GiB):.1f}"


def _ratio_cell(a: Answer) -> str:
    if a.context_ratio is not None:  # a max-context row: the plan's longest context / T ran
        return f"{float(a.context_ratio):.2f} (longest T {a.longest:,})"
    return "—" if a.ratio is None else f"{float(a.ratio):.2f}"


def _verdict(a: Answer) -> str:
    verdict = {None: "no verdict", True: "fits", False: "does NOT fit"}[a.fits]
    if a.run.metric == OOM:  # where the source ran out of memory: the plan's longest context
        asked = int(a.run.flags[a.run.flags.index("--ctx") + 1])
        verdict += f" at T {asked:,}; longest T {a.longest:,}" if a.longest \
            else f" at T {asked:,}; not even T 1"
    return verdict


def context_summary(rows: list[Answer]) -> str:
    """Unsloth's Hugging Face + FA2 column (MAX_CTX, OOM): a sentence of its own, so that the
    peak ratios' summary keeps meaning tool / measured peak."""
    ran = [a for a in rows if a.run.metric == MAX_CTX]
    oom = [a for a in rows if a.run.metric == OOM]
    if not ran:
        return ""
    r = [a.context_ratio for a in ran]
    # the run's peak at the context that ran fit its card (measured <= card), so the plan's
    # reserved / the card is a lower bound of tool / measured for these rows
    low = [Fraction(a.reserved, a.capacity) for a in ran]
    return (f" Of the {len(ran)} Hugging Face + FA2 QLoRA runs of Unsloth's table (the longest "
            f"context that ran on a card, no memory published), the plan says "
            f"{sum(1 for a in ran if a.fits)} fit at the context that ran; its own longest "
            f"context over the one that ran: median {float(statistics.median(r)):.2f}, lowest "
            f"{float(min(r)):.2f}, highest {float(max(r)):.2f}; its reserved bytes at the "
            f"context that ran over the card's (a lower bound of tool / measured, the run's "
            f"peak having fit the card): median {float(statistics.median(low)):.2f}, lowest "
            f"{float(min(low)):.2f}, highest {float(max(low)):.2f}. Of the {len(oom)} cells that ran "
            f"out of memory, it says {sum(1 for a in oom if a.fits is False)} do not fit at the "
            "column's smallest context.")


def markdown() -> str:
    rows = answers()
    out = ["| run | settings the flags leave out | measured (GiB) | tool, allocated / reserved "
           "(GiB) | tool / measured | the card it ran on |",
           "| --- | --- | ---: | ---: | ---: | --- |"]
    for a in rows:
        r = a.run
        measured = "—" if r.measured_gib is None else f"{float(r.measured_gib):.1f}"
        out.append(f"| {r.name} | {', '.join(r.unexpressed) or '—'} | {measured} "
                   f"({r.metric}) | {_gib(a.allocated)} / {_gib(a.reserved)} | "
                   f"{_ratio_cell(a)} | {r.card}: {_verdict(a)} |")
    med, lo, hi = summary(rows)
    out.append("")
    ran = [a for a in rows if a.run.metric == RAN]
    peaks = [a for a in rows if a.run.measured_gib is not None]
    out.append(f"{len(rows)} runs from {len({a.run.stack for a in rows})} stacks; tool / measured "
               f"over the {len(peaks)} with a published peak (reserved against "
               f"torchtitan's reserved, allocated against torchtune's active): median "
               f"{float(med):.2f}, lowest {float(lo):.2f}, highest {float(hi):.2f}. Of the "
               f"{len(ran)} that ran with no memory published, the plan says "
               f"{sum(1 for a in ran if a.fits)} fit on the card they ran on."
               + context_summary(rows))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown())
