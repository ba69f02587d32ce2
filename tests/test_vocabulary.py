"""Vocabulary: exact token bytes from real tokenizers, eos/special ids, layout, cache.

The real tokenizers live in ``../shared/data/tokenizers`` (see SOURCES.md there);
nothing here touches the network.
"""

from __future__ import annotations

import functools
import json
import random
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenizers
from transformers import AutoTokenizer

from jsonmode.decoding.vocabulary import Vocabulary, is_control_token
from jsonmode.errors import UsageError

TOKENIZERS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"
NAMES = ["qwen2.5", "llama-3", "gpt2", "mistral-7b-v0.1", "phi-3-mini"]
BYTE_LEVEL = ["qwen2.5", "llama-3", "gpt2"]
SENTENCEPIECE = ["mistral-7b-v0.1", "phi-3-mini"]


@functools.cache
def _config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((TOKENIZERS / name / "tokenizer.json").read_bytes())
    return data


@functools.cache
def _tokenizer(name: str) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))


def _id(name: str, token: str) -> int:
    token_id = _tokenizer(name).token_to_id(token)
    assert token_id is not None, token
    return token_id


def _vocab(name: str, **kwargs: Any) -> Vocabulary:
    return Vocabulary.from_tokenizer(TOKENIZERS / name, **kwargs)


def _parts(component: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(component, dict):
        return []
    if component.get("type") == "Sequence":
        return [c for part in component[key] for c in _parts(part, key)]
    return [component]


def _expected(name: str, text: str) -> bytes:
    """The bytes the tokens of ``text`` spell, as the tokenizer's own config says.

    SentencePiece-style tokenizers put a "▁" in front of the text: a ``Prepend``
    normalizer always does (Phi-3's file), a ``Metaspace`` pre-tokenizer with
    prepend_scheme "first"/"always" does unless the text already starts with a space
    (Mistral, legacy=false). That "▁" is a real space in the tokens' bytes.
    """
    config = _config(name)
    normalizers = _parts(config.get("normalizer"), "normalizers")
    if any(n["type"] == "NFC" for n in normalizers):
        text = unicodedata.normalize("NFC", text)
    for n in normalizers:
        if n["type"] == "Prepend" and text:
            text = n["prepend"].replace("▁", " ") + text
    for p in _parts(config.get("pre_tokenizer"), "pretokenizers"):
        prepends = p["type"] == "Metaspace" and p.get("prepend_scheme") in ("first", "always")
        if prepends and text and not text.startswith(" "):
            text = " " + text
    return text.encode("utf-8")


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    words = ["name", "id", "größe", "名前", "値", "emoji🎉", "a b", "x\ty", "naïve", "ключ", ""]
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.randint(-(10**12), 10**12)
    if kind == 1:
        return rng.choice([0.5, -3.25e-7, 1e100, 123456.789, -0.0, 2.5e-308])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4):
        return "".join(rng.choice(words) for _ in range(rng.randrange(4))) + rng.choice(
            ["", "\n", "\\", '"', "ü", "😀👍🏽", "👨‍👩‍👧", "ﾃｽﾄ", "ខ្មែរ"]
        )
    if kind in (5, 6):
        return {rng.choice(words): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [_random_json(rng, depth + 1) for _ in range(rng.randrange(5))]


@functools.cache
def _samples() -> tuple[str, ...]:
    """≥ 300 texts: JSON, CJK, emoji, whitespace runs, numbers, control bytes.

    Kept clear of "▁" (SentencePiece tokenizers cannot tell it from a space) and of
    added-token contents such as "</s>" (they encode to control tokens).
    """
    fixed = [
        "",
        " ",
        "Hello",
        'Hello {"a": 1}',
        '{"a": [1, 2.5, -3e10, true, false, null]}',
        '{\n  "key": "value",\n  "n": 42\n}',
        "\t\t{\r\n}\r\n",
        "    " * 8 + "x",
        "\n\n\n\n",
        "  leading and trailing  ",
        "1234567890" * 5,
        "3.14159265358979323846",
        "-0.000001e+99",
        "日本語のテキスト、中文文本。한국어 텍스트",
        "🎉🎉🎉 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇳",
        "Ünïcödé façade — “quotes” … ½ ∑ ∞",
        "\x00\x01\x1f\x7f control",
        '"\\u00e9\\n\\t\\"escaped\\""',
        "Führer",
        "ied 4 ½ months",
        "<html><body>not special</body></html>",
        "a" * 300,
        " " * 70,
    ]
    for entries in json.loads((TOKENIZERS / "reference_vectors.json").read_bytes()).values():
        if isinstance(entries, list):
            fixed.extend(e["text"] for e in entries)
    rng = random.Random(20240607)
    generated = []
    for _ in range(260):
        indent = rng.choice([None, None, 2, 4, "\t"])
        generated.append(
            json.dumps(_random_json(rng), indent=indent, ensure_ascii=rng.random() < 0.3)
        )
    alphabet = [" ", "  ", "\n", "\t", "{", '"', ":", ",", "7", "42", "é", "字", "🙂", "x", "ab"]
    for _ in range(60):
        generated.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40))))
    texts = tuple(dict.fromkeys(t for t in fixed + generated if "▁" not in t and "</s>" not in t))
    assert len(texts) >= 300
    return texts


# -- exact bytes --------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_encoded_text_round_trips_to_its_exact_bytes(name: str) -> None:
    vocab, tok = _vocab(name), _tokenizer(name)
    wrong = []
    for text in _samples():
        ids = tok.encode(text, add_special_tokens=False).ids
        if b"".join(vocab.token_bytes(i) for i in ids) != _expected(name, text):
            wrong.append(text)
    assert wrong == []


@pytest.mark.parametrize("name", [n for n in NAMES if n != "mistral-7b-v0.1"])
def test_llama_cpp_reference_ids_decode_to_their_text(name: str) -> None:
    vectors = json.loads((TOKENIZERS / "reference_vectors.json").read_bytes())[name]
    vocab = _vocab(name)
    assert len(vectors) > 40
    for entry in vectors:
        assert vocab.decode(entry["ids"]) == _expected(name, entry["text"]), entry["text"]


REFERENCE = {  # SOURCES.md, section 1: "Hello" and 'Hello {"a": 1}' without specials
    "qwen2.5": ([9707], [9707, 5212, 64, 788, 220, 16, 92]),
    "llama-3": ([9906], [9906, 5324, 64, 794, 220, 16, 92]),
    "gpt2": ([15496], [15496, 19779, 64, 1298, 352, 92]),
    "mistral-7b-v0.1": ([22557], [22557, 9830, 28708, 1264, 28705, 28740, 28752]),
    "phi-3-mini": ([15043], [15043, 8853, 29874, 1115, 29871, 29896, 29913]),
}


@pytest.mark.parametrize("name", NAMES)
def test_reference_ids_from_sources(name: str) -> None:
    vocab = _vocab(name)
    hello, doc = REFERENCE[name]
    space = b" " if name in SENTENCEPIECE else b""  # the prepended "▁"
    assert vocab.decode(hello) == space + b"Hello"
    assert vocab.decode(doc) == space + b'Hello {"a": 1}'
    pieces = [vocab.token_bytes(i) for i in doc]
    if name == "gpt2":
        assert pieces == [b"Hello", b' {"', b"a", b'":', b" 1", b"}"]
    else:
        assert pieces == [space + b"Hello", b' {"', b"a", b'":', b" ", b"1", b"}"]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table, written out the slow, obvious way."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@pytest.mark.parametrize("name", NAMES)
def test_every_token_matches_a_slow_reference(name: str) -> None:
    vocab, config = _vocab(name), _config(name)
    added = {a["id"]: a for a in config["added_tokens"]}
    to_byte = {c: b for b, c in _bytes_to_unicode().items()}
    for piece, token_id in config["model"]["vocab"].items():
        if token_id in added:
            continue
        if name in BYTE_LEVEL:
            expected = bytes(to_byte[c] for c in piece)
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            expected = bytes([int(piece[3:5], 16)])
        else:
            expected = piece.replace("▁", " ").encode("utf-8")
        assert vocab.token_bytes(token_id) == expected, (token_id, piece)
        assert vocab.allowed_base[token_id] == (expected != b"")


@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_partial_utf8_tokens_are_kept_raw(name: str) -> None:
    vocab, tok = _vocab(name), _tokenizer(name)
    partial = 0
    for token_id in np.flatnonzero(vocab.allowed_base).tolist():
        try:
            vocab.token_bytes(token_id).decode("utf-8")
        except UnicodeDecodeError:
            partial += 1
    assert partial > 100
    table = _bytes_to_unicode()
    for byte in (0x00, 0x0A, 0x20, 0x80, 0xAD, 0xE4, 0xF0, 0xFF):
        assert vocab.token_bytes(_id(name, table[byte])) == bytes([byte])
    ids = tok.encode("𠀋", add_special_tokens=False).ids  # one 4-byte char, split
    pieces = [vocab.token_bytes(i) for i in ids]
    assert len(pieces) > 1
    assert b"".join(pieces) == "𠀋".encode()
    with pytest.raises(UnicodeDecodeError):
        pieces[0].decode("utf-8")


@pytest.mark.parametrize("name", SENTENCEPIECE)
def test_byte_fallback_pieces_are_single_bytes(name: str) -> None:
    vocab = _vocab(name)
    for byte in range(256):
        assert vocab.token_bytes(_id(name, f"<0x{byte:02X}>")) == bytes([byte])
    assert vocab.token_bytes(_id(name, "▁")) == b" "


# -- eos, special, padded -----------------------------------------------------------

EOS = {
    "qwen2.5": {"<|im_end|>", "<|endoftext|>"},
    "llama-3": {"<|eot_id|>", "<|end_of_text|>"},
    "gpt2": {"<|endoftext|>"},
    "mistral-7b-v0.1": {"</s>"},
    "phi-3-mini": {"<|end|>", "<|endoftext|>", "</s>"},
}


@pytest.mark.parametrize("name", NAMES)
def test_eos_ids(name: str) -> None:
    vocab = _vocab(name)
    assert vocab.eos_ids == {_id(name, t) for t in EOS[name]}
    assert vocab.eos_ids <= vocab.special_ids
    for token_id in vocab.eos_ids:
        assert not vocab.allowed_base[token_id]
        assert vocab.token_bytes(token_id) == b""


def test_eos_numbers_from_sources() -> None:
    assert _vocab("gpt2").eos_ids == {50256}
    assert _vocab("mistral-7b-v0.1").eos_ids == {2}


@pytest.mark.parametrize("name", NAMES)
def test_added_tokens(name: str) -> None:
    vocab = _vocab(name)
    for added in _config(name)["added_tokens"]:
        token_id = added["id"]
        if is_control_token(added["content"], special=added["special"]):
            assert token_id in vocab.special_ids
            assert not vocab.allowed_base[token_id]
            assert vocab.token_bytes(token_id) == b""
        else:  # plain text, not byte-mapped (none in these five tokenizers)
            assert token_id not in vocab.special_ids
            assert vocab.allowed_base[token_id]
            assert vocab.token_bytes(token_id) == added["content"].encode("utf-8")
        assert token_id not in vocab.eos_ids or token_id in vocab.special_ids


def test_qwen_non_special_added_tokens_are_control_tokens() -> None:
    vocab = _vocab("qwen2.5")
    for name in ("<tool_call>", "</tool_call>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>"):
        assert _id("qwen2.5", name) in vocab.special_ids - vocab.eos_ids
        assert vocab.token_bytes(_id("qwen2.5", name)) == b""
    assert _id("qwen2.5", "<|im_start|>") in vocab.special_ids


def test_padded_ids_are_never_allowed() -> None:
    plain = _vocab("qwen2.5")
    padded = _vocab("qwen2.5", vocab_size=151_936)
    assert plain.size == len(plain) == 151_665
    assert padded.size == len(padded) == 151_936
    assert padded is not plain
    assert padded.fingerprint != plain.fingerprint
    assert not padded.allowed_base[151_665:].any()
    assert padded.token_bytes(151_935) == b""
    assert padded.eos_ids == plain.eos_ids
    assert np.array_equal(padded.allowed_base[:151_665], plain.allowed_base)
    assert np.array_equal(padded.matrix, plain.matrix)
    # a narrower vocab_size never cuts the tokenizer
    assert _vocab("qwen2.5", vocab_size=1000) is plain
    with pytest.raises(UsageError):
        _vocab("qwen2.5", vocab_size=-1)


# -- layout ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_matrix_is_sorted_by_length_and_matches_token_bytes(name: str) -> None:
    vocab = _vocab(name)
    matrix, lengths, ids = vocab.matrix, vocab.lengths, vocab.ids
    assert matrix.dtype == np.uint8
    assert lengths.dtype == ids.dtype == np.int32
    assert matrix.shape == (len(ids), int(lengths.max()))
    assert (lengths > 0).all()
    assert (np.diff(lengths) >= 0).all()
    assert np.array_equal(np.sort(ids), np.flatnonzero(vocab.allowed_base))
    assert not set(ids.tolist()) & vocab.special_ids
    for row, (token_id, length) in enumerate(zip(ids.tolist(), lengths.tolist(), strict=True)):
        assert matrix[row, :length].tobytes() == vocab.token_bytes(token_id)
        assert not matrix[row, length:].any()
    assert vocab.allowed_base.shape == (vocab.size,)
    for array in (matrix, lengths, ids, vocab.allowed_base):
        assert not array.flags.writeable


# -- identity and cache ---------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_input_kind_gives_the_same_vocabulary(name: str) -> None:
    from_folder = _vocab(name)
    assert Vocabulary.from_tokenizer(TOKENIZERS / name) is from_folder
    assert Vocabulary.from_tokenizer(str(TOKENIZERS / name / "tokenizer.json")) is from_folder
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))
    assert Vocabulary.from_tokenizer(tok) is from_folder
    auto = AutoTokenizer.from_pretrained(str(TOKENIZERS / name), local_files_only=True)
    from_auto = Vocabulary.from_tokenizer(auto)
    assert from_auto.fingerprint == from_folder.fingerprint
    assert from_auto is from_folder
    assert Vocabulary.from_tokenizer(auto) is from_auto


def test_fingerprint_is_about_content() -> None:
    gpt2 = _vocab("gpt2")
    tokens = [gpt2.token_bytes(i) for i in range(gpt2.size)]
    again = Vocabulary.from_token_bytes(tokens, eos_ids=gpt2.eos_ids, special_ids=gpt2.special_ids)
    assert again.fingerprint == gpt2.fingerprint
    assert again is gpt2
    other = Vocabulary.from_token_bytes(tokens, eos_ids=(), special_ids=gpt2.special_ids)
    assert other.fingerprint != gpt2.fingerprint
    assert len({_vocab(n).fingerprint for n in NAMES}) == len(NAMES)


def test_concurrent_builds_share_one_object() -> None:
    path = str(TOKENIZERS / "gpt2" / "tokenizer.json")
    fresh = [tokenizers.Tokenizer.from_file(path) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        built = list(pool.map(Vocabulary.from_tokenizer, fresh))
    assert all(v is built[0] for v in built)


def test_repr_and_decode() -> None:
    vocab = _vocab("gpt2")
    assert repr(vocab).startswith("<Vocabulary byte-level size=50257 ")
    assert "eos=[50256]" in repr(vocab)
    assert vocab.decode([15496, 50256]) == b"Hello"
    with pytest.raises(UsageError):
        vocab.token_bytes(vocab.size)
    with pytest.raises(UsageError):
        vocab.token_bytes(-1)


# -- synthetic tokenizers -------------------------------------------------------------


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    """A tokenizer.json complete enough for ``tokenizers`` to load it too."""
    full = dict.fromkeys(["truncation", "padding", "normalizer", "pre_tokenizer"])
    full |= {"version": "1.0", "post_processor": None, **data}
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
    full["added_tokens"] = [flags | a for a in data["added_tokens"]]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(full), encoding="utf-8")
    return path


def test_gaps_padding_and_out_of_table_strings(tmp_path: Path) -> None:
    data = {
        "model": {
            "type": "BPE",
            "vocab": {"a": 0, "Ġb": 1, "ĊĊ": 3, "é": 4, "字": 6},
            "merges": [],
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
        "added_tokens": [],
    }
    path = _write(tmp_path, data)
    vocab = Vocabulary.from_tokenizer(path, vocab_size=8)
    assert [vocab.token_bytes(i) for i in range(8)] == [
        b"a",
        b" b",
        b"",  # gap
        b"\n\n",
        b"\xe9",  # "é" is byte 0xE9 in GPT-2's table
        b"",  # gap
        "字".encode(),  # not in the table: its UTF-8, as the tokenizers decoder does
        b"",  # padded
    ]
    tok = tokenizers.Tokenizer.from_file(str(path))
    assert tok.id_to_token(2) is None
    assert tok.decode([6]) == "字"
    assert np.flatnonzero(vocab.allowed_base).tolist() == [0, 1, 3, 4, 6]
    assert vocab.ids.tolist() == [0, 4, 1, 3, 6]  # by length, then id
    assert vocab.eos_ids == vocab.special_ids == frozenset()


def test_added_tokens_in_a_small_tokenizer(tmp_path: Path) -> None:
    data = {
        "model": {"type": "BPE", "vocab": {"a": 0, "Ġ": 1}, "merges": []},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
        "added_tokens": [
            {"id": 2, "content": "<|endoftext|>", "special": True},
            {"id": 3, "content": "<ctl>", "special": True},
            {"id": 4, "content": "plain añadido", "special": False},
        ],
    }
    path = _write(tmp_path, data)
    vocab = Vocabulary.from_tokenizer(path)
    tok = tokenizers.Tokenizer.from_file(str(path))
    assert [tok.id_to_token(i) for i in range(5)] == [
        "a",
        "Ġ",
        "<|endoftext|>",
        "<ctl>",
        "plain añadido",
    ]
    assert [vocab.token_bytes(i) for i in range(5)] == [
        b"a",
        b" ",
        b"",
        b"",
        "plain añadido".encode(),
    ]
    assert tok.decode([4, 1, 0]) == "plain añadido a"
    assert vocab.eos_ids == {2}
    assert vocab.special_ids == {2, 3}
    assert Vocabulary.from_tokenizer(tok) is vocab


def test_folder_configs_add_eos(tmp_path: Path) -> None:
    data = {
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "<stop>": 2}, "merges": []},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [{"id": 3, "content": "<turn>", "special": True}],
    }
    _write(tmp_path, data)
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": {"content": "<stop>"}}')
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [3, 99]}')
    vocab = Vocabulary.from_tokenizer(tmp_path)
    assert vocab.eos_ids == {2, 3}  # 99 names no token
    assert vocab.allowed_base.tolist() == [True, True, False, False]


def test_unigram_sentencepiece_with_metaspace_decoder(tmp_path: Path) -> None:
    pieces = [("<unk>", 0.0), ("▁", -1.0), ("▁ab", -1.0), ("c", -2.0), ("<0x0A>", -3.0)]
    tok = tokenizers.Tokenizer(tokenizers.models.Unigram(pieces, unk_id=0, byte_fallback=True))
    tok.decoder = tokenizers.decoders.Metaspace()
    tok.add_special_tokens(["</s>"])
    vocab = Vocabulary.from_tokenizer(tok)
    assert vocab.scheme == "sentencepiece"
    # The model's unknown piece is a control token, like the added "</s>".
    assert [vocab.token_bytes(i) for i in range(6)] == [b"", b" ", b" ab", b"c", b"\n", b""]
    assert vocab.eos_ids == {5}
    assert vocab.special_ids == {0, 5}


def test_unsupported_decoder_is_a_usage_error(tmp_path: Path) -> None:
    data = {
        "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "##b": 2}},
        "decoder": {"type": "WordPiece", "prefix": "##"},
        "added_tokens": [],
    }
    with pytest.raises(UsageError, match="WordPiece"):
        Vocabulary.from_tokenizer(_write(tmp_path, data))
    data["model"] = {"type": "BPE", "vocab": {"a": 0}, "merges": []}
    with pytest.raises(UsageError, match="WordPiece"):
        Vocabulary.from_tokenizer(_write(tmp_path, data))


def test_bad_inputs_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        Vocabulary.from_tokenizer(tmp_path / "missing")
    with pytest.raises(UsageError):
        Vocabulary.from_tokenizer(object())
    (tmp_path / "tokenizer.json").write_text("not json")
    with pytest.raises(UsageError):
        Vocabulary.from_tokenizer(tmp_path)
    with pytest.raises(UsageError):
        Vocabulary()
