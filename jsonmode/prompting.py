"""Prompts: the schema and output contract, few-shot turns, and the re-ask.

Every function returns new message tuples; the caller's messages are copied once
and never modified.

A re-ask is bounded whatever the model wrote: it repeats at most
:data:`MAX_REASK_OUTPUT_CHARS` of the previous output (its head and its tail, with a
marker that says how much was cut in between), lists at most :data:`MAX_REASK_ISSUES`
issues, and cuts each issue or parse message to :data:`MAX_REASK_MESSAGE_CHARS`. The
model is told whenever anything was cut. So a 60 MB reply costs a re-ask of a few KB,
not another 60 MB request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jsonmode._json import dumps, has_surrogate
from jsonmode._text import clip
from jsonmode.errors import OutputError, OutputTruncatedError, UsageError
from jsonmode.result import Attempt
from jsonmode.schema.core import Schema
from jsonmode.schema.validation import Issue

__all__ = [
    "MAX_REASK_ISSUES",
    "MAX_REASK_MESSAGE_CHARS",
    "MAX_REASK_OUTPUT_CHARS",
    "Message",
    "describe_failure",
    "first_messages",
    "format_instructions",
    "reask_messages",
    "user_messages",
]

Message = Mapping[str, Any]

#: At most this many characters of a failed output are repeated in the re-ask: the first
#: three quarters of them from its start, the rest from its end (where a cut-off shows).
MAX_REASK_OUTPUT_CHARS = 8_000
#: At most this many issues are listed in a re-ask; the count of the rest is given.
MAX_REASK_ISSUES = 20
#: Each listed issue (or the parse error) is cut to this many characters.
MAX_REASK_MESSAGE_CHARS = 500

_CONTRACT = (
    "Reply with exactly one JSON document that conforms to the JSON Schema below. "
    "Output only the JSON: no prose, no markdown code fences, no comments. "
    "Include every required property; do not add properties the schema does not allow.\n"
    "JSON Schema:\n{schema}"
)


def user_messages(prompt_or_messages: str | Sequence[Message]) -> tuple[Message, ...]:
    """Private copies of the caller's input as chat messages."""
    if isinstance(prompt_or_messages, str):
        _check_text(prompt_or_messages, "the prompt")
        return ({"role": "user", "content": prompt_or_messages},)
    if isinstance(prompt_or_messages, (bytes, Mapping)) or not isinstance(
        prompt_or_messages, Sequence
    ):
        raise UsageError("prompt must be a string or a list of message dicts")
    copies: list[Message] = []
    for index, message in enumerate(prompt_or_messages):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise UsageError(f"message {index} must be a dict with 'role' and 'content'")
        if isinstance(message["content"], str):
            _check_text(message["content"], f"message {index}")
        copies.append(dict(message))
    if not copies:
        raise UsageError("messages must not be empty")
    return tuple(copies)


def _check_text(text: str, what: str) -> None:
    """A prompt that cannot be encoded as UTF-8 fails here, not later as a backend error."""
    if has_surrogate(text):
        raise UsageError(f"{what} holds a lone surrogate: it cannot be sent as UTF-8 text")


def format_instructions(schema: Schema) -> str:
    """The output contract and the schema, as the system message states them.

    The same text the prompted tier sends, for callers that build their own prompt
    (the LangChain parser's ``get_format_instructions``).
    """
    return _CONTRACT.format(schema=schema.prompt_form)


def first_messages(
    schema: Schema,
    messages: tuple[Message, ...],
    examples: Sequence[tuple[str, Any]] = (),
) -> tuple[Message, ...]:
    """System contract (merged into the caller's system message if there is one),
    then few-shot turns, then the caller's conversation."""
    contract = format_instructions(schema)
    head: list[Message]
    if messages and messages[0].get("role") == "system":
        own = messages[0].get("content")
        head = [{**messages[0], "content": f"{own}\n\n{contract}"}]
        rest = messages[1:]
    else:
        head = [{"role": "system", "content": contract}]
        rest = messages
    for prompt, value in examples:
        head.append({"role": "user", "content": prompt})
        head.append({"role": "assistant", "content": dumps(value)})
    return (*head, *rest)


def _clip_output(raw: str) -> str:
    """``raw`` as a re-ask repeats it: whole when short, else its head (three quarters)
    and tail (where a cut-off shows) around a marker."""
    return clip(raw, MAX_REASK_OUTPUT_CHARS, tail=MAX_REASK_OUTPUT_CHARS // 4)


def _encodable(text: str) -> str:
    """``text`` with each lone surrogate spelled as its escape (``\\ud800``): a reply
    read from an escaped one holds it raw, and no request carrying it can be encoded."""
    if not has_surrogate(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _problems(outcome: str, issues: Sequence[Issue], error: str | None, raw: str) -> list[str]:
    if outcome == "truncated":
        return [
            "Your reply was cut off before the JSON document ended. "
            "Reply with a complete, shorter JSON document."
        ]
    if issues:
        shown = issues[:MAX_REASK_ISSUES]
        lines = [
            f"It is JSON, but it violates the schema in {len(issues)} place(s):",
            *(f"- {clip(str(issue), MAX_REASK_MESSAGE_CHARS)}" for issue in shown),
        ]
        if len(issues) > len(shown):
            lines.append(f"- … and {len(issues) - len(shown)} more not listed here.")
        return lines
    lines = [f"It could not be read as JSON: {clip(str(error), MAX_REASK_MESSAGE_CHARS)}"]
    if raw[:64].lstrip().startswith("```"):
        lines.append("Do not wrap the JSON in markdown code fences.")
    return lines


def describe_failure(failure: OutputError) -> str:
    """What is wrong with one output, worded for the model that wrote it.

    The same wording as the façade's re-ask: every schema issue on its own line, or
    why the text could not be read. Adapters use it as the message a framework feeds
    back to its model (LangChain's ``observation``, a CrewAI guardrail's error).
    """
    outcome = "truncated" if isinstance(failure, OutputTruncatedError) else "other"
    lines = ["The output does not conform to the JSON Schema."]
    lines += _problems(outcome, failure.issues, failure.message, failure.raw)
    lines.append("Reply again with only the corrected JSON document.")
    return "\n".join(lines)


def _feedback(attempt: Attempt, max_attempts: int) -> str:
    lines = [f"Attempt {attempt.index} of {max_attempts} did not conform."]
    if len(attempt.raw) > MAX_REASK_OUTPUT_CHARS:
        lines.append(
            f"(Your reply was {len(attempt.raw):,} characters long; only its first and last "
            "characters are repeated above.)"
        )
    lines += _problems(attempt.outcome, attempt.issues, attempt.error, attempt.raw)
    lines.append("Reply again with only the corrected JSON document.")
    return "\n".join(lines)


def reask_messages(
    first: tuple[Message, ...], failed: Attempt, max_attempts: int
) -> tuple[Message, ...]:
    """The first request plus the failed output and every error found in it.

    Carries the attempt number, so even a deterministic backend that repeats
    itself never receives an identical request twice. Bounded: the output and the
    errors are cut as the module docstring says, so the re-ask's size does not grow
    with the failed output's.
    """
    return (
        *first,
        {"role": "assistant", "content": _encodable(_clip_output(failed.raw))},
        {"role": "user", "content": _feedback(failed, max_attempts)},
    )
