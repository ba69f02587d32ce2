"""Two paths, one behaviour (issue 43): each compiled kernel of ``jsonmode._native``
called directly against its pure-Python form, on random inputs (Hypothesis), and
malformed calls refused with a Python exception, never a crash.

The inputs (tests/support/native_fuzz.py): random token sets as a real
:class:`~jsonmode.decoding.engine.trie.TokenTrie`, random rule tables (int32,
``state * 256 + byte``, -1: none), crossing flags, a memoised ``expand`` (pairs with
context -1 for the end of the document, empty closures too), ``reads`` consistent
with the tables, seeds, budgets (small ones give None on both paths), and rests tries
for ``finish``. Results must be equal: the same list in the same order, and the same
``expand`` calls in the same order.

A new kernel joins by a ``KernelPair`` in ``native_fuzz.PAIRS`` (and its malformed
calls in ``hostile_calls``).
"""

from __future__ import annotations

import importlib
import random
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.native_fuzz import PAIRS, KernelPair, differ, make_walk, walk_python
from support.native_hostile import run_hostile

# The built extension itself, whichever path this process runs (JSONMODE_NO_EXTENSIONS
# may be set): a missing build fails here, by design (CI must build it).
KERNELS: ModuleType = importlib.import_module("jsonmode._native")
IDS = [pair.name for pair in PAIRS]


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_a_compiled_kernel_equals_its_python_form(pair: KernelPair, rng: random.Random) -> None:
    assert differ(pair, KERNELS, rng) is None


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_a_compiled_kernel_equals_its_python_form_on_seeded_cases(pair: KernelPair) -> None:
    rng = random.Random(f"native-{pair.name}")
    wrong = [found for _ in range(200) if (found := differ(pair, KERNELS, rng)) is not None]
    assert not wrong, f"{len(wrong)} of 200 differ, e.g. {wrong[:3]}"


def test_the_walk_cases_reach_every_branch() -> None:
    """The generator is worth its name: budgets run out (None), tokens are found, the
    walk looks readable bytes up (a node with more than 16 children), closures are
    taken (``expand``), stacks end (context -1)."""
    rng = random.Random(7)
    outcomes = {"none": 0, "found": 0, "reads": 0, "expand": 0, "end": 0}
    for _ in range(300):
        case = make_walk(rng)
        result = walk_python(case)
        outcomes["none"] += result is None
        outcomes["found"] += bool(result)
        outcomes["reads"] += case.model.read_calls > 0
        outcomes["expand"] += bool(case.model.calls)
        outcomes["end"] += any(c < 0 for _, c, _ in case.seeds)
    assert all(count >= 10 for count in outcomes.values()), outcomes


def test_malformed_calls_raise_and_never_crash() -> None:
    assert run_hostile(KERNELS) == []


def test_row_reads_on_the_rules_of_corpus_schemas() -> None:
    """r5setup_row_reads on real rule tables (every rule of the corpus schemas' networks,
    structural and lexeme) equals its pure-Python form."""
    import json
    import pathlib

    import jsonmode
    from jsonmode.decoding import reference

    corpus = pathlib.Path(__file__).resolve().parent / "corpus" / "schemas.json"
    tables = 0
    for schema in json.loads(corpus.read_text()).values():
        for rule in jsonmode.compile_schema(schema).network.rules:
            expected = reference._row_reads_python(rule.trans)
            assert KERNELS.r5setup_row_reads(rule.trans) == expected, rule.name
            tables += 1
    assert tables > 50
