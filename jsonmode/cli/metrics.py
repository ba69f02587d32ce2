"""``jsonmode metrics serve|assets`` and ``jsonmode dashboard``: the metrics servers,
each printing its URL on the first line of stdout and running until Ctrl-C (see
:mod:`jsonmode.cli`)."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from jsonmode.errors import UsageError

__all__ = ["run_dashboard", "run_metrics"]


def run_metrics(args: argparse.Namespace) -> int:
    """``jsonmode metrics serve|assets`` (see :mod:`jsonmode.cli`): ``serve`` runs until
    Ctrl-C (exit status 0); a UsageError without ``PROMETHEUS_MULTIPROC_DIR`` or for a
    port that cannot be bound."""
    if args.metrics_command == "assets":
        from jsonmode.metrics import ASSETS

        print(ASSETS)
        return 0
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        raise UsageError(
            "PROMETHEUS_MULTIPROC_DIR is not set: this process has no metrics of its own",
            hint="set it (to the same directory) for your workers and for this command; "
            "a single process serves itself with jsonmode.metrics.serve(port)",
        )
    import jsonmode.metrics

    with _bound(
        lambda: jsonmode.metrics.serve(args.port, addr=args.addr), args.addr, args.port
    ) as exporter:
        print(f"serving {exporter.url} (Ctrl-C to stop)", flush=True)
        _wait_for_interrupt()
    return 0


def run_dashboard(args: argparse.Namespace) -> int:
    """``jsonmode dashboard`` (see :mod:`jsonmode.cli`): runs until Ctrl-C (exit status
    0); a UsageError for a port that cannot be bound."""
    from jsonmode.metrics.dashboard import serve_dashboard

    with _bound(
        lambda: serve_dashboard(args.metrics_url, args.port, args.addr, interval=args.interval),
        args.addr,
        args.port,
    ) as dashboard:
        print(f"dashboard on {dashboard.url} (Ctrl-C to stop)", flush=True)
        _wait_for_interrupt()
    return 0


def _wait_for_interrupt() -> None:
    """Sleep until Ctrl-C."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def _bound(start: Any, addr: str, port: int) -> Any:
    """Start a server on ``addr:port``, turning a port that cannot be bound into a usage
    error that names it."""
    try:
        return start()
    except OSError as exc:
        where = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
        raise UsageError(f"cannot listen on {where}: {exc.strerror or exc}") from None
