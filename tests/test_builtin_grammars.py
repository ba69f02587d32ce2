"""The built-in JSON Lines and CSV grammars: what they accept and refuse, where
``diagnose`` points, their arguments and caching, and token walks with a real
tokenizer that only ever finish on text that parses and conforms."""

from __future__ import annotations

import contextlib
import csv
import enum
import io
import itertools
import json
import pathlib
import random
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import BaseModel, Field

import jsonmode
from jsonmode import BudgetExceededError, UnsupportedSchemaError, UsageError
from jsonmode.decoding.grammars.builtins import compile_csv, compile_jsonl
from jsonmode.decoding.grammars.compiled import CompiledGrammar
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.schema import Schema
from tests.support.bounded import run_python

TOKENIZERS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Person(BaseModel):
    name: str
    age: int | None = None
    color: Color
    member: bool = False
    score: float = Field(ge=0, le=1)
    tag: Literal["a", "b,c"] = "a"


ITEM = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "name": {"type": "string", "maxLength": 6},
        "kind": {"enum": ["a", "b", None]},
    },
    "required": ["id", "name"],
    "additionalProperties": False,
}

PEOPLE_HEADER = "name,age,color,member,score,tag\n"


# -- JSON Lines -----------------------------------------------------------------------------


def test_jsonl_accepts_conforming_documents_one_per_line() -> None:
    compiled = compile_jsonl(ITEM)
    assert isinstance(compiled, CompiledGrammar)
    assert compiled.kind == "jsonl"
    assert compiled.unenforced == ()
    assert set(compiled.schemas) == {"doc"}
    assert json.dumps(ITEM) in compiled.source
    for text in (
        '{"id": 1, "name": "ab"}',
        '{"id":1,"name":"ab"}\n',
        '{"id": 1, "name": "ab"}\n{"id": 2, "name": "", "kind": null}',
        '{"id": 1, "name": "ab"}\n{"id": 2, "name": "x\\ny", "kind": "b"}\n',
        ' {"id": 1, "name": "ab"}\n {"id": 2, "name": "cd"}',  # one leading space per line
    ):
        assert compiled.accepts(text), text
        assert compiled.diagnose(text) is None


def test_jsonl_points_at_the_byte_where_a_line_stops_conforming() -> None:
    compiled = compile_jsonl(ITEM)
    first = '{"id": 1, "name": "ab"}\n'
    cases = [
        (first + '{"id": 1000, "name": "x"}', len(first) + 10, False),  # over the maximum
        (first + '{"id": 1, "name": "toolong"}', len(first) + 25, False),  # maxLength 6
        (first + '{"name": "x", "id": 1}', len(first) + 2, False),  # declared order
        (first + '{"id": 1, "name": "x", "extra": 1}', len(first) + 24, False),
        (first + '{"id": 1}', len(first) + 8, False),  # "name" is required
        (first + '{"id": 1, "name": "x"', len(first) + 21, True),  # the line ends early
    ]
    for text, offset, ended in cases:
        mismatch = compiled.diagnose(text)
        assert mismatch is not None, text
        assert (mismatch.offset, mismatch.ended) == (offset, ended), (text, mismatch)
        assert not compiled.accepts(text)
        # The valid lines before it stay valid JSON of the schema.
        assert Schema.of(ITEM).conforms(json.loads(text[: len(first)]))


def test_jsonl_refuses_a_line_break_inside_a_document_and_blank_lines() -> None:
    compiled = compile_jsonl(ITEM)
    pretty = json.dumps({"id": 1, "name": "ab"}, indent=2)
    mismatch = compiled.diagnose(pretty)
    assert mismatch is not None
    assert mismatch.offset == pretty.index("\n")
    for text in (
        '{"id": 1, "name": "ab"}\n\n{"id": 2, "name": "cd"}',  # a blank line
        '{"id": 1, "name": "ab"}\n\n',  # two final line ends
        '{"id": 1, "name": "ab"}\r\n{"id": 2, "name": "cd"}',  # CRLF is not a JSON Lines end
        '{"id": 1, "name": "a\nb"}',  # a raw line break in a string
        "\n",
        "",
    ):
        assert not compiled.accepts(text), repr(text)
    assert compiled.diagnose('{"id": 1, "name": "ab"}\n\n').offset == 24  # type: ignore[union-attr]


def test_jsonl_counts_its_lines() -> None:
    line = '{"id": 1, "name": "ab"}'
    compiled = compile_jsonl(ITEM, min_lines=2, max_lines=3)
    assert not compiled.accepts(line)
    too_few = compiled.diagnose(line + "\n")
    assert too_few is not None
    assert too_few.ended
    assert too_few.offset == len(line) + 1
    for count in (2, 3):
        assert compiled.accepts("\n".join([line] * count))
        assert compiled.accepts("\n".join([line] * count) + "\n")
    four = "\n".join([line] * 4)
    too_many = compiled.diagnose(four)
    assert too_many is not None
    assert not too_many.ended
    assert too_many.offset == 3 * (len(line) + 1)  # the fourth document's first byte
    exactly_one = compile_jsonl(ITEM, max_lines=1)
    assert exactly_one.accepts(line + "\n")
    assert not exactly_one.accepts(line + "\n" + line)
    none_or_more = compile_jsonl(ITEM, min_lines=0)
    assert none_or_more.accepts("")
    assert none_or_more.accepts(line)
    assert not none_or_more.accepts("\n")
    assert not compile_jsonl(ITEM).accepts("")


def test_jsonl_takes_any_schema_and_carries_what_it_leaves_unenforced() -> None:
    compiled = compile_jsonl({"type": "integer", "multipleOf": 3})
    assert compiled.accepts("3\n-6\n9")
    assert not compiled.accepts("3\n4.5")
    assert compiled.unenforced == ("doc:/multipleOf",)
    with pytest.raises(UnsupportedSchemaError, match="multipleOf"):
        compile_jsonl({"type": "integer", "multipleOf": 3}, strict=True)
    anything = compile_jsonl({})
    assert anything.accepts('{"a": [1, {"b": null}]}\n"text"\n[]\n')
    assert not anything.accepts('{"a": [1,\n2]}')
    model = compile_jsonl(Person)
    person = Person(name="Ada", color=Color.RED, score=0.5)
    assert model.accepts(person.model_dump_json() + "\n" + person.model_dump_json())


def test_jsonl_arguments_are_checked() -> None:
    with pytest.raises(UsageError, match="flexible"):
        compile_jsonl(ITEM, whitespace="flexible")
    for bad in (
        {"min_lines": -1},
        {"min_lines": True},
        {"max_lines": 0},
        {"min_lines": 3, "max_lines": 2},
        {"max_lines": 2.5},
    ):
        with pytest.raises(UsageError):
            compile_jsonl(ITEM, **bad)
    with pytest.raises(UsageError, match="unknown compile option"):
        compile_jsonl(ITEM, colour="red")
    with pytest.raises(BudgetExceededError):
        compile_jsonl(ITEM, max_lines=5000, max_rule_states=2000)


def test_jsonl_and_csv_are_cached_by_schema_bounds_and_options() -> None:
    assert compile_jsonl(ITEM, max_lines=3) is compile_jsonl(dict(ITEM), max_lines=3)
    assert compile_jsonl(ITEM, max_lines=3) is not compile_jsonl(ITEM, max_lines=4)
    assert compile_jsonl(ITEM) is not compile_jsonl(ITEM, min_lines=0)
    assert compile_jsonl(ITEM) is not compile_jsonl(ITEM, max_repeat=10)
    assert compile_jsonl(ITEM) is not compile_jsonl({**ITEM, "required": ["id"]})
    assert compile_csv(Person) is compile_csv(Person)
    assert compile_csv(Person) is not compile_csv(Person, delimiter=";")
    assert compile_csv(Person) is not compile_csv(Person, header=False)
    assert compile_csv(Person) is not compile_csv(Person, max_rows=2)
    assert compile_jsonl is jsonmode.compile_jsonl
    assert compile_csv is jsonmode.compile_csv


# -- CSV ------------------------------------------------------------------------------------


def test_csv_accepts_rows_that_follow_the_row_schema() -> None:
    compiled = compile_csv(Person)
    assert compiled.kind == "csv"
    assert compiled.unenforced == ()
    assert set(compiled.schemas) == {"row"}
    assert '"name,age,color,member,score,tag"' in compiled.source
    for text in (
        PEOPLE_HEADER + "Ada,36,red,true,0.5,a",
        PEOPLE_HEADER + "Ada,36,red,true,0.5,a\n",
        PEOPLE_HEADER + 'Ada,,blue,,1,"b,c"\r\nBo,-3,red,false,0,\r\n',
        PEOPLE_HEADER + 'Ada,"",red,"",0.1,""',  # empty cells, quoted
        PEOPLE_HEADER + "Ada,,red,,0.25,\nBob,7,blue,false,1.0,a",
        '"name","age","color","member","score","tag"\nAda,1,"red",true,0,a',  # quoted header
    ):
        assert compiled.accepts(text), text
        assert compiled.diagnose(text) is None


def _written(rows: list[list[Any]], lineterminator: str, delimiter: str = ",") -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=lineterminator, delimiter=delimiter)
    writer.writerows(rows)
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def test_csv_accepts_what_csv_writer_writes() -> None:
    """Random rows written by Python's csv module (every quoting it chooses, both line
    ends) are accepted; the same text with one cell of the wrong type is not."""
    rng = random.Random(4)
    alphabet = ["a", "b", " ", ",", '"', "\n", "\r\n", ";", "é", "日", "'", "\\"]
    header = ["name", "age", "color", "member", "score", "tag"]
    for lineterminator, delimiter in (("\n", ","), ("\r\n", ","), ("\n", ";"), ("\n", "\t")):
        compiled = compile_csv(Person, delimiter=delimiter)
        rows = [header]
        for _ in range(30):
            name = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 6)))
            age = rng.choice([None, 0, -17, 42, 10**12])
            score = rng.choice([0, 1, 0.5, 0.125, 1.0, 0.0])
            member = rng.choice([True, False, None])
            tag = rng.choice(["a", "b,c", None])
            values = [name, age, rng.choice(["red", "blue"]), member, score, tag]
            rows.append([_cell(value) for value in values])
        text = _written(rows, lineterminator, delimiter)
        assert compiled.accepts(text), text
        broken = _written([*rows, [*rows[1][:1], "4.5", *rows[1][2:]]], lineterminator, delimiter)
        assert not compiled.accepts(broken)


def test_csv_header_must_name_the_columns_in_order() -> None:
    compiled = compile_csv(Person)
    row = "Ada,36,red,true,0.5,a"
    for header, offset in (
        ("name,color,age,member,score,tag\n", 5),  # columns out of order
        ("Name,age,color,member,score,tag\n", 0),
        ("name,age,color,member,score\n", 27),  # a column missing
        ("name,age,color,member,score,tag,extra\n", 31),
        ("name, age,color,member,score,tag\n", 5),
    ):
        mismatch = compiled.diagnose(header + row)
        assert mismatch is not None, header
        assert mismatch.offset == offset, (header, mismatch)
    assert not compiled.accepts(PEOPLE_HEADER)  # a row at least (min_rows=1)
    headless = compile_csv(Person, header=False)
    assert headless.accepts(row)
    assert not headless.accepts(PEOPLE_HEADER + row)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("Ada,3.5,red,true,0.5,a", 1),  # an integer column
        ("Ada,03,red,true,0.5,a", 1),  # not JSON number syntax
        ("Ada,x,red,true,0.5,a", 1),
        ("Ada,3,green,true,0.5,a", 2),  # not in the enum
        ("Ada,3,,true,0.5,a", 2),  # a required enum column
        ("Ada,3,red,True,0.5,a", 3),  # booleans are true/false
        ("Ada,3,red,yes,0.5,a", 3),
        ("Ada,3,red,true,1.5,a", 4),  # over the maximum
        ("Ada,3,red,true,,a", 4),  # a required number column
        ("Ada,3,red,true,0.5,c", 5),  # Literal["a", "b,c"]
        ("Ada,3,red,true,0.5,b,c", 5),  # "b,c" unquoted is two cells
    ],
)
def test_csv_cells_must_have_their_columns_types(row: str, column: int) -> None:
    compiled = compile_csv(Person)
    text = PEOPLE_HEADER + row
    mismatch = compiled.diagnose(text)
    assert mismatch is not None
    cells_before = ",".join(row.split(",")[:column])
    start = len(PEOPLE_HEADER) + len(cells_before) + (1 if column else 0)
    # The mismatch lies inside the bad cell (or right after it, where it should end).
    end = start + len(row.split(",")[column]) + (1 if column == 5 else 0)
    assert start <= mismatch.offset <= end, (row, mismatch)


def test_csv_quoted_fields_hold_delimiters_quotes_and_line_breaks() -> None:
    properties = {"a": {"type": "string"}, "n": {"type": "integer"}}
    compiled = compile_csv({"type": "object", "properties": properties, "required": ["a", "n"]})
    good = [
        'a,n\n"x,y",1',
        'a,n\n"say ""hi""",1',
        'a,n\n"two\nlines\r\nhere",1',
        'a,n\n"""",1',  # the value is one quote
        'a,n\n"",1\n,2',  # the empty string, quoted or not
        "a,n\nplain text with spaces ,1",
    ]
    for text in good:
        assert compiled.accepts(text), text
        rows = list(csv.reader(io.StringIO(text, newline="")))
        assert all(len(row) == 2 for row in rows)
    for text, offset in (
        ('a,n\nsay "hi",1', 8),  # a quote inside a bare field
        ('a,n\n"say "hi"",1', 10),  # an undoubled quote ends the field: then "h"?
        ('a,n\n"open,1', 11),  # never closed: the text ends inside the field
        ('a,n\n"x"y,1', 7),  # text after the closing quote
        ("a,n\nx\ry,1", 5),  # a bare carriage return
    ):
        mismatch = compiled.diagnose(text)
        assert mismatch is not None, text
        assert mismatch.offset == offset, (text, mismatch)


def test_csv_optional_and_nullable_cells_may_be_empty() -> None:
    schema = {
        "type": "object",
        "properties": {
            "req": {"type": "integer"},
            "opt": {"type": "integer"},
            "null": {"type": ["integer", "null"]},
            "text": {"type": "string", "minLength": 1},
        },
        "required": ["req", "null", "text"],
    }
    compiled = compile_csv(schema)
    assert compiled.accepts("req,opt,null,text\n1,,,x")
    assert compiled.accepts('req,opt,null,text\n1,"",2,x')
    assert not compiled.accepts("req,opt,null,text\n,1,2,x")  # req is required
    assert not compiled.accepts("req,opt,null,text\n1,1,2,")  # text needs a character
    assert not compiled.accepts('req,opt,null,text\n1,1,2,""')


def test_csv_string_constraints_hold_for_bare_and_quoted_cells() -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": '^[A-Z]{2}[-,"][0-9]+$'},
            "short": {"type": "string", "maxLength": 3},
            "day": {"type": "string", "format": "date"},
            "pick": {"enum": ["x,y", 'say "no"', 7, True, None]},
        },
        "required": ["code", "short", "day", "pick"],
    }
    compiled = compile_csv(schema, header=False)
    assert compiled.unenforced == ()
    for text in (
        "AB-12,abc,2024-02-29,7",
        '"AB,12",,2024-01-01,true',
        '"AB""12","a""",2024-01-01,"x,y"',  # a quote in the value is doubled when quoted
        'AB-1,"ab",2024-01-01,"say ""no"""',
        "AB-1,ab,2024-01-01,",  # the null choice
    ):
        assert compiled.accepts(text), text
    for text in (
        "AB12,abc,2024-02-29,7",  # the pattern
        'AB"12,abc,2024-02-29,7',  # a quote is not bare text, even where the pattern allows it
        "AB-12,abcd,2024-02-29,7",  # maxLength
        'AB-12,"ab""c",2024-02-29,7',  # four characters once unquoted
        "AB-12,abc,2023-02-29,7",  # not a date
        "AB-12,abc,2024-02-29,8",
        "AB-12,abc,2024-02-29,x,y",
        "AB-12,abc,2024-02-29,false",
    ):
        assert not compiled.accepts(text), text


def test_csv_with_one_column_writes_its_empty_cell_quoted() -> None:
    compiled = compile_csv({"type": "object", "properties": {"note": {"type": "string"}}})
    text = 'note\nhello\n""\n"a,b"\n'
    assert compiled.accepts(text)
    assert list(csv.reader(io.StringIO(text, newline=""))) == [["note"], ["hello"], [""], ["a,b"]]
    assert not compiled.accepts("note\nhello\n\nworld")  # an empty line is no row
    assert compiled.accepts("note\nhello\n")  # one row, then the final line end
    assert _written([["note"], [""], ["x"]], "\r\n") == 'note\r\n""\r\nx\r\n'
    assert compiled.accepts(_written([["note"], [""], ["x"]], "\r\n"))


def test_csv_counts_rows_and_takes_other_delimiters() -> None:
    header, row = "id;name", "1;ab"
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["id", "name"],
    }
    compiled = compile_csv(schema, delimiter=";", min_rows=0, max_rows=2)
    assert compiled.accepts(header)
    assert compiled.accepts(header + "\n")
    assert compiled.accepts(f"{header}\n{row}\n{row}\r\n")
    too_many = compiled.diagnose(f"{header}\n{row}\n{row}\n{row}")
    assert too_many is not None
    assert too_many.offset == 3 * 5 + 3
    assert not compiled.accepts("id,name\n1,ab")
    headless = compile_csv(ITEM, header=False, min_rows=0)
    assert headless.accepts("")
    assert not headless.accepts("\n")
    assert headless.accepts("1,ab,\n2,cd,b\n")


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "object", "properties": {"a": {"type": "object"}}}, "'a'"),
        ({"type": "object", "properties": {"a": {}, "tags": {"type": "array"}}}, "'a'"),
        ({"type": "object", "properties": {"tags": {"type": "array"}}}, "'tags'"),
        ({"type": "object", "properties": {"free": {}}}, "'free'"),
        ({"type": "object", "properties": {"free": {"description": "anything"}}}, "'free'"),
        ({"type": "object", "properties": {"c": {"enum": ["x", [1]]}}}, "'c'"),
        ({"properties": {"u": {"anyOf": [{"type": "string"}, {"type": "array"}]}}}, "'u'"),
        ({"type": "array", "items": {"type": "string"}}, "object schema"),
        ({"type": "string"}, "object schema"),
        ({"type": "object", "properties": {}}, "object schema"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "'b'"),
    ],
)
def test_csv_refuses_a_row_schema_with_non_scalar_columns(schema: Any, named: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match=named):
        compile_csv(schema)


def test_csv_lists_what_a_cell_cannot_enforce() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "multipleOf": 5},
            "mail": {"type": "string", "format": "email"},
            "long": {"type": "string", "maxLength": 1000},
            "odd": {"type": "string", "not": {"const": "x"}},
        },
        "minProperties": 2,
    }
    compiled = compile_csv(schema)
    assert set(compiled.unenforced) == {
        "/properties/n/multipleOf",
        "/properties/mail/format",
        "/properties/long/maxLength",
        "/properties/odd/not",
        "/minProperties",
    }
    assert compiled.accepts("n,mail,long,odd\n7,a@b.co," + "x" * 1001 + ",x")
    with pytest.raises(UnsupportedSchemaError, match="'minProperties' cannot be enforced"):
        compile_csv(schema, strict=True)
    del schema["minProperties"]
    with pytest.raises(UnsupportedSchemaError, match="'multipleOf' cannot be enforced") as caught:
        compile_csv(schema, strict=True)
    assert caught.value.schema_path == "/properties/n/multipleOf"


def test_csv_arguments_are_checked() -> None:
    for delimiter in ("", ",,", '"', "\n", "a", "1", ".", "-", 3):
        with pytest.raises(UsageError):
            compile_csv(Person, delimiter=delimiter)  # type: ignore[arg-type]
    bads: list[dict[str, Any]] = [
        {"min_rows": -1},
        {"max_rows": 0},
        {"min_rows": 2, "max_rows": 1},
        {"header": 1},
    ]
    for bad in bads:
        with pytest.raises(UsageError):
            compile_csv(Person, **bad)


# -- token walks with a real tokenizer ------------------------------------------------------


@pytest.fixture(scope="module")
def qwen() -> Vocabulary:
    return Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")


def _random_walks(
    compiled: CompiledGrammar, vocabulary: Vocabulary, seed: int, walks: int, steps: int
) -> list[bytes]:
    """Texts of the walks that finished: each token drawn among the allowed ones
    (an end, where allowed, one time in five)."""
    rng = random.Random(seed)
    finished = []
    for _ in range(walks):
        matcher = compiled.matcher()
        text = bytearray()
        for _ in range(steps):
            allowed = np.flatnonzero(matcher.mask())
            assert allowed.size, bytes(text)
            ends = [int(token) for token in allowed if int(token) in vocabulary.eos_ids]
            token = ends[0] if ends and rng.random() < 0.2 else int(rng.choice(allowed))
            assert matcher.advance(token)
            if matcher.is_finished():
                finished.append(bytes(text))
                break
            text += vocabulary.token_bytes(token)
    return finished


def test_jsonl_token_walks_finish_on_conforming_lines(qwen: Vocabulary) -> None:
    compiled = compile_jsonl(ITEM, qwen, max_lines=4)
    spec = Schema.of(ITEM)
    texts = _random_walks(compiled, qwen, seed=7, walks=40, steps=400)
    assert len(texts) >= 30
    counts = set()
    for data in texts:
        assert compiled.accepts(data)
        text = data.decode("utf-8")
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        assert 1 <= len(lines) <= 4
        counts.add(len(lines))
        for line in lines:
            assert spec.conforms(json.loads(line)), line
    assert len(counts) > 1  # walks of several lines, too


def _as_row(cells: list[str], names: list[str], spec: Schema) -> dict[str, Any] | None:
    """A CSV row as an object that conforms to ``spec``, if any reading of its cells
    does (an empty cell: absent, null or ""; else JSON, or the text itself)."""
    choices: list[list[Any]] = []
    for cell in cells:
        if cell == "":
            choices.append([_ABSENT, None, ""])
            continue
        options: list[Any] = [cell]
        with contextlib.suppress(ValueError):
            options.insert(0, json.loads(cell))
        choices.append(options)
    for values in itertools.product(*choices):
        row = {n: v for n, v in zip(names, values, strict=True) if v is not _ABSENT}
        if spec.conforms(row):
            return row
    return None


_ABSENT = object()


def test_csv_token_walks_finish_on_conforming_rows(qwen: Vocabulary) -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0, "maximum": 999},
            "name": {"type": "string", "maxLength": 6},
            "kind": {"enum": ["a", "b,c", 'say "x"', None]},
            "ok": {"type": "boolean"},
            "score": {"type": "number", "minimum": -1, "maximum": 1},
        },
        "required": ["id", "name", "ok"],
    }
    names = list(schema["properties"])
    spec = Schema.of(schema)
    compiled = compile_csv(schema, qwen, max_rows=3)
    texts = _random_walks(compiled, qwen, seed=11, walks=40, steps=400)
    assert len(texts) >= 30
    counts = set()
    for data in texts:
        assert compiled.accepts(data)
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
        assert rows[0] == names
        assert 1 <= len(rows) - 1 <= 3
        counts.add(len(rows) - 1)
        for cells in rows[1:]:
            assert len(cells) == len(names), (data, cells)
            assert _as_row(cells, names, spec) is not None, (data, cells)
    assert len(counts) > 1


def test_tokenized_jsonl_and_csv_walk_through_the_matcher(qwen: Vocabulary) -> None:
    """Text a tokenizer spells its own way (merged pieces across cells and lines) is
    allowed token by token, and the end is allowed exactly at the end."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZERS / "qwen2.5" / "tokenizer.json"))
    people = [
        Person(name="Ada, Countess", age=36, color=Color.RED, score=0.5, tag="b,c"),
        Person(name='say "hi"\nthere', color=Color.BLUE, member=True, score=1),
    ]
    jsonl = "\n".join(p.model_dump_json() for p in people) + "\n"
    rows = [list(Person.model_fields)]
    for p in people:
        values = p.model_dump(mode="json").values()
        rows.append([_cell(value) for value in values])
    for compiled, text in (
        (compile_jsonl(Person, qwen), jsonl),
        (compile_csv(Person, qwen), _written(rows, "\r\n")),
    ):
        assert compiled.accepts(text)
        matcher = compiled.matcher()
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        for index, token in enumerate(ids):
            assert matcher.mask()[token], (text, index)
            assert matcher.advance(token)
        assert matcher.can_end()
        assert matcher.advance(next(iter(qwen.eos_ids)))
        assert matcher.is_finished()


def _synthetic_vocabulary() -> Vocabulary:
    """Every printable ASCII byte, line ends, and pieces that cross cells and lines."""
    pieces = [bytes([b]) for b in range(32, 127)] + [b"\n", b"\r", b"\r\n"]
    pieces += [b'""', b',"', b'",', b'"\n', b",,", b"1,", b"\n1", b"ab,c", b'a""b', b"}\n{"]
    pieces += [b'{"id": ', b'"name": "', b"true,", b"\xc3\xa9", b"\xe6\x97", b"\xa5"]
    return Vocabulary.from_token_bytes([*pieces, b""], eos_ids=[len(pieces)])


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_masks_equal_the_reference_matchers_on_every_visited_state(kind: str) -> None:
    vocabulary = _synthetic_vocabulary()
    if kind == "jsonl":
        compiled = compile_jsonl(ITEM, vocabulary, max_lines=3)
    else:
        compiled = compile_csv(Person, vocabulary, max_rows=3)
    reference = compiled.reference()
    rng = random.Random(5)
    visited = 0
    for _ in range(12):
        matcher = compiled.matcher()
        for _ in range(80):
            mask = matcher.mask()
            expected = np.zeros(vocabulary.size, dtype=bool)
            for token in range(vocabulary.size):
                data = vocabulary.token_bytes(token)
                if data and vocabulary.allowed_base[token]:
                    expected[token] = bool(reference.feed(matcher.state, data))
            if reference.can_end(matcher.state):
                expected[sorted(vocabulary.eos_ids)] = True
            assert np.array_equal(mask, expected)
            visited += 1
            assert matcher.advance(int(rng.choice(np.flatnonzero(mask))))
            if matcher.is_finished():
                break
    assert visited > 200


def test_csv_cells_that_branches_reach_many_ways_are_built_once() -> None:
    # d_i = anyOf [$ref d_i+1, $ref d_i+1]: every level doubled the cells built and
    # their options (22 levels, 1.5 KB: 94 s and 636 MB; 24: MemoryError), and the
    # integer leaves never met the compile deadline. Now each cell once: 60 levels.
    code = """
import json
import jsonmode
n = 60
defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i+1}"}, {"$ref": f"#/$defs/d{i+1}"}]}
        for i in range(n)}
defs[f"d{n}"] = {"anyOf": [{"type": "integer", "maximum": 9}, {"type": "boolean"}]}
schema = {"$defs": defs, "type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}}
g = jsonmode.compile_csv(schema, max_compile_seconds=5)
print(json.dumps([g.accepts("a\\n7\\n"), g.accepts("a\\ntrue\\n"), g.accepts("a\\n10\\n")]))
"""
    assert json.loads(run_python(code, 30)) == [True, True, False]
