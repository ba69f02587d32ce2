"""``@jsonmode.structured``: the return annotation is the schema, the docstring the prompt.

Run: python examples/structured_decorator.py

Calling the function sends its docstring, formatted with the call's arguments, and
returns a validated value of the annotated type: here a ``Meeting``, a
``list[Action]`` and, from an ``async def``, a ``Literal``. A body that returns a
string supplies the prompt itself. Errors are the façade's (``AttemptsExhaustedError``
with every attempt).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Literal

from _offline import backend
from pydantic import BaseModel, Field

import jsonmode

MODEL = backend(
    [
        # Fenced, with a trailing comma: repair mode fixes both (and says so).
        '```json\n{"title": "Roadmap review", "starts": "14:00", "ends": "15:30",'
        ' "attendees": ["Ada", "Grace", "Linus",]}\n```',
        '[{"owner": "Grace", "task": "Draft the Q3 plan"},'
        ' {"owner": "Ada", "task": "Book a room"}]',
        '"positive"',
    ],
    "Typed functions whose body is a prompt.",
)

NOTES = (
    "Roadmap review 14:00-15:30 with Ada, Grace and Linus. "
    "Grace drafts the Q3 plan; Ada books a room."
)


class Meeting(BaseModel):
    title: str
    starts: str = Field(pattern=r"^[0-2]\d:[0-5]\d$", description="HH:MM")
    ends: str = Field(pattern=r"^[0-2]\d:[0-5]\d$", description="HH:MM")
    attendees: list[str]


class Action(BaseModel):
    owner: str
    task: str


@jsonmode.structured(backend=MODEL, mode="repair")
def meeting(notes: str) -> Meeting:
    """Extract the meeting from these notes: {notes}"""


@jsonmode.structured(backend=MODEL, mode="repair")
def actions(notes: str, limit: int = 5) -> list[Action]:
    """List at most {limit} action items, one owner each, from: {notes}"""


@jsonmode.structured(backend=MODEL, mode="strict")
async def mood(notes: str) -> Literal["positive", "neutral", "negative"]:
    return f"What is the overall tone of these notes? {notes}"


def main() -> None:
    found = meeting(NOTES)
    print(f"{found.title}: {found.starts}-{found.ends}, {', '.join(found.attendees)}")
    for action in actions(NOTES):
        print(f"  {action.owner}: {action.task}")
    print(f"tone: {asyncio.run(mood(NOTES))}")
    print(f"still a function: {meeting.__name__}{inspect.signature(meeting, eval_str=True)}")


if __name__ == "__main__":
    main()
