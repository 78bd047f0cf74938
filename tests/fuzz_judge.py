"""The exit-status contract as a judge of one run of the CLI (tests/cli_fuzz.py has the
argument space; tests/test_fuzz_cli.py and benchmarks/fuzz_cli.py run it). The contract is
cli_fuzz.py's docstring's. Nothing here imports the package under test."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

HANG_SECONDS = 10.0  # no run may take longer
EXISTING = "out.txt"  # the scratch folder's regular file (cli_fuzz.make_scratch); 'link' -> it
# the user's files no run may delete or change, whatever it is told (issue 32: a report
# swapped its figures/ folder as a whole)
USER_FILES = ("report/figures/my_plot.png",)
HARD_LINKS = ("hardlink", "linked.txt")  # two names of one file (cli_fuzz.make_scratch)
# keys a config may not be answered with (issue 32): a training switch; mixture-of-experts
# keys of the tool's own format without num_experts
MOE_KEYS = ("num_shared_experts", "experts_per_token", "moe_d_ff", "dense_layers")


# ---- the judge ----------------------------------------------------------------------------
ANSWER, DISAGREEMENT, ERROR, INTERRUPTED = ("0 answer", "1 disagreement", "2 clean error",
                                            "128+N interrupted")


@dataclass
class Result:
    rc: int | None  # None: did not finish within the hang bound
    stdout: bytes
    stderr: bytes
    seconds: float
    escaped: str = ""  # in process: an exception that left main() (a traceback in a shell)
    strays: list[str] = field(default_factory=list)  # processes of the run alive after it


@dataclass
class Verdict:
    outcome: str
    defects: list[str] = field(default_factory=list)


def _output_target(argv: list[str]) -> str | None:
    """The -o/--output value the run was given last (argparse keeps the last); distcheck's
    --json (an argv that starts with @distcheck, benchmarks/fuzz_cli.py)."""
    target = None
    if argv[:1] == ["@distcheck"]:
        for i, a in enumerate(argv):
            if a == "--json" and i + 1 < len(argv):
                target = argv[i + 1]
        return target
    for i, a in enumerate(argv):
        if a in ("-o", "--output") and i + 1 < len(argv):
            target = argv[i + 1]
        elif a.startswith("--output="):
            target = a[len("--output="):]
        elif a.startswith("-o") and a not in ("-o",) and not a.startswith("--"):
            target = a[2:].lstrip("=") if a.startswith("-o=") else a[2:]
    return target


def _report_dir(argv: list[str]) -> str | None:
    if not argv or argv[0] != "report":
        return None
    out = "reports"
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            out = argv[i + 1]
        elif a.startswith("--out="):
            out = a[len("--out="):]
    return os.path.normpath(out) if out else out


def _config_path(argv: list[str]) -> str | None:
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--config="):
            return a[len("--config="):]
    return None


def _config_defects(config: bytes | None) -> list[str]:
    """What an answer (exit 0) must not have read from the config.json (issue 32)."""
    import json
    try:
        data = json.loads(config) if config else None
    except (ValueError, RecursionError):
        return []
    if not isinstance(data, dict):
        return []
    inner = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    if data.get("gradient_checkpointing") is True or inner.get("gradient_checkpointing") is True:
        return ["a config with gradient_checkpointing true answered"]
    if "model_type" not in data and data.get("num_experts") is None \
            and any(k in data for k in MOE_KEYS):
        return ["mixture-of-experts keys without num_experts answered"]
    return []


def stderr_lines(err: bytes) -> list[str]:
    """stderr's lines that are not the report's progress lines ('[i/N] ...')."""
    text = err.decode("utf-8", "replace")
    return [line for line in text.splitlines() if line and not line.startswith("[")]


def judge(argv: list[str], result: Result, before: dict, after: dict,
          stdout_ok: bool = True, signum: int | None = None,
          config: bytes | None = None) -> Verdict:
    """The outcome class and every breach of the contract. stdout_ok: the run's stdout
    could take the whole output (False for a closed stdout or a full device); signum: the
    signal the run was sent (exit 128 + signum is its outcome), if any; config: the bytes
    of the scratch folder's config.json."""
    defects = []
    for name in USER_FILES:  # whatever the outcome
        if name in before and before.get(name) != after.get(name):
            defects.append(f"a file the run did not write was deleted or changed: {name}")
    err = result.stderr.decode("utf-8", "replace")
    if result.rc is None:
        return Verdict("hang", [f"no exit within {HANG_SECONDS:g} s"])
    if result.escaped or "Traceback (most recent call last)" in err or "Exception ignored" in err \
            or "frame #" in err:
        defects.append("traceback")
    rc = result.rc
    signalled = 128 + (signum or 2)  # Ctrl-C's 130 when no signal was sent on purpose
    outcome = {0: ANSWER, 1: DISAGREEMENT, 2: ERROR, signalled: INTERRUPTED}.get(rc, f"exit {rc}")
    if rc not in (0, 1, 2, signalled):
        defects.append(f"exit status {rc}")
    if rc == 1 and "DISAGREES" not in err:
        defects.append("exit 1 without a disagreement")
    if rc in (1, 2, signalled) and len(stderr_lines(result.stderr)) != 1 and "traceback" not in defects:
        defects.append(f"{len(stderr_lines(result.stderr))} stderr lines on failure")
    if rc == 0 and not stdout_ok and _output_target(argv) in (None, "-"):
        defects.append("exit 0 though stdout could not take the output")
    target = _output_target(argv)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    if rc != 0:
        if changed:
            defects.append("files changed by a failed run: " + ", ".join(sorted(changed))[:200])
    else:
        allowed = set()
        if _config_path(argv) == "config.json":
            defects += _config_defects(config)
        if target not in (None, "", "-"):
            norm = os.path.normpath(target)
            allowed.add(norm)
            if norm == "link":
                allowed = {EXISTING}
            if norm in HARD_LINKS:  # one file: both names change together
                allowed = set(HARD_LINKS)
                if after.get(norm, (0, 0, "", 1))[3] != 2:
                    defects.append("-o broke a hard link")
            src = _config_path(argv)
            if src and os.path.normpath(src) == norm and before.get(norm) != after.get(norm):
                defects.append("-o overwrote the --config input")
        extra = changed - allowed
        for name in allowed & changed:
            if name in before and before[name][0] != after.get(name, (None,))[0]:
                defects.append(f"-o replaced {name!r} (not a regular file) with another kind of file")
            elif name in before and name in after and before[name][1] != after[name][1]:
                defects.append(f"-o changed the permissions of {name!r}")
        report = _report_dir(argv)
        if report:
            extra = {k for k in extra if k != report and not k.startswith(report + os.sep)}
        if extra:
            defects.append("entries changed beside the -o target: " + ", ".join(sorted(extra))[:200])
        if target == "":
            defects.append("-o '' accepted")
        if "-" in after and "-" not in before:
            defects.append("-o - wrote a file named '-'")
    leftovers = [k for k in set(after) - set(before) if ".tmp" in os.path.basename(k)]
    if leftovers:
        defects.append("temporary entries left behind: " + ", ".join(sorted(leftovers))[:200])
    return Verdict(outcome, defects)
