"""The ``jsonmode`` command.

    jsonmode generate --schema FILE [--model M] [--mode strict|repair] [--api-base URL]
                      [--max-attempts N] [--tier T] [--native N] [--max-tokens N] [--stream]
                      [--verbose] PROMPT
    jsonmode generate --grammar FILE.gbnf [--max-nesting-depth N] | --regex PATTERN
                      [the options above] PROMPT
    jsonmode batch    --schema FILE | --grammar FILE.gbnf | --regex PATTERN
                      --input IN.jsonl --output OUT.jsonl [--resume | --overwrite]
                      [--concurrency N] [--details] [--no-progress] [the model options
                      of generate]
    jsonmode validate --schema FILE | --grammar FILE.gbnf [--max-nesting-depth N]
                      | --regex PATTERN [INPUT]
    jsonmode repair   --schema FILE [INPUT]
    jsonmode demo     [--metrics-port P [--duration S]]
    jsonmode metrics serve --port P [--addr A]
    jsonmode metrics assets
    jsonmode dashboard [--metrics-url URL] [--port P] [--addr A] [--interval S]

``--model`` is a litellm model string (``openai/gpt-4o-mini``), or a local folder
holding a transformers model and its tokenizer (``config.json``, weights, tokenizer
files): that one is decoded here, in the constrained tier (``--tier constrained``);
it needs the ``local`` extra (torch, transformers) and is never downloaded.

``--timeout S`` bounds one backend call, the whole reply included (default
``deadline.DEFAULT_TIMEOUT``, 120 s, as in the library); ``--max-retry-wait S`` stops the
transport retries S seconds after the first call (``TransportPolicy.max_delay``, default
60). An API model's litellm is imported in a background thread from the start (it takes
seconds); on a terminal ``generate`` says so when it is still loading after a second.

The JSON value goes to stdout. ``--verbose`` shows on stderr each transport retry as
it happens (``transport: call 1 failed (...); retrying in 0.50 s``) and then every
attempt with the backend calls it took. A backend that never answered is named with
its reason (``cannot connect to 127.0.0.1:8000 (connection refused)``). On failure: one
line on stderr (``jsonmode: error: Type: message``), a ``jsonmode: hint: ...`` line when
there is something to do about it (in this command's options), every attempt with
``--verbose``, and a non-zero exit status:

    1  the output does not conform (after every attempt)
    2  bad usage, bad schema, unreadable input
    3  the backend failed (transient failures after retries, or a refused request)

With ``--grammar FILE.gbnf`` (llama.cpp's GBNF) or ``--regex PATTERN`` instead of
``--schema``, ``generate`` asks for a text that matches (``JsonMode.run_text``) and writes
exactly that text on stdout, byte for byte, with no newline added (so that its output
validates as it is); ``validate`` reads INPUT as UTF-8 bytes, unchanged (no newline
translation), and on a match writes it back unchanged (a filter) and exits 0; on a
mismatch it exits 1 with ``jsonmode: error: SchemaViolationError: output does not match
the grammar: the text stops matching at byte N, ...: expected ...``. One line break
(LF or CRLF) at the very end of INPUT is not part of the text, as an editor saves a file
(as ``--schema`` takes whitespace after the document): INPUT matches when it matches as
it is or without that one line break (the mismatch reported is then the text's without
it); more than one does not. A grammar file that cannot be read or compiled exits 2, its
error naming the file, line and column (a Lark or EBNF file is told it is not GBNF); so
does a malformed ``--regex`` ("invalid regular expression").
``--stream`` and ``--indent`` are for JSON only.

``generate --stream`` writes the value as it grows on stderr, one JSON object per
line (NDJSON), and the final value on stdout as without it::

    {"partial": {"name": "Ada"}}                    what the finished value will hold
                                                    so far (never validated)
    {"retry": {"attempt": 2, "transport": false,    the output starts over: the partials
               "error": "...", "issues": ["..."]}}  so far are void (transport: the same
                                                    request again after a transient failure)

Every event line starts with ``{``; any other line on stderr is for humans (``--verbose``,
errors). A backend that cannot stream shows no partials.

``batch`` reads one JSON object per line, ``{"prompt": "..."}`` (a string, or a list of
chat messages) or an OpenAI Batch request (``{"custom_id": ..., "body": {"messages":
[...]}}``; the body's other keys are not used, and a ``jsonmode: note:`` line before the
summary names them),
and writes line *i* of the output for line *i* of the input, in order, as soon as lines
1..*i* are done (flushed each time); the input is read as the prompts are sent and each
output line dropped once written, so memory is bounded whatever the input's size:
``{"value": ...}`` or ``{"error": {"type": ...,
"message": ..., "hint": ...}}``, beside the input line's other keys (``id``, ``custom_id``
...). A repaired value lists its ``"repairs"``; ``--details`` adds every line's tier and
attempts. A line that cannot be read (not UTF-8, not JSON, no prompt) is an error entry
for that line, never the end of the batch. An existing non-empty output is refused
unless ``--overwrite``, or ``--resume``: keep its finished lines and append the others
(see :mod:`jsonmode._cli_batch` for what "finished" means and what is refused). Ctrl-C
stops at once, keeps every line written, prints what was done and exits 130. A progress
bar on a terminal counts every line (``--no-progress`` hides it); a summary line goes to
stderr. Exit status: 0 when every output line conformed, 1 when some did not, 2 when
nothing could run (bad usage, schema, grammar, input or output file; nothing is written)
or a write failed (``cannot write OUT after K lines: ...``), 3 when the backend failed
every line sent, 130 on Ctrl-C, 141 when stdout's reader went away (quietly, as SIGPIPE).

``validate``, ``repair``, ``generate`` and ``batch`` print each of the schema's
:attr:`~jsonmode.Schema.warnings` once on stderr before any work, and carry on:
``jsonmode: warning: /requried: unknown keyword 'requried' (did you mean 'required'?)``
(a note, OpenAPI's ``nullable``, as ``jsonmode: note: ...``).

``validate`` and ``repair`` never import litellm, so they start fast. The servers
(``metrics serve``, ``dashboard``, ``demo --metrics-port``) print their URL on the
first line of stdout and run until Ctrl-C (exit status 0).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import pathlib
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from jsonmode import events
from jsonmode._cli_parser import build_parser
from jsonmode._json import dumps, has_surrogate
from jsonmode._text import clip
from jsonmode.errors import (
    AttemptsExhaustedError,
    BackendError,
    JsonModeError,
    JsonModeWarning,
    OutputError,
    SchemaError,
    UsageError,
)
from jsonmode.reading import Mode, parse
from jsonmode.retry import TransportPolicy
from jsonmode.schema.core import Schema

if TYPE_CHECKING:
    from jsonmode.facade import JsonMode
    from jsonmode.result import Result

__all__ = ["main"]

EXIT_NONCONFORMING = 1
EXIT_USAGE = 2
EXIT_BACKEND = 3

_DEFAULT_POLICY = TransportPolicy()


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


def _local_model(path: str) -> tuple[Any, Any]:
    """The transformers model and tokenizer in the folder ``path``, from disk only."""
    try:
        import torch  # noqa: F401  (transformers needs it to load weights)
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise UsageError(
            f"--model {path} is a local folder, which needs {exc.name or 'torch'}",
            hint="pip install torch==2.13.0 && pip install 'jsonmode[local]'",
        ) from None
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # stderr: our lines only
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model: Any = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"{path} holds no transformers model and tokenizer: {clip(first, 300)}",
            hint="a folder written by save_pretrained (config.json, weights, tokenizer files)",
        ) from None
    finally:
        if bar:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
    return model.eval(), tokenizer


def _jsonmode(args: argparse.Namespace) -> JsonMode:
    """The JsonMode the model options describe (a local model is loaded here)."""
    from jsonmode.facade import JsonMode

    if not args.model:
        raise UsageError("no model given", hint="pass --model or set JSONMODE_MODEL")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be positive, not {args.max_tokens}")
    policy = _transport(args)
    if os.path.isdir(args.model):
        if args.api_base or args.api_key or args.native:
            raise UsageError(
                "--api-base, --api-key and --native are for an API model, not a local folder"
            )
        local: dict[str, Any] = {}
        if args.max_tokens is not None:
            local["max_new_tokens"] = args.max_tokens
        if args.timeout is not None:
            local["timeout"] = args.timeout
        if args.temperature:
            local.update(do_sample=True, temperature=args.temperature)
        model, tokenizer = _local_model(args.model)
        return JsonMode(
            model,
            args.mode,
            args.max_attempts,
            tier=args.tier,
            tokenizer=tokenizer,
            transport=policy,
            **local,
        )
    if args.tier == "constrained":
        raise UsageError(
            f"--tier constrained needs a local model, and {args.model!r} is not a folder",
            hint="pass --model DIR, a folder holding a transformers model and its tokenizer",
        )
    options: dict[str, Any] = {}
    if args.timeout is not None:  # else the backend's default, deadline.DEFAULT_TIMEOUT
        options["timeout"] = args.timeout
    if args.api_base:
        options["api_base"] = args.api_base
    if args.api_key:
        options["api_key"] = args.api_key
    elif args.api_base:
        # OpenAI-compatible local servers need *a* key to satisfy the SDK, not a real one.
        options["api_key"] = os.environ.get("OPENAI_API_KEY", "unused")
    if args.temperature is not None:
        options["temperature"] = args.temperature
    if args.max_tokens is not None:
        options["max_tokens"] = args.max_tokens
    if args.native is not None:
        options["native"] = args.native
    return JsonMode(
        args.model, args.mode, args.max_attempts, tier=args.tier, transport=policy, **options
    )


def _transport(args: argparse.Namespace) -> TransportPolicy:
    """The transport policy ``--max-retry-wait`` asks for (the default one without it)."""
    wait = args.max_retry_wait
    if wait is None:
        return _DEFAULT_POLICY
    if not (math.isfinite(wait) and wait >= 0):
        raise UsageError(f"--max-retry-wait must be a number of seconds >= 0, not {wait:g}")
    return dataclasses.replace(_DEFAULT_POLICY, max_delay=wait)


@contextlib.contextmanager
def _showing_retries(verbose: bool, *, above_a_bar: bool = False) -> Iterator[None]:
    """With ``verbose``: print every transport retry on stderr as it happens (from
    any thread; ``above_a_bar``: through tqdm, so that a progress bar stays whole)."""
    if not verbose:
        yield
        return
    say: Any = functools.partial(print, file=sys.stderr, flush=True)
    if above_a_bar:
        from tqdm.auto import tqdm

        say = functools.partial(tqdm.write, file=sys.stderr)

    def show(event: events.Event) -> None:
        if isinstance(event, events.TransportRetried):
            say(_retry_line(event))

    unsubscribe = events.subscribe(show)
    try:
        yield
    finally:
        unsubscribe()


def _retry_line(event: events.TransportRetried) -> str:
    """``transport: call 1 failed (TransientBackendError, HTTP 429: ...); retrying in 0.50 s``"""
    name, _, message = event.error.partition(": ")
    if event.status_code is not None and f"HTTP {event.status_code}" not in message:
        name = f"{name}, HTTP {event.status_code}"
    what = f"{name}: {clip(message, 300)}" if message else name
    return f"transport: call {event.call} failed ({what}); retrying in {event.wait_s:.2f} s"


def _grammar(args: argparse.Namespace) -> Any:
    """The CompiledGrammar that ``--grammar`` / ``--regex`` name (None: ``--schema``);
    its errors name the file. ``--stream`` and ``--indent`` are refused with one."""
    if getattr(args, "grammar", None) is None and getattr(args, "regex", None) is None:
        return None
    for flag, given in (("--stream", getattr(args, "stream", False)), ("--indent", args.indent)):
        if given not in (None, False):
            raise UsageError(f"{flag} is for JSON output (--schema), not a text")
    from jsonmode.decoding.grammars import compile_grammar, compile_regex

    depth = getattr(args, "max_nesting_depth", None)
    if args.regex is not None:
        if depth is not None:
            raise UsageError("--max-nesting-depth is for a --grammar, not a --regex")
        return compile_regex(args.regex)
    if depth is not None and depth < 1:
        raise UsageError(f"--max-nesting-depth must be 1 or more, not {depth}")
    options = {} if depth is None else {"max_nesting_depth": depth}
    path: pathlib.Path = args.grammar
    try:
        text = path.read_text(encoding="utf-8")  # a file saved with CRLF reads alike
    except OSError as exc:
        raise UsageError(f"cannot read grammar file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"grammar file {path} is not UTF-8 text (at byte {exc.start})") from None
    try:
        return compile_grammar(text, **options)
    except SchemaError as error:  # InvalidGrammarError (line, column), left recursion ...
        error.message = f"grammar file {path}: {error.message}"
        error.args = (error.message,)
        raise


def _generate(args: argparse.Namespace) -> int:
    grammar = _grammar(args)
    jm = _jsonmode(args)
    # An argument that was not UTF-8 (kept by surrogateescape) is refused by the façade
    # like any prompt holding a lone surrogate (prompting.user_messages).
    prompt = _stdin() if args.prompt == "-" else args.prompt
    result: Result[Any]
    if grammar is not None:
        with _showing_retries(args.verbose):
            result = jm.run_text(prompt, grammar)
    else:
        spec = Schema.of(args.schema)
        print_schema_warnings(spec)
        with _showing_retries(args.verbose):
            result = _streamed(jm, prompt, spec) if args.stream else jm.run(prompt, spec)
    if args.verbose:
        print(f"tier: {result.tier}, mode: {result.mode}", file=sys.stderr)
        for attempt in result.attempts:
            print(attempt.describe(), file=sys.stderr)
    if grammar is not None:
        _write_text(result.data)
    else:
        _emit(result.data, args.indent, sys.stdout)
    return 0


def _write_text(text: str) -> None:
    """``text`` on stdout exactly: UTF-8 bytes, no newline added or translated."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text stream standing in for stdout (tests)
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    buffer.write(text.encode("utf-8", "surrogateescape"))
    buffer.flush()


def _read_exact(source: str) -> str:
    """INPUT as UTF-8 text without newline translation (a grammar sees every byte)."""
    try:
        if source == "-":
            buffer = getattr(sys.stdin, "buffer", None)
            if buffer is None:  # a text stream standing in for stdin (tests)
                return _stdin()
            data = bytes(buffer.read())
        else:
            data = pathlib.Path(source).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "stdin" if source == "-" else source
        raise UsageError(f"cannot read {where}: not UTF-8 text (at byte {exc.start})") from None


def _streamed(jm: JsonMode, prompt: str, spec: Schema) -> Result[Any]:
    """Run ``jm.stream``, each partial value and retry as one JSON line on stderr."""
    for event in jm.stream(prompt, spec):
        if event.kind == "partial":
            _event_line({"partial": _plain(event.value)})
        elif event.kind == "retry":
            retry = {
                "attempt": event.attempt,
                "transport": event.transport,
                "error": " ".join(event.error.split()),
                "issues": [str(issue) for issue in event.issues],
            }
            _event_line({"retry": retry})
        else:
            return event.result
    raise AssertionError("the stream ended without its final event")  # pragma: no cover


def _plain(value: Any) -> Any:
    """A partial value as JSON (a pydantic partial twin by the fields it has so far)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_unset=True) if callable(dump) else value


def _event_line(event: dict[str, Any]) -> None:
    try:
        line = dumps(event)
    except UsageError:  # not JSON-writable (cannot happen for parsed text): not shown
        return
    print(line, file=sys.stderr, flush=True)


def _check(args: argparse.Namespace) -> int:
    grammar = _grammar(args)
    if grammar is not None:
        from jsonmode.texts import GrammarJudge

        text = _read_exact(args.input)
        judged = text
        if grammar.diagnose(text) is not None:  # (then as an editor saved it: see the top)
            ending = next((end for end in ("\r\n", "\n") if text.endswith(end)), "")
            judged = text[: len(text) - len(ending)]
        GrammarJudge(grammar, "strict").read(judged, truncated=False)  # raises on a mismatch
        _write_text(text)
        return 0
    mode: Mode = "repair" if args.command == "repair" else "strict"
    spec = Schema.of(args.schema)
    print_schema_warnings(spec)
    parsed = parse(_read(args.input), spec, mode)
    if args.verbose:
        for repair in parsed.repairs:
            print(f"repair: {repair}", file=sys.stderr)
    _emit(parsed.data, args.indent, sys.stdout)
    return 0


def print_schema_warnings(spec: Schema) -> None:
    """Each of the schema's :attr:`~jsonmode.Schema.warnings` as one line on stderr,
    ``jsonmode: warning: /requried: unknown keyword 'requried' (did you mean
    'required'?)`` (a note as ``jsonmode: note: ...``): once per run, before any work.
    (The façade's own Python warnings are silenced by :func:`main`: these stand for them.)"""
    for record in spec.warnings:
        print(f"jsonmode: {record.severity}: {record}", file=sys.stderr)


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

    with _bound(
        lambda: jsonmode.metrics.serve(args.port, addr=args.addr), args.addr, args.port
    ) as exporter:
        print(f"serving {exporter.url} (Ctrl-C to stop)", flush=True)
        _wait_for_interrupt()
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from jsonmode.metrics.dashboard import serve_dashboard

    with _bound(
        lambda: serve_dashboard(args.metrics_url, args.port, args.addr, interval=args.interval),
        args.addr,
        args.port,
    ) as dashboard:
        print(f"dashboard on {dashboard.url} (Ctrl-C to stop)", flush=True)
        _wait_for_interrupt()
    return 0


def _bound(start: Any, addr: str, port: int) -> Any:
    """Start a server on ``addr:port``, turning a port that cannot be bound into a usage
    error that names it."""
    try:
        return start()
    except OSError as exc:
        where = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
        raise UsageError(f"cannot listen on {where}: {exc.strerror or exc}") from None


def _report(error: JsonModeError, verbose: bool) -> None:
    """``jsonmode: error: Type: message`` (one line), ``jsonmode: hint: ...`` when there
    is one, then with ``verbose`` every attempt, issue and repair."""
    print(f"jsonmode: error: {_one_line(error)}", file=sys.stderr)
    hint = _cli_hint(error)
    if hint:
        print(f"jsonmode: hint: {' '.join(hint.split())}", file=sys.stderr)
    if not verbose:
        return
    for attempt in error.attempts:
        print(attempt.describe(), file=sys.stderr)
    if isinstance(error, OutputError):
        for issue in error.issues:
            print(f"  issue: {issue}", file=sys.stderr)
        for repair in error.repairs:
            print(f"  repair: {repair}", file=sys.stderr)


def _one_line(error: JsonModeError) -> str:
    """``Type: message`` on one line, each type named once."""
    from jsonmode.retry import describe_failure

    line = describe_failure(error)
    for python, cli in _CLI_MESSAGE_SPELLING:
        line = line.replace(python, cli)
    return line


def _message(error: JsonModeError) -> str:
    """:func:`_one_line` without the error's own type name."""
    line = _one_line(error)
    return line.removeprefix(type(error).__name__).removeprefix(": ")


# Python-API spellings in the hints of the layers below, as this command spells them
# (what the command cannot set is left out).
_CLI_SPELLING = (
    ("raise timeout=", "raise --timeout"),
    ("raise max_tokens", "raise --max-tokens"),
    ("lower max_new_tokens", "lower --max-tokens"),
    ("raise TransportPolicy(max_delay=...)", "raise --max-retry-wait"),
    ("raise the budget in the compile options, or simplify", "simplify"),
    (
        "; raise max_states to enforce it while decoding, at the cost of compile time and memory",
        "",
    ),
)
# ... and in the messages.
_CLI_MESSAGE_SPELLING = (
    ("the transport policy's max_delay", "--max-retry-wait"),
    (
        "compile the grammar with a larger max_nesting_depth=N to raise it",
        "raise it with --max-nesting-depth N",
    ),
)


def _cli_hint(error: JsonModeError) -> str | None:
    """The error's hint in this command's terms.

    No conforming output: ``--mode repair`` is suggested only when the façade found
    that repair would have made the last output conform (``error.repairable``), never
    as the Python API spells it; a last output cut off suggests ``--max-tokens``.
    """
    if isinstance(error, AttemptsExhaustedError):
        if getattr(error, "repairable", False):
            return "--mode repair would repair the last output"
        if error.attempts and error.attempts[-1].outcome == "truncated":
            return "raise --max-tokens, or ask for a shorter answer"
        return None
    hint = error.hint
    if hint:
        for python, cli in _CLI_SPELLING:
            hint = hint.replace(python, cli)
    return hint


def _exit_status(error: JsonModeError) -> int:
    if isinstance(error, BackendError):
        return EXIT_BACKEND
    if isinstance(error, (SchemaError, UsageError)):
        return EXIT_USAGE
    return EXIT_NONCONFORMING


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    with warnings.catch_warnings():
        # (the schema's warnings are printed once, as this command's own lines)
        warnings.simplefilter("ignore", JsonModeWarning)
        return _dispatch(args, verbose)


def _dispatch(args: argparse.Namespace, verbose: bool) -> int:
    try:
        if args.command in ("generate", "batch"):
            from jsonmode._cli_startup import import_litellm_early

            import_litellm_early(args.model, note=args.command == "generate")
        if args.command == "generate":
            return _generate(args)
        if args.command == "batch":
            from jsonmode._cli_batch import run as run_batch

            return run_batch(args)
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
