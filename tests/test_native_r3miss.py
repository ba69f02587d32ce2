"""The compiled mask-cache miss (issue 43, round 3): ``jsonmode._native.MissAssembler``
(csrc/r3miss_assemble.c) assembles a state's mask in C, the Python ``MaskEngine._assemble``
staying the reference and the fallback.

- MaskBench: along each sampled schema's valid instances, every state's mask from a
  compiled engine equals the pure-Python engine's, as bits and as bools; and on the
  compiled engine, the C assembly equals its own Python orchestration (``_assemble``
  over the same numbering).
- Seeded random token walks over synthetic vocabularies (support/native_miss.py, also a
  PAIRS entry of the sanitizer run): both paths give the same masks at every step.
- Malformed calls to the C entry points raise typed errors, never crash.
- The per-engine memo of walks stays within its budget (0: nothing kept, same masks).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from jsonmode import native
from jsonmode.decoding.engine import MaskEngine
from jsonmode.decoding.engine import cache as cache_module

KERNELS = native.KERNELS
pytestmark = pytest.mark.skipif(KERNELS is None, reason="the compiled core is not loaded")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support.native_fuzz import PAIRS, differ  # noqa: E402
from support.native_hostile import hostile_calls, unrefused  # noqa: E402
from support.native_miss import (  # noqa: E402
    hostile_miss_calls,
    make_miss,
    miss_compiled,
    miss_python,
)
from support.native_regex import running  # noqa: E402


def _maskbench(count: int) -> list[tuple[object, list[list[int]]]]:
    """``count`` MaskBench schemas, each with its valid instances as Qwen2.5 token ids."""
    from support.native_digest import QWEN, maskbench
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(QWEN / "tokenizer.json"))
    return [
        (schema, [tokenizer.encode(json.dumps(data)).ids for data in tests[:3]])
        for _, schema, tests in maskbench(count)
    ]


def test_maskbench_masks_are_the_pure_engines_at_every_state() -> None:
    """12 MaskBench schemas walked along their valid instances: per state, the compiled
    engine's bits and bools are the pure engine's, and its C assembly is its own Python
    orchestration's over the same numbering."""
    from support.native_digest import QWEN

    from jsonmode.decoding.compiled import compile_schema
    from jsonmode.decoding.matcher import Matcher
    from jsonmode.decoding.vocabulary import Vocabulary

    vocabulary = Vocabulary.from_tokenizer(QWEN)
    states = 0
    for schema, tests in _maskbench(12):
        compiled = compile_schema(schema, vocabulary)
        with running(None):
            pure = MaskEngine(compiled.network, vocabulary)
        with running(KERNELS):
            fast = MaskEngine(compiled.network, vocabulary)
        assert fast._stacks.core is not None
        assert pure._stacks.core is None
        for ids in tests:
            matcher = Matcher(fast)
            for token in [*ids, None]:
                state = matcher.state
                with running(KERNELS):
                    bits = fast.bits(state)
                    flags = fast.mask(state)
                    again = fast._assemble(state, cache_module._Bits(fast._size, fast._ids))
                with running(None):
                    expected_bits = pure.bits(state)
                    expected_flags = pure.mask(state)
                assert np.array_equal(bits, expected_bits), state
                assert np.array_equal(flags, expected_flags), state
                assert np.array_equal(bits, again), state
                assert not bits.flags.writeable
                assert not flags.flags.writeable
                states += 1
                if token is None or not matcher.advance(token):
                    break
        assert fast._miss is not None
        assert pure._miss is None
    assert states > 300


def test_seeded_random_walks_agree_on_both_paths() -> None:
    """Random walks on fresh engines (every state a miss; at odd steps the bool mask is
    asked first, so it is assembled by the kernel and unpacked, not unpacked from
    cached bits): the same bits and bools on both paths."""
    rng = random.Random(20250301)
    steps = 0
    for _ in range(60):
        case = make_miss(rng)
        expected = miss_python(case)
        got = miss_compiled(KERNELS, case)
        assert got == expected, case
        steps += len(got)
    assert steps > 300


def test_malformed_calls_raise_typed_errors() -> None:
    assert unrefused(hostile_miss_calls(KERNELS), frozenset()) == []


def test_the_walk_memo_is_bounded_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no room (budget 0) no walk is kept and the masks are the same; with room,
    the walks kept are the distinct (rule, state)s met, each asked for once."""
    from support.native_miss import miss_walk

    rng = random.Random(3)
    cases = [make_miss(rng) for _ in range(8)]
    for case in cases:
        case.steps = 16
    expected = [miss_python(case) for case in cases]
    asked: list[tuple[int, int, int]] = []
    kept: list[int] = []
    real = cache_module._walk_entry

    def counting(walks: object, rule: int, state: int) -> object:
        asked.append((id(walks), rule, state))
        return real(walks, rule, state)  # type: ignore[arg-type]

    monkeypatch.setattr(cache_module, "_walk_entry", counting)
    monkeypatch.setattr(cache_module, "_MISS_WALK_BYTES", 0)
    with running(KERNELS):
        assert [miss_walk(case) for case in cases] == expected
    unkept = len(asked)
    asked.clear()
    monkeypatch.setattr(cache_module, "_MISS_WALK_BYTES", 4 << 20)
    original = MaskEngine._assemble_bits

    def recording(engine: MaskEngine, state: object) -> object:
        found = original(engine, state)  # type: ignore[arg-type]
        kept.append(engine._miss.kept)
        return found

    monkeypatch.setattr(MaskEngine, "_assemble_bits", recording)
    with running(KERNELS):
        assert [miss_walk(case) for case in cases] == expected
    assert len(asked) == len(set(asked))  # (each walk asked for once per engine)
    assert unkept > len(asked)
    assert max(kept) >= 1


def test_the_pure_path_makes_no_assembler() -> None:
    """Without the kernels (or with a pure numbering) no assembler is made."""
    from support.native_miss import SCHEMAS, vocabulary

    from jsonmode.decoding.compiled import compile_schema

    vocab = vocabulary(1)
    compiled = compile_schema(SCHEMAS[0], vocab)
    with running(None):
        engine = MaskEngine(compiled.network, vocab)
        engine.bits(engine.reference.initial())
    with running(KERNELS):  # (a pure numbering: its walks stay on the Python path)
        assert engine._compiled() is None
    assert engine._miss is None


def test_the_sanitizer_run_covers_the_kernel() -> None:
    """The kernel is a PAIRS entry (seeded differential cases) and its malformed calls
    are among the hostile calls, both of which tests/test_native_asan.py runs."""
    pair = next(pair for pair in PAIRS if pair.name == "miss_assembler")
    rng = random.Random(5)
    assert [differ(pair, KERNELS, rng) for _ in range(5)] == [None] * 5
    labels = {label for label, _ in hostile_calls(KERNELS)}
    assert {label for label, _ in hostile_miss_calls(KERNELS)} <= labels
