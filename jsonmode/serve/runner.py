"""Running the app: uvicorn, one process (the ops helper extends this)."""

from __future__ import annotations

import socket
import sys

import uvicorn

from jsonmode.serve.app import create_app
from jsonmode.serve.config import ServeConfig

__all__ = ["serve"]


def serve(config: ServeConfig) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), log_level="warning", access_log=config.access_log)
    )
    print(f"jsonmode serve: serving on http://{host}:{port}", file=sys.stderr, flush=True)
    server.run(sockets=[sock])
    return 0
