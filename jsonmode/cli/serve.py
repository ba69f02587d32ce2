"""``jsonmode serve``: the flags → a :class:`~jsonmode.serve.config.ServeConfig` → the server.

Keys come from environment variables named by the flags (``--api-key-env``,
``--upstream-key-env``), never from the command line, where ``ps`` would show them.
Exit status: 0 after a clean shutdown (SIGTERM/SIGINT, in-flight requests drained), 2
for bad usage (a missing variable, the serve extra not installed, a bad flag).
"""

from __future__ import annotations

import argparse
import os

from jsonmode.errors import UsageError

__all__ = ["config_of", "run"]


def _key(variable: str | None, flag: str) -> str | None:
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value:
        raise UsageError(
            f"{flag} {variable}: the variable is not set (or empty)",
            hint=f"export {variable}=... before starting the server",
        )
    return value


def config_of(args: argparse.Namespace) -> object:
    """The server's config for the parsed flags.

    Raises:
        UsageError: a key variable that is not set, a bad value.
    """
    from jsonmode.serve.config import ServeConfig

    cap = args.max_attempts_cap
    if cap is None:
        cap = max(5, args.max_attempts)
    return ServeConfig(
        upstream=args.upstream,
        api_base=args.api_base,
        upstream_api_key=_key(args.upstream_key_env, "--upstream-key-env"),
        host=args.host,
        port=args.port,
        mode=args.mode,
        max_attempts=args.max_attempts,
        max_attempts_cap=cap,
        tier=args.tier,
        vllm_processor=args.vllm_processor,
        api_key=_key(args.api_key_env, "--api-key-env"),
        workers=args.workers,
        timeout_s=args.timeout,
        max_body_bytes=args.max_body_bytes,
        keepalive_s=args.keepalive,
        drain_s=args.drain,
        cors_origins=tuple(args.cors_origin),
        access_log=args.access_log,
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status."""
    try:
        from jsonmode.serve import runner
    except ImportError as exc:
        raise UsageError(
            f"jsonmode serve needs the serve extra ({exc.name} is missing)",
            hint="pip install 'jsonmode[serve]'",
        ) from None
    config = config_of(args)
    return runner.serve(config)  # type: ignore[arg-type]
