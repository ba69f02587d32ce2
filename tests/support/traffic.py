"""One deterministic cycle of façade requests for the metrics integration tests."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from jsonmode import AttemptsExhaustedError, JsonMode
from jsonmode.backends import ScriptedBackend

GOOD = '{"name": "Ada", "age": 36}'
FENCED = 'Sure!\n```json\n{"name": "Ada", "age": 36}\n```'
MISSING = '{"name": "Ada"}'


class Person(BaseModel):
    name: str
    age: int


def one_cycle() -> None:
    """Four requests: first_try, repaired, retried, failed (6 attempts)."""
    JsonMode(ScriptedBackend([GOOD]), "strict", schema_name="person").run("x", Person)
    JsonMode(ScriptedBackend([FENCED]), "repair", schema_name="person").run("x", Person)
    JsonMode(ScriptedBackend([MISSING, GOOD]), "strict", schema_name="person").run("x", Person)
    with pytest.raises(AttemptsExhaustedError):
        JsonMode(ScriptedBackend(["prose", MISSING]), "strict", max_attempts=2).run("x", Person)
