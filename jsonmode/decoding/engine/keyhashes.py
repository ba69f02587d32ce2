"""A key lexeme's state hashes, each worked out on first use: :class:`KeyHashes`.

A record of Stage 1 (:mod:`~jsonmode.decoding.engine.state` makes one, with
:func:`~jsonmode.decoding.engine.state.key_hashes`), kept apart so that the records
every stage reads (:mod:`~jsonmode.decoding.engine.facts`: a rule's
``StateHashes`` are an array or one of these) need not import the stage that
computes them. Imports nothing of the engine.

Cost: a prefix state's hash is one blake2b digest of the names' rests, on first use;
every other state's, a lookup. Thread-safe: the memo is written with equal values
whoever computes them. Hash values never leave the process.
"""

from __future__ import annotations

import bisect
import hashlib

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.automata.keys import KeyTrie

__all__ = ["KeyHashes"]


class KeyHashes:
    """The state hashes of a key lexeme (``RuleDFA.keys``), each worked out when first
    asked for (``hashes[row, state]``, as of an array of
    :func:`~jsonmode.decoding.engine.state.state_hashes`' rows).

    The layout is :func:`~jsonmode.decoding.automata.keys.extra_key_body`'s: state 0 before the
    opening quote, one state per prefix of the names (:class:`KeyTrie` order), the four
    escape states, then the plain string body's states. The plain part takes the plain
    string's hashes and the escape states the values they have in every key lexeme
    (``state._key_escapes``).
    A prefix's state acts exactly as the rest of the names it still spells say (its
    *suffixes*: the next letters lead to the prefixes one letter longer, the closing
    quote is refused after a declared name, any other byte leaves the names as in the
    plain body): its hash, for both rows, is a digest of those suffixes. Equal suffixes
    in any key lexeme hash alike ("nam" where only "name" goes on, in any schema),
    unequal ones apart (up to 64-bit collisions, as the depth hashes). A mask walks a
    handful of a lexeme's prefix states, where hashing them all took a pass over every
    prefix (~150 us per key lexeme over the benchmark, in the first mask of each new
    object). Thread-safe: the memo is written with equal values whoever computes them.
    """

    __slots__ = ("_escapes", "_known", "_plain", "_shift", "_trie")

    def __init__(
        self, plain: npt.NDArray[np.uint64], escapes: tuple[list[int], list[int]], trie: KeyTrie
    ) -> None:
        self._plain = plain
        self._escapes = escapes
        self._trie = trie
        self._shift = trie.size + 4
        self._known: dict[int, int] = {}

    @property
    def nbytes(self) -> int:
        """About what the memo and the trie hold (for cache budgets)."""
        trie = self._trie
        return 64 * len(self._known) + 20 * trie.size + sum(map(len, trie.names)) + 256

    def __getitem__(self, item: tuple[int, int]) -> int:
        row, state = item
        shift = self._shift
        if state > shift:
            return int(self._plain[row, state - shift])
        if state > shift - 4:
            return self._escapes[row][state - shift + 3]
        known = self._known.get(state)
        if known is None:
            suffixes = self.suffixes(state)
            if suffixes is not None:
                known = _digest(b"key prefix", *suffixes)
            else:  # (reads the opening quote only, into the empty prefix's state)
                known = _digest(b"key opening", b"%d" % self[1, 1])
            self._known[state] = known
        return known

    def suffixes(self, state: int) -> list[bytes] | None:
        """The rest of each name that the prefix of rule state ``state`` begins (``b""``
        for the prefix itself when it is a name), in order; None where ``state`` is
        not a prefix's (before the opening quote, an escape or the plain body)."""
        trie = self._trie
        if not 1 <= state <= trie.size:
            return None
        prefix, names = trie.prefix(state - 1), trie.names
        # (Names are printable ASCII: those that begin with the prefix sort between
        # it and the prefix followed by DEL.)
        begin = bisect.bisect_left(names, prefix)
        end = bisect.bisect_left(names, prefix + "\x7f", begin)
        width = len(prefix)
        return [name[width:].encode() for name in names[begin:end]]


def _digest(*parts: bytes) -> int:
    """A 64-bit hash of ``parts`` (kept apart: no part may hold a NUL byte)."""
    return int.from_bytes(hashlib.blake2b(b"\0".join(parts), digest_size=8).digest(), "little")
