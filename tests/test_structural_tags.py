"""Structural tags (issue 41): xgrammar's format, compiled by jsonmode's own engine.

Tool calls of several tools in the formats users write (Hermes/Qwen ``<tool_call>``,
Llama 3.x ``<|python_tag|>``, Mistral ``[TOOL_CALLS]``) are judged on hand-written
texts; random logits through the Qwen2.5 vocabulary only ever finish on texts whose
tagged regions hold arguments that conform to their tool's schema (checked apart, with
jsonschema); the other formats, the legacy form, ``at_least_one``/``stop_after_first``
and the typed errors (with the JSON path of the problem) are pinned one by one.
"""

from __future__ import annotations

import functools
import json
import random
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

import jsonmode
from jsonmode.decoding.grammars.tag_spec import MAX_DEPTH
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import (
    BudgetExceededError,
    InvalidGrammarError,
    UnsupportedSchemaError,
    UsageError,
)

TOKENIZERS = Path("/work/shared/data/tokenizers")

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["c", "f"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"tz": {"type": "string", "pattern": "^[A-Z]{3}$"}},
    "required": ["tz"],
    "additionalProperties": False,
}
SUM = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
TOOLS = {"get_weather": WEATHER, "get_time": TIME, "add": SUM}


def hermes(tools: dict[str, Any] = TOOLS, **flags: bool) -> dict[str, Any]:
    """Qwen/Hermes tool calls in prose, as vLLM's request carries them."""
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<tool_call>"],
            "tags": [
                {
                    "type": "tag",
                    "begin": f'<tool_call>\n{{"name": "{name}", "arguments": ',
                    "content": {"type": "json_schema", "json_schema": schema},
                    "end": "}\n</tool_call>",
                }
                for name, schema in tools.items()
            ],
            **flags,
        },
    }


def call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def test_hermes_tool_calls_in_prose() -> None:
    compiled = jsonmode.compile_structural_tag(hermes())
    assert compiled.kind == "structural_tag"
    good = [
        "",
        "Just prose, no call at all.",
        call("get_weather", '{"city": "Paris"}'),
        "Let me look. "
        + call("get_weather", '{"city": "Oslo", "unit": "c"}')
        + " and "
        + call("get_time", '{"tz": "UTC"}')
        + "\nDone.",
        call("add", '{"a": 1, "b": -2}') + call("add", '{"a": 0, "b": 0}'),
        "a < b, <tool and tool_call> are prose",
    ]
    bad = [
        call("get_weather", '{"town": "Paris"}'),  # wrong arguments
        call("get_weather", '{"city": "Paris", "unit": "k"}'),
        call("get_time", '{"tz": "utc"}'),  # the pattern
        call("get_weather", '{"city": "a very long city name"}'),  # maxLength
        call("add", '{"a": 1}'),  # a required argument missing
        call("send_mail", '{"to": "x"}'),  # unknown tool
        "Calling " + call("get_time", '{"tz": "UTC"}')[:-5],  # unclosed tag
        "I mention <tool_call> in passing",  # the trigger opens a call, always
        'text <tool_call>{"name": "add"}',
    ]
    for text in good:
        assert compiled.accepts(text), text
    for text in bad:
        assert not compiled.accepts(text), text


def test_stop_after_first_and_at_least_one() -> None:
    one = call("add", '{"a": 1, "b": 2}')
    two = one + " then " + call("get_time", '{"tz": "CET"}')
    cases = {
        (False, False): {"": True, "prose": True, "hi " + one: True, two: True, one + " bye": True},
        # exactly one call: no text before it, nothing after it
        (True, True): {
            "": False,
            "prose": False,
            one: True,
            "hi " + one: False,
            two: False,
            one + " bye": False,
        },
        # a call first (no leading text), then prose and calls
        (True, False): {
            "": False,
            "prose": False,
            one: True,
            "hi " + one: False,
            two: True,
            one + " bye": True,
        },
        # prose, then at most one call, which ends the output
        (False, True): {
            "": True,
            "prose": True,
            "hi " + one: True,
            two: False,
            one + " bye": False,
        },
    }
    for (at_least_one, stop_after_first), texts in cases.items():
        compiled = jsonmode.compile_structural_tag(
            hermes(at_least_one=at_least_one, stop_after_first=stop_after_first)
        )
        for text, verdict in texts.items():
            assert compiled.accepts(text) is verdict, (at_least_one, stop_after_first, text)


def llama3() -> dict[str, Any]:
    """Llama 3.x: prose, then at most one ``<|python_tag|>`` call that ends the reply."""
    return {
        "type": "triggered_tags",
        "triggers": ["<|python_tag|>"],
        "tags": [
            {
                "begin": f'<|python_tag|>{{"name": "{name}", "parameters": ',
                "content": {"type": "json_schema", "json_schema": schema},
                "end": "}",
            }
            for name, schema in TOOLS.items()
        ],
        "stop_after_first": True,
    }


def test_llama3_python_tag() -> None:
    compiled = jsonmode.compile_structural_tag(json.dumps(llama3()))
    assert compiled.accepts('<|python_tag|>{"name": "get_time", "parameters": {"tz": "PST"}}')
    assert compiled.accepts('Sure.\n<|python_tag|>{"name": "add", "parameters": {"a": 3, "b": 4}}')
    assert compiled.accepts("No tool needed.")
    assert not compiled.accepts('<|python_tag|>{"name": "add", "parameters": {"a": 3}}')
    assert not compiled.accepts('<|python_tag|>{"name": "sub", "parameters": {"a": 3, "b": 1}}')
    assert not compiled.accepts(
        '<|python_tag|>{"name": "add", "parameters": {"a": 3, "b": 4}} and more'
    )


def mistral() -> dict[str, Any]:
    """Mistral: ``[TOOL_CALLS]`` then a JSON array of calls, to the end of the reply."""
    calls = {
        "type": "array",
        "minItems": 1,
        "items": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"name": {"const": name}, "arguments": schema},
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
                for name, schema in TOOLS.items()
            ]
        },
    }
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["[TOOL_CALLS]"],
            "tags": [
                {
                    "type": "tag",
                    "begin": "[TOOL_CALLS]",
                    "content": {"type": "json_schema", "json_schema": calls},
                    "end": "",
                }
            ],
            "stop_after_first": True,
        },
    }


def test_mistral_tool_calls() -> None:
    compiled = jsonmode.compile_structural_tag(mistral())
    assert compiled.accepts(
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}, '
        '{"name": "add", "arguments": {"a": 1, "b": 1}}]'
    )
    assert compiled.accepts("I can answer that without tools.")
    assert not compiled.accepts('[TOOL_CALLS][{"name": "get_weather", "arguments": {"a": 1}}]')
    assert not compiled.accepts('[TOOL_CALLS][{"name": "nope", "arguments": {}}]')
    assert not compiled.accepts("[TOOL_CALLS][]")
    assert not compiled.accepts('[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 1}}')


def test_the_legacy_form_and_json_text() -> None:
    legacy = {
        "type": "structural_tag",
        "structures": [
            {"begin": "<function=add>", "schema": SUM, "end": "</function>"},
            {"begin": "<function=get_time>", "schema": json.dumps(TIME), "end": "</function>"},
        ],
        "triggers": ["<function="],
    }
    for spec in (legacy, json.dumps(legacy)):
        compiled = jsonmode.compile_structural_tag(spec)
        assert compiled.accepts('x <function=add>{"a": 1, "b": 2}</function> y')
        assert compiled.accepts('<function=get_time>{"tz": "EST"}</function>')
        assert not compiled.accepts('<function=add>{"a": 1}</function>')
        assert not compiled.accepts('<function=sub>{"a": 1, "b": 2}</function>')


def test_the_other_formats() -> None:
    think = {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"}
    spec = {
        "type": "sequence",
        "elements": [
            think,
            {"type": "const_string", "value": "\nAnswer: "},
            {
                "type": "or",
                "elements": [
                    {"type": "regex", "pattern": "[A-Z]{3}-[0-9]{2}"},
                    {"type": "grammar", "grammar": 'root ::= "yes" | "no" | num\nnum ::= [0-9]+'},
                ],
            },
            {"type": "optional", "content": {"type": "const_string", "value": "!"}},
        ],
    }
    compiled = jsonmode.compile_structural_tag(spec)
    assert compiled.accepts("<think>hmm, a < b</think>\nAnswer: ABC-12")
    assert compiled.accepts("<think></think>\nAnswer: no!")
    assert compiled.accepts("<think>x</think>\nAnswer: 42")
    # the end marker closes the free text at its first occurrence
    assert not compiled.accepts("<think>a</think>b</think>\nAnswer: yes")
    assert not compiled.accepts("<think>x</think>\nAnswer: AB-12")
    assert not compiled.accepts("<think>x</think>\nAnswer: maybe")
    excluded = jsonmode.compile_structural_tag(
        {"type": "any_text", "excludes": ["BAD", "worse"], "max_chars": 8}
    )
    assert excluded.accepts("fine")
    assert excluded.accepts("")
    assert not excluded.accepts("a BAD one")
    assert not excluded.accepts("123456789")  # nine characters
    separated = jsonmode.compile_structural_tag(
        {
            "type": "tags_with_separator",
            "separator": ",",
            "tags": [
                {
                    "type": "tag",
                    "begin": "<a>",
                    "content": {"type": "json_schema", "json_schema": SUM},
                    "end": "</a>",
                },
                {
                    "type": "tag",
                    "begin": "<t>",
                    "content": {"type": "json_schema", "json_schema": TIME},
                    "end": "</t>",
                },
            ],
            "at_least_one": True,
        }
    )
    assert separated.accepts('<a>{"a": 1, "b": 2}</a>,<t>{"tz": "ABC"}</t>')
    assert not separated.accepts("")
    assert not separated.accepts('<a>{"a": 1, "b": 2}</a> <t>{"tz": "ABC"}</t>')
    repeated = jsonmode.compile_structural_tag(
        {"type": "repeat", "min": 2, "max": 3, "content": {"type": "const_string", "value": "ab"}}
    )
    assert [repeated.accepts("ab" * n) for n in range(5)] == [False, False, True, True, False]
    dispatch = jsonmode.compile_structural_tag(
        {
            "type": "tag",
            "begin": "<r>",
            "content": {
                "type": "dispatch",
                "rules": [["@sum", {"type": "json_schema", "json_schema": SUM}]],
                "loop": True,
            },
            "end": "</r>",
        }
    )
    assert dispatch.accepts('<r>free @sum{"a": 1, "b": 2} text</r>')
    assert not dispatch.accepts('<r>free @sum{"a": 1} text</r>')
    assert not dispatch.accepts("<r>free @summary</r>")


@pytest.mark.parametrize(
    ("spec", "error", "where"),
    [
        ("{not json", InvalidGrammarError, "$: not JSON"),
        ("[]", InvalidGrammarError, "$: a structural tag is a JSON object"),
        ({"type": "structural_tag"}, InvalidGrammarError, '$: no "format"'),
        (
            {"type": "structural_tag", "format": {"type": "nope"}},
            InvalidGrammarError,
            "$.format.type: unknown format 'nope'",
        ),
        (
            {"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "end": "</a>"}},
            InvalidGrammarError,
            '$.format: a tag format needs "content"',
        ),
        (
            {"type": "sequence", "elements": [{"type": "const_string", "value": 3}]},
            InvalidGrammarError,
            "$.elements[0].value: expected a string",
        ),
        (
            {
                "type": "triggered_tags",
                "triggers": ["<f="],
                "tags": [
                    {"begin": "<f=a>", "content": {"type": "any_text"}, "end": "</f>"},
                    {"begin": "<g=b>", "content": {"type": "any_text"}, "end": "</f>"},
                ],
            },
            InvalidGrammarError,
            "$.tags[1].begin: '<g=b>' starts with no trigger",
        ),
        (
            {
                "type": "structural_tag",
                "format": {
                    "type": "triggered_tags",
                    "triggers": ["<f"],
                    "tags": [{"begin": "<f>", "content": {"typ": "any_text"}, "end": "</f>"}],
                },
            },
            InvalidGrammarError,
            "$.format.tags[0].content.type: missing",
        ),
        (
            {
                "type": "triggered_tags",
                "triggers": ["<f"],
                "tags": [{"begin": "<f>", "content": {"type": "any_text"}, "end": "</f>"}],
                "atleast_one": True,
            },
            InvalidGrammarError,
            "$.atleast_one: unknown field",
        ),
        (
            {"type": "json_schema", "json_schema": {"type": "strin"}},
            InvalidGrammarError,
            "$.json_schema",
        ),
        (
            {"type": "regex", "pattern": "(a"},
            InvalidGrammarError,
            "$.pattern: invalid regular expression",
        ),
        ({"type": "grammar", "grammar": "root ::= undefined"}, InvalidGrammarError, "$.grammar:"),
        (
            {"type": "repeat", "min": 3, "max": 1, "content": {"type": "any_text"}},
            InvalidGrammarError,
            "$.max: expected an integer >= min",
        ),
        (
            {
                "type": "tag",
                "begin": {"type": "token", "token": "<|a|>"},
                "content": {"type": "any_text"},
                "end": "x",
            },
            UnsupportedSchemaError,
            "$.begin: a token begin",
        ),
        ({"type": "any_tokens"}, UnsupportedSchemaError, "$.type: the token-level format"),
        ({"type": "any_text", "max_tokens": 5}, UnsupportedSchemaError, "$.max_tokens"),
        (
            {"type": "json_schema", "json_schema": {}, "style": "qwen_xml"},
            UnsupportedSchemaError,
            "$.style",
        ),
        (42, UsageError, "a structural tag is a dict or JSON text"),
    ],
)
def test_malformed_specs_name_the_path(spec: Any, error: type[Exception], where: str) -> None:
    with pytest.raises(error) as caught:
        jsonmode.compile_structural_tag(spec)
    assert type(caught.value) is error
    assert where in str(caught.value), str(caught.value)


def test_the_first_trigger_opens_the_call() -> None:
    """As xgrammar's matcher: where a trigger first appears, a tag must begin."""
    compiled = jsonmode.compile_structural_tag(
        {
            "type": "triggered_tags",
            "triggers": ["<f"],
            "tags": [
                {"begin": "<f=a>", "content": {"type": "regex", "pattern": "[0-9]+"}, "end": "</f>"}
            ],
        }
    )
    assert compiled.accepts("x<<f=a>1</f>")  # the first "<" is prose
    assert compiled.accepts("<f=a>1</f><f=a>22</f> <")
    assert not compiled.accepts("<f<f=a>1</f>")  # "<f" opened a call that is not one
    assert not compiled.accepts("<f=a>1</f")


def test_bounds() -> None:
    deep: dict[str, Any] = {"type": "const_string", "value": "x"}
    for _ in range(MAX_DEPTH + 1):
        deep = {"type": "optional", "content": deep}
    with pytest.raises(InvalidGrammarError, match="nest deeper"):
        jsonmode.compile_structural_tag(deep)
    with pytest.raises(BudgetExceededError):
        jsonmode.compile_structural_tag(" " * (9 << 20))
    rng = random.Random(41)
    many = ["".join(rng.choice("abcdefgh") for _ in range(30)) + f"{i};" for i in range(100)]
    with pytest.raises(UnsupportedSchemaError, match="fewer or shorter triggers"):
        jsonmode.compile_structural_tag(
            {
                "type": "triggered_tags",
                "triggers": many,
                "tags": [{"begin": t, "content": {"type": "any_text"}, "end": "!"} for t in many],
            }
        )
    with pytest.raises(BudgetExceededError, match="structural tag"):
        jsonmode.compile_structural_tag(
            {
                "type": "repeat",
                "min": 0,
                "max": 10**9,
                "content": {"type": "const_string", "value": "ab"},
            }
        )


# -- random walks ------------------------------------------------------------------------------


@functools.cache
def vocabulary_of(name: str) -> Vocabulary:
    return Vocabulary.from_tokenizer(TOKENIZERS / name)


def qwen() -> Vocabulary:
    return vocabulary_of("qwen2.5")


@functools.cache
def byte_tokens(name: str) -> dict[int, int]:
    vocabulary = vocabulary_of(name)
    singles: dict[int, int] = {}
    for token in np.flatnonzero(vocabulary.allowed_base).tolist():
        data = vocabulary.token_bytes(token)
        if len(data) == 1:
            singles.setdefault(data[0], token)
    return singles


CLOSING = frozenset(b'"},]')


@functools.cache
def closing_tokens(name: str) -> np.ndarray:
    """Tokens made only of bytes that close JSON values: preferred now and then inside
    a region, so that walks end within the bound."""
    vocabulary = vocabulary_of(name)
    closing = np.zeros(vocabulary.size, dtype=np.bool_)
    for token in np.flatnonzero(vocabulary.allowed_base).tolist():
        data = vocabulary.token_bytes(token)
        closing[token] = bool(data) and all(byte in CLOSING for byte in data)
    return closing


HERMES_CALL = re.compile(r'<tool_call>\n\{"name": "(\w+)", "arguments": ')


def walk_text(
    compiled: Any,
    seed: int,
    trigger: bytes,
    inside: Any = lambda text: text.count(b"<tool_call>") != text.count(b"</tool_call>"),
    tokenizer: str = "qwen2.5",
    max_tokens: int = 260,
) -> bytes | None:
    """Random logits through the mask; in free text, now and then the trigger is spelled
    byte by byte (as ordinary tokens) to open a region. The text, or None if the walk
    did not end within ``max_tokens``."""
    vocabulary = compiled.vocabulary
    rng = np.random.default_rng(seed)
    eos = sorted(vocabulary.eos_ids)
    closing = closing_tokens(tokenizer)
    matcher = compiled.matcher()
    text = b""
    pending: list[int] = []
    for _ in range(max_tokens):
        mask = matcher.mask()
        assert mask.any(), f"an empty mask after {text!r}"
        free = not inside(text)
        if pending:
            token = pending.pop(0)
            assert mask[token], f"the trigger's byte refused after {text!r}"
        elif free and rng.random() < 0.15:
            pending = [byte_tokens(tokenizer)[b] for b in trigger]
            token = pending.pop(0)
            assert mask[token], f"the trigger refused in free text after {text!r}"
        elif mask[eos[0]] and free and rng.random() < 0.15:
            token = eos[0]
        else:
            ordinary = mask.copy()
            ordinary[eos] = False
            choices = np.flatnonzero(ordinary)
            if not free and rng.random() < 0.4 and (ordinary & closing).any():
                choices = np.flatnonzero(ordinary & closing)
            token = int(choices[rng.integers(choices.size)]) if choices.size else eos[0]
        assert matcher.advance(token)
        if matcher.is_finished():
            return text
        text += vocabulary.token_bytes(token)
    return None


def hermes_regions(text: str) -> list[tuple[str, Any]]:
    """Each ``<tool_call>`` region of ``text``: the tool's name and its arguments, read
    apart from the grammar (a JSON decoder, then the closing text checked)."""
    regions = []
    decoder = json.JSONDecoder()
    at = 0
    while (start := text.find("<tool_call>", at)) >= 0:
        head = HERMES_CALL.match(text, start)
        assert head is not None, f"a region that does not open a call: {text[start:]!r}"
        begin = head.end() + len(text[head.end() :]) - len(text[head.end() :].lstrip(" \t\n\r"))
        arguments, end = decoder.raw_decode(text, begin)
        end += len(text[end:]) - len(text[end:].lstrip(" \t\n\r"))
        assert text.startswith("}\n</tool_call>", end), text[end:]
        regions.append((head.group(1), arguments))
        at = end + len("}\n</tool_call>")
    return regions


def test_random_walks_only_write_conforming_calls() -> None:
    compiled = jsonmode.compile_structural_tag(hermes(), qwen())
    ended = calls = 0
    for seed in range(12):
        data = walk_text(compiled, seed, b"<tool_call>")
        if data is None:
            continue
        ended += 1
        assert compiled.accepts(data), data
        text = data.decode("utf-8")
        for name, arguments in hermes_regions(text):
            calls += 1
            jsonschema.validate(arguments, TOOLS[name])
    assert ended >= 6, ended
    assert calls >= 6, calls


@pytest.mark.parametrize(
    ("tokenizer", "spec", "trigger"),
    [("llama-3", llama3(), "<|python_tag|>"), ("mistral-7b-v0.1", mistral(), "[TOOL_CALLS]")],
    ids=["llama3-python-tag", "mistral-tool-calls"],
)
def test_random_walks_of_single_call_formats(tokenizer: str, spec: Any, trigger: str) -> None:
    """Prose, then (at most) one call that runs to the end: the text after the first
    trigger is the call, whose arguments conform to the named tool's schema."""
    compiled = jsonmode.compile_structural_tag(spec, vocabulary_of(tokenizer))
    ended = calls = 0
    for seed in range(8):
        data = walk_text(
            compiled, seed, trigger.encode(), lambda text: trigger.encode() in text, tokenizer
        )
        if data is None:
            continue
        ended += 1
        assert compiled.accepts(data), data
        text = data.decode("utf-8")
        if trigger not in text:
            continue
        payload = json.loads(text[text.index(trigger) + len(trigger) :])
        for item in payload if isinstance(payload, list) else [payload]:
            calls += 1
            arguments = item["arguments"] if "arguments" in item else item["parameters"]
            jsonschema.validate(arguments, TOOLS[item["name"]])
    assert ended >= 4, ended
    assert calls >= 3, calls
