"""The parse stacks' numbering both ways (tests/test_native_stacks.py, and the seeded
kernel fuzz of tests/support/native_fuzz.py that tests/test_native_asan.py runs under
the sanitizers): a pure-Python :class:`~jsonmode.decoding.engine.boundary.Stacks` and
one kept by ``jsonmode._native.Stacks``, driven alike over a reference matcher
(:func:`drive`), and malformed calls to the C type (:func:`hostile_stacks_calls`).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np

from jsonmode.decoding.engine.boundary import Stacks
from jsonmode.decoding.grammars.compiled import compile_grammar
from jsonmode.decoding.reference import ReferenceMatcher
from jsonmode.errors import BudgetExceededError
from support.native_regex import running
from support.recursive_grammars import ALPHABETS, ARITHMETIC, NESTED


def stacks_pair(
    reference: ReferenceMatcher, kernels: ModuleType | None = None
) -> tuple[Stacks, Stacks]:
    """A pure-Python numbering and a compiled one (``kernels``: the built extension) of
    ``reference``'s stacks."""
    if kernels is None:
        import jsonmode._native as kernels  # (a missing build fails here, by design)
    with running(None):
        pure = Stacks(reference)
    with running(kernels):
        compiled = Stacks(reference)
    assert pure._core is None
    assert compiled._core is not None
    return pure, compiled


def drive(
    stacks: Stacks, reference: ReferenceMatcher, texts: list[bytes], explore: int
) -> list[Any]:
    """A log of what ``stacks`` answers: along each text (the reference matcher's
    states, byte by byte), each stack's context, frames, closure, readers, returns,
    read bytes and steps; then up to ``explore`` closures of the crossing states of
    the contexts numbered, in numbering order; last, a summary of every context (its
    frames, near flag, table and crossings) and the size."""
    log: list[Any] = []
    for text in texts:
        state = reference.initial()
        for byte in [-1, *text]:
            if byte >= 0:
                try:
                    state = reference.step(state, byte)
                except BudgetExceededError:  # (too many stacks: the matcher's bound)
                    break
            for stack in state:
                if not stack:
                    continue
                rule, at = stack[-1]
                context = stacks.context(stack[:-1], rule)
                reads = stacks.reads(context, at)
                log.append(
                    (context, stacks.stack(context, at) == stack, stacks.expand(context, at))
                )
                log.append((stacks.readers(context, at), stacks.returns(context), list(reads)))
                log.extend(stacks.step(context, at, b) for b in list(reads)[:3])
            if not state:
                break
    done, context = 0, 0
    while context < len(stacks.tables) and done < explore:
        crossing = stacks.crossings[context]
        for state in range(len(crossing)):
            if crossing[state] and done < explore:
                log.append(
                    (context, state, stacks.expand(context, state), stacks.readers(context, state))
                )
                done += 1
        log.append(stacks.returns(context))
        context += 1
    frames = [stacks.stack(number, 0) for number in range(len(stacks.tables))]
    log.append(
        {
            "frames": frames,
            "nears": list(stacks.near),
            "tables": [zlib.crc32(bytes(table)) for table in stacks.tables],
            "crossings": list(stacks.crossings),
            "size": stacks.size,
            "near": sum(stacks.near),
            "deepest": max((len(f) for f in frames), default=0),
        }
    )
    return log


# -- the seeded pair for tests/support/native_fuzz.py -------------------------------------


def make_stacks_case(rng: random.Random) -> SimpleNamespace:
    """A recursive grammar, a nesting bound (often small: near contexts), by levels or
    by frames, and random texts over the grammar's bytes."""
    grammar = rng.choice([ARITHMETIC, NESTED])
    alphabet = ALPHABETS[grammar]
    depth = rng.choice([1, 2, 3, 4, 6, 64])
    texts = [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 20))) for _ in range(3)]
    return SimpleNamespace(
        grammar=grammar,
        depth=depth,
        levels=rng.random() < 0.5,
        texts=texts,
        explore=rng.randint(0, 120),
        model=SimpleNamespace(calls=[]),
    )


def _reference(case: SimpleNamespace) -> ReferenceMatcher:
    compiled = compile_grammar(case.grammar, max_nesting_depth=case.depth)
    return ReferenceMatcher(compiled.network, max_depth=case.depth, levels=case.levels)


def stacks_python(case: SimpleNamespace) -> Any:
    reference = _reference(case)
    with running(None):
        return drive(Stacks(reference), reference, case.texts, case.explore)


def stacks_compiled(kernels: ModuleType, case: SimpleNamespace) -> Any:
    reference = _reference(case)
    with running(kernels):
        stacks = Stacks(reference)
    return drive(stacks, reference, case.texts, case.explore)


# -- a synthetic numbering, and malformed calls -------------------------------------------


def chain_parts(rules: int, **changes: Any) -> Callable[[int], tuple[Any, ...]]:
    """``rule_parts`` of a chain: rule k < ``rules`` calls rule k + 1 at its state 0 (to
    return to state 1, which reads ``a`` and accepts); the last rule reads ``a``. A
    closure of the first rule's state 0 holds every rule. ``changes`` replace parts by
    name (table, flags, reads, calls, accepting), for malformed ones."""

    def parts(rule: int) -> tuple[Any, ...]:
        if rule < 0 or rule > rules:
            raise ValueError(f"no rule {rule}")
        table = np.full(2 * 256, -1, dtype=np.int32)
        table[256 + 97] = 1
        calls: tuple[Any, ...] = (((rule + 1, 1),), ())
        if rule == rules:
            table[97] = 1
            calls = ((), ())
        made = {
            "table": memoryview(table),
            "flags": b"\x01\x01",
            "reads": {0: [97] if rule == rules else [], 1: [97]},
            "calls": calls,
            "accepting": b"\x00\x01",
        }
        made.update(changes)
        return tuple(made.values())

    return parts


def raw_stacks(kernels: ModuleType, rules: int = 3, **changes: Any) -> Any:
    """A ``jsonmode._native.Stacks`` over :func:`chain_parts` (arguments replaced by
    name in ``changes``; ``parts`` for the rule_parts changes)."""
    arguments: dict[str, Any] = {
        "rule_parts": chain_parts(rules, **changes.pop("parts", {})),
        "bounded": lambda rule, room: (memoryview(np.full(512, -1, dtype=np.int32)), {}),
        "roomy": lambda depth: depth <= 1000,
        "need": lambda rule: np.zeros(2, dtype=np.int64),
        "most_of": lambda rule: 0,
        "recursive": frozenset(),
        "levels": False,
        "max_depth": 1000,
        "safe": 10,
    }
    arguments.update(changes)
    return kernels.Stacks(**arguments)


def hostile_stacks_calls(
    kernels: ModuleType | None = None,
) -> list[tuple[str, Callable[[], Any], bool]]:
    """Malformed calls to ``jsonmode._native.Stacks``: (label, call, may it return).
    Each must raise one of native_hostile.REFUSALS (or return, where allowed), never
    crash or read out of bounds."""
    if kernels is None:
        import jsonmode._native as kernels
    k = kernels

    def first(stacks: Any) -> Any:
        return stacks.expand(stacks.context((), 0), 0)

    def reentering() -> Any:
        holder: list[Any] = []
        parts = chain_parts(3)

        def again(rule: int) -> Any:
            if holder and rule == 2:
                holder[0].expand(holder[0].context((), 3), 0)  # (numbers rule 3 meanwhile)
            return parts(rule)

        holder.append(raw_stacks(k, rule_parts=again))
        return first(holder[0])

    def lists_changed() -> Any:
        stacks = raw_stacks(k)
        stacks.context((), 0)
        stacks.tables.clear()
        return first(stacks)

    def walk_past(kind: str) -> Any:
        """A walk over the tables of a numbering of three contexts, its closures asked
        of one of a single context (a C Stacks handed as ``expand``)."""
        from support.native_fuzz import Rests, token_trie, trie_levels

        big, small = raw_stacks(k), raw_stacks(k)
        big.context(((0, 1), (1, 1)), 2)
        small.context((), 0)
        if kind == "finish":
            rests = Rests.of([b"aa"], [0])
            return k.finish(
                rests.byte, rests.kids, rests.ends, [(2, 1)], big.tables, big.crossings, small
            )
        trie = k.Trie(trie_levels(token_trie([b"aa", b"ab"])))
        return trie.walk_stacks(
            big.tables, big.crossings, lambda c, s: [97], small, [(0, 2, 1)], 100
        )

    def refuse(*args: Any) -> Any:
        raise ValueError("refused")

    def twice() -> Any:
        stacks = raw_stacks(k)
        return k.Stacks.__init__(
            stacks, chain_parts(3), refuse, refuse, refuse, refuse, (), False, 10, 1
        )

    def part(**parts: Any) -> Callable[[], Any]:  # (a malformed rule part)
        return lambda: first(raw_stacks(k, parts=parts))

    def deep(**changes: Any) -> Callable[[], Any]:  # (past depth 1: headroom asked)
        return lambda: first(raw_stacks(k, safe=0, roomy=lambda d: d < 2, **changes))

    def at_state(state: int) -> Callable[[], Any]:
        def call() -> Any:
            stacks = raw_stacks(k)
            return stacks.expand(stacks.context((), 0), state)

        return call

    i32, i64 = np.int32, np.int64
    wide = memoryview(np.full(2 * 256, -1, dtype=i64))
    calls: list[tuple[str, Callable[[], Any], bool]] = [
        ("no arguments", lambda: k.Stacks(), False),
        ("rule_parts not callable", lambda: raw_stacks(k, rule_parts=3), False),
        ("recursive not pairs", lambda: raw_stacks(k, recursive=[(1, 2, 3)]), False),
        ("recursive not ints", lambda: raw_stacks(k, recursive=[("a", 1)]), False),
        ("max_depth negative", lambda: raw_stacks(k, max_depth=-1), False),
        ("max_depth huge", lambda: raw_stacks(k, max_depth=1 << 62), False),
        ("not initialised", lambda: k.Stacks.__new__(k.Stacks).expand(0, 0), False),
        ("not initialised: lists", lambda: k.Stacks.__new__(k.Stacks).tables, False),
        ("not initialised: context", lambda: k.Stacks.__new__(k.Stacks).context((), 0), False),
        ("initialised twice", twice, False),
        ("expand past the contexts", lambda: raw_stacks(k).expand(5, 0), False),
        ("expand below -1", lambda: raw_stacks(k).expand(-2, 0), False),
        ("expand a state past the rule", at_state(2), False),
        ("expand a negative state", at_state(-1), False),
        ("expand a huge int", lambda: raw_stacks(k).expand(1 << 80, 0), False),
        ("call with keywords", lambda: raw_stacks(k)(context=0, state=0), False),
        ("readers past the contexts", lambda: raw_stacks(k).readers(3, 0), False),
        ("returns past the contexts", lambda: raw_stacks(k).returns(0), False),
        ("returns of a string", lambda: raw_stacks(k).returns("0"), False),
        ("stack past the contexts", lambda: raw_stacks(k).stack(9, 0), False),
        ("context of a list", lambda: raw_stacks(k).context([], 0), False),
        ("context of a bad frame", lambda: raw_stacks(k).context(((0,),), 1), False),
        ("context of a frame of strings", lambda: raw_stacks(k).context((("a", 1),), 1), False),
        ("context of a negative rule", lambda: raw_stacks(k).context((), -3), False),
        ("context of a rule rule_parts refuses", lambda: raw_stacks(k).context((), 99), False),
        ("context returning past the rule", lambda: raw_stacks(k).context(((0, 7),), 1), False),
        ("rule_parts not a tuple", lambda: first(raw_stacks(k, rule_parts=lambda r: [1])), False),
        ("a table of int64", part(table=wide), False),
        ("a table not a buffer", part(table=5), False),
        ("a table of 100 entries", part(table=memoryview(np.zeros(100, i32))), False),
        ("a table of no state", part(table=memoryview(np.zeros(0, i32))), False),
        ("flags too short", part(flags=b"\x01"), False),
        ("accepting a list", part(accepting=[0, 1]), False),
        ("calls too few", part(calls=((),)), False),
        ("a call not a pair", part(calls=((5,), ())), False),
        ("a state's calls a list", part(calls=([(1, 1)], ())), False),
        ("a call returning past the rule", part(calls=(((1, 9),), ())), False),
        ("a call to a string", part(calls=((("x", 1),), ())), False),
        ("a call to a negative rule", part(calls=(((-5, 1),), ())), False),
        ("roomy raising", lambda: first(raw_stacks(k, safe=0, roomy=refuse)), False),
        ("roomy not a bool", lambda: first(raw_stacks(k, safe=0, roomy=lambda d: [1] * d)), True),
        (
            "roomy ambiguous",
            lambda: first(raw_stacks(k, safe=0, roomy=lambda d: np.zeros(3))),
            False,
        ),
        ("need not a sequence", deep(need=lambda r: None), False),
        ("need too short", deep(need=lambda r: np.zeros(0, i64)), False),
        ("need of floats", deep(need=lambda r: np.zeros(2)), False),
        ("need of 2-D ints", deep(need=lambda r: np.zeros((1, 1), i64)), True),
        ("most_of negative", deep(most_of=lambda r: -4), False),
        ("most_of raising", deep(most_of=refuse), False),
        ("bounded not a pair", deep(most_of=lambda r: 10**4, bounded=lambda r, m: 5), False),
        ("bounded raising", deep(most_of=lambda r: 10**4, bounded=refuse), False),
        ("a callback reentering", reentering, True),
        ("lists changed from outside", lists_changed, False),
        ("finish stepping a context past the numbering", lambda: walk_past("finish"), False),
        ("walk_stacks stepping a context past the numbering", lambda: walk_past("walk"), False),
    ]
    return calls
