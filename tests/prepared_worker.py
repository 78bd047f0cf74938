"""One forked child, set up for good as `python -m accounting`'s process is, that runs calls on
request: `worker(fn, *args)` is fn(*args), computed there.

Why: the meta device's Python kernels (torch._refs, registered by torch as the Meta kernels
of some 1,300 operators) are most of the CPU time of a transformers model's counted
forward; the process the CLI owns (and the report's workers, and the worker that runs
transformers' counter under `--verify`) switches to torch's C++ meta kernels first
(accounting/crosscheck/measure.prepare_process), which a test process cannot do (it cannot
be undone, and the same pytest worker goes on with other files). The counts are the same
either way: tests/test_crosscheck_workers.py compares every counter, transformers' model
included, on both. The child lives until close() (or the test process ends: it dies with
its parent, fork.die_with_parent), so torch's and transformers' lazy imports are paid once
there, and each call costs a pickle each way.

An exception fn raises is raised again here (its type kept where it pickles both ways,
else a RuntimeError naming it); a child
that ends or cannot answer raises WorkerGone, a BaseException, so that a caller's
`pytest.raises(Exception)` or `except Exception` (which expect the library to refuse an
input) cannot take a broken worker for a refusal. Where no worker can be forked
(fork.available(): one CPU, ACCOUNTING_WORKERS=0, no fork) fn runs here.
"""
from __future__ import annotations

import os
import pickle

from accounting.runtime import fork


class WorkerGone(BaseException):
    """The worker ended, or a call or its answer could not cross the pipe."""


def _serve(requests: int, spare: int):
    """The child's side: set up for good, then answer each (fn, args) read from `requests`
    until the parent closes it."""
    os.close(spare)  # the parent's end of the request pipe: EOF here once the parent closes it
    from accounting.reporting.checks import prepare_worker
    prepare_worker()  # the C++ meta kernels, no nested fork (ACCOUNTING_WORKERS=0)
    with os.fdopen(requests, "rb") as f:
        while True:
            try:
                fn, args = pickle.load(f)
            except EOFError:
                return
            try:
                yield True, fn(*args)
            except Exception as e:  # noqa: BLE001 - the caller's to judge
                try:  # (transformers' StrictDataclassClassValidationError pickles, but
                    pickle.loads(pickle.dumps(e))  # cannot be unpickled: a 'cause' missing)
                except Exception:  # noqa: BLE001 - raised here with its type and text
                    e = RuntimeError(f"{type(e).__name__}: {e}")
                yield False, e


class PreparedWorker:
    def __init__(self):
        self._child = self._items = self._requests = None

    def __call__(self, fn, *args):
        if not fork.available():
            return fn(*args)
        if self._child is None:
            self._start()
        try:
            pickle.dump((fn, args), self._requests, protocol=pickle.HIGHEST_PROTOCOL)
            self._requests.flush()
            ok, value = next(self._items)
        except Exception as e:  # noqa: BLE001 - fn's own exceptions come as values, below
            self.close()
            raise WorkerGone(f"the prepared worker did not answer ({type(e).__name__}: {e})") from e
        if not ok:
            raise value
        return value

    def _start(self) -> None:
        read, write = os.pipe()
        child = fork.Streamed(_serve, read, write)
        child.__enter__()
        os.close(read)
        self._child, self._items = child, iter(child)
        self._requests = os.fdopen(write, "wb")

    def close(self) -> None:
        if self._requests is not None:
            self._requests.close()
        if self._child is not None:
            self._child.__exit__(None, None, None)
        self._child = self._items = self._requests = None


def module_worker():
    """One PreparedWorker for a test module, and the module-scoped autouse fixture that
    closes it when the module's tests are done:  WORKER, _worker = module_worker()."""
    import pytest
    worker = PreparedWorker()

    @pytest.fixture(scope="module", autouse=True)
    def _worker():
        yield
        worker.close()
    return worker, _worker
