"""The token matcher: masks against the reference walk, real tokenizers, fuzzing."""

import json
import pathlib
import random
import textwrap

import numpy as np
import pytest
from support.bounded import run_python
from support.reference_masks import reference_mask
from support.walks import key_lexeme, walk_sets

from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import BudgetExceededError, UsageError

TOKENIZERS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "n": {"type": "integer", "minimum": -5, "maximum": 120},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3},
        "sub": {
            "anyOf": [
                {"type": "null"},
                {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
            ]
        },
    },
    "required": ["name", "n"],
    "additionalProperties": False,
}


def synthetic_vocabulary() -> Vocabulary:
    """Every single byte JSON uses, plus multi-byte tokens that cross boundaries."""
    pieces = [bytes([b]) for b in range(32, 127)]
    pieces += [
        b'{"',
        b'":',
        b'",',
        b'"}',
        b"}]",
        b"],",
        b'", "',
        b'": ',
        b'":"',
        b"true",
        b"false",
        b"null",
        b'},{"',
        b"12",
        b"-5",
        b"0.5",
        b'"a"',
        b'bc"',
        b'"name',
        b'name":"',
        b"1}",
        b"20,",
        b'{"x":',
        b'"]',
        b"]}",
        b"\xc3\xa9",
        b"\xc3",
        b"\xa9",
        b"\\u00",
        b"\\n",
    ]
    eos = len(pieces)
    return Vocabulary.from_token_bytes([*pieces, b""], eos_ids=[eos])


def random_walk(compiled, rng, steps=60):
    matcher = compiled.matcher()
    for _ in range(steps):
        mask = matcher.mask()
        yield matcher, mask
        choices = np.flatnonzero(mask)
        assert choices.size, "empty mask before the document is finished"
        token = int(rng.choice(choices))
        assert matcher.advance(token)
        if matcher.is_finished():
            return


def test_fast_masks_equal_reference_masks_on_every_visited_state():
    compiled = compile_schema(SCHEMA, synthetic_vocabulary())
    rng = random.Random(7)
    for _ in range(12):
        for matcher, mask in random_walk(compiled, rng):
            assert np.array_equal(mask, reference_mask(compiled, matcher.state))


def test_random_walks_end_in_valid_documents():
    vocabulary = synthetic_vocabulary()
    compiled = compile_schema(SCHEMA, vocabulary)
    rng = random.Random(3)
    finished = 0
    for _ in range(40):
        text = bytearray()
        matcher = compiled.matcher()
        for _ in range(400):
            mask = matcher.mask()
            choices = np.flatnonzero(mask)
            assert choices.size
            # Prefer ending when possible, so documents close.
            eos = [c for c in choices if c in vocabulary.eos_ids]
            token = eos[0] if eos and rng.random() < 0.5 else int(rng.choice(choices))
            assert matcher.advance(token)
            if matcher.is_finished():
                break
            text += vocabulary.token_bytes(token)
        if matcher.is_finished():
            finished += 1
            value = json.loads(bytes(text))
            assert compiled.schema.conforms(value), bytes(text)
    assert finished >= 30


def test_advance_rejects_and_keeps_state_rollback_and_forced_bytes():
    vocabulary = synthetic_vocabulary()
    compiled = compile_schema(SCHEMA, vocabulary)
    matcher = compiled.matcher()
    token = {vocabulary.token_bytes(i): i for i in range(vocabulary.size)}
    assert matcher.forced_bytes() == b""  # "{" or one leading space
    before = matcher.state
    assert not matcher.advance(token[b"}"])
    assert matcher.state == before
    assert matcher.advance(token[b'{"'])
    assert matcher.forced_bytes() == b'name":'  # then an optional space
    assert matcher.advance(token[b'name":"'])
    matcher.rollback(1)
    assert not matcher.advance(token[b'"name'])  # the quote is already there
    assert matcher.advance(token[b"n"])
    eos = next(iter(vocabulary.eos_ids))
    assert not matcher.advance(eos)
    assert not matcher.is_finished()
    with pytest.raises(ValueError, match="roll back"):
        matcher.rollback(99)


def test_matcher_needs_a_vocabulary():
    with pytest.raises(UsageError, match="vocabulary"):
        compile_schema(SCHEMA).matcher()


@pytest.mark.parametrize("name", ["qwen2.5", "llama-3", "mistral-7b-v0.1"])
def test_real_tokenizer_walks_valid_documents(name):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)
    compiled = compile_schema(SCHEMA, vocabulary)
    documents = [
        {"name": "Ada", "n": 36},
        {"name": "é ü", "n": -5, "ok": True, "tags": ["a", "bc"], "sub": None},
        {"name": "x", "n": 120, "sub": {"x": -0.5e-3}},
    ]
    for document in documents:
        text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        data = b"".join(vocabulary.token_bytes(i) for i in ids)
        # SentencePiece spells the first piece with a leading space ("▁{").
        assert data in (text.encode(), b" " + text.encode())
        matcher = compiled.matcher()
        for token in ids:
            assert matcher.mask()[token], (name, text, vocabulary.token_bytes(token))
            assert matcher.advance(token)
        mask = matcher.mask()
        assert all(mask[e] for e in vocabulary.eos_ids)
        assert not any(mask[i] for i in vocabulary.special_ids - vocabulary.eos_ids)
        assert matcher.advance(next(iter(vocabulary.eos_ids)))
        assert matcher.is_finished()


def test_process_wide_caches_stay_within_their_budgets():
    from jsonmode.decoding import matcher as matcher_module
    from jsonmode.decoding.engine import cache as cache_module
    from jsonmode.decoding.engine import segments as segments_module
    from jsonmode.decoding.engine import walk as walk_module

    vocab = synthetic_vocabulary()
    caches = [
        cache_module._mask_cache,
        cache_module._bits_cache,
        walk_module.walk_cache,
        walk_module.local_walk_cache,
        segments_module.segment_cache,
    ]
    saved = [cache.budget for cache in caches]
    try:
        matcher_module.configure_caches(mask_bytes=4 * vocab.size, walk_bytes=64 * vocab.size)
        for cache in caches:
            cache.clear()  # other tests filled them under the default budgets
        compiled = compile_schema(SCHEMA, vocab, max_nesting_depth=63)  # a fresh engine
        rng = random.Random(3)
        for _ in range(5):
            m = compiled.matcher()
            for _ in range(40):
                allowed = np.flatnonzero(m.mask())
                assert allowed.size
                assert m.advance(int(rng.choice(allowed.tolist())))
                if m.is_finished():
                    break
        assert compiled.engine.misses > 4  # more masks than the budget holds...
        for cache in caches[:4]:
            # ...yet each cache stays within its budget (one item alone may exceed it)
            assert cache.used <= cache.budget or len(cache) == 1
    finally:
        for cache, budget in zip(caches, saved, strict=True):
            cache.budget = budget


def _token_fate(flat, crossing, target: int, token: bytes) -> tuple[bool, list[int]]:
    """Byte by byte: is ``token`` read to its end from ``target`` (the state after its
    first byte), and at which columns does it pass a crossing state with bytes left."""
    state, passes = target, []
    for column in range(1, len(token)):
        if crossing[state]:
            passes.append(column)
        state = int(flat[state * 256 + token[column]])
        if state < 0:
            return False, passes
    return True, passes


@pytest.mark.parametrize("name", ["qwen2.5", "llama-3", "mistral-7b-v0.1"])
def test_pruned_trie_walk_equals_a_token_by_token_walk(name):
    """Every (rule, state) of a schema, all first bytes at once: the segments of the
    pruned token-trie walk say, for a sample of tokens, exactly what reading each token
    byte by byte says (inside or not; where it passes a call or return point)."""
    from jsonmode.decoding.engine import segments as segments_module

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "n": {"type": "number", "minimum": 0, "maximum": 9.5},
            "d": {"type": "string", "format": "date"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name"],
    }
    engine = compile_schema(schema, vocabulary).engine
    rng = np.random.default_rng(5)
    compared = boundaries = 0
    for rule in range(len(engine.network.rules)):
        info = engine._rules.info(rule)
        for state in range(engine.network.rules[rule].n_states):
            row = info.flat[state * 256 : (state + 1) * 256]
            missing = [
                (b, int(row[b]))
                for b in np.flatnonzero(row >= 0).tolist()
                if engine._index.offsets[b] != engine._index.offsets[b + 1]
            ]
            if not missing:
                continue
            walked = segments_module._trie_walk(engine._index, info, missing)
            cut = segments_module._split(engine._index, walked, [b for b, _ in missing])
            for (byte, target), packed in zip(missing, cut, strict=True):
                lo, hi = int(engine._index.offsets[byte]), int(engine._index.offsets[byte + 1])
                inside = set(np.frombuffer(packed[0], dtype=np.int32).tolist())
                passes: dict[int, list[int]] = {}
                positions, columns = segments_module._entries(packed[1]).expand()
                found = zip(positions.tolist(), columns.tolist(), strict=True)
                for position, column in found:
                    passes.setdefault(position, []).append(column)
                sample = rng.choice(np.arange(lo, hi), size=min(40, hi - lo), replace=False)
                for position in sorted({*sample.tolist(), *list(passes)[:40]}):
                    token = bytes(engine._index.matrix[position, : engine._index.lengths[position]])
                    assert token[0] == byte
                    expected = _token_fate(info.flat, info.crossing, target, token)
                    assert (position in inside, sorted(passes.get(position, []))) == expected
                    boundaries += bool(expected[1])
            compared += 1
    assert compared > 100
    assert boundaries > 100


@pytest.mark.parametrize("name", ["qwen2.5", "mistral-7b-v0.1"])
def test_patched_walks_equal_computed_walks(name):
    """A wide state walked as a patch of its twin's walk (keys still spelling a
    declared name, ...) finds exactly the tokens and boundaries a full walk finds."""
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "names": {"type": "array", "items": {"type": "string", "maxLength": 3}},
            "nam\u00e9": {"type": "integer"},
            "e": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$"},
        },
        "additionalProperties": {"type": "boolean"},
    }
    engine = compile_schema(schema, vocabulary).engine
    patched = 0
    for rule in range(len(engine.network.rules)):
        info = engine._rules.info(rule)
        for state in range(engine.network.rules[rule].n_states):
            lexeme = rule in engine._rules.lexeme_set
            walk = engine._walks._patched_walk(info, state, lexeme)
            if walk is None:
                continue
            expected = engine._walks._compute_walk(info, state)
            assert walk_sets(walk, vocabulary.size) == walk_sets(expected, vocabulary.size)
            patched += engine.network.rules[rule].name.startswith("key_not")
    assert patched >= 5  # the key spelling "nam", "name", "names", ...: the case it is for


def _dense_state_hashes(trans, crossing, depths):
    """The state hashes computed the plain way: every state x byte, every depth."""
    from jsonmode.decoding.engine import state as state_module

    states = trans.shape[0]
    weights = state_module._BYTE_WEIGHTS
    targets = np.where(trans >= 0, trans, states)
    base = np.where(crossing, np.uint64(0x5851F42D4C957F2D), np.uint64(0x14057B7EF767814F))
    hashes, rows = base.copy(), []
    with np.errstate(over="ignore"):
        for depth in range(1, depths[-1] + 1):
            extended = np.append(hashes, state_module._DEAD)
            summed = (extended[targets] * weights).sum(axis=1, dtype=np.uint64) + base
            hashes = state_module._mix(summed)
            if depth in depths:
                rows.append(hashes)
    return np.stack(rows)


def test_state_hashes_equal_the_plain_computation():
    """Folding bytes into classes and classes into weighted edges changes nothing."""
    from jsonmode.decoding.engine import state as state_module

    schemas = [
        {"type": "string", "maxLength": 12},
        {"type": "string", "maxLength": 30},  # refines until depth ~30
        {"type": "string", "format": "date-time"},
        {"type": "number", "minimum": 3, "exclusiveMaximum": 70.5},
        {"type": "object", "properties": {k: {} for k in ("alpha", "alphabet", "beta")}},
        {"type": "string", "pattern": "^[a-z]+(-[0-9]{2,4})?$"},
    ]
    compared = 0
    for schema in schemas:
        for rule in compile_schema(schema).network.rules:
            trans = np.ascontiguousarray(rule.trans, dtype=np.int32)
            crossing = rule.accepting | np.array([bool(c) for c in rule.calls])
            for depths in ((7, 40), (3, 129)):
                fast = state_module.state_hashes(trans, crossing, depths)
                assert fast is not None
                assert np.array_equal(fast, _dense_state_hashes(trans, crossing, depths))
                compared += 1
    assert compared >= 20


def test_key_masks_equal_reference_masks_on_a_real_vocabulary():
    """Keys of an object that allows extra ones, while they still spell declared names
    (the states walked from the plain string's walk), with Qwen2.5's vocabulary:
    the fast mask is the reference matcher's, token for token."""
    from tokenizers import Tokenizer

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "names": {"type": "integer"}},
    }
    compiled = compile_schema(schema, vocabulary)
    tokenizer = Tokenizer.from_file(str(TOKENIZERS / "qwen2.5" / "tokenizer.json"))
    matcher = compiled.matcher()
    checked = 0
    for text in ('{"nam', "e", '"'):
        for token in tokenizer.encode(text, add_special_tokens=False).ids:
            assert matcher.advance(token)
        assert np.array_equal(matcher.mask(), reference_mask(compiled, matcher.state)), text
        checked += 1
    assert checked == 3


def test_lexicographic_order_sorts_tokens_by_their_bytes():
    """Prefixes before their extensions, bytes compared unsigned, equal tokens kept in
    their order (the token trie relies on all three)."""
    from jsonmode.decoding.engine.entries import lexicographic_order

    rng = np.random.default_rng(11)
    tokens = [bytes(rng.integers(0, 256, rng.integers(1, 6)).tolist()) for _ in range(400)]
    tokens += [b"\xff", b"\xff\x00", b"a", b"ab", b"a", b"\x00", b"\x80abc"]
    width = max(map(len, tokens))
    matrix = np.zeros((len(tokens), width), dtype=np.uint8)
    for row, token in enumerate(tokens):
        matrix[row, : len(token)] = list(token)
    lengths = np.array([len(token) for token in tokens], dtype=np.int64)
    order = lexicographic_order(matrix, lengths).tolist()
    expected = sorted(range(len(tokens)), key=lambda row: (tokens[row], row))
    assert order == expected


def test_lexemes_hashed_together_equal_each_hashed_alone(monkeypatch):
    """One pass over all of a network's small lexemes (their automata side by side)
    gives every lexeme exactly the hashes it gets alone, and caches them by
    signature; a big lexeme is left to be hashed when it is needed."""
    from jsonmode.decoding.engine import rules as rules_module
    from jsonmode.decoding.engine import state as state_module

    vocabulary = Vocabulary.from_token_bytes(
        [bytes([b]) for b in range(32, 127)] + [b'":', b"12", b"ab", b""], eos_ids=[98]
    )
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "maxLength": 7},
            "p": {"type": "string", "pattern": "^[a-c]+x?$"},
            "n": {"type": "number"},
            "i": {"type": "integer", "minimum": 3, "maximum": 117},
            "big": {"type": "string", "pattern": "^[a-c]{9}(x[a-c]{9})*$"},
        },
    }
    engine = compile_schema(schema, vocabulary).engine
    rules_module._hash_cache.clear()
    big = next(r for r, rule in enumerate(engine.network.rules) if "9" in rule.name)
    monkeypatch.setattr(rules_module, "_BATCH_STATES", engine.network.rules[big].n_states - 1)

    # Counted strings (the maxLength one) are keyed by their budgets, not hashed; the
    # plain string and the key lexeme get grafted hashes when they need them.
    def grafted(rule):
        _, crossing, trans = engine._rules.signature(rule)
        return state_module.plain_loops(trans, crossing).size > 0

    counted = [rule for rule in engine._rules.lexemes if engine.network.rules[rule].lengths]
    lexemes = [rule for rule in engine._rules.lexemes if rule not in counted and not grafted(rule)]
    assert len(lexemes) + len(counted) + 2 == len(engine._rules.lexemes)
    assert len(lexemes) >= 4
    assert lexemes[0] != big
    depths = (engine._rules.depth, engine._rules.depth + 1)
    first = engine._rules.hash_lexemes(lexemes[0])
    assert set(lexemes) - {big} <= engine._rules.hashed  # the small ones in the one pass
    assert not (set(engine._rules.lexemes) - set(lexemes)) & engine._rules.hashed
    assert big not in engine._rules.hashed
    engine._rules.hash_lexemes(big)
    for rule in lexemes:
        signature, crossing, trans = engine._rules.signature(rule)
        alone = state_module.state_hashes(trans, crossing, depths)
        cached = rules_module._hash_cache.get((signature, engine._rules.depth))
        assert cached is not None
        assert np.array_equal(cached, alone)
    _, crossing, trans = engine._rules.signature(lexemes[0])
    assert np.array_equal(first, state_module.state_hashes(trans, crossing, depths))


def test_reference_flags_of_big_rules_are_worked_out_per_state(monkeypatch):
    """Whether a state reads, and whether it is settled, are the same whether a
    rule's flags are made all at once or per state on first lookup (big rules)."""
    from jsonmode.decoding import reference as reference_module

    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}},
    }
    network = compile_schema(schema).network

    def flags():
        matcher = reference_module.ReferenceMatcher(network)
        reads, _, _ = matcher.rule_lists()
        return [
            [(bool(reads[r][s]), bool(matcher._settled[r][s])) for s in range(rule.n_states)]
            for r, rule in enumerate(network.rules)
        ]

    eager = flags()
    monkeypatch.setattr(reference_module, "_EAGER_STATES", 0)
    lazy = flags()
    assert lazy == eager
    for r, rule in enumerate(network.rules):
        reads = (rule.trans >= 0).any(axis=1)
        assert [read for read, _ in eager[r]] == reads.tolist()
        settled = reads & ~rule.accepting & np.array([not c for c in rule.calls])
        assert [done for _, done in eager[r]] == settled.tolist()
    assert any(not read for row in eager for read, _ in row)  # (a non-trivial check)


def test_reference_tables_are_made_for_the_rules_a_text_reaches():
    """A mask engine's reference matcher makes a rule's tables on its first lookup,
    not for every rule at set-up (a compile pays for none; a walk for the rules it
    reaches), and what it makes is what the rule holds."""
    from jsonmode.decoding import reference as reference_module

    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "array", "items": {"type": "integer"}},
            "c": {"type": "object", "properties": {"d": {"type": "boolean"}}},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    network = compile_schema(schema).network
    matcher = reference_module.ReferenceMatcher(network)
    assert not matcher._trans
    assert not matcher._reads
    assert not matcher._settled
    assert matcher.accepts(b'{"a":"x"}')
    reached = set(matcher._trans)
    assert network.root in reached
    assert reached < set(range(len(network.rules)))  # (the array and the inner object: not)
    for rule in reached:
        assert bytes(matcher.table(rule)) == network.rules[rule].trans.astype(np.int32).tobytes()
    assert matcher.accepts(b'{"a":"x","b":[1],"c":{"d":true}}')
    assert set(matcher._trans) > reached


COUNTED = {
    "type": "object",
    "properties": {
        "a": {"type": "string", "maxLength": 5},
        "b": {"type": "string", "minLength": 3, "maxLength": 40},
        "c": {"type": "string", "minLength": 4},
        "d": {"type": "string", "minLength": 2, "maxLength": 2},
        "e": {"type": "string", "maxLength": 0},
    },
}


def test_a_counted_string_keeps_its_count_after_an_equal_pattern_table():
    """A lexeme's information is shared by content, and a string of at most 0
    characters has the table of the pattern ``^[a-z]{0,0}$`` (the two quotes only): the
    pattern's information (no length bounds) compiled first must not be the counted
    string's (it failed so when tests ran in that order)."""
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    pattern = compile_schema({"type": "string", "pattern": "^[a-z]{0,0}$"}, vocabulary).engine
    for rule in range(len(pattern.network.rules)):
        pattern._rules.info(rule)
    engine = compile_schema({"type": "string", "maxLength": 0}, vocabulary).engine
    counted = [r for r, a in enumerate(engine.network.rules) if a.lengths is not None]
    assert counted
    for rule in counted:
        assert engine._rules.info(rule).counted is not None


@pytest.mark.parametrize("name", ["qwen2.5", "mistral-7b-v0.1"])
def test_counted_string_walks_equal_computed_walks(name):
    """A string with length bounds only, between characters, is walked as the plain
    string's walk cut by its character budget: exactly the tokens and boundaries a
    trie walk of its own automaton finds, at every count (near both bounds, far from
    them, exactly at them)."""
    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)
    engine = compile_schema(COUNTED, vocabulary).engine
    compared = set()
    for rule, automaton in enumerate(engine.network.rules):
        if automaton.lengths is None:
            continue
        info = engine._rules.info(rule)
        assert info.counted is not None, automaton.name  # not silently the slow path
        for state in range(automaton.n_states):
            budget = engine._walks._budget(info.counted, state)
            if budget is None:
                continue
            walk = engine._walks._counted_walk(info.counted.plain, *budget)
            expected = engine._walks._compute_walk(info, state)
            assert walk_sets(walk, vocabulary.size) == walk_sets(expected, vocabulary.size), (
                automaton.name,
                state,
            )
            compared.add((automaton.lengths, budget))
    assert {lengths for lengths, _ in compared} == {(0, 5), (3, 40), (4, None), (2, 2), (0, 0)}
    assert len(compared) > 30


def test_counted_string_masks_equal_reference_masks():
    """Through the whole engine (budget keys shared between lexemes, the local walks
    of each lexeme), masks of counted strings are the reference matcher's."""
    from tokenizers import Tokenizer

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    compiled = compile_schema(COUNTED, vocabulary)
    tokenizer = Tokenizer.from_file(str(TOKENIZERS / "qwen2.5" / "tokenizer.json"))
    checked = 0
    for document in (
        '{"a":"abcd","b":"' + "xy" * 19 + '","d":"ab"}',
        r'{"a":"\u001f\n' + "\u00e9" + r'","c":"caf' + "\u00e9" + r' \"ok\"","e":""}',
    ):
        matcher = compiled.matcher()
        for step, token in enumerate(tokenizer.encode(document, add_special_tokens=False).ids):
            if step % 8 == 7:  # (a reference mask takes seconds)
                assert np.array_equal(matcher.mask(), reference_mask(compiled, matcher.state))
                checked += 1
            assert matcher.advance(token), document
        assert matcher.can_end()
    assert checked >= 4


def test_count_states_refuse_automata_other_than_the_counted_plain_string():
    """The claim ``lengths`` is checked against the automaton on every state and byte
    class: a wrong bound, or a body narrower than any string, is refused (the engine
    then walks the rule like any other), never mistaken for a counted string."""
    from jsonmode import regex as rx
    from jsonmode.decoding.automata.network import RuleDFA, plain_string_rule, quoted_rule
    from jsonmode.decoding.engine.rules import _count_states

    plain = plain_string_rule().trans

    def rule(dfa, lengths):
        return quoted_rule("s", rx.json_string_body_dfa(dfa), lengths)

    for low, high in ((0, 0), (0, 1), (3, 3), (2, 40), (0, None), (6, None)):
        found = _count_states(rule(rx.any_char_dfa(low, high), (low, high)), plain)
        assert found is not None, (low, high)
        plain_of, chars = found
        between = int(plain[0, ord('"')])
        assert sorted(chars[plain_of == between].tolist()) == list(range((high or low) + 1))
    assert _count_states(rule(rx.any_char_dfa(0, 5), (0, 4)), plain) is None
    assert _count_states(rule(rx.any_char_dfa(0, 5), (1, 5)), plain) is None
    assert _count_states(rule(rx.any_char_dfa(2, None), (1, None)), plain) is None
    assert _count_states(rule(rx.any_char_dfa(0, 5), (0, None)), plain) is None
    letters = rx.intersect(rx.any_char_dfa(0, 5), rx.compile_pattern("^[a-z]*$"))
    assert _count_states(rule(letters, (0, 5)), plain) is None
    no_quote = rx.intersect(rx.any_char_dfa(0, 5), rx.compile_pattern('^[^"]*$'))
    assert _count_states(rule(no_quote, (0, 5)), plain) is None
    # A state repeated (a copy of one inside a character, met from one count) is
    # still the counted string; a character's byte leading to the count after next,
    # or a last state that reads on, is not.
    counted = rule(rx.any_char_dfa(2, 40), (2, 40))
    trans, size = counted.trans, counted.trans.shape[0]
    one = trans[trans[0, ord('"')], ord("a")]
    inside, later = trans[one, 0xC3], trans[trans[one, ord("a")], 0xC3]
    grown = np.where(trans == size - 1, size, trans)
    grown = np.vstack([grown[:-1], grown[inside], grown[-1:]]).astype(np.int32)
    grown[one][trans[one] == inside] = size - 1
    accepting = np.zeros(size + 1, dtype=np.bool_)
    accepting[-1] = True

    def changed(table):
        return RuleDFA("s", table, ((),) * table.shape[0], accepting, (2, 40))

    found = _count_states(changed(grown), plain)
    assert found is not None
    assert found[1][size - 1] == found[1][inside] == 2
    skipping = grown.copy()
    skipping[one][trans[one] == inside] = later
    assert _count_states(changed(skipping), plain) is None
    reading = grown.copy()
    reading[-1, ord("a")] = 1
    assert _count_states(changed(reading), plain) is None


def test_no_dead_end_where_a_member_accepts_nothing():
    """Random walks never meet an empty mask or a refused allowed token when a
    member's string cannot exist (its opening quote is never allowed)."""
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "minLength": 4, "maxLength": 2},
            "b": {"type": ["string", "null"], "minLength": 4, "maxLength": 2},
        },
        "required": ["b"],
        "additionalProperties": False,
    }
    compiled = compile_schema(schema, synthetic_vocabulary())
    rng = random.Random(3)
    finished = 0
    for _ in range(30):
        for matcher, mask in random_walk(compiled, rng, steps=40):
            assert np.array_equal(mask, reference_mask(compiled, matcher.state))
        finished += matcher.is_finished()
    assert finished >= 20


def test_rule_information_and_walks_are_shared_between_schemas(monkeypatch):
    """One lexeme in two schemas: the second engine reuses the first's rule
    information (tables, hashes), found by content. Structural rules are signed by
    their table (networks share the table of a rule shape) and crossing states: the
    two roots (one shape) share their walks, the object and the array rule do not."""
    from jsonmode.decoding.engine import walk as walk_module

    vocabulary = synthetic_vocabulary()
    pattern = {"type": "string", "pattern": "^[a-c]+x?$"}
    first = compile_schema({"type": "object", "properties": {"p": pattern}}, vocabulary).engine
    second = compile_schema({"type": "array", "items": pattern}, vocabulary).engine

    def lexeme(engine):
        (index,) = [i for i, rule in enumerate(engine.network.rules) if "pattern" in rule.name]
        return engine._rules.info(index)

    shared = lexeme(first)
    assert shared.hashes is not None
    assert lexeme(second) is shared
    roots = [engine.network.rules[engine.network.root] for engine in (first, second)]
    assert roots[0].trans is roots[1].trans
    signatures = [engine._rules.info(engine.network.root).signature for engine in (first, second)]
    assert signatures[0] == signatures[1]
    obj, arr = first.network.names["obj"], second.network.names["arr"]
    assert first._rules.info(obj).signature != second._rules.info(arr).signature
    # The second root's walks come from the first's: nothing is walked again.
    walked = [first.walk(first.network.root, state) for state in range(roots[0].n_states)]

    def refuse(*args, **kwargs):
        raise AssertionError("walked again")

    for name in ("_compute_walk", "_patched_walk", "_sliced_walk"):
        monkeypatch.setattr(walk_module.Walks, name, refuse)
    for state, walk in enumerate(walked):
        again = second.walk(second.network.root, state)
        assert np.array_equal(again.inside, walk.inside)
        assert [stop for stop, _ in again.groups] == [stop for stop, _ in walk.groups]


def test_rules_sharing_a_table_differ_in_signature_where_their_crossing_states_do():
    """Rules that share one table (any-order families) but accept or call in other
    states are signed apart; rules alike in both are signed alike, whom they call
    aside; another table object, even an equal one, is numbered apart."""
    from jsonmode.decoding.automata.network import RuleDFA
    from jsonmode.decoding.engine.rules import _structural_content

    trans = np.full((2, 256), -1, dtype=np.int32)
    trans[0, ord("a")] = 1
    calls = (((5, 1),), ())
    accepting = np.array([False, True])
    one = RuleDFA("one", trans, calls, accepting)
    two = RuleDFA("two", trans, calls, np.array([False, False]))
    three = RuleDFA("three", trans, (((7, 1),), ()), accepting)
    copy = RuleDFA("copy", trans.copy(), calls, accepting)
    signed = [_structural_content(rule)[0] for rule in (one, two, three, copy)]
    assert signed[0] != signed[1]
    assert signed[0] == signed[2]
    assert signed[0] != signed[3]


def test_replay_in_plain_python_equals_the_vectorised_replay(monkeypatch):
    """Boundary prefixes replayed byte by byte (few bytes in all) reach the states the
    column-by-column replay reaches."""
    from jsonmode.decoding.engine import walk as walk_module

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    engine = compile_schema(SCHEMA, vocabulary).engine
    compared = 0
    for rule, automaton in enumerate(engine.network.rules):
        info = engine._rules.info(rule)
        for state in range(min(automaton.n_states, 12)):
            lexeme = rule in engine._rules.lexeme_set
            bounds = engine._walks._shared_walk(info, state, patch=True, lexeme=lexeme).bounds
            if not bounds.size:
                continue
            args = (info.flat, state, bounds.lo, bounds.col)
            monkeypatch.setattr(walk_module, "_FEW_BYTES", 1 << 30)
            plain = engine._walks._replay(*args)
            monkeypatch.setattr(walk_module, "_FEW_BYTES", -1)
            assert np.array_equal(plain, engine._walks._replay(*args))
            compared += 1
    assert compared >= 10


def _walk_groups(walk, size: int) -> tuple[set[int], dict[int, list[tuple[int, int, int]]]]:
    """A walk's inside ids and, per stop state, its boundary tokens as (position,
    column where the rest starts, that first byte)."""
    from jsonmode.decoding.engine.entries import ranges

    if walk.dense:
        inside = set(np.flatnonzero(np.unpackbits(walk.inside, count=size)).tolist())
    else:
        inside = set(walk.inside.tolist())
    groups: dict[int, list[tuple[int, int, int]]] = {}
    for stop, split in walk.groups:
        counts = split.hi - split.lo
        rows = ranges(split.lo, split.hi).tolist()
        cols = np.repeat(split.col, counts).tolist()
        firsts = np.repeat(split.byte, counts).tolist()
        groups.setdefault(stop, []).extend(zip(rows, cols, firsts, strict=True))
    return inside, {stop: sorted(tokens) for stop, tokens in groups.items()}


def _visited_stacks(compiled, seed: int, walks: int) -> list[tuple]:
    """The stacks of every state random walks visit, each once."""
    rng = random.Random(seed)
    seen: dict[tuple, None] = {}
    for _ in range(walks):
        for matcher, _ in random_walk(compiled, rng):
            seen.update(dict.fromkeys(stack for stack in matcher.state if stack))
    return list(seen)


@pytest.mark.parametrize("name", ["qwen2.5", "llama-3"])
def test_direct_walks_equal_vectorised_walks(name, monkeypatch):
    """A stack whose top state reads few bytes follows the token trie itself
    (engine.boundary.direct): it allows exactly the tokens the vectorised walk and the
    finishing of its boundary tokens allow, also where its tokens pass calls and
    returns."""
    from jsonmode.decoding.engine import boundary as boundary_module

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)
    schema = {
        **SCHEMA,
        "properties": {
            **SCHEMA["properties"],
            "when": {"type": "string", "format": "date"},
            "kind": {"const": "alpha\u00e9"},
            "more": {"type": "object", "properties": {"apiVersion": {"type": "integer"}}},
        },
    }
    compiled = compile_schema(schema, vocabulary)
    engine = compiled.engine
    stacks = _visited_stacks(compiled, seed=3, walks=12)
    direct = {}
    for stack in stacks:
        numbering = engine._current_stacks()
        context = numbering.context(stack[:-1], stack[-1][0])
        if boundary_module.direct(engine._index.trie, numbering, context, stack[-1][1]) is not None:
            direct[stack] = _stack_mask(engine, stack)
    assert len(direct) > 40
    numbering = engine._current_stacks()
    closures = numbering.size - len(numbering.tables)  # (size: contexts and closures)
    assert closures > 20  # (direct walks passed calls and returns)
    monkeypatch.setattr(boundary_module, "_SMALL_BYTES", -1)  # the vectorised walk only
    for stack, mask in direct.items():
        assert np.array_equal(_stack_mask(engine, stack), mask), stack


def test_direct_walks_give_way_at_once_to_a_string_body(monkeypatch):
    """A narrow stack whose first byte leads into a wide state above many tokens (a
    string's opening quote: its body reads nearly every byte, and hundreds of tokens
    begin with a quote) is left to the vectorised walk without a trie step: walking it
    in plain Python would only pass the node budget. A stack that stays narrow after
    the quote (a key that must spell "name") is still walked directly."""
    from jsonmode.decoding.engine import boundary as boundary_module

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "additionalProperties": False,
    }
    compiled = compile_schema(schema, vocabulary)
    engine = compiled.engine
    trie = engine._index.trie
    assert trie.first_sizes[trie.first_node_list[ord('"')]] > boundary_module._DIRECT_NODES

    def quoted(text):
        """The stacks after ``text`` whose top state reads a quote (one each)."""
        state = engine.reference.feed(engine.reference.initial(), text)
        found = [stack for stack in state if stack and ord('"') in _reads(engine, stack)]
        assert len(found) == 1, found
        numbering = engine._current_stacks()
        return numbering, numbering.context(found[0][:-1], found[0][-1][0]), found[0][-1][1]

    def no_trie_steps(*args, **kwargs):
        raise AssertionError("walked the trie")

    key, value = quoted(b"{"), quoted(b'{"name":')
    with monkeypatch.context() as patched:
        patched.setattr(type(trie), "walk_stacks", no_trie_steps)
        assert boundary_module.direct(trie, *value) is None
    assert boundary_module.direct(trie, *key)  # (the tokens of '"name', '"n', ...)
    # Without the shortcut the walk is tried, and gives way at the node budget.
    monkeypatch.setattr(boundary_module, "_WIDE_BYTES", 256)
    assert boundary_module.direct(trie, *value) is None


def _reads(engine, stack):
    rule, state = stack[-1]
    return set(np.flatnonzero(engine.network.rules[rule].trans[state] >= 0).tolist())


def _stack_mask(engine, stack):
    """The tokens one stack reads, assembled as bools and as bits (which must agree)."""
    from jsonmode.decoding.engine.cache import _Bits, _Flags
    from jsonmode.decoding.engine.facts import pack_flags

    flags = _Flags(engine.vocabulary.size, engine._ids)
    bits = _Bits(len(engine.bits(())), engine._ids)
    engine._add_stack(flags, stack)
    engine._add_stack(bits, stack)
    mask = flags.done()
    assert np.array_equal(bits.done(), pack_flags(mask)), stack
    return mask


def test_key_lexemes_take_the_plain_strings_hashes_and_share_equal_states():
    """A key that is not a declared name is hashed without a pass per depth: its
    states that act as the plain string's take the plain string's hashes, and equal
    prefix states of different key lexemes ("nam" where only "name" goes on) hash
    alike, unequal ones ("nam" where "names" goes on too) apart."""
    from jsonmode.decoding.engine import state as state_module
    from jsonmode.decoding.engine.keyhashes import KeyHashes

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")

    def prefix_hashes(names):
        schema = {"type": "object", "properties": {name: {} for name in names}}
        engine = compile_schema(schema, vocabulary).engine
        rule, automaton = key_lexeme(engine)
        info = engine._rules.info(rule)
        assert isinstance(info.hashes, KeyHashes)
        plain_of = state_module._plain_states(automaton.trans, automaton.accepting)
        known = np.flatnonzero(plain_of >= 0)
        assert known.size == engine._rules.plain().crossing.size - 1  # all but before the quote
        plain = engine._rules.plain().hashes
        for state, theirs in zip(known.tolist(), plain_of[known].tolist(), strict=True):
            assert [info.hashes[row, state] for row in (0, 1)] == plain[:, theirs].tolist()
        state = automaton.trans[0, ord('"')]
        for byte in b"nam":
            state = automaton.trans[state, byte]
        return info.hashes[0, state], info.hashes[1, state]

    name_id = prefix_hashes(["name", "id"])
    assert name_id == prefix_hashes(["kind", "name"])
    assert name_id != prefix_hashes(["name", "names"])
    assert name_id != prefix_hashes(["nam", "id"])


def test_plain_states_refuse_a_lookalike():
    """A state that reads like the plain string between characters but differs
    deeper (one escape digit fewer) is not taken for it."""
    from jsonmode.decoding.automata.network import plain_string_rule
    from jsonmode.decoding.engine import state as state_module

    plain = plain_string_rule()
    trans = np.array(plain.trans, dtype=np.int32)
    crossing = np.array(plain.accepting)
    found = state_module._plain_states(trans, crossing)
    assert found is not None
    assert (found[1:] >= 0).all()
    between = trans[0, ord('"')]
    after_u = trans[trans[between, ord("\\")], ord("u")]
    trans[after_u, ord("0")] = -1
    assert state_module._plain_states(trans, crossing) is None


def test_mix_of_one_int_equals_the_vectorised_mix():
    from jsonmode.decoding.engine import state as state_module

    values = np.random.default_rng(3).integers(0, 2**63, size=64, dtype=np.uint64) * np.uint64(3)
    expected = state_module._mix(values.copy()).tolist()
    assert [state_module._mix_int(int(v)) for v in values.tolist()] == expected
    assert state_module._mix_int(1 << 70) == state_module._mix_int(0)


def test_grafted_hashes_equal_the_sum_over_every_byte():
    """A key lexeme's tree states are hashed from their model plain state's sum,
    corrected on the bytes where they differ: the same value as summing every
    byte's weight times its target's hash (names with multibyte characters put
    some tree states inside a character, modelled on another plain state)."""
    from jsonmode.decoding.engine import state as state_module

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    names = ["name", "naïve", "id", "日本語", "a\\b"]
    schema = {"type": "object", "properties": {name: {} for name in names}}
    engine = compile_schema(schema, vocabulary).engine
    rule, _ = key_lexeme(engine)
    _, crossing, trans = engine._rules.signature(rule)
    got = engine._rules.grafted_hashes(crossing, trans)
    assert got is not None
    plain_of = state_module._plain_states(trans, crossing)
    plain_hashes = engine._rules.plain().hashes
    weights = state_module._BYTE_WEIGHTS.tolist()
    dead = int(state_module._DEAD)
    memo: dict[int, tuple[int, int]] = {}

    def expected(state: int) -> tuple[int, int]:
        if state < 0:
            return dead, dead
        if plain_of[state] >= 0:
            return int(plain_hashes[0, plain_of[state]]), int(plain_hashes[1, plain_of[state]])
        if state not in memo:
            start = state_module._TREE_CROSSING if crossing[state] else state_module._TREE_INNER
            low = high = start
            for byte in range(256):
                target_low, target_high = expected(int(trans[state, byte]))
                low += weights[byte] * target_low
                high += weights[byte] * target_high
            memo[state] = state_module._mix_int(low), state_module._mix_int(high)
        return memo[state]

    tree = np.flatnonzero(plain_of < 0)
    assert tree.size > 20
    for state in range(trans.shape[0]):
        assert (int(got[0, state]), int(got[1, state])) == expected(state)


def test_key_hashes_from_the_names_part_states_as_grafted_hashes_do():
    """A key lexeme of plain names (``RuleDFA.keys``, set by the compiler) is hashed
    from its names, a state at a time: over many name sets (names that are prefixes
    of others, the empty name, a prefix with many next letters), two states, of one
    lexeme or of two, hash alike exactly when the generic graft (exact behaviour
    hashes) says so. A table that is not the names' own is refused (None), never
    hashed as if it were."""
    from jsonmode.decoding.engine import state as state_module
    from jsonmode.decoding.engine.keyhashes import KeyHashes

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz_ 0~{"
    name_sets = [
        ["name", "names", "id", ""],
        ["name", "kind", "id"],  # ("nam", "na", "n" as in the first set but "names")
        [chr(ord("a") + k) + "x" for k in range(26)],  # 26 next letters after ""
        ["a", "ab", "abc", "abcd"],
        ["xa", "xab", "ab"],  # ("ab" and "xab": one state each, with equal suffixes)
    ]
    name_sets += [
        [
            "".join(rng.choice(letters[: rng.randint(2, len(letters))]) for _ in range(size))
            for size in [rng.randint(0, 7) for _ in range(rng.randint(1, 10))]
        ]
        for _ in range(40)
    ]
    # (Per row: the rows are hashes of two depths, compared only with their own.)
    ours_to_graft: list[dict[int, int]] = [{}, {}]
    graft_to_ours: list[dict[int, int]] = [{}, {}]
    for names in name_sets:
        schema = {"type": "object", "properties": {name: {} for name in names}}
        engine = compile_schema(schema, vocabulary).engine
        rule, automaton = key_lexeme(engine)
        assert automaton.keys is not None
        assert set(automaton.keys) == set(names)
        _, crossing, trans = engine._rules.signature(rule)
        got = engine._rules.key_hashes(automaton.keys, crossing, trans)
        assert isinstance(got, KeyHashes)
        assert isinstance(engine._rules.info(rule).hashes, KeyHashes)
        graft = engine._rules.grafted_hashes(crossing, trans)
        assert graft is not None
        for row in (0, 1):
            for state in range(trans.shape[0]):
                ours, theirs = got[row, state], int(graft[row, state])
                assert ours_to_graft[row].setdefault(ours, theirs) == theirs, (names, state)
                assert graft_to_ours[row].setdefault(theirs, ours) == ours, (names, state)
        others = tuple(sorted({name[::-1] + "q" for name in automaton.keys}))
        assert engine._rules.key_hashes(others, crossing, trans) is None
    assert len(ours_to_graft[1]) > 300  # (prefix states of many kinds, not a few)
    name_id = compile_schema({"properties": {"id": {}, "name": {}}}, vocabulary).engine
    rule, automaton = key_lexeme(name_id)
    _, crossing, trans = name_id._rules.signature(rule)
    assert name_id._rules.key_hashes(("id", "name"), crossing, trans) is not None
    # Same layout and size, one letter apart; one state more; a name that is not plain.
    for names in [("ie", "name"), ("id", "nam"), ("id", "namf"), ("id", "na\\m")]:
        assert name_id._rules.key_hashes(names, crossing, trans) is None, names
    assert state_module._KEY_ESCAPES  # (the escape states' hashes, worked out once)


def test_key_trie_lays_out_the_sorted_prefixes_without_spelling_them():
    """``key_trie`` numbers the names' prefixes in sorted order (what
    ``extra_key_body`` lays out) from the sorted names alone, keeps no prefix strings
    (a 20 000-character name is refused by the state budget before any is built), and
    ``key_trie_size`` counts them without building it."""
    from jsonmode.decoding.automata.keys import key_trie, key_trie_size

    rng = random.Random(5)
    for _ in range(200):
        names = tuple(
            "".join(rng.choice("abc") for _ in range(rng.randint(0, 5)))
            for _ in range(rng.randint(0, 8))
        )
        prefixes = sorted({name[:i] for name in names for i in range(len(name) + 1)} | {""})
        trie = key_trie(names)
        assert trie.size == key_trie_size(names) == len(prefixes)
        assert [trie.prefix(state) for state in range(trie.size)] == prefixes
        index = {prefix: state for state, prefix in enumerate(prefixes)}
        for state in range(1, trie.size):
            prefix = prefixes[state]
            assert trie.parents[state - 1] == index[prefix[:-1]]
            assert trie.letters[state - 1] == ord(prefix[-1])
        assert sorted(trie.named.tolist()) == sorted({index[name] for name in names})
    with pytest.raises(BudgetExceededError):
        compile_schema({"properties": {"a" * 20_000: {}}})


def _as_stacks(numbering, pairs) -> set:
    """Numbered (context, state) pairs as the reference's stacks."""
    return {numbering.stack(context, state) for context, state in pairs}


def test_stack_numbering_steps_as_the_reference_and_is_replaced_when_full(monkeypatch):
    """Stacks are walked as numbered (context, state) pairs: a step of one stack
    reaches the stacks the reference's step reaches, a closure is the reference's,
    a return reads on in the closed lower frames; and a numbering that grows past its
    bound is replaced without changing any mask."""
    from jsonmode.decoding.engine import boundary as boundary_module
    from jsonmode.decoding.engine import cache as cache_module

    compiled = compile_schema(SCHEMA, synthetic_vocabulary())
    engine = compiled.engine
    reference = compiled.reference()
    numbering = boundary_module.Stacks(reference)
    state = reference.initial()
    checked = 0
    for byte in b'{"name":"z","n":7,"tags":["a","bc"],"sub":{"x":1.5}}':
        for stack in state:
            if not stack:
                continue
            context = numbering.context(stack[:-1], stack[-1][0])
            pairs = numbering.step(context, stack[-1][1], byte)
            assert _as_stacks(numbering, pairs) == set(reference.step((stack,), byte))
            assert (
                numbering.reads(context, stack[-1][1])
                == np.flatnonzero(reference.allowed_bytes((stack,))).tolist()
            )
            assert _as_stacks(numbering, numbering.returns(context)) == set(
                reference.close([stack[:-1]]) if stack[:-1] else ()
            ) - {()}
            checked += 1
        state = reference.step(state, byte)
        assert state
    assert reference.can_end(state)
    assert checked > 40
    assert numbering.size > 10

    monkeypatch.setattr(cache_module, "_STACKS", 6)
    numberings = set()
    rng = random.Random(11)
    for _ in range(6):
        for matcher, mask in random_walk(compiled, rng):
            numberings.add(id(engine._stacks))
            assert np.array_equal(mask, reference_mask(compiled, matcher.state))
    assert len(numberings) > 2


def test_stack_closures_keep_the_nesting_limit():
    """Closures computed on numbered stacks enter calls only within the nesting
    limit, as the reference does: at the limit, masks allow no deeper value."""
    schema = {
        "type": "object",
        "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}},
    }
    compiled = compile_schema(schema, synthetic_vocabulary(), max_nesting_depth=5)
    deepest = 0
    rng = random.Random(4)
    for _ in range(30):
        for matcher, mask in random_walk(compiled, rng, steps=80):
            deepest = max(deepest, *(len(stack) for stack in matcher.state))
            assert np.array_equal(mask, reference_mask(compiled, matcher.state))
    assert deepest == 5


def test_one_engine_gives_threads_the_masks_of_one_thread(monkeypatch):
    """Matchers of one engine on several threads at once (stack numbering replaced
    often, the interpreter switching threads every few bytecodes) see exactly the
    masks a single thread sees."""
    import sys
    import threading

    from jsonmode.decoding import matcher as matcher_module
    from jsonmode.decoding.engine import cache as cache_module

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    compiled = compile_schema(SCHEMA, vocabulary)
    rng = random.Random(5)
    walks: list[tuple[list[int], list[np.ndarray]]] = []
    for _ in range(6):
        matcher, tokens, masks = compiled.matcher(), [], []
        while len(tokens) < 25 and not matcher.is_finished():
            masks.append(matcher.mask())
            tokens.append(int(rng.choice(np.flatnonzero(masks[-1]))))
            assert matcher.advance(tokens[-1])
        walks.append((tokens, masks))

    monkeypatch.setattr(cache_module, "_STACKS", 40)
    engine = matcher_module.MaskEngine(compiled.network, vocabulary)  # fresh: no masks yet
    failures: list[str] = []

    def replay(order: list[int]) -> None:
        for index in order:
            tokens, masks = walks[index]
            matcher = matcher_module.Matcher(engine)
            for step, (token, expected) in enumerate(zip(tokens, masks, strict=True)):
                if not np.array_equal(matcher.mask(), expected):
                    failures.append(f"walk {index} step {step}")
                    return
                matcher.advance(token)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [
            threading.Thread(target=replay, args=(rng.sample(range(len(walks)), len(walks)),))
            for _ in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert not failures
    assert engine.misses > 0


def _rests_as_dict(rests) -> dict[bytes, list[int]]:
    """A rests trie as {rest: its tokens' positions}."""
    found: dict[bytes, list[int]] = {}
    work = [(0, b"")]
    while work:
        node, prefix = work.pop()
        if rests.ends[node]:
            found[prefix] = sorted(rests.ends[node])
        work.extend((kid, prefix + bytes([rests.byte[kid]])) for kid in rests.kids[node])
    return found


def test_memoised_rests_equal_fresh_ones():
    """A boundary group's rests (the tokens whose rest starts with a readable byte, by
    their bytes from the boundary on) come from a memo keyed by the group's content:
    an equal group (another object) with the same bytes gets the same rests, other
    bytes or another group (here: one token fewer per entry, the same columns) other
    rests, each what the tokens say."""
    from jsonmode.decoding.engine import boundary as boundary_module
    from jsonmode.decoding.engine.entries import Following

    vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")
    engine = compile_schema({"type": "object"}, vocabulary).engine
    splits = [
        split
        for rule in range(len(engine.network.rules))
        for state in range(engine.network.rules[rule].n_states)
        for _, split in engine.walk(rule, state).groups
    ]
    assert splits
    readables = [np.zeros(256, dtype=np.bool_) for _ in range(3)]
    readables[0][list(b",}] \n")] = True
    readables[1][list(b'"')] = True
    readables[2][:] = True
    boundary_module._rests.clear()
    index = engine._index
    for split in splits[:40]:
        copy = Following(*(a.copy() for a in split.pack()))
        fewer = Following(split.byte, split.lo + 1, np.maximum(split.hi, split.lo + 1), split.col)
        for readable in readables:
            for group in (split, copy, fewer, split, fewer):
                expected: dict[bytes, list[int]] = {}
                for byte, lo, hi, col in zip(*(a.tolist() for a in group.pack()), strict=True):
                    for position in range(lo, hi) if readable[byte] else ():
                        rest = bytes(index.matrix[position, col : index.lengths[position]])
                        expected.setdefault(rest, []).append(position)
                assert (
                    _rests_as_dict(
                        boundary_module.group_rests(
                            engine._index, boundary_module.readable_part(group, readable)
                        )
                    )
                    == expected
                )
    assert len(boundary_module._rests) > 0


def test_read_lists_equal_a_scan_of_each_row(monkeypatch):
    """The bytes a state reads, from packed bits (few bytes), a NumPy scan (many) or
    the process-wide row memo, small and big automata alike, equal a scan of the row;
    one automaton's read lists and crossing flags are shared by every engine."""
    from jsonmode.decoding.engine import facts as facts_module

    rng = np.random.default_rng(7)
    for states in (5, facts_module._PACKED_STATES + 3):
        trans = np.full((states, 256), -1, dtype=np.int32)
        for state in range(states):
            count = int(rng.choice([0, 1, 2, facts_module._FEW_READS, 25, 200, 256]))
            trans[state, rng.choice(256, size=count, replace=False)] = state
        expected = [np.flatnonzero(row >= 0).tolist() for row in trans]
        for _ in range(2):  # (the second pass meets the row memo)
            lists = facts_module.ReadLists(trans)
            assert [lists[state] for state in range(states)] == expected
    monkeypatch.setattr(facts_module, "_ROWS_KEPT", 2)
    monkeypatch.setattr(facts_module, "_row_reads", {})
    lists = facts_module.ReadLists(trans)
    assert [lists[state] for state in range(states)] == expected
    assert len(facts_module._row_reads) <= 2

    vocabulary = synthetic_vocabulary()
    pattern = {"type": "string", "pattern": "^[a-c]+x?$"}
    engines = [
        compile_schema(schema, vocabulary).engine
        for schema in ({"type": "object", "properties": {"p": pattern}}, {"items": pattern})
    ]
    facts = []
    for engine in engines:
        (index,) = [i for i, rule in enumerate(engine.network.rules) if "pattern" in rule.name]
        automaton = engine.network.rules[index]
        facts.append(engine._stacks._rule_facts(index))
        expected_crossing = automaton.accepting | np.array([bool(c) for c in automaton.calls])
        assert np.array_equal(facts[-1].crossing, expected_crossing)
        assert facts[-1].flags == expected_crossing.astype(np.uint8).tobytes()
    assert facts[0] is facts[1]


def test_the_decoders_identity_memos_hold_no_value_that_keeps_its_key_alive():
    """A memo value that refers to its own key (a lexeme's table) would keep both
    alive for good: the process-wide memos of the mask engine never hold one."""
    import numpy as np

    from jsonmode.decoding import reference
    from jsonmode.decoding.automata import keys
    from jsonmode.decoding.automata import network as automaton
    from jsonmode.decoding.engine import rules

    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "^[a-f]+$"}, "b": {"enum": [1, 2]}},
    }
    compiled = compile_schema(schema, synthetic_vocabulary())
    matcher = compiled.matcher()
    matcher.mask()
    for rule in range(len(compiled.network.rules)):  # (a first mask may walk no rule)
        compiled.engine._rules.info(rule)
    memos = [rules._lexeme_contents, rules._table_numbers, reference._reads_of]
    memos += [keys._BUILT, automaton._KEY_RULES]  # (the key tables built from names)
    assert all(len(memo) for memo in memos), [len(memo) for memo in memos]
    for memo in memos:
        for ref, value in memo._items.values():
            owner = ref()
            parts = value if isinstance(value, tuple) else (value,)
            for part in parts:
                assert part is not owner
                assert not (isinstance(part, np.ndarray) and part.base is owner)


def test_a_dropped_engine_is_freed_at_once_not_left_to_the_cyclic_collector():
    """An engine and its reference matcher hold no reference cycle: dropping the last
    reference frees them (and the network's tables they hold) at once, where a cycle
    kept them until the cyclic collector came round."""
    import gc
    import weakref

    from jsonmode.decoding.engine.cache import MaskEngine
    from jsonmode.decoding.reference import ReferenceMatcher

    compiled = compile_schema(SCHEMA, synthetic_vocabulary())
    paused = gc.isenabled()
    gc.disable()
    try:
        reference = ReferenceMatcher(compiled.network)
        assert reference.accepts(b'{"name":"ab","n":3}')
        engine = MaskEngine(compiled.network, compiled.vocabulary)
        assert engine.mask(engine.reference.initial()).any()
        gone = [weakref.ref(reference), weakref.ref(engine), weakref.ref(engine.reference)]
        del reference, engine
        assert [ref() is None for ref in gone] == [True, True, True]
    finally:
        if paused:
            gc.enable()


_AMBIGUOUS = {
    "anyOf": [
        {"type": "array", "items": {"$ref": "#"}},
        {"type": "array", "items": {"$ref": "#"}, "maxItems": 5},
    ]
}


def test_an_ambiguous_schema_nested_deep_is_refused_not_doubled_per_level():
    # Each "[" doubled the stacks (both branches nest into both again): step 19 took
    # 51 s and 2 GB before the bound.
    out = run_python(
        textwrap.dedent(
            """
            import json, sys, jsonmode
            from jsonmode.decoding.reference import MAX_STACKS
            compiled = jsonmode.compile_schema(json.loads(sys.argv[1]))
            try:
                compiled.accepts("[" * 40 + "]" * 40)
            except jsonmode.BudgetExceededError as error:
                print(error.budget, error.limit == MAX_STACKS)
            print(compiled.accepts("[" * 5 + "]" * 5))
            """
        ),
        60,
        json.dumps(_AMBIGUOUS),
    )
    assert out.splitlines() == ["parse stacks per state True", "True"]


def test_a_matcher_refuses_the_step_past_the_stack_budget_and_keeps_its_state():
    vocab = Vocabulary.from_tokenizer(TOKENIZERS / "gpt2" / "tokenizer.json")
    matcher = compile_schema(_AMBIGUOUS, vocab).matcher()
    bracket = next(t for t in range(vocab.size) if vocab.token_bytes(t) == b"[")

    def nest() -> None:
        for _ in range(40):
            assert matcher.advance(bracket)

    with pytest.raises(BudgetExceededError, match="matching the text exceeds") as caught:
        nest()
    assert caught.value.budget == "parse stacks per state"
    assert matcher.mask()[bracket]  # the state before the refused step
    matcher.rollback(3)
    assert matcher.advance(bracket)
