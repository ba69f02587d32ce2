"""``jsonmode batch``: prompts from JSON Lines, one output line per input line, in order.

The command's contract is in :mod:`jsonmode.cli`'s docstring. Lines are written as
soon as every line before them is known (:class:`_InOrder`), so an interrupted batch
keeps them; the prompts run through ``JsonMode.map``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, TextIO

from jsonmode import cli
from jsonmode._json import dumps
from jsonmode.errors import JsonModeError, UsageError
from jsonmode.result import Result
from jsonmode.schema.core import Schema

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """``jsonmode batch`` (see :mod:`jsonmode.cli`)."""
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be positive, not {args.concurrency}")
    spec = Schema.of(args.schema)
    cli.print_schema_warnings(spec)
    lines = _lines(cli._read(args.input))
    entries: list[Any] = [None] * len(lines)
    prompts: list[Any] = []
    where: list[int] = []  # the input line of each prompt sent
    for index, line in enumerate(lines):
        try:
            prompts.append(_prompt_of(line))
        except UsageError as error:
            entries[index] = error
        else:
            where.append(index)
    jm = cli._jsonmode(args)
    out = sys.stdout if args.output == "-" else _open_output(args.output)
    writer = _InOrder(entries, out)
    try:
        writer.flush()  # unreadable lines at the head are written at once

        def done(position: int, entry: Any) -> None:
            writer.put(where[position], entry)

        with cli._showing_retries(args.verbose, above_a_bar=True):
            results = jm.map(
                prompts,
                spec,
                concurrency=args.concurrency,
                progress=False if args.no_progress else None,
                on_result=done,
            )
    finally:
        if out is not sys.stdout:
            out.close()
    unread = len(lines) - len(prompts)
    summary = results.summary
    if unread:
        summary = dataclasses.replace(
            summary, total=summary.total + unread, failed=summary.failed + unread
        )
    if args.verbose:
        for number, entry in enumerate(entries, 1):
            if isinstance(entry, JsonModeError):
                print(f"line {number}: {cli._one_line(entry)}", file=sys.stderr)
    unreadable = f" ({unread} unreadable line{'s' * (unread != 1)})" if unread else ""
    print(f"jsonmode: {summary}{unreadable}", file=sys.stderr)
    return 0 if summary.failed == 0 else cli.EXIT_NONCONFORMING


class _InOrder:
    """Writes output line i as soon as lines 0..i are all known, flushing each: an
    interrupted batch leaves every line up to the first unfinished one on disk."""

    def __init__(self, entries: list[Any], out: TextIO) -> None:
        self.entries = entries
        self.out = out
        self.written = 0

    def put(self, index: int, entry: Any) -> None:
        self.entries[index] = entry
        self.flush()

    def flush(self) -> None:
        start = self.written
        while self.written < len(self.entries) and self.entries[self.written] is not None:
            self.out.write(dumps(_entry(self.entries[self.written])) + "\n")
            self.written += 1
        if self.written > start:
            self.out.flush()


def _lines(text: str) -> list[str]:
    """JSON Lines: split at "\\n" only (a JSON string may hold U+2028 as is), a final
    newline ends the last line, and a "\\r" before a newline goes with it."""
    if not text:
        return []
    lines = text.removesuffix("\n").split("\n")
    return [line.removesuffix("\r") for line in lines]


def _prompt_of(line: str) -> Any:
    """The prompt of one input line; UsageError when the line holds none."""
    if not line.strip():
        raise UsageError('blank line, not {"prompt": ...}')
    try:
        item = json.loads(line)
    except ValueError as exc:
        raise UsageError(f"not JSON: {exc}") from None
    if not isinstance(item, dict) or "prompt" not in item:
        raise UsageError('not a {"prompt": ...} object')
    prompt = item["prompt"]
    if not isinstance(prompt, (str, list)):
        raise UsageError("the prompt must be a string or a list of chat messages")
    return prompt


def _open_output(path: str) -> TextIO:
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _entry(entry: Result[Any] | JsonModeError) -> dict[str, Any]:
    """One output line of a batch: the value, or the error's type, message and hint."""
    if not isinstance(entry, JsonModeError):
        return {"value": entry.data}
    error: dict[str, Any] = {"type": type(entry).__name__, "message": cli._message(entry)}
    hint = cli._cli_hint(entry)
    if hint:
        error["hint"] = " ".join(hint.split())
    return {"error": error}
