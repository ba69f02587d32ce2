"""TypeScript types as the schema (issue 44 item 1): ``Schema.from_typescript``, ``.ts``
paths in ``Schema.of``, ``--schema x.ts --type T`` in the CLI.

The conversion of each construct (pinned schemas and verdicts), a typed error with line
and column for each construct that does not convert, the bounds on hostile input, and
the converted schemas driving the tiers: constrained (a random local model), prompted
(the scripted OpenAI-compatible server) and the CLI (subprocesses). The comparison with
ts-json-schema-generator is tests/test_typescript_reference.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.openai_server import OpenAIServer, Reply

import jsonmode
from jsonmode import (
    BudgetExceededError,
    InvalidSchemaError,
    JsonMode,
    Schema,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.schema import ts_source, ts_types
from jsonmode.schema.typescript import convert

CORPUS = Path(__file__).resolve().parent / "corpus" / "typescript"
README = CORPUS / "readme.ts"


def schema_of(source: str, root: str | None = None) -> dict[str, Any]:
    """The converted JSON Schema, without ``$schema``."""
    converted, _ = convert(source, root)
    assert converted.pop("$schema") == "https://json-schema.org/draft/2020-12/schema"
    return converted


def type_of(text: str) -> dict[str, Any]:
    """The schema of one type expression (as the alias ``T``)."""
    return schema_of(f"export type T = {text};")


# -- conversions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("string", {"type": "string"}),
        ("number", {"type": "number"}),
        ("boolean", {"type": "boolean"}),
        ("null", {"type": "null"}),
        ("any", {}),
        ("unknown", {}),
        ("object", {"type": "object"}),
        ("Date", {"type": "string", "format": "date-time"}),
        ('"a\\"b\\u0041\\u{1F600}"', {"type": "string", "const": 'a"bA\U0001f600'}),
        ("'single'", {"type": "string", "const": "single"}),
        ("-1.5", {"type": "number", "const": -1.5}),
        ("0x1F", {"type": "number", "const": 31}),
        ("1_000", {"type": "number", "const": 1000}),
        ("true", {"type": "boolean", "const": True}),
        ('"a" | "b"', {"type": "string", "enum": ["a", "b"]}),
        ('"a" | 1 | null', {"type": ["string", "number", "null"], "enum": ["a", 1, None]}),
        ('"a" | string', {"type": "string"}),
        ("string | null", {"type": ["string", "null"]}),
        ("string | undefined", {"type": "string"}),
        ("(string | number) | boolean", {"type": ["string", "number", "boolean"]}),
        ("string[]", {"type": "array", "items": {"type": "string"}}),
        ("Array<number>", {"type": "array", "items": {"type": "number"}}),
        ("readonly string[]", {"type": "array", "items": {"type": "string"}}),
        ("ReadonlyArray<boolean>", {"type": "array", "items": {"type": "boolean"}}),
        ("[]", {"type": "array", "minItems": 0, "maxItems": 0}),
        (
            "[string, number?]",
            {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "number"}],
                "minItems": 1,
                "maxItems": 2,
            },
        ),
        (
            "[name: string, ...rest: number[]]",
            {
                "type": "array",
                "prefixItems": [{"type": "string", "title": "name"}],
                "minItems": 1,
                "items": {"type": "number"},
            },
        ),
        (
            "Record<string, number>",
            {"type": "object", "additionalProperties": {"type": "number"}},
        ),
        (
            'Record<"a" | "b", boolean>',
            {
                "type": "object",
                "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        ),
        (
            "{ [key: string]: string }",
            {"type": "object", "additionalProperties": {"type": "string"}},
        ),
        (
            "{ readonly a: string; b?: number; c: string | undefined }",
            {
                "type": "object",
                "properties": {
                    "a": {"type": "string"},
                    "b": {"type": "number"},
                    "c": {"type": "string"},
                },
                "required": ["a"],
                "additionalProperties": False,
            },
        ),
    ],
)
def test_each_construct_converts(text: str, expected: dict[str, Any]) -> None:
    assert type_of(text) == expected


def test_interfaces_extends_and_references_use_defs() -> None:
    source = """
    interface Named { name: string }
    interface Aged { age: number }
    /** A person. */
    export interface Person extends Named, Aged { email?: string; friends: Person[]; pet: Pet }
    type Pet = { kind: "cat" | "dog" };
    """
    assert schema_of(source) == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "number"},
            "email": {"type": "string"},
            "friends": {"type": "array", "items": {"$ref": "#"}},
            "pet": {"$ref": "#/$defs/Pet"},
        },
        "required": ["name", "age", "friends", "pet"],
        "additionalProperties": False,
        "description": "A person.",
        "$defs": {
            "Pet": {
                "type": "object",
                "properties": {"kind": {"type": "string", "enum": ["cat", "dog"]}},
                "required": ["kind"],
                "additionalProperties": False,
            }
        },
    }


def test_intersections_merge_objects_and_distribute_unions() -> None:
    source = """
    type A = { a: string };
    export type T = A & ({ k: "x"; x: number } | { k: "y" });
    """
    spec = Schema.of(schema_of(source))
    assert spec.json_schema["anyOf"][0]["required"] == ["a", "k", "x"]
    assert spec.conforms({"a": "1", "k": "x", "x": 2})
    assert spec.conforms({"a": "1", "k": "y"})
    assert not spec.conforms({"a": "1", "k": "y", "x": 2})
    assert not spec.conforms({"k": "y"})


def test_enums_number_on_as_typescript_counts() -> None:
    source = """
    export enum Level { Low, Mid, High = 10, Higher }
    enum Color { Red = "red", Blue = "blue" }
    const enum One { Only = -1 }
    export interface T { level: Level; color: Color; one: One; red: Color.Red }
    """
    converted = schema_of(source, "T")
    assert converted["$defs"] == {
        "Level": {"type": "number", "enum": [0, 1, 10, 11]},
        "Color": {"type": "string", "enum": ["red", "blue"]},
        "One": {"type": "number", "const": -1},
    }
    assert converted["properties"]["red"] == {"type": "string", "const": "red"}


def test_generics_substitute_their_arguments() -> None:
    source = """
    interface User { id: number; name?: string }
    interface Page<T, M = string> { items: T[]; meta: M }
    export interface T { users: Page<User>; flags: Page<boolean, number>; draft: Partial<User>;
      summary: Pick<User, "id">; rest: Omit<User, "id">; full: Required<User> }
    """
    converted = schema_of(source)
    assert converted["properties"]["users"] == {"$ref": "#/$defs/Page-User-string"}
    assert converted["$defs"]["Page-boolean-number"]["properties"] == {
        "items": {"type": "array", "items": {"type": "boolean"}},
        "meta": {"type": "number"},
    }
    assert "required" not in converted["properties"]["draft"]
    assert converted["properties"]["summary"]["properties"] == {"id": {"type": "number"}}
    assert converted["properties"]["rest"]["properties"] == {"name": {"type": "string"}}
    assert converted["properties"]["full"]["required"] == ["id", "name"]


def test_jsdoc_gives_description_and_keywords() -> None:
    source = """
    export interface T {
      /**
       * The SKU,
       * on two lines.
       *
       * @pattern ^[A-Z]+$
       * @minLength 2
       * @maxLength 8
       * @format hostname
       * @title Code
       * @default "AB"
       * @examples ["AB", "CD"]
       * @deprecated
       */
      sku: string;
      /** @asType integer
       * @minimum 0
       * @exclusiveMaximum 10
       * @example 3
       * @example not json
       */
      count: number;
      /** @minItems 1
       * @maxItems 2
       * @exclusiveMinimum 1
       * @maximum 5
       * @default 'x'
       * @see elsewhere (an unknown tag: ignored)
       */
      list: number[];
    }
    """
    properties = schema_of(source)["properties"]
    assert properties["sku"] == {
        "type": "string",
        "description": "The SKU, on two lines.",
        "pattern": "^[A-Z]+$",
        "minLength": 2,
        "maxLength": 8,
        "format": "hostname",
        "title": "Code",
        "default": "AB",
        "examples": ["AB", "CD"],
        "deprecated": True,
    }
    assert properties["count"] == {
        "type": "integer",
        "minimum": 0,
        "exclusiveMaximum": 10,
        "examples": [3],
    }
    assert properties["list"] == {
        "type": "array",
        "items": {"type": "number"},
        "minItems": 1,
        "maxItems": 2,
        "exclusiveMinimum": 1,
        "maximum": 5,
        "default": "x",
    }


def test_the_readme_example_converts_and_checks() -> None:
    spec = Schema.of(README, name="Ticket")
    assert spec.name == "Ticket"
    assert spec.json_schema["properties"]["priority"] == {"$ref": "#/$defs/Priority"}
    assert spec.json_schema["$defs"]["Priority"] == {
        "type": "string",
        "enum": ["low", "normal", "high", "urgent"],
        "description": "How urgent a ticket is.",
    }
    cases = json.loads(README.with_suffix(".json").read_text(encoding="utf-8"))
    assert all(spec.check(value).ok for value in cases["valid"])
    assert not any(spec.check(value).ok for value in cases["invalid"])


def test_from_typescript_names_the_schema_after_the_root() -> None:
    source = README.read_text(encoding="utf-8")
    spec = Schema.from_typescript(source, root="Customer")
    assert spec.name == "Customer"
    assert spec.conforms({"name": "a", "email": "a@b.org"})
    assert Schema.from_typescript("export type One = string;").name == "One"


def test_a_ts_path_needs_one_exported_type_or_a_name(tmp_path: Path) -> None:
    one = tmp_path / "one.ts"
    one.write_text("interface Hidden { a: string }\nexport interface Shown { h: Hidden }\n")
    assert Schema.of(one).name == "Shown"
    with pytest.raises(InvalidSchemaError, match=r"name the root type.*exports 3 types") as info:
        Schema.of(README)
    assert str(README) in str(info.value)
    assert "--type" in (info.value.hint or "")
    with pytest.raises(InvalidSchemaError, match="exports no type"):
        Schema.from_typescript("interface A { a: string }")
    with pytest.raises(InvalidSchemaError, match=r"no type named `Nope`.*declared: "):
        Schema.of(one, name="Nope")


# -- what does not convert: typed errors with line and column -----------------------------


@pytest.mark.parametrize(
    ("body", "error", "column", "words", "text"),
    [
        ("T extends string ? 1 : 2", UnsupportedSchemaError, 1, "conditional", "T extends"),
        ("{ [K in Keys]: string }", UnsupportedSchemaError, 3, "mapped types", "[K in Keys]"),
        ("keyof Other", UnsupportedSchemaError, 1, "`keyof`", "keyof Other"),
        ("typeof value", UnsupportedSchemaError, 1, "`typeof`", "typeof value"),
        ('Other["a"]', UnsupportedSchemaError, 1, "indexed access", 'Other["a"]'),
        ("`id-${string}`", UnsupportedSchemaError, 1, "template literal", "`id-${string}`"),
        ("(a: string) => void", UnsupportedSchemaError, 1, "function types", "(a: string)"),
        ("{ run(): void }", UnsupportedSchemaError, 3, "methods", "run(): void"),
        ("Promise<string>", UnsupportedSchemaError, 1, "library type", "Promise"),
        ("NonNullable<string | null>", UnsupportedSchemaError, 1, "type evaluation", "NonNull"),
        ("Missing", InvalidSchemaError, 1, "unknown type `Missing`", "Missing"),
        ("Imported", UnsupportedSchemaError, 1, "imported from another file", "Imported"),
        ("Klass", UnsupportedSchemaError, 1, "is a class", "Klass"),
        ("symbol", UnsupportedSchemaError, 1, "no JSON value", "symbol"),
        ("bigint", UnsupportedSchemaError, 1, "no JSON value", "bigint"),
        ("10n", UnsupportedSchemaError, 1, "bigint", "10n"),
        ("never", UnsupportedSchemaError, 1, "accepts no value", "never"),
        ("undefined", UnsupportedSchemaError, 1, "`undefined`", "undefined"),
        ("{ [k: number]: string }", UnsupportedSchemaError, 3, "index signatures", "[k: number]"),
        ("{ a: string; a: number }", InvalidSchemaError, 14, "declared twice", "a: number"),
        ("Record<number, string>", UnsupportedSchemaError, 1, "`Record` keys", "Record"),
        ("Partial<string>", UnsupportedSchemaError, 1, "object types only", "Partial"),
        ("string & { brand: 1 }", UnsupportedSchemaError, 1, "object types only", "string"),
        ("Other<string>", InvalidSchemaError, 1, "takes 0 type argument", "Other"),
        ("Box", InvalidSchemaError, 1, "needs 1 type argument", "Box"),
        ("[a?: string, b: number]", InvalidSchemaError, 14, "required element after", "b: number"),
        ("[...string[], number]", UnsupportedSchemaError, 2, "rest element before", "...string[]"),
        ("Color.Purple", InvalidSchemaError, 1, "not a member", "Color.Purple"),
        ("Name.Space", UnsupportedSchemaError, 1, "qualified names", "Name.Space"),
        ("readonly Other", UnsupportedSchemaError, 1, "arrays and tuples", "readonly Other"),
    ],
)
def test_unsupported_constructs_raise_with_line_and_column(
    body: str, error: type[Exception], column: int, words: str, text: str
) -> None:
    source = (
        'import { Imported } from "./other";\n'
        "class Klass {}\n"
        "interface Other { a: string }\n"
        "interface Box<T> { t: T }\n"
        "enum Color { Red }\n"
        f"export type T =\n{body};\n"
    )
    with pytest.raises(error) as info:
        Schema.from_typescript(source, "T")
    assert type(info.value) is error
    message = str(info.value)
    assert f"line 7, column {column}: " in message, message
    assert words in message
    assert text in message


@pytest.mark.parametrize(
    ("source", "error", "where", "words"),
    [
        ("export interface T {\n  a: string\n  b: }\n", InvalidSchemaError, "line 3", "syntax"),
        ("export type T = { a: string ", InvalidSchemaError, "line 1", "syntax error"),
        (
            "export type T = string;\nexport type T = number;\n",
            UnsupportedSchemaError,
            "line 2",
            "declared again (first at line 1, column 8)",
        ),
        (
            "export enum E { A = 1 << 2 }",
            UnsupportedSchemaError,
            "line 1, column 21",
            "computed enum",
        ),
        (
            'export enum E { A = "a", B }',
            UnsupportedSchemaError,
            "line 1, column 26",
            "needs a value",
        ),
        ("export enum E {}", UnsupportedSchemaError, "line 1, column 8", "empty enum"),
        (
            "/** @minimum ten */\nexport type T = number;",
            InvalidSchemaError,
            "line 1, column 5",
            "must be a number",
        ),
        (
            "/** @maxLength -1 */\nexport type T = string;",
            InvalidSchemaError,
            "line 1, column 5",
            "non-negative integer",
        ),
        (
            "/**\n * @nullable\n */\nexport type T = string;",
            UnsupportedSchemaError,
            "line 2, column 4",
            "`@nullable`",
        ),
        (
            "/** @asType float */\nexport type T = number;",
            InvalidSchemaError,
            "line 1, column 5",
            "not a JSON Schema type",
        ),
        (
            "export interface T { [k: string]: string; [j: string]: number }",
            UnsupportedSchemaError,
            "line 1, column 43",
            "second index signature",
        ),
        (
            "export interface T extends Array<string> {}",
            UnsupportedSchemaError,
            "line 1, column 28",
            "object types only",
        ),
        (
            'export type T = { ["a" + "b"]: string };',
            UnsupportedSchemaError,
            "line 1, column 19",
            "computed property",
        ),
    ],
)
def test_bad_sources_raise_with_line_and_column(
    source: str, error: type[Exception], where: str, words: str
) -> None:
    with pytest.raises(error) as info:
        convert(source)
    assert type(info.value) is error
    assert where in str(info.value)
    assert words in str(info.value)


def test_a_recursive_intersection_is_refused() -> None:
    with pytest.raises(UnsupportedSchemaError, match=r"line 1, column 17: .*extends or intersects"):
        convert("export type T = T & { a: string };")


# -- bounds: hostile input gets a typed error, never a RecursionError --------------------


def test_a_source_over_the_size_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonmode.limits, "MAX_SCHEMA_CHARS", 100)
    with pytest.raises(BudgetExceededError, match="TypeScript source"):
        convert("export type T = string;" + " " * 100)


@pytest.mark.parametrize(
    "body",
    [
        "(" * 5000 + "string" + ")" * 5000,
        "Array<" * 3000 + "string" + ">" * 3000,
        "{ a: " * 3000 + "string" + " }" * 3000,
        "string" + "[]" * 5000,
    ],
    ids=["parentheses", "arrays", "objects", "brackets"],
)
def test_deep_nesting_is_a_budget_error(body: str) -> None:
    with pytest.raises(BudgetExceededError, match="TypeScript type nesting") as info:
        convert(f"export type T = {body};")
    assert "line 1" in str(info.value)


def test_node_text_read_after_the_deadline_is_no_crash() -> None:
    # The tree keeps the parse's read callable and Node.text calls it again; it used to
    # check the deadline there too, and tree-sitter 0.26 crashes (SIGSEGV) on an error
    # from that call: a deadline passing during a conversion killed the process.
    # Run in a child, so a crash fails this test rather than the whole run.
    code = """
import time
from jsonmode import budget
from jsonmode.schema import ts_source
with budget.deadline(0.2):
    module = ts_source.parse('export type T = "a" | "b";')
    time.sleep(0.3)
    print(module.types["T"].node.text.decode())
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == 'type T = "a" | "b";'


def test_a_long_union_is_no_recursion() -> None:
    members = " | ".join(f'"v{index}"' for index in range(20_000))
    assert len(type_of(members)["enum"]) == 20_000


def test_node_text_is_sliced_from_the_source_not_read_through_the_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Node.text on a tree parsed from a callable calls it again, 64 KiB a call: a
    # 20 000-member union spent ~3 of its 6.5 s copying chunks, past the compile deadline
    # on a loaded machine. The converter slices the source instead.
    real = ts_source.parser
    after_parse: list[int] = []

    class Counting:
        def parse(self, read: Any) -> Any:
            def counted(offset: int, point: Any) -> bytes:
                after_parse.append(offset)
                return read(offset, point)  # type: ignore[no-any-return]

            tree = real().parse(counted)
            after_parse.clear()
            return tree

    monkeypatch.setattr(ts_source, "parser", Counting)
    members = " | ".join(f'"v{index}"' for index in range(200))
    assert type_of(f"{members} | never")["enum"][:2] == ["v0", "v1"]
    assert after_parse == []


def test_too_many_declarations_is_a_budget_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ts_source, "MAX_DECLARATIONS", 50)
    source = "".join(f"type A{index} = string;\n" for index in range(51))
    with pytest.raises(BudgetExceededError, match="TypeScript declarations"):
        convert(source + "export type T = A0;")


def test_a_generic_that_never_ends_is_a_budget_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BudgetExceededError, match="TypeScript type nesting"):
        convert("export type T = Grow<string>;\ninterface Grow<X> { next: Grow<X[]> }")
    wide = ", ".join(["X"] * 64)
    with pytest.raises(BudgetExceededError, match="type argument size"):
        convert(f"export type T = Wide<1>;\ninterface Wide<X> {{ a: Wide<[{wide}]> }}")
    monkeypatch.setattr(ts_types, "MAX_DEFINITIONS", 50)
    with pytest.raises(BudgetExceededError, match=r"\$defs entries"):
        convert("export type T = Two<1>;\ninterface Two<X> { a: Two<[X]>; b: Two<{ x: X }> }")


def test_a_long_chain_of_references_is_no_recursion() -> None:
    count = 1500
    source = "".join(f"type A{index} = A{index + 1};\n" for index in range(count))
    converted, _ = convert(source + f"type A{count} = string;\n", "A0")
    assert len(converted["$defs"]) == count


def test_an_exploding_intersection_is_a_budget_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ts_types, "MAX_BRANCHES", 8)
    union = '({ a: "1" } | { b: "2" })'
    with pytest.raises(BudgetExceededError, match="intersection branches"):
        convert("export type T = " + " & ".join([union] * 4) + ";")


def test_text_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(InvalidSchemaError, match="lone surrogate"):
        convert("export type T = '\ud800';")


# -- the extra is optional ----------------------------------------------------------------


def test_import_jsonmode_does_not_import_tree_sitter() -> None:
    code = "import jsonmode, sys; assert 'tree_sitter' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_missing_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tree_sitter_typescript", None)
    ts_source.language.cache_clear()
    try:
        with pytest.raises(UsageError, match="typescript extra") as info:
            Schema.from_typescript("export type A = string;")
        assert info.value.hint == 'pip install "jsonmode[typescript]"'
    finally:
        ts_source.language.cache_clear()


# -- the tiers ----------------------------------------------------------------------------

CONSTRAINED_TS = """
export enum Language { English = "English", French = "French", German = "German" }

/** A person, as the demo's constrained schema has it. */
export interface Person {
  /**
   * @minLength 1
   * @maxLength 16
   */
  name: string;
  /**
   * @asType integer
   * @minimum 0
   * @maximum 130
   */
  age: number;
  /** @pattern ^[a-z]{1,8}@[a-z]{1,8}\\.org$ */
  email: string | null;
  /**
   * @minItems 1
   * @maxItems 3
   */
  languages: Language[];
  verified: boolean;
}
"""


def test_constrained_tier_decodes_a_typescript_schema() -> None:
    import torch

    from jsonmode.demo import random_local_model

    model, tokenizer = random_local_model(seed=1)
    spec = Schema.from_typescript(CONSTRAINED_TS, "Person")
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=256, do_sample=True)
    torch.manual_seed(0)
    result = jm.run("Extract the person.", spec)
    assert result.tier == "constrained"
    assert [attempt.outcome for attempt in result.attempts] == ["valid"]
    assert spec.check(result.data).ok
    assert result.data["languages"][0] in ("English", "French", "German")


def test_native_tier_sends_the_converted_schema(openai_server: Any) -> None:
    cases = json.loads(README.with_suffix(".json").read_text(encoding="utf-8"))
    good = cases["valid"][0]
    server: OpenAIServer = openai_server(Reply(json.dumps(good)))
    jm = JsonMode(
        "openai/test-model", api_base=server.base_url, api_key="unused", timeout=5.0, tier="native"
    )
    spec = Schema.of(README, name="Ticket")
    result = jm.run("Triage: login fails for Ada.", spec)
    assert (result.tier, result.data) == ("native", good)
    sent = server.requests[0]["response_format"]["json_schema"]
    assert sent["schema"] == spec.json_schema
    assert sent["name"] == "Ticket"


def test_prompted_tier_sends_the_schema_and_reasks(
    openai_server: Any,
) -> None:
    cases = json.loads(README.with_suffix(".json").read_text(encoding="utf-8"))
    good, bad = cases["valid"][0], cases["invalid"][0]
    server: OpenAIServer = openai_server(Reply(json.dumps(bad)), Reply(json.dumps(good)))
    jm = JsonMode("openai/test-model", api_base=server.base_url, api_key="unused", timeout=5.0)
    result = jm.run("Triage: login fails for Ada.", Schema.of(README, name="Ticket"))
    assert result.tier == "prompted"
    assert result.data == good
    assert [attempt.outcome for attempt in result.attempts] == ["schema_violation", "valid"]
    prompt = json.dumps(server.requests[0]["messages"])
    assert "urgent" in prompt
    assert "confidence" in prompt
    assert "priority" in json.dumps(server.requests[1]["messages"][-1])  # the re-ask's issue


# -- the CLI ------------------------------------------------------------------------------


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False")
    return subprocess.run(
        [sys.executable, "-m", "jsonmode.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_cli_validate_and_repair_take_a_typescript_schema(tmp_path: Path) -> None:
    cases = json.loads(README.with_suffix(".json").read_text(encoding="utf-8"))
    good, bad = json.dumps(cases["valid"][0]), json.dumps(cases["invalid"][0])
    ok = cli("validate", "--schema", str(README), "--type", "Ticket", stdin=good)
    assert (ok.returncode, json.loads(ok.stdout)) == (0, cases["valid"][0]), ok.stderr
    refused = cli("validate", "--schema", str(README), "--type", "Ticket", stdin=bad)
    assert refused.returncode == 1
    assert "$.priority" in refused.stderr
    fixed = cli("repair", "--schema", str(README), "--type", "Customer", stdin="{'name': 'A',")
    assert fixed.returncode == 1  # (no email: nothing to repair it into)
    one = tmp_path / "one.ts"
    one.write_text("export interface One { n: number }\n")
    repaired = cli("repair", "--schema", str(one), stdin='{"n": 1,}')
    assert (repaired.returncode, json.loads(repaired.stdout)) == (0, {"n": 1}), repaired.stderr
    unnamed = cli("validate", "--schema", str(README), stdin=good)
    assert unnamed.returncode == 2
    assert "name the root type" in unnamed.stderr
    assert "--type NAME" in unnamed.stderr
    wrong = cli("validate", "--schema", str(README), "--type", "Nope", stdin=good)
    assert wrong.returncode == 2
    assert "no type named `Nope`" in wrong.stderr
    json_schema = tmp_path / "s.json"
    json_schema.write_text("{}")
    misuse = cli("validate", "--schema", str(json_schema), "--type", "T", stdin="1")
    assert misuse.returncode == 2
    assert "--type names a type of a TypeScript" in misuse.stderr
    broken = tmp_path / "broken.ts"
    broken.write_text("export interface B {\n  a: (x: number) => void;\n}\n")
    error = cli("validate", "--schema", str(broken), stdin="{}")
    assert error.returncode == 2
    assert f"schema file {broken}: line 2, column 6: function types" in error.stderr


def test_cli_lint_takes_a_typescript_schema(tmp_path: Path) -> None:
    clean = cli("lint", str(README), "--type", "Ticket")
    assert (clean.returncode, clean.stdout) == (0, ""), clean.stderr
    unnamed = cli("lint", str(README))
    assert unnamed.returncode == 2
    assert "--type NAME" in unnamed.stderr
    bounds = tmp_path / "bounds.ts"
    bounds.write_text(
        "export interface B {\n  /** @minimum 5\n   * @maximum 1 */\n  n: number;\n}\n"
    )
    found = cli("lint", str(bounds), "--type", "B")
    assert found.returncode == 1, found.stderr
    assert "/properties/n/minimum: minimum 5 is above maximum 1" in found.stdout
    piped = cli("lint", "-", "--type", "B", stdin="{}")
    assert piped.returncode == 2
    assert "--type names a type of a TypeScript file, not of stdin" in piped.stderr


def test_cli_generate_with_a_typescript_schema(openai_server: Any) -> None:
    good = {"name": "Ada", "email": "ada@example.com"}
    server: OpenAIServer = openai_server(Reply(json.dumps(good)))
    done = cli(
        "generate",
        "--model",
        "openai/test-model",
        "--api-base",
        server.base_url,
        "--schema",
        str(README),
        "--type",
        "Customer",
        "--timeout",
        "20",
        "Who wrote in?",
    )
    assert (done.returncode, json.loads(done.stdout)) == (0, good), done.stderr
    system = server.requests[0]["messages"][0]["content"]
    assert '"email":{"type":"string","format":"email"}' in system  # the converted schema


@pytest.mark.parametrize("command", ["generate", "batch", "validate", "repair"])
def test_every_schema_command_documents_type(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from jsonmode.cli.parser import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args([command, "--help"])
    assert "--type TYPE" in capsys.readouterr().out
    args = parser.parse_args(
        [command, "--schema", "t.ts", "--type", "Root"]
        + (["--input", "i", "--output", "o"] if command == "batch" else [])
        + (["prompt"] if command == "generate" else [])
    )
    assert args.type == "Root"


def test_a_property_named_ref_keeps_its_definitions() -> None:
    source = 'interface Inner { x: number }\nexport interface T { "$ref": Inner }'
    spec = Schema.from_typescript(source)
    assert spec.conforms({"$ref": {"x": 1}})
    assert not spec.conforms({"$ref": {"x": "1"}})


def test_source_and_root_must_be_text() -> None:
    with pytest.raises(UsageError, match="must be text"):
        Schema.from_typescript(b"export type T = string;")  # type: ignore[arg-type]


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_parsing_stops_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    import jsonmode.budget

    monkeypatch.setattr(jsonmode.budget, "DEFAULT_SECONDS", 0.05)
    source = "export type T = " + "(" * 2_000_000 + "string" + ")" * 2_000_000 + ";"
    started = time.perf_counter()
    with pytest.raises(BudgetExceededError, match="time"):
        convert(source)
    # (tree-sitter alone takes ~5 s on this text: it is stopped as it reads, not after)
    assert time.perf_counter() - started < 2.0
