"""Stage 1, per rule: the :class:`RuleInfo` the walks read of each rule of a network.

:class:`Rules` (one per mask engine) gives each rule index its content signature,
crossing states, flat table and state hashes (:mod:`~jsonmode.decoding.engine.state`),
and recognises a string with length bounds only as the plain string plus a count, and
a GBNF counted repetition ``'"' X{m,n} '"'`` as its plain ``'"' X* '"'`` plus a count
(:func:`_count_states`, which verifies every transition). Lexemes (call-free rules)
recur across properties and schemas: their signatures, hashes and information are
shared process-wide by content.
A structural rule's walks depend on its table and crossing states alone, not on the
rules it calls: it is signed by its table object (networks share the table of a rule
shape: see :func:`~jsonmode.decoding.automata.network.build_network`) and its crossing states,
so the walks of an array, a root or a recurring object are shared across schemas too.

Cost: a rule's information is worked out on the first mask that walks it; hashing a
lexeme is the expensive part (a pass per depth step, shared by a network's small
lexemes; grafted in one plain-Python pass for a key-like lexeme; a key lexeme's a
state at a time, from its names); recognising a counted string takes a few vector
passes. Thread-safe: the per-engine maps and the process-wide caches are written
with equal values whoever computes them.
"""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.automata.families import RuleTable
from jsonmode.decoding.automata.follow import ALL_BYTES, follow_bytes
from jsonmode.decoding.automata.network import Network, RuleDFA, key_rule_names, plain_string_rule
from jsonmode.decoding.engine.facts import (
    Counted,
    Follow,
    RuleInfo,
    StateHashes,
    facts,
    opening_quote,
)
from jsonmode.decoding.engine.keyhashes import KeyHashes
from jsonmode.decoding.engine.state import (
    HASH_BUDGET,
    byte_classes,
    column_folds,
    grafted_hashes,
    key_hashes,
    plain_loops,
    state_hashes,
)
from jsonmode.lru import IdentityMemo, Lru

# A lexeme joins another's hashing pass (see Rules.hash_lexemes) only when it
# has at most this many states: a small lexeme's pass costs mostly per depth step,
# which the batch shares, while a big one's costs per state, which batching does not
# save, only moves into the mask call that hashes the batch (a 130 ms first mask
# where an 8-state integer lexeme brought 6,000 states of strings along), and spends
# on lexemes that may never be walked.
_BATCH_STATES = 256
# A lexeme's walks keep only the entries that what follows it can read (see
# Rules.follow) when the states where it may return read at least this many bytes.
_FOLLOW_READS = 32

# Process-wide, by content: state hashes and count states of lexemes (by signature and
# hash depth), their content signatures by table identity (the automata are built once
# per process and shared by the networks that use them) and their rule information.
_hash_cache: Lru[tuple[bytes, int], StateHashes] = Lru(16 << 20)
_count_cache: Lru[
    tuple[bytes, bytes], tuple[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None]
] = Lru(8 << 20)
_lexeme_contents: IdentityMemo[tuple[bytes, npt.NDArray[np.bool_]]] = IdentityMemo()
_lexeme_infos: Lru[tuple[bytes, int, tuple[int, int | None] | None], RuleInfo] = Lru(32 << 20)
# Structural rules' tables, numbered by identity (see _structural_content).
_table_numbers: IdentityMemo[int] = IdentityMemo()
_table_serial = itertools.count()
_plain_infos: dict[int, RuleInfo] = {}  # by hash depth (see Rules.plain)
# The plain automata of counted repetitions, by signature and hash depth (see Rules.over).
_over_infos: Lru[tuple[bytes, int], RuleInfo] = Lru(4 << 20)


class Rules:
    """The rule information of one network's rules, for one hash depth (the longest
    token's length). Thread-safe."""

    def __init__(self, network: Network, depth: int) -> None:
        self.network = network
        # Hash depths: a token after its first byte, and a whole token (a byte to spare).
        self.depth = depth
        self._infos: dict[int, RuleInfo] = {}
        self._signatures: dict[int, tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]] = {}
        self.lexemes = [k for k, rule in enumerate(network.rules) if not any(rule.calls)]
        self.lexeme_set = set(self.lexemes)
        self.hashed: set[int] = set()  # lexemes whose hashes were computed (or refused)
        # (What may follow each rule, made on first use, None when unknown; and each
        # lexeme's Follow, or None where its walks take no restriction: see follow.)
        self._follow_sets: list[int] | bool | None = False
        self._follows: dict[int, Follow | None] = {}

    def info(self, rule: int) -> RuleInfo:
        """Content signature, crossing states, transitions and state hashes of a rule."""
        known = self._infos.get(rule)
        if known is not None:
            return known
        signature, crossing, trans = self.signature(rule)
        automaton = self.network.rules[rule]
        lexeme = not any(automaton.calls)
        # (Keyed by the length bounds too: a table equal to a counted string's, as a
        # pattern's may be, must not take its information without them, nor give it.)
        shared_key = (signature, self.depth, automaton.lengths)
        if lexeme:
            shared = _lexeme_infos.get(shared_key)
            if shared is not None:
                self._infos[rule] = shared
                return shared
        # Lexemes (call-free rules) recur across properties and schemas: their
        # information is shared by content; a structural rule's is kept per engine (its
        # walks are shared by signature).
        counted = None
        if automaton.lengths is not None:
            plain = self.plain() if automaton.counts_over is None else self.over(automaton)
            count_key = (signature, plain.signature)
            known_states = _count_cache.get(count_key)
            if known_states is None:
                known_states = (_count_states(automaton, plain.flat.reshape(-1, 256)),)
                size = 64 + 16 * trans.shape[0]
                _count_cache.put(count_key, known_states, size)
            if known_states[0] is not None:
                plain_of, chars = known_states[0]
                low, high = automaton.lengths
                between = int(plain.flat[opening_quote(plain.flat)])
                counted = Counted(plain, plain_of, chars, low, high, between)
        hashes = None
        if counted is None and lexeme:
            # A counted string's states need no hashes: those between characters are
            # keyed by their budget, the others read few bytes.
            hashes = _hash_cache.get((signature, self.depth))
            if hashes is None and rule not in self.hashed:
                hashes = self.hash_lexemes(rule)
        known = RuleInfo(signature, crossing, trans.reshape(-1), hashes, counted)
        self._infos[rule] = known
        if lexeme and (hashes is not None or counted is not None):
            # (Not without hashes: they may just have been evicted, or be another
            # engine's to compute.)
            _lexeme_infos.put(shared_key, known, 3 * known.flat.nbytes)
        return known

    def follow(self, rule: int) -> Follow | None:
        """What may be read first once lexeme ``rule`` has returned, for its walks to
        keep only the boundary entries whose rest starts with such a byte; None where
        the lexeme's walks gain nothing by it, or where it is unknown (see
        :func:`~jsonmode.decoding.automata.follow.follow_bytes`).

        Only a lexeme that may return at states reading at least
        :data:`_FOLLOW_READS` bytes takes it (free text, an identifier: entries at
        nearly every node of the vocabulary), and only when some of those bytes cannot
        follow it. The rest keep every entry and their shared keys: a quoted string
        returns after its closing quote, reading nothing, a number at a dozen bytes,
        and splitting their walks by what follows them would cost more than it saves
        (the network's sets take ~1-4 ms for a big schema). Cost: a vector test per
        lexeme, the network's sets once for the first that passes it, then lookups."""
        if rule in self._follows:
            return self._follows[rule]
        found = None
        _, crossing, trans = self.signature(rule)
        goes_on = np.any(trans[crossing] >= 0, axis=0)  # (bytes read where it may return)
        if int(np.count_nonzero(goes_on)) >= _FOLLOW_READS:
            sets = self._follow_sets
            if sets is False:
                sets = self._follow_sets = follow_bytes(self.network.rules)
            if isinstance(sets, list) and sets[rule] != ALL_BYTES:
                follow = Follow.of(sets[rule])
                if bool(np.any(goes_on & ~follow.flags)):
                    found = follow
        self._follows[rule] = found
        return found

    def plain(self) -> RuleInfo:
        """The plain string's rule information (what ``lengths`` rules count over, and
        key lexemes graft onto): one per process and hash depth."""
        known = _plain_infos.get(self.depth)
        if known is None:
            signature, crossing, trans = _content(plain_string_rule())
            hashes = state_hashes(trans, crossing, (self.depth, self.depth + 1))
            known = _plain_infos[self.depth] = RuleInfo(
                signature, crossing, trans.reshape(-1), hashes
            )
        return known

    def over(self, automaton: RuleDFA) -> RuleInfo:
        """The rule information of the plain automaton a counted repetition counts over
        (``automaton.counts_over``): process-wide by content and hash depth (a plain
        ``'"' X* '"'`` of a few states, hashed in one small pass)."""
        assert automaton.counts_over is not None
        signature, crossing, trans = _content(automaton.counts_over)
        known = _over_infos.get((signature, self.depth))
        if known is None:
            hashes = state_hashes(trans, crossing, (self.depth, self.depth + 1))
            known = RuleInfo(signature, crossing, trans.reshape(-1), hashes)
            _over_infos.put((signature, self.depth), known, 4 * trans.nbytes + 1024)
        return known

    def signature(self, rule: int) -> tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]:
        """A rule's content signature, crossing states and transitions (memoised).

        The root of a network where no rule calls it crosses only where it calls: its
        returns lead to the end of the document, which reads nothing, so a token going
        on past one is not allowed there, and the walks need not list it (a grammar's
        ``msg ::= [a-z ]{1,60}`` at the end of its root would otherwise make every
        position of every such token a boundary). Such a root is signed apart."""
        known = self._signatures.get(rule)
        if known is None:
            automaton = self.network.rules[rule]
            if any(automaton.calls):
                known = _structural_content(automaton)
            else:  # a lexeme's table is shared by every network that uses it
                # (The memo keeps the signature and the flags, not the table: a value
                # holding its own key would keep both alive for good.)
                memo = _lexeme_contents.get(automaton.trans)
                if memo is None:
                    known = _content(automaton)
                    _lexeme_contents.put(automaton.trans, known[:2])
                else:
                    known = (*memo, np.ascontiguousarray(automaton.trans, dtype=np.int32))
            if rule == self.network.root and self._root_uncalled():
                signature, _, trans = known
                calling = np.array([bool(calls) for calls in automaton.calls], dtype=np.bool_)
                calling.flags.writeable = False
                known = (
                    hashlib.blake2b(b"uncalled root;" + signature, digest_size=16).digest(),
                    calling,
                    trans,
                )
            self._signatures[rule] = known
        return known

    def _root_uncalled(self) -> bool:
        """Whether the network's rules are all built (no any-order object family makes
        rules later, which might call the root) and none calls the root."""
        rules, root = self.network.rules, self.network.root
        if not isinstance(rules, RuleTable) or not rules.complete:
            return False
        return all(
            callee != root
            for automaton in rules
            for calls in automaton.calls
            for callee, _ in calls
        )

    def grafted_hashes(
        self, crossing: npt.NDArray[np.bool_], trans: npt.NDArray[np.int32]
    ) -> npt.NDArray[np.uint64] | None:
        """:func:`~jsonmode.decoding.engine.state.grafted_hashes` onto this depth's plain string."""
        return grafted_hashes(self.plain(), crossing, trans)

    def key_hashes(
        self, names: tuple[str, ...], crossing: npt.NDArray[np.bool_], trans: npt.NDArray[np.int32]
    ) -> KeyHashes | None:
        """:func:`~jsonmode.decoding.engine.state.key_hashes` onto this depth's plain string."""
        return key_hashes(self.plain(), self.depth, names, crossing, trans)

    def hash_lexemes(self, rule: int) -> StateHashes | None:
        """The state hashes of lexeme ``rule``, computed in one pass with those of the
        network's other lexemes not hashed yet (within ``HASH_BUDGET``): a pass costs
        mostly per depth step, so one for all of a schema's lexemes beats one each
        (~20 % less hashing time over the benchmark). Each lexeme's hashes are cached
        by its signature; None when ``rule`` is too big to hash. A lexeme that acts
        as the plain string but for an acyclic part is hashed alone, without a pass
        per depth: from its names when the compiler marked it as a key lexeme
        (:meth:`key_hashes`), else by a graft (:meth:`grafted_hashes`)."""
        depths = (self.depth, self.depth + 1)
        signature, crossing, trans = self.signature(rule)
        names = self.network.rules[rule].keys
        grafted: StateHashes | None = None
        if names is not None:
            grafted = self.key_hashes(names, crossing, trans)
        if grafted is None:
            grafted = self.grafted_hashes(crossing, trans)
        if grafted is not None:
            self.hashed.add(rule)
            _hash_cache.put((signature, self.depth), grafted, grafted.nbytes + 64)
            return grafted
        batch, total = [rule], trans.shape[0]
        for other in self.lexemes:
            automaton = self.network.rules[other]
            if other == rule or other in self.hashed or automaton.lengths:
                continue  # (counted strings are not hashed, see info)
            if automaton.n_states > _BATCH_STATES:
                continue  # (hashed when it needs them: see _BATCH_STATES)
            signature, crossing, trans = self.signature(other)
            if plain_loops(trans, crossing).size:
                continue  # (its hashes are grafted when it needs them)
            fits = (total + trans.shape[0]) * depths[-1] <= HASH_BUDGET
            if fits and _hash_cache.get((signature, self.depth)) is None:
                batch.append(other)
                total += trans.shape[0]
        parts = [self.signature(member) for member in batch]
        starts = np.cumsum([0, *(trans.shape[0] for _, _, trans in parts)])
        # (int32 throughout: the tables are copied once each, not widened and narrowed.)
        joined = [
            np.where(t >= 0, t + np.int32(start), np.int32(-1))
            for (_, _, t), start in zip(parts, starts[:-1].tolist(), strict=True)
        ]
        crossing = np.concatenate([c for _, c, _ in parts])
        hashes = state_hashes(np.concatenate(joined), crossing, depths)
        if hashes is None:  # the batch is too big for another bound: this lexeme alone
            batch, parts = [rule], parts[:1]
            hashes = state_hashes(parts[0][2], parts[0][1], depths)
        self.hashed.update(batch)
        if hashes is None:
            return None
        own = [
            np.ascontiguousarray(hashes[:, starts[k] : starts[k + 1]]) for k in range(len(parts))
        ]
        for (signature, _, _), values in zip(parts, own, strict=True):
            _hash_cache.put((signature, self.depth), values, values.nbytes + 64)
        return own[0]


def _structural_content(
    automaton: RuleDFA,
) -> tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]:
    """A structural rule's signature, crossing states and transitions: its walks read
    its table and crossing states, never whom it calls, so it is signed by the table
    object's number and the crossing states (networks with a rule of one shape share
    its table, and rules that share a table may differ in their crossing states: any-
    order families). Cost: a lookup and a hash of one flag per state, no pass over
    the table (most structural tables are shared, not equal copies)."""
    table = automaton.trans
    number = _table_numbers.get(table)
    if number is None:
        number = _table_numbers.put(table, next(_table_serial))
    crossing = facts(automaton).crossing
    digest = hashlib.blake2b(b"table %d;" % number, digest_size=16)
    digest.update(crossing.tobytes())
    return digest.digest(), crossing, np.ascontiguousarray(table, dtype=np.int32)


def _content(automaton: RuleDFA) -> tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]:
    """A lexeme's content signature, crossing states (accepting or calling) and
    transitions. Equal tables and flags sign alike, unequal ones apart up to 64-bit
    collisions of a per-process keyed hash (as state hashes are up to theirs)."""
    crossing = facts(automaton).crossing
    trans = np.ascontiguousarray(automaton.trans, dtype=np.int32)
    names = automaton.keys
    if names is not None and key_rule_names(automaton.trans) == names:
        # (A key lexeme built from its names: they say what its table is, and reading
        # them costs a fraction of reading a table of a state per prefix.)
        digest = hashlib.blake2b(b"key lexeme;", digest_size=16)
        digest.update(b"\0".join(name.encode() for name in names))
        return digest.digest(), crossing, trans
    big = trans.shape[0] > _BIG_TABLE
    if big:
        # The distinct columns and which byte has which (most bytes' columns repeat:
        # hashing those costs a fraction of hashing every byte's).
        first, inverse = byte_classes(trans)
        data = trans[:, first].tobytes() + inverse.astype(np.uint8).tobytes()
    else:  # (as 16-bit ints, half the bytes to hash: a table this small fits them)
        data = trans.astype(np.int16).tobytes()
    # The table's bytes are read by the interpreter's own 64-bit hash (keyed per
    # process; a fifth of blake2b's time over them, most of a first mask's signing);
    # the signature, like every hash here, never leaves the process.
    digest = hashlib.blake2b(b"%d %d;" % (trans.shape[0], big), digest_size=16)
    digest.update(hash(data).to_bytes(8, "little", signed=True))
    digest.update(crossing.tobytes())
    return digest.digest(), crossing, trans


_BIG_TABLE = 256  # states: a table this big is hashed by its byte classes


# -- strings with length bounds only, as the plain string plus a count ---------------------


def character_begins(plain: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
    """Per plain-string state and byte: whether the byte begins a character (any
    byte the body's between-characters state reads, but the closing quote; the quote
    is the byte state 0 reads: see :func:`~jsonmode.decoding.engine.facts.opening_quote`)."""
    quote = opening_quote(plain.reshape(-1))
    between = int(plain[0, quote])
    begins = np.zeros(plain.shape, dtype=np.bool_)
    begins[between] = plain[between] >= 0
    begins[between, quote] = False
    return begins


def _count_states(
    rule: RuleDFA, plain: npt.NDArray[np.int32]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """Each state of a ``lengths`` rule as ``(plain string state, characters begun)``;
    None unless the rule is exactly the plain automaton ``plain`` with those bounds on
    the count. ``plain`` is a quoted rule (the JSON plain string, or a GBNF counted
    repetition's ``q X* q``; its quote is the one byte its state 0 reads, else None)
    whose state after the opening quote is *between
    characters*: every byte it reads but the closing quote begins a character (an
    item), some byte is a whole character alone, and only its closing quote leads to
    the last state, which reads nothing (else None).

    The states between characters are found first, one per count (from the opening
    quote, a one-byte character at a time); then the pairing spreads along every transition, a
    level of states inside a character at a time (a few levels: the longest escape),
    each level in a few vector operations over its states and the plain string's byte
    classes. Every transition of every state is checked to go where the pairing says:
    to the state of the plain string's target, with the count after the byte (a
    character begun past the upper bound, or the closing quote before the lower one,
    leads nowhere; a count without an upper bound stops at the lower one). Equal
    states may repeat; a state no transition reaches, or met as two, refuses the
    rule: one built otherwise is refused, not mistaken. Cost: ~0.2 ms for ~500
    states, where exploring them plain state by plain state took ~0.8 ms.
    """
    assert rule.lengths is not None
    low, high = rule.lengths
    trans, size = rule.trans, rule.trans.shape[0]
    top = high if high is not None else low
    quote = opening_quote(plain.reshape(-1))  # (state 0 reads it, and nothing else)
    between, closing = int(plain[0, quote]), plain.shape[0] - 1
    if between <= 0 or between == closing or (plain[closing] >= 0).any():
        return None
    if np.count_nonzero(plain[0] >= 0) != 1:
        return None
    # (The plain automaton closes from between characters only, on the quote: what the
    # count's lower bound and the walks' closed tokens are about.)
    into = np.argwhere(plain == closing)
    if into.shape[0] != 1 or into[0, 0] != between or into[0, 1] != quote:
        return None
    # A byte that is a whole character (item) alone: from between characters back there.
    ones = np.flatnonzero(plain[between] == between)
    ones = ones[ones != quote]
    if not ones.size:
        return None
    one = ord("a") if plain[between, ord("a")] == between else int(ones[0])
    chain = [int(trans[0, quote])]
    for _ in range(top):
        chain.append(int(trans[chain[-1], one]) if chain[-1] >= 0 else -1)
    # (Distinct states, none of them the start's or the end's.)
    if min(chain) <= 0 or len(set(chain)) != top + 1 or size - 1 in chain:
        return None
    if high is None and trans[chain[-1], one] != chain[-1]:
        return None
    begins, first, inverse = _plain_classes(plain)
    # Bytes that the plain string treats alike, as one class each: the rule must too.
    folds = column_folds(trans)
    if (folds != folds[first[inverse]]).any():
        return None
    theirs_of, begins_of = plain[:, first], begins[:, first]
    ours_of = trans[:, first]
    is_quote = first == quote
    chains = np.array(chain, dtype=np.int64)
    plain_of = np.full(size, -1, dtype=np.int64)
    chars = np.full(size, -1, dtype=np.int64)
    plain_of[[0, size - 1]], chars[[0, size - 1]] = (0, closing), 0
    plain_of[chains], chars[chains] = between, np.arange(top + 1)
    level = np.array([0, size - 1, *chain], dtype=np.int64)
    while level.size:
        here, count = plain_of[level], chars[level]
        theirs, weight = theirs_of[here], begins_of[here]
        begun = count[:, None] + weight
        if high is None:
            np.minimum(begun, low, out=begun)
        early = (count < low)[:, None] & is_quote[None, :] & (here == between)[:, None]
        full = (count >= top)[:, None] & weight & (high is not None)
        live = (theirs >= 0) & ~early & ~full
        ours = ours_of[level]
        if not np.array_equal(ours >= 0, live):
            return None
        targets, pairs, counts = ours[live], theirs[live], begun[live]
        closes, back = pairs == closing, pairs == between
        if (targets[closes] != size - 1).any():
            return None
        if (targets[back] != chains[np.minimum(counts[back], top)]).any():
            return None
        inside = ~closes & ~back
        targets, pairs, counts = targets[inside], pairs[inside], counts[inside]
        fresh = plain_of[targets] < 0
        plain_of[targets[fresh]], chars[targets[fresh]] = pairs[fresh], counts[fresh]
        if (plain_of[targets] != pairs).any() or (chars[targets] != counts).any():
            return None  # (one state met as two)
        met = np.zeros(size, dtype=np.bool_)
        met[targets[fresh]] = True
        level = np.flatnonzero(met)
    if (plain_of < 0).any():
        return None  # (a state no transition reaches)
    return plain_of, chars


_Classes = tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.int64]]
_PLAIN_CLASSES: Lru[bytes, _Classes] = Lru(1 << 20)  # see _plain_classes


def _plain_classes(plain: npt.NDArray[np.int32]) -> _Classes:
    """The plain string's :func:`character_begins` and the byte classes it and they treat
    alike (:func:`byte_classes`), memoised by table."""
    key = plain.tobytes()
    known = _PLAIN_CLASSES.get(key)
    if known is None:
        begins = character_begins(plain)
        first, inverse = byte_classes(np.concatenate([plain, begins.astype(np.int32)]))
        known = (begins, first, inverse)
        _PLAIN_CLASSES.put(key, known, begins.nbytes + first.nbytes + inverse.nbytes + 64)
    return known
