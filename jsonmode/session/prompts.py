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

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jsonmode._json import dumps, has_surrogate
from jsonmode._text import clip
from jsonmode.errors import (
    OutputError,
    OutputTruncatedError,
    ThinkingTruncatedError,
    UsageError,
)
from jsonmode.result import Attempt
from jsonmode.schema.core import Schema
from jsonmode.schema.validation import Issue

if TYPE_CHECKING:
    from jsonmode.decoding.grammars.compiled import CompiledGrammar

__all__ = [
    "MAX_REASK_ISSUES",
    "MAX_REASK_MESSAGE_CHARS",
    "MAX_REASK_OUTPUT_CHARS",
    "Message",
    "describe_failure",
    "first_messages",
    "first_text_messages",
    "format_instructions",
    "grammar_instructions",
    "reask_messages",
    "reask_text_messages",
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
    turns = [(prompt, dumps(value)) for prompt, value in examples]
    return _with_contract(format_instructions(schema), messages, turns)


def _with_contract(
    contract: str, messages: tuple[Message, ...], turns: Sequence[tuple[str, str]]
) -> tuple[Message, ...]:
    head: list[Message]
    if messages and messages[0].get("role") == "system":
        own = messages[0].get("content")
        head = [{**messages[0], "content": f"{own}\n\n{contract}"}]
        rest = messages[1:]
    else:
        head = [{"role": "system", "content": contract}]
        rest = messages
    for prompt, reply in turns:
        head.append({"role": "user", "content": prompt})
        head.append({"role": "assistant", "content": reply})
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


#: The re-ask after a reply that ended inside its thinking (no answer to correct).
THINKING_RAN_OUT = (
    "Your reply ran out of room while you were still thinking: it ended inside the "
    "thinking, before any answer. Think much more briefly (or not at all) and give the "
    "answer directly."
)


def _problems(outcome: str, issues: Sequence[Issue], error: str | None, raw: str) -> list[str]:
    if outcome == "thinking_truncated":
        return [THINKING_RAN_OUT]
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
    if isinstance(failure, ThinkingTruncatedError):
        outcome = "thinking_truncated"
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


# -- text under a grammar (JsonMode.text) ------------------------------------------------

_TEXT_RULES = (
    "Output only that text: no explanation before or after it, no quotes around it, "
    "no markdown code fences."
)


def grammar_instructions(grammar: CompiledGrammar) -> str:
    """The output contract for a text under ``grammar``, as the system message states it:
    the GBNF text (and the JSON Schema of each rule bound to one), the regular
    expression, the choices (each as a JSON string), or a built-in's description."""
    if grammar.kind == "regex":
        what = (
            "Reply with text that matches this regular expression as a whole "
            f"(ECMA-262 syntax):\n{grammar.source}"
        )
    elif grammar.kind == "choice":
        choices = "\n".join(
            f"- {json.dumps(choice, ensure_ascii=False)}" for choice in _choices(grammar)
        )
        what = (
            "Reply with exactly one of these texts, written as it is, without the quotes "
            f"shown here:\n{choices}"
        )
    elif grammar.kind == "gbnf":
        what = (
            "Reply with text that matches the grammar below: GBNF as llama.cpp defines it, "
            f"where the rule `root` is the whole reply.\nGrammar:\n{grammar.source}"
        )
    else:  # a built-in (JSON Lines, CSV): its source describes it, schema included
        what = f"Reply with text in this format:\n{grammar.source}"
    bound = [
        f"The rule `{name}` is one JSON document that conforms to this JSON Schema:\n"
        f"{spec.prompt_form}"
        for name, spec in (grammar.schemas.items() if grammar.kind == "gbnf" else ())
    ]
    return "\n\n".join([f"{what}\n{_TEXT_RULES}", *bound])


def _choices(grammar: CompiledGrammar) -> list[str]:
    return [str(choice) for choice in json.loads(grammar.source)]


def first_text_messages(
    grammar: CompiledGrammar,
    messages: tuple[Message, ...],
    examples: Sequence[tuple[str, str]] = (),
) -> tuple[Message, ...]:
    """:func:`first_messages` for a text under ``grammar``: its contract, few-shot
    (prompt, text) turns (already checked against the grammar), the conversation."""
    return _with_contract(grammar_instructions(grammar), messages, examples)


def _text_feedback(attempt: Attempt, max_attempts: int, noun: str) -> str:
    lines = [f"Attempt {attempt.index} of {max_attempts} did not match {noun}."]
    if len(attempt.raw) > MAX_REASK_OUTPUT_CHARS:
        lines.append(
            f"(Your reply was {len(attempt.raw):,} characters long; only its first and last "
            "characters are repeated above.)"
        )
    if attempt.outcome == "thinking_truncated":
        lines.append(THINKING_RAN_OUT)
    elif attempt.outcome == "truncated":
        lines.append(
            "Your reply was cut off at the length limit before the text was complete. "
            "Reply with a complete, shorter text."
        )
    else:
        why = clip(
            attempt.issues[0].message if attempt.issues else str(attempt.error),
            MAX_REASK_MESSAGE_CHARS,
        )
        lines.append(f"{why[:1].upper()}{why[1:]}.")
        if attempt.raw[:64].lstrip().startswith("```"):
            lines.append("Do not wrap the text in markdown code fences.")
    lines.append("Reply again with only the corrected text.")
    return "\n".join(lines)


def reask_text_messages(
    first: tuple[Message, ...], failed: Attempt, max_attempts: int, noun: str = "the grammar"
) -> tuple[Message, ...]:
    """:func:`reask_messages` for a text: the failed output (bounded alike) and where it
    stopped matching ``noun`` (``"the grammar"``, ``"the regular expression"`` ...):
    the byte offset, the text just before it, and what was expected there."""
    return (
        *first,
        {"role": "assistant", "content": _encodable(_clip_output(failed.raw))},
        {"role": "user", "content": _text_feedback(failed, max_attempts, noun)},
    )
