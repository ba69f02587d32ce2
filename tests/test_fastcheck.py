"""The compiled yes/no validator must agree exactly with jsonschema wherever it compiles.

Differential tests over the official JSON-Schema-Test-Suite (draft 2020-12, including
the optional format tests), the corpus schemas, and generated instances.
"""

import json
import pathlib

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonmode.schema.fastcheck import compile_check
from jsonmode.schema.linear import linear_validator_class

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUITE = ROOT.parent / "shared" / "data" / "json-schema-test-suite" / "tests" / "draft2020-12"
CORPUS_SCHEMAS = ROOT / "tests" / "corpus" / "schemas.json"


def _suite_groups():
    files = sorted(SUITE.glob("*.json")) + sorted((SUITE / "optional").rglob("*.json"))
    assert len(files) > 40, f"official test suite not found under {SUITE}"
    for path in files:
        for index, group in enumerate(json.loads(path.read_text())):
            yield pytest.param(group, id=f"{path.relative_to(SUITE)}:{index}")


def _reference(schema):
    # jsonschema with jsonmode's ECMA-262, linear-time pattern keywords (as make_validator).
    cls = linear_validator_class(jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


GROUPS = list(_suite_groups())


@pytest.mark.parametrize("group", GROUPS)
def test_agrees_with_jsonschema_on_the_official_suite(group):
    reference = _reference(group["schema"])
    check = compile_check(group["schema"], reference.format_checker)
    if check is None:
        return  # unsupported here: jsonmode falls back to jsonschema itself
    for case in group["tests"]:
        expected = reference.is_valid(case["data"])
        assert check(case["data"]) is expected, case["description"]


def test_compiles_most_of_the_suite():
    """The fast path must cover the common keywords, not quietly fall back everywhere."""
    compiled = sum(
        compile_check(g.values[0]["schema"], _reference(True).format_checker) is not None
        for g in GROUPS
    )
    # Ratchet: 291 of 461 groups today; the rest use unevaluated*, $id-relative or
    # dynamic references, which stay with jsonschema.
    assert compiled >= 291, f"only {compiled} of {len(GROUPS)} groups compile"


@pytest.mark.parametrize(
    "schema",
    [
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"},
        {"$id": "https://example.com/s", "type": "integer"},
        {"unevaluatedProperties": False},
        {"$dynamicRef": "#meta"},
        {"$anchor": "a", "type": "integer"},
        {"minimum": True},
        {"$ref": "https://example.com/remote.json"},
        {"$ref": "#/$defs/missing"},
        {"items": [{"type": "integer"}]},
        {"pattern": "(unclosed"},
    ],
)
def test_unsupported_schemas_fall_back(schema):
    assert compile_check(schema, _reference(True).format_checker) is None


def test_recursive_references():
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["children"],
            }
        },
        "$ref": "#/$defs/node",
    }
    check = compile_check(schema, _reference(schema).format_checker)
    assert check is not None
    assert check({"children": [{"children": []}, {"children": [{"children": []}]}]})
    assert not check({"children": [{"children": [{}]}]})


def _json_values():
    numbers = st.integers(-5, 5) | st.floats(-5, 5)
    scalars = st.none() | st.booleans() | numbers | st.text(max_size=4)
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(["a", "b", "name", "age", "id", "x"]), inner, max_size=4
            )
        ),
        max_leaves=12,
    )


CORPUS = json.loads(CORPUS_SCHEMAS.read_text())


@pytest.mark.parametrize("name", sorted(CORPUS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json_values())
def test_agrees_with_jsonschema_on_generated_values(name, value):
    schema = CORPUS[name]
    reference = _reference(schema)
    check = compile_check(schema, reference.format_checker)
    assert check is not None, f"corpus schema {name} should compile"
    assert check(value) is reference.is_valid(value)


@pytest.mark.parametrize("count", range(6))
def test_all_and_any_of_checks_agree_with_the_builtins_and_stop_early(count: int) -> None:
    """The combinators behind allOf/anyOf and a schema's keywords: every subset of
    verdicts, each length written out or looped; no check after the deciding one."""
    import itertools

    from jsonmode.schema import fastcheck

    called: list[int] = []

    def make(index: int, verdict: bool):
        def check(value: object) -> bool:
            called.append(index)
            return verdict

        return check

    for verdicts in itertools.product((False, True), repeat=count):
        called.clear()
        checks = [make(index, verdict) for index, verdict in enumerate(verdicts)]
        assert bool(fastcheck._all(checks)(None)) is all(verdicts)
        stop = verdicts.index(False) + 1 if False in verdicts else count
        assert called == list(range(stop))
        called.clear()
        assert bool(fastcheck._any(checks)(None)) is any(verdicts)
        stop = verdicts.index(True) + 1 if True in verdicts else count
        assert called == list(range(stop))


class _CountingDict(dict):
    """A dict that counts the membership tests made on it."""

    tests = 0

    def __contains__(self, key: object) -> bool:
        type(self).tests += 1
        return super().__contains__(key)


def test_properties_walk_the_smaller_side() -> None:
    # A metaschema's many properties against a subschema's few keywords: the value's
    # keys are looked up (no membership test per declared property), same verdicts.
    names = [f"p{index}" for index in range(60)]
    schema = {"properties": {name: {"type": "integer"} for name in names}}
    check = compile_check(schema, jsonschema.FormatChecker())
    assert check is not None
    _CountingDict.tests = 0
    assert check(_CountingDict({"p3": 1, "q": "x"}))
    assert not check(_CountingDict({"p59": "no"}))
    assert _CountingDict.tests == 0
    big = {name: 1 for name in names} | {"extra": None}
    assert check(big)
    assert not check(big | {"p0": "no"})
    assert check({})
    assert check({"p1": 2})
    assert not check({"p1": 2.5})


# allOf members that hold only type and properties (a metaschema's vocabularies) are
# folded into one lookup per member name (fastcheck._Compiler.folded): same verdicts.
_MEMBER_SCHEMAS = st.sampled_from(
    [{"type": "integer"}, {"type": "string"}, {"minimum": 2}, {"type": ["array", "null"]}, False]
)
_FOLDABLE_PARTS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", ["object", "boolean"], "array"]),
            "properties": st.dictionaries(
                st.sampled_from(["a", "b", "name", "x"]), _MEMBER_SCHEMAS, max_size=3
            ),
            "title": st.just("t"),
        },
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=_FOLDABLE_PARTS,
    own=st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", ["object", "boolean"]]),
            "properties": st.dictionaries(
                st.sampled_from(["a", "b", "id"]), _MEMBER_SCHEMAS, max_size=2
            ),
            "additionalProperties": st.sampled_from([False, {"type": "integer"}]),
            "required": st.just(["a"]),
        },
    ),
    values=st.lists(_json_values(), min_size=1, max_size=5),
)
def test_folded_all_of_agrees_with_jsonschema(parts, own, values):
    schema = {**own, "allOf": parts}
    reference = _reference(schema)
    check = compile_check(schema, reference.format_checker)
    assert check is not None
    for value in values:
        assert check(value) is reference.is_valid(value), value
