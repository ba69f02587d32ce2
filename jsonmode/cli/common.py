"""What the ``jsonmode`` command's modules share: reading stdin, writing values and
texts, the JsonMode the model options describe, the ``--grammar`` / ``--regex`` target,
retries shown with ``--verbose``, schema warnings, and errors in the command's own terms
with their exit status.

These names are this module's API to the command modules beside it (``generate``,
``check``, ``batch``, ...), which call them as ``common.NAME``. Nothing here holds state
of its own; every function may be called from any thread unless its docstring says
otherwise. Errors are :mod:`jsonmode.errors`' (a UsageError for what the user can fix in
the options or input).
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
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from jsonmode import events
from jsonmode._json import dumps, has_surrogate
from jsonmode._text import clip
from jsonmode.errors import (
    AttemptsExhaustedError,
    BackendError,
    JsonModeError,
    OutputError,
    SchemaError,
    UsageError,
)
from jsonmode.records import SchemaWarning
from jsonmode.retry import TransportPolicy
from jsonmode.schema.core import Schema
from jsonmode.schema.lint import refusal

if TYPE_CHECKING:
    from jsonmode.facade import JsonMode

__all__ = [
    "EXIT_BACKEND",
    "EXIT_NONCONFORMING",
    "EXIT_USAGE",
    "build_jsonmode",
    "cli_hint",
    "compiled_grammar",
    "emit",
    "error_message",
    "exit_status",
    "one_line",
    "print_schema_warnings",
    "read_stdin",
    "report",
    "retry_line",
    "schema_file",
    "schema_of",
    "schema_warning_line",
    "showing_retries",
    "write_text",
]


#: Exit status: the output does not conform (after every attempt).
EXIT_NONCONFORMING = 1
#: Exit status: bad usage, bad schema, unreadable input.
EXIT_USAGE = 2
#: Exit status: the backend failed.
EXIT_BACKEND = 3

_DEFAULT_POLICY = TransportPolicy()


def read_stdin() -> str:
    """All of stdin; a UsageError (not a traceback) when it is not UTF-8 text."""
    try:
        text = sys.stdin.read()
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read stdin: not UTF-8 text ({exc.reason})") from None
    if has_surrogate(text):  # undecodable bytes, as the surrogateescape handler keeps them
        raise UsageError("cannot read stdin: not UTF-8 text")
    return text


def emit(value: Any, indent: int | None, out: TextIO) -> None:
    """``value`` as one JSON document and a newline on ``out`` (``indent``: pretty-printed,
    non-ASCII kept as it is); a UsageError when it is not JSON-writable."""
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


def build_jsonmode(args: argparse.Namespace) -> JsonMode:
    """The JsonMode the model options describe (a local model is loaded here: seconds).

    A UsageError for options that do not fit together (no model, ``--tier constrained``
    with an API model, ``--api-base`` with a local folder ...) or a local folder that holds
    no model. The commands call it as ``common.build_jsonmode``, so that a test can put a
    scripted backend in its place."""
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
            reasoning=getattr(args, "reasoning", "auto"),
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
    options["reasoning"] = getattr(args, "reasoning", "auto")  # generate --reasoning
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
def showing_retries(verbose: bool, *, above_a_bar: bool = False) -> Iterator[None]:
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
            say(retry_line(event))

    unsubscribe = events.subscribe(show)
    try:
        yield
    finally:
        unsubscribe()


def retry_line(event: events.TransportRetried) -> str:
    """``transport: call 1 failed (TransientBackendError, HTTP 429: ...); retrying in 0.50 s``"""
    name, _, message = event.error.partition(": ")
    if event.status_code is not None and f"HTTP {event.status_code}" not in message:
        name = f"{name}, HTTP {event.status_code}"
    what = f"{name}: {clip(message, 300)}" if message else name
    return f"transport: call {event.call} failed ({what}); retrying in {event.wait_s:.2f} s"


def schema_of(args: argparse.Namespace) -> Schema:
    """The schema ``--schema`` names: a JSON Schema file, or a TypeScript file (``.ts``)
    whose root type ``--type`` names (without it, the one type the file exports)."""
    return schema_file(args.schema, getattr(args, "type", None))


def schema_file(path: pathlib.Path, root: str | None) -> Schema:
    """The schema in the file ``path``; ``root``: the root type of a TypeScript file
    (``--type``; UsageError for any other file)."""
    if root is not None and path.suffix != ".ts":
        raise UsageError(f"--type names a type of a TypeScript --schema (.ts), not of {path}")
    return Schema.of(path, name=root)


def compiled_grammar(args: argparse.Namespace) -> Any:
    """The CompiledGrammar that ``--grammar`` / ``--regex`` name (None: ``--schema``);
    its errors name the file. ``--stream`` and ``--indent`` are refused with one."""
    if getattr(args, "grammar", None) is None and getattr(args, "regex", None) is None:
        return None
    if getattr(args, "type", None) is not None:
        raise UsageError("--type names a type of a TypeScript --schema, not of a grammar")
    flags = (
        ("--stream", getattr(args, "stream", False)),
        ("--indent", args.indent),
        ("--strict-schema", getattr(args, "strict_schema", False)),
    )
    for flag, given in flags:
        if given not in (None, False):
            raise UsageError(f"{flag} is for JSON output (--schema), not a text")
    from jsonmode.decoding.grammars.compiled import compile_grammar, compile_regex

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


def write_text(text: str) -> None:
    """``text`` on stdout exactly: UTF-8 bytes, no newline added or translated."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text stream standing in for stdout (tests)
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    buffer.write(text.encode("utf-8", "surrogateescape"))
    buffer.flush()


def print_schema_warnings(spec: Schema, strict: bool = False) -> None:
    """Each of the schema's :attr:`~jsonmode.Schema.warnings` as one line on stderr,
    ``jsonmode: warning: /requried: unknown keyword 'requried' (did you mean
    'required'?)`` (a note as ``jsonmode: note: ...``): once per run, before any work.
    (The façade's own Python warnings are silenced by :func:`jsonmode.cli.main`: these
    stand for them.) ``strict`` (``--strict-schema``): warnings refuse the schema
    instead (notes are still printed).

    Raises:
        InvalidSchemaError: ``strict`` and the schema has warnings (each one's pointer
            and fix in the message).
    """
    records = spec.warnings
    if strict and any(record.severity == "warning" for record in records):
        raise refusal([record for record in records if record.severity == "warning"])
    for record in records:
        print(schema_warning_line(record), file=sys.stderr)


def schema_warning_line(record: SchemaWarning) -> str:
    """``jsonmode: warning: /requried: unknown keyword ...`` (``jsonmode: note: ...``)."""
    return f"jsonmode: {record.severity}: {record}"


def report(error: JsonModeError, verbose: bool) -> None:
    """``jsonmode: error: Type: message`` (one line), ``jsonmode: hint: ...`` when there
    is one, then with ``verbose`` every attempt, issue and repair."""
    print(f"jsonmode: error: {one_line(error)}", file=sys.stderr)
    hint = cli_hint(error)
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


def one_line(error: JsonModeError) -> str:
    """``Type: message`` on one line, each type named once."""
    from jsonmode.retry import describe_failure

    line = describe_failure(error)
    for python, cli in _CLI_MESSAGE_SPELLING:
        line = line.replace(python, cli)
    return line


def error_message(error: JsonModeError) -> str:
    """:func:`one_line` without the error's own type name."""
    line = one_line(error)
    return line.removeprefix(type(error).__name__).removeprefix(": ")


# Python-API spellings in the hints of the layers below, as this command spells them
# (what the command cannot set is left out).
_CLI_SPELLING = (
    ("leave strict_schema off", "drop --strict-schema"),
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
    ("and strict_schema refuses it", "and --strict-schema refuses it"),
    ("the transport policy's max_delay", "--max-retry-wait"),
    (
        "compile the grammar with a larger max_nesting_depth=N to raise it",
        "raise it with --max-nesting-depth N",
    ),
)


def cli_hint(error: JsonModeError) -> str | None:
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


def exit_status(error: JsonModeError) -> int:
    """The command's exit status for ``error``: :data:`EXIT_BACKEND` for a backend that
    failed, :data:`EXIT_USAGE` for bad usage, schema or input, else
    :data:`EXIT_NONCONFORMING`."""
    if isinstance(error, BackendError):
        return EXIT_BACKEND
    if isinstance(error, (SchemaError, UsageError)):
        return EXIT_USAGE
    return EXIT_NONCONFORMING
