"""Seeded cases for the compile path's kernels of ``csrc/r3comp_objects.c``: an object
rule's automaton written out directly (objects._Builder.build) and a rule's table
(finish.finish_rule). Used by tests/support/native_fuzz.py's PAIRS (so the sanitizer
build runs them too), tests/support/native_hostile.py and tests/test_native_r3comp.py.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np

from jsonmode import native
from jsonmode.decoding.automata import network, objects
from jsonmode.decoding.automata.finish import finish_rule
from jsonmode.decoding.ir import Alt, Call, Expr, Lit, Members, Rep, Seq
from jsonmode.errors import BudgetExceededError

_KEYS = [b'"a":', b'"ab":', b'"b":', b'"abc":', b'"ba":', b'"c":', b'"a', b"x", b'"\xc3\xa9":']


def random_value(rng: random.Random, depth: int = 0) -> Expr:
    """A small member value: literals, options, repeats and calls."""
    roll = rng.random()
    if depth > 1 or roll < 0.35:
        return Lit(rng.choice([b"1", b"true", b"12", b"n", b'"x"', b","]))
    if roll < 0.55:
        return Call(rng.choice(["r0", "r1"]))
    if roll < 0.75:
        return Alt((random_value(rng, depth + 1), random_value(rng, depth + 1)))
    if roll < 0.9:
        return Rep(random_value(rng, depth + 1), rng.randint(0, 1), rng.choice([1, 3, None]))
    return Seq((random_value(rng, depth + 1), random_value(rng, depth + 1)))


def random_object(rng: random.Random) -> Expr:
    """``opening Members closing`` with keys that share prefixes (and clash sometimes),
    optional and required members, an extra-keys call or none, a few separators."""
    parts = []
    for _ in range(rng.randint(0, 7)):
        key = Lit(rng.choice(_KEYS))
        roll = rng.random()
        member: Expr = key if roll < 0.15 else Seq((key, random_value(rng)))
        parts.append((member, rng.random() < 0.4))
    extra = rng.choice([None, Call("r0"), Call("r1")])
    sep = rng.choice([Lit(b","), Seq((Lit(b","), Rep(Lit(b" "), 0, 1))), Lit(b", ")])
    closing = Lit(rng.choice([b"}", b"}}", b"]"]))
    return Seq((Lit(rng.choice([b"{", b"{{"])), Members(tuple(parts), extra, sep), closing))


@dataclass
class ObjectCase:
    expr: Expr
    max_states: int
    model: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(calls=[]))


def make_object(rng: random.Random) -> ObjectCase:
    return ObjectCase(random_object(rng), rng.choice([3, 8, 20, 60, 20_000]))


def _built(case: ObjectCase) -> Any:
    """object_rule's answer (calls as item lists: their order counts), or the error."""

    def checkpoint() -> None:
        case.model.calls.append("checkpoint")

    fragment = functools.partial(network._fragment, max_states=20_000)
    with mock.patch.object(objects, "checkpoint", checkpoint):
        try:
            raw = objects.object_rule(case.expr, fragment, case.max_states)
        except BudgetExceededError as exc:
            return ("budget", str(exc))
    if raw is None:
        return None
    edges, calls, accepting = raw
    return edges, [list(row.items()) for row in calls], accepting


def object_python(case: ObjectCase) -> Any:
    with native.use(False):
        return _built(case)


def object_compiled(kernels: ModuleType, case: ObjectCase) -> Any:
    with mock.patch.object(native, "KERNELS", kernels):
        return _built(case)


@dataclass
class FillCase:
    parts: objects.Raw
    live: list[bool] | None
    accepts: dict[str, bool]
    number: dict[str, int]
    model: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(calls=[]))


def make_fill(rng: random.Random) -> FillCase:
    """A random raw automaton (rows of intervals, calls to two rules), live states or
    all, some callees not accepting."""
    count = rng.randint(1, 30)
    edges = []
    for _ in range(count):
        row = []
        at = 0
        for _ in range(rng.randint(0, 6)):
            if at > 255:
                break
            lo = rng.randint(at, min(255, at + 40))
            hi = lo if rng.random() < 0.6 else rng.randint(lo, 255)
            row.append((lo, hi, rng.randrange(count)))
            at = hi + 1
        edges.append(row)
    calls = [
        {c: rng.randrange(count) for c in ("r0", "r1") if rng.random() < 0.2} for _ in range(count)
    ]
    accepting = [rng.random() < 0.3 for _ in range(count)]
    live = None if rng.random() < 0.4 else [rng.random() < 0.7 for _ in range(count)]
    accepts = {"r0": True, "r1": rng.random() < 0.5}
    return FillCase((edges, calls, accepting), live, accepts, {"r0": 3, "r1": 7})


def _filled(case: FillCase) -> Any:
    rule = finish_rule("r", case.parts, case.live, case.accepts, case.number)
    return rule.trans.tolist(), rule.calls, rule.accepting.tolist()


def fill_python(case: FillCase) -> Any:
    with native.use(False):
        return _filled(case)


def fill_compiled(kernels: ModuleType, case: FillCase) -> Any:
    with mock.patch.object(native, "KERNELS", kernels):
        return _filled(case)


def hostile_r3comp_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to r3comp_fill and r3comp_object_build (each must raise)."""
    fill = kernels.r3comp_fill
    build = kernels.r3comp_object_build
    table = np.empty((2, 256), dtype=np.int32)
    read_only = np.empty((2, 256), dtype=np.int32)
    read_only.flags.writeable = False
    spread = np.empty((4, 256), np.int32)[::2]
    one_row = np.empty((1, 256), np.int32)
    sep_extra = {"sep": ([[(44, 44, 9)], []], [False, True]), "extra": "r0"}
    sep_wide = {"sep": ([[(44, 300, 1)], []], [False, True]), "extra": "r0"}
    past_exits = ([[(49, 49, 1)], []], [{}, {}], [False, True], (False,))
    good_sep = ([[(44, 44, 1)], []], [False, True])

    def obj(**changes: Any) -> Callable[[], Any]:
        args: dict[str, Any] = {
            "opening": b"{", "closing": b"}", "keys": [b'"a":'], "values": [None],
            "sep": good_sep, "candidates": [1, 1], "closable": [True, True], "extra": None,
            "max_states": 100, "checkpoint": lambda: None, "error": BudgetExceededError,
        }  # fmt: skip
        args.update(changes)
        return lambda: build(*args.values())

    return [
        ("fill a table of int64", lambda: fill(np.empty((2, 256), np.int64), [[], []], None)),
        ("fill a read-only table", lambda: fill(read_only, [[], []], None)),
        ("fill a table not contiguous", lambda: fill(spread, [[], []], None)),
        ("fill rows not of 256", lambda: fill(np.empty((2, 255), np.int32), [[], []], None)),
        ("fill too few rows", lambda: fill(table, [[], [], []], None)),
        ("fill a target past the states", lambda: fill(table, [[(0, 0, 2)], []], None)),
        ("fill a negative target", lambda: fill(table, [[(0, 0, -1)], []], None)),
        ("fill a byte past 255", lambda: fill(table, [[(0, 256, 1)], []], None)),
        ("fill lo above hi", lambda: fill(table, [[(9, 3, 1)], []], None)),
        ("fill an edge not a triple", lambda: fill(table, [[(0, 1)], []], None)),
        ("fill a row not a list", lambda: fill(table, [((0, 0, 1),), []], None)),
        ("fill a huge target", lambda: fill(table, [[(0, 0, 1 << 70)], []], None)),
        ("fill renumber too short", lambda: fill(table, [[], []], [0])),
        ("fill renumber out of range", lambda: fill(table, [[], []], [0, 5])),
        ("fill renumber keeps too many", lambda: fill(one_row, [[], []], [0, 1])),
        ("fill renumber not ints", lambda: fill(table, [[], []], [0, "1"])),
        ("build empty opening", obj(opening=b"")),
        ("build a key not bytes", obj(keys=["a"])),
        ("build an empty key", obj(keys=[b""])),
        ("build values too few", obj(values=[])),
        ("build candidates too few", obj(candidates=[1])),
        ("build a candidate past the members", obj(candidates=[5, 1])),
        ("build a candidate before its position", obj(candidates=[1, 0])),
        ("build closable not bools", obj(closable=[1, 1])),
        ("build sep not a pair", obj(sep=([[(44, 44, 1)]],))),
        ("build a sep target past the sep", obj(**sep_extra)),
        ("build a value malformed", obj(values=[([[]], [{}], [True])])),
        ("build a value state past exits", obj(values=[past_exits])),
        ("build a value call not a str", obj(values=[([[]], [{1: 0}], [False], (False,))])),
        ("build extra not a str", obj(extra=3)),
        ("build checkpoint not callable", obj(checkpoint=3)),
        ("build error not an exception", obj(error=3)),
        ("build a sep edge byte past 255", obj(**sep_wide)),
    ]  # fmt: skip
