"""Walks of counting states split by runs of a byte class (engine/runs.py): a language
tag's letters, a code's digits. Each such walk must equal the plain trie walk of its
state, and the masks built on them the masks built without them."""

import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.walks import walk_sets

from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.engine import runs as runs_module
from jsonmode.decoding.engine import segments as segments_module
from jsonmode.decoding.engine import walk as walk_module
from jsonmode.decoding.grammars.compiled import compile_grammar
from jsonmode.decoding.vocabulary import Vocabulary

TOKENIZERS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"

# MaskBench's Github_trivial o88608: an xAPI language map, its keys language tags.
TAG = (
    "^(([a-zA-Z]{2,8}(-[a-zA-Z]{3}(-[a-zA-Z]{3}){0,2})?(-[a-zA-Z]{4})?(-([a-zA-Z]{2}|[0-9]{3}))?"
    "(-[a-zA-Z0-9]{4,8})*(-([0-9]|[a-w]|[y-z]|[A-W]|[Y-Z])-[0-9a-zA-Z]{2,8})*"
    "(-x(-[a-zA-Z0-9]{1,8})+)?)|x(-[a-zA-Z0-9]{1,8})+|en-GB-oed|i-ami|i-bnn|i-default|"
    "i-enochian|i-hak|i-klingon|i-lux|i-mingo|i-navajo|i-pwn|i-tao|i-tay|i-tsu|sgn-BE-FR|"
    "sgn-BE-NL|sgn-CH-DE)$"
)
LANGUAGE_MAP = {
    "additionalProperties": False,
    "minProperties": 1,
    "patternProperties": {TAG: {"minLength": 1, "type": "string"}},
    "type": "object",
}


@pytest.fixture(scope="module")
def qwen():
    return Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5")


def _compare_states(engine):
    """Every state of every rule: a run walk, where one applies, against the plain
    walk assembled from segments. Returns how many states took a run walk."""
    walks, size = engine._walks, engine.vocabulary.size
    taken = 0
    for rule in range(len(engine.network.rules)):
        info = engine._rules.info(rule)
        for state in range(info.crossing.size):
            found = walks._run_walk(info, state)
            if found is None:
                continue
            taken += 1
            plain = walks._compute_walk(info, state)
            assert walk_sets(found, size) == walk_sets(plain, size), (rule, state)
            # (The same entries, in the same order: groups are cut from them.)
            for ours, theirs in zip(found.bounds.pack(), plain.bounds.pack(), strict=True):
                assert np.array_equal(ours, theirs), (rule, state)
    return taken


def test_language_tag_states_are_walked_by_runs_and_equal_plain_walks(qwen):
    """The language-tag key's counting states (after 2 to 8 letters, after ``-`` and a
    few letters, the tag's start) take the run walk, and each equals the plain walk."""
    engine = compile_schema(LANGUAGE_MAP, qwen).engine
    assert _compare_states(engine) >= 20


def _masks(compiled, tokenizer_ids):
    matcher = compiled.matcher()
    masks = []
    for token in tokenizer_ids:
        masks.append(np.asarray(matcher.mask()).copy())
        if not matcher.advance(token):
            break
    return masks


def _clear_caches():
    walk_module.walk_cache.clear()
    walk_module.local_walk_cache.clear()
    segments_module.segment_cache.clear()


def test_masks_with_run_walks_equal_masks_without(qwen, monkeypatch):
    """A language map's masks, first walks included, are the same with run walks as
    with plain walks; and the run walk is what the counting states took."""
    text = '{"en-US":"Hello","fr-FR":"Bonjour","zh-Hant-TW":"x","sgn-BE-FR":"y"}'
    ids = _greedy(qwen, text.encode())
    calls = []
    real = walk_module.run_walk

    def counted(*args):
        found = real(*args)
        calls.append(found is not None)
        return found

    _clear_caches()
    monkeypatch.setattr(walk_module, "run_walk", counted)
    with_runs = _masks(compile_schema(LANGUAGE_MAP, qwen), ids)
    assert sum(calls) >= 4
    _clear_caches()
    monkeypatch.setattr(walk_module, "run_walk", lambda *args: None)
    without = _masks(compile_schema(LANGUAGE_MAP, qwen), ids)
    _clear_caches()
    assert len(with_runs) == len(without) == len(ids)
    for ours, theirs in zip(with_runs, without, strict=True):
        assert np.array_equal(ours, theirs)


def _greedy(vocabulary, data):
    """Token ids spelling ``data``, longest token first at each point."""
    by_bytes = {}
    for token in range(vocabulary.size):
        spelled = vocabulary.token_bytes(token)
        if spelled and vocabulary.allowed_base[token]:
            by_bytes.setdefault(spelled, token)
    ids, at = [], 0
    while at < len(data):
        for end in range(min(len(data), at + 16), at, -1):
            if data[at:end] in by_bytes:
                ids.append(by_bytes[data[at:end]])
                at = end
                break
        else:
            raise AssertionError(data[at:])
    return ids


@pytest.mark.parametrize("as_key", [False, True])
def test_a_counted_pattern_is_walked_by_runs(qwen, as_key):
    """``^[a-z]{2,8}(-[A-Z]{2})?$``: its letter-counting states take run walks (ten of
    them), each equal to the plain walk."""
    pattern = "^[a-z]{2,8}(-[A-Z]{2})?$"
    if as_key:
        schema = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}}
    else:
        schema = {"type": "string", "pattern": pattern}
    assert _compare_states(compile_schema(schema, qwen).engine) >= 8


CLASSES = ["[a-z]", "[A-Z]", "[a-zA-Z]", "[0-9]", "[a-zA-Z0-9]", "[a-fA-F0-9]", "[a-wyz]"]


@st.composite
def counted_patterns(draw):
    """Count-bounded patterns such as ``^[a-z]{2,8}(-[A-Z]{2})?$``."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        cls = draw(st.sampled_from(CLASSES))
        low = draw(st.integers(0, 5))
        high = low + draw(st.integers(0, 6))
        part = f"{cls}{{{low},{high}}}"
        if parts:
            part = f"({draw(st.sampled_from(['-', '_', '.', '']))}{part})"
            part += draw(st.sampled_from(["", "?", "*"]))
        parts.append(part)
    return "^" + "".join(parts) + "$"


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pattern=counted_patterns(), as_key=st.booleans())
def test_run_walks_of_counted_patterns_equal_plain_walks(qwen, pattern, as_key):
    """Hypothesis: for count-bounded patterns, as a string's pattern or as the pattern
    of an object's keys, every state that takes a run walk walks as the plain walk."""
    if as_key:
        schema = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}}
        schema["additionalProperties"] = False
    else:
        schema = {"type": "string", "pattern": pattern}
    _compare_states(compile_schema(schema, qwen).engine)


# Classes of a digit, of a string's printable ASCII but the quote and the backslash
# (runs up to ~128 bytes deep: the levels of few prefixes go by plain Python), of SQL's
# [^'\n] and of hex digits.
_ASCII = bytes(b for b in range(0x20, 0x80) if b not in b'"\\')
RUN_CLASSES = [
    b"0123456789",
    _ASCII,
    bytes(b for b in range(0x80) if b not in b"'\n"),
    b"0123456789abcdefABCDEF",
]


@pytest.mark.parametrize("text", RUN_CLASSES, ids=["digits", "ascii", "sql", "hex"])
def test_runs_of_a_class_list_every_token(qwen, text):
    """The per-class table: the tokens made of the class only are exactly those whose
    bytes are all in it, with their lengths; the listed nodes end a run in a byte out
    of the class, and their first bytes are listed with them."""
    engine = compile_schema({"type": "string"}, qwen).engine
    index = engine._walks._index
    members = np.zeros(256, dtype=np.bool_)
    members[list(text)] = True
    runs_module._runs_cache.clear()
    runs = runs_module._runs(index, members)
    expected: dict[int, int] = {}
    for position in range(index.lengths.size):
        token = bytes(index.matrix[position, : index.lengths[position]])
        if token and all(members[byte] for byte in token):
            expected[int(index.ids[position])] = len(token)
    listed = {}
    for length in range(runs.cuts.size - 1):
        for token in runs.whole[runs.cuts[length] : runs.cuts[length + 1]].tolist():
            listed[token] = length
    assert listed == expected
    trie = index.trie
    for depth, nodes in enumerate(runs.nodes):
        for node, byte in zip(nodes.tolist(), runs.bytes_[depth].tolist(), strict=True):
            position = int(trie.levels[depth].lo[node])
            token = bytes(index.matrix[position, : depth + 1])
            assert token[-1] == byte
            assert not members[byte]
            assert all(members[b] for b in token[:-1])
        assert runs.firsts[depth].tolist() == [
            int(index.matrix[int(trie.levels[depth].lo[node]), 0]) for node in nodes.tolist()
        ]


@pytest.mark.parametrize("text", RUN_CLASSES, ids=["digits", "ascii", "sql", "hex"])
def test_runs_by_plain_python_where_few_prefixes_are_left_equal_those_by_arrays(
    qwen, monkeypatch, text
):
    """The levels of few prefixes in the class (plain Python) give the tables the
    vectorised levels give, array for array."""
    index = compile_schema({"type": "string"}, qwen).engine._walks._index
    members = np.zeros(256, dtype=np.bool_)
    members[list(text)] = True
    runs_module._runs_cache.clear()
    ours = runs_module._runs(index, members)
    runs_module._runs_cache.clear()
    with monkeypatch.context() as patch:
        patch.setattr(runs_module, "_FEW_NODES", -1)
        theirs = runs_module._runs(index, members)
    runs_module._runs_cache.clear()
    for name in ("whole", "whole_first", "cuts"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a.dtype == b.dtype, name
        assert np.array_equal(a, b), name
    for name in ("nodes", "bytes_", "firsts"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert len(a) == len(b), name
        for depth, (x, y) in enumerate(zip(a, b, strict=True)):
            assert x.dtype == y.dtype, (name, depth)
            assert np.array_equal(x, y), (name, depth)


def test_a_state_that_reads_few_of_a_wide_class_is_not_walked_by_runs(qwen, monkeypatch):
    """In a tool call's ``char{0,30}``, after ``\\u12a`` the state reads one hex digit,
    and then the string's characters: the class the chain counts (printable ASCII) is
    over twice the bytes the state reads, so its table (~10 ms) is not made; the plain
    walk is the same walk. With the guard off the run walk applies, and equals it."""
    grammar = (
        'root ::= "\\"" char{0,30} "\\""\n'
        'char ::= [^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})'
    )
    compiled = compile_grammar(grammar, qwen)
    engine = compiled.engine
    walks, size = engine._walks, engine.vocabulary.size
    (rule,) = [k for k, r in enumerate(engine.network.rules) if r.lengths is not None]
    info = engine._rules.info(rule)
    state = 0
    for byte in b'"\\u12a':
        state = int(engine.network.rules[rule].trans[state, byte])
    assert state >= 0
    assert walks._run_walk(info, state) is None
    with monkeypatch.context() as patch:
        patch.setattr(runs_module, "_WIDER", 1000)
        found = walks._run_walk(info, state)
    assert found is not None
    assert walk_sets(found, size) == walk_sets(walks._compute_walk(info, state), size)
