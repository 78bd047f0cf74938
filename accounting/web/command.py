"""`python -m accounting web [--port P]`: the planner as a local web page (accounting/web/).

Bound to 127.0.0.1 (loopback only); the first line printed is the URL. It runs until
Ctrl-C, which ends it like every command (accounting/cli/main.py: exit 130, one line).
"""
from __future__ import annotations

import argparse

from accounting.cli.args import Parser
from accounting.runtime import safe_io
from accounting.runtime.errors import UsageError, os_problem, shorten


def _port(text: str) -> int:
    digits = text.strip()
    if not digits.isascii() or not digits.isdigit() or len(digits) > 5 or int(digits) > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65,535, got "
                                         f"{shorten(text)}")
    return int(digits)


_port.__name__ = "port"


def parser() -> Parser:
    p = Parser(prog="python -m accounting web",
               description="A local web page over the command line: pick a preset or paste a "
                           "config.json, ask for the FLOPs, a training plan, a serving plan or "
                           "the layouts of many GPUs; the answer is this CLI's own output (text "
                           "and JSON), with plots, downloads, the equivalent command and a "
                           "permalink. Served on 127.0.0.1 only; see docs/web.md.")
    p.add_argument("--port", type=_port, default=0, metavar="P",
                   help="port on 127.0.0.1 (default 0: a free one)")
    return p


def main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    from accounting.web.server import make_server, url
    try:
        server = make_server(ns.port)
    except OSError as e:
        raise UsageError(os_problem(e, f"cannot listen on 127.0.0.1:{ns.port}") +
                         "; give another --port, or leave it out for a free one") from None
    with server:
        safe_io.write_stdout(url(server) + "\n")
        safe_io.say("serving the page on 127.0.0.1 only; Ctrl-C to stop")
        server.serve_forever(poll_interval=0.2)
    return 0
