"""The extra-key automaton's kernels (csrc/r4comp_keys.c): ``r4comp_key_count``,
``r4comp_key_trie`` and ``r4comp_key_rows`` (automata.keys: key_trie_size, key_trie,
extra_key_body) against their pure-Python forms: equal answers on the property names
of MaskBench schemas and on random names, the same deadline checks, and malformed
calls refused."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.native_fuzz import PAIRS, differ
from support.native_hostile import unrefused
from support.native_r4comp import KeysCase, hostile_r4comp_calls, keys_compiled, keys_python

from jsonmode import native
from jsonmode.budget import deadline
from jsonmode.decoding.automata import keys
from jsonmode.errors import BudgetExceededError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from decoder_sample import load_sample

KERNELS = native.KERNELS
pytestmark = pytest.mark.skipif(KERNELS is None, reason="the compiled core is not built")
PAIR = next(pair for pair in PAIRS if pair.name == "r4comp_keys")


def _property_names(schema: Any) -> list[tuple[str, ...]]:
    """The names of every ``properties`` object in a schema (a walk of its dicts)."""
    found, stack = [], [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict) and properties:
                found.append(tuple(properties))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def test_maskbench_property_names_give_equal_automata_on_both_paths() -> None:
    compared = 0
    for case in load_sample(100, 20250301):
        for names in _property_names(case.schema):
            one, two = KeysCase(names), KeysCase(names)
            assert keys_compiled(KERNELS, one) == keys_python(two), names
            assert one.model.calls == two.model.calls
            compared += 1
    assert compared > 100


@settings(max_examples=150, deadline=None)
@given(st.randoms(use_true_random=False))
def test_random_names_agree(rng: random.Random) -> None:
    assert differ(PAIR, KERNELS, rng) is None


def test_many_names_check_the_deadline_alike_and_stop_at_it() -> None:
    names = tuple(f"n{i:04d}" for i in range(700))
    one, two = KeysCase(names), KeysCase(names)
    assert keys_compiled(KERNELS, one) == keys_python(two)
    assert one.model.calls == two.model.calls == ["checkpoint"] * 6  # 3 per trie built
    keys.key_trie.cache.clear()  # type: ignore[attr-defined]
    with deadline(0.0), pytest.raises(BudgetExceededError):
        keys.key_trie(names)


def test_malformed_calls_are_refused() -> None:
    assert unrefused(hostile_r4comp_calls(KERNELS)) == []
