"""The parse stacks' numbering and closures in C (``jsonmode._native.Stacks``, issue 43)
against the pure-Python :class:`~jsonmode.decoding.engine.boundary.Stacks`: the same
contexts numbered in the same order, the same closures in the same order, the same
``readers``, ``returns``, frames, tables, near flags and size, driven the same way over
MaskBench schemas (along their valid instances), the GBNF grammars of the grammar
benchmark and of the nesting tests (by levels and by frames, near a small nesting bound
and far from it) and Hypothesis-drawn texts; the nesting bound kept; malformed calls
refused with a Python exception, never a crash (tests/support/native_hostile.py runs
them under the sanitizers too).
"""

from __future__ import annotations

import importlib
import json
import random
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.native_digest import maskbench
from support.native_stacks import (
    ARITHMETIC,
    NESTED,
    drive,
    hostile_stacks_calls,
    raw_stacks,
    stacks_pair,
)

from jsonmode.budget import deadline
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.grammars.compiled import compile_grammar
from jsonmode.decoding.reference import ReferenceMatcher
from jsonmode.errors import BudgetExceededError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from grammars import GRAMMARS

# The built extension itself, whichever path this process runs (a missing build fails
# here, by design: CI must build it).
KERNELS: ModuleType = importlib.import_module("jsonmode._native")
TREE = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "kids": {"type": "array", "items": {"$ref": "#"}},
        "meta": {"anyOf": [{"$ref": "#"}, {"type": "integer"}]},
    },
    "required": ["name"],
}


def _same(reference: ReferenceMatcher, texts: list[bytes], explore: int = 300) -> Any:
    """Both numberings driven alike over ``reference``: equal logs (returned)."""
    pure, compiled = stacks_pair(reference, KERNELS)
    expected = drive(pure, reference, texts, explore)
    got = drive(compiled, reference, texts, explore)
    assert got == expected
    return expected


def test_maskbench_schemas_number_and_close_alike() -> None:
    near = 0
    for _, schema, instances in maskbench(60):
        try:
            compiled = compile_schema(schema)
        except Exception:  # (a schema the compiler refuses: nothing to number)
            continue
        texts = [json.dumps(instance).encode() for instance in instances[:3]]
        log = _same(compiled.reference(), texts)
        near += log[-1]["near"]
    assert near == 0  # (these nest far less than the default bound)


@pytest.mark.parametrize("depth", [2, 3, 5, 64])
def test_a_recursive_schema_near_its_nesting_bound(depth: int) -> None:
    compiled = compile_schema(TREE, max_nesting_depth=depth)
    nested: Any = {"name": "x"}
    for level in range(8):
        nested = {"name": str(level), "kids": [nested, {"name": "y"}], "meta": nested}
    texts = [json.dumps(nested).encode(), b'{"name":"a","meta":{"name":"b","meta":7}}']
    log = _same(compiled.reference(), texts, explore=600)
    if depth <= 5:
        assert log[-1]["near"] > 0, "no context near the bound: the bounded tables untested"
    assert log[-1]["deepest"] <= depth  # (by frames: every frame counts one)


@pytest.mark.parametrize("levels", [True, False])
@pytest.mark.parametrize("depth", [1, 2, 3, 8, 256])
@pytest.mark.parametrize("grammar", [ARITHMETIC, NESTED], ids=["arithmetic", "nested"])
def test_recursive_grammars_by_levels_and_by_frames(grammar: str, depth: int, levels: bool) -> None:
    compiled = compile_grammar(grammar, max_nesting_depth=depth)
    rng = random.Random(depth)
    alphabet = b"0(()+-*" if grammar is ARITHMETIC else b"[[]]{{}},k:1"
    texts = [bytes(rng.choice(alphabet) for _ in range(24)) for _ in range(30)]
    texts += [b"((((((((1))))))))", b"[[[[[[[[1]]]]]]]]", b"{k:[{k:[1,2]}]}"]
    reference = ReferenceMatcher(compiled.network, max_depth=depth, levels=levels)
    log = _same(reference, texts, explore=400)
    if depth <= 8 and (levels or depth == 8):  # (by frames, a bound under 8 leaves little)
        assert log[-1]["near"] > 0, "no context near the bound: the bounded tables untested"
    if not levels:
        assert log[-1]["deepest"] <= depth  # (every frame counts one)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_the_benchmark_grammars_number_and_close_alike(name: str) -> None:
    spec = GRAMMARS[name]
    compiled = compile_grammar(spec.gbnf)
    texts = [text.encode() for text in spec.texts(random.Random(1))[:3]]
    _same(compiled.reference(), texts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    grammar=st.sampled_from([ARITHMETIC, NESTED]),
    depth=st.integers(1, 6),
    levels=st.booleans(),
    texts=st.lists(st.binary(min_size=1, max_size=30), min_size=1, max_size=4),
    symbols=st.randoms(use_true_random=False),
)
def test_drawn_texts_and_bounds(
    grammar: str, depth: int, levels: bool, texts: list[bytes], symbols: random.Random
) -> None:
    alphabet = b"0(()+-*" if grammar is ARITHMETIC else b"[[]]{{}},k:1"
    # (Drawn bytes mapped onto the grammar's alphabet: most texts then go deep.)
    texts = [bytes(alphabet[b % len(alphabet)] for b in text) for text in texts]
    compiled = compile_grammar(grammar, max_nesting_depth=depth)
    reference = ReferenceMatcher(compiled.network, max_depth=depth, levels=levels)
    _same(reference, texts, explore=symbols.randint(0, 200))


def test_the_engine_walks_with_the_compiled_numbering_and_masks_agree() -> None:
    """One engine per path over the recursive schema near its nesting bound, walked
    along a text's tokens: the compiled engine's numbering is the C one (handed to the
    C walks as ``expand``), and every mask and verdict is the pure-Python engine's."""
    from support.native_digest import QWEN, Digest, walk
    from support.native_regex import running as kernels_in_use
    from tokenizers import Tokenizer

    from jsonmode.decoding.engine import MaskEngine
    from jsonmode.decoding.matcher import Matcher
    from jsonmode.decoding.vocabulary import Vocabulary

    vocabulary = Vocabulary.from_tokenizer(QWEN)
    tokenizer = Tokenizer.from_file(str(QWEN / "tokenizer.json"))
    compiled = compile_schema(TREE, vocabulary, max_nesting_depth=4)
    nested = {"name": "a", "kids": [{"name": "b", "meta": {"name": "c", "meta": 1}}]}
    ids = tokenizer.encode(json.dumps(nested)).ids
    digests = []
    for kernels in (None, KERNELS):
        with kernels_in_use(kernels):
            engine = MaskEngine(compiled.network, vocabulary, max_depth=4, levels=False)
            assert (engine._stacks._core is not None) is (kernels is not None)
            digest = Digest()
            walk(
                SimpleNamespace(matcher=lambda e=engine: Matcher(e), vocabulary=vocabulary),
                ids,
                digest,
            )
            digests.append(digest.hexdigest())
    assert digests[0] == digests[1]


def test_a_deadline_stops_a_long_closure() -> None:
    """The closure's loop checks the compile deadline (jsonmode.budget.checkpoint,
    every 64 stacks): past it, expand raises the compile's BudgetExceededError, and
    the numbering stays sound: the closure asked again is a fresh numbering's."""
    stacks = raw_stacks(KERNELS, rules=200)
    root = stacks.context((), 0)
    with deadline(1e-9, doing="a test"):
        time.sleep(1e-3)
        with pytest.raises(BudgetExceededError):
            stacks.expand(root, 0)
    fresh = raw_stacks(KERNELS, rules=200)
    expected = fresh.expand(fresh.context((), 0), 0)
    assert len(expected) == 1  # (the last rule's first state: 201 stacks on the way)
    assert stacks.expand(root, 0) == expected
    assert stacks.size == fresh.size


def test_malformed_calls_to_the_compiled_stacks_raise() -> None:
    from support.native_hostile import unrefused

    calls = hostile_stacks_calls(KERNELS)
    may_return = {label for label, _, returns in calls if returns}
    assert unrefused([(label, call) for label, call, _ in calls], may_return) == []
