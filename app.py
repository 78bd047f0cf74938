"""The web page as a Hugging Face Space runs it (sdk: docker; spaces/README.md and
spaces/Dockerfile), or anywhere: `python app.py`.

The same server as `python -m accounting web` (accounting/web/), with the shipped presets
only: the page reads no hub and no network. Host and port from the environment:
ACCOUNTING_WEB_HOST (default 127.0.0.1; the Space's Dockerfile sets 0.0.0.0, as a
container must) and PORT (default 7860, a Space's app_port).
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here reads the hub; say so to libraries


def main() -> int:
    from accounting.web.server import make_server, url
    host = os.environ.get("ACCOUNTING_WEB_HOST", "127.0.0.1")
    port = int(os.environ.get("PORT", "7860"))
    server = make_server(port, host)
    print(url(server), flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("accounting web: interrupted", file=sys.stderr)
        return 130
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
