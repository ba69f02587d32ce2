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
    jsonmode lint     [--json] SCHEMA
    jsonmode demo     [--metrics-port P [--duration S]]
    jsonmode doctor
    jsonmode metrics serve --port P [--addr A]
    jsonmode metrics assets
    jsonmode dashboard [--metrics-url URL] [--port P] [--addr A] [--interval S]
    jsonmode serve    --upstream MODEL [--api-base URL] [--host H] [--port P]
                      [--mode repair|strict] [--max-attempts N] [--api-key-env VAR]
                      [--workers N] [...]

``--schema FILE`` is a JSON Schema file, or a TypeScript file (``FILE.ts``, the
``typescript`` extra) whose root type ``--type TYPE`` names (default: the one type the file
exports); every command that takes ``--schema`` takes ``--type``.

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
(see :mod:`jsonmode.cli.batch` for what "finished" means and what is refused). Ctrl-C
stops at once, keeps every line written, prints what was done and exits 130. A progress
bar on a terminal counts every line (``--no-progress`` hides it); a summary line goes to
stderr. Exit status: 0 when every output line conformed, 1 when some did not, 2 when
nothing could run (bad usage, schema, grammar, input or output file; nothing is written)
or a write failed (``cannot write OUT after K lines: ...``), 3 when the backend failed
every line sent, 130 on Ctrl-C, 141 when stdout's reader went away (quietly, as SIGPIPE).

``validate``, ``repair``, ``generate`` and ``batch`` print each of the schema's
:attr:`~jsonmode.Schema.warnings` (the schema lint: :mod:`jsonmode.schema.lint`) once on
stderr before any work, and carry on:
``jsonmode: warning: /requried: unknown keyword 'requried' (did you mean 'required'?)``
(a note, OpenAPI's ``nullable``, as ``jsonmode: note: ...``). With ``--strict-schema``
they refuse such a schema instead (exit status 2, ``jsonmode: error: InvalidSchemaError:
the schema has N lint warnings and --strict-schema refuses it: /pointer: message; ...``),
before any call to the model.

``lint SCHEMA`` (a file, or ``-`` for stdin) prints those findings as its output, on
stdout, one line each in the same format (``--json``: one JSON array of objects with
``location``, ``keyword``, ``severity`` and ``message``), and a summary line on stderr
(``jsonmode: FILE: 2 warnings``, ``... no warnings``). Exit status 0 without warnings
(notes allowed), 1 with warnings, 2 for a schema that cannot be read or is not valid
JSON Schema (the error, with a hint naming the fix where there is one).

``doctor`` prints what this installation runs, one fact a line: versions, the mask
engine's path (``mask engine: compiled core (C, ...)``, or ``pure Python (...)`` with the
reason: ``JSONMODE_NO_EXTENSIONS=1``, a missing or stale build), batch mask threads, and
which optional parts are installed (looked up, not imported). Exit status 0.

``validate`` and ``repair`` never import litellm, so they start fast. The servers
(``metrics serve``, ``dashboard``, ``demo --metrics-port``) print their URL on the
first line of stdout and run until Ctrl-C (exit status 0).

The package: :mod:`~jsonmode.cli.parser` declares the arguments,
:mod:`~jsonmode.cli.startup` begins litellm's import, one module per command runs it
(:mod:`~jsonmode.cli.generate`, :mod:`~jsonmode.cli.batch`, :mod:`~jsonmode.cli.check`
for ``validate`` and ``repair``, :mod:`~jsonmode.cli.lint`, :mod:`~jsonmode.cli.metrics`
for ``metrics`` and ``dashboard``, :mod:`~jsonmode.cli.demo`, :mod:`~jsonmode.cli.doctor`),
all on the helpers of :mod:`~jsonmode.cli.common`; :func:`main`, here, dispatches to
them (each imported when its command runs, so ``--help`` stays fast) and turns errors
into exit statuses.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence

from jsonmode.cli.common import EXIT_BACKEND as EXIT_BACKEND
from jsonmode.cli.common import EXIT_NONCONFORMING as EXIT_NONCONFORMING
from jsonmode.cli.common import EXIT_USAGE as EXIT_USAGE
from jsonmode.cli.common import exit_status, report
from jsonmode.cli.common import print_schema_warnings as print_schema_warnings
from jsonmode.cli.parser import build_parser
from jsonmode.errors import JsonModeError, JsonModeWarning

# (the exit statuses and print_schema_warnings stay importable from here, as before)
__all__ = ["main"]


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
            from jsonmode.cli.startup import import_litellm_early

            import_litellm_early(args.model, note=args.command == "generate")
        if args.command == "generate":
            from jsonmode.cli import generate

            return generate.run(args)
        if args.command == "batch":
            from jsonmode.cli import batch

            return batch.run(args)
        if args.command in ("validate", "repair"):
            from jsonmode.cli import check

            return check.run(args)
        if args.command == "lint":
            from jsonmode.cli import lint

            return lint.run(args)
        if args.command == "metrics":
            from jsonmode.cli import metrics

            return metrics.run_metrics(args)
        if args.command == "dashboard":
            from jsonmode.cli import metrics

            return metrics.run_dashboard(args)
        if args.command == "serve":
            from jsonmode.cli import serve

            return serve.run(args)
        if args.command == "doctor":
            from jsonmode.cli import doctor

            return doctor.run(args)
        from jsonmode.cli import demo

        return demo.run(args, verbose=verbose)
    except JsonModeError as error:
        report(error, verbose)
        return exit_status(error)
    except KeyboardInterrupt:
        return 130
