"""References stay inside the schema document; reference cycles are typed errors.

A ``$ref`` that does not resolve inside the document (a file, a URL in any case or
scheme, a URN, a relative path that leaves the document) is an InvalidSchemaError
naming it, raised before any I/O on every path: parse, the façade, compile_schema
and the CLI. Real 127.0.0.1 listeners count the connections the library makes: none.
"""

import contextlib
import json
import pathlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import jsonmode
from jsonmode import (
    InvalidSchemaError,
    JsonMode,
    JsonModeError,
    SchemaViolationError,
    compile_schema,
    parse,
)
from jsonmode.cli import main as cli_main
from jsonmode.schema.core import Schema
from jsonmode.schema.refs import resolve_references

SECRET = "TOPSECRET-7f3a9c"
# jsonschema warns (DeprecationWarning) before it fetches a remote reference; the
# suite turns warnings into errors, which would stop that fetch by accident. Let it
# warn, as in production, so the tests see what a user would get.
production_warnings = pytest.mark.filterwarnings("ignore::DeprecationWarning")
FAST = 2.0  # seconds: refusing a reference does no I/O, so it is immediate


class Listener:
    """A 127.0.0.1 TCP listener that counts connections; ``answer=False`` accepts and
    never answers (a client without a timeout would hang on it)."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.connections = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            if self.answer:
                body = json.dumps({"const": SECRET}).encode()
                conn.sendall(
                    b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                conn.close()
            else:
                self.held.append(conn)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture
def answering() -> Iterator[Listener]:
    listener = Listener(answer=True)
    yield listener
    listener.close()


@pytest.fixture
def silent() -> Iterator[Listener]:
    listener = Listener(answer=False)
    yield listener
    listener.close()


@pytest.fixture
def secret_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"const": SECRET}))
    return path


def foreign_schemas(port: int, secret: pathlib.Path) -> list[tuple[dict[str, Any], str]]:
    """(schema, the reference it must be refused for), many spellings."""
    host = f"127.0.0.1:{port}"
    uri = secret.as_uri()  # file:///tmp/.../secret.json
    return [
        ({"$ref": uri}, uri),
        ({"$ref": "FILE" + uri[4:]}, "FILE" + uri[4:]),
        ({"$ref": "File" + uri[4:]}, "File" + uri[4:]),
        ({"$ref": "file:" + str(secret)}, "file:" + str(secret)),
        ({"$ref": str(secret)}, str(secret)),  # an absolute path
        ({"$ref": f"http://{host}/s.json"}, f"http://{host}/s.json"),
        ({"$ref": f"HTTP://{host}/s.json"}, f"HTTP://{host}/s.json"),
        ({"$ref": f"HtTpS://{host}/s.json#/x"}, f"HtTpS://{host}/s.json#/x"),
        ({"$ref": f"https://{host}/s.json"}, f"https://{host}/s.json"),
        ({"$ref": f"//{host}/s.json"}, f"//{host}/s.json"),
        ({"$ref": f"ftp://{host}/s.json"}, f"ftp://{host}/s.json"),
        ({"$ref": "data:application/json,{}"}, "data:application/json,{}"),
        ({"$ref": "urn:example:unknown"}, "urn:example:unknown"),
        ({"$ref": "urn:uuid:deadbeef-1234-ffff-ffff-4321feebdaed"}, "urn:uuid:deadbeef"),
        ({"$ref": "other.json"}, "other.json"),
        ({"$ref": "../outside.json#/$defs/a"}, "../outside.json"),
        ({"$ref": f"http%3A%2F%2F{host}%2Fs.json"}, "http%3A%2F%2F"),
        ({"$ref": "%66ile://" + str(secret)}, "%66ile://"),
        ({"$id": f"http://{host}/root.json", "$ref": "item.json"}, "item.json"),
        ({"$id": f"http://{host}/root.json", "items": {"$ref": "item.json"}}, "item.json"),
        (
            {"$defs": {"a": {"$id": f"http://{host}/a/", "properties": {"x": {"$ref": "b"}}}}},
            "b",
        ),
        ({"properties": {"a": {"$id": f"http://{host}/d/", "$ref": "x.json"}}}, "x.json"),
        ({"$dynamicRef": f"http://{host}/s.json#meta"}, f"http://{host}/s.json#meta"),
        ({"not": {"anyOf": [{"$ref": f"http://{host}/n.json"}]}}, f"http://{host}/n.json"),
        ({"$defs": {"unused": {"$ref": f"http://{host}/u.json"}}}, f"http://{host}/u.json"),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#", "$ref": f"http://{host}/7"},
            f"http://{host}/7",
        ),
        (
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "id": f"http://{host}/four.json",
                "properties": {"a": {"$ref": "other.json"}},
            },
            "other.json",
        ),
        ({"$ref": "#/$defs/missing"}, "#/$defs/missing"),
        ({"$ref": "#nowhere"}, "#nowhere"),
    ]


def _entry_points(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "parse-strict": lambda: jsonmode.parse("1", schema, "strict"),
        "parse-repair": lambda: jsonmode.parse('"1"', schema, "repair"),
        "run": lambda: JsonMode(lambda prompt: "1", max_attempts=2).run("x", schema),
        "compile": lambda: compile_schema(schema),
    }


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
@production_warnings
def test_foreign_references_are_refused_before_any_io(answering, secret_file):
    for schema, ref in foreign_schemas(answering.port, secret_file):
        for name, call in _entry_points(schema).items():
            started = time.perf_counter()
            with pytest.raises(InvalidSchemaError) as caught:
                call()
            assert time.perf_counter() - started < FAST, (name, schema)
            error = caught.value
            assert ref in str(error), (name, schema, str(error))
            assert error.schema_path.endswith(("$ref", "$dynamicRef")), error.schema_path
            assert SECRET not in f"{error!s}{error!r}{error.hint}", (name, schema)
    assert answering.connections == 0


@production_warnings
def test_a_silent_server_is_never_contacted(silent, secret_file):
    started = time.perf_counter()
    for schema, _ in foreign_schemas(silent.port, secret_file):
        for call in _entry_points(schema).values():
            with pytest.raises(InvalidSchemaError):
                call()
    assert time.perf_counter() - started < 30
    assert silent.connections == 0


@production_warnings
def test_the_secret_reaches_no_message_and_no_prompt(secret_file, answering):
    prompts: list[str] = []

    def backend(prompt: str) -> str:
        prompts.append(prompt)
        return "1"

    for ref in (secret_file.as_uri(), f"http://127.0.0.1:{answering.port}/s.json"):
        schema = {"type": "object", "properties": {"a": {"$ref": ref}}, "required": ["a"]}
        for mode in ("strict", "repair"):
            for call in (
                lambda schema=schema, mode=mode: jsonmode.parse('{"a": 1}', schema, mode),
                lambda schema=schema, mode=mode: JsonMode(backend, mode=mode, max_attempts=2).run(
                    "x", schema
                ),
            ):
                with pytest.raises(JsonModeError) as caught:
                    call()
                assert isinstance(caught.value, InvalidSchemaError)
                assert SECRET not in str(caught.value)
    assert not any(SECRET in prompt for prompt in prompts)
    assert answering.connections == 0


@production_warnings
def test_cli_refuses_a_file_reference(tmp_path, secret_file, capsys):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"properties": {"a": {"$ref": secret_file.as_uri()}}}))
    document = tmp_path / "in.json"
    document.write_text('{"a": 1}')
    status = cli_main(["validate", "--schema", str(schema), str(document)])
    out, err = capsys.readouterr()
    assert status != 0
    assert "InvalidSchemaError" in err
    assert secret_file.as_uri() in err
    assert "Traceback" not in err
    assert SECRET not in out + err


# -- references inside the document keep working -----------------------------------------

ARRAY_OF_ITEM = {"type": "array", "maxItems": 3}
IN_DOCUMENT: list[tuple[dict[str, Any], list[Any], list[Any]]] = [
    (  # $anchor
        {**ARRAY_OF_ITEM, "$defs": {"a": {"$anchor": "item", "type": "integer"}}}
        | {"items": {"$ref": "#item"}},
        [[1, 2]],
        [["x"], [1.5]],
    ),
    (  # $id-relative reference to a subschema of the same document
        {
            "$id": "https://example.com/root.json",
            **ARRAY_OF_ITEM,
            "$defs": {"a": {"$id": "item.json", "type": "integer"}},
            "items": {"$ref": "item.json"},
        },
        [[1, 2]],
        [["x"]],
    ),
    (  # nested $id bases: "b.json" inside "a/" is https://example.com/a/b.json
        {
            "$id": "https://example.com/root.json",
            "type": "object",
            "$defs": {
                "A": {
                    "$id": "a/",
                    "$defs": {"B": {"$id": "b.json", "type": "string"}},
                    "type": "object",
                    "properties": {"p": {"$ref": "b.json"}},
                },
                "C": {"$id": "b.json", "type": "integer"},
            },
            "properties": {"q": {"$ref": "a/"}, "r": {"$ref": "a/b.json"}, "s": {"$ref": "b.json"}},
        },
        [{"q": {"p": "x"}, "r": "y", "s": 3}],
        [{"q": {"p": 1}}, {"r": 1}, {"s": "x"}],
    ),
    (  # a JSON pointer inside a nested resource is relative to that resource
        {
            "type": "object",
            "$defs": {
                "inner": {
                    "$id": "https://example.com/inner.json",
                    "$defs": {"n": {"type": "integer"}},
                    "type": "object",
                    "properties": {"v": {"$ref": "#/$defs/n"}},
                },
                "n": {"type": "string"},
            },
            "properties": {"in": {"$ref": "https://example.com/inner.json"}},
        },
        [{"in": {"v": 1}}],
        [{"in": {"v": "x"}}],
    ),
    (  # draft 7: a plain-name $id is an anchor
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"a": {"$id": "#item", "type": "integer"}},
            "type": "array",
            "items": {"$ref": "#item"},
        },
        [[1]],
        [["x"]],
    ),
    (  # draft 4: "id"
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "definitions": {"a": {"id": "#item", "type": "integer"}},
            "type": "array",
            "items": {"$ref": "#item"},
        },
        [[1]],
        [["x"]],
    ),
    (  # percent-encoded and escaped pointers
        {"$defs": {"a b": {"type": "integer"}, "c/d": {"type": "string"}}}
        | {"type": "array", "prefixItems": [{"$ref": "#/$defs/a%20b"}, {"$ref": "#/$defs/c~1d"}]},
        [[1, "x"]],
        [["x", 1]],
    ),
    (  # a reference to a boolean schema
        {"$defs": {"no": False}, "type": "object", "properties": {"a": {"$ref": "#/$defs/no"}}},
        [{"b": 1}],
        [{"a": 1}],
    ),
    (  # the bundled metaschemas
        {"$ref": "https://json-schema.org/draft/2020-12/schema"},
        [{"type": "string"}, True],
        [{"type": 5}, {"minLength": -1}],
    ),
    (
        {"properties": {"s": {"$ref": "http://json-schema.org/draft-07/schema#"}}},
        [{"s": {"type": "integer"}}],
        [{"s": {"type": "nope"}}],
    ),
    (  # $dynamicRef inside the document
        {
            "$dynamicAnchor": "node",
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$dynamicRef": "#node"}}},
        },
        [{"kids": [{"kids": []}]}],
        [{"kids": [{"kids": 1}]}],
    ),
]


@pytest.mark.parametrize(("schema", "good", "bad"), IN_DOCUMENT)
def test_in_document_references_validate(schema, good, bad):
    spec = Schema.of(schema)
    for value in good:
        assert spec.issues(value) == [], value
        assert jsonmode.parse(json.dumps(value), schema).data == value
    for value in bad:
        assert not spec.conforms(value), value
        assert spec.issues(value), value
        with pytest.raises(jsonmode.SchemaViolationError):
            jsonmode.parse(json.dumps(value), schema)


@pytest.mark.parametrize(("schema", "good", "bad"), IN_DOCUMENT[:8])
def test_the_decoder_compiles_anchors_and_id_references(schema, good, bad):
    compiled = compile_schema(schema)
    for value in good:
        assert compiled.accepts(json.dumps(value)), value
    for value in bad:
        assert not compiled.accepts(json.dumps(value)), value


def test_repair_coerces_through_anchors():
    schema = IN_DOCUMENT[0][0]
    parsed = jsonmode.parse('["1", "2"]', schema, "repair")
    assert parsed.data == [1, 2]


def test_the_callers_schema_is_not_mutated():
    schema = json.loads(json.dumps(IN_DOCUMENT[2][0]))
    before = json.dumps(schema)
    spec = Schema.of(schema)
    assert json.dumps(schema) == before
    # What the decoder, coercion and providers see: plain pointers from the root.
    text = json.dumps(spec.json_schema)
    assert '"$ref": "#/$defs/A"' in text
    assert '"$ref": "#/$defs/A/$defs/B"' in text
    assert '"$ref": "#/$defs/C"' in text


# -- cycles --------------------------------------------------------------------------

CYCLES: list[dict[str, Any]] = [
    {"$ref": "#"},
    {"allOf": [{"$ref": "#"}]},
    {"anyOf": [{"type": "string"}, {"$ref": "#"}]},
    {"oneOf": [{"type": "string"}, {"$ref": "#"}]},
    {"not": {"$ref": "#"}},
    {"if": {"$ref": "#"}},
    {"if": {"type": "string"}, "then": {"$ref": "#"}, "else": {"$ref": "#"}},
    {"dependentSchemas": {"a": {"$ref": "#"}}},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {
        "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}},
    },
    {
        "$defs": {
            "a": {"$anchor": "x", "$ref": "#y"},
            "b": {"$anchor": "y", "allOf": [{"$ref": "#x"}]},
        }
    },
    {"$id": "https://example.com/r.json", "$defs": {"a": {"$id": "a.json", "$ref": "r.json"}}}
    | {"$ref": "a.json"},
    {"$defs": {"loop": {"$ref": "#/$defs/loop"}}, "type": "string"},  # unused, still meaningless
    {"$dynamicAnchor": "n", "anyOf": [{"type": "null"}, {"$dynamicRef": "#n"}]},
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"a": {"allOf": [{"$ref": "#/definitions/a"}]}},
        "$ref": "#/definitions/a",
    },
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "dependencies": {"a": {"$ref": "#"}},
    },
]


@pytest.mark.parametrize("schema", CYCLES)
def test_cycles_that_never_descend_are_typed(schema):
    calls: list[str] = []

    def backend(prompt: str) -> str:
        calls.append(prompt)
        return "1"

    for call in (
        lambda: jsonmode.parse("1", schema, "strict"),
        lambda: jsonmode.parse('"1"', schema, "repair"),
        lambda: JsonMode(backend, max_attempts=2).run("x", schema),
        lambda: JsonMode(backend, mode="repair", max_attempts=2).generate("x", schema),
        lambda: compile_schema(schema),
    ):
        with pytest.raises(InvalidSchemaError, match="refers to itself"):
            call()
    assert calls == []


@pytest.mark.parametrize("schema", CYCLES[:3])
def test_cli_reports_a_cycle_without_a_traceback(schema, tmp_path, capsys):
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps(schema))
    document = tmp_path / "in.json"
    document.write_text("1")
    status = cli_main(["validate", "--schema", str(path), str(document)])
    out, err = capsys.readouterr()
    assert status != 0
    assert "refers to itself" in err
    assert "Traceback" not in err
    assert out == ""


TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["value"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}
LINKED = {
    "type": "object",
    "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}},
    "required": ["v", "next"],
}


def linked(depth: int, value: Any = 1) -> Any:
    node: Any = None
    for _ in range(depth):
        node = {"v": value, "next": node}
    return node


def test_recursion_through_the_value_keeps_working():
    tree = {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}
    assert jsonmode.parse(json.dumps(tree), TREE).data == tree
    fixed = jsonmode.parse(json.dumps(linked(5, "7")), LINKED, "repair")
    assert fixed.data == linked(5, 7)
    with pytest.raises(jsonmode.SchemaViolationError):
        jsonmode.parse('{"value": 1, "children": [{"value": "x"}]}', TREE)
    for schema, good, bad in (
        (TREE, tree, {"value": 1, "children": [{"children": []}]}),
        (LINKED, linked(3), linked(3, "x")),
    ):
        compiled = compile_schema(schema)
        assert compiled.accepts(json.dumps(good))
        assert not compiled.accepts(json.dumps(bad))


@pytest.mark.parametrize("depth", [300, 2_000, 20_000])
def test_a_very_deep_value_is_a_verdict_not_a_crash(depth):
    spec = Schema.of(LINKED)
    value = linked(depth)
    assert spec.conforms(value) in (True, False)
    issues = spec.issues(value)
    assert all(issue.keyword == "depth" for issue in issues)
    assert spec.check(value).ok is not bool(issues)
    deep_bad = linked(depth, "x")
    assert not spec.conforms(deep_bad)
    assert spec.issues(deep_bad)
    text = json.dumps(value) if depth <= 300 else None
    if text is not None:
        for mode in ("strict", "repair"):
            with contextlib.suppress(JsonModeError):
                jsonmode.parse(text, LINKED, mode)
    nested: Any = []
    for _ in range(depth):
        nested = [nested]
    spec = Schema.of({"type": "array", "items": {"$ref": "#"}})
    assert spec.conforms(nested) in (True, False)
    assert all(issue.keyword == "depth" for issue in spec.issues(nested))


def test_deep_text_through_parse_and_repair_is_typed():
    text = "[" * 900 + "]" * 900
    schema = {"type": "array", "items": {"$ref": "#"}}
    for mode in ("strict", "repair"):
        with contextlib.suppress(JsonModeError):
            jsonmode.parse(text, schema, mode)
    text = '{"v": "1", "next": ' * 400 + "null" + "}" * 400
    for mode in ("strict", "repair"):
        with contextlib.suppress(JsonModeError):
            jsonmode.parse(text, LINKED, mode)


@pytest.mark.parametrize(
    "schema",
    [
        {"required": ["a"], "$ref": "#/required"},
        {"minimum": 3, "$ref": "#/minimum"},
        {"$defs": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/a/type"}}},
    ],
)
def test_a_reference_to_something_not_a_schema_is_typed(schema):
    for call in _entry_points(schema).values():
        with pytest.raises(InvalidSchemaError, match="not a schema"):
            call()


# -- the decoder resolves every in-document reference (issue 26, item 6) -------------------

LIST = {  # a list whose item type the dynamic scope decides
    "$id": "list",
    "type": "array",
    "items": {"$dynamicRef": "#items"},
    "$defs": {"items": {"$dynamicAnchor": "items", "type": "integer"}},
}
DECODED: list[tuple[dict[str, Any], list[Any], list[Any]]] = [
    (  # URN base URI: a pointer and an anchor under it
        {
            "$id": "urn:uuid:deadbeef-1234-0000-0000-4321feebdaed",
            "properties": {
                "foo": {"$ref": "urn:uuid:deadbeef-1234-0000-0000-4321feebdaed#/$defs/bar"},
                "baz": {"$ref": "#item"},
            },
            "$defs": {"bar": {"type": "string"}, "i": {"$anchor": "item", "type": "integer"}},
        },
        [{"foo": "x", "baz": 1}],
        [{"foo": 1}, {"baz": "x"}],
    ),
    (  # a nested resource named by a URN
        {
            "type": "array",
            "items": {"$ref": "urn:example:str"},
            "$defs": {"s": {"$id": "urn:example:str", "type": "string"}},
        },
        [["a"]],
        [[1]],
    ),
    (  # the outermost $dynamicAnchor in the dynamic scope wins
        {
            "$id": "https://example.com/root",
            "$ref": "list",
            "$defs": {"foo": {"$dynamicAnchor": "items", "type": "string"}, "list": LIST},
        },
        [["a"]],
        [[1]],
    ),
    (  # none outside: the list's own
        {"$id": "https://example.com/root", "$ref": "list", "$defs": {"list": LIST}},
        [[1]],
        [["a"]],
    ),
    (  # a fragment that is a pointer, not an anchor name: a plain reference
        {
            "$id": "https://example.com/root",
            "$ref": "list",
            "$defs": {
                "foo": {"$dynamicAnchor": "items", "type": "string"},
                "list": {**LIST, "items": {"$dynamicRef": "#/$defs/items"}},
            },
        },
        [[1]],
        [["a"]],
    ),
    (  # the static target has an $anchor, not a $dynamicAnchor: a plain reference
        {
            "$id": "https://example.com/root",
            "$ref": "list",
            "$defs": {
                "foo": {"$dynamicAnchor": "items", "type": "string"},
                "list": {**LIST, "$defs": {"items": {"$anchor": "items", "type": "integer"}}},
            },
        },
        [[1]],
        [["a"]],
    ),
    (  # entered through if/then/else, merged in place: each branch's own scope
        {
            "$id": "https://example.com/main",
            "if": {"properties": {"kind": {"const": "n"}}, "required": ["kind"]},
            "then": {"$ref": "numbers"},
            "else": {"$ref": "strings"},
            "$defs": {
                "generic": {
                    "$id": "generic",
                    "properties": {"list": {"items": {"$dynamicRef": "#t"}}},
                    "$defs": {"t": {"$dynamicAnchor": "t"}},
                },
                "numbers": {
                    "$id": "numbers",
                    "$defs": {"t": {"$dynamicAnchor": "t", "type": "number"}},
                    "$ref": "generic",
                },
                "strings": {
                    "$id": "strings",
                    "$defs": {"t": {"$dynamicAnchor": "t", "type": "string"}},
                    "$ref": "generic",
                },
            },
        },
        [{"kind": "n", "list": [1.5]}, {"kind": "s", "list": ["a"]}],
        [{"kind": "n", "list": ["a"]}, {"kind": "s", "list": [1]}],
    ),
    (  # recursion through the dynamic anchor: a strict extension of an open tree
        {
            "$id": "https://example.com/strict-tree",
            "$dynamicAnchor": "node",
            "$ref": "tree",
            "unevaluatedProperties": False,
            "$defs": {
                "tree": {
                    "$id": "tree",
                    "$dynamicAnchor": "node",
                    "type": "object",
                    "properties": {
                        "data": True,
                        "children": {"type": "array", "items": {"$dynamicRef": "#node"}},
                    },
                }
            },
        },
        [{"children": [{"data": 1, "children": []}]}],
        [{"children": [{"daat": 1}]}, {"extra": 1}],
    ),
]


@pytest.mark.parametrize(("schema", "good", "bad"), DECODED)
def test_the_decoder_resolves_every_in_document_reference(schema, good, bad):
    compiled = compile_schema(schema)
    assert compiled.unenforced == ()
    for value in good:
        assert compiled.schema.conforms(value), value
        assert compiled.accepts(json.dumps(value)), value
    for value in bad:
        assert not compiled.schema.conforms(value), value
        assert not compiled.accepts(json.dumps(value)), value


def test_every_in_document_form_from_before_decodes_too():
    for schema, good, bad in IN_DOCUMENT:
        if "json-schema.org" in json.dumps(schema):
            continue  # a bundled metaschema: refused by the decoder (below)
        compiled = compile_schema(schema)
        for value in good:
            assert compiled.accepts(json.dumps(value)), (schema, value)
        for value in bad:
            assert not compiled.accepts(json.dumps(value)), (schema, value)


def test_a_bundled_metaschema_is_not_decoded():
    with pytest.raises(jsonmode.UnsupportedSchemaError, match="not a local pointer"):
        compile_schema({"$ref": "https://json-schema.org/draft/2020-12/schema"})


@pytest.mark.parametrize(
    ("schema", "ref"),
    [
        # an $id-relative reference that leaves the document
        (
            {"$id": "https://example.com/a/b.json", "properties": {"x": {"$ref": "../c.json"}}},
            "../c.json",
        ),
        # a URN the document does not define
        ({"$id": "urn:example:root", "items": {"$ref": "urn:example:other"}}, "urn:example:other"),
        # $dynamicRef to an anchor nowhere in the document
        ({"items": {"$dynamicRef": "#missing"}}, "#missing"),
        ({"$dynamicAnchor": "a", "items": {"$dynamicRef": "urn:example:x#a"}}, "urn:example:x#a"),
    ],
)
def test_adversarial_references_are_refused(schema, ref):
    with pytest.raises(InvalidSchemaError) as caught:
        compile_schema(schema)
    assert ref in str(caught.value)
    with pytest.raises(InvalidSchemaError):
        resolve_references(schema)


def test_dynamic_reference_cycles_are_refused_and_recursion_is_kept():
    with pytest.raises(InvalidSchemaError, match="refers to itself"):
        compile_schema({"$dynamicAnchor": "n", "allOf": [{"$dynamicRef": "#n"}]})
    compiled = compile_schema(
        {"$dynamicAnchor": "n", "type": "array", "items": {"$dynamicRef": "#n"}, "maxItems": 1}
    )
    assert compiled.unenforced == ()
    assert compiled.accepts("[[[]]]")
    assert not compiled.accepts("[[], []]")


def test_resolve_references_rewrites_a_copy():
    plain = {"$defs": {"a": {"type": "string"}}, "items": {"$ref": "#/$defs/a"}}
    assert resolve_references(plain).document is plain  # nothing to do
    schema = {
        "$id": "https://example.com/r",
        "$defs": {"a": {"$id": "a", "$anchor": "x", "type": "string"}},
        "properties": {"p": {"$ref": "a"}, "q": {"$ref": "a#x"}, "s": {"$dynamicRef": "a#x"}},
    }
    before = json.dumps(schema)
    resolved = resolve_references(schema)
    assert json.dumps(schema) == before
    props = resolved.document["properties"]
    assert props == {
        "p": {"$ref": "#/$defs/a"},
        "q": {"$ref": "#/$defs/a"},
        "s": {"$ref": "#/$defs/a"},  # an $anchor, not a $dynamicAnchor: static
    }
    assert resolved.names == ()


_D4 = "http://json-schema.org/draft-04/schema#"
OFF_POSITION = [
    ({"$ref": "#/x", "x": {"type": -1}}, "/x/type"),
    ({"$ref": "#/x", "x": {"anyOf": {"$ref": "#"}}}, "/x/anyOf"),
    ({"$ref": "#/x", "x": {"type": "array", "minItems": "a"}}, "/x/minItems"),
    ({"$ref": "#/x", "x": {"enum": 5}}, "/x/enum"),
    ({"$ref": "#/x", "x": {"required": 5}}, "/x/required"),
    ({"$ref": "#/x", "x": {"enum": [1], "maximum": {}}}, "/x/maximum"),
    ({"$ref": "#/x/y", "x": {"y": {"type": "foo"}}}, "/x/y/type"),
    # (draft 4 knows no $defs: the metaschema does not look there)
    ({"$schema": _D4, "$ref": "#/$defs/m", "$defs": {"m": {"type": 5}}}, "/$defs/m/type"),
]


@pytest.mark.parametrize(("schema", "where"), OFF_POSITION, ids=[w for _, w in OFF_POSITION])
def test_a_subschema_reached_off_the_keyword_positions_is_checked_too(
    schema: dict, where: str
) -> None:
    # Before: TypeError, ValueError, AttributeError or jsonschema's UnknownType from
    # the compiler and the validator, which read the target as a schema.
    with pytest.raises(InvalidSchemaError) as caught:
        Schema.of(schema)
    assert caught.value.schema_path == where
    with pytest.raises(InvalidSchemaError):
        parse("1", schema)


def test_valid_subschemas_off_the_keyword_positions_are_taken() -> None:
    schema = {"$ref": "#/x/y", "x": {"y": {"type": "integer", "minimum": 2}}}
    assert parse("3", schema).data == 3
    with pytest.raises(SchemaViolationError):
        parse("1", schema)
    draft_4 = {"$schema": _D4, "$ref": "#/$defs/m", "$defs": {"m": {"type": "string"}}}
    assert parse('"a"', draft_4).data == "a"
