"""The states' bounded-depth behaviour hashes in C (``jsonmode._native.r7hash_depths``,
csrc/r7hash_depths.c) and in Python (``state.state_hashes``'s depth loop): the same
hashes for the lexemes of real grammars and schemas (Qwen2.5 and GPT-2, at the depths
the engine asks) and for random automata (the differential and sanitizer runs draw more:
``PAIRS``); and the kernel's malformed calls refused. The hashes key the process-wide
walk caches, so equal hashes are equal masks."""

from __future__ import annotations

import random

import pytest
from support.native_hostile import unrefused
from support.native_r7hash import (
    HashCase,
    hashes_compiled,
    hashes_python,
    hostile_r7hash_calls,
    make_hashes,
)
from support.real_vocabularies import vocabulary as _vocabulary

import jsonmode
from jsonmode import native
from jsonmode.decoding.engine import state as state_module

KERNELS = native.KERNELS
pytestmark = pytest.mark.skipif(KERNELS is None, reason="the compiled core is not loaded")

GRAMMARS = [
    r"""root ::= word (gap word)*
word ::= [a-zA-Z0-9!?.,'-]+
gap ::= [ \t\n]""",
    r"""root ::= phrase ([ \n] phrase)*
phrase ::= [ぁ-ゖァ-ヺー一-龯々、。]+""",
    r"""root ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
""",
]
SCHEMAS = [
    {"type": "string", "pattern": "^[a-z]{2,8}(-[A-Z]{2})?$"},
    {"type": "object", "properties": {"n": {"type": "integer"}, "d": {"format": "date"}}},
]


@pytest.mark.parametrize("name", ["qwen2.5", "gpt2"])
def test_hashes_of_real_lexemes_equal_the_python_loop(name: str) -> None:
    vocabulary = _vocabulary(name)
    checked = 0
    compiled = [jsonmode.compile_grammar(g, vocabulary) for g in GRAMMARS]
    compiled += [jsonmode.compile_schema(s, vocabulary) for s in SCHEMAS]
    for one in compiled:
        engine = one.engine
        rules = engine._rules
        for rule in rules.lexemes:
            _, crossing, trans = rules.signature(rule)
            depths = (rules.depth, rules.depth + 1)
            case = HashCase(trans, crossing, depths)
            want = hashes_python(case)
            if want is None:
                continue
            assert hashes_compiled(KERNELS, case) == want
            with native.use(True):
                got = state_module.state_hashes(trans, crossing, depths)
            assert got is not None
            assert got.tolist() == want
            checked += 1
    assert checked >= 5


def test_hashes_of_random_automata_equal_the_python_loop() -> None:
    rng = random.Random(5)
    for _ in range(200):
        case = make_hashes(rng)
        assert hashes_compiled(KERNELS, case) == hashes_python(case), case.depths


def test_malformed_calls_are_refused() -> None:
    assert KERNELS is not None
    assert unrefused(hostile_r7hash_calls(KERNELS)) == []
