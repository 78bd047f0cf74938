"""The report's cross-checks on every usable core, while the report's other work goes on.

Each check is accounting.crosscheck.cross_check(analyze(config, seq)), unchanged. Where
accounting.fork says worker processes can be forked (Linux, two or more usable CPUs), a
pool of forked workers (one per usable CPU) takes the checks, the costliest first (cost
grows with the number of blocks: every counter walks every op), while this process goes
on with the sweeps and figures. Each worker pays torch's import and lazy imports once for
all its checks, runs fvcore in-process (no nested fork), with the tracer's source
locations off and torch's C++ meta kernels (the worker ends with the pool:
crosscheck/measure.prepare_process), and sends each result back pickled. Elsewhere the
checks run here, one by one, when asked for. The results are the same objects either way;
the report asks for them in its own order.
"""
from __future__ import annotations

import os
import time

from accounting.config import ModelConfig


def run_check(config: ModelConfig, seq: int):
    """One report cross-check: the analytic count at (config, seq), forward, B = 1."""
    from accounting.analysis import analyze
    from accounting.crosscheck import cross_check
    return cross_check(analyze(config, seq))


def _timed(workload: tuple[ModelConfig, int]):
    t = time.perf_counter()
    result = run_check(*workload)
    return workload, result, time.perf_counter() - t


def _worker_start() -> None:
    from accounting import fork
    fork.worker_signals()  # Ctrl-C is the report's to decide; terminate() ends the worker
    os.environ["ACCOUNTING_WORKERS"] = "0"  # this worker is the parallelism: no nested fork
    from accounting.crosscheck.measure import prepare_process
    prepare_process()


class PendingChecks:
    """The report's checks, started at once (parallel) or run when asked (in-process)."""

    def __init__(self, workloads: list[tuple[ModelConfig, int]], parallel: bool | None = None):
        from accounting import fork
        self.workloads = list(workloads)
        self.parallel = fork.available() if parallel is None else parallel
        self._pool, self._done = None, None
        if self.parallel and self.workloads:
            import multiprocessing
            ctx = multiprocessing.get_context("fork")
            n = min(fork.usable_cpus(), len(self.workloads))
            try:
                # the workers (and the pool's threads, which fork replacements) start with
                # SIGINT/SIGTERM blocked until _worker_start; a Ctrl-C meanwhile is raised
                # here when the block ends, and the pool closed (no __exit__ runs for an
                # exception out of __init__)
                with fork.signals_held():
                    self._pool = ctx.Pool(n, initializer=_worker_start)
                order = sorted(self.workloads, key=lambda w: -w[0].num_layers)
                self._done = self._pool.imap_unordered(_timed, order)
            except BaseException:
                self.close()
                raise

    def completed(self):
        """(workload, result, seconds) for every check: as each finishes (parallel), or
        each run here in the report's order."""
        if self._pool is None:
            for w in self.workloads:
                yield _timed(w)
            return
        for _ in self.workloads:
            yield next(self._done)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> "PendingChecks":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
