"""Fuzzer findings: schemas, options, backend replies and grammars that once raised an
untyped exception (OverflowError, ValueError, TypeError, RecursionError). Each must
now succeed or raise a typed :class:`jsonmode.JsonModeError`."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import jsonmode
from jsonmode import JsonMode, parse
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.function import FunctionBackend
from jsonmode.decoding.compile.compiler import CompileOptions
from jsonmode.decoding.compiled import CompiledSchema, compile_schema
from jsonmode.decoding.ir import Alt, Call, Lit, Members, Rep, Seq
from jsonmode.errors import (
    InvalidSchemaError,
    OutputParseError,
    SchemaViolationError,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.schema.core import Schema

HUGE = 10**400  # an integer no double holds

# -- 1. integers beyond the double range in const / enum ------------------------------


@pytest.mark.parametrize("spelling", ["canonical", "complete"])
@pytest.mark.parametrize("value", [HUGE, -HUGE], ids=["huge", "-huge"])
def test_a_huge_integer_constant_compiles_to_its_digits(value: int, spelling: str) -> None:
    compiled = compile_schema({"const": value}, spelling=spelling)
    assert compiled.accepts(str(value))
    assert not compiled.accepts(str(value + 1))
    assert not compiled.accepts("1")


def test_a_huge_integer_in_enum_text_compiles() -> None:
    compiled = compile_schema('{"enum": [1' + "0" * 400 + ", 2]}")
    assert compiled.accepts("1" + "0" * 400)
    assert compiled.accepts("2")
    assert not compiled.accepts("1" + "0" * 399)


def test_a_huge_integer_constant_accepts_its_integral_float_spelling_when_complete() -> None:
    compiled = compile_schema({"const": HUGE}, spelling="complete")
    assert compiled.accepts(f"{HUGE}.0")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": HUGE},
        {"type": "integer", "maximum": -HUGE},
        {"type": "number", "minimum": HUGE},
        {"type": "number", "exclusiveMaximum": -HUGE},
        {"type": "number", "multipleOf": HUGE},
        {"type": "integer", "multipleOf": HUGE},
    ],
)
def test_huge_integer_bounds_compile(schema: dict[str, Any]) -> None:
    compile_schema(schema)  # no OverflowError


# -- 2. regular expressions Python's re refuses with OverflowError ---------------------


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "string", "pattern": "a{99999999999}"}, "/pattern"),
        ({"type": "object", "patternProperties": {"a{4294967296}": {}}}, "/patternProperties"),
        ({"type": "string", "pattern": "a{1,4294967296}"}, "/pattern"),
    ],
)
def test_a_pattern_with_an_overflowing_repetition_is_an_invalid_schema(
    schema: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidSchemaError, match="is not a 'regex'") as info:
        compile_schema(schema)
    assert info.value.schema_path.startswith(where)


@pytest.mark.parametrize(
    "draft",
    [
        "http://json-schema.org/draft-07/schema#",
        "http://json-schema.org/draft-04/schema#",
        "https://json-schema.org/draft/2019-09/schema",
    ],
)
def test_an_overflowing_pattern_is_invalid_in_older_drafts_too(draft: str) -> None:
    with pytest.raises(InvalidSchemaError, match="is not a 'regex'"):
        compile_schema({"$schema": draft, "type": "string", "pattern": "a{99999999999}"})


@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_output_with_an_overflowing_regex_does_not_conform_to_format_regex(mode: str) -> None:
    schema = {"type": "string", "format": "regex"}
    with pytest.raises(SchemaViolationError) as info:
        parse('"a{99999999999}"', schema, mode)  # type: ignore[arg-type]
    assert [issue.keyword for issue in info.value.issues] == ["format"]
    assert parse('"a{9}"', schema, mode).value == "a{9}"  # type: ignore[arg-type]


# -- 3. a malformed $schema URL --------------------------------------------------------


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1]x/", "https://[oops/schema"])
def test_a_malformed_schema_url_is_an_invalid_schema(url: str) -> None:
    with pytest.raises(InvalidSchemaError, match=r"\$schema") as info:
        compile_schema({"$schema": url})
    assert info.value.schema_path == "/$schema"


# -- 4. API misuse -----------------------------------------------------------------------


@pytest.mark.parametrize("text", [5, None, ["{}"], 1.5, {"a": 1}])
def test_accepts_takes_text_only(text: Any) -> None:
    with pytest.raises(UsageError, match="accepts"):
        compile_schema({}).accepts(text)


def test_accepts_still_takes_str_and_bytes() -> None:
    compiled = compile_schema({})
    assert compiled.accepts("1")
    assert compiled.accepts(b"1")
    assert compiled.accepts(bytearray(b"1"))


@pytest.mark.parametrize("text", [5, None, ["{}"], 1.5, {"a": 1}])
def test_parse_and_diagnose_take_text_only(text: Any) -> None:
    # Both raised an untyped TypeError (from re or json, or iterating None).
    with pytest.raises(UsageError, match=r"parse\(\) takes the model's output as str or bytes"):
        jsonmode.parse(text, {"type": "integer"})
    with pytest.raises(UsageError, match=r"diagnose\(\) takes the text"):
        jsonmode.compile_regex("a").diagnose(text)


def test_parse_reads_bytes_as_utf8_and_undecodable_bytes_are_bad_output() -> None:
    assert jsonmode.parse(b'{"a": "\xc3\xa9"}', {"type": "object"}).value == {"a": "\u00e9"}
    assert jsonmode.parse(bytearray(b"7"), {"type": "integer"}, "repair").value == 7
    with pytest.raises(OutputParseError, match=r"not UTF-8 text \(at byte 1\)"):
        jsonmode.parse(b"1\xff", {"type": "integer"})
    assert jsonmode.compile_regex("a").diagnose(b"a") is None


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_repeat", "5"),
        ("max_repeat", -1),
        ("max_repeat", True),
        ("max_repeat", 5.0),
        ("max_rule_states", None),
        ("max_rule_states", 0),
        ("max_whitespace", -1),
        ("max_whitespace", "40"),
        ("max_nesting_depth", 0),
        ("max_nesting_depth", 2.5),
        ("max_compile_seconds", 0),
        ("max_compile_seconds", -1.0),
        ("max_compile_seconds", math.nan),
        ("max_compile_seconds", "10"),
        ("max_compile_seconds", False),
        ("strict", "yes"),
        ("strict", 1),
        ("whitespace", None),
        ("spelling", 3),
        ("property_order", ["any"]),
    ],
)
def test_a_mistyped_compile_option_is_a_usage_error(option: str, value: Any) -> None:
    with pytest.raises(UsageError, match=option):
        compile_schema({"type": "array", "maxItems": 300}, **{option: value})
    with pytest.raises(UsageError, match=option):
        CompileOptions(**{option: value})


def test_reasonable_compile_options_are_kept() -> None:
    options = CompileOptions(
        max_repeat=0,
        max_whitespace=0,
        max_rule_states=3,
        max_nesting_depth=1,
        max_compile_seconds=1,
        strict=True,
    )
    assert options.max_compile_seconds == 1
    CompileOptions(max_compile_seconds=math.inf)


# -- 5. a backend Completion whose text is not text ------------------------------------


@pytest.mark.parametrize("text", [None, b"{}", 5, ["{}"]])
def test_a_completion_without_text_is_a_usage_error(text: Any) -> None:
    backend = lambda prompt: Completion(text)  # noqa: E731
    with pytest.raises(UsageError, match=r"Completion\.text"):
        JsonMode(backend, tier="prompted").run("p", {"type": "object"})


def test_an_async_completion_without_text_is_a_usage_error() -> None:
    async def backend(prompt: str) -> Completion:
        return Completion(None)  # type: ignore[arg-type]

    with pytest.raises(UsageError, match=r"Completion\.text"):
        asyncio.run(JsonMode(backend, tier="prompted").arun("p", {"type": "object"}))


def test_a_streamed_completion_without_text_is_a_usage_error() -> None:
    def pieces(prompt: str) -> Iterator[Any]:
        yield "{"
        yield Completion(None)  # type: ignore[arg-type]

    async def apieces(prompt: str) -> AsyncIterator[Any]:
        yield "{"
        yield Completion(None)  # type: ignore[arg-type]

    request = Request(({"role": "user", "content": "p"},), Schema.of({}))
    for fn in (pieces, apieces, lambda prompt: Completion(None)):  # type: ignore[arg-type]
        with pytest.raises(UsageError, match=r"Completion\.text"):
            list(FunctionBackend(fn).stream(request))
        with pytest.raises(UsageError, match=r"Completion\.text"):
            asyncio.run(_drain(FunctionBackend(fn).astream(request)))
        with pytest.raises(UsageError, match=r"Completion\.text"):
            list(JsonMode(fn, tier="prompted").stream("p", {"type": "object"}))


async def _drain(chunks: AsyncIterator[Any]) -> None:
    async for _ in chunks:
        pass


# -- 6. printing wide grammars -----------------------------------------------------------


@pytest.fixture(scope="module")
def wide() -> CompiledSchema:
    schema = {"type": "array", "prefixItems": [{"type": "integer"}] * 1000, "items": False}
    return compile_schema(schema)


def test_the_repr_of_a_wide_compiled_schema_is_a_short_summary(
    wide: CompiledSchema,
) -> None:
    text = repr(wide)
    assert text.startswith("<CompiledSchema ")
    assert len(text) < 1000
    assert len(str(wide)) < 1000


def test_a_wide_grammar_prints(wide: CompiledSchema) -> None:
    text = str(wide.grammar)
    calls = [name for rule in wide.grammar.rules for name in wide.grammar.calls(rule)]
    assert calls.count("integer") > 100  # (nested that deep: one optional suffix each)
    assert text.count(" integer") == calls.count("integer")
    assert text.count("( ") == text.count(" )")
    assert repr(wide.grammar).startswith("Grammar(root=")


def test_deep_expressions_print_and_repr_as_shallow_ones_do() -> None:
    shallow = Seq((Lit(b"["), Rep(Alt((Call("a"), Seq((Lit(b","), Call("b"))))), 0, 1)))
    assert str(shallow) == '"[" ( a | "," b )?'
    assert repr(shallow) == (
        "Seq(items=(Lit(data=b'['), Rep(item=Alt(options=(Call(rule='a'), "
        "Seq(items=(Lit(data=b','), Call(rule='b'))))), low=0, high=1)))"
    )
    members = Members(((Call("a"), True), (Call("b"), False)), Call("x"), Lit(b","), True)
    assert str(members) == "<any order: a , b? , x*>"
    assert repr(members) == (
        "Members(members=((Call(rule='a'), True), (Call(rule='b'), False)), "
        "extra=Call(rule='x'), sep=Lit(data=b','), any_order=True)"
    )
    assert repr(Alt((Call("a"),))) == "Alt(options=(Call(rule='a'),))"
    deep: Any = Call("leaf")
    for _ in range(5000):
        deep = Rep(Seq((Lit(b","), deep)), 0, 1)
    assert str(deep).count("leaf") == 1
    assert repr(deep).count("Rep(") == 5000


def test_the_summary_names_what_was_left_unenforced() -> None:
    compiled = compile_schema({"type": "number", "multipleOf": 3})
    assert "/multipleOf" in repr(compiled)
    assert json.dumps(list(compiled.unenforced))  # (still a plain tuple of pointers)


@pytest.mark.parametrize("draft", [None, "http://json-schema.org/draft-07/schema#"])
def test_a_divisor_past_the_double_range_is_judged_exactly(draft: str | None) -> None:
    # Before: OverflowError (float % int too large) from the compiled check and from
    # jsonschema's own multipleOf.
    schema: dict[str, object] = {"multipleOf": HUGE}
    if draft:
        schema["$schema"] = draft
    with pytest.raises(SchemaViolationError) as caught:
        parse("1.5", schema)
    assert caught.value.issues[0].keyword == "multipleOf"
    assert parse("0", schema).data == 0


def test_a_subschema_under_a_keyword_its_draft_does_not_know_is_refused_typed() -> None:
    # Draft 4 has no propertyNames: its metaschema lets any value through there, and
    # the compiler, which reads the keyword, raised TypeError on this one.
    draft_4 = {"$schema": "http://json-schema.org/draft-04/schema#"}
    with pytest.raises(UnsupportedSchemaError, match="could not be compiled"):
        compile_schema({**draft_4, "propertyNames": {"type": 0.5}})
