"""Partial values of a streamed JSON document: never more than the finished document holds."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonmode.repair.partial import MAX_PARTIAL_CHARS, complete_items, parse_partial

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


# -- growing_strings=False ---------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ('"Ad', None),  # a lone string still open: nothing yet
        ('"Ada"', "Ada"),
        ('{"name": "Ad', {}),  # the member waits for its closing quote
        ('{"name": "Ada"', {"name": "Ada"}),
        ('{"name": "Ada", "tags": ["x", "y', {"name": "Ada", "tags": ["x"]}),
        ('{"a": {"b": "c', {"a": {}}),
        ('["a\\u00', []),
        ('{"n": 1, "s": "', {"n": 1}),
    ],
)
def test_closed_strings_only(prefix, expected):
    assert parse_partial(prefix, growing_strings=False) == expected


@settings(max_examples=30, deadline=None)
@given(documents)
def test_closed_strings_only_never_shows_a_string_the_final_value_does_not_hold(value):
    text = json.dumps(value)
    for cut in range(len(text)):
        partial = parse_partial(text[:cut], growing_strings=False)
        if partial is not None:
            assert contained_exactly(partial, value), (text[:cut], partial)
    assert parse_partial(text, growing_strings=False) == value


def contained_exactly(partial: Any, final: Any) -> bool:
    """As :func:`contained`, but every string already whole."""
    if isinstance(final, dict):
        return isinstance(partial, dict) and all(
            key in final and contained_exactly(value, final[key]) for key, value in partial.items()
        )
    if isinstance(final, list):
        return (
            isinstance(partial, list)
            and len(partial) <= len(final)
            and all(contained_exactly(p, f) for p, f in zip(partial, final, strict=False))
        )
    return type(partial) is type(final) and partial == final


# -- complete_items ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("[", ([], False)),
        ("[]", ([], True)),
        ("[ ]", ([], True)),
        ("[1", ([], False)),  # 1 may still become 12
        ("[1,", ([1], False)),
        ("[1 ", ([1], False)),  # a space ends the number
        ("[1]", ([1], True)),
        ("[1, 2]", ([1, 2], True)),
        ("[-", ([], False)),
        ("[1.5e3,", ([1500.0], False)),
        ("[tru", ([], False)),
        ("[true", ([True], False)),
        ("[null, false]", ([None, False], True)),
        ('["ab', ([], False)),  # a string only once closed
        ('["ab"', (["ab"], False)),
        ('["a\\"b", "c', (['a"b'], False)),
        ('[{"n": 1', ([], False)),  # an object only once closed
        ('[{"n": 1}', ([{"n": 1}], False)),
        ('[{"n": [1, 2]}, {"n": [3', ([{"n": [1, 2]}], False)),
        ("[[1], [2, [3]], [", ([[1], [2, [3]]], False)),
        ('Sure! Here it is:\n```json\n[{"a": 1}, {"a"', ([{"a": 1}], False)),
        ('[{"a": 1}] and some prose after', ([{"a": 1}], True)),
    ],
)
def test_complete_items(prefix, expected):
    assert complete_items(prefix) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "no document here",
        '{"a": [1, 2]}',  # an object, not an array
        '"[1, 2]"',  # a string
        "42",
        "[1 2]",  # cannot be JSON
        "[1,,",
        "[01,",
        '[{"a" 1}',
        "[1e400,",  # beyond the double range: can never be read
        "[" + "1," * MAX_PARTIAL_CHARS,  # too long
    ],
)
def test_complete_items_of_what_is_not_an_array_is_none(text):
    assert complete_items(text) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(json_values, max_size=5), st.booleans())
def test_complete_items_are_a_prefix_of_the_final_items_and_grow(items, indent):
    text = json.dumps(items, indent=2 if indent else None)
    previous: list[Any] = []
    for cut in range(len(text)):
        found = complete_items(text[:cut])
        if found is None:
            continue
        got, closed = found
        assert not closed
        assert got == items[: len(got)], (text[:cut], got)
        assert got[: len(previous)] == previous
        previous = got
    assert complete_items(text) == (items, True)
