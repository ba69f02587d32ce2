"""Partial values typed after a pydantic model: PartialX twins, every field optional."""

from __future__ import annotations

import threading
from typing import Optional, Union

import pytest
from pydantic import BaseModel, Field, field_validator

from jsonmode.repair.typed_partial import partial_model, typed_partial


class Address(BaseModel):
    city: str
    zip: str = Field(min_length=5)


class Person(BaseModel):
    name: str = Field(alias="fullName")
    age: int
    address: Address
    previous: Optional[Address] = None  # noqa: UP045 - the typing spelling on purpose
    homes: list[Address] = []
    by_role: dict[str, Address] = {}

    @field_validator("age")
    @classmethod
    def adult(cls, value: int) -> int:
        if value < 18:
            raise ValueError("must be an adult")
        return value


class Cat(BaseModel):
    meows: bool


class Dog(BaseModel):
    barks: bool


class Pet(BaseModel):
    pet: Union[Cat, Dog]  # noqa: UP007


class Node(BaseModel):
    label: str
    children: list[Node] = []


def test_the_twin_is_named_after_the_model_and_every_field_is_optional():
    twin = partial_model(Person)
    assert twin.__name__ == "PartialPerson"
    assert set(twin.model_fields) == set(Person.model_fields)
    empty = twin()  # nothing required: all default to None
    assert all(getattr(empty, name) is None for name in Person.model_fields)
    assert not issubclass(twin, Person)


def test_the_twin_is_cached_and_built_once_across_threads():
    assert partial_model(Person) is partial_model(Person)
    seen: list[type] = []

    def build() -> None:
        seen.append(partial_model(Node))

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(twin) for twin in seen}) == 1


def test_aliases_are_read_and_kept():
    value = typed_partial({"fullName": "Ada", "age": 36}, Person)
    assert type(value).__name__ == "PartialPerson"
    assert value.name == "Ada"
    assert value.age == 36
    assert value.model_fields_set == {"name", "age"}
    assert partial_model(Person).model_fields["name"].alias == "fullName"
    assert value.model_dump(by_alias=True, exclude_unset=True) == {"fullName": "Ada", "age": 36}


def test_nothing_is_validated():
    # a validator that would fail, a constraint that does not hold yet, a missing field
    value = typed_partial({"fullName": "Ada", "age": 3, "address": {"zip": "W1"}}, Person)
    assert value.age == 3
    assert value.address.zip == "W1"
    assert value.address.city is None


def test_nested_models_become_partial_twins_everywhere():
    data = {
        "address": {"city": "London"},
        "previous": {"city": "Paris"},
        "homes": [{"city": "A"}, {}],
        "by_role": {"work": {"zip": "12345"}},
    }
    value = typed_partial(data, Person)
    assert type(value.address).__name__ == "PartialAddress"
    assert value.address.city == "London"
    assert value.address.model_fields_set == {"city"}
    assert type(value.previous).__name__ == "PartialAddress"  # Optional[Model]
    assert [type(home).__name__ for home in value.homes] == ["PartialAddress"] * 2
    assert value.homes[1].model_fields_set == set()
    assert type(value.by_role["work"]).__name__ == "PartialAddress"
    assert value.by_role["work"].zip == "12345"


def test_top_level_containers_of_models():
    listed = typed_partial([{"city": "A"}, {"zip": "1"}], list[Address])
    assert [type(item).__name__ for item in listed] == ["PartialAddress"] * 2
    optional = typed_partial({"city": "A"}, Optional[Address])  # noqa: UP045
    assert type(optional).__name__ == "PartialAddress"
    mapping = typed_partial({"a": {"city": "A"}}, dict[str, Address])
    assert type(mapping["a"]).__name__ == "PartialAddress"


def test_a_union_of_two_models_stays_a_plain_dict():
    value = typed_partial({"pet": {"meows": True}}, Pet)
    assert type(value).__name__ == "PartialPet"
    assert value.pet == {"meows": True}
    assert type(value.pet) is dict
    assert typed_partial({"barks": True}, Union[Cat, Dog]) == {"barks": True}  # noqa: UP007


def test_a_self_referential_model():
    data = {"label": "root", "children": [{"label": "a", "children": [{"label": "b"}]}, {}]}
    value = typed_partial(data, Node)
    assert type(value).__name__ == "PartialNode"
    child = value.children[0]
    assert type(child).__name__ == "PartialNode"
    assert child.label == "a"
    assert type(child.children[0]).__name__ == "PartialNode"
    assert child.children[0].children is None  # not arrived
    assert value.children[1].model_fields_set == set()


def test_fields_set_says_what_has_arrived():
    assert typed_partial({}, Person).model_fields_set == set()
    assert typed_partial({"age": 36}, Person).model_fields_set == {"age"}
    # a field that arrived as null is set, one that did not arrive is not
    assert typed_partial({"previous": None}, Person).model_fields_set == {"previous"}


@pytest.mark.parametrize(
    ("value", "schema"),
    [
        ({"a": 1}, {"type": "object"}),  # a JSON Schema dict: plain JSON
        ([1, 2], list[int]),
        ("text", Person),  # does not fit the shape: left as is
        ([1, {"city": "A"}], Person),
        (None, Person),
    ],
)
def test_values_that_are_not_models_stay_plain_json(value, schema):
    assert typed_partial(value, schema) == value


def test_a_value_of_the_wrong_shape_inside_a_model_stays_plain():
    value = typed_partial({"address": "London", "homes": {"x": 1}}, Person)
    assert value.address == "London"
    assert value.homes == {"x": 1}


def test_extra_keys_are_left_out():
    value = typed_partial({"age": 1, "unknown": 2}, Person)
    assert value.model_fields_set == {"age"}
    assert value.model_dump(exclude_unset=True) == {"age": 1}
