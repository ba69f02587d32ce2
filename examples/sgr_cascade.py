"""Schema-guided reasoning, cascade: the field order is the reasoning order.

Run: python examples/sgr_cascade.py

A model writes JSON front to back, so each field can only build on the fields
before it. Put the observations first and the verdict last, and the schema walks
the model through the analysis: restate → quote the evidence → judge the impact →
only then pick a severity and a next step. jsonmode keeps the properties in the
order the model declares them (in the prompt and in the constrained decoder), so
the cascade survives.
"""

from __future__ import annotations

import json
from typing import Literal

from _offline import backend, show_attempts
from pydantic import BaseModel, Field

import jsonmode


class Triage(BaseModel):
    """A support ticket, triaged step by step (in this order)."""

    summary: str = Field(description="Step 1: the problem in one sentence, no judgement yet.")
    evidence: list[str] = Field(
        min_length=1, max_length=3, description="Step 2: quotes from the ticket that matter."
    )
    affected_users: Literal["one", "some", "all"] = Field(description="Step 3: who is hit.")
    workaround_exists: bool = Field(description="Step 4: can they carry on meanwhile?")
    severity: Literal["low", "medium", "high", "critical"] = Field(
        description="Step 5: decided from steps 2-4 only."
    )
    next_step: str = Field(description="Step 6: what support does now.")


TICKET = """\
Subject: checkout broken??
Since this morning none of our customers can pay by card, the page just spins.
PayPal still works. We are losing sales every minute!
"""

REPLY = json.dumps(
    {
        "summary": "Card payments hang at checkout since this morning; PayPal works.",
        "evidence": [
            "none of our customers can pay by card",
            "the page just spins",
            "PayPal still works",
        ],
        "affected_users": "all",
        "workaround_exists": True,
        "severity": "high",
        "next_step": "Page the payments on-call and post a status-page notice.",
    }
)


def main() -> None:
    model = backend([REPLY], "Triage a support ticket with a reasoning cascade.")
    jm = jsonmode.JsonMode(model, mode="strict")

    sent = json.loads(jsonmode.Schema.of(Triage).prompt_form)  # the schema the model sees
    order = list(sent["properties"])
    print("reasoning order (the property order the model sees):", " → ".join(order))

    result = jm.run(f"Triage this ticket:\n{TICKET}", Triage)

    triage: Triage = result.value
    print("the model filled the fields in that order:", " → ".join(json.loads(result.raw)))
    for name in order:
        print(f"  {name}: {getattr(triage, name)}")
    show_attempts(result.attempts)


if __name__ == "__main__":
    main()
