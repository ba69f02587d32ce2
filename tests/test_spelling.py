"""Canonical spellings in generation (``CompileOptions.spelling``): what the matcher
lets a model write is what ``json.dumps(value, ensure_ascii=False)`` writes, while
``accepts()`` takes every JSON spelling of a valid document."""

from __future__ import annotations

import json
import pathlib
import random
import re

import numpy as np
import pytest

from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import UnsupportedSchemaError

TOKENIZERS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "tokenizers"

PERSON = {
    "type": "object",
    "properties": {
        "age": {"type": "integer"},
        "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
        "tag": {"enum": ["café", 3, "a/b"]},
        "note": {"type": "string"},
    },
    "required": ["age", "id", "tag", "note"],
}
# A needless escape: \/ or \u of a character that may be written as it is.
NEEDLESS = re.compile(rb"\\/|\\u(?!00[01][0-9a-fA-F])")


@pytest.fixture(scope="module")
def qwen() -> Vocabulary:
    return Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")


def _walk(matcher, vocabulary: Vocabulary, text: bytes) -> bool:
    """Whether the matcher takes ``text`` byte by byte (through single-byte tokens)."""
    single = {vocabulary.token_bytes(i): i for i in range(vocabulary.size)}
    for byte in text:
        token = single.get(bytes([byte]))
        assert token is not None
        if not matcher.mask()[token] or not matcher.advance(token):
            return False
    return matcher.can_end()


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ('{"age":84,"id":"GF-323","tag":"café","note":"x\\ny"}', True),
        ('{"age":84.0,"id":"GF-323","tag":"café","note":""}', False),
        ('{"age":84,"id":"GF\\u002d323","tag":"café","note":""}', False),
        ('{"age":84,"id":"GF-323","tag":"caf\\u00e9","note":""}', False),
        ('{"age":84,"id":"GF-323","tag":3.0,"note":""}', False),
        ('{"age":84,"id":"GF-323","tag":3,"note":"\\u0001\\t"}', True),
        ('{"age":84,"id":"GF-323","tag":3,"note":"\\u0041"}', False),
    ],
)
def test_generation_writes_canonical_spellings_accepts_takes_all(
    qwen: Vocabulary, text: str, written: bool
) -> None:
    compiled = compile_schema(PERSON, qwen)
    assert compiled.accepts(text)  # every spelling is in the schema's language
    assert _walk(compiled.matcher(), qwen, text.encode()) is written
    assert compiled.reference().accepts(text.encode()) is written


def test_complete_spelling_lets_the_model_write_any_spelling(qwen: Vocabulary) -> None:
    compiled = compile_schema(PERSON, qwen, spelling="complete")
    text = '{"age":84.0,"id":"GF\\u002d323","tag":"caf\\u00e9","note":"\\/"}'
    assert _walk(compiled.matcher(), qwen, text.encode())
    assert compiled.accepts(text)
    assert not compiled.accepts('{"age":84.5,"id":"GF-323","tag":3,"note":""}')


def test_a_constant_is_forced_in_its_one_spelling(qwen: Vocabulary) -> None:
    compiled = compile_schema({"const": "é/\n"}, qwen)
    matcher = compiled.matcher()
    quote = next(i for i in range(qwen.size) if qwen.token_bytes(i) == b'"')
    assert matcher.advance(quote)
    assert matcher.forced_bytes() == 'é/\\n"'.encode()
    assert compiled.accepts('"\\u00e9\\/\\n"')
    number = compile_schema({"const": 3}, qwen)
    assert number.accepts("3.00")
    assert number.reference().accepts(b"3")
    assert not number.reference().accepts(b"3.00")


def test_draft4_integers_stay_without_a_fraction_in_both() -> None:
    compiled = compile_schema(
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}
    )
    assert compiled.accepts("3")
    assert not compiled.accepts("3.0")


def test_an_unknown_spelling_is_refused() -> None:
    with pytest.raises(UnsupportedSchemaError, match="spelling"):
        compile_schema({"type": "integer"}, spelling="pretty")


@pytest.mark.parametrize("seed", range(6))
def test_random_walks_under_the_mask_write_only_canonical_spellings(
    qwen: Vocabulary, seed: int
) -> None:
    """Tokens drawn at random from each mask (any token the decoder allows, as a
    random-weight model would, mostly one with a backslash, a dot or an ``e``
    in it, as an adversarial one would) never spell an integer with a fraction or an
    exponent, nor a needless escape."""
    schema = {
        "type": "object",
        "properties": {
            "ints": {"type": "array", "items": {"type": "integer"}, "maxItems": 6},
            "s": {"type": "string", "maxLength": 12},
            "k": {
                "type": "object",
                "additionalProperties": {"type": "integer"},
                "maxProperties": 3,
            },
        },
        "required": ["ints", "s", "k"],
        "additionalProperties": False,
    }
    compiled = compile_schema(schema, qwen)
    rng = random.Random(seed)
    matcher = compiled.matcher()
    eos = set(qwen.eos_ids)
    pieces: list[bytes] = []
    suspicious = np.array(
        [any(c in qwen.token_bytes(i) for c in (b"\\", b".", b"e", b"E")) for i in range(qwen.size)]
    )
    for _ in range(400):
        mask = matcher.mask()
        allowed = np.flatnonzero(mask & suspicious if rng.random() < 0.8 else mask)
        if not allowed.size:
            allowed = np.flatnonzero(mask)
        token = int(rng.choice(allowed.tolist()))
        if token in eos:
            break
        assert matcher.advance(token)
        pieces.append(qwen.token_bytes(token))
    text = b"".join(pieces)
    assert not NEEDLESS.search(text), text
    ints = re.search(rb'"ints": ?\[([^\]]*)', text)
    assert ints is not None, text
    numbers = re.findall(rb"[-+.eE0-9]+", ints.group(1))
    assert all(re.fullmatch(rb"-?[0-9]*", number) for number in numbers), text
    if matcher.can_end():
        assert isinstance(json.loads(text), dict)
