"""Where a structural rule's boundary tokens passed their crossing state, in C
(``jsonmode._native.r6replay_states``, csrc/r6replay.c) and in Python
(``Walks._replay``): the same states for entries drawn from real rule tables and real
token matrices (Qwen2.5, Llama-3), through both of the Python form's branches; and the
kernel's malformed calls refused."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from support.native_hostile import unrefused
from support.native_r6replay import hostile_r6replay_calls, live_entries, replay_compiled
from support.real_vocabularies import vocabulary as _vocabulary

import jsonmode
from jsonmode import native

KERNELS = native.KERNELS
pytestmark = pytest.mark.skipif(KERNELS is None, reason="the compiled core is not loaded")

GRAMMAR = r"""
root ::= stmt (ws stmt)*
stmt ::= ident ws "=" ws expr ";"
expr ::= term (ws [-+*/] ws term)*
term ::= ident | [0-9]+ | "(" ws expr ws ")" | ident "(" ws expr ws ")"
ident ::= [a-zA-Z_] [a-zA-Z0-9_]{0,15}
ws ::= [ \t\n]*
"""
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
    },
    "required": ["name"],
}


def _engines(name: str) -> list[Any]:
    vocabulary = _vocabulary(name)
    return [
        jsonmode.compile_grammar(GRAMMAR, vocabulary).engine,
        jsonmode.compile_schema(SCHEMA, vocabulary).engine,
    ]


@pytest.mark.parametrize("tokenizer", ["qwen2.5", "llama-3"])
def test_replayed_states_equal_the_python_forms_on_real_tables(tokenizer: str) -> None:
    rng = random.Random(11)
    checked = 0
    for engine in _engines(tokenizer):
        index, walks = engine._index, engine._walks
        matrix, lengths = index.matrix, index.lengths
        network = engine.reference.network
        for rule in range(len(network.rules)):
            flat = walks._rules.info(rule).flat
            for state in rng.sample(range(flat.size // 256), min(4, flat.size // 256)):
                for count in (0, 3, 40, 3000):  # (the few-bytes loop, then the vectors)
                    positions, cols = live_entries(rng, flat, state, matrix, lengths, count)
                    with native.use(False):
                        want = walks._replay(flat, state, positions, cols)
                    got = replay_compiled(KERNELS, flat, state, matrix, positions, cols)
                    assert np.array_equal(got, want), (rule, state, count)
                    with native.use(True):
                        assert np.array_equal(walks._replay(flat, state, positions, cols), want)
                    checked += int(cols.sum() > 0)
    assert checked > 20


def test_malformed_calls_are_refused() -> None:
    assert unrefused(hostile_r6replay_calls(KERNELS), frozenset()) == []


def test_replay_releases_nothing_it_took_on_error() -> None:
    """An error after the buffers are taken leaves them released: the output array can
    be resized afterwards (a held buffer export would refuse it)."""
    flat = np.full(256, -1, dtype=np.int32)
    matrix = np.zeros((1, 2), dtype=np.uint8)
    out = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="outside the matrix"):
        KERNELS.r6replay_states(flat, 0, matrix, np.zeros(1, np.int64), np.array([5]), out)
    out.resize(4, refcheck=False)
    assert out.size == 4
