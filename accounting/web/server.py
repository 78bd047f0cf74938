"""The HTTP server: the standard library's ThreadingHTTPServer, GET and POST.

    /                    the page (the query string: the inputs; answered on load)
    /download.json       the CLI's --format json for the same query
    /download.csv        the CLI's --format csv
    /healthz             'ok'

A request never ends the server: every failure of one is a one-line answer (bad input:
the CLI's message, status 400 on the downloads; a bug: status 500 and one line).
POST takes the same fields as a form body (a config.json too long for a URL).
"""
from __future__ import annotations

import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

from accounting.web import answer, form, page

LOOPBACK = "127.0.0.1"
MAX_BODY_BYTES = 4 * 2**20  # a form body: a pasted config.json (at most 1 MiB) URL-encoded
# a query or form body's fields: the page's longest form has about 130; parse_qsl raises
# past the bound, which is refused (was: every field dropped, the default page answered)
MAX_FIELDS = 1000
# seconds a connection may stay silent (socketserver's StreamRequestHandler.timeout, set on
# the socket): a client that announces a body and sends less cannot hold a thread forever
TIMEOUT_S = 30
# the Host names a request may carry (besides the bound address): a page on another site
# whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own name, and is refused
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


class Refused(Exception):
    """A request refused before it reaches the CLI: (status, one line)."""

    def __init__(self, status: int, line: str):
        super().__init__(line)
        self.status, self.line = status, line


def _query(text: str) -> dict[str, str]:
    """The last value of each name (a form sends each once; a URL may repeat one)."""
    try:
        return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS))
    except ValueError:  # more than max_num_fields
        raise Refused(HTTPStatus.BAD_REQUEST,
                      f"a query or form has at most {MAX_FIELDS:,} fields") from None


def host_allowed(host: str | None, bound: str, port: int) -> bool:
    """Whether a Host header names this server: a loopback name or the bound address, with
    no port or the bound one. No Host header (HTTP/1.0) is allowed: a browser always sends
    one, so a rebinding page cannot leave it out."""
    if host is None:
        return True
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8080
        end = host.find("]")
        name, rest = host[:end + 1], host[end + 1:]
        if end < 0 or rest not in ("",) and not rest.startswith(":"):
            return False
        p = rest[1:]
    elif host.count(":") == 1:
        name, p = host.split(":")
    else:
        name, p = host, ""
    if p and p != str(port):
        return False
    bound = bound.lower()
    return name in LOOPBACK_NAMES or name in (bound, f"[{bound}]")


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "localhost")


class Handler(BaseHTTPRequestHandler):
    server_version = "accounting-web"
    protocol_version = "HTTP/1.1"
    timeout = TIMEOUT_S

    def log_message(self, format, *args):  # quiet: the terminal keeps the URL line only
        pass

    def _send(self, status: int, body: str, kind: str, extra: dict | None = None) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _route(self, path: str, query: dict[str, str]) -> None:
        if path == "/" and form.SWITCH in query and self.command != "POST":
            self._send(HTTPStatus.SEE_OTHER, "", "text/plain; charset=utf-8",
                       {"Location": "/?" + urlencode(form.switched(query))})
        elif path == "/":
            q = form.switched(query) if form.SWITCH in query else form.with_defaults(query)
            self._send(HTTPStatus.OK, page.render(q, answer.run(q)), "text/html; charset=utf-8")
        elif path in ("/download.json", "/download.csv"):
            fmt = path.rsplit(".", 1)[1]
            status, text, error = answer.download(form.with_defaults(query), fmt)
            if status:
                self._send(HTTPStatus.BAD_REQUEST, error + "\n", "text/plain; charset=utf-8")
            else:
                kind = "application/json" if fmt == "json" else "text/csv"
                self._send(HTTPStatus.OK, text, f"{kind}; charset=utf-8",
                           {"Content-Disposition": f'attachment; filename="answer.{fmt}"'})
        elif path == "/healthz":
            self._send(HTTPStatus.OK, "ok\n", "text/plain; charset=utf-8")
        else:
            self._send(HTTPStatus.NOT_FOUND, "not found\n", "text/plain; charset=utf-8")

    def _handle(self, body: str = "") -> None:
        try:
            self._check_host()
            url = urlsplit(self.path)
            query = _query(url.query)
            query.update(_query(body))
            self._route(url.path, query)
        except Refused as e:
            self._send(e.status, e.line + "\n", "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser left
        except Exception as e:  # a bug: one line, and the server goes on
            try:
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR,
                           f"internal error ({type(e).__name__}); please report it\n",
                           "text/plain; charset=utf-8")
            except OSError:
                pass

    def _check_host(self) -> None:
        host, port = self.server.server_address[:2]
        # only a loopback server is guarded: one bound to 0.0.0.0 (app.py in a Space's
        # container) is meant to be reached by its public name
        if is_loopback(host) and not host_allowed(self.headers.get("Host"), host, port):
            raise Refused(HTTPStatus.FORBIDDEN, "this server answers requests to "
                          f"{LOOPBACK}:{port} or localhost:{port} only (Host header)")

    def do_GET(self) -> None:
        self._handle()

    do_HEAD = do_GET

    def do_POST(self) -> None:
        try:  # a foreign Host is refused before its body is read
            self._check_host()
        except Refused as e:
            self.close_connection = True
            self._send(e.status, e.line + "\n", "text/plain; charset=utf-8")
            return
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if not 0 <= n <= MAX_BODY_BYTES:
            self.close_connection = True
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                       f"a form body has at most {MAX_BODY_BYTES:,} bytes\n",
                       "text/plain; charset=utf-8")
            return
        try:
            body = self.rfile.read(n)
        except TimeoutError:  # fewer bytes than announced, then silence
            self.close_connection = True
            self._send(HTTPStatus.REQUEST_TIMEOUT, f"the form body did not arrive within "
                       f"{self.timeout} s\n", "text/plain; charset=utf-8")
            return
        self._handle(body.decode("utf-8", "replace"))


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # never a traceback on stderr
        print(f"accounting web: a request from {client_address[0]} failed "
              f"({sys.exc_info()[0].__name__})", file=sys.stderr)


def make_server(port: int = 0, host: str = LOOPBACK) -> Server:
    """A server on host:port (port 0: a free one); serve_forever() runs it."""
    return Server((host, port), Handler)


def url(server: Server) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/"
