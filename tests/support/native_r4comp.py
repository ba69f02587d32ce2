"""Seeded cases for ``csrc/r4comp_keys.c``: an object's extra-key automaton
(automata.keys: key_trie's arrays, key_trie_size's count, extra_key_body's table).
Used by tests/support/native_fuzz.py's PAIRS (so the sanitizer build runs them too),
tests/support/native_hostile.py and tests/test_native_r4comp.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np

from jsonmode import native
from jsonmode.decoding.automata import keys

# Letters that make names share prefixes, plus ones extra_key_body refuses.
_LETTERS = "aab_ Z~" + '"\\\té€'


def random_names(rng: random.Random) -> tuple[str, ...]:
    """A few names over a small alphabet (shared prefixes, repeats, the empty name),
    plain printable ASCII most of the time."""
    plain = rng.random() < 0.7
    letters = _LETTERS[:7] if plain else _LETTERS
    count = rng.choice((0, 1, 2, 5, 12, 40))
    return tuple(
        "".join(rng.choice(letters) for _ in range(rng.choice((0, 1, 2, 3, 6))))
        for _ in range(count)
    )


@dataclass
class KeysCase:
    names: tuple[str, ...]
    model: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(calls=[]))


def make_keys(rng: random.Random) -> KeysCase:
    return KeysCase(random_names(rng))


def _answer(case: KeysCase, trie: Callable[[tuple[str, ...]], keys.KeyTrie]) -> Any:
    """The trie's arrays, the prefix count and both key bodies (None: not plain), with
    the deadline checks recorded in ``case.model.calls``."""

    def checkpoint() -> None:
        case.model.calls.append("checkpoint")

    keys.key_trie.cache.clear()  # type: ignore[attr-defined]  # (extra_key_body's trie too)
    with mock.patch.object(keys, "checkpoint", checkpoint):
        built = trie(case.names)
        arrays = [
            built.names,
            *(a.tolist() for a in (built.parents, built.letters, built.owners, built.lengths)),
            built.named.tolist(),
            [a.dtype.str for a in (built.parents, built.named)],
        ]
        bodies = []
        for complete in (False, True):
            body = keys.extra_key_body.__wrapped__(case.names, None, complete=complete)  # type: ignore[attr-defined]
            bodies.append(
                None
                if body is None
                else (body.start, body.trans.tobytes(), body.accepting.tobytes(), body.trans.shape)
            )
    return arrays, keys.key_trie_size(case.names), bodies


def keys_python(case: KeysCase) -> Any:
    with mock.patch.object(native, "KERNELS", None):
        return _answer(case, keys.key_trie_py)


def keys_compiled(kernels: ModuleType, case: KeysCase) -> Any:
    with mock.patch.object(native, "KERNELS", kernels):
        return _answer(case, keys.key_trie.__wrapped__)  # type: ignore[attr-defined]


def hostile_r4comp_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to r4comp_key_count, r4comp_key_trie and r4comp_key_rows (each
    must raise)."""
    count, trie, rows = kernels.r4comp_key_count, kernels.r4comp_key_trie, kernels.r4comp_key_rows

    def i32(n: int) -> Any:
        return np.zeros(n, dtype=np.int32)

    def tick() -> None:
        return None

    def stop() -> None:
        raise ValueError("past the deadline")

    read_only = i32(2)
    read_only.flags.writeable = False
    prefix = np.full(256, -(1 << 20), dtype=np.int32)
    tail = np.full((5, 256), -(1 << 20), dtype=np.int32)
    far = prefix.copy()
    far[7] = 10**6
    below = prefix.copy()
    below[7] = -50
    table = np.empty((7, 256), dtype=np.int32)  # count 2 + 5 tail rows
    frozen = np.zeros((7, 256), dtype=np.int32)
    frozen.flags.writeable = False

    def rows_(trans: Any, head: Any, rest: Any, parents: Any, letters: Any, n: int) -> Any:
        return rows(trans, head, rest, parents, letters, n)

    def r(*shape: int) -> Any:
        return np.empty(shape, dtype=np.int32)

    def call_trie(names: Any, sizes: tuple[int, int] = (2, 2), **swap: Any) -> Callable[[], Any]:
        outs = [i32(sizes[0]) for _ in range(4)] + [i32(sizes[1])]
        for index, value in swap.items():
            outs[int(index[1:])] = value
        return lambda: trie(names, *outs, swap.get("checkpoint", tick))

    return [
        ("count a list", lambda: count(["a"])),
        ("count a non-str name", lambda: count(("a", 3))),
        ("count unsorted names", lambda: count(("b", "a"))),
        ("count repeated names", lambda: count(("a", "a"))),
        ("trie a list", lambda: trie(["ab", "b"], *[i32(2)] * 5, tick)),
        ("trie a non-str name", call_trie(("ab", 5))),
        ("trie unsorted names", call_trie(("b", "ab"))),
        ("trie outputs too short", call_trie(("ab", "b"), (2, 2), o0=i32(1))),
        ("trie outputs too long", call_trie(("ab", "b"), (4, 2))),
        ("trie named too short", call_trie(("ab", "b"), (3, 1))),
        ("trie a read-only output", call_trie(("a", "b"), (2, 2), o1=read_only)),
        ("trie an int64 output", call_trie(("ab", "b"), (3, 2), o2=np.zeros(3, np.int64))),
        ("trie a non-buffer output", call_trie(("ab", "b"), (3, 2), o3="abc")),
        ("trie checkpoint not callable", lambda: trie(("a",), *[i32(1)] * 5, 7)),
        ("trie checkpoint raising", lambda: trie(("a",), *[i32(1)] * 5, stop)),
        ("rows wrong count", lambda: rows_(table, prefix, tail, i32(1), i32(1), 3)),
        ("rows count zero", lambda: rows_(r(5, 256), prefix, tail, i32(0), i32(0), 0)),
        ("rows letters not as parents", lambda: rows_(table, prefix, tail, i32(1), i32(2), 2)),
        ("rows a parent too far", lambda: rows_(table, prefix, tail, i32(1) + 2, i32(1), 2)),
        ("rows a negative parent", lambda: rows_(table, prefix, tail, i32(1) - 1, i32(1), 2)),
        ("rows a letter past 255", lambda: rows_(table, prefix, tail, i32(1), i32(1) + 256, 2)),
        ("rows a target past the table", lambda: rows_(table, far, tail, i32(1), i32(1), 2)),
        ("rows a target below the shift", lambda: rows_(table, below, tail, i32(1), i32(1), 2)),
        ("rows a short prefix", lambda: rows_(table, prefix[:255], tail, i32(1), i32(1), 2)),
        ("rows a tail of 3 rows", lambda: rows_(r(5, 256), prefix, tail[:3], i32(1), i32(1), 2)),
        ("rows a read-only table", lambda: rows_(frozen, prefix, tail, i32(1), i32(1), 2)),
        ("rows int64", lambda: rows_(np.zeros((7, 256), "q"), prefix, tail, i32(1), i32(1), 2)),
    ]  # fmt: skip
