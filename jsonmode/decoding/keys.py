"""Byte automata for object keys that must differ from a set of declared names.

``additionalProperties`` applies to the keys no declared property claims, so the
decoder must keep an extra key from spelling a declared name. The exact automaton
(the complement of the names, lowered through every JSON escape) is built by
:mod:`jsonmode.decoding.regex` at a cost of milliseconds per object and hundreds
of states. For the common case — names of printable ASCII without ``"`` or ``\\`` —
:func:`extra_key_body` builds a small equivalent directly: a trie of the names
over the plain JSON string body.

Spelled canonically (the default, what generation writes) it is exactly the exact
automaton. With ``complete=True`` (every JSON spelling, for ``accepts``) there is one
difference, on purpose: while a key is still a prefix of a declared name, ``\\/``
and ``\\uXXXX`` escapes of printable ASCII are refused (``json.dumps`` never writes
them; allowing them would need an escape sub-automaton per trie node). Everything
``json.dumps`` writes, with ``ensure_ascii`` on or off, is accepted exactly when the
key is not a declared name; nothing that decodes to a declared name is ever accepted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from jsonmode.decoding import regex as rx
from jsonmode.decoding.budget import checkpoint
from jsonmode.errors import BudgetExceededError

__all__ = ["extra_key_body", "key_prefixes"]

_SHORT_ESCAPES = b'"\\bfnrt'
_HEX = b"0123456789abcdefABCDEF"


def _plain(name: str) -> bool:
    # (Printable ASCII is exactly " " .. "~".)
    return name.isascii() and name.isprintable() and '"' not in name and "\\" not in name


@functools.lru_cache(maxsize=2)
def _body(complete: bool) -> rx.ByteDFA:
    """The body of any JSON string (between the quotes), spelled canonically or in any
    way (see :func:`~jsonmode.decoding.regex.json_string_body_dfa`)."""
    return rx.json_string_body_dfa(rx.any_char_dfa(0, None), complete=complete)


@dataclass(frozen=True)
class _Layout:
    """What :func:`extra_key_body` writes alike for any names, with targets relative to
    the first state after the prefixes' (``shift``) and dead entries flagged: the
    first prefix's row (``prefix``), and the rows of the states after ``\\``,
    ``\\u``, ``\\u0``, ``\\u00`` and of the plain body (``tail``)."""

    prefix: npt.NDArray[np.int32]
    prefix_dead: npt.NDArray[np.bool_]
    tail: npt.NDArray[np.int32]
    tail_dead: npt.NDArray[np.bool_]


@functools.lru_cache(maxsize=2)
def _layout(complete: bool) -> _Layout:
    body = _body(complete)
    g0 = body.start
    backslash = int(body.trans[g0, ord("\\")])
    after_u = int(body.trans[backslash, ord("u")])
    after_u0 = int(body.trans[after_u, ord("0")])
    after_u00 = int(body.trans[after_u0, ord("0")])
    if int(body.trans[g0, ord("a")]) != g0:  # pragma: no cover - the body's shape changed
        raise AssertionError("the JSON string body automaton must loop on plain characters")
    dead = -(1 << 20)  # (a target no shift brings back to a state)
    escape, u, u0, u00 = -4, -3, -2, -1  # relative to the shift
    plain = np.where(body.trans >= 0, body.trans, dead).astype(np.int32)
    tail = np.full((4 + body.n_states, 256), dead, dtype=np.int32)
    tail[4:] = plain
    tail[0, list(_SHORT_ESCAPES)] = g0  # decodes to '"', '\\' or a control character
    tail[0, ord("u")] = u
    # \uXXXX: only escapes of characters outside printable ASCII leave a name prefix.
    hexes = list(_HEX)
    tail[1, hexes] = plain[after_u, hexes]
    tail[1, ord("0")] = u0
    tail[2, hexes] = plain[after_u0, hexes]
    tail[2, ord("0")] = u00
    leaving = list(b"0189abcdefABCDEF")  # \u000X, \u001X (control), \u008X..\u00fX
    tail[3, leaving] = plain[after_u00, leaving]
    prefix = plain[g0].copy()
    prefix[ord("\\")] = escape
    return _Layout(prefix, prefix == dead, tail, tail == dead)


def key_prefixes(names: tuple[str, ...]) -> list[str]:
    """Every prefix of ``names`` (the empty one included), sorted: the order of the
    first states of :func:`extra_key_body`."""
    return sorted({name[:i] for name in names for i in range(len(name) + 1)} | {""})


@functools.lru_cache(maxsize=256)
def extra_key_body(
    names: tuple[str, ...], max_states: int | None = None, *, complete: bool = False
) -> rx.ByteDFA | None:
    """The bodies of JSON strings that do not decode to one of ``names``.

    None when a name is not plain printable ASCII (the caller then builds the exact
    automaton). Cost: linear in the total length of the names (1 KiB per state);
    cached per process.

    Layout (the mask engine hashes key states from it, see ``RuleDFA.keys``): one
    state per prefix of the names in :func:`key_prefixes` order (the empty prefix is
    the start), then the states after ``\\``, ``\\u``, ``\\u0`` and ``\\u00``
    (the same for any names), then the plain string body's states in their order. A
    prefix's state reads as the body's start state but for the next letters of the
    names (to their prefixes' states), ``\\`` (to the state after it) and, when the
    prefix is a name, the end of the string.

    Raises:
        BudgetExceededError: it would have more than ``max_states`` states (one per
            prefix of the names, and the string body's): refused before its table
            is allocated, as the automaton builder would refuse it after.
    """
    if not all(map(_plain, names)):
        return None
    body = _body(complete)
    prefixes = key_prefixes(names)
    if max_states is not None and len(prefixes) + 4 + body.n_states > max_states:
        raise BudgetExceededError("states per rule", max_states)
    node = {prefix: index for index, prefix in enumerate(prefixes)}
    shift = len(prefixes) + 4  # the escapes' states, then the plain body's, come last
    total = shift + body.n_states
    layout = _layout(complete)
    trans = np.empty((total, 256), dtype=np.int32)
    # The escapes' and the body's rows, and every prefix's row as the body's start
    # state reads (any byte takes the key off the names, "\\" to the escape state)...
    np.add(layout.tail, shift, out=trans[shift - 4 :])
    trans[shift - 4 :][layout.tail_dead] = -1
    row = trans[: len(prefixes)]
    np.add(layout.prefix, shift, out=row[0])
    row[0][layout.prefix_dead] = -1
    row[1:] = row[0]
    # ...but for the characters that continue a name (written in one store: each
    # prefix's state to the state of the prefix one character longer).
    rows: list[int] = []
    columns: list[int] = []
    targets: list[int] = []
    for count, prefix in enumerate(prefixes):
        if not count & 255:
            checkpoint()
        if prefix:
            rows.append(node[prefix[:-1]])
            columns.append(ord(prefix[-1]))
            targets.append(count)
    trans[rows, columns] = targets
    accepting = np.zeros(total, dtype=np.bool_)
    named = set(names)  # (a tuple would make this quadratic in the names)
    accepting[[node[p] for p in prefixes if p not in named]] = True
    accepting[shift:] = body.accepting
    trans.flags.writeable = False
    accepting.flags.writeable = False
    return rx.ByteDFA(node[""], accepting, trans)
