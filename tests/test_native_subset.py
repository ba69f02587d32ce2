"""The compiled subset construction (``jsonmode._native.determinise``, csrc/subset.c)
against its pure-Python reference (``network._determinise_py``), on real inputs: every
NFA that compiling the GBNF grammars of bench/grammars.py and of the grammar corpus
(tests/test_grammar_decoding.py) determinises, and the MaskBench sample's schemas (both
paths build identical networks). Equal means the same rows, calls, acceptance and NFA
sets with the states numbered alike, the same ``BudgetExceededError`` at every budget,
and the deadline's checkpoint called at the same states. Random NFAs and malformed
calls: tests/support/native_fuzz.py (``PAIRS``) and native_hostile.py, run by
tests/test_native_kernels.py.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import test_grammar_decoding as corpus
from support.native_digest import maskbench

from jsonmode import compile_grammar, compile_schema, native
from jsonmode.budget import TIME_BUDGET, deadline
from jsonmode.decoding.automata import network
from jsonmode.decoding.compiled import CompiledSchema
from jsonmode.decoding.grammars import compiled as grammar_compiled
from jsonmode.decoding.grammars import gbnf
from jsonmode.decoding.ir import Alt, Lit, Rep, Seq
from jsonmode.errors import BudgetExceededError, JsonModeError
from jsonmode.lru import Lru

KERNELS: ModuleType = importlib.import_module("jsonmode._native")
BENCH = Path(__file__).resolve().parents[1] / "bench"

Recorded = tuple[Any, int, int, int]  # (nfa, start, final, budget)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Empties the compile caches (restored after the test), so a compile runs the
    subset construction again; returns the function that empties them."""

    def empty() -> None:
        for name, size in (("_TERMINALS", 64 << 20), ("_STRUCTURES", 32 << 20)):
            monkeypatch.setattr(network, name, Lru(size))
        monkeypatch.setattr(network, "_FRAGMENTS", Lru(8 << 20))
        monkeypatch.setattr(grammar_compiled, "_cache", {})
        monkeypatch.setattr(sys.modules["jsonmode.decoding.compiled"], "_cache", {})

    empty()
    return empty


def recording(monkeypatch: pytest.MonkeyPatch) -> list[Recorded]:
    """Every NFA ``network._determinise`` is given from now on (the pure-Python path)."""
    seen: list[Recorded] = []
    reference = network._determinise

    def record(name: str, nfa: Any, start: int, final: int, budget: int) -> Any:
        seen.append((nfa, start, final, budget))
        return reference(name, nfa, start, final, budget)

    monkeypatch.setattr(network, "_determinise", record)
    return seen


def outcome(run: Callable[[], Any], checkpoints: list[int]) -> Any:
    try:
        (edges, calls, accepting), sets = run()
    except BudgetExceededError as exc:
        return ("budget", exc.budget, exc.limit, str(exc), len(checkpoints))
    return edges, calls, accepting, sets, len(checkpoints)


def python_form(case: Recorded, budget: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    nfa, start, final, _ = case
    calls: list[int] = []
    monkeypatch.setattr(network, "checkpoint", lambda: calls.append(1))
    try:
        with native.use(False):
            return outcome(lambda: network._determinise_py("r", nfa, start, final, budget), calls)
    finally:
        monkeypatch.undo()


def compiled_form(case: Recorded, budget: int) -> Any:
    nfa, start, final, _ = case
    calls: list[int] = []
    args = (nfa.eps, nfa.edges, nfa.calls, nfa.sorted_rows, start, final, budget)

    def run() -> Any:
        edges, rows, accepting, sets = KERNELS.determinise(
            *args, lambda: calls.append(1), BudgetExceededError
        )
        return (edges, rows, accepting), sets

    return outcome(run, calls)


def grammar_texts() -> Iterator[tuple[str, str]]:
    sys.path.insert(0, str(BENCH))
    try:
        bench = importlib.import_module("grammars")
    finally:
        sys.path.remove(str(BENCH))
    for name, spec in bench.GRAMMARS.items():
        if spec.gbnf:
            yield f"bench/{name}", spec.gbnf


def test_every_nfa_of_the_bench_and_corpus_grammars_determinises_alike(
    fresh: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = recording(monkeypatch)
    texts = [text for _, text in grammar_texts()]
    with native.use(False):  # (the compiled path builds its NFAs in C: r5nfa_determinise)
        for text in texts:
            compile_grammar(text)
        for case in corpus.CASES:  # (regex, choice and built-ins too: all build rules)
            case.build(None)
    monkeypatch.undo()
    for text in texts:  # (and each rule as written, before inlining)
        for expr in gbnf.parse(text).rules.values():
            nfa = network._NFA()
            start, final = nfa.state(), nfa.state()
            nfa.fragment(expr, start, final, 20_000)
            seen.append((nfa, start, final, 20_000))
    assert len(seen) > 50, len(seen)
    sizes = []
    for recorded in seen:
        expected = python_form(recorded, recorded[3], monkeypatch)
        assert compiled_form(recorded, recorded[3]) == expected
        size = len(expected[0])
        sizes.append(size)
        # The budget runs out at the same new state, after the same checkpoints.
        for budget in sorted({0, 1, size // 2, size - 1, size}):
            assert compiled_form(recorded, budget) == python_form(recorded, budget, monkeypatch)
    assert max(sizes) > 1000  # (chess: one rule of thousands of states, past 16 checkpoints)


def networks_equal(one: Any, two: Any) -> None:
    assert (one.root, one.names) == (two.root, two.names)
    assert len(one.rules) == len(two.rules)
    for a, b in zip(one.rules, two.rules, strict=True):
        assert (a.name, a.calls, a.lengths, a.keys) == (b.name, b.calls, b.lengths, b.keys)
        assert np.array_equal(a.trans, b.trans)
        assert np.array_equal(a.accepting, b.accepting)


def test_maskbench_schemas_build_identical_networks_on_both_paths(
    fresh: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = []
    kernel = KERNELS.r5nfa_determinise  # (which determinises through subset.c)
    monkeypatch.setattr(KERNELS, "r5nfa_determinise", lambda *a: ran.append(1) or kernel(*a))
    built = 0
    for name, schema, _ in maskbench(48):
        networks = []
        for kernels in (None, KERNELS):  # (whichever path this process runs otherwise)
            fresh()
            monkeypatch.setattr(native, "KERNELS", kernels)
            try:
                result = compile_schema(schema)
            except JsonModeError as exc:
                networks.append(type(exc).__name__)
                continue
            assert isinstance(result, CompiledSchema)
            networks.append(result.network)
        if isinstance(networks[0], str):
            assert networks[0] == networks[1], name
            continue
        networks_equal(*networks)
        built += 1
    assert built >= 40, built
    assert len(ran) > 100, len(ran)


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_the_compiled_path_keeps_the_compile_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """``(a|b)* a (a|b){17}``: a small NFA whose DFA has 2**18 states; under a budget
    that allows them, the 20 ms deadline stops the kernel (its checkpoint raises)."""
    ab = Alt((Lit(b"a"), Lit(b"b")))
    expr = Seq((Rep(ab, 0, None), Lit(b"a"), Rep(ab, 17, 17)))
    monkeypatch.setattr(native, "KERNELS", KERNELS)
    started = time.perf_counter()
    with pytest.raises(BudgetExceededError) as caught, deadline(0.02):
        network._determinise_expr("r", expr, 10**7)
    assert time.perf_counter() - started < 5
    assert caught.value.budget == TIME_BUDGET


def test_a_raising_checkpoint_stops_both_paths_at_the_same_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nfa = network._NFA()
    start, final = nfa.state(), nfa.state()
    ab = Alt((Lit(b"a"), Lit(b"b")))
    nfa.fragment(Seq((Rep(ab, 0, None), Lit(b"a"), Rep(ab, 6, 6))), start, final, 10**6)

    class Stop(Exception):
        pass

    def stopping_at(limit: int, calls: list[int]) -> Callable[[], None]:
        def checkpoint() -> None:
            calls.append(1)
            if len(calls) == limit:
                raise Stop(len(calls))

        return checkpoint

    for limit in (1, 2, 5):
        py_calls: list[int] = []
        monkeypatch.setattr(network, "checkpoint", stopping_at(limit, py_calls))
        with native.use(False), pytest.raises(Stop):
            network._determinise_py("r", nfa, start, final, 10**6)
        monkeypatch.undo()
        c_calls: list[int] = []
        with pytest.raises(Stop):
            KERNELS.determinise(
                nfa.eps, nfa.edges, nfa.calls, nfa.sorted_rows, start, final, 10**6,
                stopping_at(limit, c_calls), BudgetExceededError,
            )  # fmt: skip
        assert len(c_calls) == len(py_calls) == limit
