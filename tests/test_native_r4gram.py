"""The wide trie walk in preorder (issue 43, round 4): ``jsonmode._native.Trie.walk``
with inside flags (``TokenTrie.walk(..., wide=True)``, a mask-cache miss of a state that
reads most of the vocabulary) reads the trie laid out once in preorder
(csrc/r4gram_wide.c) instead of level by level; its answers are the level walk's.

- Real walks: every wide walk of the JSON-as-GBNF grammar and of the grammar corpus
  along valid texts (Qwen2.5's vocabulary) equals the pure-Python walk and the compiled level
  walk (the same call without flags), boundary entries in the same order.
- Seeded random automata over synthetic tries, always wide (also a PAIRS entry of the
  sanitizer run), equal the pure-Python walk.
- Tries the preorder cannot hold (shared child ranges) and frontiers naming a node twice
  walk by levels; malformed calls raise typed errors, never crash.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from jsonmode import native
from jsonmode.decoding.engine import segments, walk
from jsonmode.decoding.engine.trie import TokenTrie
from jsonmode.decoding.grammars import compiled as grammars_compiled

KERNELS = native.KERNELS
pytestmark = pytest.mark.skipif(KERNELS is None, reason="the compiled core is not loaded")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support.native_fuzz import (  # noqa: E402
    AutomatonCase,
    automaton_walk_compiled,
    automaton_walk_python,
    make_wide_walk,
)

_SMALL, _WIDE_LEVELS = 24, 12  # (TokenTrie.walk's: small levels, a wide walk's first levels)


def _levels_walk(
    trie: Any, count: int, call: tuple[Any, ...], flags: bool
) -> tuple[list[int], bytes]:
    """One compiled walk of ``call`` over a trie of ``count`` tokens: with flags (the
    preorder walk) or without (the level walk), its inside positions as a sorted list,
    and its boundary entries."""
    table, dead, crossing, nodes, states, *rest = call
    alive = states != dead
    out = np.zeros(count, dtype=np.bool_) if flags else None
    inside, entries = trie.walk(
        table, dead, crossing, nodes[alive], states[alive], 1, _SMALL, _WIDE_LEVELS, out, *rest
    )
    if out is not None:
        assert inside == b""
        return np.flatnonzero(out).tolist(), entries
    spans = np.frombuffer(inside, dtype=np.int64).reshape(-1, 2)
    return sorted({p for lo, hi in spans.tolist() for p in range(lo, hi)}), entries


def _captured_wide_walks(run: Any) -> list[tuple[TokenTrie, tuple[Any, ...]]]:
    """The wide walks ``run()`` makes on the compiled path: (trie, (table, dead,
    crossing, nodes, states)), copied."""
    captured: list[tuple[TokenTrie, tuple[Any, ...]]] = []
    original = TokenTrie._compiled_walk

    def spy(self: TokenTrie, kernels: Any, table: Any, dead: int, crossing: Any,
            frontier: Any, depth: int, wide: bool, follow: Any = None) -> Any:  # fmt: skip
        if wide and depth == 1:
            call = (
                np.ascontiguousarray(table).copy(),
                dead,
                np.ascontiguousarray(crossing, dtype=np.bool_).copy(),
                np.asarray(frontier[0], dtype=np.int64).copy(),
                np.asarray(frontier[1], dtype=np.int64).copy(),
                None if follow is None else np.asarray(follow, dtype=np.bool_).copy(),
            )
            captured.append((self, call))
        return original(self, kernels, table, dead, crossing, frontier, depth, wide, follow)

    with mock.patch.object(TokenTrie, "_compiled_walk", spy):
        run()
    return captured


@pytest.fixture(autouse=True)
def _fresh_constraints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every grammar compiled anew, its engine's walks not made yet: an earlier test in
    the same process (tests/test_grammar_decoding.py) may have compiled the same grammar
    over an equal vocabulary, and a cached one, or walks and segments kept in the
    process-wide caches, make no walk to capture."""
    monkeypatch.setattr(grammars_compiled, "_cache", {})
    for kept in (segments.segment_cache, walk.walk_cache, walk.local_walk_cache):
        kept.clear()


def _check_real(captured: list[tuple[TokenTrie, tuple[Any, ...]]]) -> None:
    assert captured, "no wide walk was made"
    for trie, call in captured:
        table, dead, crossing, nodes, states, follow = call
        compiled = trie.compiled(KERNELS)
        # The preorder walk is the compiled level walk, entries in its order ...
        preorder = _levels_walk(compiled, trie.count, call, True)
        assert preorder == _levels_walk(compiled, trie.count, call, False)
        # ... and the pure-Python walk (through TokenTrie.walk, both paths).
        results = []
        for on in (True, False):
            with native.use(on):
                walked = trie.walk(
                    table, dead, crossing, nodes, states, lambda s: [], wide=True, follow=follow
                )
            results.append((walked.inside.tolist(), [f.tolist() for f in walked.bounds.pack()]))
        assert results[0] == results[1]


def _qwen() -> Any:
    from support.native_digest import QWEN
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(QWEN / "tokenizer.json"))


def test_json_gbnf_wide_walks_are_the_level_walks_and_the_pure_walks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The JSON-as-GBNF grammar along a JSON text: its string-body states read ~147k of
    Qwen2.5's tokens; each such walk gives the same answer three ways. (The clean slice
    is turned off: it takes a string body's clean tokens without walking them, and its
    rule is a structural one here.)"""
    monkeypatch.setattr(walk.Walks, "_sliced_walk", lambda self, info, state: None)
    import test_grammar_decoding as corpus

    import jsonmode
    from jsonmode.decoding.vocabulary import Vocabulary

    tokenizer = _qwen()
    vocabulary = Vocabulary.from_tokenizer(tokenizer)
    text = json.dumps({"name": "Ada Lovelace", "tags": ["a", "b\\n"], "n": -1.5e3, "ok": True})

    def run() -> None:
        matcher = jsonmode.compile_grammar(corpus.JSON_GBNF, vocabulary).matcher()
        for token in tokenizer.encode(text).ids:
            assert matcher.mask()[token]
            assert matcher.advance(token)

    _check_real(_captured_wide_walks(run))


def test_grammar_corpus_wide_walks_are_the_level_walks_and_the_pure_walks() -> None:
    """The grammar corpus (tests/test_grammar_decoding.py: GBNF, regex, choice and
    built-in grammars) along its valid texts: the same, for every wide walk made."""
    import test_grammar_decoding as corpus

    from jsonmode.decoding.vocabulary import Vocabulary

    tokenizer = _qwen()
    vocabulary = Vocabulary.from_tokenizer(tokenizer)

    def run() -> None:
        for case in corpus.CASES:
            compiled = case.build(vocabulary)
            for text in case.good:
                matcher = compiled.matcher()
                for token in tokenizer.encode(text).ids:
                    matcher.mask()
                    if not matcher.advance(token):
                        break

    _check_real(_captured_wide_walks(run))


def test_seeded_wide_walks_are_the_pure_walks() -> None:
    """400 random automata over synthetic tries (deep tokens, many crossing states),
    always wide: the compiled walk is the pure-Python one."""
    rng = random.Random(4343)
    for _ in range(400):
        case = make_wide_walk(rng)
        assert automaton_walk_compiled(KERNELS, case) == automaton_walk_python(case)


def _shared_children_levels() -> list[tuple[Any, ...]]:
    """Two levels whose two depth-1 nodes share their children (not a tree: the
    preorder layout refuses it, the level walk reads it)."""
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    return [
        (i(0, 2), i(2, 4), i(0, 0), i(0, 0), i(2, 2), i(97, 98)),
        (i(0, 1), i(1, 2), i(1, 1), i(0, 0), i(0, 0), i(97, 98)),
    ]


def test_shared_children_and_repeated_nodes_walk_by_levels() -> None:
    """A trie that is not a tree, and a frontier naming a node twice: the flags walk
    still answers as the level walk."""
    assert KERNELS is not None
    trie = KERNELS.Trie(_shared_children_levels())
    table = np.full(3 * 256, 2, dtype=np.int32)
    table[0 * 256 + 97] = 1
    table[0 * 256 + 98] = 0
    table[1 * 256 + 97] = 0
    crossing = np.array([False, True, False])
    call = (table, 2, crossing, np.array([0, 1], dtype=np.int64), np.array([0, 1], dtype=np.int64))
    assert _levels_walk(trie, 4, call, True) == _levels_walk(trie, 4, call, False)
    # A node twice (a tree this time): the level walk's answer too.
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    tree = KERNELS.Trie([(i(0, 1), i(1, 2), i(1, 1), i(0, 0), i(0, 0), i(97, 98))])
    twice = (table, 2, crossing, i(0, 0, 1), i(0, 1, 1))
    assert _levels_walk(tree, 2, twice, True) == _levels_walk(tree, 2, twice, False)


def test_malformed_wide_walks_raise_typed_errors() -> None:
    """States outside the table, nodes outside the first level, flags too short:
    ValueError, as the level walk raises them."""
    assert KERNELS is not None
    case: AutomatonCase = make_wide_walk(random.Random(7))
    while not case.nodes.size:
        case = make_wide_walk(random.Random(int(case.dead) + 11))
    from support.native_fuzz import trie_levels

    trie = KERNELS.Trie(trie_levels(case.trie))
    table = np.ascontiguousarray(case.table)
    crossing = np.ascontiguousarray(case.crossing, dtype=np.bool_)
    flags = np.zeros(case.trie.count, dtype=np.bool_)
    nodes, states = case.nodes[:1], np.zeros(1, dtype=np.int64)
    bad = [
        (table, case.dead, crossing, nodes, np.array([case.dead + 5]), flags),
        (table, case.dead, crossing, nodes, np.array([-3]), flags),
        (table, case.dead, crossing, np.array([10**6]), states, flags),
        (table, case.dead, crossing, np.array([-1]), states, flags),
    ]
    for table_, dead, crossing_, nodes_, states_, flags_ in bad:
        with pytest.raises(ValueError, match="outside"):
            trie.walk(table_, dead, crossing_, nodes_.astype(np.int64), states_.astype(np.int64),
                      1, _SMALL, _WIDE_LEVELS, flags_)  # fmt: skip
    # Follow flags that are not 256 bytes: a TypeError, before anything is read.
    for follow in (np.zeros(255, np.bool_), np.zeros(256, np.int32), "abc", 7):
        with pytest.raises(TypeError, match="follow"):
            trie.walk(table, case.dead, crossing, nodes, states, 1, _SMALL, _WIDE_LEVELS, flags,
                      follow)  # fmt: skip
    # Flags too short for the tokens read: refused, nothing written past them.
    if case.trie.count > 1:
        short = np.zeros(1, dtype=np.bool_)
        everything = np.zeros((case.dead + 1) * 256, dtype=table.dtype)  # state 0 reads all
        open_crossing = np.zeros(case.dead + 1, dtype=np.bool_)
        firsts = np.arange(case.trie.levels[0].byte.size, dtype=np.int64)
        with pytest.raises(ValueError, match="outside the trie"):
            trie.walk(everything, case.dead, open_crossing, firsts, np.zeros_like(firsts),
                      1, _SMALL, _WIDE_LEVELS, short)  # fmt: skip
