"""Number bounds: the automaton accepts a json.dumps spelling exactly when the value is in range."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jsonmode
from jsonmode.decoding.compile.numbers import Bounds, integer_range, number_dfa

BOUND_VALUES = [0, 1, -1, 0.5, -0.5, 10, -2.25, 3.75, 0.001, 99.99, 1000, -1000, 0.1, 7]
KEYWORDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]

numbers = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(-1000, 1000, places=4, allow_nan=False).map(float),
)
schemas = st.dictionaries(
    st.sampled_from(KEYWORDS),
    st.one_of(st.sampled_from(BOUND_VALUES), st.integers(-50, 50), st.floats(-50, 50)),
    min_size=1,
    max_size=4,
)


def _value(x: float | int) -> Decimal:
    return Decimal(x) if isinstance(x, int) else Decimal(repr(x))


@settings(max_examples=300, deadline=None)
@given(schemas, st.lists(numbers, min_size=1, max_size=20))
def test_bounded_numbers_accept_exactly_the_values_in_range(schema, values):
    bounds = Bounds.of(schema)
    dfa = number_dfa(bounds)
    if dfa is None:  # a bound among exponent forms: left to post-validation
        return
    for x in values:
        text = json.dumps(x)
        assert dfa.accepts(text) == bounds.contains(_value(x)), (schema, text)


@pytest.mark.parametrize(
    ("schema", "accepted", "rejected"),
    [
        ({"minimum": 0}, ["0", "0.0", "-0", "-0.0", "1e-05", "1e+16", "3.5"], ["-1", "-1e-05"]),
        ({"exclusiveMinimum": 0}, ["1e-05", "0.001", "2"], ["0", "0.0", "-0.0", "-3"]),
        ({"maximum": 1.5}, ["1.5", "1.50", "1.49", "-1e+16", "1e-05"], ["1.51", "2", "1e+16"]),
        ({"exclusiveMaximum": 2}, ["1.999", "1"], ["2", "2.0", "2.0001"]),
        ({"minimum": -2.25, "maximum": -1}, ["-2.25", "-1.0", "-2"], ["-2.26", "-0.5", "0"]),
    ],
)
def test_bounded_numbers_by_example(schema, accepted, rejected):
    compiled = jsonmode.compile_schema({"type": "number", **schema})
    assert compiled.fully_enforced
    for text in accepted:
        assert compiled.accepts(text), text
    for text in rejected:
        assert not compiled.accepts(text), text


def test_bounds_among_exponent_forms_are_post_validated():
    compiled = jsonmode.compile_schema({"type": "number", "minimum": 0.00001, "maximum": 1e20})
    assert set(compiled.unenforced) == {"/minimum", "/maximum"}
    assert compiled.accepts("1e-07")  # the generic number: post-validation decides


def test_draft4_boolean_exclusive_bounds():
    draft4 = "http://json-schema.org/draft-04/schema#"
    schema = {"$schema": draft4, "type": "integer", "minimum": 0, "exclusiveMinimum": True}
    compiled = jsonmode.compile_schema(schema)
    assert compiled.fully_enforced
    assert not compiled.accepts("0")
    assert compiled.accepts("1")
    number = {"$schema": draft4, "type": "number", "maximum": 1, "exclusiveMaximum": True}
    compiled = jsonmode.compile_schema(number)
    assert compiled.accepts("0.99")
    assert not compiled.accepts("1")


def test_integer_range_rounds_inwards():
    assert integer_range(Bounds.of({"minimum": 0.5, "exclusiveMaximum": 3})) == (1, 2)
    assert integer_range(Bounds.of({"exclusiveMinimum": -1.0, "maximum": 2.5})) == (0, 2)
    assert integer_range(Bounds()) == (None, None)


def test_random_bounds_differential_against_decimal():
    rng = random.Random(7)
    for _ in range(200):
        schema = {k: rng.choice(BOUND_VALUES) for k in rng.sample(KEYWORDS, rng.randint(1, 3))}
        bounds = Bounds.of(schema)
        dfa = number_dfa(bounds)
        assert dfa is not None
        for _ in range(30):
            x = round(rng.uniform(-1200, 1200), rng.randint(0, 3))
            x = int(x) if rng.random() < 0.3 else x
            assert dfa.accepts(json.dumps(x)) == bounds.contains(_value(x)), (schema, x)
