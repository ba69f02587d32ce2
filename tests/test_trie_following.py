"""``TokenTrie.following`` and ``following_split``: a walk's boundary entries split by the
byte their rest starts with (the entries' children in the trie), for the whole set of
entries or cut into runs (a structural walk's groups, one per state where they stop),
checked against the children found by scanning the level below for each entry's node, on
both paths (the compiled core's ``Trie.following``, and NumPy's passes); on a real
vocabulary the two paths give the same arrays for every boundary entry of a wide walk;
malformed entries get typed errors from the compiled core."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.real_vocabularies import vocabulary as _vocabulary

import jsonmode
from jsonmode import native
from jsonmode.decoding.engine.entries import Boundaries
from jsonmode.decoding.engine.trie import TokenTrie

PATHS = [pytest.param(True, id="compiled"), pytest.param(False, id="python")]


def _path(compiled: bool) -> None:
    if compiled and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")


def _trie(tokens: list[bytes]) -> TokenTrie:
    tokens = sorted(tokens)
    width = max(len(token) for token in tokens)
    matrix = np.zeros((len(tokens), width), dtype=np.uint8)
    for row, token in enumerate(tokens):
        matrix[row, : len(token)] = np.frombuffer(token, dtype=np.uint8)
    return TokenTrie(matrix, np.array([len(token) for token in tokens], dtype=np.int64))


def _children(trie: TokenTrie, col: int, node: int) -> list[tuple[int, int, int, int]]:
    """(byte, lo, hi, col) of every child of ``node`` at depth ``col``, by a scan."""
    if col >= len(trie.levels):
        return []
    below = trie.levels[col]
    return [
        (int(below.byte[child]), int(below.lo[child]), int(below.hi[child]), col)
        for child in range(below.byte.size)
        if int(below.parent[child]) == node
    ]


def _rows(part: object) -> list[tuple[int, int, int, int]]:
    byte, lo, hi, col = part.pack()  # type: ignore[attr-defined]
    return list(zip(byte.tolist(), lo.tolist(), hi.tolist(), col.tolist(), strict=True))


_TOKENS = st.lists(
    st.text(alphabet="abc", min_size=1, max_size=5).map(str.encode), min_size=1, max_size=40
)


@pytest.mark.parametrize("compiled", PATHS)
@settings(max_examples=150, deadline=None)
@given(tokens=_TOKENS, data=st.data())
def test_following_split_equals_each_runs_children(
    compiled: bool, tokens: list[bytes], data: st.DataObject
) -> None:
    _path(compiled)
    with native.use(compiled):
        _check_split(tokens, data)


def _check_split(tokens: list[bytes], data: st.DataObject) -> None:
    trie = _trie(tokens)
    nodes = [
        (depth, node)
        for depth, level in enumerate(trie.levels, 1)
        for node in range(level.byte.size)
    ]
    entries = data.draw(st.lists(st.sampled_from(nodes), max_size=12))
    cols = np.array([depth for depth, _ in entries], dtype=np.int64)
    picked = np.array([node for _, node in entries], dtype=np.int64)
    los = np.array([int(trie.levels[d - 1].lo[n]) for d, n in entries], dtype=np.int64)
    his = np.array([int(trie.levels[d - 1].hi[n]) for d, n in entries], dtype=np.int64)
    bounds = Boundaries(los, his, cols, picked)
    inner = data.draw(st.lists(st.integers(0, len(entries)), max_size=4))
    edges = [0, *sorted(set(inner) - {0, len(entries)}), len(entries)]
    parts = trie.following_split(bounds, edges)
    assert len(parts) == len(edges) - 1
    for part, (begin, end) in zip(parts, itertools.pairwise(edges), strict=True):
        expected = [row for d, n in entries[begin:end] for row in _children(trie, d, n)]
        assert _rows(part) == expected
    whole = [row for d, n in entries for row in _children(trie, d, n)]
    assert _rows(trie.following(bounds)) == whole


@pytest.mark.parametrize("compiled", PATHS)
def test_a_run_with_no_children_is_an_empty_part(compiled: bool) -> None:
    # "ab" ends at depth 2 with nothing below it: its run follows to nothing.
    _path(compiled)
    trie = _trie([b"a", b"ab", b"b"])
    bounds = Boundaries(
        np.array([0, 1], dtype=np.int64),
        np.array([2, 2], dtype=np.int64),
        np.array([1, 2], dtype=np.int64),
        np.array([0, 0], dtype=np.int64),
    )
    with native.use(compiled):
        first, second = trie.following_split(bounds, [0, 1, 2])
    assert _rows(first) == [(ord("b"), 1, 2, 1)]
    assert _rows(second) == []


@pytest.mark.parametrize("tokenizer", ["qwen2.5", "gpt2"])
def test_both_paths_split_a_wide_walks_entries_alike(tokenizer: str) -> None:
    """The boundary entries of a wide structural walk on a real vocabulary (white space
    before an expression, where every " word" token passes into an identifier: ~16 000
    entries, children at every depth), cut at a few edges: the same arrays, dtypes
    included, from the compiled core and from NumPy."""
    _path(True)
    vocabulary = _vocabulary(tokenizer)
    compiled = jsonmode.compile_grammar(
        'root ::= (stmt " ")+\nstmt ::= ident ws "=" ws expr ";"\n'
        'expr ::= ident | "(" ws expr ws ")"\nws ::= [ ]*\nident ::= [a-zA-Z_] [a-zA-Z0-9_]*',
        vocabulary,
    )
    engine = compiled.engine
    trie = engine._index.trie
    rules = engine._walks._rules
    bounds = max(
        (
            engine._walks._compute_walk(rules.info(rule), state).bounds
            for rule in range(len(engine.network.rules))
            for state in range(rules.info(rule).crossing.size)
        ),
        key=lambda found: found.size,
    )
    assert bounds.size > 1000
    edges = [0, 1, bounds.size // 3, bounds.size // 3, bounds.size - 1, bounds.size]
    with native.use(True):
        fast = trie.following_split(bounds, edges)
    with native.use(False):
        slow = trie.following_split(bounds, edges)
    assert sum(part.byte.size for part in fast) > bounds.size
    for a, b in zip(fast, slow, strict=True):
        for x, y in zip(a.pack(), b.pack(), strict=True):
            assert x.dtype == y.dtype
            assert np.array_equal(x, y)


def test_the_compiled_following_refuses_entries_outside_the_trie() -> None:
    _path(True)
    trie = _trie([b"a", b"ab", b"b"])
    core = trie.compiled(native.KERNELS)
    one = np.zeros(1, dtype=np.int64)
    for cols, nodes in [(one + 3, one), (one, one), (one + 1, one + 2), (one + 1, one - 1)]:
        with pytest.raises(ValueError, match="outside the trie"):
            core.following(cols, nodes)
    with pytest.raises(TypeError, match="int64"):
        core.following(one.astype(np.int32), one)
    with pytest.raises(TypeError, match="one length"):
        core.following(np.zeros(2, dtype=np.int64), one)
