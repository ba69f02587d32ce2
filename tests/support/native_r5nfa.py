"""Seeded cases for ``csrc/r5nfa_build.c`` (``r5nfa_determinise``: a rule's NFA built
from its expression in C, then determinised) against its pure-Python form
(``network._NFA.fragment`` then ``network._determinise``): random expression trees
(nested Seq/Alt/Rep/Members, any order too, over literals, calls and lexemes) under
budgets that run out in either half, and malformed calls. Used by
tests/support/native_fuzz.py's PAIRS (so the sanitizer build runs them too),
tests/support/native_hostile.py and tests/test_native_r5nfa.py.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np

from jsonmode import native
from jsonmode.decoding.automata import network
from jsonmode.decoding.ir import Alt, Call, Expr, Lex, Lit, Members, Rep, Seq
from jsonmode.errors import BudgetExceededError
from jsonmode.regex import ByteDFA


def random_lexeme(rng: random.Random) -> Lex:
    """A lexeme over a random little automaton: targets on a few bytes (runs of one
    target, runs broken by other targets, dead bytes), some states accepting, a start
    anywhere; its table in C order or not (a column-major copy: strides). Labelled by
    content (lexemes compare by label, and network._lex_rows caches by it)."""
    count = rng.randint(1, 5)
    trans = np.full((count, 256), -1, dtype=np.int32)
    for state in range(count):
        for _ in range(rng.choice((0, 1, 2, 4))):
            lo = rng.choice((0, 44, 97, 98, 200))
            hi = min(255, lo + rng.choice((0, 0, 1, 3, 60)))
            trans[state, lo : hi + 1] = rng.randrange(count)
    accepting = np.array([rng.random() < 0.5 for _ in range(count)], dtype=np.bool_)
    start = rng.randrange(count)
    digest = hashlib.sha1(trans.tobytes() + accepting.tobytes() + bytes([start])).hexdigest()
    if rng.random() < 0.2:
        trans = np.asfortranarray(trans)
    return Lex(f"r5nfa-{digest[:16]}", ByteDFA(start, accepting, trans))


def random_expr(rng: random.Random, depth: int = 0) -> Expr:
    """An expression tree a few levels deep, every node kind at every level."""
    leaf = depth >= 4 or rng.random() < 0.35
    kind = rng.choice(("lit", "lit", "call", "lex") if leaf else ("seq", "alt", "rep", "members"))
    if kind == "lit":
        return Lit(bytes(rng.choice(b"ab,") for _ in range(rng.choice((0, 1, 1, 2, 3)))))
    if kind == "call":
        return Call(rng.choice("xyz"))
    if kind == "lex":
        return random_lexeme(rng)
    if kind == "seq":
        return Seq(tuple(random_expr(rng, depth + 1) for _ in range(rng.randint(0, 3))))
    if kind == "alt":
        return Alt(tuple(random_expr(rng, depth + 1) for _ in range(rng.randint(0, 3))))
    if kind == "rep":
        low = rng.choice((0, 0, 1, 2, 3))
        high = rng.choice((None, low, low + 1, low + 3, low - 1))
        return Rep(random_expr(rng, depth + 1), low, high)
    members = tuple(
        (random_expr(rng, depth + 1), rng.random() < 0.5) for _ in range(rng.randint(0, 4))
    )
    extra = random_expr(rng, depth + 1) if rng.random() < 0.4 else None
    sep = rng.choice((Lit(b","), Lit(b""), random_expr(rng, depth + 1)))
    return Members(members, extra, sep, rng.random() < 0.4)


@dataclass
class ExprCase:
    """An expression and a budget (``model.calls`` records the checkpoints)."""

    expr: Expr
    budget: int
    model: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(calls=[]))


def make_expr(rng: random.Random) -> ExprCase:
    budget = rng.choice((rng.randint(0, 12), rng.randint(0, 120), 3000))
    return ExprCase(random_expr(rng), budget)


def _outcome(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except BudgetExceededError as exc:
        return ("budget", exc.budget, exc.limit, str(exc))


def determinise_nfa_python(expr: Expr, budget: int, checkpoint: Callable[[], None]) -> Any:
    """The Python form: ``(edges, calls, accepting, sets, alone)``, the NFA built by
    ``_NFA.fragment`` and determinised by ``_determinise`` (the pure-Python path),
    ``checkpoint`` standing for the deadline's."""

    def run() -> Any:
        nfa = network._NFA()
        start, final = nfa.state(), nfa.state()
        nfa.fragment(expr, start, final, budget)
        (edges, calls, accepting), sets = network._determinise("r", nfa, start, final, budget)
        alone = tuple(len(members) == 1 and final in members for members in sets)
        return edges, calls, accepting, sets, alone

    with native.use(False), mock.patch.object(network, "checkpoint", checkpoint):
        return _outcome(run)


def determinise_nfa_compiled(
    kernels: ModuleType, expr: Expr, budget: int, checkpoint: Callable[[], None]
) -> Any:
    """The compiled form, as :func:`determinise_nfa_python` answers."""

    def run() -> Any:
        out = kernels.r5nfa_determinise(
            expr, network._EXPR_CLASSES, budget, checkpoint, BudgetExceededError, True
        )
        return tuple(out)

    return _outcome(run)


def r5nfa_python(case: ExprCase) -> Any:
    return determinise_nfa_python(case.expr, case.budget, lambda: case.model.calls.append("c"))


def r5nfa_compiled(kernels: ModuleType, case: ExprCase) -> Any:
    return determinise_nfa_compiled(
        kernels, case.expr, case.budget, lambda: case.model.calls.append("c")
    )


def _lexeme(trans: Any, accepting: Any = None, start: Any = 0) -> Lex:
    """A lexeme of any (malformed) automaton, its label unique."""
    if accepting is None:
        accepting = np.ones(len(trans) if hasattr(trans, "__len__") else 1, dtype=np.bool_)
    dfa = ByteDFA.__new__(ByteDFA)
    for name, value in (("start", start), ("accepting", accepting), ("trans", trans)):
        object.__setattr__(dfa, name, value)
    return Lex(f"r5nfa-hostile-{id(dfa)}", dfa)


def hostile_r5nfa_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to r5nfa_determinise (each must raise)."""
    kernel = kernels.r5nfa_determinise
    classes = network._EXPR_CLASSES

    def tick() -> None:
        return None

    def stop() -> None:
        raise ValueError("past the deadline")

    def run(
        expr: Any, budget: Any = 100, kinds: Any = classes, check: Any = tick
    ) -> Callable[[], Any]:
        return lambda: kernel(expr, kinds, budget, check, ValueError, True)

    good = Lit(b"ab")
    table = np.full((2, 256), -1, dtype=np.int32)
    far = table.copy()
    far[1, 7] = 2

    def odd(cls: type, **values: Any) -> Any:
        """A node of ``cls`` with these attributes, whatever their types."""
        node = cls.__new__(cls)
        for name, value in values.items():
            object.__setattr__(node, name, value)
        return node

    members_of = odd(Members, members=[(good, True)], extra=None, sep=good, any_order=False)
    lattice = Members(((good, True),) * 20, None, good, True)
    past_int64 = Members(((good, True),) * 45, None, good, True)

    def rewriting(run: Callable[..., Callable[[], Any]]) -> Callable[[], Any]:
        """A checkpoint that drops the tuples the kernel is reading (past 1 024 states)."""
        inner = Alt(tuple([Lit(b"b"), Seq(tuple([Lit(b"c"), Lit(b"d")]))]))
        outer = Seq(tuple([Lit(b"a" * 1100), inner, Rep(Lit(b"e"), 1, 2)]))

        def rewrite() -> None:
            object.__setattr__(outer, "items", ())
            object.__setattr__(inner, "options", None)

        return run(outer, budget=5000, check=rewrite)

    class Falsy:
        def __bool__(self) -> bool:
            raise ValueError("no truth")

    return [
        ("r5nfa classes a list", run(good, kinds=list(classes))),
        ("r5nfa six classes", run(good, kinds=classes[:6])),
        ("r5nfa a class not a class", run(good, kinds=(*classes[:6], 7))),
        ("r5nfa a float budget", run(good, budget=1.5)),
        ("r5nfa a huge budget", run(good, budget=1 << 70)),
        ("r5nfa checkpoint not callable", run(good, check=7)),
        ("r5nfa error not an exception", lambda: kernel(good, classes, 5, tick, int, True)),
        ("r5nfa checkpoint raising", run(good, check=stop)),
        ("r5nfa not an expression", run(7)),
        ("r5nfa a subclass of Lit", run(type("MyLit", (Lit,), {})(b"a"))),
        ("r5nfa a str literal", run(Lit("ab"))),  # type: ignore[arg-type]
        ("r5nfa a seq of a list", run(Seq([good]))),  # type: ignore[arg-type]
        ("r5nfa a seq of an int", run(Seq((good, 3)))),  # type: ignore[arg-type]
        ("r5nfa an alt of None", run(Alt(None))),  # type: ignore[arg-type]
        ("r5nfa a call of an int", run(Call(5))),  # type: ignore[arg-type]
        ("r5nfa a rep of a float", run(Rep(good, 1.5, None))),  # type: ignore[arg-type]
        ("r5nfa a rep high a str", run(Rep(good, 0, "2"))),  # type: ignore[arg-type]
        ("r5nfa a rep without its item", run(odd(Rep, low=0, high=None))),
        ("r5nfa members a list", run(members_of)),
        ("r5nfa a member of three", run(Members(((good, True, 1),), None, good))),  # type: ignore[arg-type]
        ("r5nfa a member not a pair", run(Members((good,), None, good, True))),  # type: ignore[arg-type]
        ("r5nfa a member's flag raising", run(Members(((good, Falsy()),), None, good))),  # type: ignore[arg-type]
        ("r5nfa a lexeme without an automaton", run(odd(Lex, label="x", dfa=None))),
        ("r5nfa a lexeme table of lists", run(_lexeme([[-1] * 256]))),
        ("r5nfa a lexeme table of 255 columns", run(_lexeme(np.full((2, 255), -1, np.int32)))),
        ("r5nfa a lexeme table of floats", run(_lexeme(np.zeros((2, 256))))),
        ("r5nfa a lexeme table 1-D", run(_lexeme(np.full(256, -1, np.int32)))),
        ("r5nfa a lexeme target past its table", run(_lexeme(far))),
        ("r5nfa a lexeme start past its table", run(_lexeme(table, start=2))),
        ("r5nfa a lexeme start negative", run(_lexeme(table, start=-1))),
        ("r5nfa a lexeme start a str", run(_lexeme(table, start="0"))),
        ("r5nfa a lexeme's flags too short", run(_lexeme(table, np.ones(1, np.bool_)))),
        ("r5nfa a lexeme's flags int64", run(_lexeme(table, np.ones(2, np.int64)))),
        ("r5nfa a budget error", run(Rep(good, 5, 5), budget=1)),
        ("r5nfa an any-order lattice past the budget", run(lattice)),
        ("r5nfa an any-order lattice past 2**40", run(past_int64, budget=1 << 60)),
        ("r5nfa a checkpoint that rewrites the expression", rewriting(run)),
    ]  # fmt: skip
