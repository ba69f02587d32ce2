"""``jsonmode serve``'s app on a thread: uvicorn on 127.0.0.1, a free port.

    with ServedApp(ServeConfig("openai/scripted", api_base=upstream.base_url)) as served:
        client = openai.OpenAI(base_url=served.base_url, api_key="k")

The same app and server as ``jsonmode serve`` runs, in this process (fast to start;
tests that need real processes, signals or workers start the command instead).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from jsonmode.serve.app import create_app
from jsonmode.serve.config import ServeConfig
from tests.support.openai_server import OpenAIServer

__all__ = ["ServedApp", "Stack"]


class ServedApp:
    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(create_app(config), log_level="warning", access_log=False)
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.server.run(sockets=[self._sock])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServedApp:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the served app did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.server.should_exit = True
        self._thread.join(30)
        self._sock.close()


class Stack:
    """A scripted upstream, the served app in front of it and an ``openai`` client: one
    per test module, re-scripted per test (:meth:`script`). ``settings`` override the
    :class:`ServeConfig` fields (``keepalive_s``, ``tier`` ...)."""

    def __init__(self, **settings: Any) -> None:
        import openai

        self.upstream = OpenAIServer()
        self.config = ServeConfig("openai/scripted", api_base=self.upstream.base_url, **settings)
        self.served = ServedApp(self.config).__enter__()
        self.base = self.served.base_url
        self.client = openai.OpenAI(base_url=self.base, api_key="none", max_retries=0)

    def script(self, *actions: Any) -> OpenAIServer:
        """Answer the next requests with ``actions`` (the recorded requests forgotten)."""
        self.upstream.rescript(actions)
        return self.upstream

    def close(self) -> None:
        self.client.close()
        self.served.__exit__()
        self.upstream.close()
