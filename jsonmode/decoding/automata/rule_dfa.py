"""One rule's automaton: :class:`RuleDFA`, the record the network is made of.

:mod:`~jsonmode.decoding.automata.network` builds them from a grammar and
:mod:`~jsonmode.decoding.automata.families` makes those of any-order objects on demand; the mask
engine, the matchers and the compiled core read them. Imports nothing of the decoder,
so all of them can import it. Immutable (frozen, read-only arrays): thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["RuleDFA"]


@dataclass(frozen=True, eq=False)
class RuleDFA:
    """One rule's automaton. ``trans[s, b]`` is the next state on byte ``b`` (-1: none);
    ``calls[s]`` lists ``(callee index, return state)``; a return state of
    :data:`~jsonmode.decoding.automata.families.TAIL` makes it a tail call (the callee replaces
    the caller's frame; only the rules of any-order objects have them)."""

    name: str
    trans: npt.NDArray[np.int32]
    calls: tuple[tuple[tuple[int, int], ...], ...]
    accepting: npt.NDArray[np.bool_]
    # A quoted JSON string of any ``low .. high`` code points (high None: unbounded):
    # the automaton is :func:`~jsonmode.decoding.automata.network.plain_string_rule`'s with a
    # count of the characters.
    lengths: tuple[int, int | None] | None = None
    # A quoted JSON string that is none of these names (an object's extra keys): the
    # body is :func:`~jsonmode.decoding.automata.keys.extra_key_body`'s, in its layout.
    keys: tuple[str, ...] | None = None
    # With ``lengths``: the plain automaton the count is over, when it is not the JSON
    # plain string: a quoted rule ``q X* q`` (``q`` any one byte, the only one its state
    # 0 reads) whose ``q X{low,high} q`` this rule is (a GBNF counted repetition, see
    # grammars.counted). The mask engine verifies the pairing of every transition
    # before it relies on it.
    counts_over: RuleDFA | None = None

    @property
    def n_states(self) -> int:
        return int(self.trans.shape[0])
