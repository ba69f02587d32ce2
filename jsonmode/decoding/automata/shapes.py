"""A rule up to the names of the rules it calls: the key its automaton is cached by.

A rule's automaton depends on its expression, and on the rules it calls only through
their names (a call edge names its callee; which callees accept, and their numbers,
come in when the network is finished). Most structural rules differ from schema to
schema in those names alone: every array of one item rule is ``"[" ( | item ( ","
" "? item )* ) "]"``, every document root ``" "? value``, every extra-key rule
``key ":" " "? value``. :func:`shape_of` numbers the callees ``0``, ``1``, ... in the
order of their first call (depth first, in the expression's order), so that such
rules share one :class:`Shape`, and one automaton per process (see
:func:`~jsonmode.decoding.automata.network.build_network`).

A shape is keyed by a text that spells the expression unambiguously (literals and
lexeme labels quoted, callees by number): hashed and compared as one string, where
comparing expressions would walk them node by node.

Cost: one walk of the expression, linear in its size, the first time that
expression object is met: a network's rules are mostly the same objects from one
schema to the next (its lexemes and the any-value rules, built once per process), and
their shapes are remembered by identity. Pure; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from jsonmode.budget import checkpoint
from jsonmode.decoding.automata.families import LATTICE_MEMBERS
from jsonmode.decoding.ir import Alt, Call, Expr, Lex, Lit, Members, Rep, Seq
from jsonmode.lru import Lru

__all__ = ["Shape", "dead_parts", "shape_of"]


@dataclass(frozen=True, slots=True, eq=False)
class Shape:
    """A rule's expression up to its callees' names.

    ``key`` spells the expression with callee ``i`` as its number; ``callees`` are
    the real names in that order; ``structural``: it calls a rule or holds an
    object's members (it is not a lexeme); ``families``: it holds an any-order object
    too big for its lattice (see :mod:`~jsonmode.decoding.automata.families`); ``source`` is
    the expression itself. Equal and hashed by ``key`` alone.
    """

    key: str
    callees: tuple[str, ...]
    structural: bool
    families: bool
    source: Expr

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)


def shape_of(expr: Expr) -> Shape:
    """``expr``'s shape (see module). Checks the compile's deadline first (a network
    of many rules takes their shapes in one go)."""
    checkpoint()
    known = _recent.get(id(expr))
    if known is not None and known.source is expr:
        return known
    walk = _Walk()
    walk.spell(expr)
    key = "".join(walk.parts)
    shape = Shape(key, tuple(walk.names), walk.structural, walk.families, expr)
    # (By identity: the shape holds the expression, so its number is not reused while
    # the entry lives.)
    _recent.put(id(expr), shape, walk.size + 2 * len(key))
    return shape


# The shapes of the expressions met lately, by the expression object's number (see
# shape_of): 16 MiB at most, the expressions they hold alive counted in.
_recent: Lru[int, Shape] = Lru(16 << 20)


class _Walk:
    __slots__ = ("families", "names", "parts", "size", "structural")

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.parts: list[str] = []
        self.structural = False
        self.families = False
        self.size = 0  # (what the expression holds, roughly: as ir.expr_bytes counts)

    def spell(self, expr: Expr) -> None:
        """Append ``expr``'s spelling to ``parts`` (each node's spelling delimits
        itself: quoted leaves, bracketed lists)."""
        parts = self.parts
        kind = type(expr)
        self.size += 64
        if kind is Lit:
            parts.append(repr(expr.data))  # type: ignore[union-attr]
        elif kind is Call:
            self.structural = True
            number = self.names.get(expr.rule)  # type: ignore[union-attr]
            if number is None:
                number = self.names[expr.rule] = len(self.names)  # type: ignore[union-attr]
            parts.append(f"@{number} ")
        elif kind is Seq:
            parts.append("(")
            for item in expr.items:  # type: ignore[union-attr]
                self.spell(item)
            parts.append(")")
        elif kind is Alt:
            parts.append("[")
            for option in expr.options:  # type: ignore[union-attr]
                self.spell(option)
            parts.append("]")
        elif kind is Lex:
            parts.append("/" + repr(expr.label))  # type: ignore[union-attr]
            self.size += 192 + int(expr.dfa.trans.nbytes)  # type: ignore[union-attr]
        elif kind is Rep:
            parts.append(f"{{{expr.low},{expr.high}")  # type: ignore[union-attr]
            self.spell(expr.item)  # type: ignore[union-attr]
            parts.append("}")
        elif kind is Members:
            self._members(expr)  # type: ignore[arg-type]
        else:  # pragma: no cover - Expr is closed
            raise TypeError(expr)

    def _members(self, node: Members) -> None:
        self.structural = True
        if node.any_order and len(node.members) > LATTICE_MEMBERS:
            self.families = True
        parts = self.parts
        parts.append("<*" if node.any_order else "<")
        for member, needed in node.members:
            parts.append("!" if needed else "?")
            self.spell(member)
        parts.append("|")
        self.spell(node.sep)
        if node.extra is not None:
            parts.append("+")
            self.spell(node.extra)
        parts.append(">")


def dead_parts(expr: Expr) -> bool:
    """Whether some part of ``expr`` accepts nothing whatever the rules it calls
    accept: an empty alternative (``NEVER``) or a lexeme of an empty language."""
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is Seq:
            stack.extend(node.items)  # type: ignore[union-attr]
        elif kind is Alt:
            if not node.options:  # type: ignore[union-attr]
                return True
            stack.extend(node.options)  # type: ignore[union-attr]
        elif kind is Rep:
            stack.append(node.item)  # type: ignore[union-attr]
        elif kind is Members:
            stack.extend(member for member, _ in node.members)  # type: ignore[union-attr]
            stack.append(node.sep)  # type: ignore[union-attr]
            if node.extra is not None:  # type: ignore[union-attr]
                stack.append(node.extra)  # type: ignore[union-attr]
        elif kind is Lex and not node.dfa.accepting.any():  # type: ignore[union-attr]
            return True
    return False
