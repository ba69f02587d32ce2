"""Stage 1 of a mask: what a state of a rule automaton will do, as a hash.

Walks and segments are shared between states that act alike on the next bytes, of
any rule and any schema (see :mod:`~jsonmode.decoding.engine`): this module says
which states those are.

- :func:`state_hashes`: per state, a bounded-depth behaviour hash (a depth-bounded
  bisimulation class, up to 64-bit collisions), one vectorised pass per depth step
  (~130 steps for Qwen2.5's longest token) over the automaton folded into weighted
  edges; within ``HASH_BUDGET`` (states x depth), else no hashes (no sharing).
- :func:`_plain_states` and :func:`grafted_hashes`: a lexeme that acts as the plain
  JSON string but for an acyclic part in front (a key that is not a declared name)
  takes the plain string's hashes and hashes the rest in one pass in plain Python;
  :func:`key_hashes` gives a key lexeme's states hashes a state at a time, on first
  use, from the names they still spell (a
  :class:`~jsonmode.decoding.engine.keyhashes.KeyHashes`).
- :func:`byte_classes` / :func:`column_folds`: the bytes every state treats alike
  (also the signature of a big table, see :mod:`~jsonmode.decoding.engine.rules`).

Pure functions of their arguments but for process-wide memos of equal values
(``_PLAIN_SUMS``, ``_KEY_ESCAPES``, a :class:`KeyHashes`' own): thread-safe. Hash values
never leave the process.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.automata.keys import KeyTrie, extra_key_body, is_plain_name, key_trie
from jsonmode.decoding.automata.network import (
    RuleDFA,
    key_rule_names,
    plain_string_rule,
    quoted_rule,
)
from jsonmode.decoding.engine.facts import QUOTE, RuleInfo, facts
from jsonmode.decoding.engine.keyhashes import KeyHashes

_PLAIN_CHAR = ord("a")

# Random weights per byte for the state hashes (fixed seed: hashes must agree
# across engines in one process; they never leave it).
_BYTE_WEIGHTS = np.random.default_rng(0x6A736F6E).integers(1, 2**63, size=256, dtype=np.uint64) | 1
_BYTE_WEIGHT_LIST: list[int] = _BYTE_WEIGHTS.tolist()
_DEAD = np.uint64(0x9E3779B97F4A7C15)
HASH_BUDGET = 4_000_000  # states x depth (see state_hashes); beyond it, no sharing
_FOLD_WEIGHTS = (
    np.random.default_rng(0x636C6173).integers(1, 2**31, size=(2, HASH_BUDGET // 64)) | 1
).astype(np.int32)
_SHIFT_1, _SHIFT_2, _MULTIPLIER = np.uint64(31), np.uint64(29), np.uint64(0xBF58476D1CE4E5B9)
# The two values a state's own hash starts from in grafted_hashes (not the depth
# hashes' own: its values must not meet theirs).
_TREE_CROSSING, _TREE_INNER = 0xD6E8FEB86659FD93, 0xA0761D6478BD642F
_WORD = (1 << 64) - 1
_INT_SHIFT_1, _INT_SHIFT_2, _INT_MULTIPLIER = int(_SHIFT_1), int(_SHIFT_2), int(_MULTIPLIER)


def _mix_int(value: int) -> int:
    """:func:`_mix` for one Python int (taken modulo 2**64 first)."""
    value &= _WORD
    value ^= value >> _INT_SHIFT_1
    value = (value * _INT_MULTIPLIER) & _WORD
    return value ^ (value >> _INT_SHIFT_2)


_PLAIN_SUMS: dict[bytes, tuple[list[int], list[int]]] = {}  # see _plain_sums (one per depth)


def _plain_sums(hashes: npt.NDArray[np.uint64]) -> tuple[list[int], list[int]]:
    """Per plain string state, for each of its two hash rows, the sum over bytes of
    the byte's weight times its target's hash (dead: ``_DEAD``), modulo 2**64: what
    :func:`grafted_hashes` corrects for a state that reads like it."""
    key = hashes.tobytes()
    known = _PLAIN_SUMS.get(key)
    if known is None:
        rows = plain_string_rule().trans
        extended = np.append(hashes, np.full((2, 1), _DEAD, dtype=np.uint64), axis=1)
        with np.errstate(over="ignore"):
            first = (extended[0][rows] * _BYTE_WEIGHTS).sum(axis=1, dtype=np.uint64)
            second = (extended[1][rows] * _BYTE_WEIGHTS).sum(axis=1, dtype=np.uint64)
        known = _PLAIN_SUMS[key] = (first.tolist(), second.tolist())
    return known


# A key lexeme's tree state differing from the plain between-characters state in more
# bytes than this is compared with every plain state (see grafted_hashes).
_FEW_FIXES = 16
_BACKSLASH = ord("\\")
# The escape states' hashes of key lexemes by hash depth (see _key_escapes).
_KEY_ESCAPES: dict[int, tuple[list[int], list[int]]] = {}


def _mix(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Scramble hash values (a 64-bit finaliser; wraps around, in place: NumPy
    integer arrays wrap silently, no error state to set)."""
    values ^= values >> _SHIFT_1
    values *= _MULTIPLIER
    values ^= values >> _SHIFT_2
    return values


def byte_classes(
    trans: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The bytes that every state treats alike, as classes: each class's first byte,
    and each byte's class. Columns are compared by a 64-bit fold (two 32-bit ones),
    so equal up to 64-bit collisions, like the state hashes themselves."""
    _, first, inverse = np.unique(column_folds(trans), return_index=True, return_inverse=True)
    return first.astype(np.int64), inverse.reshape(-1).astype(np.int64)


def column_folds(trans: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
    """Per byte, a 64-bit fold of its column (two 32-bit weighted sums, wrapping)."""
    states = trans.shape[0]
    weights = _FOLD_WEIGHTS[:, np.arange(states) % _FOLD_WEIGHTS.shape[1]]
    high = np.einsum("i,ij->j", weights[0], trans).astype(np.int64)
    low = np.einsum("i,ij->j", weights[1], trans).astype(np.int64) & 0xFFFFFFFF
    folds: npt.NDArray[np.int64] = (high << 32) | low
    return folds


def _weighted_edges(
    trans: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp], npt.NDArray[np.uint64]] | None:
    """An automaton as weighted edges for hashing: per state (``source``, ascending),
    its distinct targets (``target``; dead: the extra slot ``states``) with the
    summed byte weights of the bytes that lead there
    (``summed``): a few per state, where bytes are 256. Bytes every state treats alike
    are folded into one class first. None when states x byte classes exceed
    ``HASH_BUDGET // 2``."""
    states = trans.shape[0]
    first, inverse = byte_classes(trans)
    if states * first.size > HASH_BUDGET // 2:
        return None
    weights = np.zeros(first.size, dtype=np.uint64)
    np.add.at(weights, inverse.reshape(-1), _BYTE_WEIGHTS)
    targets = trans[:, first].astype(np.int64)
    targets[targets < 0] = states
    sources = np.arange(states, dtype=np.int64)
    pairs = (sources[:, None] * (states + 1) + targets).reshape(-1)
    order = np.argsort(pairs, kind="stable")
    pairs = pairs[order]
    fresh = np.ones(pairs.size, dtype=np.bool_)
    fresh[1:] = pairs[1:] != pairs[:-1]
    starts = np.flatnonzero(fresh)
    summed = np.add.reduceat(np.tile(weights, states)[order], starts)
    kept = pairs[starts]
    return kept // (states + 1), (kept % (states + 1)).astype(np.intp), summed


def state_hashes(
    trans: npt.NDArray[np.int32], crossing: npt.NDArray[np.bool_], depths: tuple[int, ...]
) -> npt.NDArray[np.uint64] | None:
    """Per state, for each ``d`` of ``depths`` (ascending; one row each), a hash of
    everything the automaton does in the next ``d`` bytes.

    Two states (of any automata) with equal hashes at depth ``d`` behave alike on
    every byte string of at most ``d`` bytes: the same strings are read, crossing
    states are met at the same offsets (the hash is a depth-bounded bisimulation
    class, up to 64-bit collisions). Bytes that every state treats alike are folded
    into one class first, and the classes leading one state to one target into one
    weighted edge, so a step costs the distinct (state, target) pairs; None when states
    x depth, states x byte classes or pairs x depth exceed ``HASH_BUDGET`` (or twice
    it; big structural rules, which rarely recur anyway).
    """
    states, deepest = trans.shape[0], depths[-1]
    if states * deepest > HASH_BUDGET:
        return None
    edges = _weighted_edges(trans)
    if edges is None or edges[0].size * deepest > 2 * HASH_BUDGET:
        return None
    source, target, summed = edges
    base = np.where(crossing, np.uint64(0x5851F42D4C957F2D), np.uint64(0x14057B7EF767814F))
    kernels = native.KERNELS
    if kernels is not None:  # (the loop below in C: one multiply-add per edge and depth)
        out = np.empty((len(depths), states), dtype=np.uint64)
        wanted = np.array(depths, dtype=np.int64)
        kernels.r7hash_depths(
            source, target.astype(np.int64), summed, base, int(_DEAD), wanted, out
        )
        return out
    bounds = np.searchsorted(source, np.arange(states))
    hashes = base.copy()  # depth 0: is the state crossing
    extended = np.full(states + 1, _DEAD, dtype=np.uint64)
    rows: list[npt.NDArray[np.uint64]] = []
    with np.errstate(over="ignore"):
        for depth in range(1, deepest + 1):
            extended[:states] = hashes
            hashes = _mix(np.add.reduceat(extended[target] * summed, bounds) + base)
            if depth in depths:
                rows.append(hashes)
    result: npt.NDArray[np.uint64] = np.stack(rows)
    return result


# -- the plain string, and states that act as its states --------------------------------


def plain_loops(
    trans: npt.NDArray[np.int32], crossing: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    """The states that read like the plain string between characters: a loop on a
    plain character, the same bytes readable, the same crossing flag."""
    plain = plain_string_rule()
    between = int(plain.trans[0, QUOTE])
    looping = trans[:, _PLAIN_CHAR] == np.arange(trans.shape[0])
    looping &= crossing == plain.accepting[between]
    candidates = np.flatnonzero(looping)
    if candidates.size:
        pattern = plain.trans[between] >= 0
        candidates = candidates[((trans[candidates] >= 0) == pattern).all(axis=1)]
    return candidates


@functools.cache
def _plain_paths() -> tuple[tuple[int, bytes], ...]:
    """Each plain string state reachable from the between-characters state, with a
    shortest byte string that leads there from it (the between state first)."""
    plain = plain_string_rule().trans
    between = int(plain[0, QUOTE])
    paths = {between: b""}
    queue = [between]
    for state in queue:
        for byte in np.flatnonzero(plain[state] >= 0).tolist():
            target = int(plain[state, byte])
            if target not in paths:
                paths[target] = paths[state] + bytes([byte])
                queue.append(target)
    return tuple(paths.items())


def _plain_states(
    trans: npt.NDArray[np.int32], crossing: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64] | None:
    """Per state, the plain string's state it acts exactly as (-1: none); None when
    there are none.

    From each state of :func:`plain_loops`, the plain string's states are paired
    with the states their paths (:func:`_plain_paths`) lead to here; the pairing
    stands if it is a bisimulation: paired states read the same bytes into paired
    states and have the same crossing flag (one vectorised check per candidate)."""
    plain = plain_string_rule()
    plain_trans, plain_crossing = plain.trans, plain.accepting
    paths = _plain_paths()
    theirs = np.array([state for state, _ in paths], dtype=np.int64)
    expected_rows = plain_trans[theirs]
    live = expected_rows >= 0
    plain_of = np.full(trans.shape[0], -1, dtype=np.int64)
    table = memoryview(np.ascontiguousarray(trans).reshape(-1))  # type: ignore[arg-type]
    found = False
    for candidate in plain_loops(trans, crossing).tolist():
        ours = []
        for _, path in paths:
            here = candidate
            for byte in path:
                here = table[here * 256 + byte] if here >= 0 else -1
            ours.append(here)
        if min(ours) < 0:
            continue
        pairing = np.full(plain_trans.shape[0], -1, dtype=np.int64)
        pairing[theirs] = ours
        if len(set(ours)) != len(ours) or (plain_of[ours] >= 0).any():
            continue  # (not one to one, or met from another candidate)
        rows = trans[ours]
        if not np.array_equal(np.where(live, pairing[np.maximum(expected_rows, 0)], -1), rows):
            continue
        if not np.array_equal(crossing[ours], plain_crossing[theirs]):
            continue
        plain_of[ours] = theirs
        found = True
    return plain_of if found else None


# -- hashes grafted onto the plain string's --------------------------------------------


def grafted_hashes(
    plain: RuleInfo, crossing: npt.NDArray[np.bool_], trans: npt.NDArray[np.int32]
) -> npt.NDArray[np.uint64] | None:
    """State hashes for a lexeme whose states act exactly as the plain string's
    (:func:`_plain_states`) but for an acyclic part in front of them: a key that
    is not one of the declared names spells a prefix of them (a tree) until it
    falls into the plain string body. The plain part takes the plain string's
    hashes; each other state, from the leaves up, a hash of whether it is
    crossing and of its targets' hashes by byte. That hash says "acts exactly
    alike" (not only for a bounded depth): equal values still mean equal walks,
    shared with the plain string and with equal states of other key lexemes
    ("nam" where only "name" goes on, in any schema). None when no state acts as
    the plain string's, or the rest has a cycle.

    A state's hash sums, over the bytes, the byte's weight times its target's
    hash. A tree state reads like some plain string state (its *model*: the one
    its row agrees with most) but for a few bytes (the next letters of the names,
    the closing quote), so its sum is the model's, taken from a table, corrected
    on those bytes only: the work grows with the tree, not with tree states times
    256 bytes. One pass in plain Python, where hashing takes a pass per depth
    (~130 for Qwen2.5) and was the slowest part of the slowest masks: over the
    benchmark, three networks in four had a key lexeme as the only lexeme left
    to hash.
    """
    plain_hashes = plain.hashes
    if not isinstance(plain_hashes, np.ndarray):  # (None: too big to hash, never here)
        return None
    plain_of = _plain_states(trans, crossing)
    if plain_of is None:
        return None
    sums = _plain_sums(plain_hashes)
    plain_rows = plain.flat.reshape(-1, 256)
    states, count = trans.shape[0], plain_rows.shape[0]
    rest = np.flatnonzero(plain_of < 0)
    # Each target as the plain state it acts as; a tree state as count + itself
    # (never equal to a plain row's entry); dead stays -1.
    as_plain = np.where(plain_of >= 0, plain_of, count + np.arange(states))
    rows = trans[rest]
    mapped = np.where(rows >= 0, as_plain[np.maximum(rows, 0)], -1)
    # The model: the between-characters state, unless the row differs from it in
    # many bytes (the opening quote's state, or inside a multibyte character):
    # then the plain state it agrees with most.
    models = np.full(rest.size, int(plain.flat[QUOTE]), dtype=np.int64)
    differ = mapped != plain_rows[models]
    far = np.flatnonzero(differ.sum(axis=1) > _FEW_FIXES)
    if far.size:
        agree = (mapped[far, None, :] == plain_rows[None, :, :]).sum(axis=2)
        models[far] = agree.argmax(axis=1)
        differ[far] = mapped[far] != plain_rows[models[far]]
    which, where = np.nonzero(differ)
    # Per state, its two hashes (the plain part's and the dead slot's known).
    extended = np.full((2, states + 1), _DEAD, dtype=np.uint64)
    known = np.flatnonzero(plain_of >= 0)
    extended[:, known] = plain_hashes[:, plain_of[known]]
    low, high = extended.tolist()
    plain_low, plain_high = np.append(plain_hashes, extended[:, -1:], axis=1).tolist()
    # Per tree state: (target, byte weight, the model's target) where they differ.
    fixes: dict[int, list[tuple[int, int, int]]] = {state: [] for state in rest.tolist()}
    rest_list, weights = rest.tolist(), _BYTE_WEIGHT_LIST
    targets, theirs = rows[which, where].tolist(), plain_rows[models[which], where].tolist()
    for index, byte, target, their in zip(
        which.tolist(), where.tolist(), targets, theirs, strict=True
    ):
        fixes[rest_list[index]].append((target, weights[byte], their))
    model_of = dict(zip(rest_list, models.tolist(), strict=True))
    done = bytearray(states + 1)
    done[states] = 1
    for state in known.tolist():
        done[state] = 1
    flags = crossing.tolist()
    for root in rest_list:
        work, busy = [root], set()
        while work:
            state = work[-1]
            if done[state]:
                work.pop()
                continue
            waiting = [target for target, _, _ in fixes[state] if not done[target]]
            if waiting:
                if state in busy:
                    return None  # a cycle outside the part that acts as the plain string
                busy.add(state)
                work.extend(waiting)
                continue
            start = _TREE_CROSSING if flags[state] else _TREE_INNER
            model = model_of[state]
            first, second = sums[0][model] + start, sums[1][model] + start
            for target, weight, their in fixes[state]:
                first += weight * (low[target] - plain_low[their])
                second += weight * (high[target] - plain_high[their])
            low[state], high[state] = _mix_int(first), _mix_int(second)
            done[state] = 1
            work.pop()
    return np.array([low[:states], high[:states]], dtype=np.uint64)


def key_hashes(
    plain: RuleInfo,
    depth: int,
    names: tuple[str, ...],
    crossing: npt.NDArray[np.bool_],
    trans: npt.NDArray[np.int32],
) -> KeyHashes | None:
    """The state hashes of a key lexeme of plain ``names`` (see :class:`KeyHashes`),
    or None where its table is not laid out as :func:`extra_key_body`'s of those
    names, quoted. A table :func:`quoted_rule` made around that body is known so by
    identity (:func:`key_rule_names`); any other is checked whole in a few vector
    comparisons (see :func:`_key_layout`, ~20-40 us). The key trie is cached since
    compiling."""
    escapes = _key_escapes(plain, depth)
    plain_hashes = plain.hashes
    if not isinstance(plain_hashes, np.ndarray) or escapes is None:
        return None
    if not is_plain_name("".join(names)):  # (a property of each character)
        return None
    trie = key_trie(names)
    if key_rule_names(trans) != names and not _key_layout(plain, trie, crossing, trans):
        return None
    return KeyHashes(plain_hashes, escapes, trie)


def _key_layout(
    plain: RuleInfo, trie: KeyTrie, crossing: npt.NDArray[np.bool_], trans: npt.NDArray[np.int32]
) -> bool:
    """Whether ``trans`` is the quoted key lexeme of ``trie``'s names, checked whole:
    the size, state 0, the rows and crossing flags of the escape states and of the
    plain part; and every prefix's row, the plain body between characters but for the
    names' next letters and the quote after a name."""
    count = trie.size
    shift = count + 4  # (a rule state k of the plain body is k + shift)
    tail, tail_crossing = _key_tail()
    ours = trans[shift - 3 :]
    if ours.shape != tail.shape or crossing.size != trans.shape[0]:
        return False
    if not np.array_equal(np.where(ours >= 0, ours - shift, -1), tail):
        return False
    if crossing[: shift - 3].any() or not np.array_equal(crossing[shift - 3 :], tail_crossing):
        return False
    if trans[0, QUOTE] != 1 or np.count_nonzero(trans[0] >= 0) != 1:
        return False
    base = trans[shift + int(plain.flat[QUOTE])].copy()  # the body between characters
    base[_BACKSLASH] = shift - 3
    prefixes = trans[1 : count + 1]  # (body state i is rule state i + 1)
    # (A next letter's target, a prefix's state, and the quote refused after a name
    # differ from the base's entries, which lead into the escapes or the plain part.)
    if not np.array_equal(prefixes[trie.parents, trie.letters], np.arange(2, count + 1)):
        return False
    if (prefixes[trie.named, QUOTE] != -1).any():
        return False
    return bool(np.count_nonzero(prefixes != base) == trie.letters.size + trie.named.size)


@functools.cache
def _key_tail() -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
    """What every key lexeme ends with, its escape states' and plain part's rows
    (targets less the lexeme's shift, see :func:`key_hashes`) and crossing flags:
    those of the key lexeme of no names, checked once per process against the plain
    string (its plain part must be the plain string's states, as their hashes say)."""
    lexeme, shift = _no_names_lexeme(), 5  # (state 0, the empty prefix, the escapes)
    ours = lexeme.trans[shift - 3 :]
    tail = np.where(ours >= 0, ours - shift, -1).astype(np.int32)
    plain = plain_string_rule()
    crossing = facts(lexeme).crossing
    body = tail[4:]  # (the plain part: a plain state k here is k + shift there)
    same = np.array_equal(body, plain.trans[1:]) and not crossing[:2].any()
    same = same and np.array_equal(crossing[shift + 1 :], facts(plain).crossing[1:])
    if not same:  # pragma: no cover - keys.py's layout changed
        raise AssertionError("key lexemes must end with the plain string's states")
    return tail, crossing[shift - 3 :]


@functools.cache
def _no_names_lexeme() -> RuleDFA:
    """The key lexeme of no names (its escape states are every key lexeme's)."""
    body = extra_key_body(())
    assert body is not None  # (no names are always plain)
    return quoted_rule("key", body)


def _key_escapes(plain: RuleInfo, depth: int) -> tuple[list[int], list[int]] | None:
    """The hashes of the four escape states of a key lexeme (after ``\\``,
    ``\\u``, ``\\u0``, ``\\u00``): alike in every key lexeme, they are those of the
    key lexeme of no names, grafted once per process and hash depth."""
    known = _KEY_ESCAPES.get(depth)
    if known is None:
        lexeme = _no_names_lexeme()
        hashes = grafted_hashes(plain, facts(lexeme).crossing, lexeme.trans)
        if hashes is None:
            return None
        low, high = hashes[:, 2:6].tolist()
        known = _KEY_ESCAPES[depth] = (low, high)
    return known
