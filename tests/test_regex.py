"""The regex → DFA engine: differential tests against Python's ``re`` and the official
JSON-Schema-Test-Suite, automaton invariants, integer ranges, byte-level automata and
error cases."""

from __future__ import annotations

import functools
import json
import random
import re
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonmode import regex as rx
from jsonmode.errors import UnsupportedSchemaError
from tests.support.bounded import run_python

SUITE = (
    Path(__file__).resolve().parents[2] / "shared/data/json-schema-test-suite/tests/draft2020-12"
)

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# -- an ECMA → Python translation for the oracle ---------------------------------------
#
# Python's `re` differs from ECMA-262 on: `$` (Python also matches before a final "\n"),
# `.` (Python excludes only "\n"), \d \w \s (Unicode-aware in Python). The translation
# below spells those out; the rest of the syntax used here means the same in both.

_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_INNER = {"d": "0-9", "w": "A-Za-z0-9_", "s": _SPACE}


def ecma_to_python(pattern: str) -> str:
    out: list[str] = []
    i = 0
    in_class = False
    class_start = -1
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            e = pattern[i + 1]
            if e in _INNER:
                out.append(_INNER[e] if in_class else f"[{_INNER[e]}]")
            elif e in "DWS":
                assert not in_class, "give an explicit Python pattern"
                out.append(f"[^{_INNER[e.lower()]}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]" and i > class_start:
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            class_start = i + 1
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
                class_start = i
                continue
            out.append(c)
        elif c == ".":
            out.append("[^\\n\\r\\u2028\\u2029]")
        elif c == "$":
            out.append("\\Z")
        elif pattern.startswith("(?<", i) and pattern[i + 3] not in "=!":
            out.append("(?P<")
            i += 3
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


# (ECMA pattern, explicit Python equivalent or None for the translation above)
PATTERNS: list[tuple[str, str | None]] = [
    (r"^[a-z0-9-]+$", None),
    (r"^\d{4}-\d{2}-\d{2}$", None),
    (r"^\+?[1-9]\d{1,14}$", None),
    (r"^\(?\d{3}\)?[-. ]?\d{3}[-. ]?\d{4}$", None),
    (
        r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
        r"(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$",
        None,
    ),
    (r"^[^@\s]+@[^@\s]+\.[^@\s]+$", None),
    (r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$", None),
    (r"(a|ab)*c", None),
    (r"(a+)+b", None),
    (r"^(?:[01]\d|2[0-3]):[0-5]\d$", None),
    (r"^(a|b|c)+$", None),
    (r"cat|dog", None),
    (r"^(?:cat|dog)s?$", None),
    (r"a+", None),
    (r"^a*$", None),
    (r"[0-9]{2,}", None),
    (r"X_", None),
    (r"f.*o", None),
    (r"^.*bar$", None),
    (r"^[A-Z]{2,3}$", None),
    (r"^#[0-9a-fA-F]{6}$", None),
    (r"^#(?:[0-9a-fA-F]{3}){1,2}$", None),
    (r"^(?:\d{1,3}\.){3}\d{1,3}$", None),
    (r"^https?://[^\s/$.?#].[^\s]*$", None),
    (r"^[a-zA-Z_][a-zA-Z0-9_]*$", None),
    (r"^\w+$", None),
    (r"\W", None),
    (r"^\S+$", None),
    (r"\s{2,}", None),
    (r"^(ab)*$", None),
    (r"^(?:a|b)*abb$", None),
    (r"^(a|b)*a(a|b){3}$", None),
    (r"^(?<year>\d{4})-(?<month>\d{2})$", None),
    (r"^a{3}$", None),
    (r"^a{2,4}$", None),
    (r"^a{2,}$", None),
    (r"^(?:ab){0,3}c?$", None),
    (r"a*?b", None),
    (r"^x+?y{1,3}?z??$", None),
    (r"^\$\d+(?:\.\d{2})?$", None),
    (r"^[\w.-]+$", None),
    (r"^[-\w]+$", None),
    (r"^\t$", None),
    (r"\x41\u0042", None),
    (r"^[\u00e0-\u00ff]+$", None),
    (r"^[^abc]$", None),
    (r"^.$", None),
    ("^\U0001f600+$", None),
    ("^[\U0001f600-\U0001f602]$", None),
    (r"^(?:[a-z]+\.)*[a-z]+$", None),
    (
        r"^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$",
        None,
    ),
    (r"^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", None),
    (r"^(?:\+|-)?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?$", None),
    (r"^[A-Z][a-z]+(?: [A-Z][a-z]+)*$", None),
    (r"^$|^[a-z]+$", None),
    (r"^abc|xyz$", None),
    (r"a|^b|c$", None),
    (r"^(?:a|b?)+$", None),
    (r"^(?:a*)*$", None),
    (r"^(?:a?){3}a{3}$", None),
    (r"(x+x+)+y", None),
    (r"^[a-z]{1,64}$", None),
    (r"^[\s\S]{0,10}$", r"^[\s\S]{0,10}\Z"),
    (r"^\[[0-9]+\]$", None),
    (r"^[\]\[]+$", None),
    (r"^a\.b\/c$", None),
    (r"^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*)@example\.com$", None),
    (r"[^\x00-\x7F]", None),
    (r"^(?:0|[1-9]\d*)$", None),
    (r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$", None),
    (r"^[a-z]+(?:-[a-z]+)*$", None),
    (r"ab{2}c{0,1}d*", None),
    (r"^\v\f\r\n\0$", None),
    (r"^(?:(?:a|b)(?:c|d))+$", None),
    (r"", None),
    (r"^$", None),
    (r"^(?:\(\d+\)|\d+)(?:[-+*/](?:\(\d+\)|\d+))*$", None),
]

# Python's backtracking takes exponential time on these; our DFA does not care.
CATASTROPHIC_FOR_PYTHON = {r"(a|ab)*c", r"(a+)+b", r"^(?:a*)*$", r"(x+x+)+y", r"^(?:a|b?)+$"}

LITERAL_SAMPLES = [
    "", "a", "ab", "abc", "aaab", "b", "c", "2024-01-15", "2024-1-15", "+14155552671",
    "(415) 555-2671", "415.555.2671", "1.2.3", "1.2.3-alpha.1+build.5", "01.2.3",
    "joe@example.com", "joe@ex", "23:59", "24:00", "cat", "dogs", "XX_", "foo", "fxo", "foobar",
    "#a1B2c3", "#abc", "#abcd", "192.168.0.1", "https://x.org/a b", "http://x", "_id9", "9id",
    "  ", "\t", "\n", "abb", "aabb", "$12.50", "$1.5", "AB", "xABy", "àé", "\U0001f600",
    "\U0001f600\U0001f600", "x", "xxy", "xy", "123", "-1.5e10", "Hello World", "Hello world",
    "a-b-c", "a--b", "abbcddd", "abbd", "\v\f\r\n\0", "acbd", "ab\n", "abc\n", "a\u2028", "\r",
    "é", "[12]", "[]", "][", "a.b/c", "a.b\\/c", "x.y@example.com", "aaa", "aaaa", "aaaaa",
    "aaaaaaa", "zyxwvutsrqponmlkjihgfedcbazyxwvutsrqponmlkjihgfedcba", "(1)+2*(3)", "1+", "0",
    "00", "-0", "1e5", "\x00", "\u00a0", "\ufeff", "\u3000",
]  # fmt: skip

_EXTRA_ALPHABET = "ab0159-_. \n\r\t\u2028\xa0éA\U0001f600Z@:/()+$#[]"


@functools.cache
def compiled(pattern: str) -> rx.CharDFA:
    return rx.compile_pattern(pattern)


@functools.cache
def oracle(pattern: str, explicit: str | None) -> re.Pattern[str]:
    return re.compile(explicit if explicit is not None else ecma_to_python(pattern))


def _alphabet(pattern: str) -> str:
    return "".join(sorted(set(pattern) | set(_EXTRA_ALPHABET)))


def test_pattern_list_is_large_enough() -> None:
    assert len(PATTERNS) >= 60
    assert len({p for p, _ in PATTERNS}) == len(PATTERNS)


@pytest.mark.parametrize(("pattern", "explicit"), PATTERNS)
def test_literal_samples_agree_with_python(pattern: str, explicit: str | None) -> None:
    dfa, py = compiled(pattern), oracle(pattern, explicit)
    assert_trimmed(dfa)
    for s in LITERAL_SAMPLES:
        assert dfa.accepts(s) == (py.search(s) is not None), (pattern, s)


@pytest.mark.parametrize(("pattern", "explicit"), PATTERNS)
@SETTINGS
@given(data=st.data())
def test_generated_samples_agree_with_python(
    pattern: str, explicit: str | None, data: st.DataObject
) -> None:
    dfa, py = compiled(pattern), oracle(pattern, explicit)
    alphabet = _alphabet(pattern)
    positive = data.draw(st.from_regex(py), label="positive")
    assert dfa.accepts(positive), (pattern, positive)
    # a near miss: one edit of a matching string
    if positive:
        k = data.draw(st.integers(0, len(positive) - 1), label="at")
        ch = data.draw(st.sampled_from(alphabet), label="ch")
        op = data.draw(st.sampled_from(["replace", "insert", "delete"]), label="op")
        mutated = {
            "replace": positive[:k] + ch + positive[k + 1 :],
            "insert": positive[:k] + ch + positive[k:],
            "delete": positive[:k] + positive[k + 1 :],
        }[op]
        if pattern in CATASTROPHIC_FOR_PYTHON:  # keep Python's backtracking affordable
            mutated = mutated[:14]
        assert dfa.accepts(mutated) == (py.search(mutated) is not None), (pattern, mutated)
    other = data.draw(st.text(alphabet=alphabet, max_size=12), label="random")
    assert dfa.accepts(other) == (py.search(other) is not None), (pattern, other)


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_catastrophic_patterns_compile_fast() -> None:
    cases = {
        r"(a+)+b": ("a" * 40 + "b", "a" * 40 + "c"),
        r"^(a+)+$": ("a" * 40, "a" * 40 + "b"),
        r"(x+x+)+y": ("x" * 40 + "y", "x" * 40),
        r"^(a|aa)+$": ("a" * 41, "a" * 40 + "b"),
        r"^(?:a?){30}a{30}$": ("a" * 30, "a" * 29),
    }
    for pattern, (yes, no) in cases.items():
        t0 = time.perf_counter()
        dfa = rx.compile_pattern(pattern)
        assert time.perf_counter() - t0 < 2.0, pattern
        assert dfa.accepts(yes)
        assert not dfa.accepts(no)


def test_large_counted_repeat_within_budget() -> None:
    dfa = rx.compile_pattern("^a{1000}$")
    assert dfa.n_states == 1001
    assert dfa.accepts("a" * 1000)
    assert not dfa.accepts("a" * 999)
    assert not dfa.accepts("a" * 1001)
    assert rx.compile_pattern("a{1000}").accepts("b" + "a" * 1000 + "b")


# -- the official test suite -------------------------------------------------------------

# Unsupported by design (they raise UnsupportedSchemaError; post-validation handles them):
#   optional/ecmascript-regex.json: "\p{Letter}cole", "^\p{digit}+$" (Unicode property
#   escapes, in "pattern" and in "patternProperties");
#   pattern.json: "^\p{Letter}+$"; patternProperties.json: "^\p{Letter}+$".
EXPECTED_UNSUPPORTED = {r"\p{Letter}cole", r"^\p{digit}+$", r"^\p{Letter}+$"}


def _suite(name: str) -> list[dict[str, Any]]:
    return list(json.loads((SUITE / name).read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    "name", ["optional/ecmascript-regex.json", "pattern.json", "patternProperties.json"]
)
def test_official_suite_patterns(name: str) -> None:
    unsupported: set[str] = set()
    checked = 0
    for group in _suite(name):
        schema = group["schema"]
        patterns = [schema["pattern"]] if "pattern" in schema else list(schema["patternProperties"])
        dfas: dict[str, rx.CharDFA] = {}
        for pattern in patterns:
            if pattern in EXPECTED_UNSUPPORTED:
                with pytest.raises(UnsupportedSchemaError, match=r"\\p\{"):
                    rx.compile_pattern(pattern)
                unsupported.add(pattern)
            else:
                dfas[pattern] = rx.compile_pattern(pattern)
        if len(dfas) < len(patterns):
            continue
        for case in group["tests"]:
            data = case["data"]
            if "pattern" in schema:
                if isinstance(data, str):
                    assert dfas[schema["pattern"]].accepts(data) == case["valid"], (group, case)
                    checked += 1
            elif isinstance(data, dict):
                for key in data:
                    for pattern, dfa in dfas.items():
                        expected = re.search(ecma_to_python(pattern), key) is not None
                        assert dfa.accepts(key) == expected, (pattern, key)
                        checked += 1
                whole = schema.get("additionalProperties") is False and all(
                    v is True for v in schema["patternProperties"].values()
                )
                if whole:  # valid iff every key matches some pattern
                    ok = all(any(d.accepts(k) for d in dfas.values()) for k in data)
                    assert ok == case["valid"], (group, case)
    assert checked > 0
    assert unsupported <= EXPECTED_UNSUPPORTED


# -- automaton invariants ----------------------------------------------------------------


def assert_trimmed(dfa: rx.CharDFA) -> None:
    """Edges sorted and disjoint; every state reachable and able to reach acceptance."""
    n = dfa.n_states
    for row in dfa.edges:
        prev = -1
        for lo, hi, dst in row:
            assert prev < lo <= hi <= 0x10FFFF
            assert 0 <= dst < n
            prev = hi
    if dfa.is_empty():
        assert dfa == rx.CharDFA(0, (False,), ((),))
        return
    seen = {dfa.start}
    todo = [dfa.start]
    rev: dict[int, set[int]] = {s: set() for s in range(n)}
    while todo:
        s = todo.pop()
        for _, _, d in dfa.edges[s]:
            rev[d].add(s)
            if d not in seen:
                seen.add(d)
                todo.append(d)
    assert seen == set(range(n)), "unreachable states"
    live = {s for s in range(n) if dfa.accepting[s]}
    todo = list(live)
    while todo:
        s = todo.pop()
        for p in rev[s] - live:
            live.add(p)
            todo.append(p)
    assert live == set(range(n)), "dead-end states"


def _distinguishable_pairs_all(dfa: rx.CharDFA) -> bool:
    """Slow reference (table filling): True iff no two states are equivalent."""
    n = dfa.n_states
    points = sorted(
        {e[0] for row in dfa.edges for e in row}
        | {e[1] + 1 for row in dfa.edges for e in row}
        | {0}
    )
    probes = [p for p in points if p <= 0x10FFFF]

    def nxt(s: int, cp: int) -> int:
        return dfa.step(s, cp) if s >= 0 else -1

    states = [*range(n), -1]
    acc = {s: (s >= 0 and dfa.accepting[s]) for s in states}
    dist = {(a, b) for a in states for b in states if acc[a] != acc[b]}
    changed = True
    while changed:
        changed = False
        for a in states:
            for b in states:
                if a < b and (a, b) not in dist:
                    for cp in probes:
                        x, y = nxt(a, cp), nxt(b, cp)
                        if (x, y) in dist or (y, x) in dist:
                            dist.add((a, b))
                            dist.add((b, a))
                            changed = True
                            break
    return all((a, b) in dist for a in range(n) for b in range(n) if a != b)


@pytest.mark.parametrize(("pattern", "explicit"), PATTERNS[:40])
def test_minimal_by_slow_reference(pattern: str, explicit: str | None) -> None:
    dfa = compiled(pattern)
    if dfa.n_states <= 40:
        assert _distinguishable_pairs_all(dfa), pattern


EQUIVALENT = [
    ("^a+$", "^aa*$"),
    ("^(a|b)*$", "^[ab]*$"),
    ("^(?:ab|ac)$", "^a[bc]$"),
    ("a", "^[\\s\\S]*a[\\s\\S]*$"),
    ("^(a+)+b", "^a+b"),
    ("^(?:a?){3}a{3}$", "^a{3,6}$"),
    ("(a|ab)*c", "c"),
    ("^x{2,}$", "^xx+$"),
    ("^\\d{1,3}$", "^[0-9][0-9]?[0-9]?$"),
    ("^(?:a|b)*abb$", "^[ab]*abb$"),
    ("^[^\\s\\S]$", "^[]$"),
]


@pytest.mark.parametrize(("left", "right"), EQUIVALENT)
def test_equal_languages_give_equal_minimal_dfas(left: str, right: str) -> None:
    a, b = rx.compile_pattern(left), rx.compile_pattern(right)
    assert a == b
    assert a.to_text() == b.to_text()
    assert rx.minimize(a) == a


def test_printed_form_is_pinned() -> None:
    assert rx.compile_pattern("^(?:ab|c)$").to_text() == "\n".join(
        ["0S : [a]->1 [c]->2", "1  : [b]->2", "2 A: "]
    )
    assert rx.compile_pattern("x").to_text() == "\n".join(
        ["0S : [\\u0000-w]->0 [x]->1 [y-\\U10FFFF]->0", "1 A: [\\u0000-\\U10FFFF]->1"]
    )


def test_empty_language() -> None:
    for dfa in [
        rx.compile_pattern("[]"),
        rx.compile_pattern("^[]b$"),
        rx.intersect(rx.compile_pattern("^a+$"), rx.compile_pattern("^b+$")),
        rx.any_char_dfa(3, 2),
        rx.literal_dfa([]),
        rx.complement(rx.compile_pattern("")),
    ]:
        assert dfa.is_empty()
        assert dfa == rx.CharDFA(0, (False,), ((),))
    assert not rx.compile_pattern("^$").is_empty()


BOOLEAN_PATTERNS = ["^a+$", "b", "^[a-c]{2,3}$", "^(?:ab)*$", "c$", "^$", "^.{0,2}$"]


@SETTINGS
@given(
    left=st.sampled_from(BOOLEAN_PATTERNS),
    right=st.sampled_from(BOOLEAN_PATTERNS),
    texts=st.lists(st.text(alphabet="abcd\n", max_size=5), max_size=20),
)
def test_boolean_operations(left: str, right: str, texts: list[str]) -> None:
    a, b = compiled(left), compiled(right)
    both, either, not_a = rx.intersect(a, b), rx.union(a, b), rx.complement(a)
    for dfa in (both, either, not_a):
        assert_trimmed(dfa)
    for s in texts:
        assert both.accepts(s) == (a.accepts(s) and b.accepts(s))
        assert either.accepts(s) == (a.accepts(s) or b.accepts(s))
        assert not_a.accepts(s) != a.accepts(s)
    assert rx.complement(not_a) == a
    assert rx.complement(either) == rx.intersect(not_a, rx.complement(b))
    assert rx.union(a, b) == rx.union(b, a)


@SETTINGS
@given(
    words=st.lists(st.text(alphabet="ab\U0001f600\n", max_size=4), max_size=6),
    probe=st.text(alphabet="ab\U0001f600\n", max_size=4),
)
def test_literal_dfa(words: list[str], probe: str) -> None:
    dfa = rx.literal_dfa(words)
    assert_trimmed(dfa)
    for w in words:
        assert dfa.accepts(w)
    assert dfa.accepts(probe) == (probe in words)


@pytest.mark.parametrize(("low", "high"), [(0, None), (2, None), (0, 0), (0, 3), (2, 5), (4, 4)])
def test_any_char_dfa(low: int, high: int | None) -> None:
    dfa = rx.any_char_dfa(low, high)
    assert_trimmed(dfa)
    assert rx.minimize(dfa) == dfa
    for n in range(8):
        text = ("a\U0001f600\n\x00"[n % 4]) * n
        assert dfa.accepts(text) == (n >= low and (high is None or n <= high))


# -- integer ranges ------------------------------------------------------------------------

_BOUNDS = [
    None,
    -1200,
    -1000,
    -999,
    -125,
    -101,
    -100,
    -99,
    -37,
    -10,
    -9,
    -1,
    0,
    1,
    3,
    9,
    10,
    37,
    99,
]
_BOUNDS += [100, 101, 125, 999, 1000, 1200]
_NON_CANONICAL = ["-0", "00", "01", "-01", "+1", "", "-", "1.0", " 1", "007", "-00"]


def test_integer_range_example() -> None:
    assert rx.integer_range_pattern(3, 125) == "(?:[3-9]|[1-9][0-9]|1[01][0-9]|12[0-5])"


def test_integer_range_exhaustive() -> None:
    values = range(-1300, 1301)
    for low in _BOUNDS:
        for high in _BOUNDS:
            if low is not None and high is not None and low > high:
                continue
            pattern = re.compile(rx.integer_range_pattern(low, high))
            for v in values:
                inside = (low is None or v >= low) and (high is None or v <= high)
                assert (pattern.fullmatch(str(v)) is not None) == inside, (low, high, v)
            for s in _NON_CANONICAL:
                assert pattern.fullmatch(s) is None, (low, high, s)


def test_integer_range_dfa_agrees() -> None:
    for low, high in [(3, 125), (-125, -3), (None, 7), (-7, None), (None, None), (0, 0), (-1, 1)]:
        dfa = rx.compile_pattern(f"^{rx.integer_range_pattern(low, high)}$")
        for v in range(-300, 301):
            inside = (low is None or v >= low) and (high is None or v <= high)
            assert dfa.accepts(str(v)) == inside, (low, high, v)
        for s in _NON_CANONICAL:
            assert not dfa.accepts(s)


def test_integer_range_empty() -> None:
    pattern = rx.integer_range_pattern(5, 4)
    assert rx.compile_pattern(f"^{pattern}$").is_empty()
    assert all(re.fullmatch(pattern, str(v)) is None for v in range(-10, 10))


@SETTINGS
@given(
    low=st.one_of(st.none(), st.integers(-(10**30), 10**30)),
    span=st.one_of(st.none(), st.integers(0, 10**31)),
    seed=st.integers(0, 2**32),
)
def test_integer_range_huge_bounds(low: int | None, span: int | None, seed: int) -> None:
    high = None if span is None else (low if low is not None else 0) + span
    pattern = re.compile(rx.integer_range_pattern(low, high))
    dfa = rx.compile_pattern(f"^{pattern.pattern}$")
    rng = random.Random(seed)
    probes: list[int] = []
    for bound in (low, high):
        if bound is not None:
            probes += [bound - 2, bound - 1, bound, bound + 1, bound + 2, -bound, bound * 10]
    probes += [rng.randint(-(10**32), 10**32) for _ in range(10)]
    probes += [rng.randint(-(10**6), 10**6) for _ in range(5)]
    if low is not None and high is not None:
        probes += [rng.randint(low, high) for _ in range(10)]
    for v in probes:
        inside = (low is None or v >= low) and (high is None or v <= high)
        assert (pattern.fullmatch(str(v)) is not None) == inside, (low, high, v)
        assert dfa.accepts(str(v)) == inside, (low, high, v)


# -- byte-level automata -------------------------------------------------------------------

BYTE_DFAS: dict[str, Callable[[], rx.CharDFA]] = {
    "up to 6 chars": lambda: rx.any_char_dfa(0, 6),
    "no a": lambda: rx.compile_pattern("^[^a]*$"),
    "has control/quote/backslash": lambda: rx.compile_pattern('[\\u0000-\\u001f"\\\\]'),
    "astral or a-z": lambda: rx.compile_pattern("^(?:[\\u{10000}-\\u{10FFFF}]|[a-z])*$"),
    "no digit": lambda: rx.complement(rx.compile_pattern("\\d")),
    "literals": lambda: rx.literal_dfa(["", "é", '"', "\\", "\n", "\U0001f600", "\x7f", "\u2028"]),
    "dot": lambda: rx.compile_pattern("^.{1,4}$"),
    "anything": lambda: rx.any_char_dfa(),
    "BMP edges": lambda: rx.compile_pattern("^[\\u07ff\\u0800\\uffff\\ud7ff\\ue000\\u{10000}]+$"),
}


@functools.cache
def byte_dfas(name: str) -> tuple[rx.CharDFA, rx.ByteDFA, rx.ByteDFA]:
    char = BYTE_DFAS[name]()
    return char, rx.utf8_byte_dfa(char), rx.json_string_body_dfa(char, complete=True)


@functools.cache
def canonical_body(name: str) -> rx.ByteDFA:
    return rx.json_string_body_dfa(BYTE_DFAS[name]())


def assert_byte_trimmed(dfa: rx.ByteDFA) -> None:
    n = dfa.n_states
    assert dfa.trans.shape == (n, 256)
    assert dfa.trans.dtype == np.int32
    assert dfa.accepting.dtype == np.bool_
    assert not dfa.trans.flags.writeable
    seen = {dfa.start}
    queue = deque([dfa.start])
    while queue:
        s = queue.popleft()
        for d in set(dfa.trans[s].tolist()) - {-1} - seen:
            seen.add(d)
            queue.append(d)
    assert len(seen) == n
    live = dfa.accepting.copy()
    while True:
        step = live | ((dfa.trans >= 0) & live[np.maximum(dfa.trans, 0)]).any(axis=1)
        if (step == live).all():
            break
        live = step
    assert live.all()


@pytest.mark.parametrize("name", list(BYTE_DFAS))
def test_byte_dfas_are_trimmed(name: str) -> None:
    _, utf8, body = byte_dfas(name)
    assert_byte_trimmed(utf8)
    assert_byte_trimmed(body)


_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from('"\\/\n\r\t\b\f\x00\x1f\x7fa\u2028\U0001f600\U0010ffff'),
    ),
    max_size=8,
)


def _alt_encoding(text: str, rng: random.Random) -> str:
    """Another valid JSON spelling of ``text``: escapes chosen at random per character."""
    short = {
        '"': '\\"',
        "\\": "\\\\",
        "/": "\\/",
        "\b": "\\b",
        "\f": "\\f",
        "\n": "\\n",
        "\r": "\\r",
        "\t": "\\t",
    }
    out = []
    for ch in text:
        cp = ord(ch)
        options = []
        if cp >= 0x20 and ch not in '"\\':
            options.append(ch)
        if ch in short:
            options.append(short[ch])
        units = (
            [cp]
            if cp < 0x10000
            else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
        )
        options.append("".join(f"\\u{u:04x}" for u in units))
        options.append("".join(f"\\u{u:04X}" for u in units))
        mixed = "".join(f"\\u{u:04x}" for u in units)
        options.append(
            "".join(c.upper() if c in "abcdef" and rng.random() < 0.5 else c for c in mixed)
        )
        out.append(rng.choice(options))
    return "".join(out)


@pytest.mark.parametrize("name", list(BYTE_DFAS))
@SETTINGS
@given(text=_TEXT, seed=st.integers(0, 2**32))
def test_json_body_accepts_json_dumps(name: str, text: str, seed: int) -> None:
    char, utf8, body = byte_dfas(name)
    expected = char.accepts(text)
    assert utf8.accepts(text.encode("utf-8")) == expected
    for ensure_ascii in (True, False):
        dumped = json.dumps(text, ensure_ascii=ensure_ascii)[1:-1]
        assert body.accepts(dumped.encode("utf-8")) == expected, (text, dumped)
    alt = _alt_encoding(text, random.Random(seed))
    assert json.loads(f'"{alt}"') == text
    assert body.accepts(alt.encode("utf-8")) == expected, (text, alt)


_BYTE_TOKENS = [b"a", b"\\", b"u", b"d", b"D", b"8", b"0", b"c", b"C", b"f", b"e", b'"', b"n", b"/"]
_BYTE_TOKENS += [
    b"\xc3",
    b"\xa9",
    "\U0001f600".encode(),
    b"\x01",
    b"\xed\xa0\x80",
    b"\xff",
    b"\x80",
]


def _json_oracle(char: rx.CharDFA, data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
        value = json.loads(f'"{text}"')
    except ValueError:
        return False
    if not isinstance(value, str) or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        return False
    return char.accepts(value)


@pytest.mark.parametrize("name", ["anything", "literals", "astral or a-z", "up to 6 chars"])
@SETTINGS
@given(parts=st.lists(st.sampled_from(_BYTE_TOKENS), max_size=14))
def test_json_body_random_bytes(name: str, parts: list[bytes]) -> None:
    char, _, body = byte_dfas(name)
    data = b"".join(parts)
    assert body.accepts(data) == _json_oracle(char, data), data


INVALID_BODIES = [
    b"\x01", b"a\x1fb", b"\\", b"a\\", b"\\x", b"\\a", b"\\u12", b"\\u12g4", b"\\U0041", b"\\u{41}",
    b"\\ud800", b"\\udc00", b"\\ud800\\u0041", b"\\ud800x", b"\\ud83d\\ud83d", b"\\udbff", b'"',
    b'a"b', b"\xff", b"\xc0\x80", b"\xc1\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xe2\x82",
    b"\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"\n",
]  # fmt: skip


def test_json_body_rejects_invalid() -> None:
    _, _, body = byte_dfas("anything")
    for data in INVALID_BODIES:
        assert not body.accepts(data), data
    for data in [
        b"",
        b"\\u00e9",
        b"\\u00E9",
        b"\\ud83d\\ude00",
        b"\\uD83D\\uDE00",
        b"\\/",
        b"\x7f",
    ]:
        assert body.accepts(data), data


@pytest.mark.parametrize("name", list(BYTE_DFAS))
@SETTINGS
@given(text=_TEXT, seed=st.integers(0, 2**32))
def test_canonical_body_is_what_json_dumps_writes(name: str, text: str, seed: int) -> None:
    """The canonical body takes ``json.dumps(s, ensure_ascii=False)``'s spelling exactly
    when the value is in the language, and never a needless escape; the complete body
    takes everything it takes."""
    char, _, complete = byte_dfas(name)
    body = canonical_body(name)
    expected = char.accepts(text)
    assert body.accepts(json.dumps(text, ensure_ascii=False)[1:-1].encode()) == expected
    alt = _alt_encoding(text, random.Random(seed))
    if body.accepts(alt.encode()):
        assert expected
        assert complete.accepts(alt.encode())
        assert not _needless(alt)
    elif expected:
        assert _needless(alt), alt


def _needless(body: str) -> bool:
    """Whether a JSON string body has an escape ``json.dumps(..., ensure_ascii=False)``
    never writes: ``\\/``, or ``\\u`` of a character that needs no escape."""
    i = 0
    while i < len(body):
        if body[i] != "\\":
            i += 1
        elif body[i + 1] == "u":
            if int(body[i + 2 : i + 6], 16) >= 0x20:
                return True
            i += 6
        else:
            if body[i + 1] == "/":
                return True
            i += 2
    return False


def test_canonical_body_refuses_needless_escapes() -> None:
    body = canonical_body("anything")
    for data in [b"\\/", b"\\u00e9", b"\\u0041", b"\\ud83d\\ude00", b"\\u007f", b"\\u0020"]:
        assert not body.accepts(data), data
    for data in [
        b"",
        b"/",
        b"\xc3\xa9",
        b"\\n",
        b"\\u000a",
        b"\\u001F",
        b"\\u0000",
        b'\\"',
        b"\x7f",
    ]:
        assert body.accepts(data), data
    for data in INVALID_BODIES:
        assert not body.accepts(data), data


def test_utf8_rejects_invalid() -> None:
    _, utf8, _ = byte_dfas("anything")
    for data in [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\x80", b"\xf4\x90\x80\x80"]:
        assert not utf8.accepts(data), data
    for text in ["", "\x00", "\x7f", "\x80", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff"]:
        assert utf8.accepts(text.encode()), repr(text)
    assert utf8.accepts("\U00010000\U0010ffff".encode())


def test_surrogate_only_language_is_empty_in_bytes() -> None:
    char = rx.compile_pattern("^[\\ud800-\\udfff]$")
    assert not char.is_empty()
    for byte_dfa in (rx.utf8_byte_dfa(char), rx.json_string_body_dfa(char)):
        assert byte_dfa.n_states == 1
        assert not byte_dfa.accepting.any()
        assert (byte_dfa.trans == -1).all()


# -- errors ----------------------------------------------------------------------------------

UNSUPPORTED = [
    ("(a)\\1", "\\1"),
    ("(a)(b)\\12", "\\12"),
    ("(?<n>a)\\k<n>", "\\k<n>"),
    ("a(?=b)", "(?="),
    ("a(?!b)", "(?!"),
    ("(?<=a)b", "(?<="),
    ("(?<!a)b", "(?<!"),
    ("\\bfoo", "\\b"),
    ("foo\\B", "\\B"),
    ("\\p{Letter}+", "\\p{Letter}"),
    ("[\\P{L}]", "\\P{L}"),
    ("(?i)abc", "(?i)"),
    ("(?i:abc)", "(?i:"),
    ("(?P<x>a)", "(?P<"),
    ("a^b", "^"),
    ("a$b", "$"),
    ("(^a)", "^"),
    ("(a$)", "$"),
    ("a**", "a**"),
    ("*a", "*"),
    ("a{2}{3}", "a{2}{3}"),
    ("[z-a]", "z-a"),
    ("(a", "(a"),
    ("a)", ")"),
    ("\\01", "\\01"),
    ("\\a", "\\a"),
    ("a\\", "\\"),
    ("[abc", "[abc"),
    ("a{3,2}", "{3,2}"),
    ("\\xZZ", "\\xZZ"),
    ("a{1000000}", "{1000000}"),
]


@pytest.mark.parametrize(("pattern", "fragment"), UNSUPPORTED)
def test_unsupported_syntax_names_the_fragment(pattern: str, fragment: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        rx.compile_pattern(pattern)
    assert fragment in info.value.message
    assert info.value.hint


def test_annex_b_leniencies() -> None:
    assert rx.compile_pattern("^a{$").accepts("a{")
    assert rx.compile_pattern("^a{,3}$").accepts("a{,3}")
    assert rx.compile_pattern("^}]$").accepts("}]")
    assert rx.compile_pattern("^[\\w-.]+$").accepts("a-.b")
    assert rx.compile_pattern("^\\cJ$").accepts("\n")
    assert rx.compile_pattern("^\\c$").accepts("\\c")
    assert rx.compile_pattern("^[^]$").accepts("\n")
    assert rx.compile_pattern("^[\\b]$").accepts("\b")
    assert rx.compile_pattern("^\\uD83D\\uDE00$").accepts("\U0001f600")
    assert rx.compile_pattern("^\\u{1F600}$").accepts("\U0001f600")


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
@pytest.mark.parametrize(
    ("pattern", "what"),
    [("(a|b)*a(a|b){30}", "max_states=2000"), ("(?:a{200}){200}", "positions")],
)
def test_budget_exceeded_raises_quickly(pattern: str, what: str) -> None:
    t0 = time.perf_counter()
    with pytest.raises(UnsupportedSchemaError) as info:
        rx.compile_pattern(pattern)
    assert time.perf_counter() - t0 < 5.0
    assert "budget" in info.value.message
    assert what in info.value.message


def test_budgets_of_other_operations() -> None:
    with pytest.raises(UnsupportedSchemaError, match="max_states=10"):
        rx.any_char_dfa(0, 50, max_states=10)
    a = rx.compile_pattern("^[ab]{0,30}$")
    b = rx.compile_pattern("(a|b)*a(a|b){4}")
    with pytest.raises(UnsupportedSchemaError, match="budget"):
        rx.intersect(a, b, max_states=20)
    assert rx.compile_pattern("^(a|b)*a(a|b){3}$", max_states=100).n_states == 16


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_a_long_literal_compiles_in_quadratic_time_not_cubic() -> None:
    """Unanchored, a literal of n letters has n states of up to n positions each; the
    subset construction joined a state's follow sets one at a time, copying the growing
    set each time (1 000 letters: 4.2 s, 1 500: ~14 s). Joined once, 1 500 take well
    under a second here; a bounded child keeps a regression from hanging the suite."""
    code = (
        "import time\n"
        "from jsonmode.regex import compile_pattern\n"
        "started = time.perf_counter()\n"
        "compile_pattern('a' * 1500)\n"
        "print(time.perf_counter() - started)\n"
    )
    assert float(run_python(code, 60).strip()) < 5.0


@pytest.mark.parametrize(("pattern", "explicit"), PATTERNS)
def test_the_lazy_search_agrees_with_the_dfa(pattern: str, explicit: str | None) -> None:
    """rx.lazy_search runs the same position automaton without building the DFA first:
    the same verdict on every sample and on generated near misses."""
    dfa, lazy = compiled(pattern), rx.lazy_search(pattern)
    rng = random.Random(pattern)
    alphabet = _alphabet(pattern)
    samples = list(LITERAL_SAMPLES)
    for _ in range(40):
        samples.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(12))))
    for s in samples:
        assert lazy.search(s, float("inf")) == dfa.accepts(s), (pattern, s)


def test_the_lazy_search_stops_at_its_deadline() -> None:
    lazy = rx.lazy_search("a" * 1999 + ".")
    assert lazy.search("a" * 2010, float("inf")) is True
    assert lazy.search("a" * 1999 + "\n", float("inf")) is False  # (`.`: not a line end)
    assert lazy.search("b" * 3000, float("inf")) is False
    assert lazy.search("a" * 50_000, 0.0) is None  # (its clock is read every 256 steps)
