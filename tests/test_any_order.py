"""``property_order="any"`` for objects of any size: the set of members written is
carried in the parse stack (``jsonmode.decoding.automata.families``), so any order works with
``required`` enforced and no member written twice, without 2**n states."""

from __future__ import annotations

import itertools
import json
import pathlib
import random

import numpy as np
import pytest
from support.reference_masks import reference_mask

from jsonmode.decoding.automata.families import LATTICE_MEMBERS, RuleTable
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.vocabulary import Vocabulary

TOKENIZERS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "tokenizers"
NAMES = [f"p{i}" for i in range(30)]
REQUIRED = NAMES[::3]
WIDE = {
    "type": "object",
    "properties": {
        name: {"type": "integer"} if i % 2 else {"type": "string", "maxLength": 3}
        for i, name in enumerate(NAMES)
    },
    "required": REQUIRED,
    "additionalProperties": False,
}


def _value(name: str) -> object:
    return 7 if NAMES.index(name) % 2 else "ab"


def _text(names: list[str], **extra: object) -> bytes:
    document = {name: _value(name) for name in names} | extra
    return json.dumps(document, separators=(",", ":")).encode()


def test_a_30_property_object_compiles_without_the_lattice() -> None:
    compiled = compile_schema(WIDE, property_order="any")
    assert isinstance(compiled.network.rules, RuleTable)
    assert compiled.network.n_states < 2_000  # (2**30 sets are never written out)
    assert "any order" in str(compiled.grammar)


@pytest.mark.parametrize("seed", range(8))
def test_any_order_accepts_every_order_with_the_required_members(seed: int) -> None:
    rng = random.Random(seed)
    reference = compile_schema(WIDE, property_order="any").reference()
    optional = [name for name in NAMES if name not in REQUIRED]
    names = REQUIRED + rng.sample(optional, rng.randint(0, len(optional)))
    rng.shuffle(names)
    assert reference.accepts(_text(names))
    dropped = rng.choice(REQUIRED)
    missing = [name for name in names if name != dropped]
    assert not reference.accepts(_text(missing))
    twice = _text(names)[:-1] + b',"' + rng.choice(names).encode() + b'":7}'
    assert not reference.accepts(twice)
    assert not reference.accepts(_text(names, unknown=1))


def test_extra_keys_and_nesting_in_any_order() -> None:
    inner = {
        "type": "object",
        "properties": {f"k{i}": {"type": "integer"} for i in range(12)},
        "required": ["k11"],
        "additionalProperties": {"type": "boolean"},
    }
    schema = {"type": "array", "items": inner, "maxItems": 3}
    reference = compile_schema(schema, property_order="any").reference()
    assert reference.accepts(b'[{"k11":1,"x":true,"k3":2,"y":false},{"k11":0}]')
    assert not reference.accepts(b'[{"k11":1,"x":1}]')  # (an extra key's value is a boolean)
    assert not reference.accepts(b'[{"k3":1}]')  # (k11 is required)
    assert not reference.accepts(b'[{"k11":1,"k11":2}]')


def test_recursion_through_an_any_order_object() -> None:
    node = {
        "type": "object",
        "properties": {f"f{i}": {"type": "integer"} for i in range(10)} | {"child": {"$ref": "#"}},
        "required": ["f0"],
        "additionalProperties": False,
    }
    reference = compile_schema(node, property_order="any").reference()
    deep = b'{"child":{"f3":1,"child":{"f0":2},"f0":1},"f0":0}'
    assert reference.accepts(deep)
    assert not reference.accepts(b'{"child":{"f3":1},"f0":0}')


def test_few_members_keep_the_written_out_lattice() -> None:
    schema = {
        "type": "object",
        "properties": {f"a{i}": {"type": "integer"} for i in range(LATTICE_MEMBERS)},
    }
    compiled = compile_schema(schema, property_order="any")
    assert all(rule is not None for rule in compiled.network.rules)
    assert compiled.accepts('{"a7":1,"a0":2}')


def _vocabulary() -> Vocabulary:
    """Single bytes plus pieces that cross member boundaries (as real tokenizers'
    ``","`` and ``":"`` do), so masks are decided across the family's calls."""
    pieces = [bytes([b]) for b in range(32, 127)]
    pieces += [b'":', b'","', b',"', b'"}', b"7,", b"7}", b'{"', b'"ab"', b'"ab",', b"p1"]
    pieces += [f'"{name}":'.encode() for name in NAMES[:12]]
    pieces += [f',"{name}"'.encode() for name in NAMES[10:20]]
    return Vocabulary.from_token_bytes([*pieces, b""], eos_ids=[len(pieces)])


@pytest.mark.parametrize("seed", range(4))
def test_masks_equal_the_reference_along_random_walks(seed: int) -> None:
    """Any token the mask allows keeps the document alive, and no other (the fast
    engine against the byte-level reference), until the walk ends the document:
    every document written has the required members, each member once."""
    vocabulary = _vocabulary()
    compiled = compile_schema(WIDE, vocabulary, property_order="any")
    rng = random.Random(seed)
    matcher = compiled.matcher()
    written: list[bytes] = []
    for _ in range(400):
        mask = matcher.mask()
        assert np.array_equal(mask, reference_mask(compiled, matcher.state))
        token = int(rng.choice(np.flatnonzero(mask).tolist()))
        if token in vocabulary.eos_ids:
            break
        assert matcher.advance(token)
        written.append(vocabulary.token_bytes(token))
    text = b"".join(written)
    if matcher.can_end():
        document = json.loads(text)
        assert set(REQUIRED) <= set(document)
        keys = [key for key, _ in json.loads(text, object_pairs_hook=lambda pairs: pairs)]
        assert len(keys) == len(set(keys))


def test_a_real_tokenizer_walks_a_shuffled_document() -> None:
    from tokenizers import Tokenizer

    path = TOKENIZERS / "qwen2.5"
    vocabulary = Vocabulary.from_tokenizer(path)
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    compiled = compile_schema(WIDE, vocabulary, property_order="any")
    for seed in range(3):
        names = list(NAMES)
        random.Random(seed).shuffle(names)
        matcher = compiled.matcher()
        for token in tokenizer.encode(_text(names).decode(), add_special_tokens=False).ids:
            assert matcher.mask()[token]
            assert matcher.advance(token)
        assert matcher.can_end()


def test_every_order_of_a_few_members_through_the_family() -> None:
    """Nine members (one past the lattice): every order of four of them, each alone
    complete or not as ``required`` says."""
    schema = {
        "type": "object",
        "properties": {f"m{i}": {"const": i} for i in range(LATTICE_MEMBERS + 1)},
        "required": ["m0", "m1"],
        "additionalProperties": False,
    }
    reference = compile_schema(schema, property_order="any").reference()
    for names in itertools.permutations(["m0", "m1", "m5", "m8"], 4):
        text = json.dumps({n: int(n[1:]) for n in names}, separators=(",", ":")).encode()
        assert reference.accepts(text)
        without = json.dumps({n: int(n[1:]) for n in names if n != "m1"}, separators=(",", ":"))
        assert not reference.accepts(without.encode())
