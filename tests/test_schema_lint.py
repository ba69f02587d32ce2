"""The schema lint (issue 44, part 3): ``Schema.warnings`` beyond misspelt keywords —
keywords of another draft, ``required`` names ``additionalProperties: false`` forbids,
contradictory bounds, an empty ``enum``, a pattern that matches nothing, a reference to
nowhere in a definition nothing uses — each with the JSON pointer and the fix; the
façade's warnings and ``strict_schema=True``; ``jsonmode lint`` and ``--strict-schema``."""

from __future__ import annotations

import asyncio
import gzip
import json
import pathlib
import subprocess
import sys
import time
import warnings
from typing import Annotated, Any

import pytest
from pydantic import Field

import jsonmode
from jsonmode import InvalidSchemaError, JsonMode, JsonModeWarning, Schema, UsageError
from jsonmode.schema import SchemaWarning
from jsonmode.schema.lint import MAX_WARNINGS, lint

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
D2019 = "https://json-schema.org/draft/2019-09/schema"
DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"


def found(schema: Any) -> list[tuple[str, str, str]]:
    return [(w.location, w.keyword, w.message) for w in Schema.of(schema).warnings]


def only(schema: Any) -> SchemaWarning:
    records = Schema.of(schema).warnings
    assert len(records) == 1, records
    return records[0]


# -- each mistake: its pointer and its fix ---------------------------------------------


def test_a_required_name_that_additional_properties_false_forbids():
    schema = {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name", "nmae", "age"],
                "additionalProperties": False,
            }
        },
    }
    assert found(schema) == [
        (
            "/properties/user/required/1",
            "required",
            "'nmae' is required, but it is not in 'properties' and 'additionalProperties' is "
            "false: no object is valid here (did you mean 'name'?)",
        ),
        (
            "/properties/user/required/2",
            "required",
            "'age' is required, but it is not in 'properties' and 'additionalProperties' is "
            "false: no object is valid here (add it to 'properties', or remove it from "
            "'required')",
        ),
    ]


def test_required_names_that_may_be_present_are_fine():
    assert found({"required": ["a"], "properties": {}}) == []  # additionalProperties allows it
    by_pattern = {
        "type": "object",
        "patternProperties": {"^x-": {}},
        "required": ["x-id"],
        "additionalProperties": False,
    }
    assert found(by_pattern) == []


def test_required_on_an_array_belongs_in_its_items():
    schema = {
        "properties": {
            "links": {
                "type": "array",
                "items": {"type": "object", "properties": {"uri": {"type": "string"}}},
                "required": ["uri"],
                "additionalProperties": False,
            }
        }
    }
    assert found(schema) == [
        (
            "/properties/links/required",
            "required",
            "'required' has no effect here: it applies to objects, and 'type' is \"array\" "
            "(move it into 'items', whose objects it was probably meant for)",
        )
    ]


@pytest.mark.parametrize(
    ("schema", "keyword", "message"),
    [
        (
            {"minimum": 10, "maximum": 5},
            "minimum",
            "minimum 10 is above maximum 5: no number is valid here (swap them, or correct one)",
        ),
        (
            {"exclusiveMinimum": 5, "maximum": 5},
            "exclusiveMinimum",
            "exclusiveMinimum 5 and maximum 5 leave no number between them (for exactly 5 "
            "write 'const', else widen the range)",
        ),
        (
            {"minimum": 2.5, "exclusiveMaximum": 2.5},
            "minimum",
            "minimum 2.5 and exclusiveMaximum 2.5 leave no number between them (for exactly "
            "2.5 write 'const', else widen the range)",
        ),
        (
            {"$schema": D4, "minimum": 5, "exclusiveMinimum": True, "maximum": 5},
            "minimum",
            "minimum 5 (exclusiveMinimum: true) and maximum 5 leave no number between them "
            "(for exactly 5 write 'const', else widen the range)",
        ),
        (
            {"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2},
            "exclusiveMinimum",
            "no integer lies between exclusiveMinimum 1 and exclusiveMaximum 2, and 'type' "
            "is 'integer': widen the range, or allow 'number'",
        ),
        (
            {"minLength": 3, "maxLength": 2},
            "minLength",
            "minLength 3 is above maxLength 2: no string is valid here (swap them, or correct one)",
        ),
        (
            {"minItems": 4, "maxItems": 1},
            "minItems",
            "minItems 4 is above maxItems 1: no array is valid here (swap them, or correct one)",
        ),
        (
            {"minProperties": 2, "maxProperties": 1},
            "minProperties",
            "minProperties 2 is above maxProperties 1: no object is valid here (swap them, "
            "or correct one)",
        ),
        (
            {"contains": {"type": "string"}, "minContains": 3, "maxContains": 2},
            "minContains",
            "minContains 3 is above maxContains 2: no array is valid here (swap them, or "
            "correct one)",
        ),
        (
            {"required": ["a", "b", "c"], "maxProperties": 2},
            "maxProperties",
            "maxProperties 2 is below the 3 names 'required' lists: no object is valid here "
            "(raise maxProperties, or require fewer)",
        ),
        (
            {"enum": []},
            "enum",
            "'enum' is empty, so no value is valid here: list the allowed values, or remove 'enum'",
        ),
        (
            {"type": "string", "pattern": "[^\\s\\S]"},
            "pattern",
            "pattern '[^\\\\s\\\\S]' matches no string, so no string is valid here: correct "
            "the pattern",
        ),
    ],
)
def test_contradictions_are_found_nested_with_their_pointer(schema, keyword, message):
    nested = {"type": "object", "properties": {"a b/c": {"items": schema}}}
    if "$schema" in schema:
        nested["$schema"] = schema.pop("$schema")
    assert found(nested) == [(f"/properties/a b~1c/items/{keyword}", keyword, message)]


def test_bounds_that_leave_room_are_fine():
    fine = [
        {"minimum": 5, "maximum": 5},
        {"type": "integer", "minimum": 1, "maximum": 1.5},
        {"exclusiveMinimum": 1, "exclusiveMaximum": 1.5},
        {"minLength": 2, "maxLength": 2, "minItems": 0, "maxItems": 0},
        {"$schema": D4, "minimum": 5, "maximum": 5, "exclusiveMinimum": False},
        {"enum": [None]},
        {"pattern": "^$"},
    ]
    for schema in fine:
        assert found(schema) == [], schema
    assert lint({"required": ["a", "a"], "maxProperties": 1}, None) == ()  # (names, counted)


def test_a_pattern_property_name_that_matches_nothing():
    schema = {"patternProperties": {"^ok$": {}, "x[^\\d\\D]": {}}}
    assert found(schema) == [
        (
            "/patternProperties/x[^\\d\\D]",
            "patternProperties",
            "pattern 'x[^\\\\d\\\\D]' matches no property name, so this entry never applies: "
            "correct the pattern",
        )
    ]


def test_a_pattern_the_regex_engine_cannot_decide_is_not_reported():
    # (lookahead: matches nothing, but only a backtracking engine reads it)
    assert found({"pattern": "(?!x)x"}) == []


# -- keywords of another draft ---------------------------------------------------------


def test_another_drafts_keywords_get_one_record_each_naming_the_fix():
    draft7 = {"$schema": D7, "prefixItems": [True], "dependentRequired": {"a": ["b"]}}
    records = found(draft7)
    assert [(location, keyword) for location, keyword, _ in records] == [
        ("/prefixItems", "prefixItems"),
        ("/dependentRequired", "dependentRequired"),
    ]
    assert records[0][2].endswith(
        "in Draft 7 write 'items' as an array of schemas ('additionalItems' for the items "
        'after them), or declare Draft 2020-12 with "$schema": '
        '"https://json-schema.org/draft/2020-12/schema"'
    )
    assert "in Draft 7 write 'dependencies' (a name → a list of names)" in records[1][2]
    modern = {
        "prefixItems": [{"type": "string"}],
        "additionalItems": False,
        "dependencies": {"a": ["b"]},
        "properties": {"tree": {"$recursiveRef": "#"}},
    }
    assert found(modern) == [
        (
            "/additionalItems",
            "additionalItems",
            "unknown keyword 'additionalItems' is ignored: it is a keyword of Draft 2019-09, "
            "not of Draft 2020-12 (this schema's draft); in Draft 2020-12 'items' beside "
            "'prefixItems' takes its place, or declare Draft 2019-09 with \"$schema\": "
            '"https://json-schema.org/draft/2019-09/schema"',
        ),
        (
            "/dependencies",
            "dependencies",
            "'dependencies' is not a keyword of Draft 2020-12 (this schema's draft) and is "
            "ignored; in Draft 2020-12 write 'dependentRequired' (a name → a list of names) "
            "or 'dependentSchemas' (a name → a schema), or declare Draft 7 with \"$schema\": "
            '"http://json-schema.org/draft-07/schema#"',
        ),
        (
            "/properties/tree/$recursiveRef",
            "$recursiveRef",
            "'$recursiveRef' is not a keyword of Draft 2020-12 (this schema's draft) and is "
            "ignored; in Draft 2020-12 write '$dynamicRef', or declare Draft 2019-09 with "
            '"$schema": "https://json-schema.org/draft/2019-09/schema"',
        ),
    ]
    # in their own drafts, they are the keywords they were
    assert found({"$schema": D7, "dependencies": {"a": ["b"]}, "items": [True]}) == []
    assert found({"$schema": D2019, "items": [True], "additionalItems": False}) == []


@pytest.mark.parametrize(
    ("schema", "hint"),
    [
        (
            {"items": [{"type": "string"}], "additionalItems": False},
            "in Draft 2020-12 write it as 'prefixItems' (and 'additionalItems' as 'items')",
        ),
        (
            {"minimum": 1, "exclusiveMinimum": True},
            "'exclusiveMinimum': true is Draft 4's form: since Draft 6 write the bound itself",
        ),
        (
            {"$schema": D4, "exclusiveMaximum": 5},
            "in Draft 4 write 'maximum': 5 with 'exclusiveMaximum': true",
        ),
    ],
)
def test_another_drafts_form_that_the_metaschema_refuses_names_the_fix(schema, hint):
    with pytest.raises(InvalidSchemaError) as caught:
        Schema.of(schema)
    assert hint in (caught.value.hint or "")


# -- references to nowhere in definitions nothing uses -----------------------------------

UNUSED_DANGLING = {
    "type": "object",
    "properties": {"n": {"$ref": "#/$defs/count"}},
    "$defs": {
        "count": {"type": "integer"},
        "old": {"$ref": "#/$defs/gone"},
        "older": {"properties": {"x": {"$ref": "#nowhere"}}},
    },
}


def test_a_reference_to_nowhere_in_an_unused_definition_is_a_warning_not_an_error():
    spec = Schema.of(UNUSED_DANGLING)  # (it was an InvalidSchemaError)
    assert found(UNUSED_DANGLING) == [
        (
            "/$defs/old/$ref",
            "$ref",
            "$ref '#/$defs/gone' points to nothing in this document: harmless while nothing "
            "uses /$defs/old, an error as soon as something does (add the missing definition, "
            "or correct the reference)",
        ),
        (
            "/$defs/older/properties/x/$ref",
            "$ref",
            "$ref '#nowhere' points to nothing in this document: harmless while nothing uses "
            "/$defs/older, an error as soon as something does (add the missing definition, or "
            "correct the reference)",
        ),
    ]
    assert spec.issues({"n": 3}) == []
    assert [issue.keyword for issue in spec.issues({"n": "3"})] == ["type"]
    compiled = jsonmode.compile_schema(UNUSED_DANGLING)
    assert compiled.accepts('{"n": 3}')
    assert not compiled.accepts('{"n": "3"}')
    jm = JsonMode(lambda prompt: '{"n": "7"}', mode="repair")
    with pytest.warns(JsonModeWarning):
        assert jm.generate("x", UNUSED_DANGLING) == {"n": 7}


def test_a_used_reference_to_nowhere_and_a_file_reference_are_still_errors():
    used = {**UNUSED_DANGLING, "properties": {"n": {"$ref": "#/$defs/old"}}}
    with pytest.raises(InvalidSchemaError, match="'#/\\$defs/gone' does not resolve") as caught:
        Schema.of(used)
    assert caught.value.schema_path == "/$defs/old/$ref"
    outside = {"$defs": {"unused": {"$ref": "other.json"}}}
    with pytest.raises(InvalidSchemaError, match=r"'other\.json' does not resolve"):
        Schema.of(outside)


# -- order, bounds, robustness -------------------------------------------------------------


def test_findings_come_in_document_order_with_the_spelling_ones():
    schema = {
        "minimum": 3,
        "requried": ["a"],
        "maximum": 1,
        "properties": {"a": {"enum": [], "tyep": "string"}},
        "enum": [],
    }
    assert [location for location, _, _ in found(schema)] == [
        "/minimum",
        "/requried",
        "/enum",
        "/properties/a/enum",
        "/properties/a/tyep",
    ]


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_the_cap_holds_over_every_kind_of_finding():
    many = {"properties": {f"p{i}": {"enum": [], "typo": 1} for i in range(5_000)}}
    started = time.perf_counter()
    records = Schema.of(many).warnings
    assert time.perf_counter() - started < 5
    assert len(records) == MAX_WARNINGS + 1
    assert records[-1] == SchemaWarning("", "", f"{10_000 - MAX_WARNINGS} more findings not listed")


@pytest.mark.parametrize(
    "raw",
    [
        {"minimum": "3", "maximum": None, "enum": "x", "required": "a", "pattern": 3},
        {"required": ["a", 3, None], "additionalProperties": False, "properties": []},
        {"patternProperties": {"(": {}}, "required": ["z"], "additionalProperties": False},
        {"minimum": True, "maximum": False, "type": ["integer", 3]},
        {"$schema": 3, "properties": {"a": {"minLength": 10**400, "maxLength": 1.5}}},
        True,
        [],
        None,
    ],
)
def test_lint_never_raises_on_what_the_metaschema_would_refuse(raw):
    lint(raw, None)


def _bench_documents(step: int) -> list[Any]:
    documents = []
    for path in sorted((DATA / "jsonschemabench" / "schemas").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for index, line in enumerate(lines):
                if index % step == 0:
                    documents.append(json.loads(json.loads(line)["json_schema"]))
    return documents


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_real_world_schemas_are_almost_never_flagged():
    """JSONSchemaBench (GitHub, Kubernetes, Snowplow, Glaive function schemas), one in
    three, linted as written: never an exception, and the new checks flag under 1 % of
    them (what they flag were real mistakes when this was written: ``required`` on an
    array, ``dependencies`` in a document read as Draft 2020-12)."""
    documents = _bench_documents(3)
    assert len(documents) > 2_000
    flagged = 0
    started = time.perf_counter()
    for document in documents:
        declared = document.get("$schema") if isinstance(document, dict) else None
        records = lint(document, declared if isinstance(declared, str) else None)
        new = [
            r
            for r in records
            if r.location and r.severity == "warning" and not r.message.startswith("unknown")
        ]
        flagged += bool(new)
        assert {r.keyword for r in new} <= {"required", "dependencies"}, new
    assert flagged / len(documents) < 0.01
    assert time.perf_counter() - started < 20  # (about 2 s on a quiet machine)


def test_the_official_test_suite_is_linted_without_a_crash():
    root = DATA / "json-schema-test-suite" / "tests"
    dialects = {"draft2020-12": None, "draft7": D7}
    kinds: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.json")):
        draft = path.relative_to(root).parts[0]
        for group in json.loads(path.read_text(encoding="utf-8")):
            for record in lint(group["schema"], dialects.get(draft)):
                if not record.message.startswith("unknown"):
                    kinds.add((draft, record.keyword))
    # what the suite writes on purpose: an empty enum, minContains above maxContains,
    # and Draft 2020-12 documents checking that "dependencies" is ignored
    assert kinds == {
        ("draft2020-12", "enum"),
        ("draft2020-12", "minContains"),
        ("draft2020-12", "dependencies"),
    }


# -- the façade ---------------------------------------------------------------------------

CONTRADICTORY = {"type": "object", "properties": {"age": {"minimum": 130, "maximum": 0}}}
CONTRADICTION = (
    "/properties/age/minimum: minimum 130 is above maximum 0: no number is valid here "
    "(swap them, or correct one)"
)


class Counted:
    """A function backend that counts its calls."""

    def __init__(self, reply: str = "{}") -> None:
        self.calls = 0
        self.reply = reply

    def __call__(self, prompt: Any) -> str:
        self.calls += 1
        return self.reply


def test_the_facade_warns_once_per_schema_with_the_category():
    backend = Counted()
    jm = JsonMode(backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jm.run("x", CONTRADICTORY)
        jm.run("x", CONTRADICTORY)
        jm.map(["x", "y"], CONTRADICTORY, progress=False)
    assert [(type(w.message), str(w.message)) for w in caught] == [(JsonModeWarning, CONTRADICTION)]
    assert caught[0].filename == __file__
    assert backend.calls == 4


def test_strict_schema_refuses_before_any_backend_call_in_every_verb():
    backend = Counted()
    jm = JsonMode(backend, strict_schema=True)
    attempts = [
        lambda: jm.run("x", CONTRADICTORY),
        lambda: jm.generate("x", CONTRADICTORY),
        lambda: list(jm.stream("x", CONTRADICTORY)),
        lambda: list(jm.stream_items("x", CONTRADICTORY)),
        lambda: jm.map(["x", "y"], CONTRADICTORY, progress=False),
        lambda: asyncio.run(jm.arun("x", CONTRADICTORY)),
        lambda: asyncio.run(jm.amap(["x"], CONTRADICTORY, progress=False)),
    ]
    for attempt in attempts:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (and no warning instead)
            with pytest.raises(InvalidSchemaError) as caught:
                attempt()
        error = caught.value
        assert error.message == (
            f"the schema has 1 lint warning and strict_schema refuses it: {CONTRADICTION}"
        )
        assert error.schema_path == "/properties/age/minimum"
        assert error.warnings == Schema.of(CONTRADICTORY).warnings
        assert "leave strict_schema off" in (error.hint or "")
    assert backend.calls == 0


def test_strict_schema_through_the_decorator():
    backend = Counted("5")

    @jsonmode.structured(backend, strict_schema=True)
    def guess() -> Annotated[int, Field(ge=10, le=5)]:
        """Guess."""

    with pytest.raises(InvalidSchemaError, match="/minimum: minimum 10 is above maximum 5"):
        guess()
    assert backend.calls == 0


def test_strict_schema_passes_clean_schemas_and_notes():
    backend = Counted('{"a": "x"}')
    jm = JsonMode(backend, strict_schema=True)
    nullable = {"type": "object", "properties": {"a": {"type": "string", "nullable": True}}}
    assert jm.generate("x", nullable) == {"a": "x"}
    assert backend.calls == 1


def test_strict_schema_is_checked():
    with pytest.raises(UsageError, match="strict_schema must be True or False"):
        JsonMode(Counted(), strict_schema="yes")
    with pytest.raises(UsageError, match="did you mean 'strict_schema'"):
        JsonMode(Counted(), strict_shema=True)


# -- the command line -------------------------------------------------------------------

COMMAND = [sys.executable, "-m", "jsonmode.cli"]


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def contradictory(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "person.json"
    schema = {**CONTRADICTORY, "requried": ["age"]}
    path.write_text(json.dumps(schema), encoding="utf-8")
    return str(path)


LINES = [
    "jsonmode: warning: /requried: unknown keyword 'requried' (did you mean 'required'?)",
    f"jsonmode: warning: {CONTRADICTION}",
]


def test_lint_prints_the_findings_on_stdout_and_exits_1(contradictory: str):
    done = cli("lint", contradictory)
    assert done.returncode == 1
    assert done.stdout.splitlines() == LINES
    assert done.stderr == f"jsonmode: {contradictory}: 2 warnings\n"
    piped = cli("lint", "-", stdin=pathlib.Path(contradictory).read_text())
    assert (piped.returncode, piped.stdout) == (1, done.stdout)
    assert piped.stderr == "jsonmode: stdin: 2 warnings\n"


def test_lint_json_output(contradictory: str):
    done = cli("lint", "--json", contradictory)
    assert done.returncode == 1
    assert json.loads(done.stdout) == [
        {
            "location": "/requried",
            "keyword": "requried",
            "severity": "warning",
            "message": "unknown keyword 'requried' (did you mean 'required'?)",
        },
        {
            "location": "/properties/age/minimum",
            "keyword": "minimum",
            "severity": "warning",
            "message": CONTRADICTION.split(": ", 1)[1],
        },
    ]


def test_lint_exits_0_for_a_clean_schema_or_notes_only(tmp_path: pathlib.Path):
    clean = cli("lint", "-", stdin=json.dumps({"type": "object", "required": []}))
    assert (clean.returncode, clean.stdout, clean.stderr) == (
        0,
        "",
        "jsonmode: stdin: no warnings\n",
    )
    nullable = json.dumps({"properties": {"a": {"type": "string", "nullable": True}}})
    noted = cli("lint", "-", stdin=nullable)
    assert noted.returncode == 0
    assert noted.stdout.startswith("jsonmode: note: /properties/a/nullable: ")
    assert noted.stderr == "jsonmode: stdin: 0 warnings, 1 note\n"


def test_lint_exits_2_for_a_bad_schema_or_file(tmp_path: pathlib.Path):
    refused = cli("lint", "-", stdin=json.dumps({"items": [{"type": "string"}]}))
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert "jsonmode: error: InvalidSchemaError: not a valid JSON Schema: at /items" in (
        refused.stderr
    )
    assert "'prefixItems'" in refused.stderr  # the hint names the fix
    missing = cli("lint", str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert "cannot read schema file" in missing.stderr


def test_strict_schema_flag_refuses_in_validate_and_repair(contradictory: str):
    for command in ("validate", "repair"):
        done = cli(command, "--schema", contradictory, "--strict-schema", stdin="{}")
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        first, hint = done.stderr.splitlines()
        assert first == (
            "jsonmode: error: InvalidSchemaError: the schema has 2 lint warnings and "
            f"--strict-schema refuses it: {LINES[0].removeprefix('jsonmode: warning: ')}; "
            f"{CONTRADICTION}"
        )
        assert hint == (
            "jsonmode: hint: fix each one as its message says, or drop --strict-schema to be "
            "warned only"
        )
    warned = cli("validate", "--schema", contradictory, stdin="{}")
    assert (warned.returncode, warned.stderr.splitlines()) == (0, LINES)


def test_strict_schema_flag_refuses_batch_and_generate_before_any_call(
    contradictory: str, tmp_path: pathlib.Path
):
    source = tmp_path / "in.jsonl"
    source.write_text('{"prompt": "a"}\n', encoding="utf-8")
    target = tmp_path / "out.jsonl"
    closed = ["--model", "openai/test", "--api-base", "http://127.0.0.1:9/v1", "--timeout", "5"]
    files = ["--input", str(source), "--output", str(target)]
    batch = cli("batch", "--schema", contradictory, "--strict-schema", *closed, *files)
    assert batch.returncode == 2, batch.stderr  # (a call to that port: 3)
    assert "--strict-schema refuses it" in batch.stderr
    assert not target.exists()
    generate = cli("generate", "--schema", contradictory, "--strict-schema", *closed, "Ada")
    assert generate.returncode == 2, generate.stderr
    assert "--strict-schema refuses it" in generate.stderr
    grammar = cli("validate", "--regex", "a+", "--strict-schema", stdin="aa")
    assert grammar.returncode == 2
    assert "--strict-schema is for JSON output (--schema)" in grammar.stderr
