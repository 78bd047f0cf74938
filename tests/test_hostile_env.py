"""Issue 23: an unusable environment is exit 2 with one line naming it, not an 'internal
error' (exit 3), a false verdict (exit 1) or an abort: warnings made errors by the user's
PYTHONWARNINGS, a bogus MPLBACKEND, an address-space limit (ulimit -v) too low for torch,
out of memory as a library words it.

Expectations from the contract (README "Exit status": 2 bad input or an unusable
environment, one line on stderr naming the problem and the fix).
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from accounting.runtime import errors, optional

ROOT = Path(__file__).resolve().parents[1]


def _run(argv, env_extra=None, cwd=None, preexec_fn=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "MPLBACKEND")}
    env.update({"PYTHONPATH": str(ROOT), **(env_extra or {})})
    return subprocess.run([sys.executable, "-m", "accounting", *argv], capture_output=True,
                          env=env, cwd=cwd, preexec_fn=preexec_fn, timeout=timeout)


def _one_line(r, *fragments):
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, (r.returncode, err[-2000:])
    assert err.count("\n") == 1 and err.startswith("accounting: error: "), err[-2000:]
    for f in fragments:
        assert f in err, err


# ---- PYTHONWARNINGS=error ------------------------------------------------------------------
@pytest.mark.parametrize("value", ["error", "error::DeprecationWarning"])
def test_pythonwarnings_error_with_the_cross_check(value):
    """Was: exit 3, 'internal error: DeprecationWarning: `torch.jit.script` is deprecated'
    (fvcore's import under the user's filter). Now exit 2 naming the variable."""
    pytest.importorskip("fvcore")
    r = _run(["gpt2-small", "--verify", "--format", "json"], {"PYTHONWARNINGS": value})
    _one_line(r, f"PYTHONWARNINGS='{value}' turned a warning into an error",
              "unset PYTHONWARNINGS")


def test_pythonwarnings_error_leaves_the_analytic_answer_alone():
    r = _run(["gpt2-small", "--no-verify", "--brief"], {"PYTHONWARNINGS": "error"})
    assert r.returncode == 0 and r.stderr == b"", r.stderr[-1000:]


def test_a_warning_is_an_environment_problem_only_when_escalated():
    """A Warning raised as an exception is the user's filter at work (exit 2, naming it);
    one raised with no 'error' filter anywhere is a bug (exit 3)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, line = errors.outcome(DeprecationWarning("old API"))
    assert code == 2 and "warnings filter set to 'error'" in line and "old API" in line, line
    with warnings.catch_warnings():
        warnings.resetwarnings()
        code, line = errors.outcome(UserWarning("raised by hand"))
    assert code == 3, line


# ---- MPLBACKEND ----------------------------------------------------------------------------
def test_a_bogus_mplbackend_is_named(tmp_path):
    """Was: exit 3, 'internal error: ValueError: Key backend: 'bogus' is not a valid value'
    (matplotlib reads MPLBACKEND on import). Now exit 2 naming it, before any work: the
    --out folder stays as it was."""
    pytest.importorskip("matplotlib")
    (tmp_path / "out").mkdir()
    r = _run(["report", "--no-verify", "--out", "out"], {"MPLBACKEND": "bogus"}, cwd=tmp_path)
    _one_line(r, "MPLBACKEND='bogus' is not a backend matplotlib knows")
    assert os.listdir(tmp_path / "out") == []


# ---- memory --------------------------------------------------------------------------------
def _limit(nbytes):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    return set_limit


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_AS"), reason="no address-space limit")
@pytest.mark.parametrize("mib", [300, 500])
def test_an_address_space_limit_too_low_for_torch(mib):
    """Was, by limit: exit 3 (ImportError: libtorch_cpu.so: failed to map segment from
    shared object), exit 1 (OpenBLAS: 'Memory allocation still failed', exit(1) from C), an
    abort (no memory for thread-local data), exit 2 (MemoryError). Now the limit is checked
    before torch is imported: exit 2 naming ulimit -v; --no-verify still answers."""
    pytest.importorskip("torch")
    r = _run(["gpt2-small", "--verify"], preexec_fn=_limit(mib * 2**20))
    _one_line(r, f"the address-space limit (ulimit -v) is {mib:,} MiB", "--no-verify")
    r = _run(["gpt2-small", "--no-verify", "--brief"], preexec_fn=_limit(mib * 2**20))
    assert r.returncode == 0 and r.stderr == b"", r.stderr[-1000:]


def test_the_address_space_check_by_hand(monkeypatch):
    limits = {"value": (resource.RLIM_INFINITY, resource.RLIM_INFINITY)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits["value"])
    assert optional.address_space_problem() is None
    limits["value"] = (3 * 2**30, resource.RLIM_INFINITY)
    assert optional.address_space_problem() is None
    limits["value"] = (2**30, resource.RLIM_INFINITY)
    assert "1,024 MiB" in optional.address_space_problem()


@pytest.mark.parametrize("exc", [
    MemoryError(),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
                 "memory: you tried to allocate 1099511627776 bytes. Error code 12 (Cannot "
                 "allocate memory)"),
    ImportError("libtorch_cpu.so: failed to map segment from shared object"),
    RuntimeError("std::bad_alloc"),
    OSError(12, "Cannot allocate memory"),
], ids=["MemoryError", "torch allocator", "loader", "bad_alloc", "ENOMEM"])
def test_out_of_memory_as_libraries_word_it(exc):
    """Each is how a failed allocation reached the CLI (the messages as torch, the dynamic
    loader and the C++ runtime print them): exit 2, 'out of memory', not an internal error."""
    code, line = errors.outcome(exc)
    assert code == 2 and line.startswith("accounting: error: out of memory"), line


def test_other_runtime_errors_stay_bugs():
    assert errors.outcome(RuntimeError("shape mismatch"))[0] == 3
    assert errors.outcome(ImportError("No module named 'x'"))[0] == 3
