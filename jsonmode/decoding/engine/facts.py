"""Facts every stage of the mask engine reads, built once and shared.

Of the vocabulary: :class:`TokenIndex`, its tokens in lexicographic byte order with
the token trie over them (built once per vocabulary and process: ~20 MB and ~0.3 s
for Qwen2.5). Of one automaton: :class:`Facts`, its crossing states and the bytes
each state reads (:class:`ReadLists`), worked out once per automaton and process.
Of one rule as the walks see it: :class:`RuleInfo` (its content signature, flat
table and state hashes; :mod:`~jsonmode.decoding.engine.rules` fills it in) and,
for a string with length bounds only, :class:`Counted`.

Records only: computing them is left to the stages. Everything here is immutable once
built or memoised by idempotent writes of equal values: thread-safe.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.automata.network import RuleDFA
from jsonmode.decoding.engine.entries import lexicographic_order
from jsonmode.decoding.engine.keyhashes import KeyHashes
from jsonmode.decoding.engine.trie import TokenTrie
from jsonmode.decoding.vocabulary import Vocabulary

Rows = npt.NDArray[np.int64]
# A rule's state hashes, ``hashes[row, state]`` (see RuleInfo): an array of all, or a
# key lexeme's, worked out per state (keyhashes.KeyHashes).
StateHashes: TypeAlias = "npt.NDArray[np.uint64] | KeyHashes"

QUOTE = ord('"')
# Token matrix rows searched at once for quotes (see TokenIndex.quoted): ~2 MB a copy.
_CHUNK_ROWS = 16_384

# -- token sets as bits ----------------------------------------------------------------------
#
# A set of token ids as bits, the form masks are kept and handed out in: token ``t`` is
# bit ``t % 8`` (least significant first) of byte ``t // 8``, and the bytes are padded to
# whole 32-bit words; so on a little-endian machine, read as 32-bit words, token ``t``
# is bit ``t % 32`` of word ``t // 32`` (the layout of vLLM's, xgrammar's and
# llguidance's token bitmasks). Eight times smaller than a bool per token: a mask
# is built, kept and copied with that much less memory traffic.

Bits = npt.NDArray[np.uint8]
BIT = np.array([1 << shift for shift in range(8)], dtype=np.uint8)
# Ids set one by one up to this many (``np.bitwise_or.at``); more through flags.
_FEW_IDS = 1024


def bits_size(size: int) -> int:
    """Bytes in the bits of ``size`` token ids (whole 32-bit words)."""
    return 4 * ((size + 31) // 32)


def pack_flags(flags: npt.NDArray[np.bool_]) -> Bits:
    """Bool flags per token id as bits (a fresh array)."""
    out = np.zeros(bits_size(flags.size), dtype=np.uint8)
    packed = np.packbits(flags, bitorder="little")
    out[: packed.size] = packed
    return out


def unpack_bits(bits: Bits, size: int) -> npt.NDArray[np.bool_]:
    """Bits as bool flags per token id, ``size`` of them (a fresh array)."""
    flags: npt.NDArray[np.bool_] = np.unpackbits(bits, count=size, bitorder="little").view(np.bool_)
    return flags


def set_ids(bits: Bits, ids: npt.NDArray[np.integer[Any]]) -> None:
    """Set the bits of ``ids`` in place (a few ids one by one, many through flags;
    or all in one pass of the compiled core: :mod:`jsonmode.native`)."""
    kernels = native.KERNELS
    if kernels is not None:
        kernels.set_bits(bits, np.ascontiguousarray(ids, dtype=np.int64))
        return
    if ids.size <= _FEW_IDS:
        np.bitwise_or.at(bits, ids >> 3, BIT[ids & 7])
    else:
        flags = np.zeros(bits.size * 8, dtype=np.bool_)
        flags[ids] = True
        np.bitwise_or(bits, np.packbits(flags, bitorder="little"), out=bits)


def has_id(bits: Bits, token: int) -> bool:
    """Whether the bit of ``token`` is set."""
    return bool(bits[token >> 3] >> (token & 7) & 1)


# -- of the vocabulary ---------------------------------------------------------------------


class TokenIndex:
    """The vocabulary's tokens in lexicographic byte order ("positions").

    ``matrix``/``lengths``/``ids`` are the vocabulary's, in position order; the
    tokens starting with byte ``b`` are positions ``offsets[b]:offsets[b + 1]``.
    Empty tokens are left out. Built once per vocabulary, with the token trie over the
    same positions (~20 MB and ~0.3 s for Qwen2.5), by the first engine for that
    vocabulary: per-vocabulary set-up, not left to the first mask.
    """

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.fingerprint = vocabulary.fingerprint
        lengths = vocabulary.lengths.astype(np.int64)
        nonempty = np.flatnonzero(lengths > 0)
        order = nonempty[lexicographic_order(vocabulary.matrix[nonempty], lengths[nonempty])]
        self.matrix = np.ascontiguousarray(vocabulary.matrix[order])
        self.lengths = lengths[order]
        self.ids = vocabulary.ids[order].astype(np.int64)
        self.offsets = np.searchsorted(self.matrix[:, 0], np.arange(257)).astype(np.int64)
        self.trie = TokenTrie(self.matrix, self.lengths)
        self.longest = int(self.lengths.max(initial=1))
        # The same, for plain-Python reads (an int per index, no NumPy scalar).
        self.flat_bytes = memoryview(self.matrix).cast("B")  # type: ignore[arg-type]
        self.width = int(self.matrix.shape[1])
        self.lengths_view = memoryview(self.lengths)  # type: ignore[arg-type]
        self._quoted: dict[bytes, tuple[int, int]] | None = None

    @property
    def quoted(self) -> dict[bytes, tuple[int, int]]:
        """Per text a token has before its first ``"`` (none: the text itself), the
        positions ``lo .. hi - 1`` of the tokens that begin with that text and a quote:
        those tokens, and only they, do so (a text without a quote sorts them together).
        Worked out on first use, in the per-vocabulary set-up (~1 300 of Qwen2.5's
        tokens have a quote: ~8 ms, a search of the token matrix)."""
        known = self._quoted
        if known is None:
            width, lengths = self.width, self.lengths_view
            known = {}
            for chunk in range(0, self.lengths.size, _CHUNK_ROWS):  # (a copy a chunk)
                data = self.matrix[chunk : chunk + _CHUNK_ROWS].tobytes()
                at = data.find(b'"')
                while at >= 0:
                    row, column = divmod(at, width)
                    position = chunk + row
                    if column < lengths[position]:  # (not in the padding)
                        text = data[row * width : at]
                        lo, hi = known.get(text, (position, position))
                        known[text] = (min(lo, position), max(hi, position + 1))
                    at = data.find(b'"', (row + 1) * width)
            self._quoted = known
        return known


_indexes: dict[str, TokenIndex] = {}
_indexes_lock = threading.Lock()


def token_index(vocabulary: Vocabulary) -> TokenIndex:
    """The vocabulary's token index (the last 8 vocabularies' are kept)."""
    with _indexes_lock:
        index = _indexes.get(vocabulary.fingerprint)
        if index is None:
            if len(_indexes) >= 8:
                _indexes.pop(next(iter(_indexes)))
            index = _indexes[vocabulary.fingerprint] = TokenIndex(vocabulary)
        return index


# -- of one automaton ----------------------------------------------------------------------


class ReadLists(dict[int, list[int]]):
    """The bytes each state of one automaton reads, ascending (lists shared: never
    to be changed), worked out on first lookup from the state's row as 256 bits.
    A small automaton's rows are bit-packed at once, a big one's row by row (a walk
    visits few of its states). Rows recur (a string body's, a digit's), so the
    lists are memoised by row, process-wide; a new row with few bytes (a structural
    state reads one or two) is read off the bits of one int, others by a NumPy scan
    (~10 us, where the rest takes ~1 us)."""

    def __init__(self, trans: npt.NDArray[np.int32]) -> None:
        super().__init__()
        self.trans = trans
        self.bits: bytes | None = None  # (packed on the first lookup)

    def __missing__(self, state: int) -> list[int]:
        trans = self.trans
        if trans.shape[0] > _PACKED_STATES:
            row = np.packbits(trans[state] >= 0, bitorder="little").tobytes()
        else:
            if self.bits is None:
                self.bits = np.packbits(trans >= 0, axis=1, bitorder="little").tobytes()
            row = self.bits[state * 32 : state * 32 + 32]
        found = self[state] = _byte_list(row, trans[state])
        return found


def _byte_list(bits: bytes, row: npt.NDArray[np.int32]) -> list[int]:
    """The bytes a state reads, ascending, from its row (``row``) packed as 256 bits
    (``bits``, little-endian): memoised by ``bits`` process-wide (shared lists, never
    to be changed); few bytes are read off the bits of one int, more by a NumPy scan."""
    found = _row_reads.get(bits)
    if found is None:
        word = int.from_bytes(bits, "little")
        if word.bit_count() <= _FEW_READS:
            found = []
            while word:
                low = word & -word
                found.append(low.bit_length() - 1)
                word ^= low
        else:
            found = (row >= 0).nonzero()[0].tolist()
        if len(_row_reads) >= _ROWS_KEPT:
            _row_reads.clear()
        _row_reads[bits] = found
    return found


_PACKED_STATES = 512  # automata up to this size have all their rows packed at once
_FEW_READS = 24  # bytes read off a packed row one bit at a time; more: a NumPy scan
_ROWS_KEPT = 1 << 14  # distinct rows memoised (_row_reads; cleared when full)
_row_reads: dict[bytes, list[int]] = {}


@dataclass(frozen=True, slots=True)
class Facts:
    """What the walks read of one automaton: its crossing states (as flags and as
    0/1 bytes, see :func:`_crossing_states`) and its read lists."""

    crossing: npt.NDArray[np.bool_]
    flags: bytes
    reads: ReadLists


# Per automaton (lexemes are shared by the networks that use them), its facts.
_facts_of: weakref.WeakKeyDictionary[RuleDFA, Facts] = weakref.WeakKeyDictionary()
_facts_lock = threading.Lock()


def facts(rule: RuleDFA) -> Facts:
    """The automaton's :class:`Facts`, worked out once per process."""
    with _facts_lock:
        known = _facts_of.get(rule)
    if known is None:
        crossing = _crossing_states(rule)
        crossing.flags.writeable = False  # (shared)
        known = Facts(crossing, crossing.astype(np.uint8).tobytes(), ReadLists(rule.trans))
        with _facts_lock:
            known = _facts_of.setdefault(rule, known)
    return known


def _crossing_states(automaton: RuleDFA) -> npt.NDArray[np.bool_]:
    """Per state, whether it accepts or calls: where a token passing it may go on in
    another rule."""
    calling = np.fromiter(map(bool, automaton.calls), dtype=np.bool_, count=automaton.n_states)
    crossing: npt.NDArray[np.bool_] = automaton.accepting | calling
    return crossing


# -- of one rule, as the walks see it ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Follow:
    """The bytes that may be read first once a lexeme has returned (see
    :mod:`~jsonmode.decoding.automata.follow`), as its walks use them: ``flags``, 256
    read-only bools; ``tag``, the bytes that key a walk or segment made with them (a
    walk that keeps only the boundary entries whose rest starts with a flagged byte
    serves no lexeme followed by other bytes)."""

    flags: npt.NDArray[np.bool_]
    tag: bytes

    @staticmethod
    def of(bits: int) -> Follow:
        """The set of a 256-bit integer (bit ``b``: byte ``b``)."""
        packed = bits.to_bytes(32, "little")
        bits_of = np.unpackbits(np.frombuffer(packed, dtype=np.uint8), bitorder="little")
        flags: npt.NDArray[np.bool_] = bits_of.astype(np.bool_)
        flags.flags.writeable = False
        return Follow(flags, b" follow " + packed)


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """What the walks need of one rule automaton: its content signature, its
    crossing states (accepting or calling), its flat transition table (-1: no
    transition), and per state bounded-depth behaviour hashes (None for automata too
    big to hash): row 0 looks as far as the longest token after its first byte, row 1
    as far as the longest token (each with a byte to spare). ``counted``: for a
    string with length bounds only, its states as the plain string's plus a count.
    What only some walks need is computed on first use (:meth:`reads`,
    :meth:`dead`)."""

    signature: bytes
    crossing: npt.NDArray[np.bool_]
    flat: npt.NDArray[np.int32]
    hashes: StateHashes | None
    counted: Counted | None = None
    readable: dict[int, list[int]] = field(default_factory=dict)  # memo of reads()
    dead_memo: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]] = field(
        default_factory=list
    )
    safe_memo: list[npt.NDArray[np.int8]] = field(default_factory=list)  # see slices.is_safe

    def reads(self, state: int) -> list[int]:
        """The bytes ``state`` can read, ascending."""
        known = self.readable.get(state)
        if known is None:
            row = self.flat[state * 256 : state * 256 + 256]
            bits = np.packbits(row >= 0, bitorder="little").tobytes()
            known = self.readable[state] = _byte_list(bits, row)
        return known

    def dead(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
        """The flat table with an absorbing dead state (dead = ``crossing.size``, for
        every missing transition), and the crossing flags with it (False): what the
        vectorised walks gather from, dead prefixes included."""
        if not self.dead_memo:
            flat, dead = self.flat, self.crossing.size
            table = np.full(flat.size + 256, dead, dtype=np.int32)
            table[: flat.size] = np.where(flat >= 0, flat, dead)
            self.dead_memo.append((table, np.append(self.crossing, False)))
        return self.dead_memo[0]


@dataclass(frozen=True, slots=True)
class Counted:
    """A string with length bounds only (``RuleDFA.lengths``) as the plain string
    (``plain``; for a GBNF counted repetition, its plain automaton ``'"' X* '"'``,
    ``RuleDFA.counts_over``, whose characters are the items) plus a count: per
    state, the plain string's state it acts as
    (``plain_of``) and the characters begun so far (``chars``; capped at ``low``
    when there is no upper bound). From a state, a token fares as from its plain
    state, except that it dies once it begins more than ``high - chars`` characters,
    or closes the string after fewer than ``low - chars``."""

    plain: RuleInfo
    plain_of: npt.NDArray[np.int64]
    chars: npt.NDArray[np.int64]
    low: int
    high: int | None
    #: The plain string's state between characters (after its opening quote).
    between: int


def opening_quote(flat: npt.NDArray[np.int32]) -> int:
    """The opening quote of a quoted rule (a JSON string, a counted repetition's
    ``q X* q``) whose flat table is ``flat``: the first byte its state 0 reads (the only
    one, for a quoted rule). A pass over 256 entries."""
    return int(np.argmax(flat[:256] >= 0))
