"""``TokenTrie.following`` and ``following_split``: a walk's boundary entries split by the
byte their rest starts with (the entries' children in the trie), for the whole set of
entries or cut into runs (a structural walk's groups, one per state where they stop),
checked against the children found by scanning the level below for each entry's node."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonmode.decoding.engine.entries import Boundaries
from jsonmode.decoding.engine.trie import TokenTrie


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


@settings(max_examples=150, deadline=None)
@given(tokens=_TOKENS, data=st.data())
def test_following_split_equals_each_runs_children(
    tokens: list[bytes], data: st.DataObject
) -> None:
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


def test_a_run_with_no_children_is_an_empty_part() -> None:
    # "ab" ends at depth 2 with nothing below it: its run follows to nothing.
    trie = _trie([b"a", b"ab", b"b"])
    bounds = Boundaries(
        np.array([0, 1], dtype=np.int64),
        np.array([2, 2], dtype=np.int64),
        np.array([1, 2], dtype=np.int64),
        np.array([0, 0], dtype=np.int64),
    )
    first, second = trie.following_split(bounds, [0, 1, 2])
    assert _rows(first) == [(ord("b"), 1, 2, 1)]
    assert _rows(second) == []
