"""The vLLM suite: runs only where vLLM is installed (its own environment, see
.ci/vllm.sh), against a random-weight model written here with a real tokenizer.

The engines are started once per module and shared (the server once per session):
loading one takes ~25 s here.
vLLM runs its engine in child processes (the CPU platform spawns them), so these
tests drive it exactly as a user's program does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.tiny_llama import build, offline_environment

offline_environment()  # before vLLM is imported

PROCESSOR = "jsonmode.adapters.vllm:JsonModeLogitsProcessor"
SERVER_START_LIMIT = 300.0  # seconds; it answers ~40 s after start here


def pytest_configure(config: pytest.Config) -> None:
    # vLLM and its dependencies warn about their own internals (deprecations in
    # torch and transformers APIs they call): matched by category and module only.
    for line in (
        "ignore::DeprecationWarning:vllm.*",
        "ignore::DeprecationWarning:torch.*",
        "ignore::DeprecationWarning:transformers.*",
        "ignore::FutureWarning:vllm.*",
        "ignore::FutureWarning:transformers.*",
        "ignore::UserWarning:vllm.*",
        "ignore::UserWarning:torch.*",
        "ignore::ResourceWarning",
    ):
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama (hidden 64) with the Qwen2.5 tokenizer, on disk."""
    return build(tmp_path_factory.mktemp("tiny-llama"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """A vLLM OpenAI-compatible server in a child process, on 127.0.0.1."""

    def __init__(self, model: Path, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        command = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            "2048",
            "--max-num-seqs",
            "32",
            "--seed",
            "0",
            "--enforce-eager",
            *extra,
        ]
        self._out = log.open("wb")
        self.process = subprocess.Popen(
            command, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_LIMIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self.process.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except OSError:
                time.sleep(1.0)
        raise RuntimeError(f"vLLM not ready after {SERVER_START_LIMIT} s:\n{self.tail()}")

    def tail(self, chars: int = 6000) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")[-chars:]

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)
        self._out.close()


@pytest.fixture(scope="session")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A vLLM server with jsonmode's processor loaded by ``--logits-processors``, one for
    the session (test_server.py and test_serve.py share it: a start costs ~40 s).

    Its built-in structured outputs (the native tier) run without "any whitespace":
    vLLM reads that option from the server's configuration only (a request's
    ``disable_any_whitespace`` is ignored), and without it xgrammar lets a random
    model emit whitespace until ``max_tokens``.
    """
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    running = Server(
        tiny_model,
        log,
        "--logits-processors",
        PROCESSOR,
        "--structured-outputs-config",
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
    )
    try:
        running.wait_ready()
        yield running
    finally:
        running.close()
