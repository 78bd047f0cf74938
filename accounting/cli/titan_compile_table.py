"""The table of planning/parallel/titan_compile.py's candidates at torchtitan's Table 4
(docs/parallel.md, "Published runs"; the generated block "titan-compile-tp"): rendering
only, the bytes come from titan_compile.candidates, the gaps from published_table.answer."""
from __future__ import annotations

from accounting.architecture.config import ModelConfig

_GIB = 2 ** 30


def _flag(run, name: str) -> int:
    return int(run.flags[run.flags.index(name) + 1])


def _block_moment(run) -> int:
    """The plan's allocated bytes at a block's backward (its recomputed activations live)."""
    import contextlib
    import io
    import json
    from accounting.cli.main import main
    from accounting.planning.parallel.peak import AT_BLOCK_BACKWARD
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["plan", run.model, *run.flags, "--format", "json"])
    moments = json.loads(out.getvalue())["stages"][0]["moments"]
    return next(m["bytes"] for m in moments if m["name"].startswith(AT_BLOCK_BACKWARD))


def table_4() -> list:
    """(row name, its Answer, its candidates, the plan's allocated bytes at a block's
    backward) for Table 4's two rows."""
    from accounting.cli.published_table import answer
    from accounting.literature import published_runs as PR
    from accounting.planning.parallel import titan_compile as TC
    out = []
    for name, run in PR.RUNS.items():
        if not name.startswith("torchtitan Table 4"):
            continue
        h, a = _flag(run, "--d-model"), _flag(run, "--num-heads")
        c = ModelConfig(vocab_size=128256, context_length=_flag(run, "--ctx"),
                        num_layers=_flag(run, "--num-layers"), d_model=h, num_heads=a,
                        num_kv_heads=_flag(run, "--num-kv-heads"), d_ff=_flag(run, "--d-ff"),
                        name=name)
        cands = TC.candidates(c, _flag(run, "--micro-batch"), _flag(run, "--ctx"),
                              _flag(run, "--tp"), fp8_gather="fp8-torchao" in run.flags,
                              async_tp="--async-tp" in run.flags)
        out.append((name.split(": ", 1)[1], answer(run), cands, _block_moment(run)))
    return out


def markdown() -> str:
    from accounting.planning.parallel import titan_compile as TC
    rows = table_4()
    lines = ["| candidate (per rank, one compiled block) | GiB | live at the loss's backward "
             "| inside max_memory_reserved | under async TP |", "| --- | ---: | --- | --- | --- |"]
    for x in max((r[2] for r in rows), key=len):
        lines.append(f"| {x.name} | {x.bytes / _GIB:.2f} | {'yes' if x.at_peak else 'no'} | "
                     f"{'yes' if x.in_reserved else 'no'} | {x.async_tp} |")
    lines.append("")
    for row, a, cands, block in rows:
        # the plan's reserved figure, as torch's, counts only the caching allocator's
        # segments: async TP's workspace is outside them (in the allocated peak and verdict)
        outside = sum(x.bytes for x in cands if x.at_peak and not x.in_reserved)
        ours = a.reserved / _GIB
        note = f" (and {outside / _GIB:.1f} GiB of symmetric memory outside it)" if outside else ""
        lines.append(f"{row}: measured {float(a.run.measured_gib):.1f} GiB, plan "
                     f"{ours:.1f} GiB reserved{note}, gap "
                     f"{float(a.run.measured_gib) - ours:.1f} GiB; the candidates explain "
                     f"{TC.explained(cands) / _GIB:.1f} GiB of it. A block's backward: "
                     f"{block / _GIB:.1f} GiB allocated, {TC.transients(cands) / _GIB:.1f} "
                     f"GiB more with every transient above live at once, "
                     f"{(a.allocated - block - TC.transients(cands)) / _GIB:.1f} GiB below "
                     f"the loss's backward.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
