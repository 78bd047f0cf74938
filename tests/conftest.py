"""Shared test settings and scheduling.

The suite runs on every core (pytest-xdist, `-n auto --dist loadfile` in pyproject.toml):
each file goes to one worker, so a module-scoped fixture (the fully verified report, the
torch.distributed runs) is built once. (`--dist loadgroup` with `xdist_group` marks would
group finer, but pytest-xdist 3.8.0 cannot tag node ids under pytest 9.2, whose Node.nodeid
is no longer `_nodeid`: the groups are silently split and the builds made twice; where
tests of two files share a session-scoped build, SAME_WORKER below puts them in one unit
instead, through pytest-xdist's own scheduler hook.) Tests
marked `slow` are moved to the front of the collection so that these long builds start at
once instead of ending the run (the files go to the workers in this order:
--no-loadscope-reorder in pyproject.toml; xdist's default orders them by their number of
tests). Nothing is skipped: `slow` only orders (and lets
`-m "not slow"` leave them out of a quick local run; CI runs everything).
"""
import os
import signal

import pytest

# One intra-op thread for torch in each test process and the processes it starts (GNU
# OpenMP reads OMP_NUM_THREADS when torch is first imported: no plugin imports torch before
# this file). The suite runs one xdist worker per core, and torch's default of one OpenMP
# thread per core in each worker oversubscribes the cores: the idle threads' spin-waits
# between the tiny models' ops cost CPU time that does no work. Measured on the 2-core
# machine under load: test_architectures.py's saved-tensor checks took 0.34 s of CPU each
# with 2 threads, 0.017 s with one; the whole file 194 s of CPU, then 90 s. What the tests
# compare does not depend on it (integer counts, or values within a tolerance, computed in
# one fixed order). A value already exported is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long end-to-end check, scheduled first")
    # Ctrl-C as a terminal user has it. A shell without job control starts a background
    # job (`cmd &`, nohup) with SIGINT ignored, and an ignored SIGINT stays ignored in the
    # tool by design (accounting/runtime/safe_io.py) and in every process the tests start: the
    # Ctrl-C tests would then see a run that nothing interrupts. This process (and each
    # xdist worker) takes Python's own handler back; children then start with the default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


# Tests of one file run on the worker of another's, to share its session-scoped build: node
# id prefix -> the file whose work unit (--dist loadfile) they join. The expert-parallel
# cases of `python -m accounting.distcheck` (distcheck_run below) are read by
# test_expert_parallel.py's torch.distributed tests too; on another worker they would run
# the whole check a second time.
SAME_WORKER = {"tests/test_expert_parallel.py::test_torch_distributed_": "tests/test_distributed.py"}


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook (absent without it)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with the SAME_WORKER exceptions; any other --dist as xdist has it."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for prefix, scope in SAME_WORKER.items():
                if nodeid.startswith(prefix):
                    return scope
            return super()._split_scope(nodeid)
    return Scheduling(config, log)


@pytest.fixture(scope="session")
def distcheck_run(tmp_path_factory):
    """`python -m accounting.distcheck --json FILE` in a fresh interpreter (the fake process
    group and the forked gloo workers need a clean process), once: every standard case's
    measurements (accounting/distcheck/suite.py), its exit status and its output."""
    import json
    import subprocess
    import sys
    out = tmp_path_factory.mktemp("dist") / "measured.json"
    run = subprocess.run([sys.executable, "-m", "accounting.distcheck", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert out.exists(), run.stderr[-4000:]
    data = json.loads(out.read_text())
    return {"results": data, "stdout": run.stdout, "stderr": run.stderr, "code": run.returncode}


@pytest.fixture(autouse=True)
def _whole_lines(monkeypatch):
    """Text output fits COLUMNS when it is set (accounting.runtime.safe_io.terminal_width); the tests
    parse whole lines, as a file or a pipe gets them, whatever the shell exports."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch):
    """A model name of the form ORG/NAME that is no preset is looked up on the Hugging Face
    hub (issue 42): the tests never reach the network, so the hub is offline unless a test
    starts its stand-in (tests/hub_server.py, tests/test_hub.py)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def no_ledger(monkeypatch):
    """A refusal must come before the work: building any ledger fails the test (the cached
    ledgers are cleared first, so a cache hit cannot hide one). Deterministic, where a wall-clock
    bound was not (it failed on a loaded machine)."""
    from accounting.ledger import ledger as L

    def forbidden(*args, **kwargs):
        raise AssertionError("a ledger was built before the input was refused")
    L.ledger.cache_clear()
    L.unfolded_ledger.cache_clear()
    monkeypatch.setattr(L, "_build", forbidden)
