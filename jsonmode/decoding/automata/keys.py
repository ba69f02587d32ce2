"""Byte automata for object keys that must differ from a set of declared names.

``additionalProperties`` applies to the keys no declared property claims, so the
decoder must keep an extra key from spelling a declared name. The exact automaton
(the complement of the names, lowered through every JSON escape) is built by
:mod:`jsonmode.regex.glushkov` at a cost of milliseconds per object and hundreds
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

from jsonmode import native
from jsonmode import regex as rx
from jsonmode.budget import checkpoint
from jsonmode.errors import BudgetExceededError
from jsonmode.lru import IdentityMemo, memoised

__all__ = [
    "KeyTrie",
    "built_names",
    "extra_key_body",
    "is_plain_name",
    "key_trie",
    "key_trie_py",
    "key_trie_size",
]

_SHORT_ESCAPES = b'"\\bfnrt'
_HEX = b"0123456789abcdefABCDEF"


def is_plain_name(name: str) -> bool:
    """Whether a name is printable ASCII without ``"`` or ``\\`` (what
    :func:`extra_key_body` and :func:`key_trie` take)."""
    # (Printable ASCII is exactly " " .. "~".)
    return name.isascii() and name.isprintable() and '"' not in name and "\\" not in name


@functools.lru_cache(maxsize=2)
def _body(complete: bool) -> rx.ByteDFA:
    """The body of any JSON string (between the quotes), spelled canonically or in any
    way (see :func:`~jsonmode.regex.glushkov.json_string_body_dfa`)."""
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


@dataclass(frozen=True)
class KeyTrie:
    """The trie of a set of names as :func:`extra_key_body` lays it out: state 0 is the
    empty prefix, state ``i`` the ``i``-th of the names' other prefixes in sorted order.

    ``names``: the names, sorted, without repeats. Per state but 0: the state of the
    prefix one character shorter (``parents``), its last character (``letters``) and,
    to spell it, a name it begins (``owners``, an index into ``names``) and its length
    (``lengths``). ``named``: the states of the names themselves. The prefixes are
    not kept as strings (a long name's would take memory quadratic in its length):
    :meth:`prefix` spells one.
    """

    names: tuple[str, ...]
    parents: npt.NDArray[np.int32]
    letters: npt.NDArray[np.int32]
    owners: npt.NDArray[np.int32]
    lengths: npt.NDArray[np.int32]
    named: npt.NDArray[np.int32]

    @property
    def size(self) -> int:
        """The number of states (prefixes, the empty one included)."""
        return int(self.parents.size) + 1

    def prefix(self, state: int) -> str:
        """The prefix of ``state``."""
        if not state:
            return ""
        return self.names[int(self.owners[state - 1])][: int(self.lengths[state - 1])]


def _common(first: str, second: str) -> int:
    """The length of the longest common prefix of two strings."""
    shortest = min(len(first), len(second))
    length = 0
    while length < shortest and first[length] == second[length]:
        length += 1
    return length


def key_trie_size(names: tuple[str, ...]) -> int:
    """The number of states of :func:`key_trie` (the distinct prefixes of ``names``,
    the empty one included), counted without building it. Cost: linear in the total
    length of the names (the compiled core's ``r4comp_key_count`` counts them where
    loaded)."""
    kernels = native.KERNELS
    if kernels is not None:
        return 1 + int(kernels.r4comp_key_count(tuple(sorted(set(names)))))
    ordered = sorted(set(names))
    return 1 + sum(
        len(name) - _common(before, name)
        for before, name in zip(["", *ordered], ordered, strict=False)
    )


def _trie_bytes(trie: KeyTrie) -> int:
    return 20 * trie.size + sum(map(len, trie.names))


@memoised(8 << 20, _trie_bytes)
def key_trie(names: tuple[str, ...]) -> KeyTrie:
    """The :class:`KeyTrie` of ``names``. Cached per process (8 MiB): the mask engine
    asks again for the names of each key lexeme it hashes. Cost: linear in the total
    length of the names, its memory in their number of prefixes (see
    :func:`key_trie_size`). The compiled core's ``r4comp_key_trie`` writes the arrays
    where loaded (:data:`jsonmode.native.KERNELS`), else :func:`key_trie_py`, the
    reference, with the same arrays and the same deadline checks."""
    kernels = native.KERNELS
    if kernels is None:
        return key_trie_py(names)
    ordered = tuple(sorted(set(names)))
    prefixes = int(kernels.r4comp_key_count(ordered))
    parents, letters, owners, lengths = (np.empty(prefixes, dtype=np.int32) for _ in range(4))
    named = np.empty(len(ordered), dtype=np.int32)
    kernels.r4comp_key_trie(ordered, parents, letters, owners, lengths, named, checkpoint)
    return KeyTrie(ordered, parents, letters, owners, lengths, named)


def key_trie_py(names: tuple[str, ...]) -> KeyTrie:
    """:func:`key_trie` in Python (the reference; not cached)."""
    ordered = tuple(sorted(set(names)))
    parents: list[int] = []
    letters: list[int] = []
    owners: list[int] = []
    lengths: list[int] = []
    named: list[int] = []
    # Sorted names add their new prefixes in sorted order: those past the part a name
    # shares with the one before (a prefix sorts before what extends it). ``path``:
    # the states of the current name's prefixes.
    path = [0]
    before = ""
    for index, name in enumerate(ordered):
        if not index & 255:
            checkpoint()
        common = _common(before, name)
        del path[common + 1 :]
        for length in range(common, len(name)):
            parents.append(path[-1])
            letters.append(ord(name[length]))
            owners.append(index)
            lengths.append(length + 1)
            path.append(len(parents))
        named.append(path[-1])
        before = name
    return KeyTrie(
        ordered,
        np.array(parents, dtype=np.int32),
        np.array(letters, dtype=np.int32),
        np.array(owners, dtype=np.int32),
        np.array(lengths, dtype=np.int32),
        np.array(named, dtype=np.int32),
    )


@memoised(32 << 20, lambda body: 0 if body is None else int(body.trans.nbytes))
def extra_key_body(
    names: tuple[str, ...], max_states: int | None = None, *, complete: bool = False
) -> rx.ByteDFA | None:
    """The bodies of JSON strings that do not decode to one of ``names``.

    None when a name is not plain printable ASCII (the caller then builds the exact
    automaton). Cost: linear in the total length of the names (1 KiB per state);
    cached per process (32 MiB of tables).

    Layout (the mask engine hashes key states from it, see ``RuleDFA.keys``): one
    state per prefix of the names in :func:`key_trie` order (the empty prefix is
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
    if not all(map(is_plain_name, names)):
        return None
    body = _body(complete)
    count = key_trie_size(names)
    if max_states is not None and count + 4 + body.n_states > max_states:
        raise BudgetExceededError("states per rule", max_states)
    trie = key_trie(names)
    shift = count + 4  # the escapes' states, then the plain body's, come last
    total = shift + body.n_states
    trans = np.empty((total, 256), dtype=np.int32)
    kernels = native.KERNELS
    if kernels is None:
        _write_rows(trans, trie, count, complete)
    else:  # (the compiled core's r4comp_key_rows: the same table)
        layout = _layout(complete)
        kernels.r4comp_key_rows(
            trans, layout.prefix, layout.tail, trie.parents, trie.letters, count
        )
    accepting = np.zeros(total, dtype=np.bool_)
    accepting[:count] = True
    accepting[trie.named] = False
    accepting[shift:] = body.accepting
    trans.flags.writeable = False
    accepting.flags.writeable = False
    if not complete:
        _BUILT.put(trans, names)
    return rx.ByteDFA(0, accepting, trans)  # (the empty prefix sorts first)


def _write_rows(trans: npt.NDArray[np.int32], trie: KeyTrie, count: int, complete: bool) -> None:
    """:func:`extra_key_body`'s table in Python (the reference of ``r4comp_key_rows``)."""
    layout = _layout(complete)
    shift = count + 4
    # The escapes' and the body's rows, and every prefix's row as the body's start
    # state reads (any byte takes the key off the names, "\\" to the escape state)...
    np.add(layout.tail, shift, out=trans[shift - 4 :])
    trans[shift - 4 :][layout.tail_dead] = -1
    row = trans[:count]
    np.add(layout.prefix, shift, out=row[0])
    row[0][layout.prefix_dead] = -1
    row[1:] = row[0]
    # ...but for the characters that continue a name (written in one store: each
    # prefix's state to the state of the prefix one character longer).
    trans[trie.parents, trie.letters] = np.arange(1, count, dtype=np.int32)


# The read-only tables extra_key_body built spelling keys canonically, with their
# names, by identity (see built_names).
_BUILT: IdentityMemo[tuple[str, ...]] = IdentityMemo()


def built_names(table: npt.NDArray[np.int32]) -> tuple[str, ...] | None:
    """The names whose key body ``table`` is, when :func:`extra_key_body` built it
    spelling keys canonically (its layout is then the documented one); None for any
    other table. A lookup by identity: an equal table built elsewhere is not known."""
    return _BUILT.get(table)
