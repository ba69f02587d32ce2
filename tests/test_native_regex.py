"""The regex kernels of the compiled core (csrc/regex.c, csrc/glushkov.c): Hopcroft
minimisation (``char_dfa.minimize_raw``) and the Glushkov subset construction
(``glushkov._determinise``) give exactly the pure-Python forms' CharDFA (the same
state numbering, the same edges) and the same errors at the same budgets, on real
patterns (MaskBench, JSON-Schema-Test-Suite, the ``format`` patterns), on the raw
automata real compiles minimise, and on random regexes and automata; malformed calls
are refused with a Python exception; the compile deadline holds inside the kernels.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import random
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.native_digest import maskbench
from support.native_regex import (
    fields,
    hostile_calls,
    make_raw,
    make_regex,
    raw_compiled,
    raw_python,
    real_patterns,
    regex_compiled,
    regex_python,
    running,
)

from jsonmode.budget import checkpoint, deadline
from jsonmode.decoding import compiled as compiled_module
from jsonmode.decoding.automata import network as network_module
from jsonmode.decoding.compile import compiler as compiler_module
from jsonmode.decoding.compile import format_patterns
from jsonmode.decoding.compiled import compile_schema
from jsonmode.errors import BudgetExceededError, JsonModeError, UnsupportedSchemaError
from jsonmode.lru import Lru
from jsonmode.regex import char_dfa, compile_pattern, complement, intersect, union
from jsonmode.regex import glushkov as glushkov_module
from jsonmode.schema import patterns as patterns_module

KERNELS: ModuleType = importlib.import_module("jsonmode._native")
PATTERNS = real_patterns()


def both(call: Callable[[], Any]) -> tuple[Any, Any]:
    """``call()`` on the compiled path and on the pure-Python path: the DFA's fields,
    or the error's type and message."""
    out = []
    for kernels in (KERNELS, None):
        with running(kernels):
            try:
                out.append(fields(call()))
            except JsonModeError as exc:
                out.append((type(exc).__name__, str(exc)))
    return out[0], out[1]


def test_the_test_data_has_its_patterns() -> None:
    assert len(PATTERNS) > 900, len(PATTERNS)


@pytest.mark.parametrize("anchored", [False, True])
def test_every_real_pattern_compiles_to_the_same_dfa_on_both_paths(anchored: bool) -> None:
    wrong = []
    for pattern in PATTERNS:
        compiled, python = both(lambda p=pattern: compile_pattern(p, anchored=anchored))
        if compiled != python:
            wrong.append(pattern)
    assert wrong == []


def test_the_format_patterns_compile_alike_and_their_boolean_algebra_too() -> None:
    """Each ``format`` pattern as the format table builds it (its own state budget),
    and intersections, unions and complements of neighbours."""
    names = sorted(format_patterns.FORMAT_PATTERNS)
    assert len(names) >= 8
    dfas = []
    for name in names:
        compiled, python = both(lambda n=name: format_patterns.build_format_dfa(n))
        assert compiled == python, name
        with running(None):
            dfas.append(format_patterns.build_format_dfa(name))
    for a, b in itertools.pairwise(dfas):
        for operation in (intersect, union):
            compiled, python = both(lambda x=a, y=b, f=operation: f(x, y, max_states=20000))
            assert compiled == python
        compiled, python = both(lambda x=a: complement(x))
        assert compiled == python


def test_the_automata_real_compiles_minimise_are_minimised_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The raw automata of 40 MaskBench schemas' compiles (recorded on the pure path)
    through the kernel and through the reference."""
    seen: list[tuple[int, list[bool], list[list[tuple[int, int, int]]]]] = []
    reference = char_dfa.minimize_raw

    def record(start: int, accepting: Any, edges: Any) -> Any:
        seen.append((start, list(accepting), [list(row) for row in edges]))
        return reference(start, accepting, edges)

    monkeypatch.setattr(char_dfa, "minimize_raw", record)
    monkeypatch.setattr(glushkov_module, "minimize_raw", record)
    # Empty compile caches (other tests of the session filled them): these compiles
    # build their patterns' and lexemes' automata again.
    monkeypatch.setattr(patterns_module, "_cache", Lru(patterns_module.CACHE_BYTES))
    monkeypatch.setattr(compiler_module, "_LEXEMES", Lru(64 << 20))
    monkeypatch.setattr(network_module, "_TERMINALS", Lru(64 << 20))
    monkeypatch.setattr(compiled_module, "_cache", {})
    with running(None):
        for _, schema, _ in maskbench(40):
            with contextlib.suppress(JsonModeError):
                compile_schema(schema)
    monkeypatch.undo()
    assert len(seen) > 10
    for start, accepting, edges in seen:
        accepted, rows = KERNELS.minimize_raw(start, accepting, edges, checkpoint)
        with running(None):
            expected = char_dfa.minimize_raw(start, accepting, edges)
        assert (0, accepted, rows) == fields(expected)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_random_raw_automata_minimise_alike(rng: random.Random) -> None:
    case = make_raw(rng)
    assert raw_compiled(KERNELS, case) == raw_python(case)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_random_regexes_compile_alike_with_the_same_budget_errors(rng: random.Random) -> None:
    case = make_regex(rng)
    assert regex_compiled(KERNELS, case) == regex_python(case)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_rows_the_kernel_refuses_go_to_the_reference(rng: random.Random) -> None:
    """Unsorted rows (the kernel takes sorted disjoint ones) and flags of any truthy
    type: minimize_raw's answer is the reference's on the compiled path too."""
    case = make_raw(rng)
    edges = [list(reversed(row)) for row in case.edges]
    accepting = [1 if flag else 0 for flag in case.accepting]
    if any(len(row) > 1 for row in edges):
        with pytest.raises(ValueError, match="out of order"):
            KERNELS.minimize_raw(case.start, accepting, edges, checkpoint)
    compiled, python = both(lambda: char_dfa.minimize_raw(case.start, accepting, edges))
    assert compiled == python


def test_the_state_budget_trips_at_the_same_max_states_on_both_paths() -> None:
    """Per pattern, the smallest max_states that compiles it is the same, and every
    smaller one raises the same UnsupportedSchemaError (message included)."""
    for pattern in [
        "(a|b)*a(a|b){4}",
        "[a-z]+@[a-z]+\\.com",
        "^(\\d{3}-){2}\\d{4}$",
        "(ab|a)*c{2,5}",
    ]:
        for max_states in range(1, 80):
            compiled, python = both(
                lambda m=max_states, p=pattern: compile_pattern(p, max_states=m)
            )
            assert compiled == python, (pattern, max_states)
            if compiled[0] != "UnsupportedSchemaError":
                break
        else:
            pytest.fail(f"{pattern} never compiled")
        assert max_states > 2  # (each was over budget first)


def test_the_position_budget_of_the_subset_construction() -> None:
    """``most`` bounds the positions in all subset states together: {0} then {1, 2}
    is 3 positions; ``max_states`` the states: 2."""
    cs: list[Any] = [(), ((97, 98),), ((97, 98),)]
    follow: list[Any] = [{1, 2}, {1, 2}, set()]

    def run(max_states: int, most: int) -> Any:
        return KERNELS.glushkov_determinise(cs, follow, {2}, -1, max_states, most, checkpoint)

    assert run(10, 2) is None
    assert run(1, 100) is None
    assert run(2, 3) == ((False, True), (((97, 98, 1),), ((97, 98, 1),)))


def test_a_long_raw_automaton_calls_the_checkpoint_as_it_goes() -> None:
    states = 3000
    edges = [[(97, 97, (s + 1) % states), (98, 98, (s * 7 + 3) % states)] for s in range(states)]
    rng = random.Random(7)
    accepting = [rng.random() < 0.3 for _ in range(states)]
    calls = 0

    def count() -> None:
        nonlocal calls
        calls += 1

    accepted, _ = KERNELS.minimize_raw(0, accepting, edges, count)
    assert len(accepted) > 2000  # (as good as minimal already)
    assert calls >= len(accepted) // 64

    def stop() -> None:
        if calls > 5:
            raise BudgetExceededError("compile time (seconds)", 0.5)
        count()

    calls = 0
    with pytest.raises(BudgetExceededError):
        KERNELS.minimize_raw(0, accepting, edges, stop)


def positions(k: int) -> tuple[list[Any], list[Any], set[int]]:
    """The Glushkov positions of ``(a|b)*a(a|b){k}`` (2**(k+1) subset states)."""
    cs: list[Any] = [(), ((97, 97),), ((98, 98),), ((97, 97),)] + [((97, 98),)] * k
    loop = {1, 2, 3}
    follow: list[Any] = [loop, loop, loop, {4}] + [{p + 1} for p in range(4, 3 + k)] + [set()]
    return cs, follow, {3 + k}


def test_the_subset_construction_calls_the_checkpoint_every_16_states() -> None:
    cs, follow, last = positions(9)
    calls = 0

    def count() -> None:
        nonlocal calls
        calls += 1

    accepting, _ = KERNELS.glushkov_determinise(cs, follow, last, -1, 5000, 10**6, count)
    assert len(accepting) == 2**10
    assert calls >= 2**10 // 16


@pytest.mark.parametrize("compiled", [True, False])
def test_a_past_deadline_stops_the_subset_construction(compiled: bool) -> None:
    with running(KERNELS if compiled else None), deadline(0.0), pytest.raises(BudgetExceededError):
        compile_pattern("(a|b)*a(a|b){9}", max_states=5000)


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_a_hostile_pattern_stops_at_its_deadline_on_the_compiled_path() -> None:
    started = time.monotonic()
    with running(KERNELS), deadline(0.3), pytest.raises(BudgetExceededError):
        compile_pattern("(a|b)*a(a|b){24}", max_states=10**8)
    assert time.monotonic() - started < 5


def test_the_same_budget_error_from_a_schema_on_both_paths() -> None:
    schema = {"type": "string", "pattern": "^(a|b)*a(a|b){14}$"}
    compiled, python = both(lambda: compile_pattern(schema["pattern"]))
    assert compiled == python
    assert compiled[0] == UnsupportedSchemaError.__name__
    assert "max_states=2000" in compiled[1]


def test_malformed_calls_are_refused() -> None:
    wrong = []
    for label, call in hostile_calls(KERNELS):
        try:
            call()
        except (ValueError, TypeError, OverflowError):
            continue
        wrong.append(label)
    assert wrong == []
