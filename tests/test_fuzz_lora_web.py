"""Seeded, bounded runs of the two fuzz classes of tests/lora_web_fuzz.py (issue 45): LoRA
targets per family against PEFT 0.21.2's own get_peft_model on the meta device, and web
requests against the server's HTTP contract. benchmarks/fuzz_lora_web.py is the long run
(and judges any checkout: the figures before and after the fixes are in its docstring)."""
from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, seed, settings

pytest.importorskip("peft")
pytest.importorskip("transformers")

import lora_web_fuzz as Z  # noqa: E402
from lora_families import families  # noqa: E402

FAMILIES = families()


@seed(45)
@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(Z.lora_cases(FAMILIES))
def test_lora_targets_agree_with_peft(case):
    label, data, targets, rank, dropout = case
    assert Z.judge_lora(label, data, targets, rank, dropout) is None


@pytest.fixture(scope="module")
def port():
    from accounting.web import server as S
    S.Handler.timeout = 2  # the silent client's bound, short for the run (default 30 s)
    srv = S.make_server(0)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()
    S.Handler.timeout = S.TIMEOUT_S


@seed(45)
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(Z.web_requests())
def test_web_requests_keep_the_contract(port, req):
    raw, timely = Z.send(port, req, bound=20)
    assert Z.judge_web(req, raw, timely) is None
    raw, _ = Z.send(port, ("GET", "/healthz", [], "ok", "none"), bound=20)
    assert raw.endswith(b"\r\n\r\nok\n")  # the server goes on
