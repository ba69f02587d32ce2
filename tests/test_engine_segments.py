"""Walks assembled from per-first-byte segments (jsonmode.decoding.engine.segments).

``assemble`` answers a state from its cached segments plus one trie walk of the
missing ones: whatever the cache holds (nothing, some of the state's segments, all of
them), its answer is the one trie walk of every first byte the state reads, in Python.
On either path: the compiled core's (its live first bytes and keys, and the walk cut
into segments in one call: csrc/r6narrow_cut.c) and the pure-Python one."""

from __future__ import annotations

import pathlib
import random

import numpy as np
import pytest
import test_grammar_decoding as corpus

from jsonmode import native
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.engine import segments
from jsonmode.decoding.grammars.compiled import compile_grammar
from jsonmode.decoding.vocabulary import Vocabulary

TOKENIZERS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"

CHESS = corpus.CHESS  # (numbered chess moves in SAN, tests/test_grammar_decoding.py)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "n": {"type": "number", "minimum": 0, "maximum": 9.5},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["ab", "cd"]}},
    },
    "required": ["name"],
}


def _whole(index, info, state):  # type: ignore[no-untyped-def]
    """The reference: one trie walk of every first byte ``state`` reads."""
    row = info.flat[state * 256 : state * 256 + 256]
    live = [
        (byte, int(row[byte]))
        for byte in np.flatnonzero(row >= 0).tolist()
        if index.offsets[byte] != index.offsets[byte + 1]
    ]
    if not live:
        return np.zeros(0, dtype=np.int64), ([], [], [], [])
    with native.use(False):
        found = segments._trie_walk(index, info, live)
    return index.ids[found.inside], tuple(field.tolist() for field in found.bounds.pack())


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("source", ["chess", "schema"])
@pytest.mark.parametrize("name", ["qwen2.5", "llama-3"])
def test_assembled_walks_equal_one_walk_whatever_the_cache_holds(source, name, compiled):
    if compiled and native.KERNELS is None:
        pytest.skip("the compiled core is not built")
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)
    if source == "chess":
        engine = compile_grammar(CHESS, vocabulary).engine
    else:
        engine = compile_schema(SCHEMA, vocabulary).engine
    index, rng = engine._index, random.Random(7)
    cache = segments.segment_cache
    saved = cache.budget
    checked = partial = 0
    try:
        cache.budget = 1 << 30  # (nothing evicted behind the test's back)
        for rule in range(len(engine.network.rules)):
            info = engine._rules.info(rule)
            for state in range(info.flat.size // 256):
                ids, bounds = _whole(index, info, state)
                cache.clear()
                for _ in range(3):  # cold, then with a random part of its segments kept
                    with native.use(compiled):
                        got_ids, got_bounds = segments.assemble(index, info, state)
                    assert got_ids.tolist() == ids.tolist(), (rule, state)
                    assert tuple(f.tolist() for f in got_bounds.pack()) == tuple(bounds)
                    kept = list(cache._items)
                    for key in rng.sample(kept, rng.randint(0, len(kept))):
                        cache.used -= cache._items.pop(key)[1]
                    partial += 0 < len(cache) < len(kept)
                checked += 1
    finally:
        cache.budget = saved
        cache.clear()
    assert checked > 20
    assert partial > 10
