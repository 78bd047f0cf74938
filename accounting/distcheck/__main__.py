"""python -m accounting.distcheck [--json FILE]: run the standard checks (suite.py) and print
plan against measurement, rank by rank; exit 1 on any disagreement.

It keeps the CLI's exit-status contract (accounting/runtime/errors.py): the --json target is
checked before any work (as -o is: never a folder, a device, a FIFO or a path whose folder
does not exist) and written whole or not at all; Ctrl-C, SIGTERM and SIGHUP end the run with
128 + N and one line, the worker processes (accounting/distcheck/gloo.py, fake.py) ending with
it, silently.
"""
from __future__ import annotations

import sys
import time

from accounting.tables import output
from accounting.runtime import safe_io
from accounting.runtime.errors import UsageError


def parser():
    from accounting.cli.args import EXIT_STATUS, Parser
    p = Parser(prog="python -m accounting.distcheck", description=__doc__.split("\n\n")[0],
               epilog=EXIT_STATUS)
    p.add_argument("--json", metavar="FILE", help="also write every measurement here (- for "
                   "standard output: the JSON alone there, the text lines on stderr)")
    p.add_argument("--only", choices=("fake", "gloo"), help="run one engine family")
    return p


def run(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    # before any work (a run takes about 25 s); --json - (or /dev/stdout): standard output
    # holds the JSON alone, and the text goes to stderr (was: both on stdout, issue 32)
    json_on_stdout = ns.json is not None and safe_io.output_target(ns.json, "--json") is None
    from accounting.runtime.optional import missing
    absent = missing(alternative="")  # (an address-space limit too low for torch: UsageError, exit 2)
    if absent:
        raise UsageError(f"distcheck needs {absent}, which is not importable; install it "
                         "(pip install -e .)")
    from accounting.distcheck import suite
    from accounting.distcheck.compare import compare
    measured, seconds = [], {}
    if ns.only != "fake":  # fork the gloo workers before this process does anything else
        from accounting.distcheck.gloo import run_group
        t = time.perf_counter()
        measured += run_group(list(suite.GLOO))
        seconds["gloo"] = time.perf_counter() - t
    if ns.only != "gloo":
        from accounting.distcheck.fake import run_cases
        t = time.perf_counter()
        measured += run_cases(list(suite.FAKE))
        seconds["fake"] = time.perf_counter() - t
    bad, lines = 0, []
    for m in measured:
        rows = compare(m)
        wrong = [r for r in rows if not r.agrees]
        bad += len(wrong)
        c = m["case"]
        lines.append(f"{'ok ' if not wrong else 'NO '} rank {c['rank']:>2} of {c['world']}: "
                     f"{c['label']}: {len(rows) - len(wrong)}/{len(rows)} quantities agree")
        lines += [f"      {r.what}: plan {r.planned:,}, torch {r.measured:,}" for r in wrong]
    lines.append("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
    if json_on_stdout:
        for line in lines:
            safe_io.say(line)
    else:
        output.write("\n".join(lines) + "\n", None)
    if ns.json is not None:  # the one output path: JSON without NaN, written whole or not at all
        output.write(output.json_text(measured), ns.json, "--json")
    if bad:
        safe_io.say(f"accounting: distcheck DISAGREES with torch on {bad} quantities (the NO "
                    "lines above)")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Every way the run can end is an exit status (accounting/runtime/errors.py)."""
    return safe_io.decided(run, sys.argv[1:] if argv is None else list(argv), process=argv is None)


if __name__ == "__main__":
    safe_io.end_process(main())
