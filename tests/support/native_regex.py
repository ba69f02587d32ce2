"""Inputs for the regex kernels (``jsonmode._native.minimize_raw`` and ``glushkov_determinise``,
csrc/regex.c and csrc/glushkov.c) and their pure-Python forms: random raw automata and
random regexes (each from a ``random.Random``, so Hypothesis shrinks them and the
sanitizer run seeds them), the real patterns of the test data, and malformed calls.
tests/support/native_fuzz.py puts the two kernels in ``PAIRS`` and
tests/support/native_hostile.py runs :func:`hostile_calls`; tests/test_native_regex.py
uses the rest.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from jsonmode import native
from jsonmode.budget import checkpoint
from jsonmode.errors import JsonModeError
from jsonmode.regex import CharDFA, compile_pattern
from jsonmode.regex.char_dfa import minimize_raw

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
MASKBENCH = DATA / "jsonschemabench" / "maskbench"
SUITE = DATA / "json-schema-test-suite" / "tests"

Edge = tuple[int, int, int]

# Interval boundaries the random automata draw from: ASCII, the UTF-8 length steps,
# the surrogates and the last code point.
POINTS = [
    0,
    1,
    9,
    10,
    47,
    48,
    57,
    97,
    98,
    99,
    122,
    127,
    128,
    0x7FF,
    0x800,
    0xD7FF,
    0xE000,
    0xFFFF,
    0x10000,
    0x10FFFF,
]


@dataclass
class Calls:
    """What differ() clears and compares for the stack kernels (none here)."""

    calls: list[Any] = field(default_factory=list)


@dataclass
class RawCase:
    start: int
    accepting: list[bool]
    edges: list[list[Edge]]
    model: Calls = field(default_factory=Calls)


def random_row(
    rng: random.Random, states: int, points: list[int] | None = None, most: int = 8
) -> list[Edge]:
    """Sorted disjoint edges to targets below ``states`` (adjacent ones, gaps, single
    code points and wide ranges), cut at up to ``most`` of ``points`` (:data:`POINTS`
    by default)."""
    points = POINTS if points is None else points
    cuts = sorted(set(rng.sample(points, rng.randint(0, min(most, len(points))))))
    row: list[Edge] = []
    for lo, hi in itertools.pairwise(cuts):
        if rng.random() < 0.7:
            row.append((lo, hi - 1, rng.randrange(states)))
    if cuts and rng.random() < 0.3:
        row.append((cuts[-1], cuts[-1], rng.randrange(states)))
    return row


def make_raw(rng: random.Random) -> RawCase:
    """A random partial DFA: unreachable and dead states, equivalent states (copies of
    a row, so minimisation has work), rows sharing boundaries."""
    states = rng.randint(1, 14)
    rows = [random_row(rng, states) for _ in range(states)]
    for s in range(states):
        if rng.random() < 0.3:
            rows[s] = list(rows[rng.randrange(states)])
    accepting = [rng.random() < 0.4 for _ in range(states)]
    return RawCase(rng.randrange(states), accepting, rows)


def fields(dfa: CharDFA) -> tuple[Any, ...]:
    return (dfa.start, dfa.accepting, dfa.edges)


def raw_python(case: RawCase) -> Any:
    with running(None):
        return fields(minimize_raw(case.start, case.accepting, case.edges))


def raw_compiled(kernels: ModuleType, case: RawCase) -> Any:
    accepting, edges = kernels.minimize_raw(case.start, case.accepting, case.edges, checkpoint)
    return (0, accepting, edges)


@dataclass
class RegexCase:
    pattern: str
    max_states: int
    anchored: bool
    model: Calls = field(default_factory=Calls)


ATOMS = [
    "a",
    "b",
    "c",
    ".",
    "[ab]",
    "[^a]",
    "[a-c]",
    "\\d",
    "\\w",
    "[\\u00e9-\\u0100]",
    "\\u{1F600}",
    "[^\\s]",
    "é",
]


def random_regex(rng: random.Random, depth: int = 3) -> str:
    """A random ECMA regex of the supported syntax (alternation, groups, classes,
    counted and open repeats)."""
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(ATOMS)
    kind = rng.random()
    if kind < 0.35:
        return "".join(random_regex(rng, depth - 1) for _ in range(rng.randint(2, 3)))
    if kind < 0.55:
        return (
            "(?:" + "|".join(random_regex(rng, depth - 1) for _ in range(rng.randint(2, 3))) + ")"
        )
    inner = random_regex(rng, depth - 1)
    inner = inner if len(inner) == 1 else f"(?:{inner})"
    low = rng.randint(0, 3)
    quantifier = rng.choice(
        ["*", "+", "?", f"{{{low}}}", f"{{{low},}}", f"{{{low},{low + rng.randint(0, 3)}}}"]
    )
    return inner + quantifier


def make_regex(rng: random.Random) -> RegexCase:
    pattern = random_regex(rng)
    if rng.random() < 0.3:
        pattern = "^" + pattern
    if rng.random() < 0.3:
        pattern += "$"
    return RegexCase(pattern, rng.choice([3, 10, 50, 2000]), rng.random() < 0.2)


def regex_result(case: RegexCase) -> Any:
    """The DFA's fields, or the error's type and message."""
    try:
        return fields(
            compile_pattern(case.pattern, max_states=case.max_states, anchored=case.anchored)
        )
    except JsonModeError as exc:
        return (type(exc).__name__, str(exc))


def regex_python(case: RegexCase) -> Any:
    with running(None):
        return regex_result(case)


@contextlib.contextmanager
def running(kernels: ModuleType | None) -> Iterator[None]:
    """Within the block the regex engine runs ``kernels`` (None: pure Python), whichever
    path the process chose at import (JSONMODE_NO_EXTENSIONS may be set)."""
    before = native.KERNELS
    native.KERNELS = kernels
    try:
        yield
    finally:
        native.KERNELS = before


def regex_compiled(kernels: ModuleType, case: RegexCase) -> Any:
    with running(kernels):
        return regex_result(case)


# -- the real patterns --------------------------------------------------------------------


def _patterns_in(value: Any) -> Iterator[str]:
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if key == "pattern" and isinstance(sub, str):
                    yield sub
                if key == "patternProperties" and isinstance(sub, dict):
                    yield from (k for k in sub if isinstance(k, str))
                todo.append(sub)
        elif isinstance(item, list):
            todo.extend(item)


def real_patterns() -> list[str]:
    """Every ``pattern`` and ``patternProperties`` key of the MaskBench schemas and the
    JSON-Schema-Test-Suite files (all drafts), sorted."""
    found: set[str] = set()
    for path in sorted(MASKBENCH.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                found.update(_patterns_in(json.loads(line)["schema"]))
    for path in sorted(SUITE.rglob("*.json")):
        found.update(_patterns_in(json.loads(path.read_text(encoding="utf-8"))))
    return sorted(found)


# -- malformed calls ----------------------------------------------------------------------


class Falsy:
    """An accepting flag whose truth cannot be read."""

    def __bool__(self) -> bool:
        raise ValueError("no truth")


def hostile_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to the regex kernels: each must raise (ValueError, TypeError,
    OverflowError), never crash or read out of bounds."""
    rows: list[list[Edge]] = [[(97, 98, 1)], [(97, 97, 0), (99, 99, 1)]]
    acc = [False, True]
    huge = 1 << 70
    big = (1 << 63) - 1

    def raises(exc: BaseException) -> Callable[[], None]:
        def call() -> None:
            raise exc

        return call

    def mini(
        start: Any = 0, accepting: Any = acc, edges: Any = rows, check: Any = checkpoint
    ) -> Callable[[], Any]:
        return lambda: kernels.minimize_raw(start, accepting, edges, check)

    cs: list[Any] = [(), ((97, 97),), ((98, 98),)]
    follow: list[Any] = [{1, 2}, {1, 2}, {2}]

    def det(
        classes: Any = cs,
        followers: Any = follow,
        last: Any = frozenset({2}),
        univ: Any = -1,
        max_states: Any = 10,
        most: Any = 100,
        check: Any = checkpoint,
    ) -> Callable[[], Any]:
        return lambda: kernels.glushkov_determinise(
            classes, followers, last, univ, max_states, most, check
        )

    return [
        ("minimize_raw start a str", mini(start="0")),
        ("minimize_raw start negative", mini(start=-1)),
        ("minimize_raw start past the states", mini(start=2)),
        ("minimize_raw start huge", mini(start=huge)),
        ("minimize_raw accepting short", mini(accepting=[True])),
        ("minimize_raw accepting long", mini(accepting=[True] * 3)),
        ("minimize_raw accepting not a sequence", mini(accepting=5)),
        ("minimize_raw a flag without truth", mini(accepting=[False, Falsy()])),
        ("minimize_raw edges not a sequence", mini(edges=7)),
        ("minimize_raw no states", mini(edges=[], accepting=[])),
        ("minimize_raw a row not a sequence", mini(edges=[5, []])),
        ("minimize_raw an edge of two", mini(edges=[[(97, 98)], []])),
        ("minimize_raw an edge of floats", mini(edges=[[(97.0, 98, 1)], []])),
        ("minimize_raw an edge of strs", mini(edges=[[("a", "b", 1)], []])),
        ("minimize_raw an empty range", mini(edges=[[(98, 97, 1)], []])),
        ("minimize_raw a range huge", mini(edges=[[(0, huge, 1)], []])),
        ("minimize_raw a range to the int64 end", mini(edges=[[(0, big, 1)], []])),
        ("minimize_raw a target past the states", mini(edges=[[(97, 98, 2)], []])),
        ("minimize_raw a target negative", mini(edges=[[(97, 98, -1)], []])),
        ("minimize_raw rows unsorted", mini(edges=[[(99, 99, 1), (97, 97, 1)], []])),
        ("minimize_raw rows overlapping", mini(edges=[[(97, 99, 1), (98, 100, 0)], []])),
        ("minimize_raw checkpoint not callable", mini(check=None)),
        ("minimize_raw checkpoint raising", mini(check=raises(ValueError("deadline")))),
        ("determinise no positions", det(classes=[], followers=[])),
        ("determinise classes not a sequence", det(classes=3)),
        ("determinise follow short", det(followers=follow[:2])),
        ("determinise a follow position past the end", det(followers=[{1, 5}, {1}, {2}])),
        ("determinise a follow position negative", det(followers=[{-1}, {1}, {2}])),
        ("determinise a follow position a float", det(followers=[{1.0}, {1}, {2}])),
        ("determinise a follow set not iterable", det(followers=[1, {1}, {2}])),
        ("determinise an interval of three", det(classes=[(), ((97, 97, 1),), ((98, 98),)])),
        ("determinise an empty interval", det(classes=[(), ((98, 97),), ((98, 98),)])),
        ("determinise an interval huge", det(classes=[(), ((0, huge),), ((98, 98),)])),
        ("determinise an interval to the int64 end", det(classes=[(), ((0, big),), ((98, 98),)])),
        ("determinise a class not a sequence", det(classes=[(), 5, ((98, 98),)])),
        ("determinise last of strs", det(last=["2"])),
        ("determinise max_states huge", det(max_states=huge)),
        ("determinise univ a str", det(univ="u")),
        ("determinise checkpoint not callable", det(check=1)),
        ("determinise checkpoint raising", det(check=raises(TypeError("deadline")))),
    ]
