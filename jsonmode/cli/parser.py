"""The ``jsonmode`` command's arguments: every subcommand, option and help text.

What each command does with them is in :mod:`jsonmode.cli` (and ``jsonmode batch`` in
:mod:`jsonmode.cli.batch`); this module only declares them.
"""

from __future__ import annotations

import argparse
import os
import pathlib

from jsonmode.backends.deadline import DEFAULT_TIMEOUT
from jsonmode.repair.parse import MODES
from jsonmode.retry import TransportPolicy

__all__ = ["build_parser", "model_options", "nesting_option", "targets"]

# (Schema.warnings: printed by print_schema_warnings)
_SCHEMA_HELP = (
    "JSON Schema file, or TypeScript file (.ts: needs the typescript extra); what the schema "
    "lint finds, as jsonmode lint does, is warned about on stderr"
)
_STRICT_HELP = (
    "with --schema: refuse a schema with lint warnings (exit status 2, each warning's "
    "JSON pointer and fix in the error) instead of warning and carrying on"
)
_TYPE_HELP = "with a TypeScript --schema: the root type (default: the one type the file exports)"


def build_parser() -> argparse.ArgumentParser:
    """The ``jsonmode`` command's argument parser (see :mod:`jsonmode.cli`)."""
    parser = argparse.ArgumentParser(
        prog="jsonmode", description="Make any LLM return JSON that conforms to a schema."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def schema_command(
        name: str, help_text: str, *, grammars: bool = False
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if grammars:
            targets(sub, "a text matching", "instead of JSON")
        else:
            sub.add_argument("--schema", required=True, type=pathlib.Path, help=_SCHEMA_HELP)
            sub.add_argument("--type", metavar="TYPE", help=_TYPE_HELP)
        sub.add_argument("--strict-schema", action="store_true", help=_STRICT_HELP)
        sub.add_argument("--verbose", "-v", action="store_true", help="show every attempt/repair")
        sub.add_argument("--indent", type=int, default=None, help="pretty-print the output")
        return sub

    generate = schema_command(
        "generate",
        "Generate conforming JSON from a model (or, with --grammar or --regex, a matching text).",
        grammars=True,
    )
    model_options(generate)
    generate.add_argument(
        "--stream",
        action="store_true",
        help='show the value as it grows: one JSON line per event on stderr, {"partial": '
        'VALUE}, {"thinking": TEXT} (a reasoning model\'s thinking) or {"retry": {...}} '
        "(the partials so far are void); the value on stdout",
    )
    generate.add_argument(
        "--reasoning",
        default="auto",
        metavar="auto|off|END_MARKER",
        help="a reasoning model's thinking, split off the reply before the answer is read: "
        "auto (default) knows <think>, [THINK] and gpt-oss's channels; off reads the reply "
        "whole; END_MARKER names the marker that ends the thinking (e.g. '</reasoning>': "
        "the same tag without the slash opens it)",
    )
    generate.add_argument("prompt", metavar="PROMPT", help="the prompt ('-' reads stdin)")

    batch = commands.add_parser(
        "batch",
        help="Run many prompts: a JSONL file in, a JSONL file out.",
        description='Run every {"prompt": ...} line of --input (a string or a list of chat '
        'messages; or an OpenAI Batch request, {"custom_id": ..., "body": {"messages": '
        '[...]}}). Line i of --output is {"value": ...} or {"error": {"type": ..., '
        '"message": ...}} for input line i, with the input line\'s other keys (id, '
        "custom_id ...) copied beside it, written in order as soon as lines 1..i are done; "
        "a line that cannot be read is an error entry for that line. The input is read "
        "as the prompts are sent and each output line is dropped once written: memory "
        "stays bounded whatever the input's size. An existing output "
        "is never truncated unless --overwrite; --resume adds the lines it lacks. A "
        "progress bar on a terminal and a summary line on stderr. Exit status 0 when every "
        "line conformed, 1 when some did not, 2 for bad usage, schema, input or output "
        "file (or a write that failed), 3 when the backend failed every line sent, 130 on "
        "Ctrl-C (the summary says what was written), 141 when stdout's reader went away.",
    )
    targets(batch, "texts matching", 'instead of JSON ({"value": "the text"})')
    batch.add_argument("--strict-schema", action="store_true", help=_STRICT_HELP)
    batch.set_defaults(indent=None)  # (--indent is generate's; _grammar asks)
    batch.add_argument(
        "--input",
        required=True,
        metavar="IN.jsonl",
        help="{\"prompt\": ...} per line, or OpenAI Batch requests ('-': stdin)",
    )
    batch.add_argument(
        "--output", required=True, metavar="OUT.jsonl", help="results, one per line ('-': stdout)"
    )
    existing = batch.add_mutually_exclusive_group()
    existing.add_argument(
        "--resume",
        action="store_true",
        help="keep the finished lines already in --output (not asked again) and append "
        "the ones it lacks, in order (a torn last line is written again)",
    )
    existing.add_argument(
        "--overwrite", action="store_true", help="replace an existing --output file"
    )
    batch.add_argument(
        "--concurrency",
        type=int,
        default=8,
        metavar="N",
        help="requests in flight, and worker threads (default 8); at most 2N lines are "
        "held in memory while a slow line holds back the output after it",
    )
    batch.add_argument(
        "--details",
        action="store_true",
        help='add "details" to each line: the tier and every attempt (outcome, calls, '
        "latency, error, repairs, raw output of failed attempts, tokens)",
    )
    batch.add_argument("--no-progress", action="store_true", help="no progress bar")
    batch.add_argument(
        "--verbose", "-v", action="store_true", help="show transport retries and failed lines"
    )
    model_options(batch)

    for name, text, grammars in (
        (
            "validate",
            "Check that INPUT is JSON conforming to the schema (strict), or a text matching "
            "the grammar or regular expression (written back unchanged when it does). "
            "Whitespace after a JSON document is allowed; for a grammar or regular "
            "expression, one line break (\\n or \\r\\n) at the very end of INPUT is "
            "not part of the text (INPUT matches as it is or without it), more are.",
            True,
        ),
        ("repair", "Repair INPUT into JSON conforming to the schema; repairs go to stderr.", False),
    ):
        sub = schema_command(name, text, grammars=grammars)
        sub.add_argument("input", nargs="?", default="-", help="file to read (default: stdin)")

    lint_parser(commands)

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

    commands.add_parser(
        "doctor",
        help="Say what this installation runs: versions, the mask engine's path (compiled "
        "core or pure Python, and why), batch mask threads, the optional parts installed.",
        description="One fact a line: jsonmode's and Python's versions, which mask engine "
        "path runs and why (JSONMODE_NO_EXTENSIONS=1 selects pure Python), the threads a "
        "batch's masks are written by, and which optional parts (torch, transformers, vllm, "
        "the serve extra, tree-sitter) are installed. Exit status 0.",
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
    serve_parser(commands)
    return parser


def lint_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``jsonmode lint SCHEMA``: the schema lint's findings (Schema.warnings)."""
    lint = commands.add_parser(
        "lint",
        help="Find what in a JSON Schema is legal but probably a mistake.",
        description="Lint a JSON Schema: unknown keywords (did you mean ...?), keywords of "
        "another draft than the document's, required names that additionalProperties: "
        "false forbids, contradictory bounds (minimum above maximum, minLength above "
        "maxLength ...), an empty enum, a pattern that matches no string, a reference to "
        "nowhere in a definition nothing uses. Each finding is one line on stdout, "
        "'jsonmode: warning: /JSON/pointer: message and fix' ('jsonmode: note: ...' for "
        "what is probably meant), and a summary line goes to stderr. Exit status 0 when "
        "there is no warning (notes allowed), 1 when there are warnings, 2 for a schema "
        "that cannot be read or is not valid JSON Schema, or bad usage.",
    )
    lint.add_argument(
        "schema",
        metavar="SCHEMA",
        help="JSON Schema file ('-' reads stdin), or TypeScript file (.ts: its schema)",
    )
    lint.add_argument("--type", metavar="TYPE", help=_TYPE_HELP)
    lint.add_argument(
        "--json",
        action="store_true",
        help="write the findings as one JSON array on stdout instead: objects with "
        "location, keyword, severity and message",
    )


def serve_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``jsonmode serve``: an OpenAI-compatible endpoint in front of an upstream model."""
    serve = commands.add_parser(
        "serve",
        help="Serve an OpenAI-compatible endpoint that returns conforming JSON.",
        description="Serve POST /v1/chat/completions and /v1/responses (plain and "
        "streamed), GET /v1/models, /metrics and /healthz in front of an upstream model. "
        "Requests with response_format json_schema / json_object (or strict tools) get "
        "conforming JSON through jsonmode's tiers (native where the upstream takes a "
        "schema, else prompted with repair and re-ask); a reply that never conforms is "
        "HTTP 422 (error.type jsonmode_nonconforming). Other requests are proxied "
        "unchanged. Needs the serve extra: pip install 'jsonmode[serve]'.",
    )
    serve.add_argument(
        "--upstream",
        required=True,
        metavar="MODEL",
        help="the model behind the server, a litellm model string: openai/NAME or "
        "hosted_vllm/NAME for an OpenAI-compatible server at --api-base (one pooled "
        "client), any other litellm provider through litellm",
    )
    serve.add_argument("--api-base", metavar="URL", help="the upstream's base URL (…/v1)")
    serve.add_argument(
        "--upstream-key-env",
        metavar="VAR",
        help="environment variable holding the upstream's API key (default: none; "
        "never logged nor echoed)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    serve.add_argument(
        "--port", type=int, default=8000, metavar="P", help="default 8000; 0 picks a free one"
    )
    serve.add_argument(
        "--mode",
        choices=MODES,
        default="repair",
        help="default mode of structured requests (default: repair; a request may ask "
        'for another with "jsonmode": {"mode": ...})',
    )
    serve.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        metavar="N",
        help="default attempts per structured request (default 3)",
    )
    serve.add_argument(
        "--max-attempts-cap",
        type=int,
        default=None,
        metavar="N",
        help='the most attempts a request may ask for with "jsonmode": {"max_attempts": '
        "N} (larger numbers are capped; default: 5, or --max-attempts when larger)",
    )
    serve.add_argument(
        "--tier",
        choices=("auto", "native", "prompted"),
        default="auto",
        help="auto: native where the upstream is known to take a JSON Schema (vLLM, "
        "OpenAI's API), else prompted",
    )
    serve.add_argument(
        "--vllm-processor",
        action="store_true",
        help="the upstream is a vLLM server running jsonmode's logits processor: the "
        "schema goes as vllm_xargs.json_schema, constrained by jsonmode's decoder",
    )
    serve.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding this server's key: every request but "
        "/healthz then needs 'Authorization: Bearer <key>' (401 otherwise)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="server processes sharing the port (default 1); /metrics sums them all",
    )
    serve.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds one upstream call may take, whole reply (default {DEFAULT_TIMEOUT:g})",
    )
    serve.add_argument(
        "--transport-retries",
        type=int,
        default=2,
        metavar="N",
        help="retries of an upstream 429/5xx/timeout per attempt (default 2)",
    )
    serve.add_argument(
        "--max-retry-wait",
        type=float,
        default=20.0,
        metavar="S",
        help="no upstream retry is waited for past S seconds (default 20); a longer "
        "Retry-After goes to the client with the 429",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=4 * 1024 * 1024,
        metavar="N",
        help="largest request body (default 4 MiB; 413 beyond)",
    )
    serve.add_argument(
        "--keepalive",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between SSE keep-alive comments while a streamed request retries (default 5)",
    )
    serve.add_argument(
        "--drain",
        type=float,
        default=30.0,
        metavar="S",
        help="on SIGTERM or Ctrl+C: new connections are refused, requests in flight get "
        "S seconds to finish (default 30), then the server exits 0",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser requests from ORIGIN (repeatable; default: CORS off)",
    )
    serve.add_argument("--access-log", action="store_true", help="log every request (uvicorn)")


def targets(sub: argparse.ArgumentParser, matching: str, instead: str) -> None:
    """``--schema FILE | --grammar FILE.gbnf | --regex PATTERN`` (one required), and
    ``--max-nesting-depth`` for a grammar; ``matching``/``instead`` word the help."""
    target = sub.add_mutually_exclusive_group(required=True)
    target.add_argument("--schema", type=pathlib.Path, help=_SCHEMA_HELP)
    sub.add_argument("--type", metavar="TYPE", help=_TYPE_HELP)
    target.add_argument(
        "--grammar",
        type=pathlib.Path,
        metavar="FILE.gbnf",
        help=f"{matching} this GBNF grammar (llama.cpp's), {instead}",
    )
    target.add_argument(
        "--regex",
        metavar="PATTERN",
        help=f"{matching} this regular expression as a whole, {instead}",
    )
    nesting_option(sub)


def nesting_option(sub: argparse.ArgumentParser) -> None:
    """``--max-nesting-depth``, for the commands that take ``--grammar``."""
    sub.add_argument(
        "--max-nesting-depth",
        type=int,
        default=None,
        metavar="N",
        help="with --grammar: how deep recursive rules may nest in the text (default 256 "
        "levels; deeper text does not match)",
    )


def model_options(sub: argparse.ArgumentParser) -> None:
    """The options that choose and drive the model (generate, batch)."""
    sub.add_argument(
        "--model",
        default=os.environ.get("JSONMODE_MODEL"),
        help="litellm model string, e.g. openai/gpt-4o-mini, or a local folder holding a "
        "transformers model and its tokenizer (default: $JSONMODE_MODEL)",
    )
    sub.add_argument("--mode", choices=MODES, default="strict")
    sub.add_argument("--api-base", help="endpoint URL, e.g. http://127.0.0.1:8000/v1")
    sub.add_argument("--api-key", default=None, help="API key (default: provider's env var)")
    sub.add_argument("--max-attempts", type=int, default=3)
    sub.add_argument(
        "--tier",
        choices=("auto", "constrained", "native", "prompted"),
        default="auto",
        help="constrained: decode a local --model folder under the schema's token mask; "
        "auto picks constrained for a local model, native or prompted for an API model "
        "(native when --native is given)",
    )
    sub.add_argument(
        "--native",
        choices=("response_format", "tools"),
        default=None,
        help="how the native tier sends the schema to an API model: response_format "
        "(a JSON Schema) or tools (one forced function call); selects the native tier",
    )
    sub.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds one backend call may take, the whole reply included (default "
        f"{DEFAULT_TIMEOUT:g} for an API model; none for a local model, whose length "
        "--max-tokens bounds)",
    )
    sub.add_argument(
        "--max-retry-wait",
        type=float,
        default=None,
        metavar="S",
        help="stop retrying a failed call (rate limit, 5xx, timeout, no connection) once S "
        f"seconds have passed since the first; a server asking to wait longer is not waited "
        f"for (default {TransportPolicy().max_delay:g})",
    )
    sub.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        metavar="N",
        help="longest reply, in tokens (litellm's max_tokens; a local model's "
        "max_new_tokens, default 512)",
    )
    sub.add_argument("--temperature", type=float, default=None)
