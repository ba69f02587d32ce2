"""Partial values of a streamed JSON document: never more than the finished document holds."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonmode.repair.partial import MAX_PARTIAL_CHARS, parse_partial

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
documents = st.one_of(
    st.lists(json_values, max_size=4), st.dictionaries(st.text(max_size=6), json_values)
)


def contained(partial: Any, final: Any) -> bool:
    """``partial`` holds nothing that ``final`` does not (strings may be prefixes)."""
    if isinstance(final, dict):
        return isinstance(partial, dict) and all(
            key in final and contained(value, final[key]) for key, value in partial.items()
        )
    if isinstance(final, list):
        return (
            isinstance(partial, list)
            and len(partial) <= len(final)
            and all(contained(p, f) for p, f in zip(partial, final, strict=False))
        )
    if isinstance(final, str):
        return isinstance(partial, str) and final.startswith(partial)
    return type(partial) is type(final) and partial == final


@settings(max_examples=80, deadline=None)
@given(documents, st.booleans(), st.booleans())
def test_every_prefix_is_contained_in_the_final_value_and_partials_only_grow(
    value, ascii_only, indent
):
    text = json.dumps(value, ensure_ascii=ascii_only, indent=2 if indent else None)
    previous = None
    for cut in range(len(text)):
        partial = parse_partial(text[:cut])
        if partial is None:
            continue
        assert contained(partial, value), (text[:cut], partial)
        if previous is not None:
            assert contained(previous, partial), (text[:cut], previous, partial)
        previous = partial
    assert parse_partial(text) == value


@given(st.text(max_size=40))
def test_never_raises(text):
    parse_partial(text)


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("", None),
        ("{", {}),
        ('{"na', {}),  # a key shows only once it is complete
        ('{"name"', {}),
        ('{"name": ', {}),
        ('{"name": "Ad', {"name": "Ad"}),
        ('{"name": "Ada", "age": 3', {"name": "Ada"}),  # 3 may become 36
        ('{"name": "Ada", "age": 36', {"name": "Ada"}),
        ('{"name": "Ada", "age": 36,', {"name": "Ada", "age": 36}),
        ('{"age": -', {}),
        ('{"age": 1.', {}),
        ('{"age": 1.5e', {}),
        ('{"age": 1.5e+3}', {"age": 1500.0}),
        ('{"ok": tr', {}),
        ('{"ok": true', {"ok": True}),
        ("[1, 2", [1]),
        ("[1, 2,", [1, 2]),
        ("[[1], [", [[1], []]),
        ('"a\\', "a"),  # a cut escape waits for the rest
        ('"a\\u00e', "a"),
        ('"a\\u00e9', "aé"),
        ('"\\ud83d', ""),  # half a surrogate pair waits for the other half
        ('"\\ud83d\\ude00', "😀"),
        ('Sure! ```json\n{"a": [1, ', {"a": [1]}),
        ('{"a": 1} and then some prose', {"a": 1}),
        ("42", None),  # a lone number may still grow
    ],
)
def test_examples(prefix, expected):
    assert parse_partial(prefix) == expected


@pytest.mark.parametrize(
    "text",
    ['{"a" 1', "{'a': 1}", "[1,]", '"bad \\x escape', '{"a": nope}', "[01]"],
)
def test_text_that_cannot_start_a_json_document_gives_nothing(text):
    assert parse_partial(text) is None


def test_long_texts_give_no_partials():
    text = '{"a": "' + "x" * MAX_PARTIAL_CHARS
    assert parse_partial(text) is None


def test_deep_nesting_gives_nothing_rather_than_crashing():
    assert parse_partial("[" * 100_000) is None
