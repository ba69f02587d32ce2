"""Schema-guided reasoning, cycle: a bounded list repeats one reasoning step.

Run: python examples/sgr_cycle.py

A list of the same small model is a loop the model runs inside one answer: here,
one hypothesis per step (what could cause the symptom, how to check it, what the
check showed). ``min_length`` makes it think at least twice; ``max_length`` stops a
runaway list. The conclusion comes after the loop, so it can only rest on it.

The scripted model first rambles through six hypotheses; strict mode rejects the
answer (the list allows at most four) and re-asks with that error.
"""

from __future__ import annotations

import json

from _offline import backend, show_attempts
from pydantic import BaseModel, Field

import jsonmode


class Hypothesis(BaseModel):
    cause: str
    check: str
    outcome: str


class Diagnosis(BaseModel):
    symptom: str
    hypotheses: list[Hypothesis] = Field(min_length=2, max_length=4)
    conclusion: str
    confidence: float = Field(ge=0, le=1)


def step(cause: str, check: str, outcome: str) -> dict[str, str]:
    return {"cause": cause, "check": check, "outcome": outcome}


STEPS = [
    step("disk full", "df -h on the database host", "41% used: ruled out"),
    step("slow query", "pg_stat_statements top 5", "one query at 8 s since 09:40"),
    step("missing index", "EXPLAIN that query", "sequential scan on orders.customer_id"),
    step("index dropped by migration", "migration 0142 diff", "DROP INDEX orders_customer_idx"),
    step("cache cold", "hit ratio", "99%: ruled out"),
    step("network", "ping between hosts", "0.2 ms: ruled out"),
]


def answer(steps: list[dict[str, str]]) -> str:
    return json.dumps(
        {
            "symptom": "checkout API p95 latency went from 300 ms to 9 s at 09:40",
            "hypotheses": steps,
            "conclusion": "migration 0142 dropped orders_customer_idx; recreate it",
            "confidence": 0.9,
        }
    )


def main() -> None:
    model = backend([answer(STEPS), answer(STEPS[:4])], "Diagnose with a bounded loop.")
    jm = jsonmode.JsonMode(model, mode="strict")

    result = jm.run("Checkout p95 latency jumped from 300 ms to 9 s at 09:40. Why?", Diagnosis)

    diagnosis: Diagnosis = result.value
    print(f"symptom: {diagnosis.symptom}")
    for number, hypothesis in enumerate(diagnosis.hypotheses, 1):
        print(f"  {number}. {hypothesis.cause}: {hypothesis.check} -> {hypothesis.outcome}")
    print(f"conclusion ({diagnosis.confidence:.0%}): {diagnosis.conclusion}")
    show_attempts(result.attempts)


if __name__ == "__main__":
    main()
