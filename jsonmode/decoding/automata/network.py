"""Grammar → a recursive transition network: one DFA per rule, over bytes and calls.

Each rule becomes a deterministic automaton whose edges are either bytes or calls
to other rules (a call edge says: run the callee to acceptance, then continue at
the return state). Lexemes are inlined, so a rule's byte edges cover whole string
bodies and numbers; only structure (objects, arrays, references) needs calls.

After building, rules that accept nothing are removed with every edge leading to
them, and every state that cannot reach acceptance is trimmed: no live state is a
dead end, which is what lets the matcher promise a non-empty mask until the
document is complete.

Cost: subset construction over byte intervals, linear in the size of the result
for typical schemas; object rules of the usual shape are written out directly
(:mod:`~jsonmode.decoding.automata.objects`, ~2.5x faster), their member values and
separators determinised once per process. A structural rule's table is built once
per process per :class:`~jsonmode.decoding.automata.shapes.Shape` (the rule up to the names
it calls: arrays, roots, unions and extra-key rules recur in almost every schema,
and ~30% of object rules recur across MaskBench schemas) and shared, read-only, by
the networks that have a rule of that shape (a bounded LRU, 32 MiB). Budget:
``max_states`` per rule (a typed :class:`~jsonmode.errors.BudgetExceededError`
beyond it).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.budget import checkpoint
from jsonmode.decoding.automata.families import Family, RuleTable, number_families
from jsonmode.decoding.automata.families import expand as expand_families
from jsonmode.decoding.automata.finish import finish_rule as _finish
from jsonmode.decoding.automata.keys import built_names
from jsonmode.decoding.automata.objects import Fragment, Interval, Raw, extend_row, object_rule
from jsonmode.decoding.automata.rule_dfa import RuleDFA
from jsonmode.decoding.automata.shapes import Shape, dead_parts, shape_of
from jsonmode.decoding.ir import Alt, Call, Expr, Grammar, Lex, Lit, Members, Rep, Seq
from jsonmode.errors import BudgetExceededError, UnsupportedSchemaError
from jsonmode.lru import IdentityMemo, Lru, memoised
from jsonmode.regex import ByteDFA, any_char_dfa, json_string_body_dfa

__all__ = [
    "Network",
    "RuleDFA",
    "build_network",
    "key_rule_names",
    "plain_string_rule",
    "quoted_rule",
]

# The NFA may be this many times larger than the DFA budget before we give up early
# (csrc/r5nfa_build.c's too: the differential tests hold the two alike).
_NFA_PER_DFA_STATE = 4
# The expression classes, in the order the compiled core's r5nfa_determinise takes them.
_EXPR_CLASSES = (Lit, Lex, Call, Seq, Alt, Rep, Members)


@dataclass
class _NFA:
    eps: list[list[int]] = field(default_factory=list)
    edges: list[list[Interval]] = field(default_factory=list)
    calls: list[list[tuple[str, int]]] = field(default_factory=list)
    # States whose edges were written once, sorted and disjoint (an embedded lexeme's).
    sorted_rows: set[int] = field(default_factory=set)
    # The size at which fragment() next checks the budgets (one comparison a call).
    check_at: int = -1

    def state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        self.calls.append([])
        return len(self.eps) - 1

    def fragment(self, expr: Expr, start: int, end: int, budget: int) -> None:
        """Add transitions from ``start`` to ``end`` that read ``expr``."""
        if len(self.eps) > self.check_at:
            # The state budget (the NFA may be _NFA_PER_DFA_STATE times the DFA's
            # before giving up early), and every 1 024 states the compile's deadline.
            if len(self.eps) > budget * _NFA_PER_DFA_STATE:
                raise BudgetExceededError("states per rule", budget)
            checkpoint()
            self.check_at = min(budget * _NFA_PER_DFA_STATE, len(self.eps) + 1024)
        # (The Expr classes are final: an identity test each, in order of frequency.)
        if type(expr) is Lit:
            data = expr.data
            if not data:
                self.eps[start].append(end)
                return
            if len(self.eps) + len(data) > budget * _NFA_PER_DFA_STATE:
                # (A state per byte: a 6 MB literal took 39 s and 2.7 GB to be refused.)
                raise BudgetExceededError("states per rule", budget)
            here = start
            for index, byte in enumerate(data):
                there = end if index == len(data) - 1 else self.state()
                self.edges[here].append((byte, byte, there))
                here = there
        elif type(expr) is Seq:
            items = expr.items
            here = start
            for index, item in enumerate(items):
                there = end if index == len(items) - 1 else self.state()
                self.fragment(item, here, there, budget)
                here = there
            if not items:
                self.eps[start].append(end)
        elif type(expr) is Call:
            self.calls[start].append((expr.rule, end))
        elif type(expr) is Lex:
            self._embed(expr, start, end)
        elif type(expr) is Alt:
            for option in expr.options:
                self.fragment(option, start, end, budget)
        elif type(expr) is Rep:
            self._repeat(expr, start, end, budget)
        elif type(expr) is Members:
            self._members(expr, start, end, budget)
        else:  # pragma: no cover - Expr is closed
            raise TypeError(expr)

    def _repeat(self, rep: Rep, start: int, end: int, budget: int) -> None:
        here = start
        if rep.low == 0 and rep.high is None:
            # The loop must return to a state of its own: ``start`` may be shared (an
            # Alt gives every option the same start), and looping back to it would
            # let a pass through ``x*`` continue into the other options.
            here = self.state()
            self.eps[start].append(here)
        for _ in range(rep.low):
            there = self.state()
            self.fragment(rep.item, here, there, budget)
            here = there
        self.eps[here].append(end)
        if rep.high is None:
            loop = self.state()
            self.fragment(rep.item, here, loop, budget)
            self.eps[loop].append(here)
            return
        for _ in range(rep.high - rep.low):
            there = self.state()
            self.fragment(rep.item, here, there, budget)
            self.eps[there].append(end)
            here = there

    def _members(self, node: Members, start: int, end: int, budget: int) -> None:
        """Declared members in order: states (position, anything written yet)."""
        if node.any_order:
            self._members_any_order(node, start, end, budget)
            return
        count = len(node.members)
        fresh = [self.state() for _ in range(count + 1)]  # nothing written yet
        after = [self.state() for _ in range(count + 1)]  # something written
        self.eps[start].append(fresh[0])
        for index, (member, needed) in enumerate(node.members):
            # One copy of the member, entered directly when nothing was written yet
            # and after the separator otherwise.
            ready = self.state()
            self.eps[fresh[index]].append(ready)
            self.fragment(node.sep, after[index], ready, budget)
            self.fragment(member, ready, after[index + 1], budget)
            if not needed:
                self.eps[fresh[index]].append(fresh[index + 1])
                self.eps[after[index]].append(after[index + 1])
        if node.extra is not None:
            for index in range(count + 1):
                ready = self.state()
                self.eps[fresh[index]].append(ready)
                self.fragment(node.sep, after[index], ready, budget)
                self.fragment(node.extra, ready, after[index], budget)
        self.eps[fresh[count]].append(end)
        self.eps[after[count]].append(end)

    def _members_any_order(self, node: Members, start: int, end: int, budget: int) -> None:
        """Any order: states (set of members written, anything written yet)."""
        count = len(node.members)
        states = {(mask, wrote): self.state() for mask in range(1 << count) for wrote in (0, 1)}
        self.eps[start].append(states[0, 0])
        needed = sum(1 << i for i, (_, required) in enumerate(node.members) if required)
        for (mask, wrote), here in states.items():
            if mask and not wrote:
                continue  # unreachable: writing a member sets "wrote"
            for index, (member, _) in enumerate(node.members):
                if not mask & (1 << index):
                    item = Seq((node.sep, member)) if wrote else member
                    self.fragment(item, here, states[mask | (1 << index), 1], budget)
            if node.extra is not None:
                item = Seq((node.sep, node.extra)) if wrote else node.extra
                self.fragment(item, here, states[mask, 1], budget)
            if mask & needed == needed:
                self.eps[here].append(end)

    def _embed(self, lex: Lex, start: int, end: int) -> None:
        rows, accepting, first = _lex_rows(lex)
        base = len(self.eps)
        # (The lexeme's states appended at once: as many states as its rows.)
        self.eps += [[] for _ in rows]
        self.calls += [[] for _ in rows]
        self.edges += [[(lo, hi, base + target) for lo, hi, target in row] for row in rows]
        self.eps[start].append(base + first)
        for state in accepting:
            self.eps[base + state].append(end)
        self.sorted_rows.update(range(base, base + len(rows)))


def _rows_bytes(rows: tuple[tuple[tuple[Interval, ...], ...], tuple[int, ...], int]) -> int:
    return 64 * sum(len(row) + 1 for row in rows[0])


@memoised(16 << 20, _rows_bytes)
def _lex_rows(lex: Lex) -> tuple[tuple[tuple[Interval, ...], ...], tuple[int, ...], int]:
    """A lexeme's automaton as interval rows, accepting states and start (cached, 16 MiB:
    lexemes compare by label, and equal labels mean equal automata)."""
    dfa = lex.dfa
    rows: list[list[Interval]] = [[] for _ in range(dfa.n_states)]
    for state, lo, hi, target in _runs(np.asarray(dfa.trans)):
        rows[state].append((lo, hi, target))
    return tuple(map(tuple, rows)), tuple(np.flatnonzero(dfa.accepting).tolist()), int(dfa.start)


def _runs(trans: npt.NDArray[np.int32]) -> Iterable[tuple[int, int, int, int]]:
    """``(state, lo, hi, target)`` for each run of equal, live targets in the rows of
    a transition table, row by row and in byte order (one pass over the table)."""
    opens = np.ones(trans.shape, dtype=np.bool_)
    opens[:, 1:] = trans[:, 1:] != trans[:, :-1]
    state, lo = np.nonzero(opens)
    hi = np.full(lo.shape, 255, dtype=lo.dtype)
    same_row = state[1:] == state[:-1]
    hi[:-1][same_row] = lo[1:][same_row] - 1
    target = trans[state, lo]
    live = target >= 0
    columns = (state[live], lo[live], hi[live], target[live])
    return zip(*(column.tolist() for column in columns), strict=True)


@dataclass(frozen=True, eq=False)
class Network:
    """Every rule's automaton; ``rules[root]`` starts the document. Immutable but for
    the rules of any-order objects, made when a matcher first reaches them (see
    :mod:`~jsonmode.decoding.automata.families`); thread-safe."""

    rules: Sequence[RuleDFA]
    root: int
    names: dict[str, int]

    @property
    def n_states(self) -> int:
        """States of the rules built with the network."""
        return sum(rule.n_states for rule in self.rules)


# Finished call-free rules (lexemes), by expression and budget (None: accepts nothing).
_TERMINALS: Lru[tuple[Expr, int], tuple[RuleDFA | None]] = Lru(64 << 20)
# Structural rules' automata, by shape (its key: see jsonmode.decoding.automata.shapes) and
# budget. (The key text only: an expression kept here would be one more tree of objects
# for the garbage collector to walk for as long as it is cached.)
_STRUCTURES: Lru[tuple[str, int], _Structure] = Lru(32 << 20)
# Object rules' parts determinised on their own (see object_rule), likewise.
_FRAGMENTS: Lru[tuple[Expr, int], Fragment] = Lru(8 << 20)


def _closure(nfa: _NFA, states: Iterable[int]) -> frozenset[int]:
    seen = set(states)
    stack = list(seen)
    while stack:
        for nxt in nfa.eps[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return frozenset(seen)


def _determinise(
    name: str, nfa: _NFA, start: int, final: int, budget: int
) -> tuple[Raw, list[frozenset[int]]]:
    """The DFA of ``nfa`` from ``start`` (``final`` accepts), and each DFA state's set
    of NFA states: the compiled core's ``determinise`` where loaded, else
    :func:`_determinise_py`, with the same answers (states numbered alike, the same
    budget error at the same state, the deadline checked every 16 states)."""
    kernels = native.KERNELS
    if kernels is None:
        return _determinise_py(name, nfa, start, final, budget)
    edges, calls, accepting, sets = kernels.determinise(
        nfa.eps, nfa.edges, nfa.calls, nfa.sorted_rows, start, final, budget,
        checkpoint, BudgetExceededError,
    )  # fmt: skip
    return (edges, calls, accepting), sets


def _determinise_py(
    name: str, nfa: _NFA, start: int, final: int, budget: int
) -> tuple[Raw, list[frozenset[int]]]:
    """:func:`_determinise` in Python (the reference): subset construction, each DFA
    state's targets taken in order (a row's in byte order, then its calls' by callee
    in the order of their first calls from its members in increasing order), each new
    state numbered on first sight. Cost: linear in the size of the DFA's rows and
    sets. Raises BudgetExceededError beyond ``budget`` states."""
    first = _closure(nfa, [start])
    index = {first: 0}
    order = [first]
    edges: list[list[Interval]] = []
    calls: list[dict[str, int]] = []
    accepting: list[bool] = []

    def intern(target_set: frozenset[int]) -> int:
        """The DFA state for a set of NFA states, made on first sight (within budget)."""
        if target_set not in index:
            if len(order) >= budget:
                raise BudgetExceededError("states per rule", budget)
            index[target_set] = len(order)
            order.append(target_set)
        return index[target_set]

    closed: dict[frozenset[int], int] = {}

    def goto(targets: frozenset[int]) -> int:
        known = closed.get(targets)
        if known is None:
            known = closed[targets] = intern(_closure(nfa, targets))
        return known

    # The common target is one NFA state (a literal's next byte, a lexeme's next
    # state), most often without epsilon moves: its closure is itself.
    eps = nfa.eps
    single: dict[int, int] = {}

    def goto_one(target: int) -> int:
        known = single.get(target)
        if known is None:
            members = _closure(nfa, (target,)) if eps[target] else frozenset((target,))
            known = single[target] = intern(members)
        return known

    # Plain states: they only read bytes, on disjoint intervals in order (a literal's
    # byte, an embedded lexeme's state short of acceptance). A set of one plain state
    # is a DFA state whose row is its own, each target closed alone: made here
    # without the general work (most DFA states are such).
    plain = {
        state: row
        for state, row in enumerate(nfa.edges)
        if (state in nfa.sorted_rows or (len(row) == 1 and row[0][0] == row[0][1]))
        and not eps[state]
        and not nfa.calls[state]
        and state != final
    }
    callers = {state for state, row in enumerate(nfa.calls) if row}
    no_calls: dict[str, int] = {}  # (shared by the rows that call nothing: never written)
    position = 0
    while position < len(order):
        members = order[position]
        position += 1
        if not position & 15:
            checkpoint()
        if len(members) == 1:
            own = plain.get(next(iter(members)))
            if own is not None:
                accepting.append(False)
                # (goto_one's memo read inline: most targets are known by now.)
                edges.append(
                    [
                        (lo, hi, single[target] if target in single else goto_one(target))
                        for lo, hi, target in own
                    ]
                )
                calls.append(no_calls)
                continue
        accepting.append(final in members)
        disjoint = _disjoint_row(nfa, members, goto_one)
        if disjoint is not None:
            edges.append(disjoint)
            calling = callers.intersection(members)
            calls.append(_call_row(nfa, sorted(calling), intern) if calling else no_calls)
            continue
        # Sweep the byte axis: at each interval boundary, update the live targets.
        opens: dict[int, list[int]] = {}
        shuts: dict[int, list[int]] = {}
        for member in members:
            for lo, hi, nxt in nfa.edges[member]:
                opens.setdefault(lo, []).append(nxt)
                shuts.setdefault(hi + 1, []).append(nxt)
        row: list[Interval] = []
        live: dict[int, int] = {}
        for lo, nxt_point in itertools.pairwise(sorted(opens.keys() | shuts.keys())):
            for gone in shuts.get(lo, ()):
                if live[gone] == 1:
                    del live[gone]
                else:
                    live[gone] -= 1
            for new in opens.get(lo, ()):
                live[new] = live.get(new, 0) + 1
            if live:
                here = goto_one(next(iter(live))) if len(live) == 1 else goto(frozenset(live))
                extend_row(row, lo, nxt_point - 1, here)
        edges.append(row)
        calling = callers.intersection(members)
        calls.append(_call_row(nfa, sorted(calling), intern) if calling else no_calls)
    return (edges, calls, accepting), order


def _disjoint_row(
    nfa: _NFA, members: frozenset[int], goto_one: Callable[[int], int]
) -> list[Interval] | None:
    """The DFA row of a state set whose members read bytes on pairwise disjoint
    intervals (a literal, a key's next byte, a separator beside a closing brace,
    ...): each interval leads to the closure of its one target (``goto_one``). None
    where two intervals overlap (the caller sweeps the byte axis)."""
    intervals: list[Interval] = []
    for member in members:
        intervals += nfa.edges[member]
    intervals.sort()
    if any(b[0] <= a[1] for a, b in itertools.pairwise(intervals)):
        return None
    row: list[Interval] = []
    for lo, hi, nxt in intervals:
        extend_row(row, lo, hi, goto_one(nxt))
    return row


def _call_row(
    nfa: _NFA, members: list[int], intern: Callable[[frozenset[int]], int]
) -> dict[str, int]:
    """Per rule called from ``members`` (the calling states of a DFA state, in
    increasing order: the numbering must not hang on a frozenset's iteration order),
    the DFA state the call returns to, in the order of the rules' first calls."""
    grouped: dict[str, list[int]] = {}
    for member in members:
        for callee, target in nfa.calls[member]:
            grouped.setdefault(callee, []).append(target)
    return {callee: intern(_closure(nfa, targets)) for callee, targets in grouped.items()}


def build_network(grammar: Grammar, *, max_states: int = 20_000) -> Network:
    """Compile every rule and trim what cannot complete.

    Structural rules are built once per process per
    :class:`~jsonmode.decoding.automata.shapes.Shape`
    (the rule up to its callees' names), and so is their table where every part of
    the rule accepts something; a network then only numbers their calls.

    Raises:
        UnsupportedSchemaError: the root rule accepts nothing (an unsatisfiable schema).
        BudgetExceededError: a rule needs more than ``max_states`` states.
    """
    shapes = {name: shape_of(expr) for name, expr in grammar.rules.items()}
    families: dict[str, Family] = {}
    if any(shape.families for shape in shapes.values()):
        grammar, families = expand_families(grammar)
        shapes = {name: shape_of(expr) for name, expr in grammar.rules.items()}
    structures: dict[str, _Structure] = {}
    done: dict[str, RuleDFA | None] = {}  # lexemes, finished once per process
    for index, (name, shape) in enumerate(shapes.items()):
        if not index & 7:
            checkpoint()
        if name in families:
            continue  # (its expression is for the acceptance analysis only)
        if not shape.structural:
            done[name] = _terminal(name, grammar.rules[name], max_states)
        else:
            structures[name] = _structure(shape, max_states)
    accepts = _accepting_rules(grammar, {name: rule is not None for name, rule in done.items()})
    if not accepts[grammar.root]:
        raise UnsupportedSchemaError("the schema accepts no value at all")
    names = [name for name in grammar.rules if accepts[name]]
    number = {name: index for index, name in enumerate(names)}
    rules: list[RuleDFA | None] = []
    for name in names:
        if name in families:
            rules.append(None)  # (made by the rule table)
            continue
        finished = done.get(name)
        if finished is not None:
            rules.append(finished if finished.name == name else replace(finished, name=name))
            continue
        rules.append(structures[name].rule(name, shapes[name], accepts, number, max_states))
    roots, numbered = number_families(families, number, accepts)
    return Network(RuleTable(rules, roots, numbered), number[grammar.root], number)


_Calling = tuple[tuple[int, tuple[tuple[int, int], ...]], ...]


@dataclass(frozen=True, slots=True, eq=False)
class _Structure:
    """A structural rule's automaton, by shape (callees named ``"0"``, ``"1"``, ...).

    Where no part of the shape accepts nothing by itself (``raw`` None, the usual
    case): its table ``trans``, ``accepting``, and ``calling``, the states that call,
    each with its calls as ``(callee index, return state)``. Otherwise (an empty
    alternative, an empty lexeme: see :func:`~jsonmode.decoding.automata.shapes.dead_parts`)
    ``raw``, the untrimmed automaton each network trims. Shared by every network with
    a rule of the shape: read-only (lists of rows are not kept where a table will
    do: the garbage collector would walk them for as long as they are cached).
    """

    trans: npt.NDArray[np.int32] | None
    accepting: npt.NDArray[np.bool_] | None
    calling: _Calling
    raw: Raw | None

    def rule(
        self,
        name: str,
        shape: Shape,
        accepts: dict[str, bool],
        number: dict[str, int],
        max_states: int,
    ) -> RuleDFA:
        """The rule ``name`` of this shape (calling ``shape.callees``), given which
        rules ``accepts`` and their ``number``."""
        callees = shape.callees
        if self.trans is not None and all(accepts.get(callee, False) for callee in callees):
            # No part dead (the table is cached only then) and every callee accepts:
            # every part accepts something, so every state of the automaton can
            # complete (each state is some set of positions inside those parts;
            # checked on random grammars by the tests).
            assert self.accepting is not None
            numbers = [number[callee] for callee in callees]
            calls: list[tuple[tuple[int, int], ...]] = [()] * len(self.accepting)
            for state, row in self.calling:
                calls[state] = tuple([(numbers[callee], target) for callee, target in row])
            return RuleDFA(name, self.trans, tuple(calls), self.accepting)
        raw = self.raw if self.raw is not None else _structure_raw(shape, max_states)
        local = {str(index): accepts.get(callee, False) for index, callee in enumerate(callees)}
        numbers_of = {
            str(index): number[callee] for index, callee in enumerate(callees) if local[str(index)]
        }
        return _finish(name, raw, _live(raw, local), local, numbers_of)


def _structure(shape: Shape, max_states: int) -> _Structure:
    """The automaton of a structural rule's shape, built once per process."""
    key = (shape.key, max_states)
    known = _STRUCTURES.get(key)
    if known is None:
        raw = _structure_raw(shape, max_states)
        if dead_parts(shape.source):
            known = _Structure(None, None, (), raw)
            size = 256 + 64 * sum(len(row) + 1 for row in raw[0])
        else:
            identity = {str(index): index for index in range(len(shape.callees))}
            rule = _finish("", raw, None, dict.fromkeys(identity, True), identity)
            rule.trans.flags.writeable = False
            rule.accepting.flags.writeable = False
            calling = tuple((state, row) for state, row in enumerate(rule.calls) if row)
            known = _Structure(rule.trans, rule.accepting, calling, None)
            size = 256 + rule.trans.nbytes + 64 * len(calling)
        _STRUCTURES.put(key, known, size)
    return known


def _structure_raw(shape: Shape, max_states: int) -> Raw:
    """A structural rule's untrimmed automaton, its callees named by number: an
    object rule of the usual shape directly, any other by subset construction. (Built
    from the rule as written: the parts cached on their own, such as an object's
    member values, are keyed by the names they call, alike across rules.)"""
    expr = shape.source
    edges, calls, accepting = object_rule(
        expr, functools.partial(_fragment, max_states=max_states), max_states
    ) or _determinise_expr("rule", expr, max_states)
    number = {callee: str(index) for index, callee in enumerate(shape.callees)}
    renamed = [{number[callee]: to for callee, to in row.items()} if row else row for row in calls]
    return edges, renamed, accepting


def _terminal(name: str, expr: Expr, max_states: int) -> RuleDFA | None:
    """A call-free rule (a lexeme), determinised and trimmed once per process; None
    when it accepts nothing."""
    key = (expr, max_states)
    known = _TERMINALS.get(key)
    if known is not None:
        return known[0]
    rule = _direct(name, expr)
    if rule is None:
        parts = _determinise_expr(name, expr, max_states)
        live = _live(parts, {})
        rule = _finish(name, parts, live, {}, {}) if live[0] else None
    elif rule.n_states > max_states:
        raise BudgetExceededError("states per rule", max_states)
    _TERMINALS.put(key, (rule,), 256 + (rule.trans.nbytes if rule is not None else 0))
    return rule


def _direct(name: str, expr: Expr) -> RuleDFA | None:
    """The rule for a lexeme of the usual shapes, straight from its automaton (no
    subset construction): ``/lexeme/`` (a counted window's, with ``lengths``, already
    quoted: its tables as they are) or ``"\"" /body/ "\""``. None for other shapes."""
    quoted = (
        isinstance(expr, Seq)
        and len(expr.items) == 3
        and expr.items[0] == Lit(b'"')
        and expr.items[2] == Lit(b'"')
        and isinstance(expr.items[1], Lex)
    )
    lex = expr.items[1] if quoted else expr  # type: ignore[union-attr]
    if not isinstance(lex, Lex):
        return None
    dfa = lex.dfa
    if not np.asarray(dfa.accepting).any():
        return None  # an empty language (say minLength > maxLength): the general path
    if not quoted:
        if lex.lengths is not None and lex.plain is not None and dfa.start == 0:
            # A counted window's automaton, already quoted (grammars.counted): its
            # read-only table as it is (a copy costs ~1 ms a megabyte where pages are new).
            return RuleDFA(
                name,
                np.asarray(dfa.trans, dtype=np.int32),
                ((),) * dfa.n_states,
                np.asarray(dfa.accepting, dtype=np.bool_),
                lex.lengths,
                counts_over=_unquoted_rule(name + "*", lex.plain),
            )
        trans = np.array(dfa.trans, dtype=np.int32)
        if dfa.start != 0:  # the rule starts in state 0: swap it with the start
            order = np.arange(dfa.n_states)
            order[[0, dfa.start]] = [dfa.start, 0]
            trans = trans[order]
            trans = np.where(trans >= 0, order[np.maximum(trans, 0)], -1).astype(np.int32)
            accepting = np.array(dfa.accepting)[order]
        else:
            accepting = np.array(dfa.accepting)
        return RuleDFA(name, trans, ((),) * dfa.n_states, accepting)
    if (dfa.trans[np.asarray(dfa.accepting), ord('"')] >= 0).any():  # pragma: no cover
        return None  # a body that could go on with a raw quote (never: JSON escapes it)
    return quoted_rule(name, dfa, lex.lengths, lex.keys, lex.plain)


def _unquoted_rule(name: str, dfa: ByteDFA) -> RuleDFA:
    """The call-free rule of ``dfa`` (start 0), its tables as they are."""
    return RuleDFA(name, dfa.trans, ((),) * dfa.n_states, dfa.accepting)


def quoted_rule(
    name: str,
    body: ByteDFA,
    lengths: tuple[int, int | None] | None = None,
    keys: tuple[str, ...] | None = None,
    plain: ByteDFA | None = None,
) -> RuleDFA:
    """The rule ``'"' body '"'``: state 0 is before the opening quote, the last state
    after the closing one (its only accepting state); the body's states follow state 0
    in their order. ``body`` must not read a raw quote where it accepts. ``lengths``
    and ``keys`` are passed on (see :class:`RuleDFA`), and ``plain``, quoted, as its
    ``counts_over``."""
    count = body.n_states + 2
    trans = np.empty((count, 256), dtype=np.int32)
    trans[0] = -1
    trans[-1] = -1
    inner = trans[1:-1]
    np.add(body.trans, body.trans >= 0, out=inner)  # (-1 stays -1: no transition)
    trans[0, ord('"')] = 1 + body.start
    inner[np.asarray(body.accepting), ord('"')] = count - 1
    accepting = np.zeros(count, dtype=np.bool_)
    accepting[-1] = True
    if keys is not None and built_names(body.trans) == keys:
        # (The body is extra_key_body's for these names: this rule is its quoted form.)
        trans.flags.writeable = False
        _KEY_RULES.put(trans, keys)
    over = None if plain is None else quoted_rule(name + "*", plain)
    return RuleDFA(name, trans, ((),) * count, accepting, lengths, keys, over)


# The tables of the rules quoted_rule made around extra_key_body's bodies, with their
# names, by identity (see key_rule_names).
_KEY_RULES: IdentityMemo[tuple[str, ...]] = IdentityMemo()


def key_rule_names(table: npt.NDArray[np.int32]) -> tuple[str, ...] | None:
    """The names of the key lexeme whose (read-only) table ``table`` is, when
    :func:`quoted_rule` made it around :func:`~jsonmode.decoding.automata.keys.extra_key_body`'s
    body of those names: laid out as that body, quoted (state 0 before the opening
    quote, the body's states one up, the closing quote's state last). None for any
    other table, an equal one built elsewhere included (a lookup by identity)."""
    return _KEY_RULES.get(table)


@functools.cache
def plain_string_rule() -> RuleDFA:
    """The rule for any JSON string (what a ``lengths`` rule counts over)."""
    return quoted_rule("string", json_string_body_dfa(any_char_dfa()))


def _determinise_expr(name: str, expr: Expr, max_states: int) -> Raw:
    return _determinise_nfa(name, expr, max_states)[0]


def _determinise_nfa(name: str, expr: Expr, max_states: int) -> tuple[Raw, tuple[bool, ...]]:
    """``expr``'s automaton, and per state whether its NFA set is the end alone: the
    compiled core's ``r5nfa_determinise`` where loaded (the NFA built and determinised
    in C: the same answers, budget errors and checkpoints), else :class:`_NFA` and
    :func:`_determinise`."""
    kernels = native.KERNELS
    if kernels is not None:
        edges, calls, accepting, _, alone = kernels.r5nfa_determinise(
            expr, _EXPR_CLASSES, max_states, checkpoint, BudgetExceededError, False
        )
        return (edges, calls, accepting), alone
    nfa = _NFA()
    start, final = nfa.state(), nfa.state()
    nfa.fragment(expr, start, final, max_states)
    raw, sets = _determinise(name, nfa, start, final, max_states)
    return raw, tuple(len(members) == 1 and final in members for members in sets)


def _fragment(expr: Expr, max_states: int) -> Fragment:
    """``expr`` determinised on its own, for :func:`object_rule` (once per process:
    member values and separators recur in many rules). Callers must not change it."""
    key = (expr, max_states)
    known = _FRAGMENTS.get(key)
    if known is None:
        known = Fragment(*_determinise_nfa("fragment", expr, max_states))
        edges = known.raw[0]
        _FRAGMENTS.put(key, known, 256 + 64 * sum(len(row) + 1 for row in edges))
    return known


def _accepting_rules(grammar: Grammar, fixed: dict[str, bool]) -> dict[str, bool]:
    """Per rule, whether it accepts anything: the least fixed point over the rules'
    expressions, a call accepting once its callee is known to. ``fixed``: rules
    decided already (lexemes)."""
    accepts = {name: fixed.get(name, False) for name in grammar.rules}
    # (Callers come before their callees in a grammar: from the back, one pass
    # settles most grammars and a second confirms it.)
    open_rules = [name for name in reversed(list(grammar.rules)) if name not in fixed]
    changed = True
    while changed:
        changed = False
        for name in open_rules:
            if not accepts[name] and _accepts(grammar.rules[name], accepts):
                accepts[name] = changed = True
    return accepts


def _accepts(expr: Expr, rules: dict[str, bool]) -> bool:
    """Whether ``expr`` accepts some byte string, given which rules do."""
    if isinstance(expr, Lit):
        return True
    if isinstance(expr, Lex):
        return bool(expr.dfa.accepting.any())
    if isinstance(expr, Call):
        return rules.get(expr.rule, False)
    if isinstance(expr, Seq):
        return all(_accepts(item, rules) for item in expr.items)
    if isinstance(expr, Alt):
        return any(_accepts(option, rules) for option in expr.options)
    if isinstance(expr, Rep):
        return expr.low == 0 or _accepts(expr.item, rules)
    if isinstance(expr, Members):
        needed = [member for member, required in expr.members if required]
        return all(_accepts(member, rules) for member in needed) and (
            len(needed) < 2 or _accepts(expr.sep, rules)
        )
    raise TypeError(expr)  # pragma: no cover - Expr is closed


def _live(parts: Raw, accepts: dict[str, bool]) -> list[bool]:
    """The states of one rule's automaton from which acceptance is reachable, calls
    to the rules in ``accepts`` counting as edges: a backwards worklist, linear in
    the number of edges."""
    edges, calls, accepting = parts
    preds: list[list[int]] = [[] for _ in edges]
    for state, row in enumerate(edges):
        for _, _, target in row:
            preds[target].append(state)
        for callee, target in calls[state].items():
            if accepts.get(callee):
                preds[target].append(state)
    live = list(accepting)
    work = [state for state, accepts_here in enumerate(accepting) if accepts_here]
    while work:
        for pred in preds[work.pop()]:
            if not live[pred]:
                live[pred] = True
                work.append(pred)
    return live
