"""Input and output that fail as decisions, not accidents.

* `write_stdout(text)`: the answer on standard output in whatever encoding it has (× and ·
  spelled x and * where the encoding cannot hold them), a closed or broken stdout, or a full
  device, as a UsageError (exit 2).
* `output_target(path)`: what `-o` may name, checked before any work: '-' is stdout; an
  existing regular file (through symbolic links) or a new name in an existing folder; never
  a folder, a device, a FIFO or a socket (writing one would replace it with a file).
* `write_atomic(path, data)`: the whole file or nothing, with the old file's permissions;
  an interrupted or failed write leaves the old file as it was and no temporary entry.
* `read_small_file(path, ...)`: a config file, refused when it is not a regular file (a FIFO
  or a device would block or never end) or larger than a config can be.
* `terminal_width()`: the columns to fit text to (a terminal, or COLUMNS), else None.
* `handling_signals()` (around a CLI run): SIGINT, SIGTERM and SIGHUP raise Interrupted;
  `critical()`: a section Ctrl-C cannot cut in two: they are held until it ends (then
  raised); `interrupted()` tells whether one arrived at all, even if some library
  swallowed the KeyboardInterrupt (nothing is published after one).
"""
from __future__ import annotations

import codecs
import contextlib
import errno
import os
import re
import signal
import stat
import sys
from pathlib import Path
from collections.abc import Callable
from typing import NoReturn

from accounting.runtime import temp_names
from accounting.runtime.in_place import same_file, write_in_place  # noqa: F401 (same_file: cli/args.py)
from accounting.runtime.errors import (Interrupted, UsageError, debugging, os_problem, outcome,
                                       shorten)

# ---- spelling for encodings without × and · -----------------------------------------------
ASCII_SPELLINGS = {
    "·": "*", "×": "x", "÷": "/", "−": "-", "—": "--", "–": "-", "…": "...", "≈": "~",
    "≤": "<=", "≥": ">=", "≠": "!=", "≪": "<<", "≫": ">>", "∝": "~", "←": "<-", "→": "->",
    "√": "sqrt", "Σ": "sum", "Π": "prod", "§": "S", "µ": "u", "β": "beta", "ε": "eps",
    "θ": "theta", "λ": "lambda", "π": "pi", "ᵀ": "^T", "ᵗ": "^t", "₀": "_0", "₁": "_1",
    "₂": "_2", "‖": "||", "’": "'", "‘": "'", "“": '"', "”": '"', "•": "*", "°": " deg",
}
_SUPERSCRIPTS = {"⁰": "0", "¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6",
                 "⁷": "7", "⁸": "8", "⁹": "9"}


def ascii_spelling(text: str) -> str:
    """× -> x, · -> *, d² -> d^2, 10¹² -> 10^12, é -> e, anything else -> ?"""
    out, prev_sup = [], False
    for ch in text:
        if ch in _SUPERSCRIPTS:
            out.append(("" if prev_sup else "^") + _SUPERSCRIPTS[ch])
            prev_sup = True
            continue
        prev_sup = False
        if ord(ch) < 128:
            out.append(ch)
        elif ch in ASCII_SPELLINGS:
            out.append(ASCII_SPELLINGS[ch])
        else:
            import unicodedata
            plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
            out.append(plain or "?")
    return "".join(out)


def _spell(exc: UnicodeEncodeError):
    # A run of superscripts only gets its '^' once, also when it starts mid-run.
    start = exc.start
    prefix_sup = start > 0 and exc.object[start - 1] in _SUPERSCRIPTS
    text = ascii_spelling(exc.object[exc.start:exc.end])
    if prefix_sup and text.startswith("^"):
        text = text[1:]
    return text, exc.end


codecs.register_error("accounting-ascii", _spell)


def encodable(text: str, stream) -> str:
    """text as the stream's encoding can hold it (ASCII spellings for the rest)."""
    encoding = getattr(stream, "encoding", None)
    if not encoding or codecs.lookup(encoding).name == "utf-8":
        return text
    try:
        text.encode(encoding)
        return text
    except UnicodeEncodeError:
        return text.encode(encoding, "accounting-ascii").decode(encoding)
    except LookupError:
        return ascii_spelling(text)


# ---- standard output and error -------------------------------------------------------------
def _detach_stdout() -> None:
    """After stdout failed: point fd 1 at /dev/null so that the interpreter's final flush
    of whatever is still buffered cannot fail again ('Exception ignored ...', exit 120)."""
    try:
        fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def _write_all(out, text: str) -> None:
    """Write every byte: with PYTHONUNBUFFERED the binary layer is the raw file, whose
    write() may take part of the bytes (a pipe whose reader left) and say so only in its
    return value, which TextIOWrapper drops; so the bytes go through a loop here."""
    buf, encoding = getattr(out, "buffer", None), getattr(out, "encoding", None)
    if buf is None or not encoding:
        out.write(text)
        out.flush()
        return
    out.flush()
    data = memoryview(text.encode(encoding, getattr(out, "errors", None) or "strict"))
    while data:
        n = buf.write(data)
        if n is None:  # a non-blocking stdout that is full
            raise BlockingIOError(errno.EAGAIN, "standard output would block")
        data = data[n:]
    buf.flush()


def write_stdout(text: str) -> None:
    out = sys.stdout
    if out is None:
        raise UsageError("standard output is closed; redirect it (> FILE) or give -o FILE")
    try:
        _write_all(out, encodable(text, out))
    except BrokenPipeError:
        _detach_stdout()
        raise UsageError("the output's reader went away before it was complete (broken pipe)") from None
    except OSError as e:
        _detach_stdout()
        raise UsageError(os_problem(e, "cannot write standard output")) from None
    except ValueError:  # "I/O operation on closed file"
        raise UsageError("standard output is closed; redirect it (> FILE) or give -o FILE") from None


def say(line: str) -> None:
    """One line on stderr, best effort (a closed stderr is not an error of its own)."""
    err = sys.stderr
    if err is None:
        return
    try:
        err.write(encodable(line, err) + "\n")
        err.flush()
    except (OSError, ValueError):
        pass


MIN_WIDTH, MAX_WIDTH = 40, 1000


def terminal_width() -> int | None:
    """Columns to fit text to: COLUMNS when it is set to a number, else the terminal's when
    stdout is one; None when stdout is a file or a pipe (full lines: byte-stable output)."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return max(MIN_WIDTH, min(int(cols), MAX_WIDTH))
    try:
        if sys.stdout is not None and sys.stdout.isatty():
            import shutil
            return max(MIN_WIDTH, min(shutil.get_terminal_size().columns, MAX_WIDTH))
    except (AttributeError, OSError, ValueError):
        pass
    return None


# ---- -o targets ------------------------------------------------------------------------------
_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK:
          "a block device", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket"}


# Names of this process's standard output: -o /dev/stdout writes there as '-' does (was,
# on a pipe: 'a symbolic link to a file that does not exist', issue 23)
STDOUT_NAMES = frozenset(("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"))


def output_target(path: str | None, flag: str = "-o") -> Path | None:
    """The file -o names, checked before any work; None means standard output."""
    if path is None or path == "-":
        return None
    if path == "":
        raise UsageError(f"{flag} '' names no file; give a file name, or - for standard output")
    shown = shorten(path, 80)
    if "\x00" in path:
        raise UsageError(f"{flag} {shown} contains a NUL character")
    if path in STDOUT_NAMES:  # the process's own standard output, whatever it is (a pipe)
        return None
    target = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    if os.path.islink(path) and not target.exists():
        if re.match(r"/proc/[^/]+/fd/", str(target)):
            # /dev/stderr, /dev/fd/N on a pipe: was 'a link to a file that does not exist'
            raise UsageError(f"{flag} {shown} is an open stream of this process (a pipe or a "
                             "socket), not a file; give a file name, or - for standard output")
        raise UsageError(f"{flag} {shown} is a symbolic link to a file that does not exist "
                         f"({shorten(str(target), 80)}); give the file itself")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UsageError(os_problem(e, f"cannot write {flag} {shown}")) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        hint = "give a file name inside it" if stat.S_ISDIR(st.st_mode) else \
            "give a regular file (writing would replace it with one), or - for standard output"
        raise UsageError(f"{flag} {shown} is {kind}; {hint}")
    if st is not None and not os.access(target, os.W_OK):  # replacing it would defeat that
        raise UsageError(f"{flag} {shown} is read-only; make it writable or give another name")
    if path.endswith(os.sep):
        raise UsageError(f"{flag} {shown} ends with '{os.sep}' (a folder); give a file name")
    folder = target.parent
    try:
        fst = os.stat(folder)
    except FileNotFoundError:
        raise UsageError(f"cannot write {flag} {shown}: folder {shorten(str(folder), 80)} does "
                         f"not exist; create it first") from None
    except OSError as e:
        raise UsageError(os_problem(e, f"cannot write {flag} {shown}")) from None
    if not stat.S_ISDIR(fst.st_mode):
        raise UsageError(f"cannot write {flag} {shown}: {shorten(str(folder), 80)} is not a folder")
    if len(os.fsencode(target.name)) > _name_max(folder):
        raise UsageError(f"cannot write {flag} {shown}: the file name is longer than the file "
                         f"system allows ({_name_max(folder)} bytes); use a shorter name")
    return target


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def write_atomic(path: str | Path, data: str | bytes, flag: str = "-o") -> None:
    """Write the whole file or nothing: a temporary file beside the target, flushed to
    disk, given the old file's permissions, then renamed over it. Ctrl-C is held for the
    few milliseconds this takes; one that arrives before the rename abandons the write.
    A target with other hard links, or another owner than this process (root writing a
    user's file), is written in place once the temporary file is complete, so that the
    links and the owner stay (a rename would make a new file: issue 32)."""
    target = output_target(str(path), flag)
    if target is None:
        write_stdout(data if isinstance(data, str) else data.decode("utf-8"))
        return
    import tempfile  # (imported here: the analytic CLI's start-up is counted in ms)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    shown = shorten(str(path), 80)
    tmp = None
    with critical() as held:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode) if target.exists() else _default_mode()
            stem = temp_names.stem(target, _name_max(target.parent))
            temp_names.remove_stale(target.parent, stem)
            fd, tmp = tempfile.mkstemp(prefix=f"{stem}{os.getpid()}-",
                                       suffix=temp_names.SUFFIX, dir=target.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            if held() or _state.seen:  # Ctrl-C before the rename (also one a library
                raise Interrupted(held() or _state.seen)  # swallowed): the old file stays
            old = os.stat(target) if target.exists() else None
            if old is not None and (old.st_nlink > 1 or (old.st_uid, old.st_gid)
                                    != (os.geteuid(), os.getegid())):
                write_in_place(target, payload)  # (the temporary file was complete)
                os.unlink(tmp)
            else:
                os.replace(tmp, target)
            tmp = None
            held.committed()
        except OSError as e:
            raise UsageError(os_problem(e, f"cannot write {flag} {shown}")) from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def _default_mode() -> int:
    """A new file's permissions: 0o666 less the umask (what open() would give it)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def emit(text: str, output: str | None) -> None:
    """The CLI's output: stdout, or -o FILE atomically."""
    if output is None or output == "-":
        write_stdout(text)
    else:
        write_atomic(output, text)


# ---- input files ------------------------------------------------------------------------------
def read_small_file(path: str | Path, what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. Opened without blocking, then
    checked: a FIFO would wait for a writer forever, /dev/zero would never end."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{what} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{what} is a folder, not a file") from None
    except OSError as e:
        raise UsageError(os_problem(e, f"cannot read {what}")) from None
    except ValueError:  # a NUL in the path (only from code: argv cannot hold one)
        raise UsageError(f"{what}: the path contains a NUL character") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{what} is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise UsageError(f"{what} is {kind}; give a regular file")
        if st.st_size > limit:
            raise UsageError(f"{what} has {st.st_size:,} bytes; a config file has at most "
                             f"{limit:,}")
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = None
            data = f.read(limit + 1)
    except OSError as e:
        raise UsageError(os_problem(e, f"cannot read {what}")) from None
    finally:
        if fd is not None:
            os.close(fd)
    if len(data) > limit:
        raise UsageError(f"{what} has more than {limit:,} bytes; a config file has at most {limit:,}")
    return data


# ---- Ctrl-C ------------------------------------------------------------------------------------
class _Signals:
    depth = 0  # nesting of critical sections
    pending = 0  # a signal number held inside one
    seen = 0  # the last signal received at all (for interrupted())
    done = False  # the run's output is committed: what is left is finishing


_state = _Signals()
# the signals a run ends on, each with exit status 128 + its number (errors.outcome)
HANDLED = tuple(getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s))


def _handler(signum, frame):
    _state.seen = signum
    if _state.done:  # too late to stop anything: the run ends with its own status
        return
    if _state.depth:
        _state.pending = _state.pending or signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def handling_signals(process_exit: bool = False):
    """For the CLI's run: SIGINT, SIGTERM and SIGHUP raise Interrupted (SIGTERM too, so that
    a `kill` or a CI timeout cleans up like Ctrl-C; SIGHUP, so that a closed terminal or ssh
    session does too: unhandled, it ended the run on the spot, issue 23); an inherited
    SIG_IGN stays (nohup). With
    process_exit (the run is the whole process), they are ignored from the end of the run
    on, so that one arriving while the interpreter shuts down (torch's take a moment)
    cannot turn a decided exit status into a KeyboardInterrupt traceback. A no-op outside
    the main thread."""
    old = {s: signal.getsignal(s) for s in HANDLED}
    old_hook = sys.unraisablehook
    _state.depth = _state.pending = _state.seen = 0
    _state.done = False

    def unraisable(info):  # Ctrl-C inside a finalizer: noted (seen), not a traceback
        if isinstance(info.exc_value, KeyboardInterrupt):
            return
        old_hook(info)
    try:
        for s, h in old.items():
            if h is not signal.SIG_IGN:  # ignored stays ignored (a background job, nohup)
                signal.signal(s, _handler)
    except ValueError:  # not the main thread: signals stay as they are
        yield
        return
    try:
        sys.unraisablehook = unraisable
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, signal.SIG_IGN if process_exit else
                          h if h is not None else signal.SIG_DFL)
        sys.unraisablehook = old_hook


def decided(run: Callable[[list[str]], int], argv: list[str], process: bool = False) -> int:
    """run(argv) under handling_signals, every way it can end an exit status: an exception
    becomes errors.outcome's (status, one line on stderr); argparse's own exits (--help) keep
    0 or 2. process: the run is the whole process (handling_signals' process_exit).
    ACCOUNTING_DEBUG=1 re-raises what would be exit 3, with its traceback."""
    with handling_signals(process_exit=process):
        try:
            return run(argv)
        except SystemExit as e:  # --help and --version exit through argparse
            code = e.code if isinstance(e.code, int) else 0
            return code if code in (0, 2) else 2
        except BaseException as e:
            if interrupted() and not isinstance(e, (UsageError, KeyboardInterrupt)):
                # a library turned Ctrl-C into its own exception (torch can): it is the
                # interrupt that ended the run
                e = Interrupted(interrupted())
            if debugging() and not isinstance(e, (UsageError, KeyboardInterrupt)):
                raise
            status, line = outcome(e)
            say(line)
            return status


def end_process(status: int) -> NoReturn:
    """End the process with `status`, the CLI's last act (accounting/cli/main.py, run).

    Where torch was imported (the cross-check), with os._exit after flushing stdout and
    stderr: the interpreter's teardown of torch (finalizing its thousands of modules,
    Python's collections over their objects) takes about 1 s on a 2-core machine, a
    quarter of a verified run, and there is nothing left for it to do. Every output file
    is whole and closed by then (write_atomic), every worker process waited for or
    killed (accounting/runtime/fork.py, the report's pool), and the atexit handlers registered by
    then are logging's flush (the CLI logs nothing), multiprocessing's (no pool is left)
    and torch's statistics dumps (off unless asked for). Elsewhere the interpreter ends
    as usual: its teardown is quick without torch."""
    if "torch" not in sys.modules:
        sys.exit(status)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a failed stdout was reported (and status set) before
            pass
    os._exit(status)


class _Held:
    """What a critical section sees of the signals held in it."""

    def __call__(self) -> int:
        """The signal held so far (0: none)."""
        return _state.pending

    def committed(self) -> None:
        """The section's work is done and published: a signal held until now, or one that
        comes while the run finishes, came too late to stop it; the run ends with its own
        status, as if the signal had come after it."""
        _state.pending = 0
        _state.done = True


class critical:
    """Hold SIGINT/SIGTERM/SIGHUP inside (`with critical() as held:`): `held()` is the held signal
    (0: none), for code that must abandon its work before a commit point; `held.committed()`
    after the commit drops it. On leaving, a held signal is raised as Interrupted unless an
    exception is already on its way out (that one ends the run the same way)."""

    def __enter__(self) -> _Held:
        _state.depth += 1
        return _Held()

    def __exit__(self, exc_type, exc, tb):
        _state.depth -= 1
        if _state.depth == 0 and _state.pending:
            signum, _state.pending = _state.pending, 0
            if exc_type is None:
                raise Interrupted(signum)
        return False


def interrupted() -> int:
    """The signal received since handling_signals() began (0: none), even one whose
    KeyboardInterrupt a library caught and dropped."""
    return _state.seen


__all__ = ["ASCII_SPELLINGS", "ascii_spelling", "encodable", "write_stdout", "say", "terminal_width",
           "output_target", "write_atomic", "emit", "read_small_file", "handling_signals",
           "critical", "interrupted", "decided", "end_process"]
