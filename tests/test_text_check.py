"""Checking a text is linear in the text and bounded in time (issue 39, item 1, the
text path): ``accepts``, ``diagnose``, ``validate --grammar`` and the grammar judge.

Before, the reference matcher copied each parse stack, hashed it whole and worked out
its depth from every frame at every byte, and the nesting headroom was settled rule by
rule with NumPy calls per rule: a text nesting n frames deep cost n per byte (a 5 001-
character text under a 5 001-rule cycle: 20-29 s), a grammar of 20 000 rules calling a
shared recursive chain took 3.4-5 s to its first ``accepts``, and nothing bounded the
time. Hostile shapes run in bounded children (tests/support/bounded.py).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from jsonmode.decoding.grammars.compiled import compile_grammar
from jsonmode.decoding.reference import ReferenceMatcher
from jsonmode.decoding.textcheck import TEXT_BUDGET, TextChecker
from jsonmode.errors import BudgetExceededError
from tests.support.bounded import PEAK_MB, run_jsonmode, run_python
from tests.support.grammar_shapes import SHARED_CHAIN
from tests.support.recursive_grammars import ARITHMETIC, NESTED

# Wall-clock budgets: under pytest-xdist these run while no other test runs.
pytestmark = pytest.mark.alone

_CYCLE = (
    "'root ::= r0\\n' + ''.join(f'r{i} ::= \"a\" r{i + 1}\\n' for i in range(5000))"
    ' + \'r5000 ::= "a" r0 | "b"\\n\''
)

# The child prints one JSON line: what each call gave and how long it took (wall and CPU
# seconds: a bound on work is asserted on CPU time, which a busy machine does not stretch).
_CHILD = """
import json, time
from jsonmode.decoding.grammars.compiled import compile_grammar
compiled = compile_grammar({grammar}, **{options!r})
found = {{}}
for name, call in {calls!r}:
    started, cpu = time.perf_counter(), time.process_time()
    try:
        value = eval(call)
        found[name] = {{"value": value if isinstance(value, bool) else str(value)}}
    except Exception as exc:
        found[name] = {{"error": type(exc).__name__, "budget": getattr(exc, "budget", None),
                       "message": str(exc)}}
    found[name]["seconds"] = time.perf_counter() - started
    found[name]["cpu"] = time.process_time() - cpu
found["rss_mb"] = peak_mb()
print(json.dumps(found))
"""


def _in_child(
    grammar: str, calls: list[tuple[str, str]], seconds: float, **options: object
) -> dict[str, dict[str, object]]:
    code = PEAK_MB + _CHILD.format(grammar=grammar, calls=calls, options=options)
    return json.loads(run_python(code, seconds).strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_text_nesting_5000_rules_deep_is_checked_in_linear_time() -> None:
    """The 5 001-rule cycle and a 5 001-character text it accepts (5 001 frames deep:
    no rule recursion counts a level but r5000's call back to r0). Before: diagnose
    20-29 s, accepts alike. After: ~0.3 s each, loaded."""
    found = _in_child(
        _CYCLE,
        [
            ("diagnose", "compiled.diagnose('a' * 5000 + 'b')"),
            ("accepts", "compiled.accepts('a' * 5000 + 'b')"),
            ("short", "compiled.diagnose('a' * 5000)"),
        ],
        90,
    )
    assert found["diagnose"]["value"] == "None", found
    assert found["accepts"]["value"] is True, found
    assert "ends at byte 5000" in str(found["short"]["value"]), found
    for name in ("diagnose", "accepts", "short"):
        assert found[name]["cpu"] < 5, found


def test_the_first_accepts_on_20000_rules_calling_a_shared_chain_is_fast() -> None:
    """The nesting headroom of every rule is worked out in one pass (before: per rule,
    with NumPy calls each, 3.4-5 s on the first ``accepts``; after ~0.7 s loaded). CPU
    time: a CI run with a second test process beside it took 2.3 s of wall time."""
    grammar = SHARED_CHAIN
    found = _in_child(
        grammar,
        [("first", "compiled.accepts('xdy')"), ("deep", "compiled.accepts('x' + 'b' * 499 + 'f')")],
        90,
    )
    assert found["first"]["value"] is True, found
    assert found["first"]["cpu"] < 2, found
    assert found["deep"]["value"] is False, found


def test_an_over_long_check_is_a_typed_error_naming_what_to_raise() -> None:
    """3 000 recursive alternatives alive at once: every byte of ``((...v7))`` walks
    3 000 stacks (10-25 ms a byte). Before: accepts ran 48 s, no bound. After: the
    check stops at max_compile_seconds plus 0.1 ms a byte (~4.2 s here) with a typed
    error. (The budget is 4 s, not 2: the compile itself, ~0.65 s of CPU, spends the
    same budget, and with a second test process beside it took over 2 s. The text is
    2 002 bytes, 20-50 s of checking: with 402, a fast moment of a CI run finished
    diagnose at 4.04 s, within its budget, and rightly found nothing wrong.)"""
    grammar = (
        "'root ::= ' + ' | '.join(f'a{i}' for i in range(3000)) + '\\n' + "
        '\'\'.join(f\'a{i} ::= "(" a{i} ")" | "v{i}"\\n\' for i in range(3000))'
    )
    text = "'(' * 1000 + 'v7' + ')' * 1000"
    found = _in_child(
        grammar,
        [("accepts", f"compiled.accepts({text})"), ("diagnose", f"compiled.diagnose({text})")],
        90,
        max_compile_seconds=4,
    )
    for name in ("accepts", "diagnose"):
        assert found[name].get("error") == "BudgetExceededError", found
        assert found[name]["budget"] == TEXT_BUDGET, found
        assert "max_compile_seconds" in str(found[name]["message"]), found
        assert found[name]["seconds"] < 8, found


def test_validate_grammar_on_a_text_nesting_5000_frames(tmp_path: Path) -> None:
    """Through the command (which diagnoses the text twice). Before: ~60 s."""
    grammar = tmp_path / "cycle.gbnf"
    rules = "".join(f'r{i} ::= "a" r{i + 1}\n' for i in range(5000))
    grammar.write_text(f'root ::= r0\n{rules}r5000 ::= "a" r0 | "b"\n')
    text = tmp_path / "text.txt"
    text.write_text("a" * 5000 + "b")
    done = run_jsonmode("validate", "--grammar", grammar, text, seconds=25)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a" * 5000 + "b"


# -- the checker walks the reference matcher's states, stack for stack ------------------

_AMBIGUOUS = r"""
root ::= a | b
a ::= "(" a ")" | "(" b ")" | "x"
b ::= "(" b ")" | "(" a "]" | "x" | "y"
"""


def _texts(rng: random.Random, alphabet: str, count: int, longest: int) -> list[bytes]:
    return [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest))).encode()
        for _ in range(count)
    ]


@pytest.mark.parametrize("depth", [1, 2, 3, 256])
@pytest.mark.parametrize(
    ("grammar", "alphabet"),
    [(ARITHMETIC, "0(()+-*"), (NESTED, "[[]]{{}},k:1"), (_AMBIGUOUS, "((())]xy")],
)
def test_the_checker_walks_the_reference_matchers_states(
    grammar: str, alphabet: str, depth: int
) -> None:
    """Byte by byte, the same stacks (as frames) and the same allowed bytes, near the
    nesting bound and far from it; by levels (grammars) and by frames."""
    compiled = compile_grammar(grammar, max_nesting_depth=depth)
    rng = random.Random(depth)
    for levels in (True, False):
        reference = ReferenceMatcher(compiled.network, max_depth=depth, levels=levels)
        checker = TextChecker(reference)
        for text in _texts(rng, alphabet, 60, 24):
            state, mine = reference.initial(), checker.initial()
            for byte in text:
                assert checker.frames(mine) == state
                assert (checker.allowed_bytes(mine) == reference.allowed_bytes(state)).all()
                state, mine = reference.step(state, byte), checker.step(mine, byte)
                if not state:
                    break
            assert checker.frames(mine) == state
            assert checker.can_end(mine) == reference.can_end(state)


def test_the_checker_keeps_the_stack_bound() -> None:
    """An ambiguous grammar that doubles its stacks with every level: the reference's
    ``max_stacks`` error, from the checker too."""
    compiled = compile_grammar(
        'root ::= a\na ::= "(" a ")" | "(" b ")" | "x"\nb ::= "(" a ")" | "(" b ")" | "x"'
    )
    reference = ReferenceMatcher(compiled.network, max_depth=256, levels=True, max_stacks=64)
    checker = TextChecker(reference)
    with pytest.raises(BudgetExceededError) as caught:
        checker.feed(checker.initial(), b"(" * 20)
    assert caught.value.budget == "parse stacks per state"
    with pytest.raises(BudgetExceededError):
        reference.feed(reference.initial(), b"(" * 20)


def test_nesting_depth_messages_are_unchanged() -> None:
    """``max_nesting_depth`` still counts levels, and diagnose still names it."""
    compiled = compile_grammar(NESTED, max_nesting_depth=3)
    assert compiled.accepts("[[[1]]]")
    mismatch = compiled.diagnose("[[[[1]]]]")
    assert mismatch is not None
    assert mismatch.depth == 3, mismatch
    assert "deeper than max_nesting_depth (3)" in str(mismatch)
