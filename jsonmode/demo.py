"""``jsonmode demo``: the main job, offline, on an embedded default.

Until the constrained decoder lands, the demo runs the prompted tier against a
built-in *scripted* backend — no model, no network — whose replies carry the slips
real models make (prose, fences, trailing commas, wrong types, a cut-off reply).
The point is what jsonmode does with them: repair mode repairs and records, strict
mode re-asks with every error until the output conforms.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from pydantic import BaseModel, Field

from jsonmode._json import dumps
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.scripted import ScriptedBackend
from jsonmode.facade import JsonMode
from jsonmode.result import Result

__all__ = ["run_demo"]


class Person(BaseModel):
    """A person mentioned in a text."""

    name: str
    age: int = Field(ge=0)
    email: str | None = None
    languages: list[str]


_TEXT = "Ada Lovelace, 36, writes to ada@example.org and reads English and French."
_SLOPPY = (
    "Sure! Here is the JSON you asked for:\n```json\n"
    "{'name': 'Ada Lovelace', 'age': '36', 'email': 'ada@example.org', "
    "'languages': ['English', 'French',],}\n```\nLet me know if you need anything else."
)
_CUT_OFF = '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "languages": ["Eng'
_CLEAN = (
    '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", '
    '"languages": ["English", "French"]}'
)


def _scripted_model(first_reply: str | Completion) -> ScriptedBackend:
    """A scripted 'model': the first reply has slips; a re-ask gets the clean answer."""

    def reply(request: Request) -> str | Completion:
        is_reask = any(m.get("role") == "assistant" for m in request.messages)
        return _CLEAN if is_reask else first_reply

    return ScriptedBackend([reply] * 3)


def _show(title: str, result: Result[Any], verbose: bool, out: TextIO) -> None:
    out.write(f"\n== {title}\n")
    for attempt in result.attempts:
        if verbose:
            out.write(attempt.describe() + "\n")
            continue
        line = f"   attempt {attempt.index}: {attempt.outcome}"
        if attempt.error:
            line += f" — {attempt.error}"
        if attempt.repairs:
            line += " — repairs: " + ", ".join(r.kind for r in attempt.repairs)
        out.write(line + "\n")
    out.write(f"   value ({type(result.value).__name__}): {dumps(result.data)}\n")


def run_demo(*, verbose: bool = False, out: TextIO | None = None) -> int:
    """Run the scenarios and print what happened; returns 0 when every one conformed."""
    stream = out or sys.stdout
    stream.write(
        "jsonmode demo — prompted tier against a built-in SCRIPTED backend\n"
        "(no model and no network: its replies are canned, with the slips real models make)\n"
        f"prompt: Extract the person from: {_TEXT!r}\n"
    )
    scenarios: Sequence[tuple[str, str | Completion, str]] = (
        ("repair mode: prose + fence + single quotes + trailing commas + '36'", _SLOPPY, "repair"),
        ("strict mode: the same reply is rejected, the re-ask fixes it", _SLOPPY, "strict"),
        (
            "repair mode: a reply cut off at the length limit is never patched up",
            Completion(_CUT_OFF, truncated=True),
            "repair",
        ),
    )
    for title, first_reply, mode in scenarios:
        jm = JsonMode(_scripted_model(first_reply), mode=mode)  # type: ignore[arg-type]
        result = jm.run(f"Extract the person from: {_TEXT}", Person)
        _show(title, result, verbose, stream)
    stream.write("\nEvery value above conforms to the Person schema.\n")
    return 0
