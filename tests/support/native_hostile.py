"""Malformed calls to the compiled kernels (``jsonmode._native``): each must raise a
Python exception (:data:`REFUSALS`), never crash or read past a buffer. Run in process by
tests/test_native_kernels.py and under AddressSanitizer by tests/test_native_asan.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable
from types import ModuleType
from typing import Any

import numpy as np

from support import native_regex
from support.native_fuzz import Rests, stack_model, token_set, token_trie, trie_levels
from support.native_miss import hostile_miss_calls
from support.native_r3comp import hostile_r3comp_calls
from support.native_r4comp import hostile_r4comp_calls
from support.native_r5nfa import hostile_r5nfa_calls
from support.native_r6dfa import hostile_r6dfa_calls
from support.native_r6narrow import hostile_r6narrow_calls
from support.native_r6replay import hostile_r6replay_calls
from support.native_r7count import hostile_r7count_calls
from support.native_r7hash import hostile_r7hash_calls
from support.native_stacks import hostile_stacks_calls


def _fill_refusals(kernels: ModuleType | None) -> list[tuple[str, Callable[[], Any]]]:
    """Rows ``r3hits_fill_words`` must refuse (False, nothing written): each call
    checks that answer and raises ValueError otherwise."""
    bits = np.full(64, 0xFF, np.uint8)

    def refused(out: Any) -> Callable[[], Any]:
        def call() -> None:
            assert kernels is not None
            before = bytes(memoryview(out).cast("B")) if isinstance(out, np.ndarray) else None
            if kernels.r3hits_fill_words(out, bits) is not False:
                raise ValueError("written")
            if before is not None and bytes(memoryview(out).cast("B")) != before:
                raise ValueError("touched")

        return call

    readonly = np.zeros(16, np.int32)
    readonly.flags.writeable = False
    return [
        ("a short row", refused(np.zeros(15, np.int32))),
        ("a read-only row", refused(readonly)),
        ("bytes", refused(bytes(64))),
        ("int64 words", refused(np.zeros(16, np.int64))),
        ("a strided row", refused(np.zeros(64, np.int32)[::2])),
        ("None", refused(None)),
    ]


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
        *(label for label, _, may_return in hostile_stacks_calls() if may_return),
        "determinise a checkpoint that empties the NFA",
        "r5nfa a checkpoint that rewrites the expression",
        *(f"r3hits_fill_words into {label}" for label, _ in _fill_refusals(None)),
    }
)


def run_hostile(kernels: ModuleType) -> list[str]:
    """Every malformed call once: what went wrong (empty when each was refused)."""
    return unrefused(hostile_calls(kernels))


def unrefused(
    calls: Iterable[tuple[str, Callable[[], Any]]], may_return: Collection[str] = MAY_RETURN
) -> list[str]:
    """Each call once: what went wrong (empty when each raised one of :data:`REFUSALS`,
    or, for a label in ``may_return``, returned)."""
    wrong = []
    for label, call in calls:
        try:
            call()
        except REFUSALS:
            continue
        except Exception as exc:  # (any other exception is a wrong answer, not a crash)
            wrong.append(f"{label}: raised {type(exc).__name__}: {exc}")
            continue
        if label not in may_return:
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
    t, x, ex = model.tables, model.crossings, model.expand
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
            "tables": t,
            "crossings": x,
            "reads": everything,
            "expand": ex,
            "seeds": [seed],
            "budget": 1 << 40,
        }
        args.update(changes)
        return lambda: good.walk_stacks(*args.values())

    def trie_walk(**changes: Any) -> Callable[[], Any]:
        """A call of ``good.walk`` with well-formed arguments but ``changes``."""
        args: dict[str, Any] = {
            "table": np.zeros(512, np.int32),
            "dead": 1,
            "crossing": np.zeros(2, np.bool_),
            "nodes": np.zeros(1, np.int64),
            "states": np.zeros(1, np.int64),
            "depth": 1,
            "small": 24,
            "big_until": 0,
            "inside": None,
        }
        args.update(changes)
        return lambda: good.walk(*args.values())

    def count_ids(**changes: Any) -> Callable[[], Any]:
        """A call of ``r7count_ids`` with well-formed arguments but ``changes``."""
        args: dict[str, Any] = {
            "states": np.zeros(2, np.int64),
            "sums": np.zeros(2, np.int16),
            "ends": np.zeros(3, np.int64),
            "ids": np.zeros(3, np.int64),
            "dead": 0,
            "closing": 1,
            "out_chars": np.zeros(3, np.int16),
            "out_closed": np.zeros(3, np.bool_),
        }
        args.update(changes)
        return lambda: kernels.r7count_ids(*args.values())

    def fill_ranges(first: int, last: int, size: int, **changes: Any) -> Callable[[], Any]:
        """A call of ``fill_ranges`` over two ranges ``first`` .. ``last`` into ``size``
        items, but ``changes``."""
        args: dict[str, Any] = {
            "lo": np.full(2, first, np.int64),
            "hi": np.full(2, last, np.int64),
            "out": np.zeros(size, np.int64),
        }
        args.update(changes)
        return lambda: kernels.fill_ranges(*args.values())

    def following(level: int, node: int, **changes: Any) -> Callable[[], Any]:
        """A call of ``good.following`` for one entry, ``node`` of ``level``, but ``changes``."""
        args: dict[str, Any] = {
            "cols": np.full(1, level, np.int64),
            "nodes": np.full(1, node, np.int64),
        }
        args.update(changes)
        return lambda: good.following(*args.values())

    def finish(**changes: Any) -> Callable[[], Any]:
        args: dict[str, Any] = {
            "byte": B,
            "kids": K,
            "ends": E,
            "pairs": ((0, 0),),
            "tables": t,
            "crossings": x,
            "expand": ex,
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

    def blowup() -> tuple[list[list[Any]], list[list[Any]], list[list[Any]]]:
        """(a|b)* a (a|b){5} as an NFA (7 states, the last final; 64 DFA states), a
        call from the start and an epsilon move to it."""
        edges: list[list[Any]] = [[(97, 98, 0), (97, 97, 1)]]
        edges += [[(97, 98, state + 1)] for state in range(1, 6)] + [[]]
        return [[] for _ in range(6)] + [[0]], edges, [[("x", 2)]] + [[] for _ in range(6)]

    eps_victim, nfa_edges, nfa_calls = blowup()

    def determinise(**changes: Any) -> Callable[[], Any]:
        eps, edges, calls = blowup()
        args: dict[str, Any] = {
            "eps": eps,
            "edges": edges,
            "calls": calls,
            "sorted_rows": set(),
            "start": 0,
            "final": 6,
            "budget": 5000,
            "checkpoint": lambda: None,
            "error": ValueError,
        }
        args.update(changes)
        return lambda: kernels.determinise(*args.values())

    class Name(str):
        pass

    def stop() -> None:
        raise ValueError("stopped by the test")

    def emptying() -> None:
        del eps_victim[:], nfa_edges[:], nfa_calls[:]

    seeds_victim: list[Any] = []
    seeds_victim += [(Clearing(seeds_victim), 0, 0), (1, 0, 0), (2, 0, 0)]
    kids_victim: list[Any] = [[]]
    kids_victim[0] += [Clearing(kids_victim, 1), 2, 3]

    return [
        # Trie(levels)
        ("levels not a sequence", lambda: kernels.Trie(5)),
        ("a level not a tuple", lambda: kernels.Trie([[1, 2, 3, 4, 5]])),
        ("a level of 5 arrays", lambda: kernels.Trie([levels[0][:5]])),
        (
            "a level array of float64",
            lambda: kernels.Trie(level(lo=levels[0][0].astype(np.float64))),
        ),
        ("a level array of int32", lambda: kernels.Trie(level(byte=levels[0][5].astype(np.int32)))),
        ("a level array of uint64", lambda: kernels.Trie(level(hi=levels[0][1].astype(np.uint64)))),
        ("a level array 2-D", lambda: kernels.Trie(level(term=levels[0][2].reshape(1, -1)))),
        (
            "a level array not contiguous",
            lambda: kernels.Trie(level(lo=np.repeat(levels[0][0], 2)[::2])),
        ),
        ("a level of lists", lambda: kernels.Trie(level(lo=levels[0][0].tolist()))),
        ("arrays of different lengths", lambda: kernels.Trie(level(term=levels[0][2][:-1]))),
        (
            "children past the next level",
            lambda: kernels.Trie(level(child_hi=levels[0][4] + 10**6)),
        ),
        ("children before the first", lambda: kernels.Trie(level(child_lo=levels[0][3] - 5))),
        ("a negative term", lambda: kernels.Trie(level(term=levels[0][2] - 3))),
        ("a negative lo", lambda: kernels.Trie(level(lo=levels[0][0] - 10**6))),
        ("a hi before its lo", lambda: kernels.Trie(level(hi=levels[0][0] - 1))),
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
        (
            "a table's target past the flags",
            walk(tables=[np.full(256 * 8, 10**6, dtype=np.int32)] * len(t)),
        ),
        ("crossings of bytearray", walk(tables=[i32] * len(t), crossings=[bytearray(8)] * len(x))),
        ("crossings too short", walk(tables=[i32] * len(t), crossings=[b""] * len(x))),
        (
            "expand returns None",
            walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: None),
        ),
        (
            "expand returns a list of lists",
            walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: [[0, 0]]),
        ),
        (
            "expand returns a triple",
            walk(
                tables=[i32] * len(t),
                crossings=[b"\x01"] * len(x),
                expand=lambda c, s: ((0, 0, 0),),
            ),
        ),
        (
            "expand returns a huge int",
            walk(
                tables=[i32] * len(t),
                crossings=[b"\x01"] * len(x),
                expand=lambda c, s: ((huge, 0),),
            ),
        ),
        (
            "expand returns a context past the tables",
            walk(
                tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=lambda c, s: ((99, 0),)
            ),
        ),
        ("expand raises", walk(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=refuse)),
        (
            "expand clears the crossings",
            walk(
                tables=[i32] * 2,
                crossings=(xs := [b"\x01"] * 2),
                expand=shrinking(xs),
                reads=everything,
            ),
        ),
        (
            "expand clears the tables",
            walk(
                tables=(ts := [i32] * 2),
                crossings=[b"\x01"] * 2,
                expand=shrinking(ts),
                reads=everything,
            ),
        ),
        (
            "reads returns a byte past 255",
            walk(
                tables=[np.zeros(256, np.int32)] * len(t),
                crossings=[b"\x00"] * len(x),
                reads=lambda c, s: [300],
            ),
        ),
        (
            "reads returns a negative byte",
            walk(
                tables=[np.zeros(256, np.int32)] * len(t),
                crossings=[b"\x00"] * len(x),
                reads=lambda c, s: [-1],
            ),
        ),
        (
            "reads returns None",
            walk(
                tables=[np.zeros(256, np.int32)] * len(t),
                crossings=[b"\x00"] * len(x),
                reads=lambda c, s: None,
            ),
        ),
        (
            "reads raises",
            walk(
                tables=[np.zeros(256, np.int32)] * len(t),
                crossings=[b"\x00"] * len(x),
                reads=refuse,
            ),
        ),
        (
            "reads returns a huge byte",
            walk(
                tables=[np.zeros(256, np.int32)] * len(t),
                crossings=[b"\x00"] * len(x),
                reads=lambda c, s: [huge],
            ),
        ),
        (
            "reads a list emptied by expand",
            walk(
                tables=[np.zeros(256, np.int32)] * 1,
                crossings=[b"\x01"],
                reads=lambda c, s: few,
                expand=shrinking(few),
            ),
        ),
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
        (
            "finish expand raises",
            finish(tables=[i32] * len(t), crossings=[b"\x01"] * len(x), expand=refuse),
        ),
        (
            "finish expand returns a huge int",
            finish(
                tables=[i32] * len(t),
                crossings=[b"\x01"] * len(x),
                expand=lambda c, s: ((0, huge),),
            ),
        ),
        (
            "finish expand clears the byte list",
            finish(
                byte=(bs := list(B)),
                tables=[i32] * len(t),
                crossings=[b"\x01"] * len(x),
                expand=shrinking(bs),
            ),
        ),
        (
            "finish expand clears the crossings",
            finish(
                tables=[i32] * 2,
                crossings=(fx := [b"\x01"] * 2),
                expand=shrinking(fx),
                pairs=((0, 0), (1, 0)),
            ),
        ),
        ("a seed's int empties the seeds", walk(seeds=seeds_victim)),
        (
            "a kid's int empties the kids",
            finish(
                byte=[-1, 97, 98, 99],
                kids=[*kids_victim, [], [], []],
                ends=[[], [1], [2], [3]],
                tables=[i32],
                crossings=[b"\x00"],
                pairs=((0, 0),),
            ),
        ),
        # fill_ranges
        ("ranges ending before they start", fill_ranges(1, 0, 0)),
        ("ranges past their output", fill_ranges(0, 3, 5)),
        ("ranges short of their output", fill_ranges(0, 3, 7)),
        ("ranges of int32", fill_ranges(0, 1, 2, lo=np.zeros(2, np.int32))),
        ("ranges of different lengths", fill_ranges(0, 1, 2, hi=np.ones(1, np.int64))),
        ("ranges into a huge count", fill_ranges(0, huge >> 8, 4)),
        # r7count_ids
        ("count ids: an end past the replay", count_ids(ends=np.full(3, 2, np.int64))),
        ("count ids: a negative end", count_ids(ends=np.full(3, -1, np.int64))),
        ("count ids: an id past the outputs", count_ids(ids=np.full(3, 3, np.int64))),
        ("count ids: outputs of two lengths", count_ids(out_chars=np.zeros(2, np.int16))),
        ("count ids: int32 states", count_ids(states=np.zeros(2, np.int32))),
        # Trie.following
        ("following a column 0", following(0, 0)),
        ("following below the trie", following(99, 0)),
        ("following a node past its level", following(1, huge >> 8)),
        ("following a negative node", following(1, -1)),
        ("following int32 columns", following(1, 0, cols=np.ones(1, np.int32))),
        ("following lengths differ", following(1, 0, cols=np.ones(2, np.int64))),
        ("following not buffers", following(1, 0, cols=[1], nodes=[0])),
        # Trie.walk
        (
            "walk a table of float64",
            trie_walk(table=np.zeros(512)),
        ),
        (
            "walk dead past the table",
            trie_walk(dead=99),
        ),
        (
            "walk a state past the table",
            trie_walk(states=np.full(1, 7, np.int64)),
        ),
        (
            "walk a target past the table",
            trie_walk(table=np.full(512, 9, np.int32)),
        ),
        (
            "walk a node past the level",
            trie_walk(nodes=np.full(1, 10**6, np.int64)),
        ),
        (
            "walk a negative node",
            trie_walk(nodes=np.full(1, -1, np.int64)),
        ),
        (
            "walk nodes and states of two lengths",
            trie_walk(nodes=np.zeros(2, np.int64)),
        ),
        (
            "walk crossing too short",
            trie_walk(crossing=np.zeros(0, np.bool_)),
        ),
        (
            "walk depth 0",
            trie_walk(depth=0),
        ),
        (
            "walk depth past the trie",
            trie_walk(depth=99),
        ),
        (
            "walk nodes of float64",
            trie_walk(nodes=np.zeros(1)),
        ),
        (
            "walk inside flags too short",
            trie_walk(big_until=12, inside=np.zeros(1, np.bool_)),
        ),
        (
            "walk inside flags read-only",
            trie_walk(big_until=12, inside=bytes(10**4)),
        ),
        (
            "walk a huge dead",
            trie_walk(dead=huge),
        ),
        # count_bits, bit_ids (BatchMasker's rows from a packed mask)
        ("count_bits past the bits", lambda: kernels.count_bits(np.zeros(2, np.uint8), 17)),
        ("count_bits a negative size", lambda: kernels.count_bits(np.zeros(2, np.uint8), -1)),
        (
            "bit_ids an out too short",
            lambda: kernels.bit_ids(np.ones(2, np.uint8), 16, 16, True, np.empty(1, np.int64)),
        ),
        (
            "bit_ids an out too long",
            lambda: kernels.bit_ids(np.ones(2, np.uint8), 16, 16, False, np.empty(99, np.int64)),
        ),
        (
            "bit_ids a width below the shared bits",
            lambda: kernels.bit_ids(np.ones(2, np.uint8), 16, 3, True, np.empty(2, np.int64)),
        ),
        (
            "bit_ids past the bits",
            lambda: kernels.bit_ids(np.ones(2, np.uint8), huge, huge, True, np.empty(2, np.int64)),
        ),
        (
            "bit_ids a read-only out",
            lambda: kernels.bit_ids(np.ones(2, np.uint8), 16, 16, True, bytes(16 * 8)),
        ),
        # r3hits_fill_words (Matcher.fill_bitmask's copy): bad bits raise; an out that
        # cannot hold them is answered False, untouched (MAY_RETURN)
        ("r3hits_fill_words one argument", lambda: kernels.r3hits_fill_words(i32)),
        ("r3hits_fill_words bits not a buffer", lambda: kernels.r3hits_fill_words(i32, 7)),
        (
            "r3hits_fill_words strided bits",
            lambda: kernels.r3hits_fill_words(i32, np.zeros(64, np.uint8)[::2]),
        ),
        *((f"r3hits_fill_words into {label}", call) for label, call in _fill_refusals(kernels)),
        # r5setup_row_reads (the reference matcher's read flags per state)
        ("r5setup_row_reads a list", lambda: kernels.r5setup_row_reads([[0] * 256])),
        ("r5setup_row_reads bytes", lambda: kernels.r5setup_row_reads(bytes(1024))),
        ("r5setup_row_reads None", lambda: kernels.r5setup_row_reads(None)),
        (
            "r5setup_row_reads int64",
            lambda: kernels.r5setup_row_reads(np.zeros((2, 256), np.int64)),
        ),
        (
            "r5setup_row_reads float32",
            lambda: kernels.r5setup_row_reads(np.zeros((2, 256), np.float32)),
        ),
        (
            "r5setup_row_reads uint32",
            lambda: kernels.r5setup_row_reads(np.zeros((2, 256), np.uint32)),
        ),
        ("r5setup_row_reads 1-D", lambda: kernels.r5setup_row_reads(i32)),
        ("r5setup_row_reads ragged", lambda: kernels.r5setup_row_reads(ragged)),
        (
            "r5setup_row_reads 255 columns",
            lambda: kernels.r5setup_row_reads(np.zeros((4, 255), np.int32)),
        ),
        (
            "r5setup_row_reads 3-D",
            lambda: kernels.r5setup_row_reads(np.zeros((1, 1, 256), np.int32)),
        ),
        (
            "r5setup_row_reads strided",
            lambda: kernels.r5setup_row_reads(np.zeros((4, 512), np.int32)[:, ::2]),
        ),
        (
            "r5setup_row_reads Fortran order",
            lambda: kernels.r5setup_row_reads(np.zeros((256, 3), np.int32).T),
        ),
        ("r5setup_row_reads no argument", lambda: kernels.r5setup_row_reads()),
        # set_bits
        (
            "set_bits an id past the bits",
            lambda: kernels.set_bits(np.zeros(4, np.uint8), np.array([32], np.int64)),
        ),
        (
            "set_bits a negative id",
            lambda: kernels.set_bits(np.zeros(4, np.uint8), np.array([-1], np.int64)),
        ),
        (
            "set_bits ids of int32",
            lambda: kernels.set_bits(np.zeros(4, np.uint8), np.array([1], np.int32)),
        ),
        (
            "set_bits ids of float64",
            lambda: kernels.set_bits(np.zeros(4, np.uint8), np.array([1.0])),
        ),
        ("set_bits read-only bits", lambda: kernels.set_bits(bytes(4), np.array([1], np.int64))),
        (
            "set_bits bits of int64",
            lambda: kernels.set_bits(np.zeros(4, np.int64), np.array([1], np.int64)),
        ),
        (
            "set_bits ids 2-D",
            lambda: kernels.set_bits(np.zeros(4, np.uint8), np.zeros((1, 1), np.int64)),
        ),
        ("set_bits ids a list", lambda: kernels.set_bits(np.zeros(4, np.uint8), [1])),
        # determinise(eps, edges, calls, sorted_rows, start, final, budget, checkpoint, error)
        ("determinise eps a tuple", determinise(eps=tuple(blowup()[0]))),
        ("determinise lists of other lengths", determinise(calls=[[], []])),
        ("determinise a row a tuple", determinise(edges=[[], ()] + [[]] * 5)),
        ("determinise an epsilon target past the NFA", determinise(eps=[[7]] + [[]] * 6)),
        ("determinise an epsilon target negative", determinise(eps=[[-1]] + [[]] * 6)),
        ("determinise an epsilon target huge", determinise(eps=[[huge]] + [[]] * 6)),
        ("determinise an epsilon target a float", determinise(eps=[[1.0]] + [[]] * 6)),
        ("determinise an int-like target", determinise(eps=[[Clearing(eps_victim, 1)]] + [[]] * 6)),
        ("determinise an edge of 2", determinise(edges=[[(97, 98)]] + [[]] * 6)),
        ("determinise an edge a list", determinise(edges=[[[97, 98, 1]]] + [[]] * 6)),
        ("determinise a byte past 255", determinise(edges=[[(97, 256, 1)]] + [[]] * 6)),
        ("determinise a byte negative", determinise(edges=[[(-1, 3, 1)]] + [[]] * 6)),
        ("determinise lo above hi", determinise(edges=[[(98, 97, 1)]] + [[]] * 6)),
        (
            "determinise an edge's target past the NFA",
            determinise(edges=[[(97, 97, 7)]] + [[]] * 6),
        ),
        ("determinise a call of 3", determinise(calls=[[("x", 1, 2)]] + [[]] * 6)),
        ("determinise a callee not a str", determinise(calls=[[(5, 1)]] + [[]] * 6)),
        ("determinise a callee a str subclass", determinise(calls=[[(Name("x"), 1)]] + [[]] * 6)),
        ("determinise a call's target past the NFA", determinise(calls=[[("x", 9)]] + [[]] * 6)),
        ("determinise sorted rows a list", determinise(sorted_rows=[0])),
        ("determinise a sorted row past the NFA", determinise(sorted_rows={7})),
        ("determinise a sorted row a str", determinise(sorted_rows={"0"})),
        ("determinise start past the NFA", determinise(start=7)),
        ("determinise final negative", determinise(final=-1)),
        ("determinise a budget huge", determinise(budget=huge)),
        ("determinise checkpoint not callable", determinise(checkpoint=5)),
        ("determinise error not an exception class", determinise(error=int)),
        ("determinise a checkpoint that refuses", determinise(budget=10**6, checkpoint=stop)),
        (
            "determinise a checkpoint that empties the NFA",
            determinise(eps=eps_victim, edges=nfa_edges, calls=nfa_calls, checkpoint=emptying),
        ),
        ("determinise a budget error", determinise(budget=1)),
        (
            "rests with a cycle",
            finish(
                byte=[-1, 0],
                kids=[[1], [1]],
                ends=[[], [7]],
                tables=[i32],
                crossings=[b"\x00"],
                pairs=((0, 0),),
            ),
        ),
        *native_regex.hostile_calls(kernels),
        # (the parse stacks' numbering, jsonmode._native.Stacks)
        *((label, call) for label, call, _ in hostile_stacks_calls(kernels)),
        *hostile_r3comp_calls(kernels),
        *hostile_r4comp_calls(kernels),
        *hostile_r5nfa_calls(kernels),
        *hostile_r6dfa_calls(kernels),
        *hostile_r6replay_calls(kernels),
        *hostile_r7hash_calls(kernels),
        *hostile_r7count_calls(kernels),
        # (walk_stacks from a level the trie does not have)
        (
            "walk_stacks from level 0",
            lambda: good.walk_stacks(t, x, everything, ex, [seed], 1 << 40, 0),
        ),
        (
            "walk_stacks below the trie",
            lambda: good.walk_stacks(t, x, everything, ex, [seed], 1 << 40, 1 << 20),
        ),
        *hostile_r6narrow_calls(kernels),
        # (the mask-cache miss, jsonmode._native.MissAssembler)
        *hostile_miss_calls(kernels),
    ]
