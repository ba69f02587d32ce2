"""``jsonmode serve``'s app in this process: uvicorn on a thread, 127.0.0.1, a free port.

    with OpenAIServer([Reply('{"a": 1}')]) as upstream, served(upstream) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="none")

The app is the real one (:func:`jsonmode.serve.app.create_app`), in front of the
scripted upstream; leaving the block stops the server and joins its thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from jsonmode.serve.app import create_app
from jsonmode.serve.config import ServeConfig
from tests.support.openai_server import OpenAIServer

__all__ = ["served"]


@contextmanager
def served(upstream: OpenAIServer, **settings: Any) -> Iterator[str]:
    """The server's base URL (``http://127.0.0.1:PORT/v1``) while the block runs.

    ``settings``: ServeConfig fields (default: the scripted upstream as ``openai/m``,
    prompted tier, 3 attempts, a short keep-alive).
    """
    fields: dict[str, Any] = {
        "upstream": "openai/m",
        "api_base": upstream.base_url,
        "port": 0,
        "tier": "prompted",
        "timeout_s": 10.0,
        "keepalive_s": 0.5,
        **settings,
    }
    config = ServeConfig(**fields)
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host="127.0.0.1", port=0, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the in-process server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
