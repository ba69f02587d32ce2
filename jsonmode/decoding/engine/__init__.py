"""The mask engine: which tokens a matcher state allows, computed fast in Python.

One module per stage of a mask (see ARCHITECTURE.md, "How the engine gets fast"),
each built on the stages above it::

    matcher state: the reference matcher's closed set of parse stacks
      │  each stack's top frame (rule, state)
      ▼
    1 state     what a rule state will do on the next bytes, as a hash (and rules:
                each rule's signature, table, hashes, counted-string form)
      ▼
    2 segments  per-first-byte segments of a walk, shared by hash; missing ones
                walk the token trie along live prefixes only
      slices    (or: a string-like state's walk as the clean tokens, whole, plus a
                walk of the ~1 700 tokens with a quote or backslash)
      runs      (or: a state counting a class of bytes, a language tag's letters, by
                the tokens' leading runs of the class)
      ▼
    3 walk      the (rule, state)'s walk over the vocabulary: tokens read inside the
                rule, boundary tokens passing a call or return point; shared by hash
      ▼
    4 boundary  boundary tokens finished from the real stack; narrow stacks walk the
                token trie themselves
      ▼
    5 cache     MaskEngine: the union over the state's stacks, as bits (a token
                bitmask) or bools, cached per state

Under every stage: ``entries`` (what a trie walk hands back: tokens inside,
boundary entries), ``trie`` (the vocabulary as a trie), ``keyhashes`` (a key
lexeme's state hashes) and ``facts`` (the records every stage reads: the token
index, each automaton's read lists and crossing states, each rule's information).

Imports follow the stages, without a circle: a module imports only those before it
in ``entries, trie, keyhashes, facts, state, rules, segments, slices, runs, walk,
boundary, cache`` (and this package only ``cache``), and only their public names
(tests/test_engine_layers.py holds it so).

1. A matcher state is the reference matcher's closed set of parse stacks. Masks
   are cached per state, across steps, sequences and requests (JSON generation
   revisits the same states constantly): :mod:`.cache`.
2. For a stack whose top frame is ``(rule, state)``, most tokens are decided by that
   rule's byte automaton alone. One vectorised NumPy walk per ``(rule, state)`` finds
   the tokens read entirely inside the rule and the few *boundary* tokens that pass a
   point where the rule could call another rule or return (:mod:`.walk`). A walk is
   assembled from per-first-byte *segments* (:mod:`.segments`; only the bytes the
   state can read), each keyed by a bounded-depth behaviour hash of the state after
   that byte (:mod:`.state`): states of any rule or schema that act alike on the next
   bytes share segments and walks, process-wide. A state of a string-like lexeme that
   reads every clean text (complete UTF-8 characters but quotes, backslashes and
   controls) takes every clean token whole and walks only the others
   (:mod:`.slices`). Missing segments are walked through the token trie
   (:mod:`.trie`) along live prefixes only, so a state that reads few bytes costs
   little; wide ones take one gather per level for the first levels. A state unlike
   any seen is walked whole, not split into segments. An extra key still spelling a
   prefix of the declared names (a key that must not be one of them) takes the plain
   string's walk less the tokens that spell a name's rest and its closing quote,
   found by their text before the quote. Another wide state that differs from its
   *twin* (the state most of its bytes lead to) in few places takes the twin's walk
   and redoes only the trie subtrees where the two part. Boundary tokens are kept as
   trie subtrees (one entry per node where the walk passed a call or return point),
   so the work on them grows with the entries, not with the tokens: the tokens after
   a space that opens a value are one entry. A string with length bounds only is the
   plain string plus a count of its characters (:mod:`.rules`): a state between
   characters takes the plain string's walk less the tokens beyond its character
   budget (per-token counts from one trie replay per vocabulary), keyed by that
   budget, so the states far from their bounds share one walk whatever their lexeme.
3. Boundary tokens are finished from the real stack, one stack at a time
   (:mod:`.boundary`): the stacks a boundary leads to (the caller's continuation
   after a return, the callee after a call) are numbered ``(context, rule state)``
   pairs, stepped by the rules' byte tables. The tokens of a boundary group whose
   rest starts with a byte those stacks can read are kept as a small trie of their
   *rests* (the same few dozen rests, such as ``",`` and ``"}`` after a string,
   recur in every schema: memoised by content), and the stacks walk that trie: one
   step per distinct rest prefix.
4. A stack whose top state reads few bytes (a literal's next bytes, a number's
   digits, the ``:`` after a key) skips the walks, hashes and caches above: the
   stack itself follows the token trie in plain Python, stepping its top rule by
   table and, past a call or return point, the stacks that leads to, as in 3.
   NumPy's per-call overhead would cost several times such a walk.

Errors on the hot path are booleans and a sticky state, never exceptions. An engine
is thread-safe and shared by its schema's matchers; the process-wide caches are
thread-safe and bounded (:func:`configure_caches`). The per-sequence cursor is
:class:`jsonmode.decoding.matcher.Matcher`.
"""

from __future__ import annotations

from jsonmode.decoding.engine.cache import Mask, MaskEngine, configure_caches

__all__ = ["Mask", "MaskEngine", "configure_caches"]
