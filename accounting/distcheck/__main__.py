"""python -m accounting.distcheck [--json FILE]: run the standard checks (suite.py) and print
plan against measurement, rank by rank; exit 1 on any disagreement."""
from __future__ import annotations

import argparse
import sys
import time

from accounting.distcheck.compare import compare
from accounting.present import output


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m accounting.distcheck", description=__doc__)
    p.add_argument("--json", metavar="FILE", help="also write every measurement here")
    p.add_argument("--only", choices=("fake", "gloo"), help="run one engine family")
    ns = p.parse_args(argv)
    from accounting.distcheck import suite
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
    bad = 0
    for m in measured:
        rows = compare(m)
        wrong = [r for r in rows if not r.agrees]
        bad += len(wrong)
        c = m["case"]
        print(f"{'ok ' if not wrong else 'NO '} rank {c['rank']:>2} of {c['world']}: {c['label']}: "
              f"{len(rows) - len(wrong)}/{len(rows)} quantities agree")
        for r in wrong:
            print(f"      {r.what}: plan {r.planned:,}, torch {r.measured:,}")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
    if ns.json:  # the one output path: JSON without NaN, written whole or not at all
        output.write(output.json_text(measured), ns.json, "--json")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
