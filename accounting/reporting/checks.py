"""The report's cross-checks on every usable core, while the report's other work goes on.

Each check is accounting.crosscheck.cross_check(analyze(config, seq)), unchanged. Where
accounting.runtime.fork says worker processes can be forked (Linux, two or more usable CPUs), one
forked process (fork.Streamed) sets torch up for good (crosscheck/measure.prepare_process:
the tracer's source locations off, torch's C++ meta kernels), pays torch's import and lazy
imports once with a tiny check (WARM_UP), then forks a pool of workers (one per usable
CPU) from itself, which take the checks, the costliest first (cost grows with the number
of blocks: every counter walks every op), each running fvcore in-process (no nested
fork) on one thread; each result comes back pickled as it finishes. This process goes on
with the sweeps and figures meanwhile. Elsewhere the checks run here, one by one, when
asked for. The results are the same objects either way; the report asks for them in its
own order.
"""
from __future__ import annotations

import os
import time

from accounting.architecture.config import ModelConfig


def run_check(config: ModelConfig, seq: int):
    """One report cross-check: the analytic count at (config, seq), forward, B = 1."""
    from accounting.analysis.workload import analyze
    from accounting.crosscheck import cross_check
    return cross_check(analyze(config, seq))


def _timed(workload: tuple[ModelConfig, int]):
    t = time.perf_counter()
    result = run_check(*workload)
    return workload, result, time.perf_counter() - t


def start_worker() -> None:
    """A forked check worker's set-up, for good (the tests' prepared checks): signals as a
    worker's, then prepare_worker()."""
    from accounting.runtime import fork
    fork.worker_signals()  # Ctrl-C is the report's to decide; terminate() ends the worker
    prepare_worker()


def prepare_worker() -> None:
    """No nested fork, torch set up as the CLI's process. Signals are left as they are: the
    pool's parent (a fork.Streamed child) keeps the SIGTERM handler that runs _pool's
    finally (was: start_worker here reset SIGTERM to its default, so the parent died at
    once and left its workers running, issue 23)."""
    os.environ["ACCOUNTING_WORKERS"] = "0"  # this worker is the parallelism: no nested fork
    from accounting.crosscheck.measure import prepare_process
    prepare_process()


# What the pool's parent runs once before it forks the workers: torch's import, its lazy
# imports on the first meta op, the first FlopCounterMode and fvcore trace (about 2 s on
# these machines), paid once for all the workers instead of once in each.
WARM_UP = ModelConfig(vocab_size=64, context_length=16, num_layers=1, d_model=32, num_heads=2,
                      d_ff=48, name="warm-up")


def _pool(order: list, n: int):
    """The forked pool's parent (fork.Streamed): warm up, fork n workers from this warm
    process, yield each check as it finishes; the workers end with it."""
    import multiprocessing
    from accounting.runtime import fork
    prepare_worker()
    run_check(WARM_UP, 8)
    pool = None
    try:
        with fork.signals_held():  # as in __init__ below: workers start with signals held
            pool = multiprocessing.get_context("fork").Pool(n, initializer=fork.worker_signals)
        yield from pool.imap_unordered(_timed, order)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


class PendingChecks:
    """The report's checks, started at once (parallel) or run when asked (in-process)."""

    def __init__(self, workloads: list[tuple[ModelConfig, int]], parallel: bool | None = None):
        from accounting.runtime import fork
        self.workloads = list(workloads)
        self.parallel = fork.available() if parallel is None else parallel
        self._child = None
        if self.parallel and self.workloads:
            n = min(fork.usable_cpus(), len(self.workloads))
            order = sorted(self.workloads, key=lambda w: -w[0].num_layers)
            # one forked process warms torch up and forks the pool from itself, while this
            # one goes on with the sweeps and figures; a Ctrl-C meanwhile ends it (close),
            # and with it the pool (its SIGTERM runs _pool's finally)
            self._child = fork.Streamed(_pool, order, n)
            try:
                self._child.__enter__()
            except BaseException:
                self._child = None
                raise

    def completed(self):
        """(workload, result, seconds) for every check: as each finishes (parallel), or
        each run here in the report's order."""
        if self._child is None:
            for w in self.workloads:
                yield _timed(w)
            return
        got = 0
        for item in self._child:
            got += 1
            yield item
        if got != len(self.workloads):
            raise RuntimeError(f"the checks' worker process ended after {got} of "
                               f"{len(self.workloads)} checks")

    def close(self) -> None:
        if self._child is not None:
            self._child.__exit__(None, None, None)
            self._child = None

    def __enter__(self) -> "PendingChecks":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
