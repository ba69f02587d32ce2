"""``jsonmode batch``: prompts from JSON Lines, one output line per input line, in order.

The command's contract is in :mod:`jsonmode.cli`'s docstring. Lines are written as
soon as every line before them is known, so an interrupted batch keeps them and
``--resume`` appends the rest; the prompts run through :func:`jsonmode.batch.stream`
(``map``'s workers, entries handed out in order): the input is read a line at a time as
prompts are sent, each output line is dropped once written, and the summary keeps
counts, so memory is bounded whatever the input's size (``--resume`` reads both files a
line at a time too).

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
  with its own options: a ``jsonmode: note:`` line names them once, before the
  summary. A ``url`` other than ``.../chat/completions`` is an error entry.
  ``custom_id``, ``method``, ``url`` are carried.
- **Repairs and details**: a value repair mode repaired has ``"repairs": [{"path",
  "kind"}]`` (short: the kind says what changed); ``--details`` adds ``"details": {"tier",
  "attempts": [{"outcome", "calls", "latency_s", "error", "issues", "repairs" (with
  before and after), "raw" (failed attempts only), "usage"}]}`` to every line.
- **Ctrl-C** stops the batch at once (the requests in flight are abandoned), keeps every
  line written and prints ``jsonmode: interrupted after <the summary of the prompts that
  finished>; K of N lines written in OUT; run the same command with --resume to do the
  rest`` (exit 130; when this process runs the command line, it ends at once, as
  SIGINT would: nothing left in flight can hold the interpreter's exit).
- **A failed write** is a UsageError naming the lines surely written (exit 2); a reader
  of stdout that went away (EPIPE) ends the batch quietly with status 141.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import functools
import os
import stat
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from jsonmode._json import StrictJSONError, dumps, loads_strict
from jsonmode._text import clip
from jsonmode.batch import BatchSummary, Progress, Tally, stream
from jsonmode.cli import common
from jsonmode.errors import JsonModeError, UsageError
from jsonmode.result import Attempt, Result

__all__ = ["RESERVED", "run"]

#: Keys of an output line that an input line's keys may not overwrite.
RESERVED = ("value", "error", "repairs", "details")
#: Exit status when the reader of stdout went away (128 + SIGPIPE, as a shell reports
#: a tool that SIGPIPE ended).
EXIT_CLOSED_PIPE = 141
EXIT_INTERRUPTED = 130


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
    """``jsonmode batch`` (see :mod:`jsonmode.cli`). Memory stays bounded whatever the
    input's size: lines are read as the prompts are sent, and each output line is
    written and dropped (at most ``2 * --concurrency`` lines held, see
    :func:`jsonmode.batch.stream`); the summary keeps counts only."""
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be positive, not {args.concurrency}")
    grammar = common.compiled_grammar(args)
    target: Any = grammar
    if grammar is None:
        target = common.schema_of(args)
        common.print_schema_warnings(target, args.strict_schema)
    _check_paths(args)
    source = _Input(args.input)
    try:
        return _run(args, target, source)
    finally:
        source.close()


def _run(args: argparse.Namespace, target: Any, source: _Input) -> int:
    ignored: set[str] = set()
    lines = _read_lines(source, ignored)
    done, failed_before, keep = _finished(args.output, lines) if args.resume else (0, 0, 0)
    jm = common.build_jsonmode(args)
    out = sys.stdout if args.output == "-" else _open_output(args.output, args.resume, keep)
    writer = _Writer(out, args, done)
    total = source.count()
    bar = Progress(total or 0, False if args.no_progress else None, initial=done)
    tally = Tally()
    unread = 0

    def finished(_: int, line: _Line, entry: Any) -> None:  # one call at a time
        nonlocal unread
        bar.done(entry)
        if line.error is None:
            tally.add(entry)
        else:
            unread += 1

    say = functools.partial(_above_a_bar, file=sys.stderr)
    started = time.perf_counter()
    try:
        with common.showing_retries(args.verbose, above_a_bar=True):
            jm.prepare()  # before the clock: no duration includes importing litellm
            started = time.perf_counter()
            entries = stream(
                jm, lines, _prompt, target, concurrency=args.concurrency, finished=finished
            )
            try:
                for line, entry in entries:
                    writer.write(_line_text(entry, line.carried, writer.details))
                    if args.verbose and isinstance(entry, JsonModeError):
                        say(f"line {writer.written}: {common.one_line(entry)}")
                    if not entries.ready():
                        writer.flush()
            finally:
                entries.close()
            writer.flush()
    except KeyboardInterrupt:
        bar.close()
        writer.close()
        _note_ignored(ignored)
        summary = tally.summary(time.perf_counter() - started)
        if unread:
            summary = dataclasses.replace(
                summary, total=summary.total + unread, failed=summary.failed + unread
            )
        where_to = "" if args.output == "-" else f" in {args.output}"
        again = "" if args.output == "-" else "; run the same command with --resume to do the rest"
        of = f" of {total}" if total is not None else ""
        print(
            f"jsonmode: interrupted after {summary}; {writer.written}{of} lines "
            f"written{where_to}{again}",
            file=sys.stderr,
        )
        if _whole_process():
            # As SIGINT's default action would: end now. Requests still in flight (on
            # map's daemon threads) and threads the HTTP client leaves behind (litellm's
            # logging pool, joined at exit) could otherwise hold the interpreter's exit.
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
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
    _note_ignored(ignored)
    summary = tally.summary(time.perf_counter() - started)
    return _report(summary, tally.backend_failed, unread, done, failed_before)


def _above_a_bar(text: str, file: TextIO) -> None:
    from tqdm.auto import tqdm

    tqdm.write(text, file=file)


def _prompt(line: _Line) -> Any:
    """A line's prompt, or its error (then its entry)."""
    if line.error is not None:
        raise line.error
    return line.prompt


def _report(
    summary: BatchSummary, backend_failed: int, unread: int, done: int, failed_before: int
) -> int:
    """The summary line; the exit status."""
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
    if summary.total and backend_failed == summary.total:
        return common.EXIT_BACKEND  # the backend failed every line sent
    return 0 if summary.failed + unread + failed_before == 0 else common.EXIT_NONCONFORMING


# -- reading the input ---------------------------------------------------------------------


#: Bytes read at a time when counting a file's lines for the progress bar.
_CHUNK = 1 << 20


class _Input:
    """The input's lines as bytes, read one at a time: split at ``\\n`` only (a JSON
    string may hold U+2028 as is), a final newline ends the last line, a ``\\r``
    before a newline goes with it. Each line is decoded alone, so one bad byte costs
    only its line. Opening fails at once with a UsageError; a later read error is a
    UsageError too (it stops the batch, keeping the lines written)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._file: Any = None
        try:
            if source == "-":
                self._stream: Any = getattr(sys.stdin, "buffer", None)
                if self._stream is None:  # a text stream standing in for stdin (tests)
                    self._stream = _Encoded(sys.stdin)
            else:
                self._file = self._stream = open(source, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise UsageError(f"cannot read {source}: {exc.strerror or exc}") from None

    def __iter__(self) -> Iterator[bytes]:
        try:
            for line in self._stream:
                yield bytes(line).removesuffix(b"\n").removesuffix(b"\r")
        except OSError as exc:
            raise UsageError(f"cannot read {self.source}: {exc.strerror or exc}") from None

    def count(self) -> int | None:
        """The lines of a regular file (read through once, in constant memory, without
        moving this reader); None for anything else (stdin, a pipe)."""
        if self._file is None:
            return None
        try:
            if not stat.S_ISREG(os.fstat(self._file.fileno()).st_mode):
                return None
            lines = 0
            last = b"\n"
            with open(self.source, "rb") as again:
                while chunk := again.read(_CHUNK):
                    lines += chunk.count(b"\n")
                    last = chunk[-1:]
        except OSError:
            return None
        return lines + (last != b"\n")

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()


class _Encoded:
    """A text stream's lines as UTF-8 bytes (lone surrogates kept as they were read)."""

    def __init__(self, text: TextIO) -> None:
        self._text = text

    def __iter__(self) -> Iterator[bytes]:
        for line in self._text:
            yield line.encode("utf-8", "surrogateescape")


def _read_lines(source: _Input, ignored: set[str]) -> Iterator[_Line]:
    """The input's lines, read; the OpenAI Batch body keys they do not use are added to
    ``ignored`` (at most :data:`_MAX_IGNORED` names: a note lists them)."""
    for raw in source:
        line = _read_line(raw)
        if line.ignored and len(ignored) < _MAX_IGNORED:
            ignored.update(line.ignored[: _MAX_IGNORED - len(ignored)])
        yield line


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


#: Names the note on unused OpenAI Batch body keys lists at most.
_MAX_IGNORED = 32


def _note_ignored(ignored: set[str]) -> None:
    """One note on stderr naming the OpenAI Batch body keys this run did not use."""
    if ignored:
        more = " ..." if len(ignored) >= _MAX_IGNORED else ""
        print(
            f"jsonmode: note: not used from the OpenAI Batch request bodies: "
            f"{', '.join(sorted(ignored))}{more} (this command's options apply: --model, "
            "--max-tokens ...)",
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


def _finished(path: str, lines: Iterator[_Line]) -> tuple[int, int, int]:
    """``--resume``: (finished output lines, how many of them are errors, the bytes they
    take) of the output file at ``path`` (see the module docstring); UsageError when it
    is not this input's output. Reads both files a line at a time, taking one input
    line from ``lines`` per finished output line (the rest are left for the batch)."""
    try:
        output = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return 0, 0, 0
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    count = failed = keep = 0
    start_over = "check --input and --output, or pass --overwrite to start over"
    with output:
        for raw in output:
            if not raw.endswith(b"\n"):
                break  # a torn last line: written again
            number = count + 1
            try:
                entry = loads_strict(raw[:-1].decode("utf-8"))
            except (UnicodeDecodeError, StrictJSONError):
                entry = None
            if not (isinstance(entry, dict) and ("value" in entry) != ("error" in entry)):
                raise UsageError(
                    f"{path} line {number} is not an output line of jsonmode batch",
                    hint=start_over,
                )
            line = next(lines, None)
            if line is None:
                raise UsageError(f"{path} has more lines than the input", hint=start_over)
            carried = {name: value for name, value in entry.items() if name not in RESERVED}
            if carried != line.carried:
                raise UsageError(
                    f"{path} line {number} is not the output of input line {number}: "
                    f"it carries {clip(dumps(carried), 200)}, the input line "
                    f"{clip(dumps(line.carried), 200)}",
                    hint=start_over,
                )
            failed += "error" in entry
            count += 1
            keep += len(raw)
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


def _whole_process() -> bool:
    """This process runs the command line itself (``python -m jsonmode.cli``, whose
    ``__main__`` is :mod:`jsonmode.cli.__main__`, or the ``jsonmode`` script), rather than
    a program that called ``jsonmode.cli.main``: the command may then end the process at
    once."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "jsonmode.cli.__main__":
        return True
    name = os.path.basename(getattr(main, "__file__", None) or "")
    return name in ("jsonmode", "jsonmode.exe", "jsonmode-script.py")


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


class _Writer:
    """Writes output lines (:meth:`write`), handing them to the system at each
    :meth:`flush`: an interrupted batch keeps every line written. A failed write raises
    a UsageError (``_ClosedPipe`` for a reader that went away); after :meth:`close`
    nothing more is written. One thread at a time."""

    def __init__(self, out: TextIO, args: argparse.Namespace, written: int) -> None:
        self.out = out
        self.name = "stdout" if args.output == "-" else args.output
        self.details = bool(args.details)
        self.written = written
        self.flushed = written  # lines surely handed to the system
        self.closed = False

    def write(self, text: str) -> None:
        if not self.closed:
            self._write(text)
            self.written += 1

    def flush(self) -> None:
        if not self.closed and self.flushed < self.written:
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
        error: dict[str, Any] = {
            "type": type(entry).__name__,
            "message": common.error_message(entry),
        }
        hint = common.cli_hint(entry)
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
