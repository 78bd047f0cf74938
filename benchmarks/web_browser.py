"""Shared by benchmarks/web_screenshots.py and benchmarks/bench_web.py: the page's server
in a thread of this process, and Debian's Chromium driven by Playwright (the `web` extra).

CHROMIUM: the browser (default /usr/bin/chromium, Debian's package: `apt-get install -y
chromium`; a browser download cannot work here)."""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accounting.web.server import make_server, url  # noqa: E402


def chromium() -> str | None:
    path = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
    return path if os.access(path, os.X_OK) else shutil.which("chromium")


@contextlib.contextmanager
def served():
    """The base URL of a page server running in a daemon thread (stopped on leaving)."""
    server = make_server(0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    thread.start()
    try:
        yield url(server)
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def browser_page(width: int = 1200, height: int = 900):
    """A Playwright page in headless Chromium; SystemExit with a reason when there is none."""
    exe = chromium()
    if exe is None:
        raise SystemExit("no Chromium: apt-get install -y chromium (or set CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit("no Playwright: pip install -e '.[web]'") from None
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            yield b.new_page(viewport={"width": width, "height": height})
        finally:
            b.close()
