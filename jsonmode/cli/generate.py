"""``jsonmode generate``: one prompt, one value (or text) on stdout; with ``--stream``
the value as it grows on stderr, one JSON line per event (see :mod:`jsonmode.cli`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from jsonmode._json import dumps
from jsonmode.cli import common
from jsonmode.errors import UsageError
from jsonmode.reasoning import FAMILIES, Reasoning
from jsonmode.schema.core import Schema

if TYPE_CHECKING:
    from jsonmode.facade import JsonMode
    from jsonmode.result import Result

__all__ = ["reasoning_option", "run"]


def reasoning_option(value: str) -> Reasoning | str | None:
    """``--reasoning``: ``auto``, ``off`` (None) or an end marker; a known family's end
    marker gives that family's markers, ``</tag>`` opens with ``<tag>`` and ``[/TAG]``
    with ``[TAG]``; any other marker ends a thinking that has no start marker.

    Raises:
        UsageError: an empty or over-long marker.
    """
    if value == "auto":
        return "auto"
    if value == "off":
        return None
    for family in FAMILIES.values():
        if family.end == value:
            return family
    for opening, closing in (("<", "</"), ("[", "[/")):
        if value.startswith(closing) and len(value) > len(closing):
            return Reasoning(end=value, start=opening + value[len(closing) :])
    return Reasoning(end=value)


def run(args: argparse.Namespace) -> int:
    """``jsonmode generate`` (see :mod:`jsonmode.cli`): the value (or the text) on stdout;
    exit status 0. Raises what the façade raises (the caller reports it)."""
    grammar = common.compiled_grammar(args)
    args.reasoning = reasoning_option(args.reasoning)
    jm = common.build_jsonmode(args)
    # An argument that was not UTF-8 (kept by surrogateescape) is refused by the façade
    # like any prompt holding a lone surrogate (session.prompts.user_messages).
    prompt = common.read_stdin() if args.prompt == "-" else args.prompt
    result: Result[Any]
    if grammar is not None:
        with common.showing_retries(args.verbose):
            result = jm.run_text(prompt, grammar)
    else:
        spec = common.schema_of(args)
        common.print_schema_warnings(spec, args.strict_schema)
        with common.showing_retries(args.verbose):
            result = _streamed(jm, prompt, spec) if args.stream else jm.run(prompt, spec)
    if args.verbose:
        print(f"tier: {result.tier}, mode: {result.mode}", file=sys.stderr)
        for attempt in result.attempts:
            print(attempt.describe(), file=sys.stderr)
    if grammar is not None:
        common.write_text(result.data)
    else:
        common.emit(result.data, args.indent, sys.stdout)
    return 0


def _streamed(jm: JsonMode, prompt: str, spec: Schema) -> Result[Any]:
    """Run ``jm.stream``, each partial value, thinking piece and retry as one JSON line
    on stderr."""
    for event in jm.stream(prompt, spec):
        if event.kind == "partial":
            _event_line({"partial": _plain(event.value)})
        elif event.kind == "thinking":
            _event_line({"thinking": event.text})
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
