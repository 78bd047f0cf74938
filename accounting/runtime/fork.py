"""Run one function in a forked child process while this one goes on; its result comes back.

Why a fork: the counters that run the model on the meta device share nothing but the
built model, and fvcore's jit trace is the longest of them. A child forked after torch is
imported and the model built inherits both (and torch's lazy imports, paid once) and
traces on the second core while the parent runs the dispatch counters. The result is
pickled through a pipe; an exception raised in the child is raised again in the parent,
with the child's traceback as a note.

Only where fork is safe and useful: Linux, at least two usable CPUs. Elsewhere callers
run the same function in-process (same result, one core).
"""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import NoReturn

# Ctrl-C, a hang-up and `kill` are the parent's to decide: a terminal sends SIGINT (and,
# when it closes, SIGHUP) to the whole foreground process group, workers included, and a
# worker that inherited the CLI's handler (accounting/runtime/safe_io.py: raise
# Interrupted) printed its own traceback, or multiprocessing's, beside the parent's one
# line. So workers are forked with these signals blocked, and start by ignoring SIGINT and
# SIGHUP (the parent, interrupted, ends them) and taking SIGTERM's default action
# (Pool.terminate ends them without a word). A worker whose parent dies (SIGKILL, a crash)
# is killed by the kernel at once (worker_signals: PR_SET_PDEATHSIG): left running, the
# report's pool workers finished their check seconds later and printed BrokenPipeError
# tracebacks into the terminal the run had left (issue 23).
_SIGNALS = tuple(getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s))
_IGNORED = tuple(s for s in _SIGNALS if s != signal.SIGTERM)
_forker = os.getpid()  # in a forked child: the process that forked it (die_with_parent)


def _note_forker() -> None:
    global _forker
    _forker = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_note_forker)  # every fork: os.fork, multiprocessing's, torch's


@contextlib.contextmanager
def signals_held():
    """SIGINT, SIGTERM and SIGHUP blocked in this thread while worker processes are forked
    (a child starts with its parent's mask, so none can reach a child before
    worker_signals()); one that came meanwhile is delivered here when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def worker_signals() -> None:
    """A forked worker's first act: SIGINT and SIGHUP ignored, SIGTERM its default (the
    process ends), death with its parent (die_with_parent), then the three unblocked (one
    pending since the fork is taken now, by these rules); and torch on one thread
    (single_threaded)."""
    for s in _IGNORED:
        signal.signal(s, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    single_threaded()


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """Linux: SIGKILL to this process when the thread that forked it ends (prctl(2),
    PR_SET_PDEATHSIG); at once if that happened before this call (the parent is no longer
    the one that forked: the orphan was re-parented). Elsewhere nothing: the parent still
    ends its workers on every path it survives (Pool.terminate, Streamed._end)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc symbol: the parent's own clean-up remains
        return
    if os.getppid() != _forker:
        os._exit(1)


def single_threaded() -> None:
    """torch's intra-op parallelism off in a forked child. A parent that ran CPU tensors
    started torch's OpenMP thread pool, and GNU OpenMP's pool does not survive fork: the
    child's first parallel CPU op (a matmul of transformers' shrunk experts,
    crosscheck/hf_experts.py) waits forever for threads that only the parent has
    (tests/test_crosscheck_workers.py). With one thread torch runs every op inline. The
    workers count on the meta device, or run tiny CPU models: one thread is what they
    need, and each worker is one of the cores anyway."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available() -> bool:
    """Whether a forked worker can run beside this process: Linux (fork is unsafe on
    macOS, absent on Windows), two or more usable CPUs, and not switched off by
    ACCOUNTING_WORKERS=0 (benchmarks and tests compare both ways)."""
    if os.environ.get("ACCOUNTING_WORKERS", "").strip() == "0":
        return False
    return sys.platform.startswith("linux") and hasattr(os, "fork") and usable_cpus() >= 2


class Forked:
    """`with Forked(fn, *args) as child: ...; value = child.result()`: a Streamed child
    whose generator yields fn(*args) once. The child exits with os._exit (no atexit
    handlers, no flushing of the parent's buffers); leaving the block ends it."""

    def __init__(self, fn: Callable, *args):
        self._child = Streamed(_once, fn, args)

    def __enter__(self) -> "Forked":
        self._child.__enter__()
        return self

    def result(self):
        """The child's return value (waits for it), or its exception raised here."""
        for value in self._child:
            return value
        self._child.__exit__(None, None, None)
        raise RuntimeError(f"the worker process ended without a result "
                           f"(wait status {self._child.status})")

    def __exit__(self, *exc) -> None:
        self._child.__exit__(*exc)


def _once(fn: Callable, args: tuple):
    yield fn(*args)


class Streamed:
    """`with Streamed(gen, *args) as child: for item in child: ...`: a forked child runs the
    generator gen(*args) and each item it yields comes back as soon as it is yielded
    (pickled through a pipe, one frame each); an exception raised in the child is raised
    again here, its traceback as a note. Leaving the block ends the child with SIGTERM
    (gen's finally blocks run there: a child that runs a pool ends it), then SIGKILL if
    it has not ended within `grace` seconds."""

    def __init__(self, gen: Callable, *args, grace: float = 5.0):
        self.gen, self.args, self.grace = gen, args, grace
        self.pid: int | None = None
        self.file = None
        self.status: int | None = None  # the child's wait status, once waited for

    def __enter__(self) -> "Streamed":
        read, write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            with signals_held():
                pid = os.fork()
                if pid == 0:
                    _child(read, write, self.gen, self.args)  # never returns
                os.close(write)
                self.pid, self.file = pid, os.fdopen(read, "rb")
        except BaseException:
            self._end()
            raise
        return self

    def __iter__(self):
        while True:
            try:
                ok, value, text = pickle.load(self.file)
            except EOFError:
                return
            if ok is None:  # the generator is done
                return
            if not ok:
                value.add_note(f"in the worker process:\n{text}")
                raise value
            yield value

    def _end(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        try:
            done, self.status = os.waitpid(pid, os.WNOHANG)
            if done:
                return  # it had ended
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + self.grace
            while time.monotonic() < deadline:
                done, self.status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return
                time.sleep(0.005)
            os.kill(pid, signal.SIGKILL)
            _, self.status = os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    def __exit__(self, *exc) -> None:
        self._end()


_ending = False  # in a forked child: SIGTERM was taken, or the child is ending anyway


def _terminated(signum, frame):
    """A child's SIGTERM: SystemExit, at most once, and only while the generator streams
    (its finally blocks run); a no-op once the child is ending."""
    global _ending
    if not _ending:
        _ending = True
        raise SystemExit(128 + signum)


def _child(read: int, write: int, gen: Callable, args: tuple) -> NoReturn:
    """A forked child's whole life. It shares its parent's stack, so nothing may return or
    raise out of here into the caller's code (a second process would run it on: seen as
    a pytest worker that cloned itself): every path ends in os._exit. SIGTERM raises
    SystemExit at most once (_terminated), and wherever it lands before `_ending` is set
    it is inside the try below; after it, none can come, so the generator's cleanup and
    the exit run whole (tests/test_crosscheck_workers.py makes the signal land late)."""
    global _ending
    code, items = 1, None
    try:
        try:
            os.close(read)
            worker_signals()
            signal.signal(signal.SIGTERM, _terminated)  # the generator's finally blocks run
            items = gen(*args)
            code = _stream(write, items)
        finally:
            _ending = True
    except BaseException:  # noqa: BLE001 (SIGTERM's SystemExit; a closed pipe: the parent has gone)
        code = 1
    try:
        if items is not None:
            items.close()  # its finally blocks, wherever it was suspended
    finally:
        os._exit(code)


def _stream(write: int, items) -> int:
    """Each item pickled to the parent as it is yielded, then an end mark; an exception
    the generator raised is pickled instead (raised again in the parent). 0 when done."""
    with os.fdopen(write, "wb") as f:
        try:
            for item in items:
                pickle.dump((True, item, ""), f, protocol=pickle.HIGHEST_PROTOCOL)
                f.flush()
            pickle.dump((None, None, ""), f)
        except SystemExit:  # SIGTERM: the parent is no longer reading
            raise
        except BaseException as e:  # noqa: BLE001 (handed to the parent, raised there)
            try:
                data = pickle.dumps((False, e, traceback.format_exc()))
            except Exception as p:
                data = pickle.dumps((False, RuntimeError(f"{type(e).__name__}: {e} (not "
                                                         f"picklable: {p})"), ""))
            f.write(data)
    return 0
