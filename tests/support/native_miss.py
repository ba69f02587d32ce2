"""The compiled mask-cache miss (``jsonmode._native.MissAssembler``, csrc/r3miss_assemble.c)
against MaskEngine's pure-Python ``_assemble``: random token walks over small synthetic
vocabularies and a few schemas (shared by tests/test_native_r3miss.py and, as a
:data:`~support.native_fuzz.PAIRS` entry, by the AddressSanitizer run), and its malformed
calls (:func:`hostile_miss_calls`).

A case is a vocabulary (JSON-ish pieces, the schemas' names and a fan of one-byte
continuations, drawn by a seed), a schema and a walk seed; either form builds a fresh
engine (so every state is a miss) on its path and walks: at each step the mask as bits
and as bools, then a token drawn from the allowed ones by the walk's own generator.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.engine import MaskEngine
from jsonmode.decoding.matcher import Matcher
from jsonmode.decoding.vocabulary import Vocabulary
from support.native_regex import running

SCHEMAS: list[Any] = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"enum": ["a", "bc", "null"]}, "maxItems": 3},
        },
        "required": ["name"],
    },
    {
        "type": "array",
        "items": {"anyOf": [{"type": "number"}, {"type": "boolean"}, {"type": "null"}]},
    },
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
            }
        },
        "$ref": "#/$defs/node",
    },
    {"type": "object", "additionalProperties": {"type": "string", "pattern": "^[a-c]+$"}},
    {"enum": ["alpha", "beta", 12, None, {"k": [1, 2]}]},
]
_PIECES = b'{}[],:"0123456789.-+eEabcdefghijklmnopqrstuvwxyz \\n'


@dataclass
class MissCase:
    vocab_seed: int
    schema: int
    walk_seed: int
    steps: int
    depth: int
    model: Any = field(default_factory=lambda: _Calls())


@dataclass
class _Calls:
    calls: list[Any] = field(default_factory=list)


def vocabulary(seed: int) -> Vocabulary:
    """A synthetic vocabulary (cached by fingerprint): every single piece, random
    pieces of 2-6 bytes, the schemas' quoted names and a fan of 20 one-byte
    continuations after ``"a`` (a trie node with more than 16 children); eos last."""
    rng = random.Random(seed)
    tokens = {bytes([b]) for b in _PIECES}
    for _ in range(rng.randint(20, 160)):
        tokens.add(bytes(rng.choice(_PIECES) for _ in range(rng.randint(2, 6))))
    for name in (b"name", b"age", b"tags", b"id", b"kids", b"alpha", b"null", b"true"):
        if rng.random() < 0.7:
            tokens.add(b'"' + name + b'"' + rng.choice((b"", b":", b'":', b",")))
            tokens.add(name[: rng.randint(1, len(name))])
    tokens |= {b'"a' + bytes([b]) for b in b"bcdefgiklnrstu0123456"}
    tokens |= {b'a",', b'b"}', b"1,", b'"]'}
    pieces = sorted(tokens)
    rng.shuffle(pieces)
    return Vocabulary.from_token_bytes([*pieces, b""], eos_ids=[len(pieces)])


def make_miss(rng: random.Random) -> MissCase:
    return MissCase(
        vocab_seed=rng.randrange(6),
        schema=rng.randrange(len(SCHEMAS)),
        walk_seed=rng.randrange(1 << 30),
        steps=rng.randint(1, 24),
        depth=rng.choice((3, 4, 64)),
    )


def miss_walk(case: MissCase) -> list[tuple[bytes, list[int]]]:
    """Masks along the case's walk on the path running now: per step the bits and the
    bool mask's allowed ids (on a fresh engine: every state a miss)."""
    vocab = vocabulary(case.vocab_seed)
    compiled = compile_schema(SCHEMAS[case.schema], vocab, max_nesting_depth=case.depth)
    engine = MaskEngine(compiled.network, vocab, max_depth=case.depth)
    matcher = Matcher(engine)
    rng = random.Random(case.walk_seed)
    words = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    out: list[tuple[bytes, list[int]]] = []
    for step in range(case.steps):
        if step % 2:  # (the bools first: assembled, not unpacked from cached bits)
            allowed = np.flatnonzero(engine.mask(matcher.state)).tolist()
            matcher.fill_bitmask(words)
        else:
            matcher.fill_bitmask(words)
            allowed = np.flatnonzero(engine.mask(matcher.state)).tolist()
        out.append((words.tobytes(), allowed))
        if not allowed:
            break
        token = rng.choice(allowed)
        if not matcher.advance(token) or token in vocab.eos_ids:
            break
    return out


def miss_python(case: MissCase) -> Any:
    with running(None):
        return miss_walk(case)


def miss_compiled(kernels: ModuleType, case: MissCase) -> Any:
    with running(kernels):
        return miss_walk(case)


# -- malformed calls ------------------------------------------------------------------------------


def hostile_miss_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed constructions of and calls to ``MissAssembler``: each must raise
    (ValueError, TypeError, OverflowError or BufferError, or the callback's own error
    where a callback raises), never crash or write past the mask."""
    vocab = vocabulary(0)
    compiled = compile_schema(SCHEMAS[0], vocab)
    with running(kernels):
        engine = MaskEngine(compiled.network, vocab)
        matcher = Matcher(engine)
        # (Inside a string: its stack goes through a walk, whose groups need rests.)
        by_bytes = {vocab.token_bytes(i): i for i in range(vocab.size)}
        for byte in b'{"name":"':
            assert matcher.advance(by_bytes[bytes([byte])])
        state = matcher.state
        core = engine._stacks.core
        trie = engine._index.trie.compiled(kernels)
    ids = engine._index.ids
    size = (vocab.size + 31) // 32 * 4
    eos = np.array(sorted(vocab.eos_ids), dtype=np.int64)
    real = engine._walks

    def walk_of(rule: int, at: int) -> Any:
        w = real.walk(rule, at)
        return w.inside, w.dense, w.groups, w.nbytes

    def rests_of(split: Any, readable: bytes) -> Any:
        from jsonmode.decoding.engine.boundary import rests_lists

        return rests_lists(engine._index, split, readable)

    def make(**changes: Any) -> Any:
        args = {
            "trie": trie, "ids": ids, "nbytes": size, "eos": eos, "walk_of": walk_of,
            "rests_of": rests_of, "budget": 1 << 20,
        }  # fmt: skip
        args.update(changes)
        return kernels.MissAssembler(**args)

    def assemble(*, state: Any = state, stacks: Any = None, **changes: Any) -> Callable[[], Any]:
        def call() -> Any:
            with running(kernels):
                return make(**changes).assemble(core if stacks is None else stacks, state)

        return call

    def walk_returning(value: Any) -> Callable[[int, int], Any]:
        return lambda rule, at: value

    def walk_changing(index: int, value: Any) -> Callable[[int, int], Any]:
        def call(rule: int, at: int) -> Any:
            found = list(walk_of(rule, at))
            found[index] = value
            return tuple(found)

        return call

    def raising(*_: Any) -> Any:
        raise ValueError("a callback's own error")

    def int64(values: list[int]) -> bytes:
        return np.array(values, dtype=np.int64).tobytes()

    def starts(byte: bytes, node: bytes, level: bytes) -> Callable[[Any, bytes], Any]:
        return lambda split, readable: (byte, node, level)

    every = int64(list(range(256)))
    zero, one = int64([0]), int64([1])
    zeros, ones = int64([0] * 256), int64([1] * 256)
    far, minus, deep = int64([1 << 40] * 256), int64([-1] * 256), int64([1 << 20] * 256)
    wide = np.full(ids.size, 1 << 40, dtype=np.int64)
    negative = np.full(ids.size, -1, dtype=np.int64)
    shifted = np.arange(ids.size, dtype=np.int64) + 10 * size
    # Rests of every byte, each ending in a position past the ids.
    past = (
        [-1, *range(256)],
        [list(range(1, 257)), *([] for _ in range(256))],
        [[], *([1 << 40] for _ in range(256))],
    )
    return [
        ("trie not a Trie", lambda: make(trie=object())),
        ("trie a Stacks", lambda: make(trie=core)),
        ("ids not int64", lambda: make(ids=ids.astype(np.int32))),
        ("ids 2-D", lambda: make(ids=np.zeros((2, 2), dtype=np.int64))),
        ("eos a list", lambda: make(eos=[1, 2])),
        ("nbytes negative", lambda: make(nbytes=-1)),
        ("nbytes huge", lambda: make(nbytes=1 << 70)),
        ("budget negative", lambda: make(budget=-5)),
        ("walk_of not callable", lambda: make(walk_of=3)),
        ("rests_of not callable", lambda: make(rests_of=None)),
        ("initialised twice", lambda: make().__init__(trie, ids, size, eos, walk_of, rests_of, 0)),
        (
            "assemble on a bare object",
            lambda: kernels.MissAssembler.__new__(kernels.MissAssembler).assemble(core, state),
        ),
        ("stacks not a Stacks", assemble(stacks=object())),
        ("state a list", assemble(state=list(state))),
        ("a stack not a tuple", assemble(state=([(0, 0)],))),
        ("a frame not a pair", assemble(state=(((0, 0, 0),),))),
        ("a frame of strings", assemble(state=((("a", "b"),),))),
        ("a state out of the table", assemble(state=(((0, 1 << 30),),))),
        ("a negative state", assemble(state=(((0, -3),),))),
        ("ids past the bits", assemble(ids=wide)),
        ("ids negative", assemble(ids=negative)),
        ("ids shifted past the bits", assemble(ids=shifted)),
        ("eos past the bits", assemble(state=((),), eos=np.array([size * 8], dtype=np.int64))),
        ("eos negative", assemble(state=((),), eos=np.array([-1], dtype=np.int64))),
        ("mask too small for a dense walk", assemble(nbytes=4)),
        ("walk_of raises", assemble(walk_of=raising)),
        ("walk_of returns None", assemble(walk_of=walk_returning(None))),
        ("walk_of returns a short tuple", assemble(walk_of=walk_returning((1, 2)))),
        ("walk_of: inside not a buffer", assemble(walk_of=walk_changing(0, "bits"))),
        (
            "walk_of: sparse ids of int64",
            assemble(walk_of=walk_returning((np.arange(3), False, (), 0))),
        ),
        (
            "walk_of: sparse ids past the bits",
            assemble(walk_of=walk_returning((np.array([size * 8], np.int32), False, (), 0))),
        ),
        (
            "walk_of: sparse ids negative",
            assemble(walk_of=walk_returning((np.array([-2], np.int32), False, (), 0))),
        ),
        (
            "walk_of: dense bits too short",
            assemble(walk_of=walk_returning((np.zeros(3, np.uint8), True, (), 0))),
        ),
        ("walk_of: groups not a tuple", assemble(walk_of=walk_changing(2, [1]))),
        ("walk_of: a group not a pair", assemble(walk_of=walk_changing(2, ((1,),)))),
        ("walk_of: a stop out of range", assemble(walk_of=walk_changing(2, ((1 << 40, None),)))),
        ("walk_of: nbytes negative", assemble(walk_of=walk_changing(3, -1))),
        ("walk_of: nbytes not an int", assemble(walk_of=walk_changing(3, "x"))),
        ("rests_of raises", assemble(rests_of=raising)),
        ("rests_of returns None", assemble(rests_of=lambda split, readable: None)),
        (
            "rests_of returns bad lists",
            assemble(rests_of=lambda split, readable: ([0], [[5]], [[]])),
        ),
        (
            "rests_of returns positions past the ids",
            assemble(rests_of=lambda split, readable: past),
        ),
        # A big group's starts (three int64 buffers: byte, trie node, level), malformed.
        # Every byte is listed, so some stack of the group steps into the walk.
        ("starts of unequal lengths", assemble(rests_of=starts(every, every, b""))),
        ("starts not whole int64s", assemble(rests_of=starts(b"abc", b"abc", b"abc"))),
        ("starts mixing buffers and lists", assemble(rests_of=lambda s, r: (every, [], []))),
        ("a start byte out of range", assemble(rests_of=starts(int64([300]), zero, one))),
        ("a start node out of the trie", assemble(rests_of=starts(every, far, ones))),
        ("a start node negative", assemble(rests_of=starts(every, minus, ones))),
        ("a start at level 0", assemble(rests_of=starts(every, zeros, zeros))),
        ("a start below the trie", assemble(rests_of=starts(every, zeros, deep))),
    ]
