"""Random cases and malformed calls for round 6's narrow-walk kernels (csrc/r6narrow_cut.c):
``r6narrow_walk_cut`` against ``segments._trie_walk`` + ``segments._split`` (through
``TokenTrie.walk`` in Python), and ``r6narrow_live_keys`` against ``segments._live_keys``'s
vectorised form. Used by tests/support/native_fuzz.py's PAIRS and
tests/support/native_hostile.py."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np

from jsonmode import native
from jsonmode.decoding.engine import segments
from jsonmode.decoding.engine.trie import TokenTrie


def _fuzz() -> Any:
    """tests/support/native_fuzz.py (imported late: it imports this module for PAIRS)."""
    import support.native_fuzz as fuzz

    return fuzz


@dataclass
class CutCase:
    """A walk of ``table`` from some first bytes of ``trie`` (each in a state, the dead
    one included), cut (``cut``) into per-first-byte segments."""

    trie: TokenTrie
    offsets: Any
    table: Any
    dead: int
    crossing: Any
    firsts: list[int]
    targets: list[int]
    cut: bool
    model: Any = field(default_factory=lambda: _fuzz().StackModel([], [], [], {}, {}))
    follow: Any = None  # (see native_fuzz.random_follow)

    def reads(self, state: int) -> list[int]:
        row = self.table[state * 256 : state * 256 + 256]
        return np.flatnonzero(row != self.dead).tolist()  # type: ignore[no-any-return]


def make_cut(rng: random.Random) -> CutCase:
    fuzz = _fuzz()
    alphabet_of, random_table = fuzz.alphabet_of, fuzz.random_table
    token_set, token_trie = fuzz.token_set, fuzz.token_trie
    alphabet = alphabet_of(rng)
    tokens = token_set(rng, alphabet, most=rng.choice((10, 40, 90)))
    for _ in range(rng.randint(0, 2)):  # (long shared prefixes: small and big levels)
        stem = bytes(rng.choice(alphabet) for _ in range(rng.randint(4, 10)))
        tokens += [
            stem[: rng.randint(1, len(stem))] + bytes(rng.choice(alphabet) for _ in range(2))
            for _ in range(rng.choice((5, 40)))
        ]
    trie = token_trie(tokens)
    firsts_all = trie.levels[0].byte.tolist()
    offsets = np.zeros(257, dtype=np.int64)
    level = trie.levels[0]
    for byte, lo, hi in zip(firsts_all, level.lo.tolist(), level.hi.tolist(), strict=True):
        offsets[byte], offsets[byte + 1] = lo, hi
    for byte in range(1, 257):  # (bytes no token starts with: empty ranges)
        offsets[byte] = max(offsets[byte], offsets[byte - 1])
    states = rng.randint(1, 8)
    table = random_table(rng, alphabet, states, (0.1, 0.5, 0.95))
    crossing = np.array([rng.random() < 0.3 for _ in range(states)] + [False], dtype=np.bool_)
    firsts = sorted(rng.sample(firsts_all, rng.randint(1, len(firsts_all))))
    targets = [rng.randrange(states + 1) for _ in firsts]
    follow = _fuzz().random_follow(rng, alphabet)
    cut = rng.random() < 0.8
    return CutCase(trie, offsets, table, states, crossing, firsts, targets, cut, follow=follow)


def _rows(bounds: Any) -> bytes:
    return np.stack(bounds.pack(), axis=1).astype(np.int64).tobytes() if bounds.size else b""


def cut_python(case: CutCase) -> Any:
    with native.use(False):
        nodes = case.trie.first_nodes[np.array(case.firsts, dtype=np.int64)]
        walked = case.trie.walk(
            case.table,
            case.dead,
            case.crossing,
            nodes,
            np.array(case.targets, dtype=np.int64),
            case.reads,
            follow=case.follow,
        )
        index = SimpleNamespace(offsets=case.offsets)
        cut = segments._split(index, walked, case.firsts) if case.cut else None  # type: ignore[arg-type]
    return walked.inside.tolist(), _rows(walked.bounds), None if cut is None else list(cut)


def cut_compiled(kernels: ModuleType, case: CutCase) -> Any:
    """(Through :meth:`TokenTrie.walk_cut`, with ``kernels`` as the loaded core.)"""
    before = native.KERNELS
    native.KERNELS = kernels
    try:
        found = case.trie.walk_cut(
            case.table,
            case.dead,
            case.crossing,
            list(case.firsts),
            list(case.targets),
            case.offsets,
            case.cut,
            case.follow,
        )
    finally:
        native.KERNELS = before
    assert found is not None
    inside, rows, cut = found
    positions = np.frombuffer(inside, dtype=np.int32).tolist()
    return positions, rows, None if cut is None else list(cut)


@dataclass
class KeysCase:
    index: Any
    info: Any
    state: int
    model: Any = field(default_factory=lambda: _fuzz().StackModel([], [], [], {}, {}))


def make_live_keys(rng: random.Random) -> KeysCase:
    states = rng.randint(1, 6)
    draw = np.random.default_rng(rng.getrandbits(32))
    targets = draw.integers(0, states, size=states * 256, dtype=np.int32)
    shares = np.repeat(draw.choice([0.0, 0.05, 0.5, 1.0], size=states), 256)
    flat = np.where(draw.random(states * 256) < shares, targets, -1).astype(np.int32)
    counts = draw.choice([0, 0, 1, 7], size=256)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    kind = rng.randrange(2)
    hashes = (
        None
        if kind == 0
        else np.array(
            [[rng.getrandbits(64) for _ in range(states)] for _ in range(2)], dtype=np.uint64
        )
    )
    index = SimpleNamespace(offsets=offsets, fingerprint=f"v{rng.randrange(9)}")
    info = SimpleNamespace(flat=flat, hashes=hashes, signature=bytes([rng.randrange(256)] * 3))
    return KeysCase(index, info, rng.randrange(states))


def live_keys_python(case: KeysCase) -> Any:
    with native.use(False):
        return segments._live_keys(case.index, case.info, case.state)


def live_keys_compiled(kernels: ModuleType, case: KeysCase) -> Any:
    before = native.KERNELS
    native.KERNELS = kernels
    try:
        return segments._live_keys(case.index, case.info, case.state)
    finally:
        native.KERNELS = before


def hostile_r6narrow_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to the r6narrow kernels (each must raise)."""
    rng = random.Random(61)
    case = make_cut(rng)
    levels = [(lv.lo, lv.hi, lv.term, lv.child_lo, lv.child_hi, lv.byte) for lv in case.trie.levels]
    good = kernels.Trie(levels)
    first = case.trie.first_nodes
    ok_first = case.firsts[0]

    def cut(**changes: Any) -> Callable[[], Any]:
        args: dict[str, Any] = {
            "trie": good,
            "table": case.table,
            "dead": case.dead,
            "crossing": case.crossing,
            "first_nodes": first,
            "offsets": case.offsets,
            "firsts": [ok_first],
            "targets": [0],
            "small": 24,
            "cut": True,
        }
        args.update(changes)
        return lambda: kernels.r6narrow_walk_cut(*args.values())

    flat = np.full(2 * 256, -1, dtype=np.int32)
    flat[65] = 1
    offsets = np.arange(257, dtype=np.int64)
    tags = np.zeros(2, dtype=np.uint64)

    def keys(**changes: Any) -> Callable[[], Any]:
        args: dict[str, Any] = {
            "flat": flat,
            "state": 0,
            "offsets": offsets,
            "tags": tags,
            "fingerprint": "v",
            "signature": b"",
        }
        args.update(changes)
        return lambda: kernels.r6narrow_live_keys(*args.values())

    far = np.full(2 * 256, -1, dtype=np.int32)
    far[65] = 7  # (a target past the tags)
    return [
        ("r6narrow_walk_cut not a Trie", cut(trie=object())),
        ("r6narrow_walk_cut an uninitialised Trie", cut(trie=kernels.Trie.__new__(kernels.Trie))),
        ("r6narrow_walk_cut a float table", cut(table=np.zeros(512, np.float32))),
        ("r6narrow_walk_cut a table too short", cut(table=np.zeros(10, np.int32))),
        ("r6narrow_walk_cut a state past the table", cut(targets=[10**6])),
        ("r6narrow_walk_cut a negative state", cut(targets=[-5])),
        ("r6narrow_walk_cut a huge state", cut(targets=[1 << 70])),
        ("r6narrow_walk_cut a first byte 256", cut(firsts=[256])),
        ("r6narrow_walk_cut a negative first byte", cut(firsts=[-1])),
        ("r6narrow_walk_cut a str first byte", cut(firsts=["a"])),
        ("r6narrow_walk_cut firsts a tuple", cut(firsts=(ok_first,))),
        ("r6narrow_walk_cut ragged lists", cut(targets=[0, 0])),
        ("r6narrow_walk_cut short first nodes", cut(first_nodes=np.zeros(10, np.int64))),
        ("r6narrow_walk_cut int32 first nodes", cut(first_nodes=np.zeros(256, np.int32))),
        ("r6narrow_walk_cut first nodes past the trie", cut(first_nodes=np.full(256, 10**6))),
        ("r6narrow_walk_cut negative first nodes", cut(first_nodes=np.full(256, -3))),
        ("r6narrow_walk_cut short offsets", cut(offsets=np.zeros(256, np.int64))),
        ("r6narrow_walk_cut offsets None", cut(offsets=None)),
        ("r6narrow_walk_cut crossing None", cut(crossing=None)),
        ("r6narrow_walk_cut a short crossing", cut(crossing=np.zeros(0, np.bool_))),
        ("r6narrow_walk_cut no arguments", lambda: kernels.r6narrow_walk_cut()),
        ("r6narrow_walk_cut a short follow", cut(follow=np.zeros(255, np.bool_))),
        ("r6narrow_walk_cut an int64 follow", cut(follow=np.zeros(256, np.int64))),
        ("r6narrow_walk_cut a str follow", cut(follow="abc")),
        ("r6narrow_live_keys a state past the table", keys(state=2)),
        ("r6narrow_live_keys a negative state", keys(state=-1)),
        ("r6narrow_live_keys a huge state", keys(state=1 << 70)),
        ("r6narrow_live_keys int64 flat", keys(flat=np.zeros(512, np.int64))),
        ("r6narrow_live_keys a short flat", keys(flat=np.zeros(100, np.int32))),
        ("r6narrow_live_keys int64 tags", keys(tags=np.zeros(2, np.int64))),
        ("r6narrow_live_keys 2-D tags", keys(tags=np.zeros((2, 2), np.uint64))),
        ("r6narrow_live_keys a target past the tags", keys(flat=far)),
        ("r6narrow_live_keys short offsets", keys(offsets=np.zeros(10, np.int64))),
        ("r6narrow_live_keys offsets a list", keys(offsets=list(range(257)))),
        ("r6narrow_live_keys no arguments", lambda: kernels.r6narrow_live_keys()),
    ]
