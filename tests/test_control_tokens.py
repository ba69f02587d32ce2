"""Control tokens never inside values (issue 26): added tokens that are not text.

Qwen2.5 adds ``<tool_call>``, ``<|fim_pad|>``, ``<|file_sep|>`` ... as *non-special*
tokens, Phi-3 a non-special ``</s>``; the vocabulary must treat them as control tokens
(no bytes, never in a mask) while added tokens that are plain text stay text. Checked
on the five real tokenizers from ``../shared/data/tokenizers`` and on small synthetic
tokenizer.json files; nothing touches the network.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.matcher import Matcher
from jsonmode.decoding.vocabulary import Vocabulary, is_control_token

TOKENIZERS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"
NAMES = ["qwen2.5", "llama-3", "gpt2", "mistral-7b-v0.1", "phi-3-mini"]


@functools.cache
def _added(name: str) -> tuple[tuple[int, str, bool], ...]:
    data = json.loads((TOKENIZERS / name / "tokenizer.json").read_bytes())
    return tuple((a["id"], a["content"], bool(a["special"])) for a in data["added_tokens"])


@functools.cache
def _by_bytes(vocab: Vocabulary) -> dict[bytes, int]:
    """The lowest id spelling each byte string (ordinary tokens only)."""
    found: dict[bytes, int] = {}
    for token_id in np.flatnonzero(vocab.allowed_base).tolist():
        found.setdefault(vocab.token_bytes(token_id), token_id)
    return found


def _advance_text(matcher: Matcher, vocab: Vocabulary, text: bytes) -> None:
    """Advance by ``text``, one single-byte token at a time (every tokenizer here has
    them: byte-level BPE natively, SentencePiece through byte fallback)."""
    ids = _by_bytes(vocab)
    for byte in text:
        assert matcher.advance(ids[bytes((byte,))]), text


def _check_mask(matcher: Matcher, vocab: Vocabulary, controls: list[int], where: str) -> None:
    mask = matcher.mask()
    assert mask.shape == (vocab.size,)
    allowed_controls = [t for t in controls if mask[t]]
    assert not allowed_controls, f"{where}: control tokens allowed: {allowed_controls}"
    eos_allowed = {t for t in vocab.eos_ids if mask[t]}
    if matcher.can_end():
        assert eos_allowed == vocab.eos_ids, where
    else:
        assert not eos_allowed, f"{where}: eos allowed before the document may end"


def _controls(name: str, vocab: Vocabulary) -> list[int]:
    """Every added token that is not text and not an end of sequence."""
    return [
        token_id
        for token_id, content, special in _added(name)
        if is_control_token(content, special=special) and token_id not in vocab.eos_ids
    ]


# -- the rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "control"),
    [
        ("<tool_call>", True),
        ("</tool_call>", True),
        ("<|fim_pad|>", True),
        ("<|file_sep|>", True),
        ("</s>", True),
        ("[INST]", True),
        ("[/INST]", True),
        ("<｜end▁of▁sentence｜>", True),
        ("<<SYS>>", True),
        ("    ", False),
        ("\t\t", False),
        ("<a b>", False),
        ("<>", False),
        ("[]", False),
        ("plain añadido", False),
        ("<", False),
        ("x<y>", False),
    ],
)
def test_control_token_rule(content: str, control: bool) -> None:
    assert is_control_token(content, special=False) is control
    assert is_control_token(content, special=True)  # special is always control


@pytest.mark.parametrize("name", NAMES)
def test_added_control_tokens_have_no_bytes(name: str) -> None:
    vocab = Vocabulary.from_tokenizer(TOKENIZERS / name)
    for token_id, content, special in _added(name):
        assert is_control_token(content, special=special), (name, content)  # all, here
        assert token_id in vocab.special_ids
        assert vocab.token_bytes(token_id) == b""
        assert not vocab.allowed_base[token_id]


def test_the_non_special_added_tokens_of_qwen_and_phi3() -> None:
    qwen = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    plain = [(i, c) for i, c, special in _added("qwen2.5") if not special]
    assert [c for _, c in plain] == [
        "<tool_call>",
        "</tool_call>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
    ]
    for token_id, _ in plain:
        assert token_id in qwen.special_ids - qwen.eos_ids
    phi3 = Vocabulary.from_tokenizer(TOKENIZERS / "phi-3-mini")
    assert [(i, c) for i, c, special in _added("phi-3-mini") if not special] == [(2, "</s>")]
    assert 2 in phi3.eos_ids  # a control token, and still an end of sequence


# -- masks -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_no_control_token_is_ever_allowed_inside_a_string(name: str) -> None:
    vocab = Vocabulary.from_tokenizer(TOKENIZERS / name)
    compiled = compile_schema({"type": "string"}, vocab)
    controls = _controls(name, vocab)
    matcher = compiled.matcher()
    _check_mask(matcher, vocab, controls, "before the string")
    _advance_text(matcher, vocab, b'"')
    _check_mask(matcher, vocab, controls, "just inside the string")
    for piece in (b"tool", b" call <", b"tool_call", b">", "é字 ".encode(), b"\\", b"n"):
        _advance_text(matcher, vocab, piece)
        _check_mask(matcher, vocab, controls, f"inside the string after {piece!r}")
    mask = matcher.mask()
    assert mask[_by_bytes(vocab)[b"x"]]  # ordinary text is allowed
    _advance_text(matcher, vocab, b'"')
    assert matcher.can_end()
    _check_mask(matcher, vocab, controls, "after the string")
    eos = min(vocab.eos_ids)
    assert matcher.advance(eos)
    assert matcher.is_finished()


@pytest.mark.parametrize("name", ["qwen2.5", "phi-3-mini"])
def test_every_input_kind_applies_the_rule(name: str) -> None:
    """Folder, tokenizers.Tokenizer and transformers tokenizer: one vocabulary."""
    folder = Vocabulary.from_tokenizer(TOKENIZERS / name)
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(str(TOKENIZERS / name), local_files_only=True)
    for other in (Vocabulary.from_tokenizer(tok), Vocabulary.from_tokenizer(auto)):
        assert other.fingerprint == folder.fingerprint
        assert other.special_ids == folder.special_ids


def test_the_fingerprint_changes_with_the_rule() -> None:
    """Qwen2.5 read with the old rule (non-special added tokens as their text) is a
    different vocabulary: compiled schemas and caches keyed by the fingerprint never
    mix the two."""
    vocab = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    tokens = [vocab.token_bytes(i) for i in range(vocab.size)]
    old_special = {i for i, _, special in _added("qwen2.5") if special}
    for token_id, content, special in _added("qwen2.5"):
        if not special:
            tokens[token_id] = content.encode()
    old = Vocabulary.from_token_bytes(tokens, eos_ids=vocab.eos_ids, special_ids=old_special)
    assert old.fingerprint != vocab.fingerprint
    assert old.token_bytes(151657) == b"<tool_call>"  # from_token_bytes: the caller decides
    new = Vocabulary.from_token_bytes(tokens, eos_ids=vocab.eos_ids, special_ids=vocab.special_ids)
    assert new is vocab


# -- synthetic tokenizers: text-like added tokens stay text ----------------------------------


def _synthetic(tmp_path: Path) -> Path:
    alphabet = ['"', "a", "b", "x", "Ġ", "ĉ", "<", ">", "[", "]"]
    data: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
        "model": {"type": "BPE", "vocab": {c: i for i, c in enumerate(alphabet)}, "merges": []},
    }
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
    added = [
        ("<|endoftext|>", True),  # 10: eos
        ("    ", False),  # 11: a run of spaces (code tokenizers): text
        ("\t\t", False),  # 12: text
        ("<think>", False),  # 13: a marker: control
        ("[TOOL_CALLS]", False),  # 14: a marker: control
        ("<a b>", False),  # 15: whitespace inside: text
        ("<sep>", True),  # 16: special: control
    ]
    data["added_tokens"] = [
        flags | {"id": len(alphabet) + k, "content": content, "special": special}
        for k, (content, special) in enumerate(added)
    ]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_text_like_added_tokens_stay_allowed(tmp_path: Path) -> None:
    path = _synthetic(tmp_path)
    vocab = Vocabulary.from_tokenizer(path)
    assert vocab.eos_ids == {10}
    assert vocab.special_ids == {10, 13, 14, 16}
    assert vocab.token_bytes(11) == b"    "
    assert vocab.token_bytes(12) == b"\t\t"
    assert vocab.token_bytes(15) == b"<a b>"
    assert vocab.token_bytes(13) == vocab.token_bytes(14) == b""
    compiled = compile_schema({"type": "string"}, vocab)
    matcher = compiled.matcher()
    assert matcher.advance(0)  # '"'
    mask = matcher.mask()
    assert mask[[11, 15]].all()  # spaces and "<a b>" inside a string
    assert not mask[[10, 13, 14, 16]].any()
    assert not mask[12]  # raw tabs are not JSON string characters
    assert matcher.advance(11)
    assert matcher.advance(15)
    assert matcher.advance(0)
    assert matcher.mask()[10]  # eos once the document may end


def test_synthetic_rule_on_every_input_kind(tmp_path: Path) -> None:
    path = _synthetic(tmp_path)
    folder = Vocabulary.from_tokenizer(path)
    tok = tokenizers.Tokenizer.from_file(str(path))
    assert Vocabulary.from_tokenizer(tok) is folder
    fast: Any = PreTrainedTokenizerFast  # transformers is untyped here
    wrapped = fast(tokenizer_object=tok, eos_token="<|endoftext|>")
    assert Vocabulary.from_tokenizer(wrapped) is folder
    # Tokens added at run time follow the same rule.
    wrapped.add_tokens(["<tool_call>", "      "])
    grown = Vocabulary.from_tokenizer(wrapped)
    marker, spaces = wrapped.convert_tokens_to_ids(["<tool_call>", "      "])
    assert marker in grown.special_ids
    assert grown.token_bytes(marker) == b""
    assert spaces not in grown.special_ids
    assert grown.token_bytes(spaces) == b"      "


def test_from_token_bytes_trusts_its_caller() -> None:
    tokens = [b'"', b"a", b"<tool_call>", b"</s>"]
    plain = Vocabulary.from_token_bytes(tokens)
    assert plain.special_ids == frozenset()
    assert plain.token_bytes(2) == b"<tool_call>"
    declared = Vocabulary.from_token_bytes(tokens, eos_ids=[3], special_ids=[2])
    assert declared.special_ids == {2, 3}
    assert declared.token_bytes(2) == b""
    assert declared.fingerprint != plain.fingerprint
