"""A seeded, bounded property-based run over the Python API (tests/api_fuzz.py): every public
call with arguments drawn from accepted values and junk either answers or raises
ValueError/TypeError, never another exception, never past the hang bound, and never
answers an argument that is plainly not one it accepts (issue 23).
benchmarks/fuzz_cli.py runs the same calls at length, in a subprocess per batch."""
from __future__ import annotations

import warnings

import api_fuzz as F
from hypothesis import HealthCheck, event, given, seed, settings


@seed(23)
@settings(max_examples=600, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(call=F.calls())
def test_every_public_call_answers_or_refuses(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a library's deprecation notes are not the subject
        outcome, defects = F.judge(call)
    event(f"{call['fn']}: {outcome}")
    assert not defects, (F.describe(call), defects)
