"""The clean slice (``engine/slices.py``): a string-like state's walk as the clean tokens
plus a walk of the quoted ones must equal its full walk, token for token.

Checked on real tokenizers from ``../shared/data/tokenizers``: the slice's token classes
against Python's own UTF-8 decoder; every safe state of the lexemes of schemas that
have them (plain strings, unanchored patterns, extra keys) walked both ways; safe
states against random clean texts; and a grammar lexeme that reads raw control
characters (not safe: walked in full) against the reference matcher.
"""

from __future__ import annotations

import codecs
import random
from typing import Any

import numpy as np
import pytest
from support.real_vocabularies import vocabulary as _vocabulary
from support.reference_masks import reference_mask

import jsonmode
from jsonmode.decoding.engine import slices
from jsonmode.decoding.engine.facts import token_index


def _safe(info: Any, longest: int) -> np.ndarray:
    return np.array([slices.is_safe(info, longest, s) for s in range(info.crossing.size)])


def _fate(data: bytes) -> int:
    """0: a prefix of clean text; 2: leaves it first at a quote, a backslash or DEL
    between characters; 1: at a control character or a byte no UTF-8 text has there."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for byte in data:
        between = decoder.getstate()[0] == b""
        if between and byte in b'"\\\x7f':
            return 2
        try:
            text = decoder.decode(bytes((byte,)))
        except UnicodeDecodeError:
            return 1
        if text and ord(text) < 0x20:
            return 1
    return 0


@pytest.mark.parametrize("name", ["qwen2.5", "gpt2", "mistral-7b-v0.1"])
def test_the_slice_sorts_every_token_as_utf8_does(name: str) -> None:
    vocabulary = _vocabulary(name)
    index = token_index(vocabulary)
    piece = slices.clean_slice(index, vocabulary.size)
    fates = np.array(
        [_fate(bytes(index.matrix[p, : index.lengths[p]])) for p in range(index.lengths.size)]
    )
    clean = np.zeros(vocabulary.size, dtype=bool)
    clean[index.ids[fates == 0]] = True
    assert np.array_equal(piece.ids, clean)
    assert np.array_equal(piece.positions, np.flatnonzero(fates == 2))
    assert 0 < piece.positions.size < index.lengths.size // 10


SCHEMAS: list[Any] = [
    {"type": "string"},
    {"type": "string", "pattern": "\\d{4}-\\d{4}-\\d{3}[0-9Xx]"},
    {"type": "string", "pattern": "(\\w+\\.)+\\d+"},
    {"type": "string", "pattern": 'é|"|\\\\'},
    {"type": "string", "pattern": "^[a-z]+$"},
    {"type": "string", "format": "email"},
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "nested": {"type": "object"}},
        "required": ["name"],
    },
    {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}},
]


def _flags(walk: Any, size: int) -> np.ndarray:
    if walk.dense:
        return np.unpackbits(walk.inside, count=size).astype(bool)
    flags = np.zeros(size, dtype=bool)
    flags[walk.inside] = True
    return flags


@pytest.mark.parametrize("name", ["qwen2.5", "gpt2"])
def test_sliced_walks_equal_full_walks(name: str) -> None:
    vocabulary = _vocabulary(name)
    checked = 0
    everything = [(schema, jsonmode.compile_schema(schema, vocabulary)) for schema in SCHEMAS]
    grammar = jsonmode.compile_grammar(_STRUCTURAL_STRING, vocabulary)
    everything.append((_STRUCTURAL_STRING, grammar))
    for schema, compiled in everything:
        engine = compiled.engine
        walks = engine._walks
        for rule in range(len(engine._rules.network.rules)):
            info = engine._rules.info(rule)
            safe = _safe(info, engine._index.longest)
            for state in np.flatnonzero(safe).tolist():
                sliced = walks._sliced_walk(info, state)
                full = walks._compute_walk(info, state)
                assert sliced is not None
                assert np.array_equal(
                    _flags(sliced, vocabulary.size), _flags(full, vocabulary.size)
                ), (schema, state)
                for ours, theirs in zip(sliced.bounds.pack(), full.bounds.pack(), strict=True):
                    assert np.array_equal(ours, theirs), (schema, state)
                checked += 1
    assert checked >= 30  # (the slice applies: strings, searches, extra keys)


# A string body inside a structural rule (``value`` calls itself: it is not inlined;
# written in it, the string's states are ``value``'s).
_STRUCTURAL_STRING = r"""root ::= value
value ::= "[" ws (value ("," ws value)*)? "]" ws |
    "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
ws ::= | " " | "\n" [ \t]{0,20}
"""


@pytest.mark.parametrize("name", ["qwen2.5", "gpt2"])
def test_safety_over_a_state_region_is_the_whole_automaton_fixed_point(name: str) -> None:
    """A state's verdict is worked out over the states clean text reaches from it; it
    must be the verdict of the fixed point over the whole automaton, for every state of
    every rule, structural ones included."""
    vocabulary = _vocabulary(name)
    compiled = [jsonmode.compile_schema(schema, vocabulary) for schema in SCHEMAS]
    compiled.append(jsonmode.compile_grammar(_STRUCTURAL_STRING, vocabulary))
    structural_safe = 0
    for one in compiled:
        engine = one.engine
        for rule in range(len(engine._rules.network.rules)):
            info = engine._rules.info(rule)
            whole = slices._safe_states(info.flat, info.crossing, engine._index.longest)
            if whole is None or info.counted is not None:
                continue
            assert np.array_equal(_safe(info, engine._index.longest), whole), rule
            if rule not in engine._rules.lexeme_set:
                structural_safe += int(whole.sum())
    assert structural_safe >= 1


def _clean_text(rng: random.Random, size: int) -> bytes:
    alphabet = [chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\'] + list("éß中文😀ǅ")
    return "".join(rng.choice(alphabet) for _ in range(size)).encode()


def test_safe_states_keep_alive_on_clean_text_and_die_on_controls() -> None:
    vocabulary = _vocabulary("gpt2")
    rng = random.Random(7)
    tried = 0
    for schema in SCHEMAS[:4]:
        compiled = jsonmode.compile_schema(schema, vocabulary)
        engine = compiled.engine
        for rule in engine._rules.lexemes:
            info = engine._rules.info(rule)
            safe = _safe(info, engine._index.longest)
            table = info.flat
            for state in np.flatnonzero(safe).tolist():
                for _ in range(20):
                    here = state
                    for byte in _clean_text(rng, rng.randrange(1, 12)):
                        here = int(table[here * 256 + byte])
                        assert here >= 0, (schema, state)
                        assert not info.crossing[here], (schema, state)
                    assert all(table[here * 256 + byte] < 0 for byte in range(0x20))
                    tried += 1
    assert tried > 100


def test_a_lexeme_reading_raw_controls_is_walked_in_full() -> None:
    # [^"]* reads a raw newline: its states are not safe, and the masks stay exact.
    vocabulary = _vocabulary("gpt2")
    compiled = jsonmode.compile_grammar('root ::= "\\"" [^"]* "\\""', vocabulary)
    engine = compiled.engine
    for rule in engine._rules.lexemes:
        info = engine._rules.info(rule)
        safe = _safe(info, engine._index.longest)
        assert not safe.any()
    by_bytes = {vocabulary.token_bytes(t): t for t in range(vocabulary.size)}
    matcher = compiled.matcher()
    for step, byte in enumerate(b'"a\n b'):
        if step in (1, 3, 5):
            assert np.array_equal(matcher.mask(), reference_mask(compiled, matcher.state))
        assert matcher.advance(by_bytes[bytes((byte,))])


def test_states_that_miss_a_clean_character_are_refused_without_the_fixed_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A safe state reads every clean one-byte character, so a state that does not
    (a pattern's class, a format's state) is refused from its row alone: the
    automaton's safe states, a fixed point of up to milliseconds, are not worked out.
    The shortcut never refuses a state the fixed point finds safe."""
    vocabulary = _vocabulary("gpt2")
    checked = refused = 0
    for schema in SCHEMAS:
        engine = jsonmode.compile_schema(schema, vocabulary).engine
        for rule in engine._rules.lexemes:
            info = engine._rules.info(rule)
            safe = _safe(info, engine._index.longest)
            rows = info.flat.reshape(-1, 256)
            for state in np.flatnonzero(safe).tolist():
                assert (rows[state, slices._ONE_BYTE] >= 0).all(), (schema, state)
                checked += 1
    assert checked >= 10
    calls: list[int] = []
    monkeypatch.setattr(slices, "_safe_states", lambda *args: calls.append(1))
    monkeypatch.setattr(slices, "_safe_cache", type(slices._safe_cache)(1 << 20))
    schema = {"type": "string", "pattern": "^[b-y]+-[0-9]$"}  # (in no test before)
    engine = jsonmode.compile_schema(schema, vocabulary).engine
    for rule in engine._rules.lexemes:
        info = engine._rules.info(rule)
        for state in range(info.crossing.size):
            if (info.flat.reshape(-1, 256)[state, slices._ONE_BYTE] < 0).any():
                assert slices.sliced_walk(engine._index, vocabulary.size, info, state) is None
                refused += 1
    assert refused >= 2
    assert not calls


@pytest.mark.parametrize(
    ("grammar", "text"),
    [
        # (Free text to the end of the line: its body reads a tab and the newline.)
        (r'root ::= ("- " [^\r\n\x0b\x0c]+ "\n")+', b"- buy milk\n- go\n"),
        # (Text that may end anywhere, called: every state of its body crossing.)
        ('root ::= item ("\\n" root)?\nitem ::= [^\\x00-\\x1F]+', b"ab\ncd"),
    ],
)
def test_a_state_reading_what_clean_text_may_not_or_crossing_is_refused_at_once(
    grammar: str, text: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state that reads a byte clean text must die on (free text's tab or newline),
    or that is crossing, is refused by its own row and flag: no region is worked
    out, and its masks are the reference's (its walk is the full one)."""
    vocabulary = _vocabulary("gpt2")
    compiled = jsonmode.compile_grammar(grammar, vocabulary)
    engine = compiled.engine
    regions: list[int] = []
    monkeypatch.setattr(slices, "_clean_region", lambda trans, state: regions.append(state))
    monkeypatch.setattr(slices, "_safe_cache", type(slices._safe_cache)(1 << 20))
    refused = 0
    for rule in range(len(engine._rules.network.rules)):
        info = engine._rules.info(rule)
        rows = info.flat.reshape(-1, 256)
        for state in range(info.crossing.size):
            reads_all = bool((rows[state, slices._ONE_BYTE] >= 0).all())
            if (reads_all and (rows[state, [0x09, 0x0A]] >= 0).any()) or info.crossing[state]:
                assert slices.sliced_walk(engine._index, vocabulary.size, info, state) is None
                refused += reads_all
    assert refused >= 1
    assert regions == []
    by_bytes = {vocabulary.token_bytes(t): t for t in range(vocabulary.size)}
    matcher = compiled.matcher()
    for step, byte in enumerate(text):
        if step in (3, 4):
            assert np.array_equal(matcher.mask(), reference_mask(compiled, matcher.state))
        assert matcher.advance(by_bytes[bytes((byte,))])


# llama.cpp's JSON grammars read no raw DEL in strings; JSON (and this second grammar)
# does. DEL is walked, not in the slice, so both bodies are sliced and both are exact.
_NO_DEL = r'root ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""'
_WITH_DEL = r'root ::= "\"" ( [^"\\\x00-\x1F] | "\\" ["\\/bfnrt] )* "\""'


@pytest.mark.parametrize("name", ["qwen2.5", "gpt2"])
@pytest.mark.parametrize(("grammar", "reads_del"), [(_NO_DEL, False), (_WITH_DEL, True)])
def test_string_bodies_with_and_without_raw_del_are_sliced_and_exact(
    name: str, grammar: str, reads_del: bool
) -> None:
    vocabulary = _vocabulary(name)
    compiled = jsonmode.compile_grammar(grammar, vocabulary)
    engine = compiled.engine
    sliced_states = 0
    for rule in range(len(engine._rules.network.rules)):
        info = engine._rules.info(rule)
        safe = _safe(info, engine._index.longest)
        for state in np.flatnonzero(safe).tolist():
            sliced = engine._walks._sliced_walk(info, state)
            full = engine._walks._compute_walk(info, state)
            assert sliced is not None
            assert np.array_equal(_flags(sliced, vocabulary.size), _flags(full, vocabulary.size))
            for ours, theirs in zip(sliced.bounds.pack(), full.bounds.pack(), strict=True):
                assert np.array_equal(ours, theirs)
            sliced_states += 1
    assert sliced_states >= 1  # (the body between characters: not walked in full)
    by_bytes = {vocabulary.token_bytes(t): t for t in range(vocabulary.size)}
    matcher = compiled.matcher()
    assert matcher.advance(by_bytes[b'"'])
    mask = matcher.mask()
    assert bool(mask[by_bytes[b"\x7f"]]) is reads_del
    assert np.array_equal(mask, reference_mask(compiled, matcher.state))


@pytest.mark.parametrize("name", ["qwen2.5", "gpt2"])
def test_a_structural_rules_string_body_is_walked_through_the_slice(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body of ``string`` (a structural rule: it calls ``ws``) is sliced while
    masking, not walked in full, and every mask along a text is the reference's."""
    from jsonmode.decoding.engine import walk as walk_module

    vocabulary = _vocabulary(name)
    compiled = jsonmode.compile_grammar(_STRUCTURAL_STRING, vocabulary)
    engine = compiled.engine
    sliced_rules: list[int] = []
    original = walk_module.Walks._sliced_walk

    def spy(self: Any, info: Any, state: int) -> Any:
        found = original(self, info, state)
        if found is not None:
            sliced_rules.extend(
                r for r in range(len(engine._rules.network.rules)) if engine._rules.info(r) is info
            )
        return found

    monkeypatch.setattr(walk_module.Walks, "_sliced_walk", spy)
    by_bytes = {vocabulary.token_bytes(t): t for t in range(vocabulary.size)}
    matcher = compiled.matcher()
    text = b'["ab\\n", ["c"]]'
    # (The reference's mask, ~1 s a step in plain Python for Qwen2.5, is taken where
    # the slice serves: a body just opened, after an escape, in a nested string.)
    bodies = {2, 6, 12}
    for step, byte in enumerate(text):
        mask = matcher.mask()
        if step in bodies:
            assert np.array_equal(mask, reference_mask(compiled, matcher.state))
        assert matcher.advance(by_bytes[bytes((byte,))])
    assert matcher.can_end()
    assert any(rule not in engine._rules.lexeme_set for rule in sliced_rules)


def test_a_state_not_known_safe_is_not_worked_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A state whose clean region is over the bound is refused once: the region is not
    walked again on the next ask (a big rule's states are asked once per new walk)."""
    vocabulary = _vocabulary("gpt2")
    engine = jsonmode.compile_schema({"type": "string"}, vocabulary).engine
    monkeypatch.setattr(slices, "_MAX_STATES", 0)
    monkeypatch.setattr(slices, "_safe_cache", type(slices._safe_cache)(1 << 20))
    walked: list[int] = []
    real = slices._clean_region

    def counting(trans: Any, state: int) -> Any:
        walked.append(state)
        return real(trans, state)

    monkeypatch.setattr(slices, "_clean_region", counting)
    plain = engine._rules.plain()
    info = type(plain)(plain.signature + b"!", plain.crossing, plain.flat, plain.hashes)
    between = int(plain.flat[ord('"')])
    assert not slices.is_safe(info, engine._index.longest, between)
    assert not slices.is_safe(info, engine._index.longest, between)
    assert walked == [between]
