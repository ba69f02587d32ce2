"""jsonmode's own regex → DFA engine: no backtracking, so no catastrophic patterns.

The ground floor under :mod:`jsonmode.schema` (``pattern`` checks) and
:mod:`jsonmode.decoding` (``pattern``, ``format``, ``minLength`` / ``maxLength`` and
integer ranges enforced inside JSON strings and numbers). It imports nothing of
jsonmode but :mod:`jsonmode.errors`, :mod:`jsonmode.limits`, :mod:`jsonmode.budget`
and :mod:`jsonmode.native` (the subset construction and the minimisation run in C
when the compiled core is loaded, with the same answers).
This package re-exports the public names of its stages, so callers import everything
from here.

Stages (each one printable, RE2-style), one module each:

1. :func:`~jsonmode.regex.syntax.parse` — ECMA-262 text → syntax tree (see that
   module for exactly which syntax is supported);
2. :func:`compile_pattern` (:mod:`~jsonmode.regex.glushkov`) — Glushkov position
   automaton, determinised by subset construction (state budget ``max_states``),
   then trimmed and minimised by :mod:`~jsonmode.regex.char_dfa` (Hopcroft), which
   also holds the Boolean operations: a :class:`CharDFA` over Unicode code points, printable with
   :meth:`CharDFA.to_text`;
3. :func:`utf8_byte_dfa` / :func:`json_string_body_dfa` (and :func:`utf8_char_set_dfa`,
   one character of a set, built straight from its ranges)
   (:mod:`~jsonmode.regex.byte_dfa`) — the same language over bytes (a
   :class:`ByteDFA`: a NumPy ``(n_states, 256)`` table) for the token-level engine.

Every :class:`CharDFA` these functions return is **trimmed and minimal, numbered
canonically** (breadth-first from the start state, edges in code-point order): two
DFAs of the same language are equal (``==``). Every live state can reach an accepting
state; a transition that could not is simply absent. The empty language is one
non-accepting state with no edges (:meth:`CharDFA.is_empty`).

Budgets (typed, documented, never a hang): ``max_states`` (default
:data:`DEFAULT_MAX_STATES` = 2000) bounds the states built by subset or product
construction *before* minimisation; the Glushkov automaton may hold at most
``POSITIONS_PER_STATE * max_states`` positions (one per character class occurrence
after unrolling counted repeats). Exceeding either raises
:class:`~jsonmode.errors.UnsupportedSchemaError` saying which budget, so the caller
can fall back to post-validation. Costs: parsing is linear; compiling a typical schema
pattern takes well under a millisecond to a few milliseconds (the largest ``format``,
email, ~960 subset states minimised to 294, a few milliseconds); the worst case is
about ``max_states`` subset states, each one union of follow sets per character-class
segment — ``(a|b)*a(a|b){30}`` hits the default budget in tens of milliseconds. The
segments of a set of classes are swept once per distinct set, not once per state.

All objects are immutable and thread-safe. NumPy is imported only by the byte-level
functions, so the character-level engine works without it.
"""

from jsonmode.regex.byte_dfa import (
    ByteDFA,
    json_string_body_dfa,
    utf8_byte_dfa,
    utf8_char_set_dfa,
)
from jsonmode.regex.char_dfa import (
    DEFAULT_MAX_STATES,
    CharDFA,
    any_char_dfa,
    complement,
    intersect,
    literal_dfa,
    minimize,
    union,
)
from jsonmode.regex.glushkov import (
    POSITIONS_PER_STATE,
    SEARCH_MEMBERS,
    PatternSearch,
    compile_pattern,
    integer_range_pattern,
    lazy_search,
)

__all__ = [
    "DEFAULT_MAX_STATES",
    "POSITIONS_PER_STATE",
    "SEARCH_MEMBERS",
    "ByteDFA",
    "CharDFA",
    "PatternSearch",
    "any_char_dfa",
    "compile_pattern",
    "complement",
    "integer_range_pattern",
    "intersect",
    "json_string_body_dfa",
    "lazy_search",
    "literal_dfa",
    "minimize",
    "union",
    "utf8_byte_dfa",
    "utf8_char_set_dfa",
]
