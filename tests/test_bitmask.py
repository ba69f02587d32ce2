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


def test_a_fill_of_the_state_filled_last_looks_nothing_up():
    """Inside a string most tokens lead back to the same state: its fill copies the
    bits the matcher kept, with no mask-cache lookup (counted as a hit all the same),
    and writes the same words as a fill that looks them up."""
    from jsonmode.decoding.engine.cache import MaskEngine
    from jsonmode.lru import Lru

    vocabulary, tokenizer = _setup("qwen2.5")
    compiled = jsonmode.compile_schema({"type": "string"}, vocabulary)
    ids = tokenizer.encode('"one two three four five six"', add_special_tokens=False).ids
    matcher, fresh = compiled.matcher(), compiled.matcher()
    words = np.zeros((vocabulary.size + 31) // 32, dtype=np.int32)
    expected = words.copy()
    lookups: list[object] = []
    real_bits, real_get = MaskEngine.bits, Lru.get

    def bits(self, state):  # type: ignore[no-untyped-def]
        lookups.append(state)
        return real_bits(self, state)

    def get(self, key):  # type: ignore[no-untyped-def]
        lookups.append(key)
        return real_get(self, key)

    states = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MaskEngine, "bits", bits)
        patch.setattr(Lru, "get", get)
        for token in ids:
            hits = compiled.engine.hits + compiled.engine.misses
            before = len(lookups)
            matcher.fill_bitmask(words)
            looked = len(lookups) > before
            assert compiled.engine.hits + compiled.engine.misses == hits + 1
            assert looked == (not states or matcher.state != states[-1])
            states.append(matcher.state)
            fresh._history = [matcher.state]  # (a matcher with no memo: looks up)
            fresh.fill_bitmask(expected)
            assert np.array_equal(words, expected)
            assert matcher.advance(token)
    assert len(states) > len(set(states)) + 3  # (the string's inside, state after state)
