"""The compiled NFA builder (``jsonmode._native.r5nfa_determinise``, csrc/r5nfa_build.c:
a rule's NFA built from its expression in C, then determinised by subset.c) against
its pure-Python form (``network._NFA.fragment`` then ``network._determinise``), on
real inputs: every expression that compiling the MaskBench sample's schemas, the
grammars of bench/grammars.py and the grammar corpus (tests/test_grammar_decoding.py)
determinises, and those grammars' rules as written. Equal means the same rows, calls,
acceptance, NFA sets (so the NFA's states numbered alike) and "final alone" flags, the
same ``BudgetExceededError`` at every budget (in the NFA's half or the DFA's), and the
deadline's checkpoint called as often. Random expression trees (Hypothesis) and
malformed calls: tests/support/native_r5nfa.py (also in native_fuzz.PAIRS and
native_hostile, so tests/test_native_kernels.py and the sanitizer run take them).
"""

from __future__ import annotations

import contextlib
import importlib
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import test_grammar_decoding as corpus
from hypothesis import given, settings
from hypothesis import strategies as st
from support.native_fuzz import PAIRS, differ
from support.native_hostile import unrefused
from support.native_r5nfa import (
    determinise_nfa_compiled,
    determinise_nfa_python,
    hostile_r5nfa_calls,
)

from jsonmode import compile_grammar, compile_schema, native
from jsonmode.decoding.automata import network
from jsonmode.decoding.grammars import compiled as grammar_compiled
from jsonmode.decoding.grammars import gbnf
from jsonmode.decoding.ir import Alt, Expr, Lit, Members, Rep, Seq, nodes
from jsonmode.errors import BudgetExceededError, JsonModeError
from jsonmode.lru import Lru

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
from decoder_sample import load_sample  # noqa: E402

KERNELS: ModuleType | None = native.KERNELS
pytestmark = pytest.mark.skipif(KERNELS is None, reason="the compiled core is not built")
PAIR = next(pair for pair in PAIRS if pair.name == "r5nfa_determinise")


def _kernels() -> ModuleType:
    assert KERNELS is not None
    return KERNELS


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compile caches emptied (restored after the test): every rule is built."""
    for name, size in (("_TERMINALS", 64 << 20), ("_STRUCTURES", 32 << 20)):
        monkeypatch.setattr(network, name, Lru(size))
    monkeypatch.setattr(network, "_FRAGMENTS", Lru(8 << 20))
    monkeypatch.setattr(grammar_compiled, "_cache", {})
    monkeypatch.setattr(sys.modules["jsonmode.decoding.compiled"], "_cache", {})


def both(expr: Expr, budget: int) -> tuple[Any, Any]:
    """(compiled, python): each answer with its count of checkpoints."""
    counts: list[list[int]] = [[], []]
    got = determinise_nfa_compiled(_kernels(), expr, budget, lambda: counts[0].append(1))
    expected = determinise_nfa_python(expr, budget, lambda: counts[1].append(1))
    return (got, len(counts[0])), (expected, len(counts[1]))


def grammar_texts() -> Iterator[str]:
    bench = importlib.import_module("grammars")
    for spec in bench.GRAMMARS.values():
        if spec.gbnf:
            yield spec.gbnf


def corpus_expressions(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[Expr, int], None]:
    """Every (expression, budget) ``_determinise_nfa`` is given while compiling the
    corpora, and the bench grammars' rules as written (in order, once each)."""
    seen: dict[tuple[Expr, int], None] = {}
    reference = network._determinise_nfa

    def record(name: str, expr: Expr, max_states: int) -> Any:
        seen[expr, max_states] = None
        return reference(name, expr, max_states)

    monkeypatch.setattr(network, "_determinise_nfa", record)
    texts = list(grammar_texts())
    for text in texts:
        compile_grammar(text)
    for case in corpus.CASES:  # (regex, choice and built-ins too: all of them build rules)
        case.build(None)
    for sample in load_sample(100, 20250301):
        with contextlib.suppress(JsonModeError):
            compile_schema(sample.schema)
    monkeypatch.undo()
    for text in texts:
        for expr in gbnf.parse(text).rules.values():
            seen[expr, 20_000] = None
    return seen


def test_every_expression_of_the_corpora_determinises_alike(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = corpus_expressions(monkeypatch)
    assert len(seen) > 300, len(seen)
    kinds: set[str] = set()
    biggest = 0
    for expr, budget in seen:
        got, expected = both(expr, budget)
        assert got == expected, expr
        answer, _ = expected
        assert answer[0] != "budget", expr
        size = len(answer[0])
        biggest = max(biggest, size)
        kinds.update(type(node).__name__ for node in nodes(expr))
        # The budget runs out at the same point (the NFA's half: 4 states a budget
        # unit; the DFA's: at the same new state), after the same checkpoints.
        nfa = network._NFA()
        nfa.fragment(expr, nfa.state(), nfa.state(), budget)
        quarter = len(nfa.eps) // 4
        for small in sorted({0, 1, size // 2, size - 1, quarter - 1, quarter, quarter + 1}):
            if 0 <= small < budget:
                got, expected = both(expr, small)
                assert got == expected, (expr, small)
    assert kinds >= {"Lit", "Lex", "Call", "Seq", "Alt", "Rep", "Members"}, kinds
    assert biggest > 1000  # (chess: thousands of states, past many checkpoints)


def test_the_network_takes_the_kernel_and_answers_as_the_python_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_determinise_nfa`` itself: the kernel where loaded, the same (raw, alone)."""
    ran: list[int] = []
    kernel = _kernels().r5nfa_determinise
    monkeypatch.setattr(_kernels(), "r5nfa_determinise", lambda *a: ran.append(1) or kernel(*a))
    ab = Alt((Lit(b"a"), Lit(b"b")))
    expr = Members(((Seq((Rep(ab, 1, 3), Lit(b":"))), True), (ab, False)), ab, Lit(b","), True)
    got = network._determinise_nfa("r", expr, 20_000)
    with native.use(False):
        expected = network._determinise_nfa("r", expr, 20_000)
    assert ran == [1]
    assert got == expected
    assert network._determinise_nfa("r", Lit(b"ab"), 20_000)[1] == (False, False, True)


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False))
def test_random_expressions_agree(rng: random.Random) -> None:
    assert differ(PAIR, _kernels(), rng) is None


def test_the_checkpoints_and_a_raising_one_stop_both_paths_alike() -> None:
    """Thousands of NFA states (a checkpoint each 1 024) and DFA states (each 16); a
    checkpoint that raises at its k-th call stops both paths there."""
    ab = Alt((Lit(b"a"), Lit(b"b")))
    expr = Seq((Lit(b"x" * 3000), Rep(ab, 0, None), Lit(b"a"), Rep(ab, 6, 6)))
    got, expected = both(expr, 10**6)
    assert got == expected
    assert expected[1] > 100  # (3 NFA checks and ~190 DFA ones)

    # 100 000 options of one language: an NFA state each, entered one by one, a
    # three-state DFA: ~100 checkpoints, all of them the NFA's (a kernel checking every
    # 1 000 states instead of every 1 024 makes 2 more).
    many = Alt((Lit(b"ab"),) * 100_000)
    got, expected = both(many, 10**6)
    assert got == expected
    assert len(expected[0][0]) == 3
    assert expected[1] == 98

    class Stop(Exception):
        pass

    for limit in (1, 2, 3, 5, 40):
        counts: list[list[int]] = [[], []]

        def stopping(calls: list[int], limit: int = limit) -> Callable[[], None]:
            def checkpoint() -> None:
                calls.append(1)
                if len(calls) == limit:
                    raise Stop

            return checkpoint

        with pytest.raises(Stop):
            determinise_nfa_compiled(_kernels(), expr, 10**6, stopping(counts[0]))
        with pytest.raises(Stop):
            determinise_nfa_python(expr, 10**6, stopping(counts[1]))
        assert len(counts[0]) == len(counts[1]) == limit


def test_deep_nesting_runs_on_the_heap() -> None:
    """200 000 nested nodes: the Python form runs out of recursion; the kernel walks
    them with a heap stack and answers as for the innermost node (and a budget error
    where the copies run past it)."""
    deep: Expr = Lit(b"a")
    for _ in range(200_000):
        deep = Alt((deep,))
    with pytest.raises(RecursionError):
        determinise_nfa_python(deep, 100, lambda: None)
    got = determinise_nfa_compiled(_kernels(), deep, 100, lambda: None)
    assert got == determinise_nfa_python(Lit(b"a"), 100, lambda: None)
    repeated: Expr = Lit(b"a")
    for _ in range(50_000):
        repeated = Rep(repeated, 2, 2)
    assert determinise_nfa_compiled(_kernels(), repeated, 1000, lambda: None) == (
        "budget", "states per rule", 1000,
        str(BudgetExceededError("states per rule", 1000)),
    )  # fmt: skip


def test_malformed_calls_are_refused() -> None:
    assert unrefused(hostile_r5nfa_calls(_kernels())) == []
