"""Grammar → rule automata → reference matcher, on hand-built grammars."""

import collections
import functools
import gzip
import itertools
import json
import pathlib
import re

import pytest

from jsonmode.decoding.automata.network import build_network
from jsonmode.decoding.automata.shapes import dead_parts
from jsonmode.decoding.ir import (
    EMPTY,
    Alt,
    Call,
    Grammar,
    Lit,
    Members,
    Rep,
    Seq,
    alt,
    called,
    seq,
)
from jsonmode.decoding.reference import END, ReferenceMatcher
from jsonmode.errors import BudgetExceededError, UnsupportedSchemaError

NEVER = Alt(())


def matcher(rules, root="root", **kwargs):
    return ReferenceMatcher(build_network(Grammar(root, rules)), **kwargs)


def test_literals_alternatives_repetitions():
    m = matcher({"root": seq(Lit(b"a"), alt(Lit(b"b"), Lit(b"cd")), Rep(Lit(b"e"), 1, 3))})
    for text in ["".join(p) for n in range(1, 7) for p in itertools.product("abcde", repeat=n)]:
        expected = re.fullmatch(r"a(?:b|cd)e{1,3}", text) is not None
        assert m.accepts(text.encode()) is expected, text


def test_unbounded_repetition_and_empty():
    m = matcher({"root": seq(Lit(b"["), Rep(Lit(b"x"), 0, None), Lit(b"]"))})
    assert m.accepts(b"[]")
    assert m.accepts(b"[" + b"x" * 500 + b"]")
    assert not m.accepts(b"[x")
    assert matcher({"root": EMPTY}).accepts(b"")


def test_recursion_through_calls():
    # nested lists: L ::= "[" ( L ( "," L )* )? "]"
    items = seq(Call("L"), Rep(seq(Lit(b","), Call("L")), 0, None))
    m = matcher({"root": Call("L"), "L": seq(Lit(b"["), Rep(items, 0, 1), Lit(b"]"))})
    for text, ok in [("[]", True), ("[[],[[]]]", True), ("[[]", False), ("[],[]", False)]:
        assert m.accepts(text.encode()) is ok, text


def test_depth_budget_stops_recursion():
    m = matcher(
        {"root": Call("L"), "L": seq(Lit(b"["), Rep(Call("L"), 0, 1), Lit(b"]"))}, max_depth=4
    )
    assert m.accepts(b"[[]]")
    assert not m.accepts(b"[[[[[[]]]]]]")


def test_unproductive_rules_are_trimmed_and_never_leave_dead_ends():
    # B can never finish, so the "b" branch disappears: after "a" only "c" remains.
    m = matcher(
        {
            "root": alt(seq(Lit(b"a"), Lit(b"c")), seq(Lit(b"a"), Call("B"))),
            "B": seq(Lit(b"b"), Call("B")),
        }
    )
    state = m.feed(m.initial(), b"a")
    allowed = m.allowed_bytes(state)
    assert allowed[ord("c")]
    assert not allowed[ord("b")]
    with pytest.raises(UnsupportedSchemaError, match="accepts no value"):
        build_network(Grammar("root", {"root": NEVER}))


def test_every_live_state_reaches_the_end():
    """Walking any allowed byte never strands the matcher (the no-dead-end property)."""
    items = seq(Call("V"), Rep(seq(Lit(b","), Call("V")), 0, 2))
    m = matcher(
        {
            "root": Call("V"),
            "V": alt(Lit(b"1"), Lit(b"22"), seq(Lit(b"["), Rep(items, 0, 1), Lit(b"]"))),
        },
        max_depth=6,
    )
    frontier = [m.initial()]
    seen = set()
    while frontier:
        state = frontier.pop()
        if state in seen or len(seen) > 3000:
            continue
        seen.add(state)
        allowed = m.allowed_bytes(state)
        assert allowed.any() or END in state
        for byte in allowed.nonzero()[0]:
            nxt = m.step(state, int(byte))
            assert nxt, "an allowed byte must lead to a live state"
            frontier.append(nxt)


def members(*names, optional=(), extra=None, any_order=False):
    parts = tuple((Lit(f'"{n}":1'.encode()), n not in optional) for n in names)
    return seq(Lit(b"{"), Members(parts, extra, Lit(b","), any_order), Lit(b"}"))


def test_members_in_order_with_optional_ones():
    m = matcher({"root": members("a", "b", "c", optional=("b", "c"))})
    ok = ['{"a":1}', '{"a":1,"b":1}', '{"a":1,"c":1}', '{"a":1,"b":1,"c":1}']
    bad = ["{}", '{"b":1}', '{"b":1,"a":1}', '{"a":1,}', '{"a":1,"a":1}', '{"a":1"b":1}']
    assert all(m.accepts(t.encode()) for t in ok)
    assert not any(m.accepts(t.encode()) for t in bad)


def test_members_with_extras_anywhere():
    m = matcher({"root": members("a", optional=("a",), extra=Call("X")), "X": Lit(b'"x":0')})
    for text in ["{}", '{"x":0}', '{"x":0,"a":1}', '{"a":1,"x":0,"x":0}', '{"x":0,"a":1,"x":0}']:
        assert m.accepts(text.encode()), text
    assert not m.accepts(b'{"a":1,"a":1}')
    assert not m.accepts(b'{,"x":0}')


def test_members_in_any_order():
    m = matcher({"root": members("a", "b", "c", optional=("c",), any_order=True)})
    for order in itertools.permutations("abc"):
        assert m.accepts(("{" + ",".join(f'"{n}":1' for n in order) + "}").encode())
    for order in itertools.permutations("ab"):
        assert m.accepts(("{" + ",".join(f'"{n}":1' for n in order) + "}").encode())
    assert not m.accepts(b'{"a":1,"c":1}')
    assert not m.accepts(b'{"a":1,"b":1,"a":1}')


def test_rule_state_budget_is_typed():
    with pytest.raises(BudgetExceededError) as info:
        build_network(
            Grammar("root", {"root": Rep(alt(Lit(b"a"), Lit(b"b")), 0, 400)}), max_states=50
        )
    assert info.value.limit == 50


def test_grammar_prints_one_rule_per_line():
    grammar = Grammar(
        "root",
        {
            "root": seq(Lit(b"["), Rep(Call("item"), 0, None), Lit(b"]")),
            "item": Alt((Lit(b"1"), NEVER)),
        },
    )
    assert str(grammar) == 'root ::= "[" item* "]"\nitem ::= "1" | NEVER'


def _random_expr(rng, names, depth):
    kind = rng.choice(["lit", "call", "never"] if depth == 0 else list(_KINDS))
    if kind == "lit":
        return Lit(rng.choice([b"a", b"b", b"ab", b""]))
    if kind == "call":
        return Call(rng.choice(names))
    if kind == "never":
        return NEVER
    parts = tuple(_random_expr(rng, names, depth - 1) for _ in range(rng.randint(1, 3)))
    if kind == "seq":
        return Seq(parts)
    if kind == "alt":
        return Alt(parts)
    if kind == "rep":
        return Rep(parts[0], rng.randint(0, 2), rng.choice([None, 2, 3]))
    needed = tuple((part, rng.random() < 0.5) for part in parts)
    extra = _random_expr(rng, names, 0) if rng.random() < 0.3 else None
    return Members(needed, extra, rng.choice([Lit(b","), NEVER]), rng.random() < 0.3)


_KINDS = ("lit", "call", "never", "seq", "alt", "rep", "members")


def test_rule_level_acceptance_agrees_with_the_state_search():
    """``build_network`` decides which rules accept anything from their expressions,
    and keeps every state of a rule whose every part accepts something unsearched.
    On random grammars (dead rules, NEVER, empty separators, recursion), both agree
    with the backwards search over the automata."""
    import random

    from jsonmode.decoding.automata import network as automaton

    rng = random.Random(7)
    shortcuts = 0
    for _ in range(400):
        names = ["r0", "r1", "r2", "r3"]
        rules = {name: _random_expr(rng, names, 3) for name in names}
        raw = {name: automaton._determinise_expr(name, expr, 5000) for name, expr in rules.items()}
        accepts = automaton._accepting_rules(Grammar("r0", rules), {})
        # The reference: iterate the state search until the rules' verdicts settle.
        truth = dict.fromkeys(names, False)
        while True:
            found = {name: automaton._live(raw[name], truth)[0] for name in names}
            if found == truth:
                break
            truth = found
        assert accepts == truth, rules
        for name, expr in rules.items():
            # (The shortcut _Structure.rule takes: no dead part, every callee accepts.)
            if not dead_parts(expr) and all(accepts[callee] for callee in called(expr)):
                shortcuts += 1
                assert all(automaton._live(raw[name], accepts)), (name, rules)
    assert shortcuts > 100  # the shortcut was exercised


def test_rules_alike_in_every_schema_are_determinised_once_per_process():
    """Structural rules come from a process cache keyed by their shape (the rule up to
    its callees' names): the unconstrained JSON value's rules, and rules of two
    schemas that differ in the names they call only, share their tables; the tables
    are the ones built afresh."""
    from jsonmode.decoding.automata import network as automaton
    from jsonmode.decoding.automata.shapes import shape_of
    from jsonmode.decoding.compiled import compile_schema

    first = compile_schema({"type": "object", "properties": {"a": {}}})
    second = compile_schema({"type": "array", "items": {"type": "object"}})
    for name in ("any", "any_object", "any_array"):
        expr = second.grammar.rules[name]
        assert automaton._structure(shape_of(expr), 20_000) is automaton._structure(
            shape_of(expr), 20_000
        )
        ours, theirs = first.network.names[name], second.network.names[name]
        assert first.network.rules[ours].trans is second.network.rules[theirs].trans
    # Arrays of different items: one shape, one table, each calling its own items.
    strings = compile_schema(
        {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
    )
    numbers = compile_schema(
        {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
    )
    assert shape_of(strings.grammar.rules["root"]) == shape_of(numbers.grammar.rules["root"])
    automaton._STRUCTURES.clear()
    for compiled in (second, strings, numbers):
        fresh = build_network(compiled.grammar)
        for name, index in compiled.network.names.items():
            cached, rebuilt = compiled.network.rules[index], fresh.rules[fresh.names[name]]
            assert (cached.trans == rebuilt.trans).all()
            assert cached.calls == rebuilt.calls


def test_runs_of_a_table_are_its_rows_intervals():
    """``_runs`` (one pass over a whole table) against a row-by-row scan."""
    import numpy as np

    from jsonmode.decoding.automata import network as automaton

    def scan(row):
        runs, lo = [], 0
        for byte in range(1, 257):
            if byte == 256 or row[byte] != row[lo]:
                if row[lo] >= 0:
                    runs.append((lo, byte - 1, int(row[lo])))
                lo = byte
        return runs

    rng = np.random.default_rng(1)
    for trial in range(200):
        count = int(rng.integers(1, 20))
        trans = rng.choice([-1, 0, 1, 2], size=(count, 256), p=[0.7, 0.1, 0.1, 0.1])
        if trial % 4 == 0:  # whole rows of one target, and dead rows
            trans = np.repeat(trans[:, :1], 256, axis=1)
        found = [[] for _ in range(count)]
        for state, lo, hi, target in automaton._runs(trans.astype(np.int32)):
            found[state].append((lo, hi, target))
        assert found == [scan(row.tolist()) for row in trans], trial


# -- object rules built directly --------------------------------------------------------


def _canonical(raw):
    """A rule automaton renumbered breadth-first from its start (row targets in byte
    order, then calls by callee): two automata are isomorphic exactly when their
    canonical forms are equal."""
    edges, calls, accepting = raw
    number, order = {0: 0}, [0]
    for state in order:
        for target in [t for _, _, t in edges[state]] + [
            t for _, t in sorted(calls[state].items())
        ]:
            if target not in number:
                number[target] = len(order)
                order.append(target)
    form = []
    for state in order:
        row = []
        for lo, hi, target in edges[state]:  # (adjacent runs to one target merged)
            if row and row[-1][1] == lo - 1 and row[-1][2] == number[target]:
                row[-1] = (row[-1][0], hi, number[target])
            else:
                row.append((lo, hi, number[target]))
        called = sorted((callee, number[target]) for callee, target in calls[state].items())
        form.append((row, called, accepting[state]))
    return form


def _direct_and_general(expr, max_states=20_000):
    from jsonmode.decoding.automata import network as automaton
    from jsonmode.decoding.automata.objects import object_rule

    fragment = functools.partial(automaton._fragment, max_states=max_states)
    direct = object_rule(expr, fragment, max_states)
    general = automaton._determinise_expr("obj", expr, max_states)
    return direct, general


def _maskbench_schemas(per_file):
    data = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
    files = sorted((data / "jsonschemabench" / "maskbench").glob("*.jsonl.gz"))
    assert files, "MaskBench missing"
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in itertools.islice(handle, per_file):
                yield json.loads(line)["schema"]


def test_object_rules_built_directly_equal_the_subset_construction():
    """Every object rule of MaskBench schemas (standard whitespace, schema order; the
    constant objects' any-order rules aside): the direct construction gives the
    general path's automaton, state for state."""
    from jsonmode.decoding.compiled import compile_schema
    from jsonmode.errors import JsonModeError

    rules = 0
    for schema in _maskbench_schemas(12):
        try:
            grammar = compile_schema(schema).grammar
        except JsonModeError:
            continue
        for name, expr in grammar.rules.items():
            body = expr.items[1] if isinstance(expr, Seq) and len(expr.items) == 3 else None
            if isinstance(body, Members) and not body.any_order:
                direct, general = _direct_and_general(expr)
                assert direct is not None, name
                assert len(direct[0]) == len(general[0]), name
                assert _canonical(direct) == _canonical(general), name
                rules += 1
    assert rules > 50


def test_object_rules_built_directly_on_random_objects():
    """Random objects: keys that share prefixes (or are prefixes of one another),
    values that may go on with a separator's or the closing byte, empty and NEVER
    parts, calls. Where the direct construction answers, it equals the general path;
    where parts overlap it declines (None), and both kinds of case occur."""
    import random

    rng = random.Random(11)
    names = ["r0", "r1"]
    outcomes = collections.Counter()
    for _ in range(1500):
        count = rng.randint(0, 4)
        parts = []
        for _ in range(count):
            key = Lit(rng.choice([b'"a":', b'"ab":', b'"b":', b'"a', b'"ab', b"}", b'"']))
            value = _random_expr(rng, names, rng.randint(0, 2))
            member = rng.choice([Seq((key, value)), Seq((key, value, value)), Seq((key,)), key])
            parts.append((member, rng.random() < 0.4))
        extra = rng.choice([None, Call("r0"), Call("r1")])
        sep = rng.choice([Lit(b","), seq(Lit(b","), Rep(Lit(b" "), 0, 1)), NEVER, Lit(b"a")])
        closing = Lit(rng.choice([b"}", b"}}", b"a"]))
        expr = Seq((Lit(rng.choice([b"{", b"{{"])), Members(tuple(parts), extra, sep), closing))
        direct, general = _direct_and_general(expr)
        if direct is None:
            outcomes["declined"] += 1
            continue
        outcomes["direct"] += 1
        assert _canonical(direct) == _canonical(general), expr
    assert outcomes["direct"] > 300, outcomes
    assert outcomes["declined"] > 100, outcomes


def test_object_rules_of_other_shapes_take_the_general_path():
    from jsonmode.decoding.automata.objects import object_rule

    ordered = members("a", "b")
    from jsonmode.decoding.automata import network as automaton

    fragment = functools.partial(automaton._fragment, max_states=100)
    assert object_rule(ordered, fragment, 100) is not None
    assert object_rule(members("a", "b", any_order=True), fragment, 100) is None
    assert object_rule(members("a", extra=Lit(b'"x":0')), fragment, 100) is None  # not a call
    spaced = seq(Lit(b"{"), Rep(Lit(b" "), 0, 1), ordered.items[1], Lit(b"}"))
    assert object_rule(spaced, fragment, 100) is None
    with pytest.raises(BudgetExceededError):
        object_rule(members(*"abcdefghij"), fragment, 20)
    # The network is the same either way: a rule the direct path declines still works.
    m = matcher({"root": members("a", "b", optional=("a",), any_order=True)})
    assert m.accepts(b'{"b":1,"a":1}')
