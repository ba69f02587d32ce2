"""The reasoning gate (issue 41): free thinking, the end marker, then the document.

Real tokenizer layouts, no downloads: Qwen3's is the shared Qwen2.5 tokenizer.json with
the four tokens Qwen3 adds (``<tool_response>``, ``</tool_response>``, ``<think>`` =
151667, ``</think>`` = 151668, not marked special, as in Qwen3's tokenizer.json); the
DeepSeek-R1 style writes ``<think>``/``</think>`` as text on Llama-3's tokenizer, so the
marker spans several ordinary tokens.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

import jsonmode
from jsonmode.decoding.batch_masks import BatchMasker
from jsonmode.decoding.fastforward import FastForward
from jsonmode.decoding.reasoning_gate import MAX_MARKER_BYTES, GatedConstraint, GateMatcher
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import UnsupportedSchemaError, UsageError
from tests.support.qwen3_layout import END_THINK, THINK, TOKENIZERS, qwen3_folder

SMALL = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "color": {"enum": ["red", "green"]},
        "tag": {"type": "string", "maxLength": 3},
    },
    "required": ["ok", "n", "color", "tag"],
    "additionalProperties": False,
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> Vocabulary:
    return Vocabulary.from_tokenizer(qwen3_folder(tmp_path_factory.mktemp("qwen3")))


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return Vocabulary.from_tokenizer(TOKENIZERS / "llama-3" / "tokenizer.json")


@pytest.fixture(scope="module")
def llama3_tok() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZERS / "llama-3" / "tokenizer.json"))


def encode(tok: Tokenizer, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False).ids)


def spell(gated: GatedConstraint, tokens: list[int]) -> bytes:
    return b"".join(gated.spelled(t) for t in tokens)


def reference_allows(gated: GatedConstraint, thinking: bytes, token: int) -> bool:
    """The slow byte-level judge of one token after ``thinking`` (no marker in it):
    allowed when the text still holds no end marker, or when everything after the
    first marker is a prefix the document allows (empty included)."""
    vocab = gated.vocabulary
    assert vocab is not None
    data = thinking + vocab.token_bytes(token)
    if not vocab.allowed_base[token]:
        return False
    at = data.find(gated.end)
    if at < 0:
        return True
    rest = data[at + len(gated.end) :]
    reference = gated.engine.reference
    return not rest or bool(reference.feed(reference.initial(), rest))


# -- the Qwen3 layout: the marker is one added token -------------------------------------


def test_qwen3_layout_reads_the_markers_as_control_tokens(qwen3: Vocabulary) -> None:
    assert qwen3.controls["<think>"] == THINK
    assert qwen3.controls["</think>"] == END_THINK
    assert THINK in qwen3.special_ids
    assert END_THINK in qwen3.special_ids
    plain = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5" / "tokenizer.json")
    assert plain.fingerprint != qwen3.fingerprint
    assert "</think>" not in plain.controls


def test_qwen3_thinking_mask(qwen3: Vocabulary) -> None:
    gated = jsonmode.compile_schema(
        PERSON, qwen3, reasoning=jsonmode.Reasoning("</think>", start="<think>")
    )
    inner = jsonmode.compile_schema(PERSON, qwen3)
    m = gated.matcher()
    mask = m.mask()
    assert mask[THINK]
    assert mask[END_THINK]
    assert not mask[sorted(qwen3.eos_ids)].any()
    assert not mask[151665]  # another control token: never in the thinking
    assert mask[qwen3.ids].sum() > 150_000  # ordinary text is free
    assert m.advance(THINK)
    assert not m.mask()[THINK]  # the start token only first
    assert not m.advance(THINK)
    assert not m.advance(min(qwen3.eos_ids))
    for token in (9707, 11, 220):  # "Hello", ",", " "
        assert m.advance(token)
        assert m.in_thinking()
    assert m.advance(END_THINK)
    assert not m.in_thinking()
    after = m.mask()
    assert np.array_equal(after, inner.matcher().mask())  # the document from its start
    assert not after[sorted(qwen3.eos_ids)].any()  # no end-of-sequence right after
    assert not after[END_THINK]


def test_qwen3_text_spelling_ends_the_thinking_too(qwen3: Vocabulary) -> None:
    gated = jsonmode.compile_schema(PERSON, qwen3, reasoning=jsonmode.Reasoning("</think>"))
    m = gated.matcher()
    pieces = [b"</", b"think", b">"]
    ids = {qwen3.token_bytes(int(t)): int(t) for t in qwen3.ids if qwen3.lengths.size}
    for piece in pieces:
        assert m.in_thinking()
        assert m.advance(ids[piece])
    assert not m.in_thinking()
    assert m.advance(ids[b'{"'])


def test_qwen3_cap_forces_the_marker_token(qwen3: Vocabulary) -> None:
    gated = jsonmode.compile_schema(
        SMALL, qwen3, reasoning=jsonmode.Reasoning("</think>", start="<think>", max_tokens=3)
    )
    m = gated.matcher()
    for token in (THINK, 9707, 9707):
        assert m.advance(token)
    mask = m.mask()
    assert np.flatnonzero(mask).tolist() == [END_THINK]  # the marker's token alone
    assert not m.advance(9707)
    assert not m.advance(
        int(np.flatnonzero([qwen3.token_bytes(t) == b"<" for t in range(1000)])[0])
    )
    assert m.forced_bytes() == b""  # the one-token mask forces it
    assert m.advance(END_THINK)
    assert not m.in_thinking()


def test_cap_zero_and_the_start_token(qwen3: Vocabulary) -> None:
    gated = jsonmode.compile_schema(
        SMALL, qwen3, reasoning=jsonmode.Reasoning("</think>", start="<think>", max_tokens=0)
    )
    m = gated.matcher()
    assert not m.mask()[THINK]
    assert m.mask()[END_THINK]
    assert not m.advance(THINK)


# -- text markers on Llama-3: the marker spans several ordinary tokens --------------------


def test_llama3_marker_across_token_boundaries(llama3: Vocabulary, llama3_tok: Tokenizer) -> None:
    gated = jsonmode.compile_schema(PERSON, llama3, reasoning=jsonmode.Reasoning("</think>"))
    assert gated.table.token is None
    marker = encode(llama3_tok, "</think>")
    assert len(marker) > 1
    thinking = encode(llama3_tok, "Let me think. ")
    m = gated.matcher()
    for token in thinking + marker[:-1]:
        assert m.advance(token)
        assert m.in_thinking()
    assert m.advance(marker[-1])
    assert not m.in_thinking()
    assert llama3.decode([*thinking, *marker]).endswith(b"</think>")


def test_llama3_masks_agree_with_a_byte_level_reference(
    llama3: Vocabulary, llama3_tok: Tokenizer
) -> None:
    """Differential: at every prefix of the marker, each token whose bytes hold ``<`` or
    ``>`` (the ones that can complete the marker, right or wrong) and a random sample of
    the rest are judged by the mask as the slow byte-level reference judges them."""
    gated = jsonmode.compile_schema(PERSON, llama3, reasoning=jsonmode.Reasoning("</think>"))
    rng = np.random.default_rng(7)
    tricky = [
        int(t)
        for t in llama3.ids
        if b"<" in llama3.token_bytes(int(t)) or b">" in llama3.token_bytes(int(t))
    ]
    sample = rng.choice(llama3.ids, size=2000, replace=False).tolist()
    candidates = sorted({*tricky, *map(int, sample), *sorted(llama3.special_ids)[:50]})
    prefix = encode(llama3_tok, "a</think")  # visits several match states
    history: list[int] = []
    m = gated.matcher()
    crossings = refused = 0
    for step in [*prefix, None]:
        thinking = llama3.decode(history)
        mask = m.mask()
        for token in candidates:
            want = reference_allows(gated, thinking, token)
            assert bool(mask[token]) == want, (thinking, llama3.token_bytes(token))
            assert m.advance(token) == want
            if want:
                data = thinking + llama3.token_bytes(token)
                if not m.in_thinking() and not data.endswith(b"</think>"):
                    crossings += 1
                m.rollback()
            elif b"</think>" in thinking + llama3.token_bytes(token):
                refused += 1
        if step is None:
            break
        assert m.advance(step)
        history.append(step)
    assert crossings > 0  # tokens spanning the marker and the document: allowed when valid
    assert refused > 0  # ... and refused when the document forbids their rest


def test_llama3_token_completing_the_marker_wrongly_is_refused(llama3: Vocabulary) -> None:
    gated = jsonmode.compile_schema(PERSON, llama3, reasoning=jsonmode.Reasoning("</think>"))
    m = gated.matcher()
    by_bytes = {llama3.token_bytes(int(t)): int(t) for t in llama3.ids}
    for piece in (b"</", b"think"):
        assert m.advance(by_bytes[piece])
    mask = m.mask()
    assert mask[by_bytes[b">"]]
    assert mask[by_bytes[b">{"]] if b">{" in by_bytes else True
    for bad in (b">\n", b">>", b">x", b"> "):  # the document cannot start so
        if bad in by_bytes:
            assert not mask[by_bytes[bad]], bad
    assert not mask[sorted(llama3.eos_ids)].any()


def test_cap_forces_the_text_marker_through_fast_forward(
    llama3: Vocabulary, llama3_tok: Tokenizer
) -> None:
    gated = jsonmode.compile_schema(
        SMALL, llama3, reasoning=jsonmode.Reasoning("</think>", max_tokens=4)
    )
    m = gated.matcher()
    emitted = encode(llama3_tok, "I think very hard about it")
    for token in emitted[:4]:
        assert m.advance(token)
    assert m.forced_bytes() == b"</think>"
    for token in np.flatnonzero(m.mask()).tolist():
        assert b"</think>".startswith(llama3.token_bytes(token))
    forward = FastForward(llama3, lambda text: encode(llama3_tok, text))
    forced = forward.forced(m, emitted[:4])
    assert forced.tokens  # the marker's tokens but the last (the model writes that one)
    assert b"</think>".startswith(llama3.decode(forced.tokens))
    assert m.forced_bytes() == b"</think>"  # (the matcher is left as it was)


# -- walks, accepts, the compiled contract ------------------------------------------------


def walk(gated: GatedConstraint, seed: int, limit: int = 400) -> list[int]:
    """A seeded random-logits walk: sample from random logits under the mask."""
    rng = np.random.default_rng(seed)
    m = gated.matcher()
    out: list[int] = []
    vocab = gated.vocabulary
    assert vocab is not None
    for _ in range(limit):
        mask = m.mask()
        logits = rng.standard_normal(vocab.size)
        logits[list(vocab.eos_ids)] += 4.0  # end once the document may
        logits[~mask] = -np.inf
        token = int(np.argmax(logits))
        assert m.advance(token)
        if m.is_finished():
            return out
        out.append(token)
    raise AssertionError("walk did not finish")


@pytest.mark.parametrize("layout", ["qwen3", "llama3"])
def test_random_walks_yield_thinking_marker_document(
    layout: str, request: pytest.FixtureRequest
) -> None:
    vocab: Vocabulary = request.getfixturevalue(layout)
    reasoning = jsonmode.Reasoning("</think>", start="<think>", max_tokens=12)
    gated = jsonmode.compile_schema(SMALL, vocab, reasoning=reasoning)
    inner = jsonmode.compile_schema(SMALL, vocab)
    for seed in range(6):
        tokens = walk(gated, seed)
        text = spell(gated, tokens).decode("utf-8", errors="surrogateescape")
        head, sep, document = text.partition("</think>")
        assert sep
        assert "</think>" not in head
        assert gated.accepts(text.encode("utf-8", "surrogateescape"))
        assert inner.accepts(document)
        jsonschema.validate(json.loads(document), SMALL)
        thinking_tokens = tokens.index(END_THINK) if END_THINK in tokens else None
        if layout == "qwen3" and thinking_tokens is not None:
            assert thinking_tokens <= 12


def test_accepts_judges_the_whole_text(llama3: Vocabulary) -> None:
    gated = jsonmode.compile_schema(
        PERSON, llama3, reasoning=jsonmode.Reasoning("</think>", start="<think>")
    )
    good = [
        '<think>\nShe is 36? {"name": "x"}\n</think>{"name":"Ada","age":36}',
        '</think>{"name":"Ada","age":36}',  # empty thinking (template pre-filled the start)
        'no start marker</think>{"name":"Ada","age":36}',
        '<think>a</think>{"name":"</think>","age":1}',  # the marker inside a JSON string
    ]
    bad = [
        '{"name":"Ada","age":36}',  # no thinking marker at all
        '<think>a</think>{"name":"Ada"}',  # the document does not conform
        '<think>a</think></think>{"name":"Ada","age":36}',  # the marker twice
        "<think>a</think>",  # no document
        '<think>a</think>{"name":"Ada","age":36}x',
    ]
    for text in good:
        assert gated.accepts(text), text
        assert gated.accepts(text.encode()), text
    for text in bad:
        assert not gated.accepts(text), text
    with pytest.raises(UsageError):
        gated.accepts(3)  # type: ignore[arg-type]
    text_only = jsonmode.compile_schema(PERSON, reasoning=jsonmode.Reasoning("</think>"))
    assert text_only.accepts(good[0])
    assert not text_only.accepts(bad[1])


def test_marker_inside_a_string_of_the_document(llama3: Vocabulary, llama3_tok: Tokenizer) -> None:
    gated = jsonmode.compile_schema(PERSON, llama3, reasoning=jsonmode.Reasoning("</think>"))
    m = gated.matcher()
    for token in encode(llama3_tok, 'ok</think>{"name":"</think>","age":1}'):
        assert m.advance(token)
    assert m.can_end()


def test_compile_grammar_takes_reasoning(llama3: Vocabulary, llama3_tok: Tokenizer) -> None:
    gated = jsonmode.compile_grammar(
        'root ::= "yes" | "no"', llama3, reasoning=jsonmode.Reasoning("[/THINK]", max_tokens=2)
    )
    assert isinstance(gated, GatedConstraint)
    assert gated.accepts("[THINK]hmm[/THINK]yes")
    assert not gated.accepts("[THINK]hmm[/THINK]maybe")
    m = gated.matcher()
    assert isinstance(m, GateMatcher)
    for token in encode(llama3_tok, "hm hm[/THINK]no"):
        assert m.advance(token)
    assert m.can_end()
    # the same gate for the same pair: its masks are built once
    again = jsonmode.compile_grammar(
        'root ::= "yes" | "no"', llama3, reasoning=jsonmode.Reasoning("[/THINK]", max_tokens=2)
    )
    assert again is gated


def test_batch_masker_and_bitmask_agree_with_mask(qwen3: Vocabulary) -> None:
    gated = jsonmode.compile_schema(
        SMALL, qwen3, reasoning=jsonmode.Reasoning("</think>", start="<think>", max_tokens=2)
    )
    plain = jsonmode.compile_schema(SMALL, qwen3)
    matchers = [gated.matcher(), gated.matcher(), gated.matcher(), plain.matcher()]
    matchers[1].advance(THINK)
    for token in (9707, 9707):
        matchers[2].advance(token)
    width = 151_936
    masker = BatchMasker(width, qwen3.eos_ids)
    for _ in range(2):  # cold, then cached rows
        logits = torch.zeros((len(matchers), width))
        masker.apply(logits, list(range(len(matchers))), matchers)
        for row, matcher in enumerate(matchers):
            mask = matcher.mask()
            allowed = torch.isfinite(logits[row]).numpy()
            assert np.array_equal(allowed[: qwen3.size], mask[: qwen3.size])
            words = np.zeros((qwen3.size + 31) // 32, dtype=np.int32)
            matcher.fill_bitmask(words)
            bits = np.unpackbits(words.view(np.uint8), bitorder="little")[: qwen3.size]
            assert np.array_equal(bits.astype(bool), mask)
    assert not np.array_equal(matchers[0].mask(), matchers[2].mask())  # free vs capped


def test_bad_markers_are_refused(llama3: Vocabulary) -> None:
    with pytest.raises(UnsupportedSchemaError):
        jsonmode.compile_schema(
            PERSON, llama3, reasoning=jsonmode.Reasoning("<" + "x" * MAX_MARKER_BYTES + ">")
        )
    with pytest.raises(UsageError):
        jsonmode.compile_schema(PERSON, llama3, reasoning="</think>")  # type: ignore[call-overload]
    with pytest.raises(UsageError):
        jsonmode.compile_schema(
            PERSON, llama3, reasoning=jsonmode.Reasoning("</think>", start="<think></think>")
        )
    tiny = Vocabulary.from_token_bytes([b"a", b"b", b"{", b"}", b'"', b":", b"</s>"], eos_ids=[6])
    with pytest.raises(UnsupportedSchemaError, match="spells the end marker"):
        jsonmode.compile_schema({"type": "object"}, tiny, reasoning=jsonmode.Reasoning("</z>"))
    named = Vocabulary.from_token_bytes(
        [b"a", b"{", b"}", None, None], eos_ids=[4], special_ids=[3], controls={"</z>": 3}
    )
    gated = jsonmode.compile_schema({"type": "object"}, named, reasoning=jsonmode.Reasoning("</z>"))
    m = gated.matcher()
    assert m.advance(0)
    assert m.advance(3)
    assert m.advance(1)
    assert m.advance(2)
    assert m.advance(4)
    with pytest.raises(UsageError):
        Vocabulary.from_token_bytes([b"a", None], controls={"</z>": 1})


def test_qwen3_cap_after_part_of_the_marker_text(qwen3: Vocabulary) -> None:
    """Capped while the marker's text is half written: its text is finished, by ordinary
    tokens only (the control token would leave ``</th`` in the thinking)."""
    gated = jsonmode.compile_schema(
        SMALL, qwen3, reasoning=jsonmode.Reasoning("</think>", max_tokens=2)
    )
    by_bytes = {qwen3.token_bytes(int(t)): int(t) for t in qwen3.ids}
    m = gated.matcher()
    assert m.advance(9707)
    assert m.advance(by_bytes[b"</"])
    assert m.forced_bytes() == b"think>"
    allowed = np.flatnonzero(m.mask()).tolist()
    assert allowed
    assert END_THINK not in allowed
    for token in allowed:
        assert b"think>".startswith(qwen3.token_bytes(token))
    assert m.advance(by_bytes[b"think"])
    assert m.advance(by_bytes[b">"])
    assert not m.in_thinking()


def test_control_tokens_that_are_parts_of_the_marker() -> None:
    """A marker of control tokens and text (``<|start|>assistant<|channel|>final
    <|message|>``): each control token may write its part where the match has got to
    it, nowhere else; its text spells it in the reply."""
    printable = [bytes([b]) for b in range(32, 127)]
    start, channel, message, end = len(printable), len(printable) + 1, len(printable) + 2, 98
    tokens: list[bytes | None] = [*printable, None, None, None, None]
    vocab = Vocabulary.from_token_bytes(
        tokens,
        eos_ids=[end],
        special_ids=[start, channel, message],
        controls={"<|start|>": start, "<|channel|>": channel, "<|message|>": message},
    )
    marker = "<|start|>assistant<|channel|>final<|message|>"
    gated = jsonmode.compile_schema(
        {"enum": [1, 2]}, vocab, reasoning=jsonmode.Reasoning(marker, max_tokens=40)
    )
    m = gated.matcher()
    mask = m.mask()
    assert mask[start]
    assert not mask[channel]
    assert not mask[message]
    assert not mask[end]
    by_byte = {t: i for i, t in enumerate(printable)}
    assert m.advance(by_byte[b"x"])
    assert m.advance(start)
    for char in b"assistant":
        assert not m.mask()[channel]
        assert m.advance(by_byte[bytes([char])])
    assert m.mask()[channel]
    assert m.advance(channel)
    for char in b"final":
        assert m.advance(by_byte[bytes([char])])
    assert m.advance(message)
    assert not m.in_thinking()
    assert m.advance(by_byte[b"2"])
    assert m.can_end()
    written = [by_byte[b"x"], start, *[by_byte[bytes([c])] for c in b"assistant"], channel]
    written += [by_byte[bytes([c])] for c in b"final"] + [message, by_byte[b"2"]]
    assert spell(gated, written) == b"x" + marker.encode() + b"2"
    assert gated.accepts(b"x" + marker.encode() + b"2")
    # capped at the start: the marker's first part, as its control token or its text
    capped = jsonmode.compile_schema(
        {"enum": [1, 2]}, vocab, reasoning=jsonmode.Reasoning(marker, max_tokens=0)
    )
    assert sorted(np.flatnonzero(capped.matcher().mask()).tolist()) == [by_byte[b"<"], start]
