"""Numbers are JSON numbers and strings are Unicode text, on every path (issue 22, item 6).

Every number jsonmode returns lies within the IEEE-754 double range (integers inside
it exactly); anything beyond it (``1e400``, a 5 000-digit integer) is a typed
OutputParseError, never ``inf``, never an untyped ``ValueError``. A lone UTF-16
surrogate (escaped or raw) is never returned. Each path is checked: ``parse`` in both
modes for every schema form, ``generate`` (AttemptsExhaustedError keeps every
attempt), coercion, partial values, ``dumps`` and the command line.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.openai_server import OpenAIServer, Reply

from jsonmode import (
    AttemptsExhaustedError,
    InvalidSchemaError,
    JsonMode,
    JsonModeError,
    OutputParseError,
    SchemaViolationError,
    UsageError,
)
from jsonmode._json import StrictJSONError, dumps, loads_strict
from jsonmode.backends import ScriptedBackend
from jsonmode.repair.coerce import coerce
from jsonmode.repair.parse import parse
from jsonmode.repair.partial import parse_partial
from jsonmode.schema.core import Schema

MAX_NUMBER = sys.float_info.max  # the bound: the IEEE-754 double range
HUGE = "1" * 5000  # over Python's 4 300-digit int/str limit
LONG = "1" * 400  # under that limit, beyond the double range
EDGE = str(int(MAX_NUMBER))  # the largest integer accepted, 309 digits

# Texts that are strict JSON but hold a number beyond the double range.
OUT_OF_RANGE = {
    "huge_int": HUGE,
    "huge_negative_int": "-" + HUGE,
    "long_int": LONG,
    "edge_plus_one": str(int(MAX_NUMBER) + 1),
    "exponent": "1e400",
    "negative_exponent": "-1e400",
    "upper_exponent": "1E+999",
    "padded_exponent": "1e+0400",
    "huge_exponent": "1e99999999999999999999",
    "long_mantissa": LONG + ".5",
    "huge_mantissa": HUGE + ".0",
    "mantissa_and_exponent": "1" + "0" * 299 + "e99",
}
# Strict JSON strings that are not Unicode text: a surrogate without its partner.
LONE_SURROGATES = {
    "high": r'"\ud800"',
    "low": r'"\udc00"',
    "high_then_text": r'"\ud83dx"',
    "high_then_escape": r'"\ud800\u0041"',
    "two_highs": r'"\ud83d\ud83d"',
    "reversed_pair": r'"\ude00\ud83d"',
    "upper_hex": r'"\uDBFF"',
    "raw": '"\ud800"',
    "raw_pair": '"\ud83d\ude00"',  # two code points in a Python str: not one character
}


class Item(pydantic.BaseModel):
    value: float
    label: str = ""


def in_object(number: str) -> str:
    return '{"value": ' + number + ', "label": "x"}'


def texts_with_surrogate() -> dict[str, str]:
    """Each lone surrogate as the whole document, as a value and as a key."""
    out: dict[str, str] = {}
    for name, literal in LONE_SURROGATES.items():
        out[f"{name}-document"] = literal
        out[f"{name}-value"] = '{"value": 1, "label": ' + literal + "}"
        out[f"{name}-key"] = '{"value": 1, "label": "x", ' + literal + ": 2}"
        out[f"{name}-nested"] = '{"value": 1, "label": "x", "more": [[' + literal + "]]}"
    return out


SURROGATE_TEXTS = texts_with_surrogate()


def reject(text: str, schema: object, mode: str = "strict") -> OutputParseError:
    """``parse`` must raise OutputParseError: typed, retryable, carrying the raw text."""
    with pytest.raises(JsonModeError) as caught:
        parse(text, schema, mode)  # type: ignore[arg-type]
    assert isinstance(caught.value, OutputParseError), repr(caught.value)
    assert caught.value.raw == text
    return caught.value


# -- the strict reader ---------------------------------------------------------------


@pytest.mark.parametrize("number", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_strict_reader_rejects_numbers_beyond_the_double_range(number):
    for text in (number, in_object(number), f"[1, {number}]"):
        with pytest.raises(StrictJSONError, match="range"):
            loads_strict(text)


def test_strict_reader_keeps_integers_inside_the_range_exact():
    assert loads_strict(EDGE) == int(MAX_NUMBER)
    assert loads_strict("-" + EDGE) == -int(MAX_NUMBER)
    assert loads_strict("1" * 308) == int("1" * 308)
    assert loads_strict("12345678901234567890123") == 12345678901234567890123
    # Finite however it is spelled: negative zero, underflow to zero, the largest double.
    assert str(loads_strict("-0.0e9999")) == "-0.0"
    assert loads_strict("1e-400") == 0.0
    assert loads_strict("1.7976931348623157e308") == MAX_NUMBER


@pytest.mark.parametrize("text", SURROGATE_TEXTS.values(), ids=SURROGATE_TEXTS.keys())
def test_strict_reader_rejects_lone_surrogates(text):
    with pytest.raises(StrictJSONError, match="surrogate"):
        loads_strict(text)


def test_strict_reader_keeps_escaped_pairs_and_escaped_backslashes():
    assert loads_strict(r'"\ud83d\ude00"') == "\U0001f600"
    assert loads_strict(r'{"\uD83D\uDE00": "a\ud83d\ude00b"}') == {"\U0001f600": "a\U0001f600b"}
    assert loads_strict(r'"\\ud800"') == "\\ud800"  # a backslash, then text


# -- parse, both modes, every schema form ----------------------------------------------

NUMBER_SCHEMAS: dict[str, Any] = {
    "dict": {"type": "object", "properties": {"value": {"type": "number"}}},
    "bounded": {"type": "object", "properties": {"value": {"type": "number", "maximum": 10}}},
    "multiple": {"type": "object", "properties": {"value": {"multipleOf": 0.5}}},
    "text": json.dumps({"type": "object", "properties": {"value": {"type": "number"}}}),
    "pydantic": Item,
    "python_type": dict[str, Any],
}


@pytest.mark.parametrize("schema", NUMBER_SCHEMAS.values(), ids=NUMBER_SCHEMAS.keys())
@pytest.mark.parametrize("number", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_parse_rejects_out_of_range_numbers_typed(number, schema, mode):
    error = reject(in_object(number), schema, mode)
    assert "range" in error.message


@pytest.mark.parametrize("number", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_a_bare_out_of_range_number_is_rejected_by_number_and_integer_schemas(number):
    for schema in ({"type": "number"}, {"type": "integer"}, {"maximum": 10}, {"minimum": 0}):
        reject(number, schema, "strict")
        reject(number, schema, "repair")


@pytest.mark.parametrize("number", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
@pytest.mark.parametrize(
    "wrap",
    [
        "Here it is: {doc} Hope that helps.",
        "```json\n{doc}\n```",
        "Sure!\n```\n{doc}\n```\n",
    ],
    ids=["prose", "fence", "bare_fence"],
)
def test_repair_mode_rejects_out_of_range_numbers_in_prose_and_fences(number, wrap):
    text = wrap.format(doc=in_object(number))
    reject(text, NUMBER_SCHEMAS["dict"], "repair")
    reject(text, Item, "repair")


@pytest.mark.parametrize("number", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
@pytest.mark.parametrize(
    "broken",
    [
        "{{'value': {n}, 'label': 'x'}}",  # single quotes
        '{{"value": {n}, "label": "x",}}',  # trailing comma
        "{{value: {n}, label: x}}",  # bare words
        '{{"value": {n}, /* why */ "label": None}}',  # a comment, a Python literal
        "[{n}, 2,]",
    ],
    ids=["single_quotes", "trailing_comma", "bare_words", "comment", "array"],
)
def test_repair_mode_rejects_out_of_range_numbers_next_to_other_repairs(number, broken):
    text = broken.format(n=number)
    reject(text, {}, "repair")
    reject(text, {"type": ["object", "array", "string"]}, "repair")


def test_a_number_out_of_range_beside_a_conforming_document_is_not_picked_silently():
    # Two documents: the readable one conforms and wins, recorded as an extraction.
    parsed = parse('{"value": 1e400} or rather {"value": 2}', NUMBER_SCHEMAS["dict"], "repair")
    assert parsed.data == {"value": 2}
    assert [repair.kind for repair in parsed.repairs] == ["extract"]


def test_numbers_at_the_edge_of_the_range_are_returned_exactly():
    for mode in ("strict", "repair"):
        assert parse(EDGE, {"type": "integer"}, mode).data == int(MAX_NUMBER)  # type: ignore[arg-type]
        data = parse(in_object("-" + EDGE), NUMBER_SCHEMAS["multiple"], mode).data  # type: ignore[arg-type]
        assert data == {"value": -int(MAX_NUMBER), "label": "x"}
        assert parse(in_object("-0.0e9999"), Item, mode).value == Item(value=-0.0, label="x")  # type: ignore[arg-type]
        assert parse("1e-400", {"type": "number", "exclusiveMinimum": -1}, mode).data == 0.0  # type: ignore[arg-type]


SURROGATE_SCHEMAS: dict[str, Any] = {
    "empty": {},
    "dict": {"type": ["object", "string"]},
    "text": '{"type": ["object", "string"]}',
    "python_type": str | dict[str, Any],
}


@pytest.mark.parametrize("schema", SURROGATE_SCHEMAS.values(), ids=SURROGATE_SCHEMAS.keys())
@pytest.mark.parametrize("text", SURROGATE_TEXTS.values(), ids=SURROGATE_TEXTS.keys())
@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_parse_rejects_lone_surrogates_for_every_schema_form(text, schema, mode):
    assert "surrogate" in reject(text, schema, mode).message


@pytest.mark.parametrize("name", LONE_SURROGATES, ids=LONE_SURROGATES)
@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_pydantic_models_and_str_reject_lone_surrogates_as_unreadable(name, mode):
    literal = LONE_SURROGATES[name]
    assert "surrogate" in reject('{"value": 1, "label": ' + literal + "}", Item, mode).message
    assert "surrogate" in reject(literal, str, mode).message
    assert "surrogate" in reject("[" + literal + "]", list[str], mode).message


@pytest.mark.parametrize("name", LONE_SURROGATES, ids=LONE_SURROGATES)
@pytest.mark.parametrize(
    "wrap",
    ["Here: {doc}", "```json\n{doc}\n```", "{{'label': {doc},}}", "{{label: {doc}}}"],
    ids=["prose", "fence", "single_quotes", "bare_key"],
)
def test_repair_mode_never_returns_a_lone_surrogate(name, wrap):
    text = wrap.format(doc='{"label": ' + LONE_SURROGATES[name] + "}")
    with pytest.raises(OutputParseError):
        parse(text, {"type": "object"}, "repair")


def test_valid_pairs_and_escaped_backslashes_stay_accepted_in_every_form():
    pair = r'{"value": 1, "label": "\ud83d\ude00 \\ud800"}'
    for schema in (Item, {"type": "object"}, '{"type": "object"}', dict[str, Any]):
        for mode in ("strict", "repair"):
            data = parse(pair, schema, mode).data  # type: ignore[arg-type]
            assert data["label"] == "\U0001f600 \\ud800"


# -- generate ------------------------------------------------------------------------

HOSTILE_REPLIES = [
    in_object(HUGE),
    in_object("1e400"),
    in_object("-" + LONG),
    '{"value": 1, "label": "\\ud800"}',
    '```json\n{"value": -1E+999}\n```',
    '{"value": 1, "label": "\ud800"}',
]


@pytest.mark.parametrize("mode", ["strict", "repair"])
@pytest.mark.parametrize("schema", [Item, NUMBER_SCHEMAS["bounded"]], ids=["pydantic", "dict"])
def test_generate_ends_in_attempts_exhausted_keeping_every_attempt(mode, schema):
    replies = iter(HOSTILE_REPLIES)

    def backend(prompt: str) -> str:
        return next(replies)

    jm = JsonMode(backend, mode=mode, max_attempts=len(HOSTILE_REPLIES))
    with pytest.raises(AttemptsExhaustedError) as caught:
        jm.generate("give me a number", schema)
    attempts = caught.value.attempts
    assert [attempt.raw for attempt in attempts] == HOSTILE_REPLIES
    assert {attempt.outcome for attempt in attempts} == {"invalid_json"}
    for attempt in attempts:
        if mode == "strict" and attempt.raw.startswith("```"):
            continue  # strict mode reads no fences: simply not JSON
        assert "range" in attempt.error or "surrogate" in attempt.error


def test_generate_reasks_with_the_reason_and_then_returns_the_value():
    seen: list[list[dict[str, Any]]] = []
    replies = iter([in_object("1e400"), in_object("2.5")])

    def backend(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return next(replies)

    result = JsonMode(backend).run("give me a number", Item)
    assert result.value == Item(value=2.5, label="x")
    assert [attempt.outcome for attempt in result.attempts] == ["invalid_json", "valid"]
    assert "range" in seen[1][-1]["content"]


def test_few_shot_examples_that_cannot_be_written_as_json_are_usage_errors():
    jm = JsonMode(lambda prompt: "{}")
    for value in (10**5000, float("inf"), "\ud800"):
        with pytest.raises(UsageError):
            jm.generate("x", {}, examples=[("example", value)])


# -- dumps -----------------------------------------------------------------------------


def test_dumps_raises_a_typed_error_for_what_json_cannot_hold():
    for value in (10**5000, float("inf"), float("nan"), "\ud800", {"\udc00": 1}, [{1, 2}]):
        with pytest.raises(UsageError):
            dumps(value)
    assert dumps({"a": [int(MAX_NUMBER), "\U0001f600"]}) == '{"a":[' + EDGE + ',"\U0001f600"]}'


# -- coercion ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [HUGE, "-" + HUGE, LONG, f"{LONG}.0", "1e400", "-1E+999", f"{HUGE}.5", f" +{LONG} "],
)
@pytest.mark.parametrize("kind", ["integer", "number"])
def test_coercion_never_yields_an_out_of_range_number(text, kind):
    schema = {"type": kind}
    fixed, repairs = coerce(text, schema, Schema.of(schema).validator)
    assert fixed == text
    assert repairs == []
    with pytest.raises(SchemaViolationError):
        parse(json.dumps(text), schema, "repair")
    with pytest.raises(SchemaViolationError):
        parse(json.dumps({"value": text}), NUMBER_SCHEMAS["dict"], "repair")


def test_coercion_keeps_in_range_numbers_exact():
    schema = {"type": "integer"}
    fixed, repairs = coerce(EDGE, schema, Schema.of(schema).validator)
    assert fixed == int(MAX_NUMBER)
    assert [repair.kind for repair in repairs] == ["string_to_integer"]
    fixed, _ = coerce("0" * 5000 + "7", schema, Schema.of(schema).validator)
    assert fixed == 7
    number = {"type": "number"}
    assert coerce("-0.0e9999", number, Schema.of(number).validator)[0] == 0.0
    assert coerce("1" * 300, number, Schema.of(number).validator)[0] == int("1" * 300)


# -- partial values --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"a": ' + HUGE + ",",
        '{"a": ' + HUGE + "}",
        "[1e400,",
        "[" + LONG + ", 1]",
        '{"a": -1E+999}',
        r'["\ud800",',
        r'["\ud800x',
        r'{"\udc00": 1',
        '["\ud800',
    ],
)
def test_partial_values_never_hold_what_the_document_cannot(text):
    partial = parse_partial(text)
    assert partial is None, partial


def test_partial_values_still_wait_for_the_second_half_of_a_pair():
    assert parse_partial(r'["ab\ud83d') == ["ab"]
    assert parse_partial(r'["ab\ud83d\ude00') == ["ab\U0001f600"]
    assert parse_partial("[" + EDGE + ", ") == [int(MAX_NUMBER)]


# -- the command line ------------------------------------------------------------------

CLI = [sys.executable, "-c", "import sys; from jsonmode.cli import main; sys.exit(main())"]
CLI_INPUTS = {
    "huge_int": in_object(HUGE),
    "long_int": in_object(LONG),
    "exponent": in_object("1e400"),
    "escaped_surrogate": r'{"value": 1, "label": "\ud800"}',
    "fenced_exponent": "```json\n" + in_object("-1e400") + "\n```",
}


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    folder = tmp_path_factory.mktemp("numbers")
    schema = folder / "schema.json"
    schema.write_text(json.dumps(NUMBER_SCHEMAS["bounded"]), encoding="utf-8")
    runs = {}
    processes = {}
    for name, text in CLI_INPUTS.items():
        source = folder / f"{name}.json"
        source.write_text(text, encoding="utf-8")
        for command in ("validate", "repair"):
            processes[(command, name)] = subprocess.Popen(
                [*CLI, command, "--schema", str(schema), "--verbose", str(source)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
    for key, process in processes.items():
        stdout, stderr = process.communicate(timeout=120)
        runs[key] = (process.returncode, stdout, stderr)
    return runs


@pytest.mark.parametrize("command", ["validate", "repair"])
@pytest.mark.parametrize("name", CLI_INPUTS, ids=CLI_INPUTS)
def test_cli_reports_one_clear_error_and_exits_1(cli_runs, command, name):
    status, stdout, stderr = cli_runs[(command, name)]
    assert "Traceback" not in stderr
    assert status == 1, stderr
    assert stdout == ""
    first = stderr.splitlines()[0]
    assert first.startswith("jsonmode: error: OutputParseError: ")
    if not (command == "validate" and name.startswith("fenced")):  # validate reads no fences
        assert "range" in first or "surrogate" in first


@pytest.mark.integration
def test_cli_generate_exhausts_attempts_without_a_traceback(tmp_path: pathlib.Path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(NUMBER_SCHEMAS["bounded"]), encoding="utf-8")
    replies = [in_object(HUGE), in_object("1e400"), r'{"value": 1, "label": "\ud800"}']
    with OpenAIServer([Reply(text) for text in replies]) as server:
        done = subprocess.run(
            [
                *CLI,
                "generate",
                "--model",
                "openai/test-model",
                "--api-base",
                server.base_url,
                "--api-key",
                "unused",
                "--schema",
                str(schema),
                "--mode",
                "repair",
                "--max-attempts",
                "3",
                "--timeout",
                "20",
                "give me a number",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=_litellm_env(),
            timeout=120,
            check=False,
        )
        assert server.request_count == 3
    assert "Traceback" not in done.stderr
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("jsonmode: error: AttemptsExhaustedError: no conforming JSON")


def _litellm_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["LITELLM_TELEMETRY"] = "False"
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop("JSONMODE_MODEL", None)
    return env


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
@pytest.mark.parametrize("data", [b'"\xff"', b'"\xed\xa0\x80"', b'{"a": "\xc3"}'], ids=str)
def test_cli_input_that_is_not_utf8_is_a_usage_error(tmp_path, errors, data):
    schema = tmp_path / "schema.json"
    schema.write_text("{}", encoding="utf-8")
    env = {**os.environ, "PYTHONIOENCODING": f"utf-8:{errors}"}
    for command in ("validate", "repair"):
        done = subprocess.run(
            [*CLI, command, "--schema", str(schema)],
            input=data,
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        stderr = done.stderr.decode("utf-8", "replace")
        assert "Traceback" not in stderr
        assert done.returncode == 2, stderr
        assert done.stdout == b""
        assert stderr.startswith("jsonmode: error: UsageError: cannot read stdin: not UTF-8")


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_number_coercion_is_linear_on_long_digit_runs():
    # "\d+\.?\d*" backtracked over every split of the digits: 20 000 digits took ~16 s.
    schema = {"type": "number"}
    validator = Schema.of(schema).validator
    started = time.perf_counter()
    for text in ("1" * 30_000 + "x", " " + "1" * 30_000 + ".5e", "1" * 30_000 + "e+"):
        assert coerce(text, schema, validator) == (text, [])
    assert time.perf_counter() - started < 2.0


number_literals = st.builds(
    lambda sign, digits, fraction, exponent: sign + digits + fraction + exponent,
    st.sampled_from(["", "-"]),
    st.one_of(st.just("0"), st.from_regex(r"[1-9][0-9]{0,330}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"\.[0-9]{1,20}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"[eE][-+]?[0-9]{1,4}", fullmatch=True)),
)


@settings(max_examples=300, deadline=None)
@given(number_literals)
def test_every_number_literal_reads_exactly_or_is_out_of_range(literal):
    is_float = any(mark in literal for mark in ".eE")
    expected: float | int = float(literal) if is_float else int(literal)
    in_range = math.isfinite(expected) if is_float else abs(expected) <= int(MAX_NUMBER)
    readers = {
        "strict": lambda: loads_strict(literal),
        "parse": lambda: parse(literal, {"type": "number"}, "repair").data,
        "partial": lambda: parse_partial("[" + literal + ","),
    }
    for name, read in readers.items():
        if in_range:
            value = read()
            assert value == ([expected] if name == "partial" else expected), name
        elif name == "partial":
            assert read() is None
        else:
            with pytest.raises((StrictJSONError, OutputParseError), match="range"):
                read()
    coerced, _ = coerce(literal, {"type": "number"}, Schema.of({"type": "number"}).validator)
    assert coerced == (expected if in_range else literal)


def test_a_reask_after_a_lone_surrogate_can_still_be_sent():
    """The failed reply is repeated in the re-ask: with its lone surrogate raw, no
    request could be encoded as UTF-8 and the run would end in a backend error."""
    sent: list[bytes] = []
    replies = iter(['{"label": "\ud800"}', '{"label": "\\ud83d\\ude00 ok"}'])

    def backend(messages: list[dict[str, Any]]) -> str:
        sent.append(json.dumps(messages, ensure_ascii=False).encode("utf-8"))
        return next(replies)

    result = JsonMode(backend).run("x", {"type": "object"})
    assert result.data == {"label": "\U0001f600 ok"}
    assert "\\\\ud800" in sent[1].decode("utf-8")  # spelled as its escape, as written


@pytest.mark.integration
def test_a_reask_after_a_lone_surrogate_reaches_an_api_model(openai_server):
    # The server escapes the raw surrogate in its JSON body; the client decodes it back.
    server = openai_server(Reply('{"label": "\ud800"}'), Reply('{"label": "ok"}'))
    jm = JsonMode("openai/test-model", api_base=server.base_url, api_key="unused", timeout=20)
    result = jm.run("x", {"type": "object"})
    assert result.data == {"label": "ok"}
    assert [attempt.outcome for attempt in result.attempts] == ["invalid_json", "valid"]
    assert server.request_count == 2


@pytest.mark.parametrize(
    "text",
    [
        r"{'label': '\ud83d\ude00 x'}",
        r'{"label": "\ud83d\ude00 x",}',
        r'Here: {"label": "\uD83D\uDE00 x", /* note */}',
        r'{"label": "\ud83d\ude00 x", "more": [{"\ud83d\ude00": 1},],}',
    ],
)
def test_repair_keeps_escaped_pairs_as_one_character(text):
    """json-repair decodes an escaped pair as two code points; the value holds the
    one character the pair spells (as a JSON reader gives), never the halves."""
    data = parse(text, {}, "repair").data
    assert data["label"] == "\U0001f600 x"
    assert dumps(data).encode("utf-8")


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"multipleOf": 0.5}, 10**400),  # jsonschema overflowed dividing it
        ({}, float("inf")),
        ({}, {"k": "\ud800"}),
    ],
)
def test_a_few_shot_example_that_is_no_json_value_is_a_usage_error(schema, value):
    with pytest.raises(UsageError, match="example 0 is not a JSON value"):
        JsonMode(ScriptedBackend(["1"])).run("x", schema, examples=[("p", value)])


@pytest.mark.parametrize(
    "prompt",
    [
        "lone \ud800 here",
        [{"role": "system", "content": "ok"}, {"role": "user", "content": "\udfff"}],
    ],
)
def test_a_prompt_with_a_lone_surrogate_is_a_usage_error_before_any_call(prompt):
    backend = ScriptedBackend(["1"])
    with pytest.raises(UsageError, match="lone surrogate"):
        JsonMode(backend).run(prompt, {})
    assert backend.requests == []


@pytest.mark.parametrize("text", ['{"maximum": ' + "9" * 5000 + "}", "[" * 100_000, '{"a": 1e999}'])
def test_schema_text_with_hostile_numbers_or_depth_is_an_invalid_schema(text):
    with pytest.raises(InvalidSchemaError):
        Schema.of(text)


def test_the_decoder_does_not_accept_a_lone_surrogate_str():
    from jsonmode import compile_schema

    compiled = compile_schema({"type": "string"})
    assert compiled.accepts('"\U0001f600"')
    assert not compiled.accepts('"\ud800"')  # was UnicodeEncodeError


def test_a_huge_bare_number_is_refused_even_when_its_digits_also_stand_quoted():
    digits = "9" * 5001
    with pytest.raises(OutputParseError, match="out of range"):
        parse("{a: " + digits + ', b: "' + digits + '"}', {}, "repair")
    assert parse('{a: "' + digits + '"}', {}, "repair").data == {"a": digits}  # a string
