"""The byte-automaton kernel of the compiled core (csrc/r6dfa_bytes.c,
``r6dfa_byte_dfa``): a character DFA's byte table, raw UTF-8 or as a JSON string body
(canonical or complete), is exactly the pure-Python builder's (``byte_dfa._ByteBuilder``:
the same states in the same order, the same table) on every real pattern (MaskBench,
JSON-Schema-Test-Suite), on the automata real schema and CSV compiles build, and on
random automata and regexes; the checkpoint is called as often on both paths; what the
kernel refuses goes to the reference; malformed calls are refused.
"""

from __future__ import annotations

import contextlib
import importlib
import random
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.native_digest import maskbench
from support.native_hostile import unrefused
from support.native_r6dfa import (
    BytesCase,
    bytes_compiled,
    bytes_python,
    hostile_r6dfa_calls,
    make_bytes,
    table,
)
from support.native_regex import real_patterns, running

from jsonmode.budget import deadline
from jsonmode.decoding import compiled as compiled_module
from jsonmode.decoding.automata import keys as keys_module
from jsonmode.decoding.automata import network as network_module
from jsonmode.decoding.compile import compiler as compiler_module
from jsonmode.decoding.compile import containers as containers_module
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.grammars import compiled as grammar_cache
from jsonmode.decoding.grammars.builtins import compile_csv
from jsonmode.errors import BudgetExceededError, JsonModeError
from jsonmode.lru import Lru
from jsonmode.regex import CharDFA, any_char_dfa, compile_pattern
from jsonmode.regex import byte_dfa as byte_dfa_module
from jsonmode.schema import patterns as patterns_module

KERNELS: ModuleType = importlib.import_module("jsonmode._native")
FORMS = [(False, False), (True, False), (True, True)]  # (json, complete)


def both(dfa: CharDFA, json: bool, complete: bool) -> tuple[Any, Any]:
    """``_byte_dfa`` on the compiled path and on the pure-Python path, as tables."""
    out = []
    for kernels in (KERNELS, None):
        with running(kernels):
            out.append(table(byte_dfa_module._byte_dfa(dfa, json=json, complete=complete)))
    return out[0], out[1]


def test_every_real_pattern_builds_the_same_byte_tables_on_both_paths() -> None:
    patterns = real_patterns()
    assert len(patterns) > 900
    wrong = []
    built = 0
    for pattern in patterns:
        try:
            dfa = compile_pattern(pattern)
        except JsonModeError:
            continue
        for json, complete in FORMS:
            compiled, python = both(dfa, json, complete)
            built += 1
            if compiled != python:
                wrong.append((pattern, json, complete))
    assert built > 2000
    assert wrong == []


def record_byte_dfas(monkeypatch: pytest.MonkeyPatch) -> list[tuple[CharDFA, bool, bool]]:
    """From now on, the automata ``_byte_dfa`` is asked for (compile caches emptied)."""
    seen: list[tuple[CharDFA, bool, bool]] = []
    reference = byte_dfa_module._byte_dfa

    def record(dfa: CharDFA, *, json: bool, complete: bool) -> Any:
        seen.append((dfa, json, complete))
        return reference(dfa, json=json, complete=complete)

    monkeypatch.setattr(byte_dfa_module, "_byte_dfa", record)
    monkeypatch.setattr(patterns_module, "_cache", Lru(patterns_module.CACHE_BYTES))
    monkeypatch.setattr(compiler_module, "_LEXEMES", Lru(64 << 20))
    monkeypatch.setattr(network_module, "_TERMINALS", Lru(64 << 20))
    monkeypatch.setattr(compiled_module, "_cache", {})
    # (The memoised lexeme builders too: warm from earlier tests in this process, they
    # would answer without asking for a byte automaton.)
    for memo in (
        compiler_module._const_string,
        containers_module._key_lexemes,
        containers_module._restricted_key_lexemes,
        keys_module.extra_key_body,
    ):
        memo.cache.clear()  # type: ignore[attr-defined]
    return seen


def test_the_automata_schema_compiles_build_give_the_same_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The character automata 60 MaskBench schemas' compiles turn into bytes (strings
    with patterns, formats and lengths), each in its form and in the other two."""
    seen = record_byte_dfas(monkeypatch)
    with running(None):
        for _, schema, _ in maskbench(60):
            with contextlib.suppress(JsonModeError):
                compile_schema(schema)
    monkeypatch.undo()
    assert len(seen) > 20
    assert any(json for _, json, _ in seen)
    assert max(dfa.n_states for dfa, _, _ in seen) > 50
    for dfa, _, _ in seen:
        for json, complete in FORMS:
            compiled, python = both(dfa, json, complete)
            assert compiled == python


CSV_ROW = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
        "name": {"type": "string", "maxLength": 12},
        "city": {"type": "string", "minLength": 1, "maxLength": 30},
        "when": {"type": "string", "format": "date"},
        "note": {"type": "string", "pattern": "^(é|ü+|😀)$"},
        "kind": {"enum": ["a", "b,c", 'd"e']},
        "score": {"type": "number"},
    },
    "required": ["id", "name"],
}


def test_the_csv_builder_builds_the_same_grammar_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CSV builder's cells (compiled once on each path, caches emptied): each
    automaton it turns into bytes gives the same table on both paths."""
    seen = record_byte_dfas(monkeypatch)
    for kernels in (KERNELS, None):
        monkeypatch.setattr(grammar_cache, "_cache", {})
        with running(kernels):
            compile_csv(CSV_ROW)
    monkeypatch.undo()
    assert len(seen) >= 8
    for dfa, json, complete in seen:
        compiled, python = both(dfa, json, complete)
        assert compiled == python


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_random_automata_build_the_same_tables(rng: random.Random) -> None:
    case = make_bytes(rng)
    assert bytes_compiled(KERNELS, case) == bytes_python(case)


def test_the_random_cases_reach_the_kernels_branches() -> None:
    """The fuzz cases build pending states (multi-byte sequences, escapes), trim
    states, and split digits part way (residual edges not aligned)."""
    rng = random.Random(11)
    cases = [make_bytes(rng) for _ in range(200)]
    sizes = [len(bytes_compiled(KERNELS, case)[1]) for case in cases]
    assert max(sizes) > 60
    assert sum(size == 1 for size in sizes) > 5  # (empty languages, trimmed to one state)
    assert sum(case.json and case.complete for case in cases) > 30


def test_the_checkpoint_is_called_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """At character state 0, 64, 128 ... and pending state 64, 128 ...: as many calls
    on both paths, and a raise in it stops both."""
    dfa = any_char_dfa(0, 300)
    calls = [0, 0]

    def counting(which: int) -> Any:
        def call() -> None:
            calls[which] += 1

        return call

    for json, complete in FORMS:
        calls[:] = [0, 0]
        KERNELS.r6dfa_byte_dfa(dfa.start, dfa.accepting, dfa.edges, json, complete, counting(0))
        monkeypatch.setattr(byte_dfa_module, "checkpoint", counting(1))
        with running(None):
            byte_dfa_module._byte_dfa(dfa, json=json, complete=complete)
        monkeypatch.undo()
        assert calls[0] == calls[1] > 300 // 64


@pytest.mark.parametrize("compiled", [True, False])
def test_a_past_deadline_stops_the_byte_automaton(compiled: bool) -> None:
    dfa = any_char_dfa(0, 200)
    with (
        running(KERNELS if compiled else None),
        deadline(0.0),
        pytest.raises(BudgetExceededError),
    ):
        byte_dfa_module.json_string_body_dfa(dfa)


def test_automata_the_kernel_refuses_go_to_the_reference() -> None:
    """Code points past U+10FFFF (a CharDFA made by hand, kept by minimisation): the
    kernel refuses them, and the answer is the reference's."""
    dfa = CharDFA(0, (False, True), (((0x61, 0x10FFFF + 5, 1),), ()))
    with pytest.raises(ValueError, match="U\\+10FFFF"):
        KERNELS.r6dfa_byte_dfa(dfa.start, dfa.accepting, dfa.edges, False, False, lambda: None)
    for json, complete in FORMS:
        compiled, python = both(dfa, json, complete)
        assert compiled == python


def test_both_paths_give_read_only_arrays() -> None:
    dfa = compile_pattern("^[a-zé]{1,3}$")
    for kernels in (KERNELS, None):
        with running(kernels):
            built = byte_dfa_module.json_string_body_dfa(dfa)
        assert built.trans.dtype == np.int32
        assert built.trans.shape[1] == 256
        assert built.accepting.dtype == np.bool_
        assert not built.trans.flags.writeable
        assert not built.accepting.flags.writeable
        assert built.accepts("é\\u00e9".encode()) is False  # (canonical: no needless escape)
        assert built.accepts("éa".encode())


def test_the_kernel_numbers_a_case_as_the_builder_does() -> None:
    """A small case spelled out: ``[a\\u00e9]`` raw is start -a-> 1, -C3-> 2 -A9-> 1."""
    case = BytesCase(0, (False, True), (((0x61, 0x61, 1), (0xE9, 0xE9, 1)), ()), False, False)
    start, accepting, trans = bytes_compiled(KERNELS, case)
    assert (start, accepting) == (0, b"\x00\x01\x00")
    rows = np.frombuffer(trans, dtype=np.int32).reshape(-1, 256)
    assert (rows[0, 0x61], rows[0, 0xC3], rows[2, 0xA9]) == (1, 2, 1)
    assert (rows >= 0).sum() == 3
    assert (start, accepting, trans) == bytes_python(case)


def test_malformed_calls_are_refused() -> None:
    assert unrefused(hostile_r6dfa_calls(KERNELS), frozenset()) == []
