"""Every example runs offline, as the README says, and prints what it promises.

The CrewAI example needs crewai's own environment: tests/with_crewai runs it there.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
from support.openai_server import OpenAIServer, Reply

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

EXPECTED = {
    "extraction.py": [
        "order CH-20931 for Grace, delivery 2025-03-14",
        "2 x Tea tin (Darjeeling) at 12.50 CHF",
        "total 74.00 CHF",
        "attempt 1: valid (repairs: extract, syntax, string_to_integer, string_to_number)",
    ],
    "sgr_cascade.py": [
        "reasoning order (the property order the model sees): summary → evidence → "
        "affected_users → workaround_exists → severity → next_step",
        "severity: high",
    ],
    "sgr_routing.py": [
        "-> refund queue: order A1234 (arrived broken)",
        "$.request.order_id (pattern): (in oneOf branch 0) 'a-1234' does not match",
        "-> bug tracker: search, 2 step(s) to reproduce",
        "-> FAQ search: shipping to Iceland",
    ],
    "sgr_cycle.py": [
        "4. index dropped by migration",
        "attempt 1: schema_violation",
        "$.hypotheses (maxItems)",
        "attempt 2: valid",
    ],
    "rag_citations.py": [
        "retrieved: kb-102, kb-101, kb-205",
        "$.citations[1] (enum): 'kb-099' is not one of ['kb-102', 'kb-101', 'kb-205']",
        "[kb-101] Refunds are issued within 14 days",
        "attempt 2: valid",
    ],
    "structured_decorator.py": [
        "Roadmap review: 14:00-15:30, Ada, Grace, Linus",
        "Grace: Draft the Q3 plan",
        "tone: positive",
        "still a function: meeting(notes: str) -> __main__.Meeting",
    ],
    "langchain_chain.py": [
        "Movie(title='Spirited Away', year=2001, genres=['animation'])",
        "| - $.genres (minItems): [] should be non-empty",
        "partial   {'title': 'Spirited Away', 'year': 2001}",
        "validated Movie(title='Spirited Away', year=2001, genres=['animation', 'fantasy'])",
    ],
}
ELSEWHERE = {"crewai_guardrail.py"}  # run by tests/with_crewai in crewai's environment


def run_example(
    name: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = env or {**os.environ, "PYTHONWARNINGS": "error"}
    env = {**env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )


def test_every_example_is_tested():
    scripts = {path.name for path in EXAMPLES.glob("*.py") if not path.name.startswith("_")}
    assert scripts == set(EXPECTED) | ELSEWHERE


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_offline_and_prints_its_result(name: str) -> None:
    done = run_example(name)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert (
        done.stdout.startswith("(offline: a scripted model replies") or name == "langchain_chain.py"
    )
    for line in EXPECTED[name]:
        assert line in done.stdout, f"{line!r} missing from:\n{done.stdout}"


@pytest.mark.integration
def test_examples_take_a_real_model_by_name(openai_server: Callable[..., OpenAIServer]) -> None:
    """``--model`` goes to litellm: here a local OpenAI-compatible server stands in."""
    order = {
        "order_id": "CH-20931",
        "customer": "Grace",
        "delivery_date": "2025-03-14",
        "currency": "CHF",
        "items": [{"product": "Tea tin", "quantity": 2, "unit_price": 12.5}],
    }
    server = openai_server(Reply(json.dumps(order)))
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-local"}

    done = run_example("extraction.py", "--model", "openai/local-model", env=env)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("(model: openai/local-model)")
    assert "2 x Tea tin at 12.50 CHF" in done.stdout
    assert server.request_count == 1
    assert "CH-20931" in server.requests[0]["messages"][-1]["content"]


def test_readme_gives_the_command_for_every_example():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = set(re.findall(r"python examples/(\w+\.py)", readme))
    assert commands == set(EXPECTED) | ELSEWHERE
