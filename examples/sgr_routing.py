"""Schema-guided reasoning, routing: a discriminated union picks exactly one branch.

Run: python examples/sgr_routing.py

Each incoming message is a refund request, a bug report or a question. The schema
is a union of three models told apart by ``kind``; whichever branch the model picks,
the rest of its answer must fit *that* branch (a refund needs an order id of the
right shape, a bug report needs a component from a fixed list). Your code then
dispatches on the type it gets back, with no string parsing.

The scripted model's first answer to the first message picks the refund branch but
writes the order id wrongly; strict mode re-asks with the error and gets it right.
"""

from __future__ import annotations

from typing import Annotated, Literal

from _offline import backend, is_reask, last_user_text, show_attempts
from pydantic import BaseModel, Field

import jsonmode
from jsonmode import Request


class Refund(BaseModel):
    kind: Literal["refund"]
    order_id: str = Field(pattern=r"^A\d{4}$", description="like A1234")
    reason: str


class BugReport(BaseModel):
    kind: Literal["bug"]
    component: Literal["checkout", "search", "account"]
    steps_to_reproduce: list[str] = Field(min_length=1)


class Question(BaseModel):
    kind: Literal["question"]
    topic: str


class Routed(BaseModel):
    request: Annotated[Refund | BugReport | Question, Field(discriminator="kind")]


MESSAGES = [
    "I want my money back for order a-1234, the kettle arrived broken.",
    "Search returns nothing when I type an umlaut, e.g. 'Müller'. Tried twice.",
    "Do you ship to Iceland?",
]


def scripted(request: Request) -> str:
    if is_reask(request):
        return '{"request": {"kind": "refund", "order_id": "A1234", "reason": "arrived broken"}}'
    text = last_user_text(request)
    if "money back" in text:
        return '{"request": {"kind": "refund", "order_id": "a-1234", "reason": "arrived broken"}}'
    if "Search" in text:
        return (
            '{"request": {"kind": "bug", "component": "search", "steps_to_reproduce": '
            '["type Müller into search", "see no results"]}}'
        )
    return '{"request": {"kind": "question", "topic": "shipping to Iceland"}}'


def handle(request: Refund | BugReport | Question) -> str:
    match request:
        case Refund(order_id=order_id, reason=reason):
            return f"refund queue: order {order_id} ({reason})"
        case BugReport(component=component, steps_to_reproduce=steps):
            return f"bug tracker: {component}, {len(steps)} step(s) to reproduce"
        case Question(topic=topic):
            return f"FAQ search: {topic}"


def main() -> None:
    model = backend([scripted] * 4, "Route support messages with a discriminated union.")
    jm = jsonmode.JsonMode(model, mode="strict")
    for message in MESSAGES:
        result = jm.run(f"Route this customer message:\n{message}", Routed)
        print(f"{message}\n  -> {handle(result.value.request)}")
        if len(result.attempts) > 1:
            show_attempts(result.attempts)


if __name__ == "__main__":
    main()
