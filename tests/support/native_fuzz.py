"""Random inputs for the compiled kernels (``jsonmode._native``) and their pure-Python
forms, shared by the Hypothesis differential tests (tests/test_native_kernels.py) and
the AddressSanitizer run (tests/test_native_asan.py, a fixed-seed loop).

Every generator draws from a ``random.Random``: Hypothesis hands one in
(``st.randoms()``, so it still shrinks), the sanitizer run a seeded one.

To add a kernel: write a ``make`` (rng -> a case), its pure-Python form and its
compiled form (each case -> a comparable result), and append a :class:`KernelPair` to
:data:`PAIRS`; add its malformed calls to :func:`hostile_calls`. Both test files pick
it up.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np

from jsonmode import native
from jsonmode.decoding.engine.boundary import Stacks
from jsonmode.decoding.engine.facts import bits_size, set_ids
from jsonmode.decoding.engine.trie import TokenTrie, lexicographic_order

Pair = tuple[int, int]

# What a malformed call to a kernel may raise (never a crash, never a wrong answer).
REFUSALS: tuple[type[BaseException], ...] = (ValueError, TypeError, OverflowError, BufferError)
# Malformed calls that may also return (a callback changing the kernel's inputs while it
# runs, a bad value the walk never reaches): what they must not do is crash.
MAY_RETURN = frozenset(
    {
        "expand returns a context past the tables",
        "expand clears the tables",
        "reads a list emptied by expand",
        "a seed's int empties the seeds",
        "a kid's int empties the kids",
        "walk dead past the table",
    }
)


# -- the parse-stack model ----------------------------------------------------------------


@dataclass
class StackModel:
    """Random rules as the kernels see them: per context a flat int32 table
    (``state * 256 + byte``; -1: none), crossing flags per state, a closure
    (``expand``: deterministic, memoised, pairs with context -1 for the end of the
    document) and the bytes each stack reads, ascending (consistent with the table)."""

    tables: list[memoryview]
    crossings: list[bytes]
    sizes: list[int]
    expansions: dict[Pair, tuple[Pair, ...]]
    read_lists: dict[Pair, list[int]]
    calls: list[Pair] = field(default_factory=list)  # expand's calls, in order
    read_calls: int = 0

    def expand(self, context: int, state: int) -> tuple[Pair, ...]:
        self.calls.append((context, state))
        return self.expansions[(context, state)]

    def reads(self, context: int, state: int) -> list[int]:
        self.read_calls += 1
        return self.read_lists[(context, state)]

    def pair(self, rng: random.Random, end: bool = True) -> Pair:
        """A stack of this model (``end``: maybe the end of the document, (-1, 0))."""
        if end and rng.random() < 0.15:
            return (-1, 0)
        context = rng.randrange(len(self.sizes))
        return (context, rng.randrange(self.sizes[context]))


def stack_model(rng: random.Random, alphabet: list[int]) -> StackModel:
    contexts = rng.randint(1, 4)
    sizes = [rng.randint(1, 6) for _ in range(contexts)]
    tables: list[memoryview] = []
    crossings: list[bytes] = []
    read_lists: dict[Pair, list[int]] = {}
    outside = [b for b in (0, 1, 127, 128, 255) if b not in alphabet]
    for context, size in enumerate(sizes):
        table = np.full(size * 256, -1, dtype=np.int32)
        for state in range(size):
            if rng.random() < 0.3:  # a wide state: reads most of the alphabet
                readable = [b for b in alphabet if rng.random() < 0.9]
            else:
                readable = rng.sample(alphabet, rng.randint(0, min(4, len(alphabet))))
            readable += rng.sample(outside, rng.randint(0, len(outside)))
            for byte in readable:
                table[state * 256 + byte] = rng.randrange(size)
            read_lists[(context, state)] = sorted(set(readable))
        tables.append(memoryview(table))  # type: ignore[arg-type]
        crossings.append(bytes(int(rng.random() < 0.4) for _ in range(size)))
    model = StackModel(tables, crossings, sizes, {}, read_lists)
    for context, size in enumerate(sizes):
        for state in range(size):
            model.expansions[(context, state)] = tuple(
                model.pair(rng) for _ in range(rng.choice((0, 1, 1, 2, 2, 3)))
            )
    return model


# -- tokens and tries -----------------------------------------------------------------------


def alphabet_of(rng: random.Random) -> list[int]:
    size = rng.choice((2, 3, 5, 8, 20, 24))
    return sorted(rng.sample(range(256), size))


def token_set(rng: random.Random, alphabet: list[int], most: int = 40) -> list[bytes]:
    """Random tokens over ``alphabet`` (duplicates included), and sometimes a fan: one
    prefix followed by many bytes (a node with more than 16 children, where the walk
    looks its stacks' readable bytes up instead of scanning)."""
    tokens = [
        bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
        for _ in range(rng.randint(1, most))
    ]
    if len(alphabet) > 16 and rng.random() < 0.8:
        prefix = bytes(rng.choice(alphabet) for _ in range(rng.choice((1, 1, 2))))
        fan = rng.sample(alphabet, rng.randint(17, len(alphabet)))
        tokens += [prefix + bytes([b]) + bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 2))) for b in fan]
    tokens += [rng.choice(tokens) for _ in range(rng.randint(0, 3))]
    rng.shuffle(tokens)
    return tokens


def token_trie(tokens: list[bytes]) -> TokenTrie:
    width = max(len(t) for t in tokens)
    matrix = np.zeros((len(tokens), width), dtype=np.uint8)
    for row, token in enumerate(tokens):
        matrix[row, : len(token)] = list(token)
    lengths = np.array([len(t) for t in tokens], dtype=np.int64)
    order = lexicographic_order(matrix, lengths)
    return TokenTrie(matrix[order], lengths[order])


def trie_levels(trie: TokenTrie) -> list[tuple[Any, ...]]:
    """The levels as the compiled ``Trie`` takes them."""
    return [(lv.lo, lv.hi, lv.term, lv.child_lo, lv.child_hi, lv.byte) for lv in trie.levels]


@dataclass
class Rests:
    """A boundary group's rests as a trie (the shape of ``Stacks.finish``'s argument:
    node 0 the root; ``byte``, ``kids``, ``ends`` per node), built independently."""

    byte: list[int]
    kids: list[list[int]]
    ends: list[list[int]]

    @staticmethod
    def of(tokens: list[bytes], positions: list[int]) -> Rests:
        byte, kids, ends = [-1], [[]], [[]]  # type: ignore[var-annotated]
        index: dict[Pair, int] = {}
        for rest, position in zip(tokens, positions, strict=True):
            node = 0
            for value in rest:
                child = index.get((node, value))
                if child is None:
                    child = index[(node, value)] = len(byte)
                    byte.append(value)
                    kids.append([])
                    ends.append([])
                    kids[node].append(child)
                node = child
            ends[node].append(position)
        return Rests(byte, kids, ends)


# -- the kernel pairs -------------------------------------------------------------------------


@dataclass
class WalkCase:
    trie: TokenTrie
    model: StackModel
    seeds: list[tuple[int, int, int]]
    budget: int


def make_walk(rng: random.Random) -> WalkCase:
    alphabet = alphabet_of(rng)
    trie = token_trie(token_set(rng, alphabet))
    model = stack_model(rng, alphabet)
    firsts = trie.levels[0].byte.size
    seeds = [(rng.randrange(firsts), *model.pair(rng)) for _ in range(rng.randint(0, 8))]
    level = trie.levels[0]
    wide = (level.child_hi - level.child_lo > 16).nonzero()[0].tolist()
    if wide and rng.random() < 0.7:  # (a node whose stacks' readable bytes are looked up)
        seeds.insert(rng.randint(0, len(seeds)), (rng.choice(wide), *model.pair(rng, end=False)))
    budget = rng.choice((rng.randint(0, 12), rng.randint(0, 400), 1 << 62))
    return WalkCase(trie, model, seeds, budget)


def walk_python(case: WalkCase) -> Any:
    m = case.model
    with native.use(False):
        return case.trie.walk_stacks(m.tables, m.crossings, m.reads, m.expand, case.seeds, case.budget)


def walk_compiled(kernels: ModuleType, case: WalkCase) -> Any:
    m = case.model
    trie = kernels.Trie(trie_levels(case.trie))
    return trie.walk_stacks(m.tables, m.crossings, m.reads, m.expand, case.seeds, case.budget)


@dataclass
class FinishCase:
    rests: Rests
    model: StackModel
    pairs: tuple[Pair, ...]


def make_finish(rng: random.Random) -> FinishCase:
    alphabet = alphabet_of(rng)
    tokens = token_set(rng, alphabet, most=30)
    start = rng.choice((0, rng.randrange(1 << 20)))
    positions = [start + i for i in range(len(tokens))]
    rng.shuffle(positions)
    model = stack_model(rng, alphabet)
    pairs = tuple(model.pair(rng, end=False) for _ in range(rng.randint(1, 4)))
    return FinishCase(Rests.of(tokens, positions), model, pairs)


def finish_python(case: FinishCase) -> Any:
    m = case.model
    stacks = SimpleNamespace(tables=m.tables, crossings=m.crossings, expand=m.expand)
    with native.use(False):
        return Stacks.finish(stacks, case.rests, case.pairs)  # type: ignore[arg-type]


def finish_compiled(kernels: ModuleType, case: FinishCase) -> Any:
    m, r = case.model, case.rests
    return kernels.finish(r.byte, r.kids, r.ends, case.pairs, m.tables, m.crossings, m.expand)


@dataclass
class AutomatonCase:
    """One automaton for :meth:`TokenTrie.walk`: ``table`` flat over
    ``(states + 1) * 256`` with ``dead`` the extra state (mapped to itself, standing
    for every missing step), crossing flags (dead: False), start nodes and states."""

    trie: TokenTrie
    table: Any
    dead: int
    crossing: Any
    nodes: Any
    states: Any
    depth: int
    wide: bool
    model: StackModel = field(default_factory=lambda: StackModel([], [], [], {}, {}))

    def reads(self, state: int) -> list[int]:
        self.model.read_calls += 1
        row = self.table[state * 256 : state * 256 + 256]
        return np.flatnonzero(row != self.dead).tolist()  # type: ignore[no-any-return]


def make_automaton_walk(rng: random.Random) -> AutomatonCase:
    alphabet = alphabet_of(rng)
    tokens = token_set(rng, alphabet, most=rng.choice((10, 40, 90)))
    trie = token_trie(tokens)
    states = rng.randint(1, 8)
    dead = states
    table = np.full((states + 1) * 256, dead, dtype=rng.choice((np.int32, np.int64)))
    for state in range(states):
        share = rng.choice((0.1, 0.5, 0.95))
        for byte in alphabet:
            if rng.random() < share:
                table[state * 256 + byte] = rng.randrange(states)
    crossing = np.array([rng.random() < 0.3 for _ in range(states)] + [False], dtype=np.bool_)
    depth = rng.choice((1, 1, 1, 2)) if len(trie.levels) > 1 else 1
    width = trie.levels[depth - 1].byte.size
    nodes = np.array(sorted(rng.sample(range(width), rng.randint(0, width))), dtype=np.int64)
    starts = np.array([rng.randrange(states + 1) for _ in nodes], dtype=np.int64)
    return AutomatonCase(trie, table, dead, crossing, nodes, starts, depth, depth == 1 and rng.random() < 0.3)


def _trie_walk(case: AutomatonCase) -> Any:
    walked = case.trie.walk(
        case.table, case.dead, case.crossing, case.nodes, case.states, case.reads,
        depth=case.depth, wide=case.wide,
    )  # fmt: skip
    return (walked.inside.tolist(), *(field.tolist() for field in walked.bounds.pack()))


def automaton_walk_python(case: AutomatonCase) -> Any:
    with native.use(False):
        return _trie_walk(case)


def automaton_walk_compiled(kernels: ModuleType, case: AutomatonCase) -> Any:
    """(Through :meth:`TokenTrie.walk`, whose glue turns the kernel's bytes into a
    TrieWalk: the kernel is what it dispatches to, on a fresh trie each time.)"""
    assert native.KERNELS is kernels or native.KERNELS is None
    with native.use(True):
        assert native.KERNELS is not None, "the compiled core is not loaded"
        return _trie_walk(case)


@dataclass
class BitsCase:
    bits: Any
    ids: Any
    model: StackModel = field(default_factory=lambda: StackModel([], [], [], {}, {}))


def make_bits(rng: random.Random) -> BitsCase:
    size = rng.choice((1, 31, 32, 33, 1000, 5000))
    bits = np.zeros(bits_size(size), dtype=np.uint8)
    for _ in range(rng.randint(0, 4)):
        bits[rng.randrange(bits.size)] = rng.randrange(256)
    many = rng.choice((0, 1, 5, 20, 300, 2000))
    ids = np.array([rng.randrange(size) for _ in range(many)], dtype=np.int64)
    return BitsCase(bits, ids)


def bits_python(case: BitsCase) -> Any:
    bits = case.bits.copy()
    with native.use(False):
        set_ids(bits, case.ids)
    return bits.tolist()


def bits_compiled(kernels: ModuleType, case: BitsCase) -> Any:
    bits = case.bits.copy()
    kernels.set_bits(bits, case.ids)
    return bits.tolist()


@dataclass(frozen=True)
class KernelPair:
    """A compiled kernel and its pure-Python form, with a generator of their inputs."""

    name: str
    make: Callable[[random.Random], Any]
    python: Callable[[Any], Any]
    compiled: Callable[[ModuleType, Any], Any]


PAIRS = [
    KernelPair("walk_stacks", make_walk, walk_python, walk_compiled),
    KernelPair("finish", make_finish, finish_python, finish_compiled),
    KernelPair("walk", make_automaton_walk, automaton_walk_python, automaton_walk_compiled),
    KernelPair("set_bits", make_bits, bits_python, bits_compiled),
]


def differ(pair: KernelPair, kernels: ModuleType, rng: random.Random) -> str | None:
    """One random case through both forms: None when they agree (equal results, and
    ``expand`` asked the same closures in the same order), else what differs."""
    case = pair.make(rng)
    model = case.model
    model.calls.clear()
    expected = pair.python(case)
    python_calls = list(model.calls)
    model.calls.clear()
    got = pair.compiled(kernels, case)
    if got != expected:
        return f"{pair.name}: compiled {got!r} != python {expected!r}"
    if model.calls != python_calls:
        return f"{pair.name}: expand called {model.calls} != {python_calls}"
    return None


def run_hostile(kernels: ModuleType) -> list[str]:
    """Every malformed call once: what went wrong (empty when each was refused)."""
    wrong = []
    for label, call in hostile_calls(kernels):
        try:
            call()
        except REFUSALS:
            continue
        except Exception as exc:  # (any other exception is a wrong answer, not a crash)
            wrong.append(f"{label}: raised {type(exc).__name__}: {exc}")
            continue
        if label not in MAY_RETURN:
            wrong.append(f"{label}: returned instead of raising")
    return wrong


# -- malformed calls ----------------------------------------------------------------------------


def hostile_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Calls to the compiled kernels with malformed arguments, each of which must
    raise one of :data:`REFUSALS` (those in :data:`MAY_RETURN` may also return), and
    never crash or read out of bounds."""
    rng = random.Random(43)
    alphabet = list(range(97, 97 + 20))
    trie = token_trie(token_set(rng, alphabet) + [b"a" + bytes([b]) for b in alphabet])
    levels = trie_levels(trie)
    model = stack_model(rng, alphabet)
    t, x, rd, ex = model.tables, model.crossings, model.reads, model.expand
    good = kernels.Trie(levels)
    seed = (0, 0, 0)
    rests = Rests.of([b"ab", b"ac", b"b"], [1, 2, 3])
    B, K, E = rests.byte, rests.kids, rests.ends
    huge = 1 << 70
    i32 = np.zeros(256, dtype=np.int32)
    ragged = np.zeros(256 + 97, dtype=np.int32)

    def level(**changes: Any) -> list[tuple[Any, ...]]:
        names = ("lo", "hi", "term", "child_lo", "child_hi", "byte")
        fields = dict(zip(names, levels[0], strict=True))
        fields.update(changes)
        return [tuple(fields[n] for n in names), *levels[1:]]

    def walk(**changes: Any) -> Callable[[], Any]:
        args: dict[str, Any] = {
            "tables": t, "crossings": x, "reads": everything, "expand": ex, "seeds": [seed], "budget": 1 << 40
        }
        args.update(changes)
        return lambda: good.walk_stacks(*args.values())

    def finish(**changes: Any) -> Callable[[], Any]:
        args: dict[str, Any] = {
            "byte": B, "kids": K, "ends": E, "pairs": ((0, 0),), "tables": t, "crossings": x, "expand": ex
        }
        args.update(changes)
        return lambda: kernels.finish(*args.values())

    def shrinking(victim: list[Any]) -> Callable[[int, int], Any]:
        def call(context: int, state: int) -> Any:
            del victim[:]
            return ((0, 0),)

        return call

    few = [97, 98, 99]  # (the first node, b"a", has more children than that)

    def everything(context: int, state: int) -> list[int]:
        return list(range(256))

    def refuse(context: int, state: int) -> Any:
        raise ValueError("refused by the test")

    class Clearing:
        """An int-like that empties a list when it is read (``__index__``)."""

        def __init__(self, victim: list[Any], value: int = 0) -> None:
            self.victim, self.value = victim, value

        def __index__(self) -> int:
            del self.victim[:]
            return self.value

    seeds_victim: list[Any] = []
    seeds_victim += [(Clearing(seeds_victim), 0, 0), (1, 0, 0), (2, 0, 0)]
    kids_victim: list[Any] = [[]]
    kids_victim[0] += [Clearing(kids_victim, 1), 2, 3]

    return [
        # Trie(levels)
        ("levels not a sequence", lambda: kernels.Trie(5)),
        ("a level not a tuple", lambda: kernels.Trie([[1, 2, 3, 4, 5]])),
        ("a level of 5 arrays", lambda: kernels.Trie([levels[0][:5]])),
        ("a level array of float64", lambda: kernels.Trie(level(lo=levels[0][0].astype(np.float64)))),
        ("a level array of int32", lambda: kernels.Trie(level(byte=levels[0][5].astype(np.int32)))),
        ("a level array of uint64", lambda: kernels.Trie(level(hi=levels[0][1].astype(np.uint64)))),
        ("a level array 2-D", lambda: kernels.Trie(level(term=levels[0][2].reshape(1, -1)))),
        ("a level array not contiguous", lambda: kernels.Trie(level(lo=np.repeat(levels[0][0], 2)[::2]))),
        ("a level of lists", lambda: kernels.Trie(level(lo=levels[0][0].tolist()))),
        ("arrays of different lengths", lambda: kernels.Trie(level(term=levels[0][2][:-1]))),
        ("children past the next level", lambda: kernels.Trie(level(child_hi=levels[0][4] + 10**6))),
        ("children before the first", lambda: kernels.Trie(level(child_lo=levels[0][3] - 5))),
        ("a negative term", lambda: kernels.Trie(level(term=levels[0][2] - 3))),
        ("initialised twice", lambda: good.__init__(levels)),
        # Trie.walk_stacks
        ("tables a tuple", walk(tables=tuple(t))),
        ("crossings a tuple", walk(crossings=tuple(x))),
        ("seeds not a sequence", walk(seeds=7)),
        ("a seed of 2", walk(seeds=[(0, 0)])),
        ("a seed a list", walk(seeds=[[0, 0, 0]])),
        ("a seed node negative", walk(seeds=[(-1, 0, 0)])),
        ("a seed node past the level", walk(seeds=[(10**6, 0, 0)])),
        ("a seed node huge", walk(seeds=[(huge, 0, 0)])),
        ("a seed context past the tables", walk(seeds=[(1, len(t) + 3, 0)])),
        ("a seed context huge", walk(seeds=[(1, huge, 0)])),
        ("a seed state past the table", walk(seeds=[(1, 0, 10**6)])),
        ("a seed state negative", walk(seeds=[(1, 0, -2)])),
        # (A table that ends right where state 1 reads its first child's byte, 97: a
        # missing bound reads just past the buffer, where a sanitizer sees it.)
        ("a seed state one past the table", walk(tables=[ragged] * len(t), seeds=[(0, 0, 1)])),
        ("a seed of floats", walk(seeds=[(1.0, 0, 0)])),
        ("a budget huge", walk(budget=huge)),
        ("a budget a float", walk(budget=1.5)),
        ("a table of int64", walk(tables=[np.zeros(256 * 8, dtype=np.int64)] * len(t))),
        ("a table of float32", walk(tables=[np.zeros(256 * 8, dtype=np.float32)] * len(t))),
        ("a table of bytes", walk(tables=[bytes(256 * 32)] * len(t))),
        ("a table too short", walk(tables=[np.full(10, 0, dtype=np.int32)] * len(t))),
        ("a table's target past the flags", walk(tables=[np.full(256 * 8, 10**6, dtype=np.int32)] * len(t))),
        ("crossings of bytearray", walk(tables=[i32] * len(t), crossings=[bytearray(8)] * len(x))),
        ("crossings too short", walk(tables=[i32] * len(t), crossings=[b""] * len(x))),
        ("expand returns None", walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: None)),
        ("expand returns a list of lists", walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: [[0, 0]])),
        ("expand returns a triple", walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: ((0, 0, 0),))),
        ("expand returns a huge int", walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: ((huge, 0),))),
        ("expand returns a context past the tables", walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: ((99, 0),))),
        ("expand raises", walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=refuse)),
        ("expand clears the crossings", walk(
            tables=[i32] * 2, crossings=(xs := [b"\x01"] * 2), expand=shrinking(xs), reads=everything
        )),
        ("expand clears the tables", walk(
            tables=(ts := [i32] * 2), crossings=[b"\x01"] * 2, expand=shrinking(ts), reads=everything
        )),
        ("reads returns a byte past 255", walk(tables=[np.zeros(256, np.int32)] * len(t), crossings=[b"\x00"] * len(x), reads=lambda c, s: [300])),
        ("reads returns a negative byte", walk(tables=[np.zeros(256, np.int32)] * len(t), crossings=[b"\x00"] * len(x), reads=lambda c, s: [-1])),
        ("reads returns None", walk(tables=[np.zeros(256, np.int32)] * len(t), crossings=[b"\x00"] * len(x), reads=lambda c, s: None)),
        ("reads raises", walk(tables=[np.zeros(256, np.int32)] * len(t), crossings=[b"\x00"] * len(x), reads=refuse)),
        ("reads returns a huge byte", walk(tables=[np.zeros(256, np.int32)] * len(t), crossings=[b"\x00"] * len(x), reads=lambda c, s: [huge])),
        ("reads a list emptied by expand", walk(
            tables=[np.zeros(256, np.int32)] * 1, crossings=[b"\x01"],
            reads=lambda c, s: few, expand=shrinking(few)
        )),
        # finish
        ("byte not a list", finish(byte=tuple(B))),
        ("kids not a list", finish(kids=tuple(K))),
        ("ends not a list", finish(ends=None)),
        ("lists of different lengths", finish(kids=K[:-1])),
        ("empty lists", finish(byte=[], kids=[], ends=[])),
        ("a kid past the nodes", finish(kids=[[1, 99], *K[1:]])),
        ("a kid negative", finish(kids=[[-1], *K[1:]])),
        ("a kid the root", finish(kids=[[0], *K[1:]])),
        ("a kid huge", finish(kids=[[huge], *K[1:]])),
        ("kids not lists", finish(kids=[(1,), *K[1:]])),
        ("a byte past 255", finish(byte=[-1, 256, *B[2:]])),
        ("a byte huge", finish(byte=[-1, huge, *B[2:]])),
        ("an end huge", finish(ends=[[], [huge], *E[2:]], tables=[i32] * len(t))),
        ("pairs not a sequence", finish(pairs=5)),
        ("a pair of 3", finish(pairs=((0, 0, 0),))),
        ("a pair context past the tables", finish(pairs=((99, 0),))),
        ("a pair context negative", finish(pairs=((-1, 0),))),
        ("a pair state past the table", finish(pairs=((0, 10**6),))),
        ("a pair huge", finish(pairs=((0, huge),))),
        ("a pair state one past the table", finish(tables=[ragged] * len(t), pairs=((0, 1),))),
        ("finish tables not a list", finish(tables=tuple(t))),
        ("finish a table of int64", finish(tables=[np.zeros(256 * 8, dtype=np.int64)] * len(t))),
        ("finish expand raises", finish(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=refuse)),
        ("finish expand returns a huge int", finish(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: ((0, huge),))),
        ("finish expand clears the byte list", finish(
            byte=(bs := list(B)), tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=shrinking(bs)
        )),
        ("finish expand clears the crossings", finish(
            tables=[i32] * 2, crossings=(fx := [b"\x01"] * 2), expand=shrinking(fx), pairs=((0, 0), (1, 0))
        )),
        ("a seed's int empties the seeds", walk(seeds=seeds_victim)),
        ("a kid's int empties the kids", finish(
            byte=[-1, 97, 98, 99], kids=kids_victim + [[], [], []], ends=[[], [1], [2], [3]],
            tables=[i32], crossings=[b"\x00"], pairs=((0, 0),)
        )),
        # Trie.walk
        ("walk a table of float64", lambda: good.walk(np.zeros(512), 1, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 24, 0, None)),
        ("walk dead past the table", lambda: good.walk(np.zeros(512, np.int32), 99, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 24, 0, None)),
        ("walk a state past the table", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.full(1, 7, np.int64), 1, 24, 0, None)),
        ("walk a target past the table", lambda: good.walk(np.full(512, 9, np.int32), 1, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 24, 0, None)),
        ("walk a node past the level", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.full(1, 10**6, np.int64), np.zeros(1, np.int64), 1, 24, 0, None)),
        ("walk a negative node", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.full(1, -1, np.int64), np.zeros(1, np.int64), 1, 24, 0, None)),
        ("walk nodes and states of two lengths", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.zeros(2, np.int64), np.zeros(1, np.int64), 1, 24, 0, None)),
        ("walk crossing too short", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(0, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 24, 0, None)),
        ("walk depth 0", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 0, 24, 0, None)),
        ("walk depth past the trie", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 99, 24, 0, None)),
        ("walk nodes of float64", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.zeros(1), np.zeros(1, np.int64), 1, 24, 0, None)),
        ("walk inside flags too short", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 24, 12, np.zeros(1, np.bool_))),
        ("walk inside flags read-only", lambda: good.walk(np.zeros(512, np.int32), 1, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 24, 12, bytes(10**4))),
        ("walk a huge dead", lambda: good.walk(np.zeros(512, np.int32), huge, np.zeros(2, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 24, 0, None)),
        # set_bits
        ("set_bits an id past the bits", lambda: kernels.set_bits(np.zeros(4, np.uint8), np.array([32], np.int64))),
        ("set_bits a negative id", lambda: kernels.set_bits(np.zeros(4, np.uint8), np.array([-1], np.int64))),
        ("set_bits ids of int32", lambda: kernels.set_bits(np.zeros(4, np.uint8), np.array([1], np.int32))),
        ("set_bits ids of float64", lambda: kernels.set_bits(np.zeros(4, np.uint8), np.array([1.0]))),
        ("set_bits read-only bits", lambda: kernels.set_bits(bytes(4), np.array([1], np.int64))),
        ("set_bits bits of int64", lambda: kernels.set_bits(np.zeros(4, np.int64), np.array([1], np.int64))),
        ("set_bits ids 2-D", lambda: kernels.set_bits(np.zeros(4, np.uint8), np.zeros((1, 1), np.int64))),
        ("set_bits ids a list", lambda: kernels.set_bits(np.zeros(4, np.uint8), [1])),
        ("rests with a cycle", finish(
            byte=[-1, 0], kids=[[1], [1]], ends=[[], [7]], tables=[i32], crossings=[b"\x00"], pairs=((0, 0),)
        )),
    ]
