"""``jsonmode demo``: the main job, offline, on an embedded default, optionally serving
metrics (see :mod:`jsonmode.cli`; the demo itself is :mod:`jsonmode.demo`)."""

from __future__ import annotations

import argparse

from jsonmode.errors import UsageError

__all__ = ["run"]


def run(args: argparse.Namespace, *, verbose: bool) -> int:
    """``jsonmode demo`` with its options; a UsageError for ``--duration`` without
    ``--metrics-port``. Returns 0 when every scenario conformed
    (:func:`jsonmode.demo.run_demo`)."""
    from jsonmode.demo import run_demo

    if args.duration is not None and args.metrics_port is None:
        raise UsageError("--duration needs --metrics-port")
    return run_demo(
        verbose=verbose,
        model=args.model,
        metrics_port=args.metrics_port,
        duration=args.duration,
    )
