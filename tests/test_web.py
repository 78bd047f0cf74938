"""The web page's server without a browser (accounting/web/): the query -> the CLI's argv,
the page and the downloads against the CLI run as its own process (python -m accounting:
an independent path, argv to stdout), bad input, the `web` subcommand's contract (URL on
the first line, loopback only, Ctrl-C -> 130 without a traceback). The browser's view is
tests/test_web_browser.py."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from html import unescape
from pathlib import Path
from urllib.parse import urlencode

import pytest

from accounting.cli import plan as plan_cli
from accounting.web import form
from accounting.web.server import make_server, url

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("COLUMNS", None)


def cli(*argv: str) -> subprocess.CompletedProcess:
    """The CLI as a person runs it: its own process."""
    return subprocess.run([sys.executable, "-m", "accounting", *argv], capture_output=True,
                          text=True, env=ENV, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def base():
    server = make_server(0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield url(server)
    server.shutdown()
    server.server_close()


def get(base: str, path: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(base.rstrip("/") + path, data=data, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def answer_block(html: str) -> str:
    m = re.search(r'<pre id="answer">(.*?)</pre>', html, re.S)
    assert m, html[-2000:]
    return unescape(m.group(1))


def page_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_contract_query_shows_the_cli_answer(base):
    # the contract: ?model=gpt2-xl&ctx=16384 shows 151,812,993,744,896, the
    # FLOPs the CLI's JSON gives (all_flops) as the CLI prints integers
    status, html = get(base, "/?model=gpt2-xl&ctx=16384")
    assert status == 200
    p = cli("gpt2-xl", "--ctx", "16384", "--no-verify", "--format", "json")
    flops = json.loads(p.stdout)["all_flops"]
    assert f"{flops:,}" == "151,812,993,744,896" and f"{flops:,}" in answer_block(html)
    assert page_data(html) == json.loads(p.stdout)
    text = cli("gpt2-xl", "--ctx", "16384", "--no-verify").stdout
    assert answer_block(html) == text.split("\n\n")[0]  # the CLI's answer block, verbatim
    assert 'id="plot-flops"' in html


@pytest.mark.parametrize("query, argv", [
    ({"question": "plan", "model": "meta-llama/Llama-3.1-8B", "ctx": "8192", "gpu": "H100",
      "precision": "bf16-mixed", "recompute": "full"},
     ["plan", "meta-llama/Llama-3.1-8B", "--ctx", "8192", "--gpu", "H100", "--precision",
      "bf16-mixed", "--recompute", "full"]),
    ({"question": "serve", "model": "meta-llama/Llama-3.1-8B", "gpu": "H100", "ctx": "8192",
      "kv_dtype": "fp8"},
     ["serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx", "8192", "--kv-dtype", "fp8"]),
    ({"question": "layouts", "model": "gpt2-xl", "gpu": "H100", "gpus": "8", "search": "1",
      "ctx": "4096", "precision": "bf16-mixed", "recompute": "full"},
     ["plan", "gpt2-xl", "--gpu", "H100", "--gpus", "8", "--search", "--ctx", "4096",
      "--precision", "bf16-mixed", "--recompute", "full"]),
])
def test_page_and_downloads_equal_the_cli(base, query, argv):
    _, html = get(base, "/?" + urlencode(query))
    data = json.loads(cli(*argv, "--format", "json").stdout)
    assert page_data(html) == data
    text = cli(*argv).stdout
    assert answer_block(html) == text.split("\n\n")[0]
    assert get(base, "/download.json?" + urlencode(query)) == (200, json.dumps(
        data, indent=2, ensure_ascii=False) + "\n")
    assert get(base, "/download.csv?" + urlencode(query))[1] == cli(*argv, "--format", "csv").stdout


def test_the_form_is_the_parsers():
    # every option of `plan` a person sets is a field, with argparse's own choices
    parser = plan_cli.parser()
    fields = {f.flag: f for f in form.fields(form.QUESTIONS["plan"])}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")]
        if not longs or longs[0][2:].replace("-", "_") in form.SKIPPED:
            continue
        if action.nargs == 0 and not isinstance(action, type(parser._option_string_actions["--sp"])):
            continue
        if str(action.metavar or "").upper() in form.FILE_METAVARS:
            assert longs[0] not in fields, longs[0]  # never a path on the server's disk
            continue
        assert longs[0] in fields, longs[0]
        if action.choices:
            assert fields[longs[0]].choices == tuple(str(c) for c in action.choices)


def test_bad_input_one_line_beside_its_field_and_the_server_survives(base):
    _, html = get(base, "/?model=gpt2-xl&ctx=16k&batch=2")
    line = cli("gpt2-xl", "--ctx", "16k", "--no-verify").stderr.strip()  # the CLI's message
    assert line.startswith("accounting: error: argument --ctx")
    m = re.search(r'<span class="error" id="error-ctx" role="alert">(.*?)</span>', html)
    assert m and unescape(m.group(1)) == line.removeprefix("accounting: error: ")
    assert 'value="2"' in html and 'value="16k"' in html  # the inputs are kept
    assert "Traceback" not in html
    _, html = get(base, "/?model=no-such-model")
    assert 'id="error-model"' in html
    assert get(base, "/?model=gpt2-xl&ctx=1024")[0] == 200
    status, body = get(base, "/download.json?model=gpt2-xl&ctx=-1")
    assert status == 400 and body.count("\n") == 1 and "--ctx" in body


def test_long_search_is_bounded_on_the_page(base):
    # a layout search over 720,720 GPUs takes about 9 s in the CLI; the page refuses it
    # beside --gpus at once, and says why
    _, html = get(base, "/?question=layouts&model=gpt2-xl&gpu=H100&gpus=720720&search=1")
    assert 'id="error-gpus"' in unescape(html) and "at most 4,096 GPUs" in html
    status, body = get(base, "/download.json?question=layouts&model=gpt2-xl&gpu=H100"
                             "&gpus=720720&search=1")
    assert status == 400 and "4,096" in body


def test_pasted_config_is_the_cli_config(base, tmp_path):
    source = ROOT / "accounting/hf_configs/meta-llama/Llama-3.2-1B.json"
    text = source.read_text()
    body = urlencode({"question": "plan", "model": "", "config": text, "ctx": "2048"}).encode()
    _, html = get(base, "/", data=body)  # POST, as a long config goes
    (tmp_path / "pasted-config").mkdir()  # the page's name for it (the CLI names a
    (tmp_path / "pasted-config" / "config.json").write_text(text)  # config.json by its folder)
    p = cli("plan", "--config", str(tmp_path / "pasted-config" / "config.json"), "--ctx", "2048",
            "--format", "json")
    assert page_data(html) == json.loads(p.stdout)
    assert "--config=config.json" in unescape(html)
    big = urlencode({"model": "", "config": "{" + " " * (2**20 + 10) + "}"}).encode()
    _, html = get(base, "/", data=big)
    assert 'id="error-config"' in html and "1,048,576" in html  # the CLI's bound


def test_question_change_keeps_inputs_and_adds_starting_values(base):
    # the page's script marks a change of question with switch=1: the server redirects to
    # the new question with its starting values added (an H100 for a serving plan), and a
    # one-GPU plan drops a layout's inputs (the flags cli/plan_parallel.py lists)
    opener = urllib.request.build_opener()
    with opener.open(base + "?question=serve&model=gpt2-large&ctx=2048&switch=1", timeout=60) as r:
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(r.url).query))
    assert q == {"question": "serve", "model": "gpt2-large", "ctx": "2048", "gpu": "H100"}
    with opener.open(base + "?question=plan&model=gpt2-large&gpus=8&search=1&tp=2&gpu=A100"
                            "&switch=1", timeout=60) as r:
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(r.url).query))
    assert q == {"question": "plan", "model": "gpt2-large", "gpu": "A100"}


def test_permalink_round_trip(base):
    _, html = get(base, "/?question=plan&model=gpt2-large&ctx=2048&gpu=A100&batch=4")
    link = unescape(re.search(r'id="permalink" href="([^"]*)"', html).group(1))
    _, again = get(base, link)
    assert answer_block(again) == answer_block(html) and page_data(again) == page_data(html)


def test_web_subcommand_url_first_loopback_and_ctrl_c():
    p = subprocess.Popen([sys.executable, "-m", "accounting", "web"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    try:
        first = p.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", first), first
        with urllib.request.urlopen(first + "healthz", timeout=30) as r:
            assert r.read() == b"ok\n"
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 130
        err = p.stderr.read()
        assert "Traceback" not in err and err.strip().splitlines()[-1] == "accounting: interrupted"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_bad_port_one_line():
    p = cli("web", "--port", "70000")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--port" in p.stderr
    import socket
    with socket.socket() as taken:  # a port in use: exit 2, one line naming it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = cli("web", "--port", str(port))
        assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1
        assert f"cannot listen on 127.0.0.1:{port}" in p.stderr


def test_space_app_serves_the_page():
    # app.py, the Hugging Face Space's entry: the same server, host and port from the
    # environment (here loopback and a free port), the shipped presets only
    env = {**ENV, "PORT": "0", "ACCOUNTING_WEB_HOST": "127.0.0.1"}
    p = subprocess.Popen([sys.executable, str(ROOT / "app.py")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        first = p.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", first), first
        with urllib.request.urlopen(first + "?model=gpt2-xl&ctx=16384", timeout=60) as r:
            assert "151,812,993,744,896" in r.read().decode()
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_no_field_names_a_file_on_the_server():
    # --config is the page's textarea and -o is left out: no field of any question takes a
    # path, so a page served to others (a Space) reads and writes none of its files
    for q in form.QUESTIONS.values():
        names = {f.name for f in form.fields(q)}
        assert not names & {"config", "output", "o"}, q.key
        assert all(f.kind != form.TEXT or f.flag not in ("--config", "--output") for f in form.fields(q))


@pytest.mark.parametrize("query", [
    {"model": "-o", "ctx": "1"},  # a model that looks like a flag stays the model
    {"model": "gpt2-xl", "ctx": "9" * 40},  # past the CLI's 10^15
    {"model": "gpt2-xl", "batch": "\x00"},
    {"question": "nonsense", "model": "gpt2-xl", "ctx": "1024"},
    {"question": "plan", "model": "gpt2-xl", "gpu": "/etc/passwd"},
    {"question": "plan", "model": "gpt2-xl", "steps": "10", "tokens": "10"},  # exclusive
    {"question": "serve", "model": "gpt2-xl", "gpu": "H100", "weights": "zzz"},
    {"model": "", "config": '{"model_type": "llama"'},  # truncated JSON
    {"model": "", "config": "\x00\x01"},
    {"model": "gpt2-xl", "config": "{}"},  # both: the CLI's message
])
def test_hostile_query_is_an_answer_or_one_line(base, query):
    for path in ("/", "/download.json", "/download.csv"):
        status, body = get(base, path + "?" + urlencode(query))
        assert status in (200, 400) and "Traceback" not in body, (path, status, body[:300])
        if path == "/":
            assert 'id="answer"' in body or 'class="error"' in body
        elif status == 400:
            assert body.count("\n") == 1
    assert get(base, "/healthz") == (200, "ok\n")  # the server goes on


def test_plots_say_what_the_cli_says(base):
    # the plots' labels are the CLI's numbers: each ranked layout's step time is in the
    # CLI's own layouts table, and the FLOPs shares at T = 16,384 are its component shares
    query = {"question": "layouts", "model": "gpt2-xl", "gpu": "H100", "gpus": "8", "search": "1",
             "ctx": "4096", "precision": "bf16-mixed", "recompute": "full"}
    _, html = get(base, "/?" + urlencode(query))
    svg = re.search(r'<figure class="plot" id="plot-layouts">(.*?)</figure>', html, re.S).group(1)
    labels = re.findall(r">([0-9.,]+ m?s)<", svg)  # ms, or s past a second
    text = cli("plan", "gpt2-xl", "--gpu", "H100", "--gpus", "8", "--search", "--ctx", "4096",
               "--precision", "bf16-mixed", "--recompute", "full").stdout
    assert labels and all(label in text for label in labels)
    _, html = get(base, "/?model=gpt2-xl&ctx=16384")
    svg = re.search(r'<figure class="plot" id="plot-flops">(.*?)</figure>', html, re.S).group(1)
    last = re.findall(r"<title>([^<]*): ([0-9.]+%)</title>", svg)[-4:]  # the T = 16,384 bar
    table = cli("gpt2-xl", "--ctx", "16384", "--no-verify").stdout
    block = table[table.index("Matmul FLOPs by component"):]
    for name, share in last:
        row = next(line for line in block.splitlines() if line.startswith(name + " "))
        assert share in row, (name, share, row)
