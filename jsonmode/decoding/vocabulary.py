"""A tokenizer's vocabulary as exact bytes, laid out for vectorised mask computation.

    >>> vocab = Vocabulary.from_tokenizer("path/to/tokenizer.json")      # doctest: +SKIP
    >>> vocab.token_bytes(9707), sorted(vocab.eos_ids)                    # doctest: +SKIP
    (b'Hello', [151643, 151645])

The decoder never looks at token *strings*: it walks the bytes each token adds to
the text. Those bytes are recovered from ``tokenizer.json`` by the tokenizer's
decoding scheme, detected from its ``decoder`` / ``pre_tokenizer`` configuration
(never from a model name):

* **byte-level BPE** (GPT-2, Llama-3, Qwen2.5: ``ByteLevel`` decoder): token strings
  spell bytes through GPT-2's byte-to-unicode table, which is inverted exactly.
  A token may hold part of a UTF-8 character; its bytes are kept raw, never decoded.
* **SentencePiece** (Llama-2, Mistral, Phi-3: ``Replace("▁", " ")`` + ``ByteFallback``
  + ``Fuse`` + ``Strip``, or a ``Metaspace`` decoder): ``▁`` is a space, ``<0xNN>``
  pieces are the single byte ``NN``, other pieces are their UTF-8. The ``Strip``
  (or Metaspace) decoder drops one leading space from the start of a *decoded
  text*; that is a decode-time artifact and is not applied here, so a token keeps
  its leading space. Consequence: the first token of a generation that starts a
  fresh text shows a leading space (``"▁{"`` is ``b" {"``) — exactly right for a
  continuation of a prompt, which is how generation works.

Control tokens. Only ordinary vocabulary tokens may be written into a document;
end-of-sequence ids only where it may end. An *added* token (``added_tokens`` in
tokenizer.json) is a **control token** when

* it is marked ``special``, or
* its content is a *marker*: ``<…>`` or ``[…]`` around at least one character,
  with no whitespace anywhere (``<tool_call>``, ``</tool_call>``, ``<|fim_pad|>``,
  ``<|file_sep|>`` and ``<|repo_name|>`` in Qwen2.5, ``</s>`` in Phi-3, ``[INST]``,
  ``<｜end▁of▁sentence｜>``). Tokenizers add such tokens as *non-special* so that
  they survive decoding, not because they are text: a model emits them to leave
  the document (a tool call, a fill-in-the-middle sentinel), never inside a value.

Control tokens have no bytes, are listed in ``special_ids`` and are never allowed
except as end-of-sequence (the turn and document enders among them, plus the
configured eos ids). Every other added token is text: its bytes are the UTF-8 of
its content (the runs of spaces or tabs some code tokenizers add; anything with
whitespace in it). The consequence of the marker rule: an added token that really
is text and looks like a tag (``<br>`` added as one token) is not written either;
its text still is, by ordinary tokens. Of the base vocabulary only the model's
unknown token (``unk_token`` / ``unk_id``) is a control token; every other base
token is text (``<div>`` pieces of a BPE vocabulary are real text).

The rule reads only tokenizer.json, so every path that has one applies it alike:
a folder or file, a ``tokenizers.Tokenizer`` and a transformers tokenizer (whose
backend serialises its tokenizer.json, tokens added at run time included: a token
added with ``add_tokens(["<think>"])`` is a control token, one added with
``add_tokens(["    "])`` is text). :meth:`Vocabulary.from_token_bytes` has no
added-token list: there the caller declares its control tokens in ``special_ids``
and every other id with bytes is text.

Ids without a token and ids padded on by a wider model head (``vocab_size``) have
no bytes and are never allowed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.collector import collector_paused
from jsonmode.errors import UsageError

__all__ = ["Vocabulary", "is_control_token"]

# Added tokens that end a turn or a document. One of them is an eos only when the
# tokenizer has it as an added token; configs add the ids they name on top.
_TURN_ENDERS = frozenset(
    {
        "</s>",
        "<eos>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<|end|>",
        "<|eom_id|>",
        "<|eot|>",
        "<|eot_id|>",
        "<|im_end|>",
        "<|return|>",
        "<｜end▁of▁sentence｜>",
    }
)

# An added token whose content is one of these is a control token, special or not
# (see the module docstring): a tag in angle or square brackets, no whitespace.
_MARKER = re.compile(r"<\S+>|\[\S+\]")

_SPACE_MARK = "\u2581"  # SentencePiece's "▁"
_CACHE_SIZE = 8  # vocabularies kept alive by the fingerprint cache (a big one is ~25 MB)
_FORMAT = b"jsonmode.Vocabulary/1\0"


def is_control_token(content: str, *, special: bool) -> bool:
    """Whether an added token with this ``content`` is a control token, never text.

    True when the tokenizer marks it ``special``, or when its content is a marker:
    ``<…>`` or ``[…]`` around at least one character, with no whitespace (see the
    module docstring). ``"<tool_call>"``, ``"<|fim_pad|>"``, ``"</s>"``, ``"[INST]"``
    are; ``"    "``, ``"<a b>"``, ``"<>"``, ``"plain text"`` are not. O(len(content)).
    """
    return special or _MARKER.fullmatch(content) is not None


def _gpt2_unicode_to_byte() -> npt.NDArray[np.int16]:
    """GPT-2's ``bytes_to_unicode`` inverted: code point -> byte, -1 where none.

    The last entry is always -1 so that ``table[min(cp, len - 1)]`` maps every code
    point outside the table to "not a byte".
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = dict(zip(printable, printable, strict=True))
    shifted = 0
    for byte in range(256):
        if byte not in chars:
            chars[byte] = 256 + shifted
            shifted += 1
    table = np.full(max(chars.values()) + 2, -1, dtype=np.int16)
    for byte, char in chars.items():
        table[char] = byte
    return table


_UNICODE_TO_BYTE = _gpt2_unicode_to_byte()


class Vocabulary:
    """Every token id's exact bytes, plus the arrays a vectorised decoder walks.

    Build with :meth:`from_tokenizer` (or :meth:`from_token_bytes` for synthetic
    vocabularies in tests). Immutable once built, so one instance is safely shared
    by any number of threads, compiled schemas and matchers. Building Qwen2.5
    (151 665 tokens) takes ~0.15 s from its tokenizer.json and ~0.3 s from a live
    tokenizer object (serialising and parsing the JSON is most of it; recovering the
    bytes and laying out the matrix ~40 ms); a cached one comes back in well under a
    millisecond. The matrix costs ``n_normal * max_len`` bytes (~19 MB for Qwen2.5).

    Every attribute below is a plain value read in O(1); the arrays are read-only
    (``flags.writeable`` is False), so readers in any thread need no lock.

    Attributes:
        size: width of a token mask: ``max(vocab_size or 0, number of token ids)``.
        eos_ids: every end-of-sequence id: the configured eos token(s) plus the turn
            and document enders present among the added tokens (``<|im_end|>``,
            ``<|eot_id|>``, ``<|endoftext|>``, ``</s>``, ...). A subset of
            ``special_ids``; never in ``allowed_base``.
        special_ids: control tokens (the eos ids, and every added token that is
            special or a marker such as ``<tool_call>``; see the module docstring):
            no bytes, never allowed except eos where the document may end.
        allowed_base: bool array of length ``size``: True exactly for ordinary tokens
            with non-empty bytes (never special, unused or padded).
        matrix: uint8 array ``(n_normal, max_len)``: the bytes of every ordinary token,
            one row each, zero-padded, rows sorted by length ascending (ties by id).
        lengths: int32 array ``(n_normal,)``: the byte length of each matrix row.
        ids: int32 array ``(n_normal,)``: the token id of each matrix row.
        fingerprint: sha256 hex digest of the size, the eos and special ids and every
            id's bytes; equal vocabularies share it (cache keys use it).
        scheme: how bytes were recovered: ``"byte-level"``, ``"sentencepiece"`` or
            ``"bytes"`` (given directly).
        controls: the text of each added control token, content -> id (``"</think>"``
            -> 151668 in Qwen3; the first id where two share a content): how the
            reasoning gate finds a marker that is one token. Read-only; not part
            of the fingerprint (names, not content). Empty for
            :meth:`from_token_bytes` unless given.
    """

    __slots__ = (
        "_flat",
        "_starts",
        "allowed_base",
        "controls",
        "eos_ids",
        "fingerprint",
        "ids",
        "lengths",
        "matrix",
        "scheme",
        "size",
        "special_ids",
    )

    size: int
    eos_ids: frozenset[int]
    special_ids: frozenset[int]
    allowed_base: npt.NDArray[np.bool_]
    matrix: npt.NDArray[np.uint8]
    lengths: npt.NDArray[np.int32]
    ids: npt.NDArray[np.int32]
    fingerprint: str
    scheme: str
    controls: Mapping[str, int]
    _flat: bytes  # every id's bytes, in id order
    _starts: list[int]  # id -> offset into _flat; one extra entry at the end

    def __init__(self) -> None:
        raise UsageError(
            "Vocabulary is built with Vocabulary.from_tokenizer(...)",
            hint="or Vocabulary.from_token_bytes(...) for a synthetic vocabulary",
        )

    # -- construction -------------------------------------------------------------

    @classmethod
    def from_tokenizer(cls, tok: Any, *, vocab_size: int | None = None) -> Vocabulary:
        """The vocabulary of a tokenizer, from the in-process cache when already built.

        Args:
            tok: a transformers tokenizer with a fast backend (``PreTrainedTokenizerFast``
                and the like), a ``tokenizers.Tokenizer``, or a ``str``/``Path`` to a
                tokenizer.json or to a folder holding one. For a path, the
                tokenizer_config.json, special_tokens_map.json, generation_config.json
                and config.json beside it are read for eos ids; for a transformers
                tokenizer, its ``eos_token_id`` and the last two of those files in its
                local ``name_or_path`` folder.
            vocab_size: the model's logits width when it is wider than the tokenizer
                (model heads are padded); the padded ids are never allowed.

        Returns the same object for the same path (unchanged on disk), the same live
        tokenizer object, or any input with the same fingerprint while it is among the
        last few built. Mutating a tokenizer object after building from it (other
        than adding tokens or changing its eos) is not noticed: pass a fresh one.

        Added tokens are text or control tokens by the rule of the module docstring,
        the same for every kind of input. Thread-safe. Raises
        :class:`~jsonmode.errors.UsageError` for an input that is not a tokenizer, a
        missing file, or a decoding scheme it cannot recover bytes from (WordPiece,
        ...), naming the decoder.
        """
        _check_vocab_size(vocab_size)
        if isinstance(tok, str | os.PathLike):
            return _from_path(Path(tok), vocab_size)
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is not None and hasattr(backend, "to_str"):
            eos = _ids(getattr(tok, "eos_token_id", None))
            folder = _local_folder(getattr(tok, "name_or_path", None))
            if folder is not None:
                for name in ("generation_config.json", "config.json"):
                    eos.extend(_ids(_read_json(folder / name).get("eos_token_id")))
            key: tuple[object, ...] = ("transformers", len(tok), tuple(eos), vocab_size)
            return _from_object(tok, backend, key, eos, vocab_size)
        if hasattr(tok, "to_str") and hasattr(tok, "get_vocab_size"):
            key = ("tokenizers", tok.get_vocab_size(with_added_tokens=True), vocab_size)
            return _from_object(tok, tok, key, [], vocab_size)
        raise UsageError(
            f"cannot read a vocabulary from {type(tok).__name__}",
            hint="pass a transformers fast tokenizer, a tokenizers.Tokenizer, "
            "or the path of a tokenizer.json",
        )

    @classmethod
    def from_token_bytes(
        cls,
        tokens: Sequence[bytes | None],
        *,
        eos_ids: Iterable[int] = (),
        special_ids: Iterable[int] = (),
        vocab_size: int | None = None,
        controls: Mapping[str, int] | None = None,
    ) -> Vocabulary:
        """A vocabulary given directly: ``tokens[i]`` is the bytes of id ``i``.

        ``None`` or ``b""`` marks an unused id. No control-token rule is applied here
        (there is no added-token list to apply it to): the caller declares its control
        tokens in ``special_ids`` (and ``eos_ids``), which are never ordinary tokens
        whatever bytes they are given; every other id with bytes is text, even
        ``b"<tool_call>"``. Meant for small synthetic vocabularies (one Python step
        per token); cached by fingerprint like ``from_tokenizer``. ``controls`` names
        control tokens by their text (content -> id; each id must be in ``special_ids``
        or ``eos_ids``), as a tokenizer's added tokens would.
        """
        _check_vocab_size(vocab_size)
        blobs = [b"" if t is None else bytes(t) for t in tokens]
        size = max(len(blobs), vocab_size or 0)
        eos = frozenset(int(i) for i in eos_ids)
        special = frozenset(int(i) for i in special_ids) | eos
        if any(not 0 <= i < size for i in special):
            raise UsageError(f"eos/special ids must lie in [0, {size})")
        for token_id in special:  # control tokens have no bytes, whatever they were given
            if token_id < len(blobs):
                blobs[token_id] = b""
        named = {str(k): int(v) for k, v in (controls or {}).items()}
        if any(v not in special for v in named.values()):
            raise UsageError("every id in controls must be one of special_ids or eos_ids")
        lengths = np.zeros(size, dtype=np.int64)
        lengths[: len(blobs)] = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
        flat = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        starts = np.cumsum(lengths) - lengths
        return _assemble(flat, starts, lengths, eos, special, "bytes", named)

    # -- reading --------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes token ``token_id`` adds to the text; ``b""`` for special,
        unused and padded ids. O(token length); thread-safe. Raises UsageError for an
        id outside ``[0, size)``."""
        if not 0 <= token_id < self.size:
            raise UsageError(f"token id {token_id} is outside [0, {self.size})")
        return self._flat[self._starts[token_id] : self._starts[token_id + 1]]

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """The bytes of a token sequence (special ids, eos included, add nothing).

        Not str: a sequence may end inside a UTF-8 character. O(total length).
        """
        return b"".join(map(self.token_bytes, token_ids))

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (
            f"<Vocabulary {self.scheme} size={self.size} normal={len(self.ids)} "
            f"eos={sorted(self.eos_ids)} fingerprint={self.fingerprint[:12]}>"
        )


# -- building ------------------------------------------------------------------------

_lock = threading.Lock()
_by_fingerprint: OrderedDict[str, Vocabulary] = OrderedDict()
# First-level caches, consulted before any bytes are computed.
_by_path: dict[tuple[object, ...], str] = {}
_by_object: dict[tuple[object, ...], tuple[weakref.ref[Any], str]] = {}


def _cached(fingerprint: str) -> Vocabulary | None:
    with _lock:
        vocab = _by_fingerprint.get(fingerprint)
        if vocab is not None:
            _by_fingerprint.move_to_end(fingerprint)
        return vocab


def _remember(vocab: Vocabulary) -> Vocabulary:
    """Cache ``vocab``; when another thread cached an equal one first, return that
    (unless ``vocab`` names control tokens that one does not: it replaces it)."""
    with _lock:
        kept = _by_fingerprint.setdefault(vocab.fingerprint, vocab)
        if kept is not vocab and vocab.controls and dict(kept.controls) != dict(vocab.controls):
            kept = _by_fingerprint[vocab.fingerprint] = vocab
        _by_fingerprint.move_to_end(vocab.fingerprint)
        while len(_by_fingerprint) > _CACHE_SIZE:
            _by_fingerprint.popitem(last=False)
        return kept


def _from_path(path: Path, vocab_size: int | None) -> Vocabulary:
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"no tokenizer.json at {path}")
    folder = file.parent
    companions = (
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
        "config.json",
    )
    key: tuple[object, ...] = (
        str(file.resolve()),
        vocab_size,
        *(_stamp(p) for p in (file, *(folder / n for n in companions))),
    )
    with _lock:
        fingerprint = _by_path.get(key)
    vocab = _cached(fingerprint) if fingerprint is not None else None
    if vocab is None:
        data = _parse_json(file.read_bytes())
        tok_config = _read_json(folder / "tokenizer_config.json")
        names = [
            _token_name(tok_config.get("eos_token")),
            _token_name(_read_json(folder / "special_tokens_map.json").get("eos_token")),
        ]
        eos_ids: list[int] = []
        for name in ("generation_config.json", "config.json"):
            eos_ids.extend(_ids(_read_json(folder / name).get("eos_token_id")))
        vocab = _from_json(data, [n for n in names if n], eos_ids, vocab_size)
        with _lock:
            _by_path[key] = vocab.fingerprint
    return vocab


def _from_object(
    tok: Any, backend: Any, key: tuple[object, ...], eos_ids: list[int], vocab_size: int | None
) -> Vocabulary:
    try:
        ref: weakref.ref[Any] | None = weakref.ref(tok)
    except TypeError:
        ref = None
    full_key = (id(tok), *key)
    with _lock:
        entry = _by_object.get(full_key)
    if ref is not None and entry is not None and entry[0]() is tok:
        vocab = _cached(entry[1])
        if vocab is not None:
            return vocab
    vocab = _from_json(_parse_json(backend.to_str()), [], eos_ids, vocab_size)
    if ref is not None:
        with _lock:
            _by_object[full_key] = (ref, vocab.fingerprint)
        weakref.finalize(tok, _by_object.pop, full_key, None)
    return vocab


def _from_json(
    data: Mapping[str, Any], eos_names: list[str], eos_ids: list[int], vocab_size: int | None
) -> Vocabulary:
    """Build from a parsed tokenizer.json, plus eos names and ids from its configs."""
    model = data.get("model") or {}
    model_type = model.get("type") or ("BPE" if "merges" in model else None)
    raw_vocab = model.get("vocab")
    if model_type == "BPE" and isinstance(raw_vocab, dict):
        pieces: dict[str, int] = raw_vocab
        strings: list[str] = list(raw_vocab)
        base_ids = np.fromiter(raw_vocab.values(), dtype=np.int64, count=len(raw_vocab))
    elif model_type == "Unigram" and isinstance(raw_vocab, list):
        strings = [piece for piece, _score in raw_vocab]
        pieces = {piece: i for i, piece in enumerate(strings)}
        base_ids = np.arange(len(strings), dtype=np.int64)
    else:
        raise UsageError(f"unsupported tokenizer model type {model_type!r} (BPE or Unigram only)")
    scheme, space_mark, byte_fallback = _scheme(data)
    byte_fallback = byte_fallback or bool(model.get("byte_fallback"))

    overrides: dict[int, bytes] = {}
    if scheme == "byte-level":
        if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
            raise UsageError("byte-level BPE with a subword prefix/suffix is not supported")
        flat, lengths, bad = _byte_level_bytes(strings)
        for entry in bad.tolist():  # strings outside the byte alphabet: decoded as UTF-8
            overrides[int(base_ids[entry])] = strings[entry].encode("utf-8", "surrogatepass")
    else:
        flat, lengths = _utf8_bytes(strings, space_mark)
        if byte_fallback:
            for byte in range(256):
                token_id = pieces.get(f"<0x{byte:02X}>")
                if token_id is not None:
                    overrides[int(token_id)] = bytes((byte,))

    by_content: dict[str, int] = {}
    special: set[int] = set()
    unknown = _unknown_id(model, pieces)
    if unknown is not None:
        special.add(unknown)
    for added in data.get("added_tokens") or ():
        token_id, content = int(added["id"]), str(added["content"])
        by_content.setdefault(content, token_id)
        if is_control_token(content, special=bool(added.get("special"))):
            special.add(token_id)
        else:
            overrides[token_id] = content.encode("utf-8", "surrogatepass")

    n_ids = max(
        int(base_ids.max()) + 1 if len(base_ids) else 0,
        max(by_content.values(), default=-1) + 1,
    )
    size = max(n_ids, vocab_size or 0)
    known = set(by_content.values()) | set(overrides)
    eos = {by_content[name] for name in _TURN_ENDERS.intersection(by_content)}
    for name in eos_names:
        token_id = by_content.get(name, pieces.get(name))
        if token_id is not None:
            eos.add(int(token_id))
    named = np.zeros(n_ids, dtype=np.bool_)
    named[base_ids] = True
    eos.update(i for i in eos_ids if 0 <= i < n_ids and (named[i] or i in known))
    special |= eos

    # Per-id start and length into one buffer: the base strings, then the overrides.
    starts = np.zeros(size, dtype=np.int64)
    lens = np.zeros(size, dtype=np.int64)
    starts[base_ids] = np.cumsum(lengths) - lengths
    lens[base_ids] = lengths
    if overrides:
        extra = list(overrides.values())
        extra_ids = np.fromiter(overrides, dtype=np.int64, count=len(extra))
        extra_lens = np.fromiter(map(len, extra), dtype=np.int64, count=len(extra))
        starts[extra_ids] = len(flat) + np.cumsum(extra_lens) - extra_lens
        lens[extra_ids] = extra_lens
        flat = np.concatenate([flat, np.frombuffer(b"".join(extra), dtype=np.uint8)])
    if special:
        lens[np.fromiter(special, dtype=np.int64, count=len(special))] = 0
    controls = {content: i for content, i in by_content.items() if i in special}
    return _assemble(flat, starts, lens, frozenset(eos), frozenset(special), scheme, controls)


def _assemble(
    buffer: npt.NDArray[np.uint8],
    src_starts: npt.NDArray[np.int64],
    lens: npt.NDArray[np.int64],
    eos: frozenset[int],
    special: frozenset[int],
    scheme: str,
    controls: Mapping[str, int] | None = None,
) -> Vocabulary:
    """Lay bytes out in id order, fingerprint them, and build the sorted matrix.

    ``buffer[src_starts[i] : src_starts[i] + lens[i]]`` are the bytes of id ``i``;
    ``lens`` is 0 for every id that is not an ordinary token.
    """
    size = len(lens)
    ends = np.cumsum(lens)
    starts = ends - lens
    total = int(ends[-1]) if size else 0
    if len(buffer) == total and np.array_equal(src_starts[lens > 0], starts[lens > 0]):
        flat = buffer
    else:  # one gather: position k of id i's bytes comes from src_starts[i] + k
        flat = buffer[np.repeat(src_starts - starts, lens) + np.arange(total)]
    flat_bytes = flat.tobytes()

    digest = hashlib.sha256(_FORMAT)
    digest.update(np.array([size], dtype="<i8").tobytes())
    for group in (eos, special):
        digest.update(np.array([len(group), *sorted(group)], dtype="<i8").tobytes())
    digest.update(lens.astype("<i4").tobytes())
    digest.update(flat_bytes)
    named = dict(sorted((controls or {}).items()))
    fingerprint = digest.hexdigest()
    cached = _cached(fingerprint)
    # (Names are not content: a vocabulary without them is the cached one with them;
    # one with names the cached one lacks is built anew and replaces it.)
    if cached is not None and (not named or dict(cached.controls) == named):
        return cached

    normal = np.flatnonzero(lens)
    rows = normal[np.argsort(lens[normal], kind="stable")]
    row_lens = lens[rows]
    width = int(row_lens[-1]) if len(rows) else 0
    # Column of every byte within its row; then scatter all bytes in one step.
    cols = np.arange(total) - np.repeat(np.cumsum(row_lens) - row_lens, row_lens)
    matrix = np.zeros(len(rows) * width, dtype=np.uint8)
    matrix[np.repeat(np.arange(len(rows)) * width, row_lens) + cols] = flat[
        np.repeat(starts[rows], row_lens) + cols
    ]

    vocab = object.__new__(Vocabulary)
    fields: dict[str, Any] = {
        "size": size,
        "eos_ids": eos,
        "special_ids": special,
        "allowed_base": lens > 0,
        "matrix": matrix.reshape(len(rows), width),
        "lengths": row_lens.astype(np.int32),
        "ids": rows.astype(np.int32),
        "fingerprint": fingerprint,
        "scheme": scheme,
        "controls": MappingProxyType(named),
        "_flat": flat_bytes,
        "_starts": [*starts.tolist(), total],
    }
    for name, value in fields.items():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        object.__setattr__(vocab, name, value)
    return _remember(vocab)


def _scheme(data: Mapping[str, Any]) -> tuple[str, str, bool]:
    """(scheme, space mark, byte fallback) from the decoder and pre-tokenizer config."""
    decoders = _flatten(data.get("decoder"), "decoders")
    kinds = [d.get("type") for d in decoders]
    if kinds and set(kinds) == {"ByteLevel"}:
        return "byte-level", "", False
    if not kinds and "ByteLevel" in {
        p.get("type") for p in _flatten(data.get("pre_tokenizer"), "pretokenizers")
    }:
        return "byte-level", "", False
    marks = set()
    for d in decoders:
        if d.get("type") == "Metaspace":
            marks.add(str(d.get("replacement", _SPACE_MARK)))
        elif d.get("type") == "Replace" and d.get("content") == " ":
            pattern = (d.get("pattern") or {}).get("String")
            marks.add(pattern if isinstance(pattern, str) and pattern else "")
    if (
        len(marks) == 1
        and "" not in marks
        and set(kinds) <= {"Metaspace", "Replace", "ByteFallback", "Fuse", "Strip"}
    ):
        return "sentencepiece", marks.pop(), "ByteFallback" in kinds
    raise UsageError(
        f"cannot recover token bytes for decoder {'+'.join(map(str, kinds)) or 'None'}",
        hint="supported: byte-level BPE (ByteLevel decoder) and SentencePiece "
        "(Metaspace, or Replace('▁', ' ') with ByteFallback/Fuse/Strip)",
    )


def _byte_level_bytes(
    strings: list[str],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.intp]]:
    """Invert GPT-2's byte-to-unicode map over all strings at once.

    One character is one byte, so lengths are string lengths. Returns the bytes,
    the lengths and the indexes of strings holding a character outside the map.
    """
    codes = np.frombuffer("".join(strings).encode("utf-32-le", "surrogatepass"), dtype="<u4")
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    table = _UNICODE_TO_BYTE
    values = table[np.minimum(codes, len(table) - 1)]
    outside = np.concatenate([[0], np.cumsum(values < 0)])
    ends = np.cumsum(lengths)
    bad = np.flatnonzero(outside[ends] - outside[ends - lengths])
    return values.astype(np.uint8), lengths, bad


def _utf8_bytes(
    strings: list[str], space_mark: str
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """UTF-8 of all strings at once, with the space mark turned back into a space."""
    text = "".join(strings).replace(space_mark, " ")
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    widths = 1 + (codes >= 0x80).astype(np.int64) + (codes >= 0x800) + (codes >= 0x10000)
    cumulative = np.concatenate([[0], np.cumsum(widths)])
    ends = np.cumsum(np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)))
    starts = np.concatenate([[0], ends[:-1]]) if len(ends) else ends
    flat = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    return flat, (cumulative[ends] - cumulative[starts]).astype(np.int64)


def _parse_json(text: str | bytes) -> dict[str, Any]:
    """``json.loads`` with the cyclic GC paused: a tokenizer.json holds ~10^5 small
    lists (merges), and in a process with a large heap (transformers loaded) the
    collections they trigger triple the parse time. JSON values hold no cycles."""
    try:
        with collector_paused():
            data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"not a tokenizer.json: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError("a tokenizer.json must hold a JSON object")
    return data


def _flatten(component: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(component, dict):
        return []
    if component.get("type") == "Sequence":
        return [c for part in component.get(key) or () for c in _flatten(part, key)]
    return [component]


def _unknown_id(model: Mapping[str, Any], pieces: Mapping[str, int]) -> int | None:
    """The model's unknown token (BPE ``unk_token``, Unigram ``unk_id``): a control token."""
    if model.get("type") == "Unigram":
        unk_id = model.get("unk_id")
        if isinstance(unk_id, bool) or not isinstance(unk_id, int):
            return None
        return unk_id if 0 <= unk_id < len(pieces) else None
    name = model.get("unk_token")
    token_id = pieces.get(name) if isinstance(name, str) else None
    return int(token_id) if token_id is not None else None


def _check_vocab_size(vocab_size: object) -> None:
    if vocab_size is not None and (
        isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 0
    ):
        raise UsageError(f"vocab_size must be a non-negative int, got {vocab_size!r}")


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _local_folder(name_or_path: object) -> Path | None:
    if isinstance(name_or_path, str | os.PathLike) and str(name_or_path):
        folder = Path(name_or_path)
        if folder.is_dir():
            return folder
    return None


def _token_name(token: object) -> str | None:
    """A config's token entry: a string or an ``{"content": ...}`` object."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def _ids(value: object) -> list[int]:
    """An ``eos_token_id`` setting: an int, a list of ints, or nothing."""
    items = value if isinstance(value, list | tuple) else [value]
    return [int(i) for i in items if isinstance(i, int) and not isinstance(i, bool)]
