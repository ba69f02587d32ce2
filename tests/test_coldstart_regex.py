"""The fast regex constructions (issue 27) against slow, obviously correct references.

- minimisation (Hopcroft over symbols, the dead state never visited) against Moore's
  refinement over every atom with an explicit dead state, on random partial DFAs:
  the canonical minimal DFAs must be equal (``==``), which is language equality;
- pattern compilation (per-class follow groups, segments swept once per class set)
  on random regexes: the result is minimal (the reference minimiser leaves it as it
  is) and accepts exactly what Python's ``re`` accepts, on every string up to length 4
  over a small alphabet that touches every class used;
- ``minimize`` of a DFA this package built returns it unchanged, and those DFAs (and
  ``any_char_dfa``'s chains, marked minimal without a pass) are truly minimal.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import deque
from collections.abc import Sequence

import pytest

from jsonmode import regex as rx
from jsonmode.regex.char_dfa import CharDFA, Edge, minimize_raw

MAX = 0x10FFFF


def _step(rows: Sequence[Sequence[Edge]], s: int, cp: int) -> int:
    for lo, hi, d in rows[s]:
        if lo <= cp <= hi:
            return d
    return -1


def reference_minimize(
    start: int, accepting: Sequence[bool], rows: Sequence[Sequence[Edge]]
) -> CharDFA:
    """Moore's algorithm over all atoms with an explicit dead state; slow and plain."""
    n = len(rows)
    points = sorted(
        {0, MAX + 1} | {e[0] for r in rows for e in r} | {e[1] + 1 for r in rows for e in r}
    )
    atoms = list(itertools.pairwise(points))
    dead = n
    succ = [[_step(rows, s, lo) if s < n else dead for lo, _ in atoms] for s in range(n + 1)]
    succ = [[dead if d < 0 else d for d in row] for row in succ]
    acc = [bool(a) for a in accepting] + [False]
    block = [int(a) for a in acc]
    while True:
        sigs: dict[tuple[int, tuple[int, ...]], int] = {}
        new = [
            sigs.setdefault((block[s], tuple(block[d] for d in succ[s])), len(sigs))
            for s in range(n + 1)
        ]
        if len(sigs) == len(set(block)):
            break
        block = new
    # Quotient, then keep the blocks reachable from the start that can reach acceptance.
    k = max(block) + 1
    qsucc = [[0] * len(atoms) for _ in range(k)]
    qacc = [False] * k
    for s in range(n + 1):
        qsucc[block[s]] = [block[d] for d in succ[s]]
        qacc[block[s]] = acc[s]
    live = {b for b in range(k) if qacc[b]}
    changed = True
    while changed:
        changed = False
        for b in range(k):
            if b not in live and any(d in live for d in qsucc[b]):
                live.add(b)
                changed = True
    if block[start] not in live:
        return CharDFA(0, (False,), ((),))
    order = {block[start]: 0}
    queue = deque([block[start]])
    out_rows: list[list[Edge]] = []
    while queue:
        b = queue.popleft()
        row: list[Edge] = []
        for (lo, nxt), d in zip(atoms, qsucc[b], strict=True):
            if d not in live:
                continue
            if d not in order:
                order[d] = len(order)
                queue.append(d)
            if row and row[-1][2] == order[d] and row[-1][1] + 1 == lo:
                row[-1] = (row[-1][0], nxt - 1, order[d])
            else:
                row.append((lo, nxt - 1, order[d]))
        out_rows.append(row)
    accs = [False] * len(order)
    for b, i in order.items():
        accs[i] = qacc[b]
    return CharDFA(0, tuple(accs), tuple(tuple(r) for r in out_rows))


def _random_dfa(rng: random.Random) -> tuple[int, list[bool], list[list[Edge]]]:
    n = rng.randint(1, 14)
    cuts = [0x61, 0x62, 0x63, 0x64, 0x80, 0x100, 0xD800, 0x10000, MAX]
    rows: list[list[Edge]] = []
    for _ in range(n):
        row: list[Edge] = []
        lo = 0
        for hi in sorted(rng.sample(cuts, rng.randint(1, len(cuts)))):
            if hi >= lo and rng.random() < 0.7:
                row.append((lo, hi, rng.randrange(n)))
            lo = hi + 1
        rows.append(row)
    return rng.randrange(n), [rng.random() < 0.3 for _ in range(n)], rows


@pytest.mark.parametrize("seed", range(40))
def test_minimisation_equals_moore(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(25):
        start, accepting, rows = _random_dfa(rng)
        got = minimize_raw(start, accepting, rows)
        assert got == reference_minimize(start, accepting, rows)
        assert got._minimal
        # and it is a fixed point of the reference
        assert reference_minimize(got.start, got.accepting, got.edges) == got


_ATOMS = [
    "a",
    "b",
    "[a-c]",
    "[^a]",
    ".",
    "\\d",
    "[b-d0-9]",
    "é",
    "[\\u00e0-\\u00ff]",
    "😀",
    "-",
    "x",
]
_ALPHABET = "abcdx0-é😀\n"


def _random_regex(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 2 or r < 0.35:
        return rng.choice(_ATOMS)
    if r < 0.55:
        return "".join(_random_regex(rng, depth + 1) for _ in range(rng.randint(2, 3)))
    if r < 0.7:
        return (
            "(?:" + "|".join(_random_regex(rng, depth + 1) for _ in range(rng.randint(2, 3))) + ")"
        )
    return (
        "(?:"
        + _random_regex(rng, depth + 1)
        + ")"
        + rng.choice(["*", "+", "?", "{2}", "{1,3}", "{0,2}"])
    )


def _python(pattern: str) -> re.Pattern[str]:
    # The atoms above mean the same in ECMA and Python, except "." and "\d" and "$".
    body = pattern.replace("\\d", "[0-9]").replace(".", "[^\\n\\r\\u2028\\u2029]")
    return re.compile(body, re.DOTALL)


@pytest.mark.parametrize("seed", range(30))
def test_compiled_patterns_are_minimal_and_exact(seed: int) -> None:
    rng = random.Random(1000 + seed)
    strings = ["".join(t) for k in range(5) for t in itertools.product(_ALPHABET, repeat=k)]
    for _ in range(8):
        pattern = _random_regex(rng)
        anchored = rng.random() < 0.5
        dfa = rx.compile_pattern(pattern, anchored=anchored)
        assert reference_minimize(dfa.start, dfa.accepting, dfa.edges) == dfa
        oracle = _python(pattern)
        for text in strings:
            want = (oracle.fullmatch(text) if anchored else oracle.search(text)) is not None
            assert dfa.accepts(text) == want, (pattern, anchored, text)


def test_minimize_skips_only_what_it_built() -> None:
    built = rx.compile_pattern("^(?:ab|cd)*e$")
    assert rx.minimize(built) is built
    # The same automaton built by hand is not marked: it goes through a pass.
    copy = CharDFA(built.start, built.accepting, built.edges)
    assert not copy._minimal
    again = rx.minimize(copy)
    assert again == built
    assert again is not copy
    # A redundant hand-made automaton is minimised.
    redundant = CharDFA(
        0, (False, True, True), (((0x61, 0x61, 1),), ((0x61, 0x61, 2),), ((0x61, 0x61, 1),))
    )
    assert rx.minimize(redundant) == rx.compile_pattern("^a+$")


@pytest.mark.parametrize(("low", "high"), [(0, None), (0, 0), (2, 5), (3, None), (4, 2), (0, 7)])
def test_any_char_dfa_is_minimal_as_marked(low: int, high: int | None) -> None:
    dfa = rx.any_char_dfa(low, high)
    assert dfa._minimal
    assert reference_minimize(dfa.start, dfa.accepting, dfa.edges) == dfa
