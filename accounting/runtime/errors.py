"""Every way a run can end other than with its answer, decided in one place.

UsageError is the one exception bad input and unusable environments raise; `outcome()`
turns any exception that reaches the CLI into (exit status, one line for stderr):

    2    bad input or an unusable environment (UsageError; an output that cannot be
         written: no space, no permission, a closed or broken pipe; out of memory, also as a
         library words it; a warning made an error by PYTHONWARNINGS, -W or a filter)
    128 + N  ended by signal N: 130 Ctrl-C (SIGINT), 143 SIGTERM, 129 SIGHUP (the shells'
         convention, which `timeout`, CI runners and process supervisors read back)
    3    anything else: a bug, reported as one line that names the exception and asks
         for a report (ACCOUNTING_DEBUG=1 re-raises it with its traceback)

Exit status 1 is not decided here: it is the cross-check's disagreement, an answer.
Nothing here imports more than the standard library (accounting/architecture/config.py imports it).
"""
from __future__ import annotations

import errno
import os

MESSAGE_LIMIT = 600  # characters of one stderr line; longer ones are cut in the middle
BUG = 3
BAD_INPUT = 2
INTERRUPTED = 130


class UsageError(ValueError):
    """Bad input from the user: the message names the problem and the fix, in one line."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, raised by accounting.runtime.safe_io's handler (a
    KeyboardInterrupt, so that code which cleans up after Ctrl-C cleans up after it too)."""

    def __init__(self, signum: int = 2):
        super().__init__(signum)
        self.signum = signum


def escape(text: str) -> str:
    """Control characters (newlines, tabs, escape sequences, bidi overrides, zero-width
    marks, Unicode's line and paragraph separators U+2028/U+2029) as visible escapes, so
    that a user's value cannot break a line or restyle a terminal. Which characters: the
    Unicode categories Cc (controls), Cf (format: bidi, zero-width), Zl, Zp (line and
    paragraph separators: str.splitlines and many terminals break on them) and Cs (lone
    surrogates)."""
    if text.isascii() and text.isprintable():
        return text  # the common case, without a look-up per character
    from unicodedata import category  # stdlib; only for text that needs it
    out = []
    for ch in text:
        o = ord(ch)
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif category(ch) in _ESCAPED:
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000
                       else f"\\U{o:08x}")
        else:
            out.append(ch)
    return "".join(out)


_ESCAPED = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def shorten(value, limit: int = 40) -> str:
    """A user's value for a message: repr for non-strings, quoted for strings; control
    characters escaped; cut to `limit` characters with '…'. Never fails (a list nested
    100,000 deep is named by its type)."""
    try:
        text = repr(value) if not isinstance(value, str) else "'" + escape(value) + "'"
    except (RecursionError, ValueError):  # deep nesting; an int past str()'s digit limit
        text = f"<{type(value).__name__}>"
    text = escape(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def shorten_path(path, limit: int = 80) -> str:
    """A path for a message, quoted and escaped like `shorten`, but cut at its start: the
    file's name is the part a user recognises, and a deep folder (pytest's tmp_path, a hub
    cache) would otherwise push it past `limit` and out of the message."""
    text = "'" + escape(str(path)) + "'"
    return text if len(text) <= limit else "'…" + text[-(limit - 2):]


def one_line(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """A message as one line of at most `limit` characters (the middle cut out)."""
    text = escape(message)
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return text[:head] + " … " + text[-(limit - head - 3):]


_OS_FIXES = {
    errno.ENOSPC: "free some space or write elsewhere",
    errno.EDQUOT: "free some space or write elsewhere",
    errno.EACCES: "choose a place you may write to (check the folder's permissions)",
    errno.EPERM: "choose a place you may write to (check the folder's permissions)",
    errno.EROFS: "the file system is read-only; write elsewhere",
    errno.ENAMETOOLONG: "use a shorter name",
    errno.ENOENT: "check the path; its folder must exist",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "give a file name, not a folder",
    errno.EMFILE: "too many open files; close some and retry",
    errno.EIO: "the device reported an input/output error",
}


def os_problem(e: OSError, what: str) -> str:
    """'cannot write X: No space left on device; free some space or write elsewhere'."""
    reason = e.strerror or (str(e) if e.args else "") or e.__class__.__name__
    fix = _OS_FIXES.get(e.errno or 0)
    return f"{what}: {reason}" + (f"; {fix}" if fix else "")


def outcome(exc: BaseException) -> tuple[int, str]:
    """(exit status, one stderr line) for an exception that reached the CLI."""
    if isinstance(exc, UsageError):
        return BAD_INPUT, one_line(f"accounting: error: {exc}")
    if isinstance(exc, KeyboardInterrupt):
        signum = getattr(exc, "signum", 2)
        return 128 + signum, "accounting: interrupted" + ("" if signum == 2 else
                                                          f" ({signal_name(signum)})")
    if isinstance(exc, BrokenPipeError):
        return BAD_INPUT, ("accounting: error: the output's reader went away before it was "
                           "complete (broken pipe)")
    if isinstance(exc, MemoryError) or _out_of_memory(exc):
        return BAD_INPUT, ("accounting: error: out of memory; give smaller sizes (or close "
                           "other programs, or raise the limit: ulimit -v)")
    if isinstance(exc, Warning) and _escalated():
        source, fix = _escalated()
        return BAD_INPUT, one_line(f"accounting: error: {source} turned a warning into an error "
                                   f"({type(exc).__name__}: {_detail(exc, 160)}); {fix} for "
                                   "this run (the warning is a library's, not a problem with "
                                   "the answer)")
    if isinstance(exc, OSError):
        where = f" ({shorten_path(exc.filename)})" if exc.filename else ""
        return BAD_INPUT, one_line("accounting: error: " + os_problem(exc, "operating system "
                                                                      f"error{where}"))
    detail = _detail(exc, 200)
    return BUG, one_line(f"accounting: internal error: {type(exc).__name__}"
                         + (f": {detail}" if detail else "")
                         + ". This is a bug: please report it with the command line "
                           "(ACCOUNTING_DEBUG=1 shows the traceback)")


def _detail(exc: BaseException, limit: int) -> str:
    """str(exc), escaped, cut to `limit` characters ('' when its __str__ fails)."""
    try:
        detail = escape(str(exc))
    except Exception:  # a __str__ that itself fails
        return ""
    return detail if len(detail) <= limit else detail[:limit - 1] + "…"


# How an allocation that failed reads when a library reports it as something other than
# MemoryError (torch's C++ allocator, the dynamic loader mapping a shared library under
# ulimit -v, numpy's import wrapping the loader's error).
_NO_MEMORY = ("failed to map segment from shared object", "cannot allocate memory",
              "can't allocate memory", "std::bad_alloc", "out of memory")


def _out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOMEM
    if not isinstance(exc, (ImportError, RuntimeError)):
        return False
    text = _detail(exc, 10_000).lower()
    return any(s in text for s in _NO_MEMORY)


def _escalated() -> tuple[str, str] | None:
    """(what made warnings errors, its fix), or None if nothing did: the user's
    PYTHONWARNINGS, -W, or a filter their own code set (warnings.simplefilter('error'))."""
    import sys  # stdlib
    import warnings
    env = os.environ.get("PYTHONWARNINGS", "")
    if "error" in env:
        return f"PYTHONWARNINGS={shorten(env, 60)}", "unset PYTHONWARNINGS"
    if any(opt.startswith("error") for opt in sys.warnoptions):
        return "-W error", "drop -W error"
    if any(f[0] == "error" for f in warnings.filters):
        return "a warnings filter set to 'error'", "remove the filter"
    return None


def signal_name(signum: int) -> str:
    """'SIGTERM' for 15 (the number where the platform has no name for it)."""
    import signal  # stdlib
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def debugging() -> bool:
    return bool(os.environ.get("ACCOUNTING_DEBUG"))
