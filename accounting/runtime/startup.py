"""Ctrl-C (or SIGTERM, SIGHUP) while `python -m accounting` (or the `accounting` console
script) starts.

Before accounting.cli.main.main installs its handling (accounting/runtime/safe_io.py), the package
itself is imported: a Ctrl-C then would print a KeyboardInterrupt traceback, and a SIGTERM
or SIGHUP would kill the process (exit −N). This module, imported first by
accounting/__init__.py, ends such a run with one line and status 128 + N instead.
Python sets sys.argv[0] to '-m' only while it imports the package it runs as a module, and
the console script is a file named 'accounting': `import accounting` anywhere else (a
notebook, the tests) changes no signal handling. An ignored signal (a background job's
SIGINT, nohup's SIGHUP) stays ignored. What no program can handle: a Ctrl-C inside the interpreter's own start-up
(site), before any of this runs.
"""
import os
import signal
import sys


def _interrupted(signum, frame):
    for s in _SIGNALS:  # one message, however many arrive
        signal.signal(s, signal.SIG_IGN)
    if sys.stderr is not None:
        name = "" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"
        sys.stderr.write(f"accounting: interrupted{name}\n")
    raise SystemExit(128 + signum)


def _is_the_cli() -> bool:
    main = sys.modules.get("__main__")
    return sys.argv[:1] == ["-m"] or \
        os.path.basename(getattr(main, "__file__", None) or "") == "accounting"


# the signals a run ends on (safe_io.HANDLED once main() runs): SIGTERM and SIGHUP too, so a
# `kill` or a closed terminal during the imports is exit 128 + N with one line, not death
# by the signal (the fuzz harness saw SIGTERM there end a run with -15)
_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
_DEFAULTS = {signal.SIGINT: signal.default_int_handler}

if _is_the_cli():
    for _s in _SIGNALS:
        if signal.getsignal(_s) is _DEFAULTS.get(_s, signal.SIG_DFL):  # ignored stays ignored
            signal.signal(_s, _interrupted)
