"""Objects whose members may come in any order, of any size: rules made on demand.

With ``property_order="any"`` an object's members may be written in any order, each
at most once, with the required ones all present before the closing brace. What may
come next depends on the *set* of members written so far: 2**n sets for n members.
Up to :data:`LATTICE_MEMBERS` members the automaton builder writes that lattice out
(:meth:`~jsonmode.decoding.automata.network._NFA._members_any_order`). Beyond it, the set is
carried in the parse stack instead, as the identity of the rule on top of the object:

* :func:`expand` replaces such a ``Members`` node by a call to a *family* rule and
  adds a rule per member (its key, colon and value; and the same after a separator),
  and one for the extra keys, if any;
* the family's rule for ``(written, wrote)`` (written: the members' bit set; wrote:
  whether anything, an extra key included, was written) calls each member not yet
  written and, when it returns, *tail-calls* the rule for the set with that member
  added (call entries whose return state is :data:`TAIL`: the caller's frame is
  replaced, so the stack does not grow with the members); it accepts (returns to the
  object's closing brace) once every required member is in the set;
* :class:`RuleTable` makes those rules when a matcher first reaches them, so only
  the sets a generation actually writes exist: one new rule per member written in
  an order not seen before, of ``n + 2`` states that read nothing (their transition
  table is one shared read-only array).

Cost: a family rule is made in microseconds and holds ~100 bytes per member; its
number encodes its set, so numbering takes no memory, and made rules are kept in a
bounded memo (made again when dropped: a rule is a pure function of its number). An
object of this kind nests two stack frames deeper than one written out (the
family's and the member's), which counts against ``max_nesting_depth``. Thread-safe:
a rule made twice by two threads is made equal.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.automata.rule_dfa import RuleDFA
from jsonmode.decoding.ir import Alt, Call, Expr, Grammar, Members, Rep, Seq

__all__ = ["LATTICE_MEMBERS", "TAIL", "Family", "RuleTable", "expand", "number_families"]

LATTICE_MEMBERS = 8  # up to this many members, the lattice of sets is written out
_BUILT_KEPT = 1 << 12  # family rules kept made per network (the rest made again)
TAIL = -1  # a call's return state that makes it a tail call (see ReferenceMatcher.close)


@dataclass(frozen=True)
class Family:
    """One any-order object's members as rule names (filled in by :func:`expand`).

    ``first[i]`` is member ``i`` alone, ``later[i]`` the separator then member ``i``;
    ``extra``/``later_extra`` the same for the extra keys (None: no extra keys);
    ``required`` the bit set of the required members.
    """

    root: str
    first: tuple[str, ...]
    later: tuple[str, ...]
    extra: str | None
    later_extra: str | None
    required: int


def expand(grammar: Grammar) -> tuple[Grammar, dict[str, Family]]:
    """``grammar`` with every any-order ``Members`` node of more than
    :data:`LATTICE_MEMBERS` members replaced by a call to its family's root rule, the
    member rules added, and the families by root name.

    The root rule's expression in the returned grammar is what decides whether the
    family accepts anything (its required members in a row): the automaton builder
    uses it for that analysis only and builds the rule itself from the family.
    """
    families: dict[str, Family] = {}
    added: dict[str, Expr] = {}

    def rewrite(expr: Expr, owner: str) -> Expr:
        if isinstance(expr, Members):
            if not expr.any_order or len(expr.members) <= LATTICE_MEMBERS:
                return expr
            root = f"{owner}#any{len(families)}"
            while root in grammar.rules:  # (a rule named so by the grammar's author)
                root += "'"
            first = tuple(f"{root}/{i}" for i in range(len(expr.members)))
            later = tuple(f"{root}/,{i}" for i in range(len(expr.members)))
            for index, (member, _) in enumerate(expr.members):
                added[first[index]] = member
                added[later[index]] = Seq((expr.sep, member))
            extra = later_extra = None
            if expr.extra is not None:
                extra, later_extra = f"{root}/x", f"{root}/,x"
                added[extra] = expr.extra
                added[later_extra] = Seq((expr.sep, expr.extra))
            required = sum(1 << i for i, (_, needed) in enumerate(expr.members) if needed)
            families[root] = Family(root, first, later, extra, later_extra, required)
            needed = [Call(first[i]) for i, (_, need) in enumerate(expr.members) if need]
            added[root] = Seq((*needed, expr.sep)) if len(needed) > 1 else Seq(tuple(needed))
            return Call(root)
        if isinstance(expr, Seq):
            items = tuple(rewrite(item, owner) for item in expr.items)
            return expr if items == expr.items else Seq(items)
        if isinstance(expr, Alt):
            options = tuple(rewrite(option, owner) for option in expr.options)
            return expr if options == expr.options else Alt(options)
        if isinstance(expr, Rep):
            item = rewrite(expr.item, owner)
            return expr if item is expr.item else Rep(item, expr.low, expr.high)
        return expr

    rules = {name: rewrite(expr, name) for name, expr in grammar.rules.items()}
    if not families:
        return grammar, families
    rules.update(added)
    return Grammar(grammar.root, rules), families


@dataclass(frozen=True)
class _Numbered:
    """A family with its rules as numbers (-1: a member rule that accepts nothing)."""

    first: tuple[int, ...]
    later: tuple[int, ...]
    extra: int
    later_extra: int
    required: int
    trans: npt.NDArray[np.int32]  # (n + 2, 256), all -1, read-only: shared by its rules


class RuleTable(Sequence["RuleDFA"]):
    """A network's rules: those built with it, then family rules made on first use.

    A family rule's number encodes its key (family, written set, wrote), past the
    rules built with the network, so numbering one takes no table and no lock; it is
    made (microseconds) when first looked up, and kept in a bounded memo. ``len()``
    and iteration cover the rules built with the network only: indexing takes any
    number a rule's calls hold. Thread-safe: made rules are equal however often they
    are made.
    """

    def __init__(
        self,
        static: list[RuleDFA | None],
        roots: dict[int, int],
        families: list[_Numbered],
    ) -> None:
        """``static``: the rules built with the network, None where ``roots`` has the
        number: a family's root (by family index), made here."""
        self._static = static
        self._families = families
        self._keys = {number: (family, 0, 0) for number, family in roots.items()}
        self._built: dict[int, RuleDFA] = {}

    def __len__(self) -> int:
        return len(self._static)

    @property
    def complete(self) -> bool:
        """Whether every rule was built with the network (it has no family, whose
        rules are made on demand)."""
        return not self._families and not self._keys

    def __iter__(self) -> Iterator[RuleDFA]:
        return (self[number] for number in range(len(self._static)))

    @overload
    def __getitem__(self, index: int) -> RuleDFA: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[RuleDFA]: ...

    def __getitem__(self, index: int | slice) -> RuleDFA | Sequence[RuleDFA]:
        if isinstance(index, slice):
            return [self[number] for number in range(len(self))[index]]
        if 0 <= index < len(self._static):
            rule = self._static[index]
            if rule is not None:
                return rule
        built = self._built.get(index)
        if built is None:
            built = self._make(self._key(index))
            if len(self._built) >= _BUILT_KEPT:
                self._built.clear()  # (made again on demand: a pure function of the key)
            self._built[index] = built
        return built

    def _key(self, number: int) -> tuple[int, int, int]:
        """The key a family rule's number encodes (IndexError: no rule has it)."""
        key = self._keys.get(number)
        if key is not None:
            return key
        offset = number - len(self._static)
        if offset < 0 or not self._families:
            raise IndexError(number)
        family, rest = offset % len(self._families), offset // len(self._families)
        written, wrote = rest >> 1, rest & 1
        if not wrote or written >> len(self._families[family].first):
            raise IndexError(number)
        return family, written, wrote

    def _number(self, family: int, written: int) -> int:
        """The number of the rule for ``(family, written, wrote=1)``."""
        return len(self._static) + family + len(self._families) * (written << 1 | 1)

    def _make(self, key: tuple[int, int, int]) -> RuleDFA:
        """The rule for ``(family, written, wrote)``: state 0 calls every member not
        written (and the extra keys), each returning to its own state, which
        tail-calls the rule for the set with it added."""
        index, written, wrote = key
        family = self._families[index]
        count = len(family.first)
        members = family.later if wrote else family.first
        calls: list[tuple[tuple[int, int], ...]] = [()] * (count + 2)
        entries: list[tuple[int, int]] = []
        for member in range(count):
            if written >> member & 1 or members[member] < 0:
                continue
            entries.append((members[member], 1 + member))
            calls[1 + member] = ((self._number(index, written | 1 << member), TAIL),)
        extra = family.later_extra if wrote else family.extra
        if extra >= 0:
            entries.append((extra, count + 1))
            calls[count + 1] = ((self._number(index, written), TAIL),)
        calls[0] = tuple(entries)
        accepting = np.zeros(count + 2, dtype=np.bool_)
        accepting[0] = written & family.required == family.required
        accepting.flags.writeable = False
        return RuleDFA(f"{index}:{written:x}:{wrote}", family.trans, tuple(calls), accepting)


def number_families(
    families: dict[str, Family], number: dict[str, int], accepts: dict[str, bool]
) -> tuple[dict[int, int], list[_Numbered]]:
    """The families with their rules numbered (members that accept nothing as -1),
    and each root's number with its family index — for :class:`RuleTable`."""
    numbered: list[_Numbered] = []
    roots: dict[int, int] = {}

    def of(name: str | None) -> int:
        return number[name] if name is not None and accepts.get(name) else -1

    for family in families.values():
        if not accepts.get(family.root):
            continue
        trans = np.full((len(family.first) + 2, 256), -1, dtype=np.int32)
        trans.flags.writeable = False
        roots[number[family.root]] = len(numbered)
        numbered.append(
            _Numbered(
                tuple(map(of, family.first)),
                tuple(map(of, family.later)),
                of(family.extra),
                of(family.later_extra),
                family.required,
                trans,
            )
        )
    return roots, numbered
