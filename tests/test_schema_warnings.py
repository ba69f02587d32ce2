"""Schema warnings (issue 38): ``Schema.warnings`` finds keywords the draft does not
know ("did you mean 'required'?"); the façade emits them as ``JsonModeWarning`` once
per schema and instance; the CLI prints them on stderr once per run."""

from __future__ import annotations

import datetime
import enum
import json
import pathlib
import subprocess
import sys
import time
import uuid
import warnings
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from support.openai_server import OpenAIServer, Reply

import jsonmode
from jsonmode import JsonMode, JsonModeWarning, Schema
from jsonmode.backends import ScriptedBackend
from jsonmode.schema import SchemaWarning
from jsonmode.schema.spelling import MAX_WARNINGS

MISSPELT = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "requried": ["name"],
}
LINE = "/requried: unknown keyword 'requried' (did you mean 'required'?)"


# -- Schema.warnings --------------------------------------------------------------------


def test_a_misspelt_keyword_is_found_with_a_suggestion():
    (record,) = Schema.of(MISSPELT).warnings
    assert record == SchemaWarning(
        "/requried", "requried", "unknown keyword 'requried' (did you mean 'required'?)"
    )
    assert record.severity == "warning"
    assert str(record) == LINE


@pytest.mark.parametrize(
    ("keyword", "suggestion"),
    [
        ("minimun", "minimum"),
        ("tyep", "type"),  # two neighbours swapped
        ("additionalProperty", "additionalProperties"),
        ("maxlength", "maxLength"),  # case
        ("enums", "enum"),
    ],
)
def test_suggestions(keyword: str, suggestion: str):
    (record,) = Schema.of({keyword: 1}).warnings
    assert record.message == f"unknown keyword '{keyword}' (did you mean '{suggestion}'?)"


def test_nested_locations_are_json_pointers_of_keyword_positions_only():
    schema = {
        "type": "object",
        "properties": {
            "requried": {"type": "string"},  # a property name, not a keyword
            "a/b~c": {"type": "integer", "minimun": 0},
        },
        "$defs": {"colour": {"enum": [{"bogus": 1}], "default": {"weird": 2}}},
        "items": {"const": {"tyep": 3}, "examples": [{"x": 1}]},
        "anyOf": [{"type": "object", "colour": "red"}, True],
    }
    records = Schema.of(schema).warnings
    assert [(r.location, r.keyword) for r in records] == [
        ("/properties/a~1b~0c/minimun", "minimun"),
        ("/anyOf/0/colour", "colour"),
    ]
    assert records[1].message == "unknown keyword 'colour' is ignored"


def test_annotations_vendor_extensions_and_openapi_annotations_are_known():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.com/s",
        "$comment": "c",
        "title": "T",
        "description": "d",
        "examples": [{}],
        "default": {},
        "deprecated": False,
        "readOnly": False,
        "x-order": 1,
        "x-go-type": "T",
        "example": {},
        "discriminator": {"propertyName": "kind"},
        "externalDocs": {"url": "https://example.com"},
        "properties": {"a": {"type": ["string", "null"], "nullable": False}},
    }
    assert Schema.of(schema).warnings == ()


def test_openapi_nullable_true_is_a_note():
    (record,) = Schema.of({"properties": {"a": {"type": "string", "nullable": True}}}).warnings
    assert (record.location, record.keyword, record.severity) == (
        "/properties/a/nullable",
        "nullable",
        "note",
    )
    assert "null is allowed here only if the type allows it" in record.message


def test_a_keyword_of_another_draft_says_so():
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "prefixItems": [True]}
    (record,) = Schema.of(draft7).warnings
    assert record.message == (
        "unknown keyword 'prefixItems' is ignored: it is a keyword of Draft 2020-12, "
        "not of Draft 7 (this schema's draft); in Draft 7 write 'items' as an array of "
        "schemas ('additionalItems' for the items after them), or declare Draft 2020-12 "
        'with "$schema": "https://json-schema.org/draft/2020-12/schema"'
    )  # (issue 44: the fix is named too)


class Color(enum.Enum):
    RED = "red"


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=0, le=9, multiple_of=1)


class Dog(BaseModel):
    kind: Literal["dog"]
    name: str = Field(min_length=1, max_length=20, pattern="^[A-Z]")


class Tree(BaseModel):
    value: int
    children: list[Tree] = []


class Everything(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    color: Color = Color.RED
    when: datetime.datetime
    uid: uuid.UUID
    maybe: str | None = None
    tags: set[str] = set()
    pair: tuple[int, str]
    scores: dict[str, float] = {}
    old: int = Field(0, deprecated=True, description="d", title="Old", examples=[1])
    tree: Tree
    aliased: int = Field(0, alias="Aliased")


@pytest.mark.parametrize("model", [Everything, Cat, Tree, list[Everything], dict[str, Tree]])
def test_pydantic_generated_schemas_have_no_warnings(model: Any):
    assert Schema.of(model).warnings == ()
    assert Schema.of(json.dumps(Schema.of(model).json_schema)).warnings == ()


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_warnings_are_computed_once_and_bounded():
    spec = Schema.of(MISSPELT)
    assert spec.warnings is spec.warnings
    many = {"properties": {f"p{i}": {f"typo{i}": 1} for i in range(20_000)}}
    long = "k" * 200_000
    started = time.perf_counter()
    records = Schema.of(many).warnings
    huge = Schema.of({long: 1, "ok\n\x1b[2J": 2}).warnings
    assert time.perf_counter() - started < 5
    assert len(records) == MAX_WARNINGS + 1
    assert records[-1].message == f"{20_000 - MAX_WARNINGS} more unknown keywords not listed"
    assert str(records[-1]) == records[-1].message
    assert huge[0].keyword == long
    assert len(str(huge[0])) < 300  # shown cut short
    assert str(huge[1]) == r"/ok\n\u001b[2J: unknown keyword 'ok\n\u001b[2J' is ignored"


# -- the façade ---------------------------------------------------------------------------


def test_the_facade_warns_once_per_schema_and_instance_in_every_verb():
    reply = '{"name": "Ada"}'
    jm = JsonMode(ScriptedBackend([reply] * 6))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jm.run("x", MISSPELT)
        jm.generate("x", dict(MISSPELT))  # an equal schema is the same schema
        list(jm.stream("x", MISSPELT))
        jm.map(["x", "y"], MISSPELT, progress=False)
        JsonMode(ScriptedBackend([reply])).run("x", MISSPELT)  # another instance
    assert [type(w.message) for w in caught] == [JsonModeWarning, JsonModeWarning]
    first = caught[0]
    assert str(first.message) == LINE
    assert isinstance(first.message, JsonModeWarning)
    assert first.message.record == Schema.of(MISSPELT).warnings[0]
    assert first.filename == __file__  # it points at the caller's line


def test_stream_items_warns_about_the_item_schema_as_written():
    item = {"type": "object", "properties": {"n": {"type": "integer"}}, "requried": ["n"]}
    jm = JsonMode(ScriptedBackend(['[{"n": 1}]']))
    with pytest.warns(JsonModeWarning) as caught:
        assert list(jm.stream_items("x", item)) == [{"n": 1}]
    assert [str(w.message) for w in caught] == [
        "/requried: unknown keyword 'requried' (did you mean 'required'?)"
    ]


def test_notes_are_not_emitted_and_clean_schemas_never_warn():
    jm = JsonMode(ScriptedBackend(['{"a": "x"}', '{"pet": {"kind": "cat", "lives": 1}}']))
    nullable = {"type": "object", "properties": {"a": {"type": "string", "nullable": True}}}
    jm.run("x", nullable)  # (warnings are errors in this suite)

    class Owner(BaseModel):
        pet: Annotated[Cat | Dog, Field(discriminator="kind")]

    jm.run("x", Owner)


def test_the_warning_category_is_public_and_a_user_warning():
    assert jsonmode.JsonModeWarning is JsonModeWarning
    assert issubclass(JsonModeWarning, UserWarning)


# -- the command line ----------------------------------------------------------------------

COMMAND = [sys.executable, "-m", "jsonmode.cli"]


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def misspelt(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "person.json"
    path.write_text(json.dumps(MISSPELT), encoding="utf-8")
    return str(path)


def test_validate_and_repair_print_the_warning_once_and_still_run(misspelt: str):
    done = run_cli("validate", "--schema", misspelt, stdin="{}")
    assert (done.returncode, json.loads(done.stdout)) == (0, {})
    assert done.stderr == f"jsonmode: warning: {LINE}\n"
    done = run_cli("repair", "--schema", misspelt, stdin="{'name': 'Ada'}")
    assert (done.returncode, json.loads(done.stdout)) == (0, {"name": "Ada"})
    assert done.stderr == f"jsonmode: warning: {LINE}\n"


def test_a_note_is_printed_as_a_note(tmp_path: pathlib.Path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"properties": {"a": {"type": "string", "nullable": True}}}))
    done = run_cli("validate", "--schema", str(path), stdin='{"a": "x"}')
    assert done.returncode == 0
    assert done.stderr.startswith("jsonmode: note: /properties/a/nullable: 'nullable' is OpenAPI's")
    assert done.stderr.count("\n") == 1


def test_generate_and_batch_print_the_warning_once(misspelt: str, tmp_path: pathlib.Path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"prompt": "a"}\n{"prompt": "b"}\n', encoding="utf-8")
    target = tmp_path / "out.jsonl"
    reply = Reply('{"name": "Ada"}')
    files = ["--input", str(source), "--output", str(target)]
    options = ["--schema", misspelt, "--model", "openai/test", "--timeout", "20"]
    with OpenAIServer([reply]) as one, OpenAIServer([reply, reply]) as two:
        generate = subprocess.Popen(
            [*COMMAND, "generate", *options, "--api-base", one.base_url, "Ada"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        batch = subprocess.Popen(
            [*COMMAND, "batch", *options, "--api-base", two.base_url, *files],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        out, err = generate.communicate(timeout=180)
        _, batch_err = batch.communicate(timeout=180)
    assert generate.returncode == 0, err
    assert json.loads(out) == {"name": "Ada"}
    assert err == f"jsonmode: warning: {LINE}\n"
    assert batch.returncode == 0, batch_err
    assert batch_err.splitlines()[0] == f"jsonmode: warning: {LINE}"
    assert batch_err.count("warning") == 1
    assert "JsonModeWarning" not in batch_err
    assert [json.loads(line) for line in target.read_text().splitlines()] == [
        {"value": {"name": "Ada"}}
    ] * 2


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["LITELLM_TELEMETRY"] = "False"
    env.pop("OPENAI_API_KEY", None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env
