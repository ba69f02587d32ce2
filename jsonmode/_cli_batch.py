"""``jsonmode batch``: prompts from JSON Lines, one output line per input line, in order.

The command's contract is in :mod:`jsonmode.cli`'s docstring. Lines are written as
soon as every line before them is known (:class:`_InOrder`), so an interrupted batch
keeps them and ``--resume`` appends the rest; the prompts run through ``JsonMode.map``.

Definitions the options rely on:

- **An input line** is UTF-8 text up to a ``\\n`` (a ``\\r`` before it and a BOM at its
  start are dropped), read alone: a line that is not UTF-8 or not JSON is that line's
  error entry. It holds ``{"prompt": ...}`` or an OpenAI Batch request (``{"custom_id":
  ..., "body": {"messages": [...]}}``); its other keys (``id``, ``custom_id``,
  ``metadata`` ...) are *carried*: copied into its output line beside ``value`` /
  ``error``. The output's own keys (:data:`RESERVED`) may not be carried: such a line
  is an error entry.
- **A finished output line** (what ``--resume`` keeps) ends with ``\\n`` and is a JSON
  object holding ``value`` or ``error``. An output file is the finished lines of input
  lines 1..k, in order, then maybe one torn line (no ``\\n``: a write cut short), which
  ``--resume`` drops and writes again. Anything else is not this batch's output, and
  so is a line whose carried keys differ from its input line's: ``--resume`` refuses it.
  ``--resume`` keeps the finished lines byte for byte, never asks for them again, and
  appends the others in order; its summary ends ``K lines already done, skipped
  (--resume)``, and its exit status counts the failed lines it kept.
- **An OpenAI Batch request** runs ``body.messages``; the body's other keys (``model``,
  ``max_tokens``, ``response_format`` ...) are not used, since one command runs one model
  with its own options: a ``jsonmode: note:`` line names them once. A ``url`` other than
  ``.../chat/completions`` is an error entry. ``custom_id``, ``method``, ``url`` are
  carried.
- **Repairs and details**: a value repair mode repaired has ``"repairs": [{"path",
  "kind"}]`` (short: the kind says what changed); ``--details`` adds ``"details": {"tier",
  "attempts": [{"outcome", "calls", "latency_s", "error", "issues", "repairs" (with
  before and after), "raw" (failed attempts only), "usage"}]}`` to every line.
- **Ctrl-C** stops ``map`` at once (the requests in flight are abandoned), keeps every
  line written and prints ``jsonmode: interrupted after <the summary of the prompts that
  finished>; K of N lines written in OUT; run the same command with --resume to do the
  rest`` (exit 130).
- **A failed write** is a UsageError naming the lines surely written (exit 2); a reader
  of stdout that went away (EPIPE) ends the batch quietly with status 141.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import pathlib
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from jsonmode import cli
from jsonmode._json import StrictJSONError, dumps, loads_strict
from jsonmode._text import clip
from jsonmode.batch import BatchResults, Progress
from jsonmode.errors import BackendError, JsonModeError, UsageError
from jsonmode.result import Attempt, Result
from jsonmode.schema.core import Schema

__all__ = ["RESERVED", "run"]

#: Keys of an output line that an input line's keys may not overwrite.
RESERVED = ("value", "error", "repairs", "details")
#: Exit status when the reader of stdout went away (128 + SIGPIPE, as a shell reports
#: a tool that SIGPIPE ended).
EXIT_CLOSED_PIPE = 141
EXIT_INTERRUPTED = 130
_DONE = object()  # an output line an earlier run wrote (--resume)


@dataclass
class _Line:
    """One input line, read: its prompt, or why it has none; its carried keys."""

    prompt: Any = None
    error: UsageError | None = None
    carried: dict[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # keys of an OpenAI Batch body this command does not use


class _ClosedPipe(Exception):
    """The output's reader went away (EPIPE): the batch ends quietly."""


def run(args: argparse.Namespace) -> int:
    """``jsonmode batch`` (see :mod:`jsonmode.cli`)."""
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be positive, not {args.concurrency}")
    grammar = cli._grammar(args)
    target: Any = grammar
    if grammar is None:
        target = Schema.of(args.schema)
        cli.print_schema_warnings(target)
    _check_paths(args)
    lines = [_read_line(raw) for raw in _raw_lines(args.input)]
    done, failed_before, keep = _finished(args.output, lines) if args.resume else (0, 0, 0)
    _note_ignored(lines[done:])
    entries: list[Any] = [_DONE] * done + [line.error for line in lines[done:]]
    where = [index for index in range(done, len(lines)) if lines[index].error is None]
    jm = cli._jsonmode(args)
    out = sys.stdout if args.output == "-" else _open_output(args.output, args.resume, keep)
    unread = len(lines) - done - len(where)
    writer = _InOrder(entries, lines, out, args, done)
    bar = Progress(
        len(lines), False if args.no_progress else None, initial=done + unread, failed=unread
    )
    started = time.perf_counter()
    try:
        writer.flush()  # unreadable lines at the head are written at once

        def finished(position: int, entry: Any) -> None:
            bar.done(entry)
            writer.put(where[position], entry)

        with cli._showing_retries(args.verbose, above_a_bar=True):
            results = jm.map(
                [lines[index].prompt for index in where],
                target,
                concurrency=args.concurrency,
                progress=False,
                on_result=finished,
            )
    except KeyboardInterrupt:
        bar.close()
        writer.close()
        ran = [entry for entry in entries[done:] if entry is not None]
        summary = BatchResults(ran, time.perf_counter() - started).summary
        where_to = "" if args.output == "-" else f" in {args.output}"
        again = "" if args.output == "-" else "; run the same command with --resume to do the rest"
        print(
            f"jsonmode: interrupted after {summary}; {writer.written} of {len(lines)} lines "
            f"written{where_to}{again}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except _ClosedPipe:
        bar.close()
        writer.close()
        if _quiet_stdout():
            # As SIGPIPE would: end now. Requests still in flight (daemon threads
            # inside the HTTP client) could otherwise hold the interpreter's exit.
            sys.stderr.flush()
            os._exit(EXIT_CLOSED_PIPE)
        return EXIT_CLOSED_PIPE
    finally:
        bar.close()
        writer.close()
    return _report(args, results, entries, where, unread, done, failed_before)


def _report(
    args: argparse.Namespace,
    results: BatchResults,
    entries: list[Any],
    where: list[int],
    unread: int,
    done: int,
    failed_before: int,
) -> int:
    """The summary line (and failed lines with ``--verbose``); the exit status."""
    summary = results.summary
    if args.verbose:
        for number, entry in enumerate(entries, 1):
            if isinstance(entry, JsonModeError):
                print(f"line {number}: {cli._one_line(entry)}", file=sys.stderr)
    tail = f" ({unread} unreadable line{'s' * (unread != 1)})" if unread else ""
    if done:
        failed = f", {failed_before} of them failed" if failed_before else ""
        tail += f"; {done} line{'s' * (done != 1)} already done, skipped (--resume){failed}"
    total = summary.total + unread
    print(
        f"jsonmode: {total} prompts: {summary.conformed} conformed ({summary.first_try} first "
        f"try, {summary.repaired} repaired, {summary.retried} retried), "
        f"{summary.failed + unread} failed; {summary.usage.total_tokens:,} tokens; "
        f"{summary.duration_s:.1f} s{tail}",
        file=sys.stderr,
    )
    sent = [entries[index] for index in where]
    if sent and all(isinstance(entry, BackendError) for entry in sent):
        return cli.EXIT_BACKEND  # the backend failed every line sent
    return 0 if summary.failed + unread + failed_before == 0 else cli.EXIT_NONCONFORMING


# -- reading the input ---------------------------------------------------------------------


def _raw_lines(source: str) -> list[bytes]:
    """The input's lines as bytes: split at ``\\n`` only (a JSON string may hold
    U+2028 as is), a final newline ends the last line, a ``\\r`` before a newline goes
    with it. Each line is decoded alone, so one bad byte costs only its line."""
    try:
        if source == "-":
            buffer = getattr(sys.stdin, "buffer", None)
            if buffer is None:  # a text stream standing in for stdin (tests)
                data = sys.stdin.read().encode("utf-8", "surrogateescape")
            else:
                data = bytes(buffer.read())
        else:
            data = pathlib.Path(source).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror or exc}") from None
    if not data:
        return []
    return [line.removesuffix(b"\r") for line in data.removesuffix(b"\n").split(b"\n")]


def _read_line(raw: bytes) -> _Line:
    """One input line: its prompt and carried keys, or the UsageError it is."""
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        return _Line(error=UsageError(f"not UTF-8 text (at byte {exc.start} of the line)"))
    if not text.strip():
        return _Line(error=UsageError('blank line, not {"prompt": ...}'))
    try:
        item = loads_strict(text)
    except StrictJSONError as exc:
        return _Line(error=UsageError(f"not JSON: {exc}"))
    if not isinstance(item, dict):
        return _Line(error=UsageError('not a {"prompt": ...} object'))
    body = item.get("body")
    key = "prompt" if "prompt" in item or not isinstance(body, dict) else "body"
    carried = {name: value for name, value in item.items() if name != key}
    clash = [name for name in RESERVED if name in carried]
    if clash:
        for name in clash:
            del carried[name]
        return _Line(
            error=UsageError(
                f'the key "{clash[0]}" is a key of the output line: rename it in the input'
            ),
            carried=carried,
        )
    if isinstance(body, dict) and key == "body":
        return _openai_line(body, carried)
    if "prompt" not in item:
        return _Line(
            error=UsageError(
                'not a {"prompt": ...} object, nor an OpenAI Batch request '
                '{"custom_id": ..., "body": {"messages": [...]}}'
            ),
            carried=carried,
        )
    prompt = item["prompt"]
    if not isinstance(prompt, (str, list)):
        return _Line(
            error=UsageError("the prompt must be a string or a list of chat messages"),
            carried=carried,
        )
    return _Line(prompt, carried=carried)


def _openai_line(body: dict[str, Any], carried: dict[str, Any]) -> _Line:
    """An OpenAI Batch request: ``body.messages`` is the prompt; the body's other keys
    (``model``, ``max_tokens`` ...) are not used (this command's options apply)."""
    url = carried.get("url")
    if url is not None and not (isinstance(url, str) and url.endswith("/chat/completions")):
        return _Line(
            error=UsageError(f"only /v1/chat/completions requests can run, not {url!r}"),
            carried=carried,
        )
    messages = body.get("messages")
    if not isinstance(messages, list):
        return _Line(
            error=UsageError('an OpenAI Batch request needs "body": {"messages": [...]}'),
            carried=carried,
        )
    ignored = tuple(sorted(name for name in body if name != "messages"))
    return _Line(messages, carried=carried, ignored=ignored)


def _note_ignored(lines: list[_Line]) -> None:
    """One note on stderr naming the OpenAI Batch body keys this run does not use."""
    ignored = sorted({name for line in lines for name in line.ignored})
    if ignored:
        print(
            f"jsonmode: note: not used from the OpenAI Batch request bodies: "
            f"{', '.join(ignored)} (this command's options apply: --model, --max-tokens ...)",
            file=sys.stderr,
        )


# -- the output file -------------------------------------------------------------------------


def _check_paths(args: argparse.Namespace) -> None:
    """Refuse what would lose finished work: an output that is the input, or an
    existing non-empty output without ``--resume`` or ``--overwrite``."""
    if args.output == "-":
        if args.resume:
            raise UsageError("--resume needs --output FILE (it reads the lines already there)")
        return
    try:
        found = os.stat(args.output)
    except OSError:
        return  # nothing there (or nothing readable: opening it will say)
    try:
        if args.input == "-":
            same = os.path.samestat(os.fstat(sys.stdin.fileno()), found)
        else:
            same = os.path.samefile(args.input, args.output)
    except (OSError, ValueError, AttributeError):
        same = False
    if same:
        raise UsageError(
            f"--input and --output are the same file ({args.output})",
            hint="write the output to another file",
        )
    if stat.S_ISREG(found.st_mode) and found.st_size > 0 and not (args.resume or args.overwrite):
        raise UsageError(
            f"{args.output} already exists",
            hint="--resume adds the lines it lacks and keeps those there; --overwrite replaces it",
        )


def _finished(path: str, lines: list[_Line]) -> tuple[int, int, int]:
    """``--resume``: (finished output lines, how many of them are errors, the bytes they
    take) of the output file at ``path`` (see the module docstring); UsageError when it
    is not this input's output."""
    try:
        data = pathlib.Path(path).read_bytes()
    except FileNotFoundError:
        return 0, 0, 0
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    count = failed = keep = 0
    start_over = "check --input and --output, or pass --overwrite to start over"
    while (end := data.find(b"\n", keep)) >= 0:
        number = count + 1
        try:
            entry = loads_strict(data[keep:end].decode("utf-8"))
        except (UnicodeDecodeError, StrictJSONError):
            entry = None
        if not (isinstance(entry, dict) and ("value" in entry) != ("error" in entry)):
            raise UsageError(
                f"{path} line {number} is not an output line of jsonmode batch", hint=start_over
            )
        if count == len(lines):
            raise UsageError(f"{path} has more lines than the input", hint=start_over)
        carried = {name: value for name, value in entry.items() if name not in RESERVED}
        if carried != lines[count].carried:
            raise UsageError(
                f"{path} line {number} is not the output of input line {number}: "
                f"it carries {clip(dumps(carried), 200)}, the input line "
                f"{clip(dumps(lines[count].carried), 200)}",
                hint=start_over,
            )
        failed += "error" in entry
        count += 1
        keep = end + 1
    return count, failed, keep


def _open_output(path: str, resume: bool, keep: int) -> TextIO:
    """The output file, emptied; with ``resume``, cut after its finished lines (a torn
    last line dropped) and opened to append."""
    try:
        if resume and os.path.exists(path):
            os.truncate(path, keep)
            return open(path, "a", encoding="utf-8", newline="\n")
        return open(path, "w", encoding="utf-8", newline="\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _quiet_stdout() -> bool:
    """stdout's reader is gone: point stdout at /dev/null, so that the interpreter's
    last flush does not report the pipe again. False when stdout is not a real file
    (a stream standing in for it in tests)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # not a real stdout (tests)
        return False
    return True


class _InOrder:
    """Writes output line i as soon as lines 0..i are all known, flushing each: an
    interrupted batch leaves every line up to the first unfinished one on disk. A
    failed write raises a UsageError (``_ClosedPipe`` for a reader that went away);
    after :meth:`close` nothing more is written. Callers hold ``map``'s lock."""

    def __init__(
        self,
        entries: list[Any],
        lines: list[_Line],
        out: TextIO,
        args: argparse.Namespace,
        written: int,
    ) -> None:
        self.entries = entries
        self.lines = lines
        self.out = out
        self.name = "stdout" if args.output == "-" else args.output
        self.details = bool(args.details)
        self.written = written
        self.flushed = written  # lines surely handed to the system
        self.closed = False

    def put(self, index: int, entry: Any) -> None:
        self.entries[index] = entry
        self.flush()

    def flush(self) -> None:
        start = self.written
        while (
            not self.closed
            and self.written < len(self.entries)
            and self.entries[self.written] is not None
        ):
            index = self.written
            self._write(_line_text(self.entries[index], self.lines[index].carried, self.details))
            self.written += 1
        if self.written > start:
            self._write(None)
            self.flushed = self.written

    def close(self) -> None:
        """Write no more; flush what was written and close the file (not stdout)."""
        if self.out.closed:
            return
        self.closed = True
        try:
            if self.out is sys.stdout:
                self.out.flush()
            else:
                self.out.close()
        except OSError:  # the buffer's rest is lost: the write that failed said so
            if self.out is not sys.stdout:
                with contextlib.suppress(OSError):
                    self.out.close()

    def _write(self, text: str | None) -> None:
        try:
            if text is None:
                self.out.flush()
            else:
                self.out.write(text)
        except OSError as exc:
            self.closed = True
            if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                raise _ClosedPipe from None
            again = "" if self.name == "stdout" else ", then run the same command with --resume"
            raise UsageError(
                f"cannot write {self.name} after {self.flushed} lines: {exc.strerror or exc}",
                hint=f"make room for the output{again}",
            ) from None


def _line_text(entry: Result[Any] | JsonModeError, carried: dict[str, Any], details: bool) -> str:
    """One output line, with its newline."""
    try:
        return dumps({**carried, **_entry(entry, details)}) + "\n"
    except UsageError as error:  # cannot happen for what was read; never lose the line
        fallback = {"type": "UsageError", "message": error.message}
        return dumps({**carried, "error": fallback}) + "\n"


def _entry(entry: Result[Any] | JsonModeError, details: bool) -> dict[str, Any]:
    """The value (and in repair mode its repairs), or the error's type, message and
    hint; with ``details``, how it came about."""
    line: dict[str, Any]
    if isinstance(entry, Result):
        line = {"value": entry.data}
        if entry.repairs:
            line["repairs"] = [{"path": r.path, "kind": r.kind} for r in entry.repairs]
    else:
        error: dict[str, Any] = {"type": type(entry).__name__, "message": cli._message(entry)}
        hint = cli._cli_hint(entry)
        if hint:
            error["hint"] = " ".join(hint.split())
        line = {"error": error}
    if details:
        record: dict[str, Any] = {}
        if isinstance(entry, Result):
            record["tier"] = entry.tier
        record["attempts"] = [_attempt(attempt) for attempt in entry.attempts]
        line["details"] = record
    return line


def _attempt(attempt: Attempt) -> dict[str, Any]:
    record: dict[str, Any] = {
        "outcome": attempt.outcome,
        "calls": attempt.calls,
        "latency_s": round(attempt.latency_s, 4),
    }
    if attempt.error:
        record["error"] = attempt.error
    if attempt.issues:
        record["issues"] = [str(issue) for issue in attempt.issues]
    if attempt.repairs:
        record["repairs"] = [
            {"path": r.path, "kind": r.kind, "before": r.before, "after": r.after}
            for r in attempt.repairs
        ]
    if not attempt.ok and attempt.raw:
        record["raw"] = attempt.raw
    if attempt.usage is not None:
        record["usage"] = {
            "prompt_tokens": attempt.usage.prompt_tokens,
            "completion_tokens": attempt.usage.completion_tokens,
        }
    return record
