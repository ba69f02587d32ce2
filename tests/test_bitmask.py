"""``Matcher.fill_bitmask``: the mask as a token bitmask (32-bit words, token ``t`` at bit
``t % 32`` of word ``t // 32``), the form vLLM, xgrammar and llguidance use.

Checked against ``Matcher.mask()`` along real instance walks (Qwen2.5 and GPT-2
tokenizers from ``../shared/data/tokenizers``), for the end of a document, for arrays
wider than needed and rows of a batch, and for the arrays it refuses.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import tokenizers

import jsonmode
from jsonmode.decoding.vocabulary import Vocabulary

TOKENIZERS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        "id": {"type": "string", "pattern": "\\d{3}-\\d{2}"},
    },
    "required": ["name", "age"],
}
DOCUMENT = {"name": 'Zoë "Z" Lin', "age": 42, "tags": ["a", "b"], "id": "x 123-45 y"}


@functools.cache
def _setup(name: str) -> tuple[Vocabulary, tokenizers.Tokenizer]:
    tokenizer = tokenizers.Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))
    return Vocabulary.from_tokenizer(tokenizer), tokenizer


def _as_flags(words: np.ndarray, size: int) -> np.ndarray:
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    return bits[:size].astype(bool)


@pytest.mark.parametrize("name", ["qwen2.5", "gpt2"])
def test_the_bitmask_is_the_mask_along_a_walk(name: str) -> None:
    vocabulary, tokenizer = _setup(name)
    compiled = jsonmode.compile_schema(SCHEMA, vocabulary)
    text = json.dumps(DOCUMENT, ensure_ascii=False, separators=(",", ":"))
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    eos = min(vocabulary.eos_ids)
    matcher = compiled.matcher()
    words = np.full((vocabulary.size + 31) // 32, -1, dtype=np.int32)
    for token in [*ids, eos]:
        matcher.fill_bitmask(words)
        flags = _as_flags(words, vocabulary.size)
        assert np.array_equal(flags, matcher.mask())
        assert flags[token]
        assert matcher.advance(token)
    assert matcher.is_finished()
    matcher.fill_bitmask(words)
    assert not words.any()  # nothing may follow the end


def test_rows_of_a_batch_and_wide_arrays() -> None:
    vocabulary, _ = _setup("gpt2")
    compiled = jsonmode.compile_schema({"enum": ["yes", "no"]}, vocabulary)
    words = (vocabulary.size + 31) // 32
    batch = np.full((3, words + 5), 0xFFFFFFFF, dtype=np.uint32)
    matcher = compiled.matcher()
    matcher.fill_bitmask(batch[1])
    assert np.array_equal(_as_flags(batch[1], vocabulary.size), matcher.mask())
    assert not batch[1, words:].any()  # past the vocabulary: cleared
    assert (batch[0] == 0xFFFFFFFF).all()  # other rows untouched
    assert (batch[2] == 0xFFFFFFFF).all()


@pytest.mark.parametrize(
    "out",
    [
        np.zeros(10, dtype=np.int32),  # too few words
        np.zeros(1 << 20, dtype=np.int64),  # not 32-bit words
        np.zeros((1 << 16, 2), dtype=np.int32)[:, 0],  # not contiguous
    ],
)
def test_arrays_that_cannot_hold_a_bitmask_are_refused(out: np.ndarray) -> None:
    vocabulary, _ = _setup("gpt2")
    matcher = jsonmode.compile_schema({"type": "boolean"}, vocabulary).matcher()
    with pytest.raises(ValueError, match="32-bit words"):
        matcher.fill_bitmask(out)
