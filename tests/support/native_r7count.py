"""The replay of an automaton over every node of the token trie
(``jsonmode._native.r7count_replay``, csrc/r7count_replay.c), held to its Python form
(``TokenTrie.replay``'s gather per level): random tries (tokens of random bytes,
shared prefixes, empty vocabularies), random tables with an absorbing dead state and
random int16 weights (wrapping sums included); and the kernel's malformed calls."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from jsonmode import native
from jsonmode.decoding.engine.entries import lexicographic_order
from jsonmode.decoding.engine.trie import TokenTrie


@dataclass
class ReplayCase:
    """A trie, a table (n states, the last absorbing), a start and per-transition weights."""

    trie: TokenTrie
    table: Any
    state: int
    weights: Any
    model: Any = field(default_factory=lambda: _Calls())


@dataclass
class _Calls:
    calls: list[Any] = field(default_factory=list)  # (no closures: native_fuzz.differ asks)


def _trie(rng: random.Random, count: int) -> TokenTrie:
    alphabet = rng.choice((b"ab", b"abc\x00\xff", bytes(range(256))))
    tokens = []
    for _ in range(count):
        size = rng.randint(1, rng.choice((2, 5, 12)))
        tokens.append(bytes(rng.choice(alphabet) for _ in range(size)))
    width = max((len(t) for t in tokens), default=1)
    matrix = np.zeros((len(tokens), width), dtype=np.uint8)
    for row, token in enumerate(tokens):
        matrix[row, : len(token)] = list(token)
    lengths = np.array([len(t) for t in tokens], dtype=np.int64)
    order = lexicographic_order(matrix, lengths)
    return TokenTrie(matrix[order], lengths[order])


def make_replay(rng: random.Random) -> ReplayCase:
    states = rng.choice((1, 2, 5, 40))
    table = np.full((states, 256), states - 1, dtype=np.int32)  # (the last: dead)
    for row in range(states - 1):
        for byte in rng.sample(range(256), rng.choice((0, 3, 60, 256))):
            table[row, byte] = rng.randrange(states)
    weights = np.zeros(states * 256, dtype=np.int16)
    kind = rng.randrange(3)
    if kind == 1:
        weights[:] = [rng.choice((0, 1)) for _ in range(weights.size)]
    elif kind == 2:  # (sums that wrap)
        weights[:] = [rng.choice((-32768, 32767, 20000, -1)) for _ in range(weights.size)]
    trie = _trie(rng, rng.choice((0, 1, 7, 60)))
    return ReplayCase(trie, table.reshape(-1), rng.randrange(states), weights)


def replay_python(case: ReplayCase) -> Any:
    with native.use(False):
        states, sums = case.trie.replay(case.table, case.state, case.weights)
    return states.tolist(), sums.tolist()


def replay_compiled(kernels: ModuleType, case: ReplayCase) -> Any:
    nodes = case.trie._byte.size
    states = np.empty(nodes, dtype=np.int64)
    sums = np.empty(nodes, dtype=np.int16)
    parents = case.trie._parents()
    kernels.r7count_replay(
        case.table, case.state, case.weights, parents, case.trie._byte, states, sums
    )
    return states.tolist(), sums.tolist()


def hostile_r7count_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to ``r7count_replay``: each must raise TypeError or ValueError."""
    flat = np.zeros(2 * 256, dtype=np.int32)
    flat[ord("a")] = 1
    weights = np.ones(2 * 256, dtype=np.int16)
    parents = np.array([-1, 0, 1], dtype=np.int64)
    data = np.array([97, 97, 98], dtype=np.int64)

    def call(**changes: Any) -> Callable[[], Any]:
        args: dict[str, Any] = {
            "table": flat,
            "state": 0,
            "weights": weights,
            "parents": parents,
            "bytes": data,
            "out_states": np.zeros(3, dtype=np.int64),
            "out_sums": np.zeros(3, dtype=np.int16),
        }
        args.update(changes)
        return lambda: kernels.r7count_replay(*args.values())

    readonly = np.zeros(3, dtype=np.int64)
    readonly.flags.writeable = False
    i64 = np.int64
    return [
        ("r7count a table of int64", call(table=flat.astype(np.int64))),
        ("r7count a table of part of a row", call(table=flat[:300])),
        ("r7count a table not a buffer", call(table=[0] * 256)),
        ("r7count weights of int32", call(weights=weights.astype(np.int32))),
        ("r7count weights too short", call(weights=weights[:256])),
        ("r7count parents of int32", call(parents=parents.astype(np.int32))),
        ("r7count bytes shorter than parents", call(bytes=data[:2])),
        ("r7count out_states too short", call(out_states=np.zeros(2, dtype=np.int64))),
        ("r7count out_sums of int64", call(out_sums=np.zeros(3, dtype=np.int64))),
        ("r7count out_states read-only", call(out_states=readonly)),
        ("r7count out_states 2-D", call(out_states=np.zeros((3, 1), dtype=np.int64))),
        ("r7count a negative state", call(state=-1)),
        ("r7count a state past the table", call(state=2)),
        ("r7count a huge state", call(state=1 << 62)),
        ("r7count a parent after its node", call(parents=np.array([-1, 2, 1], dtype=i64))),
        ("r7count a parent that is itself", call(parents=np.array([-1, 1, 1], dtype=i64))),
        ("r7count a parent below -1", call(parents=np.array([-2, 0, 1], dtype=i64))),
        ("r7count a byte past 255", call(bytes=np.array([97, 256, 98], dtype=i64))),
        ("r7count a negative byte", call(bytes=np.array([-1, 97, 98], dtype=i64))),
        ("r7count a table entry of -1", call(table=np.full(512, -1, dtype=np.int32))),
        ("r7count a table entry past it", call(table=np.full(512, 2, dtype=np.int32))),
    ]
