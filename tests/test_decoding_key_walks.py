"""Extra keys (a key that must not be a declared name): their walks, from the plain
string's, and their tables, trusted by how they were built."""

import pathlib

import numpy as np
import pytest
from support.reference_masks import reference_mask
from support.walks import key_lexeme, walk_sets

from jsonmode.decoding.automata.keys import built_names, extra_key_body
from jsonmode.decoding.automata.network import key_rule_names, quoted_rule
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.engine import rules as rules_module
from jsonmode.decoding.engine import state as state_module
from jsonmode.decoding.engine.facts import token_index
from jsonmode.decoding.engine.keyhashes import KeyHashes
from jsonmode.decoding.vocabulary import Vocabulary

TOKENIZERS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"

# Names of every kind the walk must get right: the empty name, names that are
# prefixes of others, names that real tokens spell with their quote ("id\"",
# "name\"", "type\""), a name with a space and one with "~", long names.
NAMES = [
    "",
    "a",
    "ab",
    "abc",
    "id",
    "ids",
    "name",
    "names",
    "type",
    "value",
    "description",
    "x y",
    "~",
    "metadata",
    "apiVersion",
    "a_rather_long_property_name_that_no_token_spells",
]


@pytest.mark.parametrize("name", ["qwen2.5", "mistral-7b-v0.1", "gpt2"])
def test_tokens_with_a_quote_are_found_by_their_text_before_it(name):
    """``TokenIndex.quoted`` holds, per text before a token's first quote, exactly
    the positions of the tokens with that text and a quote, as one range."""
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)
    index = token_index(vocabulary)
    expected: dict[bytes, list[int]] = {}
    for position in range(index.lengths.size):
        token = bytes(index.matrix[position, : index.lengths[position]])
        if b'"' in token:
            expected.setdefault(token[: token.index(b'"')], []).append(position)
    assert len(expected) > 20
    assert {text: (found[0], found[-1] + 1) for text, found in expected.items()} == index.quoted
    for found in expected.values():
        assert found == list(range(found[0], found[-1] + 1))  # (one range each)


@pytest.mark.parametrize("name", ["qwen2.5", "llama-3", "mistral-7b-v0.1"])
def test_key_walks_equal_computed_walks(name):
    """A key lexeme's state that still spells a prefix of the names is walked as the
    plain string's walk less the tokens that spell a name's rest and its closing
    quote: exactly the tokens and boundaries a full walk of its table finds, for
    every such state (a name itself, a prefix of several, the empty prefix)."""
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)
    schema = {"type": "object", "properties": {key: {"type": "integer"} for key in NAMES}}
    engine = compile_schema(schema, vocabulary).engine
    rule, automaton = key_lexeme(engine)
    info = engine._rules.info(rule)
    assert isinstance(info.hashes, KeyHashes)
    quoted = token_index(vocabulary).quoted
    compared = refused = 0
    for state in range(automaton.n_states):
        walk = engine._walks._key_walk(info, state)
        suffixes = info.hashes.suffixes(state)
        if suffixes is None:
            assert walk is None, state  # (before the quote, an escape, the plain body)
            continue
        assert walk is not None, state
        expected = engine._walks._compute_walk(info, state)
        assert walk_sets(walk, vocabulary.size) == walk_sets(expected, vocabulary.size), state
        compared += 1
        refused += any(suffix in quoted for suffix in suffixes)
    assert compared == automaton.n_states - 1 - 4 - (engine._rules.plain().crossing.size - 1)
    assert refused >= 5  # ("": a name's own state; "id", "name", "type" and more)


def _inside(walk, size: int) -> set[int]:
    if walk.dense:
        return set(np.flatnonzero(np.unpackbits(walk.inside, count=size)).tolist())
    return set(walk.inside.tolist())


def _groups_as_pairs(walk) -> set[tuple[int, int]]:
    pairs = set()
    for _, split in walk.groups:
        for lo, hi, col in zip(
            split.lo.tolist(), split.hi.tolist(), split.col.tolist(), strict=True
        ):
            pairs.update((position, col) for position in range(lo, hi))
    return pairs


def test_key_states_that_spell_no_names_end_take_the_plain_strings_walk():
    """The walk a mask takes for each state of a key lexeme that still spells a prefix
    of the names equals the full walk of its table, inside tokens and boundary tokens;
    where no token spells a name's rest and its quote from there (most states partway
    into a name), it is the plain string's own walk, one cache entry for all of them."""
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    schema = {"type": "object", "properties": {key: {"type": "integer"} for key in NAMES}}
    engine = compile_schema(schema, vocabulary).engine
    rule, automaton = key_lexeme(engine)
    info = engine._rules.info(rule)
    plain = engine._rules.plain()
    between = int(plain.flat[ord('"')])
    plain_inside, plain_bounds = walk_sets(
        engine._walks._shared_walk(plain, between, patch=True, lexeme=True), vocabulary.size
    )
    aliased = 0
    for state in range(automaton.n_states):
        if info.hashes.suffixes(state) is None:
            continue
        walk = engine._walks.walk(rule, state)
        ours = (_inside(walk, vocabulary.size), _groups_as_pairs(walk))
        inside, bounds = walk_sets(engine._walks._compute_walk(info, state), vocabulary.size)
        assert ours == (inside, set(bounds)), state
        if engine._walks._spells_no_name(rule, state):
            assert ours == (plain_inside, set(plain_bounds)), state
            aliased += 1
    assert aliased >= 20  # (partway into "description", "apiVersion", ...)


def test_key_masks_equal_reference_masks_while_spelling_names():
    """Masks of an object that allows extra keys, from its opening brace through a key
    that spells declared names ("name", then "names"), equal the reference matcher's."""
    from tokenizers import Tokenizer

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    tokenizer = Tokenizer.from_file(str(TOKENIZERS / "qwen2.5" / "tokenizer.json"))
    schema = {"type": "object", "properties": {"name": {}, "names": {}, "id": {"type": "string"}}}
    compiled = compile_schema(schema, vocabulary)
    for text in ('{"names": 1, "idx": 2}', '{"na": 1, "id": "x"}', '{"": 3}'):
        matcher = compiled.matcher()
        for token in tokenizer.encode(text, add_special_tokens=False).ids:
            assert np.array_equal(matcher.mask(), reference_mask(compiled, matcher.state)), text
            assert matcher.advance(token), text


def test_key_tables_are_trusted_only_as_built():
    """A key lexeme's table built from its names is known to be theirs by identity:
    its hashes and signature come from the names. An equal table built elsewhere is
    checked whole (and hashed alike); one altered anywhere is refused."""
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    schema = {"type": "object", "properties": {"id": {}, "name": {}, "names": {}}}
    engine = compile_schema(schema, vocabulary).engine
    rule, automaton = key_lexeme(engine)
    assert key_rule_names(automaton.trans) == automaton.keys == ("id", "name", "names")
    assert not automaton.trans.flags.writeable
    body = extra_key_body(automaton.keys)
    assert body is not None
    assert built_names(body.trans) == automaton.keys
    # Spelled in every way: another layout, neither marked nor hashed from names.
    complete = extra_key_body(automaton.keys, complete=True)
    assert complete is not None
    assert built_names(complete.trans) is None
    assert key_rule_names(quoted_rule("key", complete, keys=automaton.keys).trans) is None

    _, crossing, trans = engine._rules.signature(rule)
    checked = []
    layout = state_module._key_layout

    def spy(*args):
        checked.append(True)
        return layout(*args)

    state_module._key_layout = spy
    try:
        trusted = engine._rules.key_hashes(automaton.keys, crossing, trans)
        assert isinstance(trusted, KeyHashes)
        assert not checked
        copy = trans.copy()
        assert key_rule_names(copy) is None
        again = engine._rules.key_hashes(automaton.keys, crossing, copy)
        assert isinstance(again, KeyHashes)
        assert checked
        for state in range(1, 8):
            assert again[1, state] == trusted[1, state]
        copy[2, ord("z")] = 3  # (a prefix state's row, one entry off)
        assert engine._rules.key_hashes(automaton.keys, crossing, copy) is None
    finally:
        state_module._key_layout = layout

    # Signatures: from the names for a built table; equal names sign alike.
    signature = rules_module._content(automaton)[0]
    other = compile_schema(
        {"type": "object", "properties": {"id": {}, "name": {}, "names": {}}, "minProperties": 1},
        vocabulary,
    ).engine
    assert rules_module._content(key_lexeme(other)[1])[0] == signature
    fewer = compile_schema({"type": "object", "properties": {"id": {}, "name": {}}}, vocabulary)
    assert rules_module._content(key_lexeme(fewer.engine)[1])[0] != signature


def test_ranges_of_single_tokens_are_their_starts_and_expand_alike(monkeypatch):
    """A counting key state's walk records each token as its own range (~20 000 for a
    language tag with Qwen2.5): ``ranges`` returns their starts (a copy, no repeat)
    and equals the plain expansion on any ranges."""
    import numpy as np

    from jsonmode.decoding.engine import entries

    rng = np.random.default_rng(43)
    for _ in range(200):
        lo = rng.integers(0, 1000, size=int(rng.integers(0, 30)))
        hi = lo + rng.choice([1, 1, 1, 0, 2, 5], size=lo.size) * rng.integers(0, 2, size=lo.size)
        expected = [p for a, b in zip(lo.tolist(), hi.tolist(), strict=True) for p in range(a, b)]
        got = entries.ranges(lo, hi)
        assert got.dtype == np.int64
        assert got.tolist() == expected

    def no_repeat(*_args, **_kwargs):
        raise AssertionError("expanded")

    starts = np.array([5, 2, 9], dtype=np.int64)
    monkeypatch.setattr(np, "repeat", no_repeat)
    got = entries.ranges(starts, starts + 1)
    assert got.tolist() == [5, 2, 9]
    assert got is not starts
