"""The decoder's intermediate form: a grammar of rules over bytes, printable.

A schema compiles to a :class:`Grammar`: named rules, each an expression built
from byte literals (:class:`Lit`), lexemes given by a byte automaton
(:class:`Lex`: string bodies, numbers, patterns), calls to other rules
(:class:`Call`), sequences, alternatives and bounded repetitions. Structured
values (objects, arrays, references) are rules of their own; scalars are inlined
into their parent. ``str(grammar)`` prints one line per rule, and golden tests pin
that printed form.

Everything here is immutable and hashable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jsonmode.regex import ByteDFA

__all__ = [
    "EMPTY",
    "Alt",
    "Call",
    "Expr",
    "Grammar",
    "Lex",
    "Lit",
    "Members",
    "Rep",
    "Seq",
    "alt",
    "called",
    "expr_bytes",
    "nodes",
    "renamed_calls",
    "seq",
]


@dataclass(frozen=True, slots=True)
class Lit:
    """Exactly these bytes."""

    data: bytes

    def __str__(self) -> str:
        return json.dumps(self.data.decode("utf-8", "backslashreplace"))


@dataclass(frozen=True, slots=True, eq=False)
class Lex:
    """A lexeme: any byte string the automaton accepts. ``label`` is what prints.

    ``lengths``: set on a JSON string body that is *any* string of ``low .. high``
    code points (``high`` None: unbounded) and nothing else, so that the mask engine
    may treat it as the plain string body plus a count (see ``RuleDFA.lengths``); or,
    with ``plain``, on a GBNF counted window's whole automaton ``q X{low,high} q``,
    quotes included, start 0 (see ``grammars.counted``).
    ``keys``: set on :func:`~jsonmode.decoding.automata.keys.extra_key_body` of these names
    (see ``RuleDFA.keys``).
    """

    label: str
    dfa: ByteDFA = field(repr=False, compare=False)
    lengths: tuple[int, int | None] | None = field(default=None, repr=False, compare=False)
    keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    # With ``lengths``: the automaton ``q X* q`` whose ``q X{low,high} q`` this lexeme
    # is, when the count is not of a JSON string's code points (see
    # ``RuleDFA.counts_over``).
    plain: ByteDFA | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return f"/{self.label}/"

    # Lexemes compare by label: the compiler gives equal automata equal labels.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lex) and other.label == self.label

    def __hash__(self) -> int:
        return hash(("Lex", self.label))


@dataclass(frozen=True, slots=True)
class Call:
    """The rule named ``rule``."""

    rule: str

    def __str__(self) -> str:
        return self.rule


@dataclass(frozen=True, slots=True, repr=False)
class Seq:
    items: tuple[Expr, ...]

    def __str__(self) -> str:
        return _render(self, _str_pieces)

    def __repr__(self) -> str:
        return _render(self, _repr_pieces)


@dataclass(frozen=True, slots=True, repr=False)
class Alt:
    options: tuple[Expr, ...]

    def __str__(self) -> str:
        return _render(self, _str_pieces)

    def __repr__(self) -> str:
        return _render(self, _repr_pieces)


@dataclass(frozen=True, slots=True, repr=False)
class Rep:
    """``item`` repeated ``low`` to ``high`` times (``high`` None: unbounded)."""

    item: Expr
    low: int
    high: int | None

    def __str__(self) -> str:
        return _render(self, _str_pieces)

    def __repr__(self) -> str:
        return _render(self, _repr_pieces)


@dataclass(frozen=True, slots=True, repr=False)
class Members:
    """The members of an object, between its braces.

    ``members`` are ``(member, required)`` pairs: in declared order (optional ones
    may be left out), or in any order when ``any_order``. ``extra`` (usually a rule
    call) may appear any number of times anywhere. Consecutive members are separated
    by ``sep``. Compiles to a linear chain of states (a subset lattice for any order),
    where spelling it out with ``Alt``/``Rep`` would copy each member many times.
    """

    members: tuple[tuple[Expr, bool], ...]
    extra: Expr | None
    sep: Expr
    any_order: bool = False

    def __str__(self) -> str:
        return _render(self, _str_pieces)

    def __repr__(self) -> str:
        return _render(self, _repr_pieces)


Expr = Lit | Lex | Call | Seq | Alt | Rep | Members

EMPTY = Seq(())

# -- printing ----------------------------------------------------------------------------
#
# Expressions nest as deep as the schema's optional suffixes (a thousand prefixItems are a
# thousand nested ``( "," x ... )?``), deeper than Python's recursion limit, so neither
# ``str`` nor ``repr`` recurses: each node is cut into pieces (text, or a child node to
# print there) and an explicit stack writes them in order. The printed forms are those
# the recursive definitions gave (golden tests pin ``str``; ``repr`` is the dataclass
# one).

_Piece = str | Lit | Lex | Call | Seq | Alt | Rep | Members


def _render(expr: Expr, pieces: Callable[[Expr], list[_Piece]]) -> str:
    """``expr`` printed by ``pieces`` (a node's text and children, in order), without
    recursion: time and memory linear in the output."""
    out: list[str] = []
    stack: list[_Piece] = [expr]
    while stack:
        piece = stack.pop()
        if isinstance(piece, str):
            out.append(piece)
        else:
            stack.extend(reversed(pieces(piece)))
    return "".join(out)


def _str_pieces(expr: Expr) -> list[_Piece]:
    """One node of ``str(expr)``: grammar notation."""
    if isinstance(expr, Seq):
        return _joined([_wrapped(item, Alt) for item in expr.items], " ")
    if isinstance(expr, Alt):
        if not expr.options:
            return ["NEVER"]
        return _joined([_wrapped(option, Alt) for option in expr.options], " | ")
    if isinstance(expr, Rep):
        inner = _wrapped(expr.item, (Seq, Alt, Rep))
        if (expr.low, expr.high) == (0, 1):
            return [*inner, "?"]
        if (expr.low, expr.high) == (0, None):
            return [*inner, "*"]
        if (expr.low, expr.high) == (1, None):
            return [*inner, "+"]
        high = "" if expr.high is None else str(expr.high)
        return [*inner, f"{{{expr.low},{high}}}"]
    if isinstance(expr, Members):
        parts: list[list[_Piece]] = [
            [member, "" if needed else "?"] for member, needed in expr.members
        ]
        if expr.extra is not None:
            parts.append([expr.extra, "*"])
        order = "any order" if expr.any_order else "in order"
        return [f"<{order}: ", *_joined(parts, " , "), ">"]
    return [str(expr)]  # (a leaf: Lit, Lex, Call)


def _repr_pieces(expr: Expr) -> list[_Piece]:
    """One node of ``repr(expr)``: what the dataclass repr writes."""
    if isinstance(expr, Seq):
        return ["Seq(items=", *_tuple([[item] for item in expr.items]), ")"]
    if isinstance(expr, Alt):
        return ["Alt(options=", *_tuple([[option] for option in expr.options]), ")"]
    if isinstance(expr, Rep):
        return ["Rep(item=", expr.item, f", low={expr.low!r}, high={expr.high!r})"]
    if isinstance(expr, Members):
        members = _tuple([["(", member, f", {needed!r})"] for member, needed in expr.members])
        extra: list[_Piece] = ["None"] if expr.extra is None else [expr.extra]
        return [
            "Members(members=",
            *members,
            ", extra=",
            *extra,
            ", sep=",
            expr.sep,
            f", any_order={expr.any_order!r})",
        ]
    return [repr(expr)]  # (a leaf: Lit, Lex, Call)


def _joined(parts: list[list[_Piece]], separator: str) -> list[_Piece]:
    out: list[_Piece] = []
    for index, part in enumerate(parts):
        if index:
            out.append(separator)
        out.extend(part)
    return out


def _tuple(parts: list[list[_Piece]]) -> list[_Piece]:
    """A tuple's repr around its items' pieces (``(x,)`` for one item)."""
    return ["(", *_joined(parts, ", "), "," if len(parts) == 1 else "", ")"]


def _wrapped(expr: Expr, kinds: type | tuple[type, ...]) -> list[_Piece]:
    """``expr`` in parentheses when it is one of ``kinds`` and prints as something."""
    atomic = _prints_nothing(expr) or (isinstance(expr, Alt) and not expr.options)
    return [expr] if atomic or not isinstance(expr, kinds) else ["( ", expr, " )"]


def _prints_nothing(expr: Expr) -> bool:
    """Whether ``str(expr)`` is empty: an empty sequence, or one rule call with an
    empty name, inside any number of one-element sequences and alternatives."""
    while True:
        if isinstance(expr, Seq) and len(expr.items) <= 1:
            if not expr.items:
                return True
            expr = expr.items[0]
        elif isinstance(expr, Alt) and len(expr.options) == 1:
            expr = expr.options[0]
        else:
            return isinstance(expr, Call) and not expr.rule


def seq(*items: Expr) -> Expr:
    """A flattened sequence; adjacent literals merge."""
    flat: list[Expr] = []
    for item in items:
        parts = item.items if isinstance(item, Seq) else (item,)
        for part in parts:
            if flat and isinstance(part, Lit) and isinstance(flat[-1], Lit):
                flat[-1] = Lit(flat[-1].data + part.data)
            else:
                flat.append(part)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*options: Expr) -> Expr:
    """A flattened alternative without duplicates (order kept). Linear in the options
    (an enum of 100 000 values is one call): past a few, a set remembers them."""
    flat: list[Expr] = []
    seen: set[Expr] | None = None
    for option in options:
        for part in option.options if isinstance(option, Alt) else (option,):
            if seen is None:
                if part not in flat:
                    flat.append(part)
                    if len(flat) > 16:
                        seen = set(flat)
            elif part not in seen:
                seen.add(part)
                flat.append(part)
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


@dataclass(frozen=True)
class Grammar:
    """Rules by name; ``root`` names the start rule. Printable; immutable."""

    root: str
    rules: Mapping[str, Expr]

    def __str__(self) -> str:
        return "\n".join(f"{name} ::= {expr}" for name, expr in self.rules.items())

    def calls(self, name: str) -> Iterator[str]:
        """Names of the rules that rule ``name`` calls."""
        return called(self.rules[name])


def called(expr: Expr) -> Iterator[str]:
    """The rule names ``expr`` calls, anywhere in it (an object's members included),
    in the order :func:`nodes` meets them (that walk, inlined: compiles walk every
    rule's calls several times)."""
    stack = [expr]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        kind = type(node)
        if kind is Call:
            yield node.rule  # type: ignore[union-attr]
        elif kind is Seq:
            extend(node.items)  # type: ignore[union-attr]
        elif kind is Alt:
            extend(node.options)  # type: ignore[union-attr]
        elif kind is Rep:
            push(node.item)  # type: ignore[union-attr]
        elif kind is Members:
            extend(member for member, _ in node.members)  # type: ignore[union-attr]
            push(node.sep)  # type: ignore[union-attr]
            if node.extra is not None:  # type: ignore[union-attr]
                push(node.extra)  # type: ignore[union-attr]


def nodes(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, itself first (an object's members included), depth first
    without recursion."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Seq):
            stack.extend(node.items)
        elif isinstance(node, Alt):
            stack.extend(node.options)
        elif isinstance(node, Rep):
            stack.append(node.item)
        elif isinstance(node, Members):
            stack.extend(member for member, _ in node.members)
            stack.append(node.sep)
            if node.extra is not None:
                stack.append(node.extra)


def expr_bytes(expr: Expr | None) -> int:
    """Roughly what an expression holds in memory (its lexemes' transition tables), for
    cache budgets."""
    if isinstance(expr, Lex):
        return 256 + int(expr.dfa.trans.nbytes)
    if isinstance(expr, Seq):
        return 64 + sum(map(expr_bytes, expr.items))
    if isinstance(expr, Alt):
        return 64 + sum(map(expr_bytes, expr.options))
    if isinstance(expr, Rep):
        return 64 + expr_bytes(expr.item)
    return 64


def renamed_calls(expr: Expr, rename: Callable[[str], str]) -> Expr:
    """``expr`` with every rule it calls renamed by ``rename`` (a grammar's rules copied
    under new names: a GBNF body bound into another grammar). Linear in ``expr``."""
    if isinstance(expr, Call):
        return Call(rename(expr.rule))
    if isinstance(expr, Seq):
        return Seq(tuple(renamed_calls(item, rename) for item in expr.items))
    if isinstance(expr, Alt):
        return Alt(tuple(renamed_calls(option, rename) for option in expr.options))
    if isinstance(expr, Rep):
        return Rep(renamed_calls(expr.item, rename), expr.low, expr.high)
    if isinstance(expr, Members):
        return Members(
            tuple((renamed_calls(member, rename), needed) for member, needed in expr.members),
            None if expr.extra is None else renamed_calls(expr.extra, rename),
            renamed_calls(expr.sep, rename),
            expr.any_order,
        )
    return expr
