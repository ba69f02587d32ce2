"""The compile path's kernels (csrc/r3comp_objects.c): ``r3comp_object_build``
(objects._Builder.build, an object rule's automaton written out directly) and
``r3comp_fill`` (finish.finish_rule's table) against their pure-Python forms: equal
answers on MaskBench schemas and random cases, the same budget errors and deadline
checks, and malformed calls refused."""

from __future__ import annotations

import functools
import random
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from support.native_fuzz import PAIRS, differ
from support.native_hostile import REFUSALS
from support.native_r3comp import hostile_r3comp_calls, random_object

from jsonmode import native
from jsonmode.budget import deadline
from jsonmode.decoding.automata import network, objects
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.ir import Lit, Members, Seq
from jsonmode.errors import BudgetExceededError, JsonModeError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from decoder_sample import load_sample

KERNELS = native.KERNELS
pytestmark = pytest.mark.skipif(KERNELS is None, reason="the compiled core is not built")


def _network(schema: object, compiled: bool) -> list[tuple[object, ...]]:
    """Every rule of the schema's network: name, table, calls, acceptance (or the error)."""
    network._STRUCTURES.clear()
    network._TERMINALS.clear()
    network._FRAGMENTS.clear()
    with native.use(compiled):
        try:
            built = compile_schema(schema).network
        except JsonModeError as exc:
            return [(type(exc).__name__, str(exc))]
    rules = []
    for rule in built.rules:
        if rule is None:
            rules.append(None)
            continue
        rules.append((rule.name, rule.trans.tobytes(), rule.calls, rule.accepting.tobytes()))
    return rules


def test_networks_of_maskbench_schemas_are_equal_on_both_paths() -> None:
    """Every rule table of 40 MaskBench schemas' networks, built with the kernels and in
    pure Python (process caches cleared between: each path builds its own)."""
    from jsonmode.decoding import compiled as compiled_module

    compared = 0
    for case in load_sample(40, 20250301):
        compiled_module._cache.clear()
        with_kernels = _network(case.schema, True)
        compiled_module._cache.clear()
        assert with_kernels == _network(case.schema, False), case.schema
        compared += len(with_kernels)
    assert compared > 300


def test_object_rules_of_maskbench_schemas_are_built_alike() -> None:
    """Each object rule of the MaskBench sample: the kernel's automaton is build_py's,
    state for state (rows, calls in order, acceptance)."""
    fragment = functools.partial(network._fragment, max_states=20_000)
    rules = 0
    for case in load_sample(60, 20250301):
        try:
            grammar = compile_schema(case.schema).grammar
        except JsonModeError:
            continue
        for expr in grammar.rules.values():
            body = expr.items[1] if isinstance(expr, Seq) and len(expr.items) == 3 else None
            if not isinstance(body, Members):
                continue
            answers = []
            for compiled in (True, False):
                with native.use(compiled):
                    raw = objects.object_rule(expr, fragment, 20_000)
                calls = None if raw is None else [list(row.items()) for row in raw[1]]
                answers.append(None if raw is None else (raw[0], calls, raw[2]))
            assert answers[0] == answers[1], expr
            rules += answers[0] is not None
    assert rules > 80


@pytest.mark.parametrize("name", ["r3comp_fill", "r3comp_object_build"])
def test_random_cases_agree(name: str) -> None:
    """Seeded random cases (objects whose keys share prefixes or clash, tiny budgets;
    tables with dead states): equal answers, checkpoints called alike."""
    pair = next(pair for pair in PAIRS if pair.name == name)
    rng = random.Random(4343)
    wrong = [d for _ in range(600) if (d := differ(pair, KERNELS, rng)) is not None]
    assert wrong == []


def test_malformed_calls_are_refused() -> None:
    for label, call in hostile_r3comp_calls(KERNELS):
        with pytest.raises(REFUSALS):
            call()
        assert label


def _wide_object(count: int) -> Seq:
    members = tuple((Seq((Lit(b'"k%d":' % i), Lit(b"1"))), False) for i in range(count))
    return Seq((Lit(b"{"), Members(members, None, Lit(b",")), Lit(b"}")))


def test_the_state_budget_fires_at_the_same_state() -> None:
    fragment = functools.partial(network._fragment, max_states=20_000)
    expr = _wide_object(40)
    raw = objects.object_rule(expr, fragment, 20_000)
    assert raw is not None
    states = len(raw[0])
    for budget in (5, states // 2, states - 1):
        errors = []
        for compiled in (True, False):
            with native.use(compiled), pytest.raises(BudgetExceededError) as caught:
                objects.object_rule(expr, fragment, budget)
            errors.append(str(caught.value))
        assert errors[0] == errors[1]
    for compiled in (True, False):
        with native.use(compiled):
            assert objects.object_rule(expr, fragment, states) is not None


def test_the_deadline_stops_a_large_object_on_the_compiled_path() -> None:
    """A large object rule checks the deadline as it goes (every 64 states) on the
    compiled path too: the same checkpoints, and an expired deadline stops it."""
    fragment = functools.partial(network._fragment, max_states=10**6)
    expr = _wide_object(300)
    counts = []
    for compiled in (True, False):
        checkpoint = mock.Mock(return_value=None)
        with native.use(compiled), mock.patch.object(objects, "checkpoint", checkpoint):
            objects.object_rule(expr, fragment, 10**6)
        counts.append(checkpoint.call_count)
    assert counts[0] == counts[1] > 10
    with native.use(True), deadline(1e-9), pytest.raises(BudgetExceededError):
        objects.object_rule(expr, fragment, 10**6)


def test_the_table_kernel_writes_the_reference_table() -> None:
    edges = [[(0, 255, 1)], [(97, 97, 0), (98, 100, 1)]]
    trans = np.empty((2, 256), dtype=np.int32)
    KERNELS.r3comp_fill(trans, edges, None)
    assert (trans[0] == 1).all()
    assert trans[1, 97] == 0
    assert (trans[1, 98:101] == 1).all()
    assert trans[1, 101] == -1
    kept = np.empty((1, 256), dtype=np.int32)
    KERNELS.r3comp_fill(kept, edges, [-1, 0])
    assert kept[0, 97] == -1
    assert kept[0, 98] == 0


def test_random_objects_generator_covers_all_outcomes() -> None:
    """(The fuzz's generator gives built, declined and over-budget objects alike.)"""
    rng = random.Random(1)
    fragment = functools.partial(network._fragment, max_states=20_000)
    seen = set()
    for _ in range(300):
        try:
            raw = objects.object_rule(random_object(rng), fragment, rng.choice([8, 20_000]))
            seen.add("declined" if raw is None else "built")
        except BudgetExceededError:
            seen.add("budget")
    assert seen == {"built", "declined", "budget"}
