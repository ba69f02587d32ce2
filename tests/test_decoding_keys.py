"""The direct automaton for extra keys (``additionalProperties``) against decoding."""

import json
import random

from jsonmode.decoding.automata.keys import extra_key_body

NAMES = ("a", "ab", "abc", "b c", "x-y", "~", "")


def _candidates(rng):
    alphabet = ["a", "b", "c", " ", "x", "-", "y", "~", "é", "\n", '"', "\\", "\u2028", "😀"]
    yield from NAMES
    for name in NAMES:
        yield from (name + "a", name[:-1], name + "\\", name.upper())
    for _ in range(3000):
        yield "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))


def test_extra_keys_are_exactly_the_strings_that_are_not_declared_names():
    complete = extra_key_body(NAMES, complete=True)
    canonical = extra_key_body(NAMES)
    assert complete is not None
    assert canonical is not None
    rng = random.Random(3)
    for text in _candidates(rng):
        for ensure_ascii in (True, False):
            encoded = json.dumps(text, ensure_ascii=ensure_ascii)[1:-1].encode()
            assert complete.accepts(encoded) is (text not in NAMES), (text, encoded)
        # Canonically, only json.dumps(..., ensure_ascii=False)'s spelling.
        encoded = json.dumps(text, ensure_ascii=False)[1:-1].encode()
        assert canonical.accepts(encoded) is (text not in NAMES), (text, encoded)
        escaped = json.dumps(text)[1:-1].encode()
        if escaped != encoded:  # (a \\u escape of a character beyond ASCII)
            assert not canonical.accepts(escaped), (text, escaped)


def test_escapes_that_spell_a_declared_name_are_refused():
    for complete in (True, False):
        body = extra_key_body(("ab",), complete=complete)
        assert body is not None
        for spelled in (b"\\u0061b", b"a\\u0062", b"\\u0061\\u0062"):
            assert not body.accepts(spelled)
        # "aé": not a name (written as it is, or, in any spelling, escaped)
        assert body.accepts("aé".encode())
        assert body.accepts(b"a\\u00e9") is complete
        assert body.accepts(b"ab\\n")


def test_names_outside_printable_ascii_are_left_to_the_exact_automaton():
    assert extra_key_body(("é",)) is None
    assert extra_key_body(('a"b',)) is None
