"""The server's settings: one frozen value, built by ``jsonmode serve`` from its flags.

Every worker process builds its app from the same value: :func:`to_env` writes it into
the environment variable :data:`ENV` as JSON and :func:`from_env` reads it back
(``uvicorn`` starts workers by importing a factory, with no arguments). The server's own
key and the upstream's key travel that way too, inside the one process tree; neither is
ever logged, echoed in a reply or put in a metric label.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Literal

from jsonmode.errors import UsageError
from jsonmode.repair.parse import MODES, Mode

__all__ = ["ENV", "ServeConfig", "from_env", "to_env"]

#: The environment variable that carries a :class:`ServeConfig` to worker processes.
ENV = "JSONMODE_SERVE_CONFIG"

TierChoice = Literal["auto", "native", "prompted"]


@dataclass(frozen=True)
class ServeConfig:
    """What ``jsonmode serve`` was told.

    Attributes:
        upstream: the model behind the server, a litellm model string
            (``"openai/gpt-4o-mini"``, ``"hosted_vllm/Qwen/Qwen3-8B"``). ``openai/`` and
            ``hosted_vllm/`` models (OpenAI-compatible servers) are called through one
            shared OpenAI SDK client with pooled connections; other providers through
            litellm.
        api_base: the upstream's base URL (``http://127.0.0.1:8000/v1``); None: the
            provider's default.
        upstream_api_key: the key sent upstream (from ``--upstream-key-env``); None:
            none (a placeholder where the SDK insists on one).
        host, port: where to listen. 127.0.0.1 unless told otherwise; port 0 picks a
            free one (printed on stderr).
        mode, max_attempts: the defaults for every structured request.
        max_attempts_cap: the most attempts a request may ask for in its ``jsonmode``
            field; a larger number is capped to it.
        tier: ``"auto"`` (native where the upstream is known to take a JSON Schema: a
            vLLM server, OpenAI's own API; else prompted), ``"native"`` or
            ``"prompted"``.
        vllm_processor: the upstream is a vLLM server running jsonmode's logits
            processor: the schema goes as ``vllm_xargs.json_schema`` (constrained by
            jsonmode's own decoder inside vLLM) and the tier is native.
        api_key: the server's own key (from ``--api-key-env``): every request but
            ``/healthz`` must carry ``Authorization: Bearer <key>``. None: open.
        workers: server processes sharing the listening socket.
        timeout_s: seconds one upstream call may take, whole reply included.
        max_body_bytes: the largest request body read (413 beyond).
        keepalive_s: a stream whose attempt is still running gets an SSE comment this
            often; a stream's response starts no later than this (a failure found
            before it is an HTTP 422, after it an in-stream error event).
        drain_s: on SIGTERM, seconds in-flight requests get to finish.
        cors_origins: origins allowed by CORS (empty: CORS off, no headers sent).
        access_log: uvicorn's access log (off by default).
    """

    upstream: str
    api_base: str | None = None
    upstream_api_key: str | None = dataclasses.field(default=None, repr=False)
    host: str = "127.0.0.1"
    port: int = 8000
    mode: Mode = "repair"
    max_attempts: int = 3
    max_attempts_cap: int = 5
    tier: TierChoice = "auto"
    vllm_processor: bool = False
    api_key: str | None = dataclasses.field(default=None, repr=False)
    workers: int = 1
    timeout_s: float = 120.0
    max_body_bytes: int = 4 * 1024 * 1024
    keepalive_s: float = 5.0
    drain_s: float = 30.0
    cors_origins: tuple[str, ...] = ()
    access_log: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.upstream, str) or "/" not in self.upstream:
            raise UsageError(
                f"upstream must be a litellm model string with its provider, not {self.upstream!r}",
                hint='e.g. "openai/gpt-4o-mini" or "hosted_vllm/Qwen/Qwen3-8B"',
            )
        if self.mode not in MODES:
            raise UsageError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.tier not in ("auto", "native", "prompted"):
            raise UsageError(f"tier must be auto, native or prompted, not {self.tier!r}")
        for name in ("max_attempts", "max_attempts_cap", "workers", "max_body_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be a positive integer, not {value!r}")
        if self.max_attempts > self.max_attempts_cap:
            raise UsageError(
                f"max_attempts ({self.max_attempts}) is above max_attempts_cap "
                f"({self.max_attempts_cap})"
            )
        if (
            isinstance(self.port, bool)
            or not isinstance(self.port, int)
            or not 0 <= self.port < 65536
        ):
            raise UsageError(f"port must be 0..65535, not {self.port!r}")
        for name in ("timeout_s", "keepalive_s", "drain_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise UsageError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.api_key is not None and not self.api_key:
            raise UsageError("the server's API key is empty", hint="set the variable to a key")


def to_env(config: ServeConfig) -> dict[str, str]:
    """The environment entry that hands ``config`` to worker processes."""
    fields = dataclasses.asdict(config)
    fields["cors_origins"] = list(config.cors_origins)
    return {ENV: json.dumps(fields)}


def from_env(environ: os._Environ[str] | dict[str, str] | None = None) -> ServeConfig:
    """The :class:`ServeConfig` in :data:`ENV`.

    Raises:
        UsageError: the variable is missing or does not hold a config.
    """
    text = (os.environ if environ is None else environ).get(ENV)
    if not text:
        raise UsageError(f"{ENV} is not set", hint="start the server with `jsonmode serve`")
    try:
        fields: dict[str, Any] = json.loads(text)
        fields["cors_origins"] = tuple(fields.get("cors_origins", ()))
        return ServeConfig(**fields)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{ENV} does not hold a server config: {exc}") from None
