"""A stand-in for the Hugging Face hub on 127.0.0.1 (HF_ENDPOINT points at it), for tests
that must never reach the network.

It answers what huggingface_hub 2.4.0 asks of the hub for hf_hub_download and
get_safetensors_metadata (file_download.py get_hf_file_metadata / _httpx2 download;
hf_api.py parse_safetensors_file_metadata): HEAD and GET of
/{org}/{name}/resolve/{revision}/{file}, with X-Repo-Commit, ETag and Content-Length, ranged
GETs ('range: bytes=a-b' -> 206), and the hub's error codes in X-Error-Code (RepoNotFound,
EntryNotFound, GatedRepo: utils/_http.py hf_raise_for_status reads them). Every request is
logged, so that a test can assert that no weights were read.
"""
from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "a" * 40
_PATH = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class Hub:
    """repos: repo id -> {file name -> bytes}; gated: ids that need an Authorization header."""

    def __init__(self, repos: dict, gated: frozenset = frozenset()):
        self.repos, self.gated = repos, gated
        self.log: list[tuple[str, str, str | None]] = []  # (method, path, range)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self._answer(head=True)

            def do_GET(self):
                self._answer(head=False)

            def _error(self, status: int, code: str):
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, head: bool):
                rng = self.headers.get("range")
                hub.log.append((self.command, self.path, rng))
                m = _PATH.match(self.path.split("?")[0])
                if not m or m.group(1) not in hub.repos:
                    return self._error(401, "RepoNotFound")
                repo, _, name = m.groups()
                if repo in hub.gated and not self.headers.get("authorization"):
                    return self._error(401, "GatedRepo")
                files = hub.repos[repo]
                if name not in files:
                    return self._error(404, "EntryNotFound")
                body = files[name]
                status = 200
                r = _RANGE.match(rng or "")
                if r:
                    start = int(r.group(1))
                    end = min(int(r.group(2)) if r.group(2) else len(body) - 1, len(body) - 1)
                    body, status = body[start:end + 1], 206
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha256(files[name]).hexdigest() + '"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
