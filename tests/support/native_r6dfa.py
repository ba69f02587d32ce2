"""Inputs for the byte-automaton kernel (``jsonmode._native.r6dfa_byte_dfa``,
csrc/r6dfa_bytes.c) and its pure-Python form (``jsonmode.regex.byte_dfa``'s builder):
random character automata (raw ones, with unreachable, dead and equivalent states, and
regexes' minimal ones) drawn from a ``random.Random``, each built raw (UTF-8) or as a
JSON string body, canonical or complete; and malformed calls.
tests/support/native_fuzz.py puts the pair in ``PAIRS``, tests/support/native_hostile.py
runs :func:`hostile_r6dfa_calls`, tests/test_native_r6dfa.py uses the rest.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from jsonmode.budget import checkpoint
from jsonmode.errors import JsonModeError
from jsonmode.regex import ByteDFA, CharDFA, compile_pattern
from jsonmode.regex import byte_dfa as byte_dfa_module
from support.native_regex import POINTS, Calls, Falsy, random_regex, running
from support.native_regex import random_row as regex_random_row

Edge = tuple[int, int, int]

# Boundaries beyond native_regex.POINTS: inside a UTF-8 length step, at the JSON
# escapes, around the surrogates and the \uD8xx blocks, so digits split part way.
MORE_POINTS = [0x1F, 0x20, 0x22, 0x23, 0x2F, 0x5C, 0x5D, 0x3A7, 0x1234, 0xD000, 0xDFFF]


@dataclass
class BytesCase:
    start: int
    accepting: tuple[bool, ...]
    edges: tuple[tuple[Edge, ...], ...]
    json: bool
    complete: bool
    model: Calls = field(default_factory=Calls)

    def dfa(self) -> CharDFA:
        return CharDFA(self.start, self.accepting, self.edges)


def random_row(rng: random.Random, states: int) -> tuple[Edge, ...]:
    """Sorted disjoint edges: ASCII, the UTF-8 steps, code points anywhere."""
    points = POINTS + MORE_POINTS + [rng.randrange(0x110000) for _ in range(rng.randint(0, 3))]
    return tuple(regex_random_row(rng, states, points, most=10))


def make_bytes(rng: random.Random) -> BytesCase:
    """A random character automaton (raw, or a random regex's minimal one) and a form."""
    json, complete = rng.random() < 0.7, rng.random() < 0.5
    if rng.random() < 0.4:
        try:
            dfa = compile_pattern(random_regex(rng), max_states=200)
        except JsonModeError:
            pass
        else:
            return BytesCase(dfa.start, dfa.accepting, dfa.edges, json, complete)
    states = rng.randint(1, 10)
    rows = [random_row(rng, states) for _ in range(states)]
    for s in range(states):
        if rng.random() < 0.3:
            rows[s] = rows[rng.randrange(states)]
    accepting = tuple(rng.random() < 0.4 for _ in range(states))
    return BytesCase(rng.randrange(states), accepting, tuple(rows), json, complete)


def table(dfa: ByteDFA) -> tuple[int, bytes, bytes]:
    """A byte automaton as the kernel returns it: (start, flags, int32 table)."""
    return dfa.start, dfa.accepting.astype("u1").tobytes(), dfa.trans.astype("<i4").tobytes()


def bytes_python(case: BytesCase) -> Any:
    """The reference builder over the case's automaton as it is (not minimised)."""
    with running(None):
        return table(
            byte_dfa_module._byte_dfa_python(case.dfa(), json=case.json, complete=case.complete)
        )


def bytes_compiled(kernels: ModuleType, case: BytesCase) -> Any:
    start, accepting, trans = kernels.r6dfa_byte_dfa(
        case.start, case.accepting, case.edges, case.json, case.complete, checkpoint
    )
    return start, accepting, trans


@dataclass
class SetCase:
    """One character of a normal set of code points (a GBNF class), as
    ``utf8_char_set_dfa`` builds it: in C, ``r6dfa_byte_dfa`` given the two-state
    automaton; in Python, the set builder."""

    intervals: tuple[tuple[int, int], ...]
    model: Calls = field(default_factory=Calls)


def make_set(rng: random.Random) -> SetCase:
    """A random normal set without surrogates: ASCII, around the UTF-8 steps, anywhere."""
    points = sorted(
        {
            rng.choice(POINTS + MORE_POINTS + [rng.randrange(0x110000)])
            for _ in range(rng.randint(1, 12))
        }
    )
    pairs = [(points[k], points[k + 1]) for k in range(0, len(points) - 1, 2)] or [
        (points[0], points[0])
    ]
    intervals: list[tuple[int, int]] = []
    for low, high in pairs:
        for part in ((low, min(high, 0xD7FF)), (max(low, 0xE000), high)):
            if part[0] <= part[1] and (not intervals or part[0] > intervals[-1][1] + 1):
                intervals.append(part)
    return SetCase(tuple(intervals))


def set_python(case: SetCase) -> Any:
    with running(None):
        return table(byte_dfa_module.utf8_char_set_dfa(case.intervals))


def set_compiled(kernels: ModuleType, case: SetCase) -> Any:
    edges = tuple([(low, high, 1) for low, high in case.intervals])
    start, accepting, trans = kernels.r6dfa_byte_dfa(
        0, (False, True), (edges, ()), False, False, checkpoint
    )
    return start, accepting, trans


def hostile_r6dfa_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to ``r6dfa_byte_dfa``: each must raise (ValueError, TypeError,
    OverflowError), never crash or read out of bounds."""
    rows: Any = (((97, 98, 1), (0x80, 0x10FFFF, 1)), ((97, 97, 0), (99, 99, 1)))
    acc: Any = (False, True)
    huge = 1 << 70

    def stop() -> None:
        raise ValueError("deadline")

    def call(
        start: Any = 0,
        accepting: Any = acc,
        edges: Any = rows,
        json: Any = True,
        complete: Any = True,
        check: Any = checkpoint,
    ) -> Callable[[], Any]:
        return lambda: kernels.r6dfa_byte_dfa(start, accepting, edges, json, complete, check)

    return [
        ("r6dfa start a str", call(start="0")),
        ("r6dfa start negative", call(start=-1)),
        ("r6dfa start past the states", call(start=2)),
        ("r6dfa start huge", call(start=huge)),
        ("r6dfa accepting short", call(accepting=(True,))),
        ("r6dfa accepting long", call(accepting=(True,) * 3)),
        ("r6dfa accepting not a sequence", call(accepting=5)),
        ("r6dfa a flag without truth", call(accepting=(False, Falsy()))),
        ("r6dfa json without truth", call(json=Falsy())),
        ("r6dfa edges not a sequence", call(edges=7)),
        ("r6dfa no states", call(edges=(), accepting=())),
        ("r6dfa a row not a sequence", call(edges=(5, ()))),
        ("r6dfa an edge of two", call(edges=(((97, 98),), ()))),
        ("r6dfa an edge of floats", call(edges=(((97.0, 98, 1),), ()))),
        ("r6dfa an edge of strs", call(edges=((("a", "b", 1),), ()))),
        ("r6dfa an empty range", call(edges=(((98, 97, 1),), ()))),
        ("r6dfa a negative code point", call(edges=(((-1, 97, 1),), ()))),
        ("r6dfa a code point past U+10FFFF", call(edges=(((0, 0x110000, 1),), ()))),
        ("r6dfa a range huge", call(edges=(((0, huge, 1),), ()))),
        ("r6dfa a target past the states", call(edges=(((97, 98, 2),), ()))),
        ("r6dfa a target negative", call(edges=(((97, 98, -1),), ()))),
        ("r6dfa rows unsorted", call(edges=(((99, 99, 1), (97, 97, 1)), ()))),
        ("r6dfa rows overlapping", call(edges=(((97, 99, 1), (98, 100, 0)), ()))),
        ("r6dfa checkpoint not callable", call(check=None)),
        ("r6dfa checkpoint raising", call(check=stop)),
        ("r6dfa too few arguments", lambda: kernels.r6dfa_byte_dfa(0, acc, rows)),
    ]
