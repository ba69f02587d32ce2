"""The ``jsonmode`` command.

    jsonmode generate --schema FILE [--model M] [--mode strict|repair] [--api-base URL]
                      [--max-attempts N] [--verbose] PROMPT
    jsonmode validate --schema FILE [INPUT]
    jsonmode repair   --schema FILE [INPUT]
    jsonmode demo     [--metrics-port P [--duration S]]
    jsonmode metrics serve --port P [--addr A]
    jsonmode metrics assets
    jsonmode dashboard [--metrics-url URL] [--port P] [--addr A] [--interval S]

The JSON value goes to stdout. On failure: one line on stderr (every attempt with
``--verbose``) and a non-zero exit status:

    1  the output does not conform (after every attempt)
    2  bad usage, bad schema, unreadable input
    3  the backend failed (transient failures after retries, or a refused request)

``validate`` and ``repair`` never import litellm, so they start fast. The servers
(``metrics serve``, ``dashboard``, ``demo --metrics-port``) print their URL on the
first line of stdout and run until Ctrl-C (exit status 0).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from jsonmode._json import dumps, has_surrogate
from jsonmode.errors import BackendError, JsonModeError, OutputError, SchemaError, UsageError
from jsonmode.reading import MODES, Mode, parse
from jsonmode.schema.core import Schema

__all__ = ["main"]

EXIT_NONCONFORMING = 1
EXIT_USAGE = 2
EXIT_BACKEND = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jsonmode", description="Make any LLM return JSON that conforms to a schema."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def schema_command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--schema", required=True, type=pathlib.Path, help="JSON Schema file")
        sub.add_argument("--verbose", "-v", action="store_true", help="show every attempt/repair")
        sub.add_argument("--indent", type=int, default=None, help="pretty-print the output")
        return sub

    generate = schema_command("generate", "Generate conforming JSON from a model.")
    generate.add_argument(
        "--model",
        default=os.environ.get("JSONMODE_MODEL"),
        help="litellm model string, e.g. openai/gpt-4o-mini (default: $JSONMODE_MODEL)",
    )
    generate.add_argument("--mode", choices=MODES, default="strict")
    generate.add_argument("--api-base", help="endpoint URL, e.g. http://127.0.0.1:8000/v1")
    generate.add_argument("--api-key", default=None, help="API key (default: provider's env var)")
    generate.add_argument("--max-attempts", type=int, default=3)
    generate.add_argument("--tier", choices=("auto", "native", "prompted"), default="auto")
    generate.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds one backend call may take, the whole reply included (default 60)",
    )
    generate.add_argument("--temperature", type=float, default=None)
    generate.add_argument("prompt", metavar="PROMPT", help="the prompt ('-' reads stdin)")

    for name, text in (
        ("validate", "Check that INPUT is JSON conforming to the schema (strict)."),
        ("repair", "Repair INPUT into JSON conforming to the schema; repairs go to stderr."),
    ):
        sub = schema_command(name, text)
        sub.add_argument("input", nargs="?", default="-", help="file to read (default: stdin)")

    demo = commands.add_parser("demo", help="Run the offline demo.")
    demo.add_argument("--verbose", "-v", action="store_true")
    demo.add_argument(
        "--model", default=None, help="a Hugging Face model name or path (default: a random model)"
    )
    demo.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="P",
        help="serve Prometheus metrics on 127.0.0.1:P, then keep sending demo traffic "
        "(watch it with: jsonmode dashboard)",
    )
    demo.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="with --metrics-port: seconds of demo traffic (default: until Ctrl-C)",
    )

    metrics = commands.add_parser("metrics", help="Prometheus exporter and dashboard assets.")
    metrics_commands = metrics.add_subparsers(dest="metrics_command", required=True)
    serve = metrics_commands.add_parser(
        "serve",
        help="Serve the metrics of every process that writes to $PROMETHEUS_MULTIPROC_DIR.",
        description="Serve /metrics aggregated over every process that writes to "
        "$PROMETHEUS_MULTIPROC_DIR (multiprocess mode). A single process serves its own "
        "metrics with jsonmode.metrics.serve(port) instead.",
    )
    serve.add_argument("--port", type=int, required=True, metavar="P")
    serve.add_argument("--addr", default="127.0.0.1", help="address to bind (default: loopback)")
    metrics_commands.add_parser(
        "assets", help="Print the folder holding the Grafana dashboard and Prometheus rules."
    )

    dashboard = commands.add_parser(
        "dashboard",
        help="Serve a live dashboard page for an exporter.",
        description="Serve a self-contained live page (no CDN; works offline) that polls "
        "the exporter and charts conformance, outcomes, latency and decoder costs.",
    )
    dashboard.add_argument(
        "--metrics-url",
        default="http://127.0.0.1:9464/metrics",
        metavar="URL",
        help="the exporter (default: http://127.0.0.1:9464/metrics)",
    )
    dashboard.add_argument("--port", type=int, default=8765, metavar="P", help="default 8765")
    dashboard.add_argument(
        "--addr", default="127.0.0.1", help="address to bind (default: loopback)"
    )
    dashboard.add_argument(
        "--interval", type=float, default=2.0, metavar="S", help="seconds between polls"
    )
    return parser


def _stdin() -> str:
    """All of stdin; a UsageError (not a traceback) when it is not UTF-8 text."""
    try:
        text = sys.stdin.read()
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read stdin: not UTF-8 text ({exc.reason})") from None
    if has_surrogate(text):  # undecodable bytes, as the surrogateescape handler keeps them
        raise UsageError("cannot read stdin: not UTF-8 text")
    return text


def _read(source: str) -> str:
    if source == "-":
        return _stdin()
    try:
        return pathlib.Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {source}: {exc}") from None


def _emit(value: Any, indent: int | None, out: TextIO) -> None:
    text = dumps(value) if indent is None else json.dumps(value, ensure_ascii=False, indent=indent)
    out.write(text + "\n")


def _generate(args: argparse.Namespace) -> int:
    from jsonmode.facade import JsonMode

    if not args.model:
        raise UsageError("no model given", hint="pass --model or set JSONMODE_MODEL")
    options: dict[str, Any] = {"timeout": args.timeout}
    if args.api_base:
        options["api_base"] = args.api_base
    if args.api_key:
        options["api_key"] = args.api_key
    elif args.api_base:
        # OpenAI-compatible local servers need *a* key to satisfy the SDK, not a real one.
        options["api_key"] = os.environ.get("OPENAI_API_KEY", "unused")
    if args.temperature is not None:
        options["temperature"] = args.temperature
    # An argument that was not UTF-8 (kept by surrogateescape) is refused by the façade
    # like any prompt holding a lone surrogate (prompting.user_messages).
    prompt = _stdin() if args.prompt == "-" else args.prompt
    spec = Schema.of(args.schema)
    jm = JsonMode(args.model, args.mode, args.max_attempts, tier=args.tier, **options)
    result = jm.run(prompt, spec)
    if args.verbose:
        print(f"tier: {result.tier}, mode: {result.mode}", file=sys.stderr)
        for attempt in result.attempts:
            print(attempt.describe(), file=sys.stderr)
    _emit(result.data, args.indent, sys.stdout)
    return 0


def _check(args: argparse.Namespace) -> int:
    mode: Mode = "repair" if args.command == "repair" else "strict"
    parsed = parse(_read(args.input), Schema.of(args.schema), mode)
    if args.verbose:
        for repair in parsed.repairs:
            print(f"repair: {repair}", file=sys.stderr)
    _emit(parsed.data, args.indent, sys.stdout)
    return 0


def _wait_for_interrupt() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def _metrics(args: argparse.Namespace) -> int:
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

    with _bound(lambda: jsonmode.metrics.serve(args.port, addr=args.addr)) as exporter:
        print(f"serving {exporter.url} (Ctrl-C to stop)", flush=True)
        _wait_for_interrupt()
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from jsonmode.metrics.dashboard import serve_dashboard

    with _bound(
        lambda: serve_dashboard(args.metrics_url, args.port, args.addr, interval=args.interval)
    ) as dashboard:
        print(f"dashboard on {dashboard.url} (Ctrl-C to stop)", flush=True)
        _wait_for_interrupt()
    return 0


def _bound(start: Any) -> Any:
    """Start a server, turning a port that cannot be bound into a usage error."""
    try:
        return start()
    except OSError as exc:
        raise UsageError(f"cannot listen: {exc.strerror or exc}") from None


def _report(error: JsonModeError, verbose: bool) -> None:
    print(f"jsonmode: error: {type(error).__name__}: {error}".replace("\n", " "), file=sys.stderr)
    if not verbose:
        return
    for attempt in error.attempts:
        print(attempt.describe(), file=sys.stderr)
    if isinstance(error, OutputError):
        for issue in error.issues:
            print(f"  issue: {issue}", file=sys.stderr)
        for repair in error.repairs:
            print(f"  repair: {repair}", file=sys.stderr)


def _exit_status(error: JsonModeError) -> int:
    if isinstance(error, BackendError):
        return EXIT_BACKEND
    if isinstance(error, (SchemaError, UsageError)):
        return EXIT_USAGE
    return EXIT_NONCONFORMING


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    try:
        if args.command == "generate":
            return _generate(args)
        if args.command in ("validate", "repair"):
            return _check(args)
        if args.command == "metrics":
            return _metrics(args)
        if args.command == "dashboard":
            return _dashboard(args)
        from jsonmode.demo import run_demo

        if args.duration is not None and args.metrics_port is None:
            raise UsageError("--duration needs --metrics-port")
        return run_demo(
            verbose=verbose,
            model=args.model,
            metrics_port=args.metrics_port,
            duration=args.duration,
        )
    except JsonModeError as error:
        _report(error, verbose)
        return _exit_status(error)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
