"""What a GBNF grammar compiles to, for speed (issue 43, grammars): calls inside counted
repetitions stay calls, character classes are built directly; each checked against the
slower construction it replaces (the same automata, or the same language and masks)."""

from __future__ import annotations

import pathlib
import random
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer

from jsonmode import compile_grammar
from jsonmode.decoding.grammars import compiled as compiled_module
from jsonmode.decoding.vocabulary import Vocabulary

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import grammars as bench_grammars  # noqa: E402  (bench/grammars.py: the four grammars)

CHESS = bench_grammars.CHESS_GBNF


def _texts(name: str) -> list[str]:
    return bench_grammars.GRAMMARS[name].texts(random.Random(7))


# -- counted repetitions of rules ---------------------------------------------------------


def test_a_rule_repeated_by_a_count_stays_one_call_and_builds_once() -> None:
    compiled = compile_grammar(CHESS)
    # 60 copies of `turn` written in place made one 2 700-state automaton (45 ms).
    assert "turn" in compiled.grammar.rules
    assert compiled.network.n_states < 400
    for text in _texts("chess"):
        assert compiled.accepts(text)
        assert not compiled.accepts(text + " ")
    turns = " ".join(f"{n}. e4 e5" for n in range(1, 61))
    assert compiled.accepts(turns)
    assert not compiled.accepts(turns + " 61. e4")  # the count still holds


def test_small_counted_repetitions_are_still_written_in_place() -> None:
    compiled = compile_grammar('root ::= hex{4}\nhex ::= [0-9a-f]')
    assert set(compiled.grammar.rules) == {"root"}


@pytest.fixture(scope="module")
def qwen() -> tuple[Vocabulary, Tokenizer]:
    path = bench_grammars.decoder.TOKENIZER_DIR
    return Vocabulary.from_tokenizer(path), Tokenizer.from_file(str(path / "tokenizer.json"))


def test_called_and_inlined_repetitions_give_the_same_masks(
    qwen: tuple[Vocabulary, Tokenizer], monkeypatch: pytest.MonkeyPatch
) -> None:
    vocabulary, tokenizer = qwen
    called = compile_grammar(CHESS, vocabulary)
    # The former construction: every copy written in place (no size bound on inlining;
    # another text, so not the cached constraint).
    monkeypatch.setattr(compiled_module, "MAX_INLINE_NODES", 1 << 40)
    inlined = compile_grammar(CHESS + "\n", vocabulary)
    assert "turn" not in inlined.grammar.rules
    assert inlined.network.n_states > 2000
    words = (vocabulary.size + 31) // 32
    for text in _texts("chess")[:2]:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        one, two = called.matcher(), inlined.matcher()
        for token in [*ids, None]:
            a = np.zeros(words, dtype=np.int32)
            b = np.zeros(words, dtype=np.int32)
            one.fill_bitmask(a)
            two.fill_bitmask(b)
            assert np.array_equal(a, b)
            if token is None:
                break
            assert a[token // 32] >> (token % 32) & 1
            one.advance(token)
            two.advance(token)
        eos = min(vocabulary.eos_ids)
        assert a[eos // 32] >> (eos % 32) & 1  # the text may end here
