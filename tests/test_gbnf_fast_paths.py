"""The GBNF reader's shortcuts against its general paths: a literal or class without
escapes read with one regular expression (``_PLAIN_LITERAL``, ``_PLAIN_CLASS``), and
tail loops sought only in rules whose text names themselves. With the shortcuts off
(patterns that never match; every rule tried), the same grammar or the same error
(type, message, line, column, hint)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonmode.decoding.grammars import gbnf, gbnf_fast, gbnf_sets
from jsonmode.decoding.ir import Lex, nodes
from jsonmode.errors import JsonModeError

_NEVER_MATCHES = re.compile("(?!)")
_PIECES = [
    "a", "b", "z", "-", "^", "]", "[", "\\", "\\n", "\\]", "\\x41", "\\u00e9", "\\uD83D",
    "\\uDE00", "\\U0010FFFF", '"', '\\"', " ", "\n", "\ud800", "\udc00", "\U0001f600",
    "é", "0", "9", "(", "|", "*",
]  # fmt: skip


def _outcome(text: str) -> str:
    try:
        grammar = gbnf.parse(text)
    except JsonModeError as error:
        where = (getattr(error, "line", None), getattr(error, "column", None))
        return f"{type(error).__name__}: {error} at {where} hint {error.hint}"
    lexemes = [
        (node.label, node.dfa.trans.tobytes())
        for expr in grammar.rules.values()
        for node in nodes(expr)
        if isinstance(node, Lex)
    ]
    return f"{grammar!r} {lexemes!r}"


def _general(monkeypatch: pytest.MonkeyPatch, text: str) -> str:
    with monkeypatch.context() as patch:
        patch.setattr(gbnf, "_PLAIN_LITERAL", _NEVER_MATCHES)
        patch.setattr(gbnf, "_PLAIN_CLASS", _NEVER_MATCHES)
        patch.setattr(gbnf, "_Parser", _EveryRuleLoops)
        patch.setattr(gbnf_sets, "_set_cache", {})
        patch.setattr(gbnf_fast, "read", lambda text, externals: None)
        return _outcome(text)


class _EveryRuleLoops(gbnf._Parser):
    """The reader with every rule counted as naming itself."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.self_referring = _Everything()  # type: ignore[assignment]


class _Everything(set[str]):
    """A set that holds every rule name (tail_loop tried on every rule)."""

    def __contains__(self, name: object) -> bool:
        return True

    def add(self, name: str) -> None:
        pass


@settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    bodies=st.lists(st.lists(st.sampled_from(_PIECES), max_size=7), min_size=1, max_size=3),
    kinds=st.lists(st.sampled_from(['"', "[", "[^", "(["]), min_size=3, max_size=3),
    recursive=st.booleans(),
)
def test_shortcuts_read_as_the_general_path(
    monkeypatch: pytest.MonkeyPatch, bodies: list[list[str]], kinds: list[str], recursive: bool
) -> None:
    items = []
    for body, kind in zip(bodies, kinds, strict=False):
        text = "".join(body)
        items.append(
            {'"': f'"{text}"', "[": f"[{text}]", "[^": f"[^{text}]", "([": f"([{text}"}[kind]
        )
    tail = " | x root" if recursive else ""
    grammar = f'root ::= {" ".join(items)}{tail}\nx ::= "q"\n'
    assert _outcome(grammar) == _general(monkeypatch, grammar)


@pytest.mark.parametrize(
    "text",
    [
        'root ::= "abc" [a-z] [^"\\\\] [--a] [a-] [a-b-c] [^^] "" "é\U0001f600"',
        "root ::= [z-a]",  # reversed: the general path's error
        "root ::= [] | [^]",
        'root ::= "a\ud800b"',  # a lone surrogate
        'root ::= "\ud83d\ude00"',  # a surrogate pair, joined
        "root ::= [\ud83d\ude00]",
        'root ::= "ab',
        "root ::= [ab",
        'list ::= "a" "," list | "a"\nroot ::= list',
        'root ::= "(" root ")" | ""',
    ],
)
def test_shortcut_cases(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    assert _outcome(text) == _general(monkeypatch, text)
