"""Pydantic's validation context, and lazily validated (``Iterable[...]``) values.

``context`` reaches every validator through ``Schema.check`` and ``jsonmode.parse``
(also after repair and coercion, and through the façade). Items of an
``Iterable[Item]`` are validated inside the check: an item's validator error is an
issue of the attempt (re-asked like any other), never an exception while iterating.
"""

from __future__ import annotations

import collections.abc
import json
import typing
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationInfo, field_validator

import jsonmode
from jsonmode import JsonMode, Schema, SchemaViolationError
from jsonmode.backends import ScriptedBackend


class Person(BaseModel):
    name: str
    age: int

    @field_validator("age")
    @classmethod
    def within_limit(cls, age: int, info: ValidationInfo) -> int:
        limit = (info.context or {}).get("max_age", 100)
        if age > limit:
            raise ValueError(f"age {age} is over {limit}")
        return age


class Seen(BaseModel):
    """Records the context its validator was handed."""

    name: str

    @field_validator("name")
    @classmethod
    def record(cls, name: str, info: ValidationInfo) -> str:
        SEEN.append(info.context)
        return name


SEEN: list[Any] = []
OLD = {"name": "Ada", "age": 150}
ADA_150 = Person.model_construct(name="Ada", age=150)  # (valid only with a context)


# -- context ---------------------------------------------------------------------------


def test_check_hands_the_context_to_validators():
    spec = Schema.of(Person)
    assert [(i.path, i.keyword) for i in spec.check(OLD).issues] == [("$.age", "model")]
    assert spec.check(OLD, context={"max_age": 200}).value == ADA_150
    assert not spec.check(OLD, context={"max_age": 120}).ok


def test_the_context_object_itself_reaches_the_validator():
    SEEN.clear()
    context = {"tenant": object()}
    jsonmode.parse('{"name": "x"}', Seen, context=context)
    jsonmode.parse('{"name": "x"}', Seen)
    assert SEEN[0] is context
    assert SEEN[1] is None


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps(OLD),  # read as it is
        'Sure: {"name": "Ada", "age": "150"}',  # extracted, then coerced
        "{'name': 'Ada', 'age': 150,}",  # syntax repair
        json.dumps(json.dumps(OLD)),  # double-encoded
    ],
)
def test_parse_threads_the_context_through_repair_and_coercion(raw):
    with pytest.raises(SchemaViolationError) as caught:
        jsonmode.parse(raw, Person, "repair")
    assert ("$.age", "model") in [(i.path, i.keyword) for i in caught.value.issues]
    parsed = jsonmode.parse(raw, Person, "repair", context={"max_age": 200})
    assert parsed.value == ADA_150


def test_strict_parse_uses_the_context():
    assert jsonmode.parse(json.dumps(OLD), Person, context={"max_age": 150}).value.age == 150
    with pytest.raises(SchemaViolationError):
        jsonmode.parse(json.dumps(OLD), Person, context={"max_age": 149})


def test_json_schema_inputs_ignore_the_context():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert jsonmode.parse('{"a": 1}', schema, context={"anything": 1}).value == {"a": 1}


def test_run_passes_the_context_to_every_attempt():
    backend = ScriptedBackend([json.dumps(OLD)])
    result = JsonMode(backend).run("Ada, 150", Person, context={"max_age": 200})
    assert result.value == ADA_150
    backend = ScriptedBackend([json.dumps(OLD), '{"name": "Ada", "age": 36}'])
    result = JsonMode(backend, max_attempts=2).run("Ada", Person, context={"max_age": 100})
    assert [a.outcome for a in result.attempts] == ["schema_violation", "valid"]


# -- lazily validated values -------------------------------------------------------------

ITERABLES = [
    typing.Iterable[Person],
    collections.abc.Iterable[Person],
    typing.Generator[Person, None, None],
]
PEOPLE = [{"name": "a", "age": 1}, {"name": "b", "age": 2}, {"name": "c", "age": 101}]


@pytest.mark.parametrize("form", ITERABLES, ids=str)
def test_an_item_validator_error_is_an_issue_of_the_check(form):
    checked = Schema.of(form).check(PEOPLE)
    assert [(i.path, i.keyword) for i in checked.issues] == [("$[2].age", "model")]
    assert "over 100" in checked.issues[0].message
    assert checked.value is None


@pytest.mark.parametrize("form", ITERABLES, ids=str)
def test_a_valid_iterable_comes_back_as_a_list_of_validated_items(form):
    checked = Schema.of(form).check(PEOPLE[:2])
    assert type(checked.value) is list
    assert checked.value == [Person(name="a", age=1), Person(name="b", age=2)]
    assert Schema.of(form).check([]).value == []


def test_every_failing_item_is_reported():
    people = [*PEOPLE, {"name": "d", "age": 4}, {"name": "e", "age": 500}]
    issues = Schema.of(typing.Iterable[Person]).check(people).issues
    assert [i.path for i in issues] == ["$[2].age", "$[4].age"]


def test_a_list_of_models_reports_item_errors_at_their_paths():
    issues = Schema.of(list[Person]).check(PEOPLE).issues
    assert [(i.path, i.keyword) for i in issues] == [("$[2].age", "model")]
    issues = Schema.of(tuple[Person, ...]).check(PEOPLE).issues
    assert [(i.path, i.keyword) for i in issues] == [("$[2].age", "model")]


class Team(BaseModel):
    title: str
    members: collections.abc.Iterable[Person] = Field(alias="people")


def test_a_lazy_field_inside_a_model_is_validated_in_the_check():
    spec = Schema.of(Team)
    issues = spec.check({"title": "t", "people": PEOPLE}).issues
    assert [(i.path, i.keyword) for i in issues] == [("$.people[2].age", "model")]
    team = spec.check({"title": "t", "people": PEOPLE[:2]}).value
    assert list(team.members) == [Person(name="a", age=1), Person(name="b", age=2)]


def test_a_lazy_field_still_serialises_as_pydantic_would():
    team = Schema.of(Team).check({"title": "t", "people": PEOPLE[:1]}).value
    expected = {"title": "t", "people": [PEOPLE[0]]}
    assert json.loads(team.model_dump_json(by_alias=True)) == expected


def test_the_context_reaches_lazily_validated_items():
    spec = Schema.of(collections.abc.Iterable[Person])
    assert spec.check(PEOPLE, context={"max_age": 200}).ok
    assert not spec.check(PEOPLE, context={"max_age": 1}).ok


def test_parse_reports_an_item_error_as_a_schema_violation():
    with pytest.raises(SchemaViolationError) as caught:
        jsonmode.parse(json.dumps(PEOPLE), collections.abc.Iterable[Person], "repair")
    assert [i.path for i in caught.value.issues] == ["$[2].age"]


def test_run_reasks_when_an_item_fails_its_validator():
    backend = ScriptedBackend([json.dumps(PEOPLE), json.dumps(PEOPLE[:2])])
    result = JsonMode(backend, max_attempts=2).run("people", collections.abc.Iterable[Person])
    assert [a.outcome for a in result.attempts] == ["schema_violation", "valid"]
    assert [i.path for i in result.attempts[0].issues] == ["$[2].age"]
    assert result.value == [Person(name="a", age=1), Person(name="b", age=2)]


def test_schemas_without_lazy_parts_are_not_walked():
    assert not Schema.of(Person)._lazy
    assert not Schema.of(list[Person])._lazy
    assert not Schema.of({"type": "array"})._lazy
    assert Schema.of(Team)._lazy
