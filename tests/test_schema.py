"""Schema input → one normalised JSON Schema; validation issues."""

import json
import pathlib
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field, field_validator

import jsonmode
from jsonmode import InvalidSchemaError, Schema, UnsupportedSchemaError, UsageError


class Person(BaseModel):
    name: str
    age: int = Field(ge=0)


class Shouty(BaseModel):
    word: str

    @field_validator("word")
    @classmethod
    def must_be_upper(cls, value: str) -> str:
        if value != value.upper():
            raise ValueError("must be upper case")
        return value


def test_pydantic_model_gives_instance():
    checked = Schema.of(Person).check({"name": "Ada", "age": 36})
    assert checked.ok
    assert checked.value == Person(name="Ada", age=36)


def test_type_adapter_forms():
    assert Schema.of(list[Person]).check([{"name": "a", "age": 1}]).value == [
        Person(name="a", age=1)
    ]
    assert not Schema.of(Literal["a", "b"]).check("c").ok
    assert Schema.of(Literal["a", "b"]).check("b").value == "b"
    assert not Schema.of(Annotated[int, Field(ge=3)]).check(2).ok
    assert Schema.of(int | str).check("x").ok
    assert not Schema.of(int | str).check(1.5).ok


def test_dict_and_text_and_path(tmp_path: pathlib.Path):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    for form in (schema, json.dumps(schema), path):
        spec = Schema.of(form)
        assert spec.json_schema == schema
        assert spec.check({"a": 1}).value == {"a": 1}
        assert [i.keyword for i in spec.check({}).issues] == ["required"]


def test_caller_dict_is_copied_not_referenced():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    spec = Schema.of(schema)
    schema["properties"]["a"]["type"] = "string"
    assert spec.json_schema["properties"]["a"]["type"] == "integer"
    assert Schema.of(schema).json_schema["properties"]["a"]["type"] == "string"


def test_the_copy_is_the_schema_as_json_reads_it():
    """Tuples become arrays and non-string keys strings, as in the JSON text."""
    spec = Schema.of({"enum": (1, 2), "properties": {7: {"type": "integer"}}})
    assert spec.json_schema == {"enum": [1, 2], "properties": {"7": {"type": "integer"}}}
    assert spec.conforms(1)
    assert not spec.conforms(3)


def test_every_issue_is_reported_with_path_and_keyword():
    spec = Schema.of(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "odd key": {"type": "integer"},
            },
            "required": ["name", "id"],
        }
    )
    issues = spec.check({"name": 1, "tags": ["ok", 2], "odd key": "x"}).issues
    found = {(i.path, i.keyword) for i in issues}
    assert found == {
        ("$", "required"),
        ("$.name", "type"),
        ("$.tags[1]", "type"),
        ('$["odd key"]', "type"),
    }


def test_anyof_reports_branch_reasons():
    spec = Schema.of({"anyOf": [{"type": "integer"}, {"type": "object", "required": ["a"]}]})
    issues = spec.check({}).issues
    assert issues[0].keyword == "anyOf"
    assert any("branch 1" in i.message and i.keyword == "required" for i in issues)


def test_draft7_follows_dollar_schema_and_formats_are_checked():
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "items": [{"type": "integer"}],
        "properties": {"e": {"format": "email"}},
    }
    spec = Schema.of(draft7)
    assert not spec.check([1.5]).ok  # tuple-form items only means something in draft 7
    assert [i.keyword for i in spec.check({"e": "nope"}).issues] == ["format"]
    for fmt, bad in (("date-time", "yesterday"), ("uuid", "x"), ("ipv4", "1.2.3"), ("iri", "a b")):
        assert not Schema.of({"format": fmt}).check(bad).ok, fmt


def test_model_validators_report_as_model_issues():
    checked = Schema.of(Shouty).check({"word": "quiet"})
    assert [(i.path, i.keyword) for i in checked.issues] == [("$.word", "model")]
    assert "upper" in checked.issues[0].message


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        ({"type": "nope"}, InvalidSchemaError),
        ({"minimum": "three"}, InvalidSchemaError),
        ("{not json", InvalidSchemaError),
        ({"$ref": "#/$defs/missing"}, InvalidSchemaError),
        ({"$ref": "https://example.com/s.json"}, InvalidSchemaError),
        (False, UnsupportedSchemaError),
        ({"a": float("nan")}, InvalidSchemaError),
        (42, UsageError),
        (pathlib.Path("/nonexistent/schema.json"), InvalidSchemaError),
    ],
)
def test_bad_schemas_raise_typed_errors(schema, error):
    with pytest.raises(error) as info:
        Schema.of(schema)
    assert isinstance(info.value, jsonmode.JsonModeError)


def test_invalid_schema_names_the_location():
    with pytest.raises(InvalidSchemaError) as info:
        Schema.of({"properties": {"a": {"type": 5}}})
    assert "properties" in info.value.schema_path


def test_cached_and_named():
    assert Schema.of(Person) is Schema.of(Person)
    assert Schema.of(Person).name == "Person"
    assert Schema.of(list[Person]).name == "list_Person"
    assert Schema.of({"title": "My thing!"}).name == "My_thing"
    assert Schema.of(Person, name="other").name == "other"


def test_prompt_form_is_compact_without_derived_titles():
    form = Schema.of(Person).prompt_form
    assert " " not in form
    assert '"title":"Name"' not in form
    assert json.loads(form)["properties"]["age"] == {"minimum": 0, "type": "integer"}


# -- schema errors, for the person who wrote the schema -----------------------------------

TYPES = "(array, boolean, integer, null, number, object, string)"


def test_a_bad_type_names_its_json_path_and_what_was_expected():
    with pytest.raises(InvalidSchemaError) as info:
        Schema.of({"type": "object", "properties": {"age": {"type": "strin"}}})
    error = info.value
    assert error.schema_path == "/properties/age/type"
    assert error.message == (
        "not a valid JSON Schema: at /properties/age/type, "
        f"'strin' is not one of the JSON types {TYPES}"
    )
    assert error.hint == "did you mean 'string'?"
    assert "not valid under any of the given schemas" not in str(error)


@pytest.mark.parametrize(
    ("schema", "path", "words"),
    [
        ({"type": ["string", "intger"]}, "/type/1", "'intger' is not one of the JSON types"),
        ({"type": ["string", "string"]}, "/type", "non-unique"),
        ({"properties": {"a": {"type": 5}}}, "/properties/a/type", "or a list of them, not 5"),
        ({"minimum": "three"}, "/minimum", "'three' is not of type 'number'"),
        ({"items": {"anyOf": [{"type": "nul"}]}}, "/items/anyOf/0/type", "JSON types"),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#", "items": 5},
            "/items",
            "5 is not of type 'object', 'boolean'; or 5 is not of type 'array'",
        ),
        (
            {"$schema": "http://json-schema.org/draft-04/schema#", "type": "strin"},
            "/type",
            "JSON types",
        ),
    ],
)
def test_invalid_schemas_say_where_and_what(schema, path, words):
    with pytest.raises(InvalidSchemaError) as info:
        Schema.of(schema)
    assert info.value.schema_path == path
    assert f"at {path}, " in info.value.message
    assert words in info.value.message


def test_a_schema_file_is_named_in_its_errors(tmp_path: pathlib.Path):
    path = tmp_path / "person.json"
    path.write_text('{"type": "object", "properties": {"age": {"type": "strin"}}}')
    with pytest.raises(InvalidSchemaError) as info:
        Schema.of(path)
    assert str(path) in info.value.message
    assert "/properties/age/type" in info.value.message
    assert info.value.schema_path == "/properties/age/type"
    path.write_text('{"$ref": "#/$defs/missing"}')
    with pytest.raises(InvalidSchemaError, match=r"person\.json"):
        Schema.of(path)


def test_a_schema_file_that_is_not_json_names_the_line_and_column(tmp_path: pathlib.Path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "type": "object",\n  "required": ["a",]\n}')
    with pytest.raises(InvalidSchemaError) as info:
        Schema.of(path)
    assert str(path) in info.value.message
    assert "line 3, column 20" in info.value.message
    with pytest.raises(InvalidSchemaError, match="line 1, column 2"):
        Schema.of("{not json")
    path.write_bytes(b'{"title": "caf\xe9"}')
    with pytest.raises(InvalidSchemaError, match="not UTF-8"):
        Schema.of(path)


@pytest.mark.parametrize(
    ("text", "kind"),
    [("[{}]", "an array"), ("42", "a number"), ('"x"', "a string"), ("null", "null")],
)
def test_json_that_is_not_a_schema_says_what_a_schema_is(tmp_path: pathlib.Path, text, kind):
    expected = f"must be a JSON object (a JSON Schema) or true/false, not {kind}"
    with pytest.raises(InvalidSchemaError) as info:
        Schema.of(text)
    assert info.value.message == f"schema {expected}"
    path = tmp_path / "list.json"
    path.write_text(text)
    with pytest.raises(InvalidSchemaError) as info:
        Schema.of(path)
    assert info.value.message == f"schema file {path} {expected}"
    assert "pydantic" not in str(info.value)


def test_the_cli_explains_an_array_schema_without_python(tmp_path: pathlib.Path, capsys):
    from jsonmode.cli import main

    path = tmp_path / "list.json"
    path.write_text('[{"type": "string"}]')
    document = tmp_path / "in.json"
    document.write_text('"x"')
    assert main(["validate", "--schema", str(path), str(document)]) == 2
    err = capsys.readouterr().err
    assert "InvalidSchemaError" in err
    assert "must be a JSON object (a JSON Schema) or true/false, not an array" in err
    assert str(path) in err
    assert "pydantic" not in err
    assert "list[" not in err


def test_a_python_list_is_a_usage_error_that_says_how_to_ask_for_a_list():
    with pytest.raises(UsageError) as info:
        Schema.of([Person])
    assert "list[Item]" in str(info.value)


def test_a_schema_file_is_read_again_at_every_call(tmp_path: pathlib.Path):
    path = tmp_path / "s.json"
    path.write_text('{"type": "integer"}')
    assert Schema.of(path).conforms(1)
    path.write_text('{"type": "string"}')
    assert Schema.of(path).conforms("x")
    assert Schema.of(path) is Schema.of(path)  # cached by its text
