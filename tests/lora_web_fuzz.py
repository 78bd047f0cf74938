"""Two more fuzz classes (issue 45), shared by tests/test_fuzz_lora_web.py (seeded,
bounded: CI) and benchmarks/fuzz_lora_web.py (the long run, any checkout):

* LoRA targets per family, judged against PEFT 0.21.2 itself: a family's small config.json
  (tests/lora_families.py) built by transformers on the meta device and wrapped by
  peft.get_peft_model(LoraConfig(r, target_modules, lora_dropout)); where PEFT refuses, the
  plan must refuse (UsageError, the CLI's exit 2); where PEFT wraps, the plan's trainable
  count must be PEFT's get_nb_trainable_parameters(), or the plan refuses a target it says
  it does not plan ("not planned": a router, an adapter that would never run).
* Web requests to a live loopback server (accounting/web/server.py), judged by the HTTP
  contract: an answer within the bound (a silent client included), a status among 200 303
  400 403 404 408 413, one line for every refusal, no traceback, a query or form of more
  than 1,000 fields refused (400), a foreign Host refused (403), and the server alive after.

Only the judges' own objects are imported here; the code under test is whatever
`accounting` is first on sys.path (the benchmark's --code DIR puts an older checkout there).
"""
from __future__ import annotations

import copy
import re
import socket
import warnings

from hypothesis import strategies as st

# ---- LoRA targets ------------------------------------------------------------------------
JUNK_NAMES = ("experts", "gate", "router", "mlp", "self_attn", "lm_head", "embed_tokens",
              "q_proj.weight", "qproj", "", "all-linear", "w1", "w2", "w3", "dt_proj",
              "conv1d", "out_proj", "in_proj", "gate_proj", "up_proj", "down_proj")
_MODELS: dict = {}


def family_model(label: str, data: dict):
    """transformers' model of a family on the meta device, built once per family."""
    if label not in _MODELS:
        from accounting.crosscheck.hf_counter import build
        _MODELS[label] = build(data, "meta")
    return _MODELS[label]


def linear_names(model) -> list[str]:
    import torch
    from transformers.pytorch_utils import Conv1D  # GPT-2's
    return sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                   if isinstance(m, (torch.nn.Linear, Conv1D))})


@st.composite
def lora_cases(draw, families: dict):
    """(family label, config.json, targets, rank, dropout)."""
    label = draw(st.sampled_from(sorted(families)))
    names = linear_names(family_model(label, families[label])) + list(JUNK_NAMES)
    targets = tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True)))
    rank = draw(st.sampled_from((1, 2, 4, 8, 16)))
    dropout = draw(st.sampled_from((0, 0, 0, 0.05)))
    return label, families[label], targets, rank, dropout


def peft_count(model, targets, rank, dropout):
    """PEFT's trainable count, or the exception it raises (its refusal)."""
    import peft
    t = "all-linear" if targets == ("all-linear",) else list(targets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pm = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(
                r=rank, target_modules=t, lora_dropout=dropout))
        except Exception as e:  # PEFT's own refusal, whatever its type
            return e
    return pm.get_nb_trainable_parameters()[0]


def tool_count(data, targets, rank, dropout):
    """The plan's trainable count, or its UsageError; anything else is the bug it is."""
    from fractions import Fraction
    from accounting.planning.finetune import LoRA, resolve
    from accounting.runtime.errors import UsageError
    from accounting.architecture.hf_config import translate
    h = translate(data, "t", data.get("model_type", "t"))
    try:
        lora = LoRA(rank=rank, dropout=Fraction(dropout).limit_denominator(100),
                    targets=tuple(targets))
        ft = resolve(h.config, lora, h.type.module_names(h.data))
    except UsageError as e:
        return e
    return ft.adapter_count()


def judge_lora(label, data, targets, rank, dropout) -> str | None:
    """None when the plan agrees with PEFT, else a line saying how it does not."""
    theirs = peft_count(family_model(label, data), targets, rank, dropout)
    ours = tool_count(data, targets, rank, dropout)
    what = f"{label} targets={','.join(targets)} r={rank} dropout={dropout}"
    if isinstance(theirs, Exception):
        if not isinstance(ours, Exception):
            return f"{what}: PEFT refuses ({str(theirs)[:100]}), the plan counts {ours:,}"
        return None
    if isinstance(ours, Exception):
        # the plan's refusals of what PEFT wraps, each said so: a layer it does not plan
        # (a router, an embedding, an adapter that never runs), an empty name (bad input:
        # "--lora-targets q_proj," on the command line; PEFT passes over it), all-linear in
        # a list (PEFT's shorthand only as the whole string; in a list a name like any other)
        if "not planned" in str(ours) or ("" in targets and "needs module names" in str(ours)) \
                or (len(targets) > 1 and "all-linear" in targets and "stands alone" in str(ours)):
            return None
        return f"{what}: PEFT wraps {theirs:,}, the plan refuses ({str(ours)[:120]})"
    return None if ours == theirs else f"{what}: PEFT {theirs:,}, the plan {ours:,}"


# ---- web requests ------------------------------------------------------------------------
STATUSES = {200, 303, 400, 403, 404, 408, 413}
PATHS = ("/healthz", "/download.json", "/download.csv", "/", "/nope", "/../etc/passwd")
FIELDS = ("model", "ctx", "batch", "question", "gpu", "config", "precision", "x", "switch")
VALUES = st.one_of(st.sampled_from(("gpt2-small", "-o", "--", "64", "0", "-1", "9" * 30,
                                    "plan", "serve", "H100", "</script><!--", "", "%00")),
                   st.text(max_size=12))


@st.composite
def web_requests(draw):
    """(method, path, query pairs, Host kind, body kind)."""
    method = draw(st.sampled_from(("GET", "GET", "POST", "HEAD")))
    path = draw(st.sampled_from(PATHS))
    n = draw(st.one_of(st.integers(0, 6), st.sampled_from((999, 1000, 1001, 1500))))
    pairs = [(draw(st.sampled_from(FIELDS)), draw(VALUES)) for _ in range(min(n, 6))]
    if n > 6:  # many fields: padding names that no question has
        pairs += [(f"p{i}", "1") for i in range(n - len(pairs))]
    if path in ("/", "/download.json", "/download.csv") and n <= 6:
        pairs = [("model", "gpt2-small"), ("ctx", "64")] + pairs  # seconds, not minutes
    host = draw(st.sampled_from(("ok", "ok", "localhost", "foreign", "empty", "wrong-port")))
    body = draw(st.sampled_from(("none", "form", "short-closed", "short-silent")))
    return method, path, pairs, host, body


def _host(kind: str, port: int) -> str | None:
    return {"ok": f"127.0.0.1:{port}", "localhost": f"localhost:{port}",
            "foreign": f"rebound.example:{port}", "empty": "",
            "wrong-port": f"127.0.0.1:{port + 1}"}[kind]


def send(port: int, req, bound: float) -> tuple[bytes, bool]:
    """The raw response and whether it came within `bound` seconds."""
    from urllib.parse import quote
    method, path, pairs, host, body = req
    query = "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)
    payload = b""
    target = path + ("?" + query if query and (method != "POST" or body == "none") else "")
    if method == "POST" and body != "none":
        payload = query.encode()
    length = len(payload) + (10 if body.startswith("short") else 0)
    head = f"{method} {target} HTTP/1.1\r\nHost: {_host(host, port)}\r\nConnection: close\r\n"
    if method == "POST":
        head += f"Content-Length: {length}\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=bound)
    out, timely = b"", True
    try:
        s.sendall(head.encode() + b"\r\n" + payload)
        if body == "short-closed":
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:  # the server answered and closed first (a refusal)
                pass
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        timely = False
    except (ConnectionResetError, BrokenPipeError):
        pass  # what the server sent before it closed is judged
    finally:
        s.close()
    return out, timely


def judge_web(req, raw: bytes, timely: bool) -> str | None:
    method, path, pairs, host, body = req
    what = f"{method} {path} fields={len(pairs)} host={host} body={body}"
    if not timely:
        return f"{what}: no answer within the bound (a thread held)"
    if not raw:
        return f"{what}: the connection closed without an answer"
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    if not m:
        return f"{what}: not an HTTP response: {raw[:60]!r}"
    status = int(m.group(1))
    head, _, text = raw.partition(b"\r\n\r\n")
    if status not in STATUSES:
        return f"{what}: status {status}"
    if b"Traceback" in raw:
        return f"{what}: a traceback"
    if status >= 400 and method != "HEAD" and b"text/plain" in head and text.count(b"\n") != 1:
        lines = text.count(b"\n")
        return f"{what}: {status} in {lines} lines"
    if host in ("foreign", "empty", "wrong-port") and status != 403:
        return f"{what}: a foreign Host answered {status}"
    if host not in ("foreign", "empty", "wrong-port") and len(pairs) > 1000 and \
            status not in (400, 408, 413):
        return f"{what}: more than 1,000 fields answered {status}"
    return None
