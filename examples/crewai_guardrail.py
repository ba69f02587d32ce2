"""CrewAI: a task guardrail that only lets schema-conforming output through.

Run (crewai pins its own pydantic, so give it its own environment):

    python -m venv .venv-crewai && .venv-crewai/bin/pip install -e ".[crewai]"
    .venv-crewai/bin/python examples/crewai_guardrail.py

``schema_guardrail(Lead, mode="repair")`` validates (and repairs) the task's output.
When it fails, CrewAI hands the agent the guardrail's message (every error and the
schema) and runs the task again. The agent's LLM is ``JsonModeLLM``, a CrewAI LLM that
routes through jsonmode, here around a scripted model so the example runs offline:
its first answer misses a required field, its second is fenced with a string for a
number, which repair mode fixes and records.
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
warnings.filterwarnings("ignore", category=ImportWarning)  # crewai's own import internals

from crewai import Agent, Crew, Task  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from jsonmode.adapters.crewai import JsonModeLLM, schema_guardrail  # noqa: E402
from jsonmode.backends import ScriptedBackend  # noqa: E402


class Lead(BaseModel):
    company: str
    contact: str
    seats: int = Field(ge=1)
    next_step: str


EMAIL = "Hi, this is Joan Clarke from Bletchley Analytics. We'd like 25 seats; can we talk Friday?"


def main() -> None:
    model = ScriptedBackend(
        [
            '{"company": "Bletchley Analytics", "contact": "Joan Clarke", "seats": 25}',
            "Thought: I now know the final answer\nFinal Answer: ```json\n"
            '{"company": "Bletchley Analytics", "contact": "Joan Clarke", "seats": "25", '
            '"next_step": "call on Friday"}\n```',
        ]
    )
    agent = Agent(
        role="Sales assistant",
        goal="Turn inbound e-mails into qualified leads",
        backstory="You read e-mails carefully and answer in JSON.",
        llm=JsonModeLLM(model),
    )
    task = Task(
        description=f"Extract the lead from this e-mail as JSON: {EMAIL}",
        expected_output="a JSON object with company, contact, seats and next_step",
        agent=agent,
        guardrail=schema_guardrail(Lead, mode="repair"),
        guardrail_max_retries=2,
    )
    output = Crew(agents=[agent], tasks=[task]).kickoff()

    print(f"lead: {output.pydantic!r}")
    print(f"raw:  {output.raw}")
    print(f"model calls: {len(model.requests)} (the guardrail sent the first answer back)")
    retry_prompt = str(model.requests[1].messages[-1]["content"])
    feedback = [line for line in retry_prompt.splitlines() if line.startswith("- ")]
    print(f"what the agent was told: {feedback}")


if __name__ == "__main__":
    main()
