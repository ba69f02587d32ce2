"""Property: no input hangs jsonmode, crashes it, or makes it reach outside.

Hypothesis draws hostile shapes — deep nesting, huge numbers, long runs of brackets
and quotes, Python literals, lone surrogates, cyclic and foreign references, patterns
that make a backtracking engine explode — and checks, for every case:

* ``parse`` in both modes returns a value or raises a :class:`JsonModeError`;
* ``compile_schema`` returns a compiled schema or raises a :class:`JsonModeError`;
* each call ends within a time bound;
* nothing opens a connection or a URL (``file:`` included): a guard records every
  attempt and the test fails if there was one.

Anything else (``ValueError``, ``RecursionError``, ``OverflowError`` ...) fails the test.
"""

from __future__ import annotations

import json
import math
import socket
import time
import urllib.request
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonmode import JsonModeError, compile_schema, parse

# Wall-clock budgets: under pytest-xdist these run while no other test runs.
pytestmark = pytest.mark.alone

# Generous for a loaded 2-core machine; the bounded stages aim at well under a second.
PARSE_BOUND_S = 3.0
COMPILE_BOUND_S = 6.0
HOSTILE_SETTINGS = settings(
    max_examples=60,
    deadline=None,  # the bound is asserted below, with a clear message
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,  # the guard is cleared and checked per call
    ],
    derandomize=True,
)


_REACHED_OUT: list[str] = []


@pytest.fixture(autouse=True)
def no_outside(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Record (and refuse) every connection or URL opening; the test fails if any happened.

    Recorded rather than raised as an assertion: a library may catch what a retrieval
    raises and turn it into its own error, which would hide the attempt.
    """

    def refuse(*args: Any, **kwargs: Any) -> Any:
        _REACHED_OUT.append(repr(args)[:200])
        raise OSError("the test forbids reaching outside")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(urllib.request.OpenerDirector, "open", refuse)
    _REACHED_OUT.clear()
    yield
    assert not _REACHED_OUT, f"jsonmode reached outside: {_REACHED_OUT[:3]}"


# -- hostile text ---------------------------------------------------------------------

_RUN_PIECES = ["{", "}", "[", "]", '"', "'", ",", ":", "\\", "{]", '{"a":', "[{", "```", "...", "…"]


def _runs() -> st.SearchStrategy[str]:
    piece = st.sampled_from(_RUN_PIECES)
    return st.builds(lambda p, n: p * n, piece, st.integers(1, 60_000))


def _numbers() -> st.SearchStrategy[str]:
    digits = st.integers(1, 20_000).map(lambda n: "9" * n)
    exponent = st.integers(300, 100_000).map(lambda e: f"1e{e}")
    return st.one_of(
        digits,
        exponent,
        exponent.map(lambda t: "-" + t),
        st.builds(lambda d: f'{{"n": {d}}}', digits),
        st.builds(lambda e: f'{{"n": {e}}}', exponent),
        st.builds(lambda e: f"Here: ```json\n[{e}]\n```", exponent),
    )


def _python_style() -> st.SearchStrategy[str]:
    literal = st.sampled_from(["None", "True", "False", "...", "…", "NaN", "Infinity", "undefined"])
    return st.builds(lambda a, b: f"{{'a': {a}, 'b': [1, {b}]}}", literal, literal)


def _surrogates() -> st.SearchStrategy[str]:
    escape = st.sampled_from(["\\ud800", "\\udfff", "\\ud83d", "\\ud83d\\ude00", "\ud800"])
    return st.builds(
        lambda e, k: json.dumps({"a": "x"}).replace("x", e) if k else f'["{e}"]',
        escape,
        st.booleans(),
    )


def _nested() -> st.SearchStrategy[str]:
    return st.builds(
        lambda o, c, n, tail: o * n + tail + c * (n // 2),
        st.sampled_from(["[", '{"a":', '[{"b":']),
        st.sampled_from(["]", "}", "}]"]),
        st.integers(100, 50_000),
        st.sampled_from(["1", "null", '"s"', ""]),
    )


def _jsonish() -> st.SearchStrategy[str]:
    leaf = st.one_of(
        st.integers(), st.floats(allow_nan=False), st.text(max_size=20), st.none(), st.booleans()
    )
    values = st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5)
        ),
        max_leaves=30,
    )
    return values.map(json.dumps)


HOSTILE_TEXT = st.one_of(
    _runs(),
    _numbers(),
    _python_style(),
    _surrogates(),
    _nested(),
    _jsonish(),
    st.text(max_size=400),
)


# -- hostile schemas --------------------------------------------------------------------

_FOREIGN = [
    "file:///etc/passwd",
    "FILE:///etc/hostname",
    "HTTP://127.0.0.1:9/x.json",
    "https://127.0.0.1:9/s.json#/a",
    "//127.0.0.1:9/s.json",
    "urn:example:unknown",
    "other.json",
    "../../etc/passwd",
    "ftp://127.0.0.1/x",
    "\\\\server\\share\\x.json",
]
_PATTERNS = [
    "(a+)+$",
    "(a|aa)+$",
    "(a|a)*b",
    "^(\\w+\\s?)*$",
    "(x+x+)+y",
    "(.*a){12}",
    "([a-z]+)*[0-9]",
]


def _nested_items(depth: int) -> dict[str, Any]:
    """``{"items": {"items": ... {}}}``, built without recursion."""
    schema: dict[str, Any] = {}
    for _ in range(depth):
        schema = {"items": schema}
    return schema


def _schemas() -> st.SearchStrategy[Any]:
    foreign = st.sampled_from(_FOREIGN).map(lambda ref: {"$ref": ref})
    rooted = st.sampled_from(_FOREIGN[4:]).map(
        lambda ref: {"$id": "http://127.0.0.1:9/root.json", "$ref": ref}
    )
    nested_id = st.sampled_from(["sub.json", "#/x", "other"]).map(
        lambda ref: {"properties": {"a": {"$id": "http://127.0.0.1:9/a/", "$ref": ref}}}
    )
    cyclic = st.sampled_from(
        [
            {"$ref": "#"},
            {"allOf": [{"$ref": "#"}]},
            {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
            {
                "oneOf": [{"$ref": "#/$defs/a"}],
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#"}},
            },
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "$ref": "#/$defs/a",
            },
            {"not": {"$ref": "#"}},
            {"if": {"$ref": "#"}, "then": {"type": "string"}},
            {"type": "object", "properties": {"a": {"$ref": "#"}}},  # legitimate recursion
            {"type": "array", "items": {"$ref": "#"}},  # legitimate recursion
        ]
    )
    patterns = st.builds(
        lambda p, where: (
            {"type": "string", "pattern": p}
            if where == 0
            else {"type": "object", "patternProperties": {p: {"type": "integer"}}}
            if where == 1
            else {"$defs": {"s": {"type": "string", "pattern": p}}, "items": {"$ref": "#/$defs/s"}}
        ),
        st.sampled_from(_PATTERNS),
        st.integers(0, 2),
    )
    deep = st.integers(50, 3_000).map(_nested_items)
    big_enum = st.integers(1_000, 200_000).map(lambda n: {"enum": [f"v{i}" for i in range(n)]})
    many_props = st.integers(500, 8_000).map(
        lambda n: {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}
    )
    return st.one_of(foreign, rooted, nested_id, cyclic, patterns, deep, big_enum, many_props)


def _instances_for_patterns() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(10, 40).map(lambda n: json.dumps("a" * n + "!")),
        st.integers(10, 40).map(lambda n: json.dumps({"a" * n + "!": 1})),
        st.integers(10, 40).map(lambda n: json.dumps(["x" * n])),
        st.integers(10, 40).map(lambda n: json.dumps("word " * n + "!")),
    )


# -- the properties ---------------------------------------------------------------------


def _bounded(call: Any, bound: float) -> Any:
    _REACHED_OUT.clear()
    started = time.perf_counter()
    try:
        return call()
    except JsonModeError as error:
        return error
    finally:
        elapsed = time.perf_counter() - started
        assert elapsed < bound, f"took {elapsed:.2f} s (bound {bound} s)"
        assert not _REACHED_OUT, f"jsonmode reached outside: {_REACHED_OUT[:3]}"


def _no_nonfinite(value: Any) -> None:
    if isinstance(value, float):
        assert math.isfinite(value)
    elif isinstance(value, list):
        for item in value:
            _no_nonfinite(item)
    elif isinstance(value, dict):
        for item in value.values():
            _no_nonfinite(item)


@HOSTILE_SETTINGS
@given(text=HOSTILE_TEXT, mode=st.sampled_from(["strict", "repair"]))
def test_parse_any_text_gives_a_value_or_a_typed_error_in_bounded_time(
    text: str, mode: str
) -> None:
    outcome = _bounded(lambda: parse(text, {}, mode), PARSE_BOUND_S)  # type: ignore[arg-type]
    if not isinstance(outcome, JsonModeError):
        _no_nonfinite(outcome.data)
        json.dumps(outcome.data, ensure_ascii=False).encode("utf-8")  # representable as JSON text


@HOSTILE_SETTINGS
@given(
    schema=_schemas(),
    text=st.one_of(_instances_for_patterns(), HOSTILE_TEXT),
    mode=st.sampled_from(["strict", "repair"]),
)
def test_parse_against_hostile_schemas_is_typed_and_bounded(
    schema: Any, text: str, mode: str
) -> None:
    _bounded(lambda: parse(text, schema, mode), PARSE_BOUND_S + 2.0)  # type: ignore[arg-type]


@HOSTILE_SETTINGS
@given(schema=_schemas())
def test_compile_any_schema_gives_a_compiled_schema_or_a_typed_error(schema: Any) -> None:
    _bounded(lambda: compile_schema(schema, max_compile_seconds=2.0), COMPILE_BOUND_S)
