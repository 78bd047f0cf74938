"""The web page in a real browser: Debian's Chromium (apt-get install -y chromium) driven by
Playwright (the `web` extra). Skipped, with the reason, where either is missing. One
server and one browser for the module; the page's numbers are compared with the CLI run
as its own process (python -m accounting ... --format json), the independent path."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM") or ("/usr/bin/chromium" if os.access(
    "/usr/bin/chromium", os.X_OK) else shutil.which("chromium"))
if CHROMIUM is None:
    pytest.skip("no Chromium installed (apt-get install -y chromium, or set CHROMIUM): the "
                "browser tests need Debian's package; a browser download cannot work here",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed "
                               "(pip install -e '.[web]')")

from accounting.web.server import make_server, url  # noqa: E402

ENV = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"PYTHONPATH": str(ROOT)}


def cli(*argv: str) -> str:
    p = subprocess.run([sys.executable, "-m", "accounting", *argv], capture_output=True,
                       text=True, env=ENV, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def base():
    server = make_server(0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield url(server)
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        except Exception as e:  # a broken install: say so, do not fail the suite on it
            pytest.skip(f"Chromium at {CHROMIUM} does not start under Playwright: "
                        f"{str(e).splitlines()[0]}")
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    pg = ctx.new_page()
    yield pg
    ctx.close()


CASES = [  # (query, the CLI's argv for it, [JSON path, ...] shown in the answer block)
    ("?model=gpt2-xl&ctx=16384", ["gpt2-xl", "--ctx", "16384", "--no-verify"],
     [("all_flops",), ("parameters", "total")]),
    ("?question=plan&model=meta-llama/Llama-3.1-8B&ctx=8192&gpu=H100&precision=bf16-mixed"
     "&recompute=full", ["plan", "meta-llama/Llama-3.1-8B", "--ctx", "8192", "--gpu", "H100",
                         "--precision", "bf16-mixed", "--recompute", "full"],
     [("flops_per_step", "total")]),
    ("?question=serve&model=meta-llama/Llama-3.1-8B&gpu=H100&ctx=8192",
     ["serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx", "8192"],
     [("max_concurrency",), ("kv_pool_tokens",)]),
]


@pytest.mark.parametrize("query, argv, paths", CASES)
def test_page_numbers_equal_the_cli_json(base, page, query, argv, paths):
    page.goto(base + query)
    shown = page.inner_text("#answer")
    data = json.loads(cli(*argv, "--format", "json"))
    for path in paths:
        value = data
        for key in path:
            value = value[key]
        assert f"{value:,}" in shown, (path, value)  # as the CLI prints an integer
    assert shown == cli(*argv).split("\n\n")[0]  # the CLI's answer block, as the page shows it
    assert json.loads(page.inner_text("#data")) == data
    assert page.locator("figure.plot svg").count() >= 1


def test_bad_input_beside_the_field_keeps_the_rest(base, page):
    page.goto(base + "?question=plan&model=gpt2-large&ctx=2048&gpu=A100")
    page.fill("#f-ctx", "two thousand")
    page.fill("#f-batch", "3")
    page.click("#submit")
    page.wait_for_selector("#error-ctx")
    assert "argument --ctx: must be a positive integer" in page.inner_text("#error-ctx")
    assert page.input_value("#f-batch") == "3" and page.input_value("#f-gpu") == "A100"
    assert page.input_value("#f-model") == "gpt2-large"
    assert "Traceback" not in page.content()
    page.fill("#f-ctx", "2048")
    page.click("#submit")
    page.wait_for_selector("#answer")  # the server survived it


def test_permalink_round_trip(base, page):
    page.goto(base + "?model=gpt2-xl")
    page.click("label.tab:has-text('Serving plan')")  # a question change submits the form
    page.wait_for_url("**question=serve**")
    page.select_option("#f-model", "meta-llama/Llama-3.2-1B")
    page.fill("#f-ctx", "4096")
    page.select_option("#f-kv_dtype", "fp8")
    page.click("#submit")
    page.wait_for_selector("#answer")
    query = parse_qs(urlsplit(page.url).query)
    assert query["ctx"] == ["4096"] and query["kv_dtype"] == ["fp8"]
    assert all(v != [""] for v in query.values())  # empty fields stay out of the URL
    answer, data = page.inner_text("#answer"), page.inner_text("#data")
    permalink = page.get_attribute("#permalink", "href")
    page.goto("about:blank")
    page.goto(base + permalink.lstrip("/"))
    assert page.inner_text("#answer") == answer and page.inner_text("#data") == data
    assert page.input_value("#f-kv_dtype") == "fp8"
    cmd = page.input_value("#cli-command")
    assert cmd.startswith("python -m accounting serve ") and "--kv-dtype=fp8" in cmd


def test_upload_a_config_json(base, page, tmp_path):
    source = ROOT / "accounting/hf_configs/Qwen/Qwen3-0.6B.json"
    page.goto(base + "?question=flops&model=gpt2-xl&ctx=4096")
    page.click("summary:has-text('or a config.json')")
    page.set_input_files("#config-file", str(source))
    page.wait_for_function("document.getElementById('f-config').value.length > 0")
    assert page.input_value("#f-model") == ""
    page.click("#submit")
    page.wait_for_selector("#answer")
    folder = tmp_path / "pasted-config"  # the page's name for a pasted config
    folder.mkdir()
    (folder / "config.json").write_text(source.read_text())
    data = json.loads(cli("--config", str(folder / "config.json"), "--ctx", "4096",
                          "--no-verify", "--format", "json"))
    assert json.loads(page.inner_text("#data")) == data


def test_upload_past_the_cli_bound_is_refused_beside_it(base, page, tmp_path):
    # the CLI reads a config file of at most 2^20 bytes (architecture/choices.py MAX_CONFIG_BYTES)
    big = tmp_path / "config.json"
    big.write_text("{" + " " * 2**20 + "}")
    page.goto(base + "?model=gpt2-xl&ctx=1024")
    page.click("summary:has-text('or a config.json')")  # as a person opens it
    page.set_input_files("#config-file", str(big))
    page.wait_for_function("document.getElementById('error-config-file').textContent")
    assert "1,048,578 bytes" in page.inner_text("#error-config-file")
    assert page.input_value("#f-config") == "" and page.input_value("#f-model") == "gpt2-xl"


def test_first_screen_has_the_gpu_and_context_and_the_whole_command(base, page):
    """Issue 45 (a new user's first hour): the GPU and the context were in a collapsed
    group below about 40 architecture fields, and the command box cut the command off.
    Now the question's inputs come first, open, within the first screen (900 px), above
    every architecture group; the command box shows all of it (no horizontal overflow)."""
    page.goto(base + "?question=plan&model=meta-llama/Llama-3.1-8B&gpu=H100&ctx=4096")
    for sel in ("#f-ctx", "#f-gpu"):
        box = page.locator(sel).bounding_box()
        assert page.locator(sel).is_visible() and box["y"] + box["height"] <= 900, (sel, box)
    order = page.evaluate("""() => Array.from(document.querySelectorAll('#form details.group'))
        .map(d => [d.querySelector('summary').innerText, !!d.querySelector('#f-gpu, #f-ctx')])""")
    asked = [i for i, (_, has) in enumerate(order) if has]
    arch = [i for i, (t, _) in enumerate(order) if t.startswith("architecture")]
    assert asked and arch and max(asked) < min(arch), order
    fits = page.evaluate("""() => { const e = document.getElementById('cli-command');
        return [e.scrollWidth <= e.clientWidth, e.scrollHeight <= e.clientHeight + 2] }""")
    assert fits == [True, True]
    assert page.input_value("#cli-command") == (
        "python -m accounting plan --ctx=4096 --gpu=H100 meta-llama/Llama-3.1-8B")


def test_memory_plot_shows_the_answers_peak(base, page):
    """Was: the bar's "135.32 GB in all" beside the answer's 160.67 GB peak (the parts are
    held at one time or another; AdamW's √v temporary is none of them). Now a second bar is
    the step's peak, the CLI's own peak_bytes as the CLI writes a size, and the parts' sum
    says it is not the peak."""
    from accounting.units import gigabytes
    argv = ["plan", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx", "4096"]
    data = json.loads(cli(*argv, "--format", "json"))
    page.goto(base + "?question=plan&model=meta-llama/Llama-3.1-8B&gpu=H100&ctx=4096")
    fig = page.locator("#plot-memory")
    caption, svg = fig.locator("figcaption").inner_text(), fig.locator("svg").text_content()
    peak = gigabytes(data["peak"]["peak_bytes"])
    parts = sum(i["bytes"] for i in data["training_memory"]["items"] if i.get("on_gpu", True))
    assert peak in page.inner_text("#answer") and peak in svg and gigabytes(parts) in svg
    assert f"the step's peak, {peak}" in caption and "never all at once" in caption


def test_config_name_cannot_break_the_page_script(base, page, tmp_path):
    """A config named with '</script>' and '<!--<script>' (was: '<!--' went raw into the
    JSON script element): the browser's HTML parser keeps the element whole, its JSON is
    the CLI's, and the page's own script still runs (the Copy button works)."""
    name = "x</script><!--<script>y"
    text = json.dumps({"name": name, "vocab_size": 100, "context_length": 64, "num_layers": 2,
                       "d_model": 64, "num_heads": 4})
    page.goto(base + "?model=gpt2-xl&ctx=1024")
    page.click("summary:has-text('or a config.json')")
    page.fill("#f-config", text)
    page.select_option("#f-model", "")
    page.fill("#f-ctx", "32")
    page.click("#submit")
    page.wait_for_selector("#answer")
    folder = tmp_path / "pasted-config"
    folder.mkdir()
    (folder / "config.json").write_text(text)
    data = json.loads(cli("--config", str(folder / "config.json"), "--ctx", "32",
                          "--no-verify", "--format", "json"))
    assert json.loads(page.inner_text("#data")) == data and data["config"]["name"] == name
    assert page.locator("script").count() == 2  # the data and the page's own script
    page.click("#copy")
    assert page.inner_text("#copy") == "Copied"
