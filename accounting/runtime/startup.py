"""Ctrl-C while `python -m accounting` (or the `accounting` console script) starts.

Before accounting.cli.main.main installs its handling (accounting/runtime/safe_io.py), the package
itself is imported: a Ctrl-C then would print a KeyboardInterrupt traceback. This module,
imported first by accounting/__init__.py, ends such a run quietly with status 130 instead.
Python sets sys.argv[0] to '-m' only while it imports the package it runs as a module, and
the console script is a file named 'accounting': `import accounting` anywhere else (a
notebook, the tests) changes no signal handling. An ignored SIGINT (a background job)
stays ignored. What no program can handle: a Ctrl-C inside the interpreter's own start-up
(site), before any of this runs.
"""
import os
import signal
import sys


def _interrupted(signum, frame):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.stderr is not None:
        sys.stderr.write("accounting: interrupted\n")
    raise SystemExit(130)


def _is_the_cli() -> bool:
    main = sys.modules.get("__main__")
    return sys.argv[:1] == ["-m"] or \
        os.path.basename(getattr(main, "__file__", None) or "") == "accounting"


if _is_the_cli() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted)
