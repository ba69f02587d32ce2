"""What the examples share: a stand-in model, so that each runs offline.

Every example runs as is against a *scripted* model: canned replies that carry the
slips real models make, so you see what jsonmode does with them. Pass a litellm
model string to use a real one instead, e.g.

    python examples/extraction.py --model openai/gpt-4o-mini     # needs OPENAI_API_KEY
    python examples/extraction.py --model ollama/llama3.1
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from jsonmode import Attempt, Completion, Request
from jsonmode.backends import ScriptedBackend

Reply = str | Callable[[Request], str | Completion]


def backend(replies: Sequence[Reply], description: str) -> object:
    """``--model NAME`` when given, else a scripted model that replays ``replies``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", help="a litellm model string; default: a scripted model")
    model: str | None = parser.parse_args().model
    if model:
        print(f"(model: {model})")
        return model
    print("(offline: a scripted model replies; --model NAME uses a real one)")
    return ScriptedBackend(replies)


def is_reask(request: Request) -> bool:
    """Whether jsonmode is re-asking: the request carries an earlier reply."""
    return any(message.get("role") == "assistant" for message in request.messages)


def last_user_text(request: Request) -> str:
    return str(request.messages[-1]["content"])


def show_attempts(attempts: Sequence[Attempt]) -> None:
    for attempt in attempts:
        line = f"  attempt {attempt.index}: {attempt.outcome}"
        if attempt.repairs:
            line += " (repairs: " + ", ".join(repair.kind for repair in attempt.repairs) + ")"
        print(line)
        for issue in attempt.issues:
            text = str(issue)
            print(f"    - {text if len(text) <= 110 else text[:107] + '...'}")
