"""jsonmode.Reasoning: the record every tier reads (issue 41's contract)."""

from __future__ import annotations

import pickle

import pytest

import jsonmode
from jsonmode.reasoning import FAMILIES, MAX_MARKER_CHARS, Reasoning


def test_the_contract_spelling() -> None:
    marks = jsonmode.Reasoning("</think>", start="<think>", max_tokens=64)
    assert (marks.end, marks.start, marks.max_tokens) == ("</think>", "<think>", 64)
    assert jsonmode.Reasoning(end="</think>") == Reasoning("</think>", None, None)
    assert pickle.loads(pickle.dumps(marks)) == marks
    assert hash(marks) == hash(Reasoning("</think>", "<think>", 64))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"end": ""},
        {"end": 3},
        {"end": "x" * (MAX_MARKER_CHARS + 1)},
        {"end": "</think>", "start": ""},
        {"end": "</think>", "start": "</think>"},
        {"end": "</think>", "max_tokens": -1},
        {"end": "</think>", "max_tokens": True},
        {"end": "</think>", "max_tokens": 2.0},
    ],
)
def test_bad_markers_are_usage_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(jsonmode.UsageError):
        Reasoning(**kwargs)  # type: ignore[arg-type]


def test_the_known_families_close_what_they_open() -> None:
    assert FAMILIES["think"] == Reasoning("</think>", "<think>")
    assert all(
        marks.start and marks.end and marks.max_tokens is None for marks in FAMILIES.values()
    )
