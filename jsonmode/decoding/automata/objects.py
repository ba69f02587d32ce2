"""An object rule's automaton, built straight from its ``Members`` (no NFA, no subset
construction).

An object rule ``"{" <members in order> "}"`` determinises into few kinds of state:
the position between members (``Open``), the separator's states, the trie of the
keys that may come next, each member's value, and the closing brace. This module
writes those states out directly, in breadth-first order, each with the row and
calls the subset construction would give it: :func:`object_rule` returns an
automaton isomorphic to :func:`~jsonmode.decoding.automata.network.build_network`'s
general path (same states, same edges, same calls; the tests compare the two on
every object rule of a MaskBench sample), in a fraction of the time.

The member values (after their key) and the separator are small expressions alike
in many rules: they are determinised by the general path, as fragments, and cached
there. Where the rule is of another shape, or two parts could read the same byte at
the same point (a fragment that could go on with a separator's byte, keys of which
one is a prefix of another), :func:`object_rule` returns None and the caller takes
the general path.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jsonmode import native
from jsonmode.budget import checkpoint
from jsonmode.decoding.ir import Call, Expr, Lit, Members, Seq
from jsonmode.errors import BudgetExceededError

__all__ = ["Fragment", "Interval", "Raw", "extend_row", "object_rule"]

Interval = tuple[int, int, int]  # (lo, hi, target): bytes lo..hi inclusive go to target
# A rule's automaton before trimming: per state, its byte row, its calls (callee ->
# return state) and whether it accepts; state 0 starts.
Raw = tuple[list[list[Interval]], list[dict[str, int]], list[bool]]


@dataclass(frozen=True, slots=True)
class Fragment:
    """An expression determinised on its own (state 0 starts): its automaton, and per
    state whether it is exactly the expression's end (nothing else is left in it:
    joined to what follows, it *is* the state that follows)."""

    raw: Raw
    exits: tuple[bool, ...]


class _NotDirect(Exception):
    """The rule is not written out directly (a member that does not start with its
    key, keys of which one is a prefix of another, an empty or calling separator, two
    parts that read the same byte at the same point): the general path builds it."""


def object_rule(expr: Expr, fragment: Callable[[Expr], Fragment], max_states: int) -> Raw | None:
    """The automaton of ``"{" Members "}"`` (in declared order, the extra keys a call),
    or None for a rule of another shape or where parts overlap.

    ``fragment(e)`` determinises an expression on its own (cached by the caller).

    Raises:
        BudgetExceededError: the automaton needs more than ``max_states`` states.
    """
    shape = _shape(expr)
    if shape is None:
        return None
    try:
        return _Builder(*shape, fragment).build(max_states)
    except _NotDirect:
        return None


def _shape(expr: Expr) -> tuple[bytes, Members, bytes] | None:
    if type(expr) is not Seq or len(expr.items) != 3:
        return None
    opening, members, closing = expr.items
    if type(opening) is not Lit or type(members) is not Members or type(closing) is not Lit:
        return None
    if not opening.data or not closing.data or members.any_order:
        return None
    if members.extra is not None and type(members.extra) is not Call:
        return None
    return opening.data, members, closing.data


# State keys, one per state of the automaton:
#   ("o", i, 0)      i bytes of the opening literal read (i = 0: the rule's start)
#   ("O", p, wrote)  before member p; wrote (1): some member or extra key written already
#   ("P", p, s)      inside the separator after position p, in its fragment's state s
#   ("k", q, i)      i bytes of member q's key read, no other key alike so far
#   ("K", g, i)      i bytes read of a prefix that the keys of group g (several) share
#   ("F", q, f)      member q's value (what follows its key), in its fragment's state f
#   ("c", i, 0)      i bytes of the closing literal read (all of them: accepting)
_Key = tuple[str, int, int]
_Part = tuple[int, int, _Key]  # bytes lo..hi lead to a state


class _Builder:
    def __init__(
        self,
        opening: bytes,
        members: Members,
        closing: bytes,
        fragment: Callable[[Expr], Fragment],
    ) -> None:
        self.opening = opening
        self.closing = closing
        self.extra = members.extra.rule if isinstance(members.extra, Call) else None
        keys: list[bytes] = []
        values: list[Fragment | None] = []
        required: list[bool] = []
        for count, (member, needed) in enumerate(members.members):
            if not count & 63:
                checkpoint()
            if type(member) is Lit:
                key, rest = member.data, None
            elif type(member) is Seq and member.items and isinstance(member.items[0], Lit):
                # (What follows the key, as the general path lays it out: the key's
                # last byte leads to the next item's start, or to the member's end.)
                items = member.items
                key = member.items[0].data
                rest = None if len(items) == 1 else items[1] if len(items) == 2 else Seq(items[1:])
            else:
                raise _NotDirect
            if not key:
                raise _NotDirect
            keys.append(key)
            values.append(None if rest is None else fragment(rest))
            required.append(needed)
        ordered = sorted(keys)
        for shorter, longer in itertools.pairwise(ordered):
            if longer.startswith(shorter):
                raise _NotDirect  # a key that is a prefix of another (or equal)
        self.keys = keys
        self.values = values
        self.sep = fragment(members.sep)
        _, sep_calls, sep_accepting = self.sep.raw
        if sep_accepting[0] or any(sep_calls):
            raise _NotDirect  # an empty or calling separator
        count = len(keys)
        # Per position p: the members that may come next (p .. the first required one)
        # and whether the object may close there (no required member left). Ranges,
        # found from the back: linear in the members (many optional members would
        # make tuples quadratic in memory before the state budget could say no).
        self.candidates: list[range] = [range(0)] * (count + 1)
        self.closable: list[bool] = [True] * (count + 1)
        stop: int | None = None
        for p in range(count, -1, -1):
            if p < count and required[p]:
                stop = p
            self.candidates[p] = range(p, count if stop is None else stop + 1)
            self.closable[p] = stop is None
        # Groups of several keys sharing a prefix, numbered as they are met.
        self.groups: dict[tuple[int, ...], int] = {}
        self.grouped: list[tuple[int, ...]] = []

    # -- rows of the parts ------------------------------------------------------------

    def _close(self, p: int) -> list[_Part]:
        if not self.closable[p]:
            return []
        byte = self.closing[0]
        return [(byte, byte, _CLOSING)]

    def _keys(self, p: int) -> list[_Part]:
        """The first bytes of the keys that may come at position ``p``."""
        return self._branch(self.candidates[p], 0)

    def _branch(self, qs: Sequence[int], read: int) -> list[_Part]:
        """The next byte of each key of ``qs`` (which share ``read`` bytes), to the
        state after it."""
        groups: dict[int, list[int]] = {}
        for q in qs:
            groups.setdefault(self.keys[q][read], []).append(q)
        return [(byte, byte, self._trie(tuple(group), read + 1)) for byte, group in groups.items()]

    def _trie(self, qs: tuple[int, ...], read: int) -> _Key:
        """The state after ``read`` bytes that the keys of ``qs`` share."""
        if len(qs) > 1:
            group = self.groups.get(qs)
            if group is None:
                group = self.groups[qs] = len(self.grouped)
                self.grouped.append(qs)
            return ("K", group, read)
        q = qs[0]
        return ("k", q, read) if read < len(self.keys[q]) else self._value(q, 0)

    def _value(self, q: int, f: int) -> _Key:
        value = self.values[q]
        if value is None or value.exits[f]:
            return ("O", q + 1, 1)
        return ("F", q, f)

    def _sep_first(self, p: int) -> list[_Part]:
        """The separator's first bytes at position ``p`` (none where nothing may follow)."""
        if not self.candidates[p] and self.extra is None:
            return []
        return [(lo, hi, self._sep_state(p, s)) for lo, hi, s in self.sep.raw[0][0]]

    @staticmethod
    def _sep_state(p: int, s: int) -> _Key:
        return ("O", p, 1) if s == 0 else ("P", p, s)

    def _extra(self, p: int) -> dict[str, _Key]:
        return {} if self.extra is None else {self.extra: ("O", p, 1)}

    def _state(self, key: _Key) -> tuple[list[_Part], dict[str, _Key], bool]:
        """A state's byte row (in any order), calls and acceptance."""
        kind, a, b = key  # (not "k": the caller writes those)
        if kind == "F":
            value = self.values[a]
            assert value is not None
            edges, calls, accepting = value.raw
            row = [(lo, hi, self._value(a, t)) for lo, hi, t in edges[b]]
            if accepting[b]:
                row += self._sep_first(a + 1) + self._close(a + 1)
            return row, {c: self._value(a, t) for c, t in calls[b].items()}, False
        if kind == "K":
            return self._branch(self.grouped[a], b), {}, False
        if kind == "O":
            if b:
                return self._sep_first(a) + self._close(a), {}, False
            return self._keys(a) + self._close(a), self._extra(a), False
        if kind == "P":
            sep_edges, _, sep_accepting = self.sep.raw
            row = [(lo, hi, self._sep_state(a, t)) for lo, hi, t in sep_edges[b]]
            if sep_accepting[b]:
                return row + self._keys(a), self._extra(a), False
            return row, {}, False
        data = self.opening if kind == "o" else self.closing
        if a == len(data):  # (the opening's end is ("O", 0, 0): only the closing's here)
            return [], {}, True
        there = ("O", 0, 0) if kind == "o" and a + 1 == len(data) else (kind, a + 1, 0)
        return [(data[a], data[a], there)], {}, False

    def build(self, max_states: int) -> Raw:
        """The automaton, states numbered in breadth-first order: the compiled core's
        ``r3comp_object_build`` where loaded, else :meth:`build_py`, with the same
        answers (the same numbering, the same budget error at the same state, the
        deadline checked every 64 states). Raises _NotDirect where two parts overlap."""
        kernels = native.KERNELS
        if kernels is None:
            return self.build_py(max_states)
        built = kernels.r3comp_object_build(
            self.opening, self.closing, self.keys,
            [None if value is None else (*value.raw, value.exits) for value in self.values],
            (self.sep.raw[0], self.sep.raw[2]),
            [candidates.stop for candidates in self.candidates], self.closable,
            self.extra, max_states, checkpoint, BudgetExceededError,
        )  # fmt: skip
        if built is None:
            raise _NotDirect
        edges, calls, accepting = built
        return edges, calls, accepting

    def build_py(self, max_states: int) -> Raw:
        """:meth:`build` in Python (the reference)."""
        keys = self.keys
        index: dict[_Key, int] = {_START: 0}
        order: list[_Key] = [_START]
        stops: dict[int, int] = {}  # a run of "k" states: its first number -> bytes read after it

        def number(key: _Key) -> int:
            """The state's number, given on first sight. The rest of a key from a "k"
            state on is numbered at once, up to a state of it numbered already."""
            known = index.get(key)
            if known is None:
                known = index[key] = len(order)
                if key[0] == "k":
                    _, q, read = key
                    stop, end = read + 1, len(keys[q])
                    while stop < end and ("k", q, stop) not in index:
                        index["k", q, stop] = known + stop - read
                        stop += 1
                    stops[known] = stop
                    order.extend([key] * (stop - read))
                else:
                    order.append(key)
                if len(order) > max_states:
                    raise BudgetExceededError("states per rule", max_states)
            return known

        edges: list[list[Interval]] = []
        calls: list[dict[str, int]] = []
        accepting: list[bool] = []
        no_calls: dict[str, int] = {}  # (shared by the rows that call nothing: never written)
        position = steps = 0
        while position < len(order):
            key = order[position]
            if key[0] == "k":  # a run of one key's bytes (most states): a chain
                _, q, read = key
                data, stop = keys[q], stops[position]
                edges += [
                    [(byte, byte, position + 1 + i)] for i, byte in enumerate(data[read:stop])
                ]
                last = ("k", q, stop) if stop < len(data) else self._value(q, 0)
                edges[-1] = [(data[stop - 1], data[stop - 1], number(last))]
                count = stop - read
                calls += [no_calls] * count
                accepting += [False] * count
                position += count
                continue
            position += 1
            steps += 1
            if not steps & 63:
                checkpoint()
            parts, called, accepts = self._state(key)
            row: list[Interval] = []
            if len(parts) == 1:  # (most states: one interval, nothing to sort or join)
                lo, hi, there = parts[0]
                target = index.get(there)
                row.append((lo, hi, number(there) if target is None else target))
            else:
                parts.sort(key=_low)
                last_hi = -1
                for lo, hi, there in parts:
                    if lo <= last_hi:
                        raise _NotDirect  # two parts read the same byte here
                    last_hi = hi
                    target = index.get(there)
                    if target is None:
                        target = number(there)
                    # (extend_row, inlined)
                    if row and row[-1][1] == lo - 1 and row[-1][2] == target:
                        row[-1] = (row[-1][0], hi, target)
                    else:
                        row.append((lo, hi, target))
            edges.append(row)
            calls.append(
                {callee: number(there) for callee, there in called.items()} if called else no_calls
            )
            accepting.append(accepts)
        return edges, calls, accepting


_START: _Key = ("o", 0, 0)
_CLOSING: _Key = ("c", 1, 0)


def extend_row(row: list[Interval], lo: int, hi: int, target: int) -> None:
    """Append bytes ``lo..hi`` to ``target`` to a row built in byte order, joined to
    the last interval where that one ends just before and has the same target."""
    if row and row[-1][1] == lo - 1 and row[-1][2] == target:
        row[-1] = (row[-1][0], hi, target)
    else:
        row.append((lo, hi, target))


def _low(part: _Part) -> int:
    return part[0]
