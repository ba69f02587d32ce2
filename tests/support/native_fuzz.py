"""Random inputs for the compiled kernels (``jsonmode._native``) and their pure-Python
forms, shared by the Hypothesis differential tests (tests/test_native_kernels.py) and
the AddressSanitizer run (tests/test_native_asan.py, a fixed-seed loop); their malformed
calls are in tests/support/native_hostile.py.

Every generator draws from a ``random.Random``: Hypothesis hands one in
(``st.randoms()``, so it still shrinks), the sanitizer run a seeded one.

To add a kernel: write a ``make`` (rng -> a case), its pure-Python form and its
compiled form (each case -> a comparable result), and append a :class:`KernelPair` to
:data:`PAIRS`; add its malformed calls to ``native_hostile.hostile_calls``. Both test
files pick it up.
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
from jsonmode.decoding import reference
from jsonmode.decoding.automata import network
from jsonmode.decoding.engine.boundary import Rests, Stacks
from jsonmode.decoding.engine.entries import lexicographic_order
from jsonmode.decoding.engine.facts import bits_size, set_ids
from jsonmode.decoding.engine.trie import TokenTrie
from jsonmode.decoding.matcher import fill_words
from jsonmode.errors import BudgetExceededError
from support.native_miss import make_miss, miss_compiled, miss_python
from support.native_r3comp import (
    fill_compiled,
    fill_python,
    make_fill,
    make_object,
    object_compiled,
    object_python,
)
from support.native_r4comp import keys_compiled, keys_python, make_keys
from support.native_r5nfa import make_expr, r5nfa_compiled, r5nfa_python
from support.native_r6dfa import (
    bytes_compiled,
    bytes_python,
    make_bytes,
    make_set,
    set_compiled,
    set_python,
)
from support.native_r6narrow import (
    cut_compiled,
    cut_python,
    live_keys_compiled,
    live_keys_python,
    make_cut,
    make_live_keys,
)
from support.native_r7count import make_replay, replay_compiled, replay_python
from support.native_r7hash import hashes_compiled, hashes_python, make_hashes
from support.native_regex import (
    make_raw,
    make_regex,
    raw_compiled,
    raw_python,
    regex_compiled,
    regex_python,
)
from support.native_stacks import make_stacks_case, stacks_compiled, stacks_python

Pair = tuple[int, int]

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
        tokens += [
            prefix + bytes([b]) + bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 2)))
            for b in fan
        ]
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
        return case.trie.walk_stacks(
            m.tables, m.crossings, m.reads, m.expand, case.seeds, case.budget
        )


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
    stacks = SimpleNamespace(tables=m.tables, crossings=m.crossings, closure=m.expand)
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
    follow: Any = None  # (None, or 256 flags: only nodes with a child on one are entries)

    def reads(self, state: int) -> list[int]:
        self.model.read_calls += 1
        row = self.table[state * 256 : state * 256 + 256]
        return np.flatnonzero(row != self.dead).tolist()  # type: ignore[no-any-return]


def random_table(
    rng: random.Random, alphabet: list[int], states: int, shares: tuple[float, ...]
) -> Any:
    """A byte table of ``states`` live states and the dead one (numbered ``states``):
    each state moves on a share of ``alphabet`` (one of ``shares``) to a random state."""
    table = np.full((states + 1) * 256, states, dtype=rng.choice((np.int32, np.int64)))
    for state in range(states):
        share = rng.choice(shares)
        for byte in alphabet:
            if rng.random() < share:
                table[state * 256 + byte] = rng.randrange(states)
    return table


def random_follow(rng: random.Random, alphabet: list[int]) -> Any:
    """None (every entry kept) half the time, else 256 flags over a few bytes of
    ``alphabet`` (or none at all), as a lexeme's Follow flags them."""
    if rng.random() < 0.5:
        return None
    flags = np.zeros(256, dtype=np.bool_)
    for byte in rng.sample(alphabet, rng.randint(0, min(3, len(alphabet)))):
        flags[byte] = True
    return flags


def make_automaton_walk(rng: random.Random) -> AutomatonCase:
    alphabet = alphabet_of(rng)
    tokens = token_set(rng, alphabet, most=rng.choice((10, 40, 90)))
    trie = token_trie(tokens)
    states = rng.randint(1, 8)
    dead = states
    table = random_table(rng, alphabet, states, (0.1, 0.5, 0.95))
    crossing = np.array([rng.random() < 0.3 for _ in range(states)] + [False], dtype=np.bool_)
    depth = rng.choice((1, 1, 1, 2)) if len(trie.levels) > 1 else 1
    width = trie.levels[depth - 1].byte.size
    nodes = np.array(sorted(rng.sample(range(width), rng.randint(0, width))), dtype=np.int64)
    starts = np.array([rng.randrange(states + 1) for _ in nodes], dtype=np.int64)
    wide = depth == 1 and rng.random() < 0.3
    follow = random_follow(rng, alphabet)
    return AutomatonCase(trie, table, dead, crossing, nodes, starts, depth, wide, follow=follow)


def make_wide_walk(rng: random.Random) -> AutomatonCase:
    """A wide walk (r4gram_wide.c, the preorder form): always wide from depth 1, with
    long tokens sharing long prefixes, so that levels past the wide ones are both small
    (at most 24 live nodes) and big, and boundary entries tie on their first position
    across levels."""
    alphabet = alphabet_of(rng)
    tokens = token_set(rng, alphabet, most=rng.choice((10, 60)))
    for _ in range(rng.randint(0, 3)):
        stem = bytes(rng.choice(alphabet) for _ in range(rng.randint(8, 16)))
        tokens += [
            stem[: rng.randint(1, len(stem))] if rng.random() < 0.2 else
            stem + bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 4)))
            for _ in range(rng.choice((5, 30, 60)))
        ]  # fmt: skip
    trie = token_trie(tokens)
    states = rng.randint(1, 6)
    dead = states
    table = random_table(rng, alphabet, states, (0.5, 0.95, 1.0))
    odds = rng.choice((0.0, 0.3, 0.9))
    crossing = np.array([rng.random() < odds for _ in range(states)] + [False], dtype=np.bool_)
    width = trie.levels[0].byte.size
    nodes = np.array(sorted(rng.sample(range(width), rng.randint(0, width))), dtype=np.int64)
    starts = np.array([rng.randrange(states + 1) for _ in nodes], dtype=np.int64)
    follow = random_follow(rng, alphabet)
    return AutomatonCase(trie, table, dead, crossing, nodes, starts, 1, True, follow=follow)


def _trie_walk(case: AutomatonCase) -> Any:
    walked = case.trie.walk(
        case.table, case.dead, case.crossing, case.nodes, case.states, case.reads,
        depth=case.depth, wide=case.wide, follow=case.follow,
    )  # fmt: skip
    return (walked.inside.tolist(), *(field.tolist() for field in walked.bounds.pack()))


def automaton_walk_python(case: AutomatonCase) -> Any:
    with native.use(False):
        return _trie_walk(case)


def automaton_walk_compiled(kernels: ModuleType, case: AutomatonCase) -> Any:
    """(Through :meth:`TokenTrie.walk`, whose glue turns the kernel's bytes into a
    TrieWalk, with ``kernels`` as the loaded core whichever path the process runs; a
    fresh trie each time.)"""
    before = native.KERNELS
    native.KERNELS = kernels
    try:
        return _trie_walk(case)
    finally:
        native.KERNELS = before


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


@dataclass
class RowCase:
    """A packed mask for ``count_bits`` / ``bit_ids`` (BatchMasker's rows)."""

    mask: Any  # bool array
    width: int
    model: StackModel = field(default_factory=lambda: StackModel([], [], [], {}, {}))


def make_row(rng: random.Random) -> RowCase:
    size = rng.choice((1, 7, 63, 64, 65, 200, 1000))
    density = rng.choice((0.0, 0.01, 0.5, 0.99, 1.0))
    mask = np.array([rng.random() < density for _ in range(size)], dtype=np.bool_)
    return RowCase(mask, max(1, size + rng.randint(-70, 70)))


def row_python(case: RowCase) -> Any:
    """BatchMasker._build's rule, in NumPy (batch_masks imports torch, which this
    module's sanitizer run does without; tests/test_native_rows.py holds the kernels
    to _build itself)."""
    view = case.mask[: min(case.width, case.mask.size)]
    count = int(np.count_nonzero(view))
    if count == 0:
        return None
    if 2 * count <= case.width:
        return True, np.flatnonzero(view).tolist()
    return False, [*np.flatnonzero(~view).tolist(), *range(view.size, case.width)]


def row_compiled(kernels: ModuleType, case: RowCase) -> Any:
    bits = np.packbits(case.mask, bitorder="little")
    shared = min(case.width, case.mask.size)
    count = kernels.count_bits(bits, shared)
    if count == 0:
        return None
    keep = 2 * count <= case.width
    ids = np.empty(count if keep else case.width - count, dtype=np.int64)
    kernels.bit_ids(bits, shared, case.width, keep, ids)
    return keep, ids.tolist()


@dataclass
class NfaCase:
    """A rule's NFA for ``determinise`` (``model.calls`` records the checkpoints)."""

    nfa: Any  # network._NFA
    start: int
    final: int
    budget: int
    model: StackModel = field(default_factory=lambda: StackModel([], [], [], {}, {}))


def make_nfa(rng: random.Random) -> NfaCase:
    """A random NFA as network._NFA holds one: byte intervals over a few bytes (so
    they overlap) or sorted disjoint rows (an embedded lexeme's), epsilon moves, calls
    to a few rules; budgets that run out, and one that rarely does."""
    nfa = network._NFA()
    count = rng.randint(2, rng.choice((6, 40)))
    for _ in range(count):
        nfa.state()
    points = rng.choice(([0, 255], list(range(97, 101)), [0, 1, 97, 98, 254, 255]))
    for state in range(count):
        if rng.random() < 0.25:
            cuts = sorted(rng.sample(range(256), 2 * rng.randint(1, 3)))
            nfa.edges[state] = [
                (cuts[i], cuts[i + 1], rng.randrange(count)) for i in range(0, len(cuts), 2)
            ]
            nfa.sorted_rows.add(state)
        else:
            for _ in range(rng.choice((0, 1, 1, 2, 4))):
                lo = rng.choice(points)
                hi = lo if rng.random() < 0.5 else max(lo, rng.choice(points))
                nfa.edges[state].append((lo, hi, rng.randrange(count)))
        for _ in range(rng.choice((0, 0, 1, 2))):
            nfa.eps[state].append(rng.randrange(count))
        for _ in range(rng.choice((0, 0, 0, 1, 2))):
            nfa.calls[state].append((rng.choice("xyz"), rng.randrange(count)))
    budget = rng.choice((rng.randint(0, 12), rng.randint(0, 120), 3000))
    return NfaCase(nfa, rng.randrange(count), rng.randrange(count), budget)


def _determinised(run: Callable[[], Any]) -> Any:
    try:
        (edges, calls, accepting), sets = run()
    except BudgetExceededError as exc:
        return ("budget", exc.budget, exc.limit, str(exc))
    return edges, calls, accepting, sets


def determinise_python(case: NfaCase) -> Any:
    def checkpoint() -> None:
        case.model.calls.append("checkpoint")

    with native.use(False), mock.patch.object(network, "checkpoint", checkpoint):
        return _determinised(
            lambda: network._determinise("r", case.nfa, case.start, case.final, case.budget)
        )


def determinise_compiled(kernels: ModuleType, case: NfaCase) -> Any:
    def checkpoint() -> None:
        case.model.calls.append("checkpoint")

    n = case.nfa
    return _determinised(
        lambda: (
            (out := kernels.determinise(
                n.eps, n.edges, n.calls, n.sorted_rows, case.start, case.final, case.budget,
                checkpoint, BudgetExceededError,
            ))[:3],
            out[3],
        )
    )  # fmt: skip


@dataclass(frozen=True)
class KernelPair:
    """A compiled kernel and its pure-Python form, with a generator of their inputs."""

    name: str
    make: Callable[[random.Random], Any]
    python: Callable[[Any], Any]
    compiled: Callable[[ModuleType, Any], Any]


@dataclass
class WordsCase:
    """A cached mask's bits and a row of words to copy them into (r3hits_fill_words)."""

    out: Any
    bits: Any
    model: StackModel = field(default_factory=lambda: StackModel([], [], [], {}, {}))


def make_words(rng: random.Random) -> WordsCase:
    size = rng.choice((0, 1, 31, 32, 33, 1000, 5000))
    bits = np.array([rng.randrange(256) for _ in range(bits_size(size))], dtype=np.uint8)
    words = bits.size // 4 + rng.choice((0, 0, 1, 3))
    out = np.array([rng.randrange(-(2**31), 2**31) for _ in range(words)], dtype=np.int32)
    return WordsCase(out, bits)


def words_python(case: WordsCase) -> Any:
    out = case.out.copy()
    fill_words(out.view(np.uint8), case.bits)
    return out.tolist()


def words_compiled(kernels: ModuleType, case: WordsCase) -> Any:
    out = case.out.copy()
    assert kernels.r3hits_fill_words(out, case.bits) is True
    return out.tolist()


@dataclass
class RowReadsCase:
    """A rule's table whose rows' read flags are asked (r5setup_row_reads)."""

    trans: Any
    model: StackModel = field(default_factory=lambda: StackModel([], [], [], {}, {}))


def make_row_reads(rng: random.Random) -> RowReadsCase:
    """Tables of 0 to 80 rows: dead rows (all -1, or other negatives: the sign decides),
    rows with one transition at a block's edge (entries 0, 31, 32, 255) or anywhere,
    and busy rows."""
    rows = rng.choice((0, 1, 2, 7, 33, 80))
    trans = np.full((rows, 256), -1, dtype=np.int32)
    for row in range(rows):
        kind = rng.randrange(5)
        if kind == 0:
            trans[row] = [rng.choice((-1, -2, -(1 << 20), -(2**31))) for _ in range(256)]
        elif kind in (1, 2):
            byte = rng.choice((0, 31, 32, 63, 224, 255, rng.randrange(256)))
            trans[row, byte] = rng.choice((0, 1, rows, 2**31 - 1))
        elif kind == 3:
            trans[row] = [rng.choice((-1, -1, -1, 0, 5)) for _ in range(256)]
    return RowReadsCase(trans)


def row_reads_python(case: RowReadsCase) -> Any:
    return reference._row_reads_python(case.trans)


def row_reads_compiled(kernels: ModuleType, case: RowReadsCase) -> Any:
    return kernels.r5setup_row_reads(case.trans)


PAIRS = [
    KernelPair("walk_stacks", make_walk, walk_python, walk_compiled),
    KernelPair("finish", make_finish, finish_python, finish_compiled),
    KernelPair("walk", make_automaton_walk, automaton_walk_python, automaton_walk_compiled),
    KernelPair("r4gram_wide_walk", make_wide_walk, automaton_walk_python, automaton_walk_compiled),
    KernelPair("set_bits", make_bits, bits_python, bits_compiled),
    KernelPair("rows", make_row, row_python, row_compiled),
    KernelPair("minimize_raw", make_raw, raw_python, raw_compiled),
    KernelPair("glushkov_determinise", make_regex, regex_python, regex_compiled),
    KernelPair("stacks", make_stacks_case, stacks_python, stacks_compiled),
    KernelPair("determinise", make_nfa, determinise_python, determinise_compiled),
    KernelPair("r3comp_fill", make_fill, fill_python, fill_compiled),
    KernelPair("r3comp_object_build", make_object, object_python, object_compiled),
    KernelPair("r3hits_fill_words", make_words, words_python, words_compiled),
    KernelPair("miss_assembler", make_miss, miss_python, miss_compiled),
    KernelPair("r4comp_keys", make_keys, keys_python, keys_compiled),
    KernelPair("r5setup_row_reads", make_row_reads, row_reads_python, row_reads_compiled),
    KernelPair("r5nfa_determinise", make_expr, r5nfa_python, r5nfa_compiled),
    KernelPair("r6dfa_byte_dfa", make_bytes, bytes_python, bytes_compiled),
    KernelPair("utf8_char_set_dfa", make_set, set_python, set_compiled),
    KernelPair("r6narrow_walk_cut", make_cut, cut_python, cut_compiled),
    KernelPair("r6narrow_live_keys", make_live_keys, live_keys_python, live_keys_compiled),
    KernelPair("r7hash_depths", make_hashes, hashes_python, hashes_compiled),
    KernelPair("r7count_replay", make_replay, replay_python, replay_compiled),
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
