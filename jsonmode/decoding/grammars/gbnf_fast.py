"""A one-pass reader for well-formed GBNF: :func:`read` (the fast path of
:func:`jsonmode.decoding.grammars.gbnf.parse`).

One compiled regular expression tokenises the text (spaces and comments, newlines,
names, ``::=``, literals and classes whole, escapes included, punctuation, ``{m,n}``),
and one loop over the tokens builds the IR with an explicit stack of open groups: no
call per character or per item, which is what a first compile paid for in the
reference reader (:class:`gbnf._Parser`, a recursive descent that mirrors llama.cpp's).

The contract: for every text, :func:`read` either returns None, or the rules and the
self-referring rule names that the reference reader returns for it, expression for
expression (the same IR builders: :func:`~jsonmode.decoding.ir.seq`,
:func:`~jsonmode.decoding.ir.alt`, :func:`gbnf_sets.set_expr`,
:func:`gbnf_sets.repeat`). It returns None for anything the reference reader refuses,
and for some texts it accepts (a surrogate in a literal, spaces other than blanks and
tabs inside braces, nesting near the depth bound): the caller then runs the reference
reader, which says what is wrong with the text, or reads it. So error types,
messages and positions are the reference reader's, by construction. The differential
tests (tests/test_gbnf_fast_reader.py) hold the two readers to that.

Cost: linear in the text; no recursion (groups are a heap stack). Budgets: the
caller bounds the text's size; the compile's deadline is checked once per rule and
every 64 tokens of a rule (:func:`~jsonmode.budget.checkpoint`; blank lines and comments
are read with the token before them); nesting deep enough to approach
the reference reader's depth bound is left to it. Pure function; thread-safe.
"""

from __future__ import annotations

import re

from jsonmode.budget import checkpoint
from jsonmode.decoding.grammars.gbnf_sets import (
    MAX_CODE_POINT,
    class_intervals,
    plain_class,
    repeat,
    set_expr,
    without_surrogates,
)
from jsonmode.decoding.ir import EMPTY, Call, Expr, Lit, alt, seq
from jsonmode.regex.syntax import charset, negate

__all__ = ["read"]

_ESCAPE = r"""\\(?:[nrt\\"\[\]]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})"""
# The tokens, each with the spaces and comments after it (they separate items, and
# are never anything else outside literals, classes and braces); each alternative is
# one outer group, so ``lastindex`` names the kind.
_TOKEN = re.compile(
    r"(?:((?:[ \t]|#[^\r\n]*)+)"  # 1 spaces and comments
    r"|((?:\r\n?|\n)(?:[ \t\r\n]|#[^\r\n]*)*)"  # 2 a newline (blank lines after it)
    r"|([a-zA-Z0-9-]+)"  # 3 a name
    r"|(::=)"  # 4
    '|("([^"\\\\\ud800-\udfff]*)")'  # 5 (6) a literal without escapes
    '|("((?:[^"\\\\\ud800-\udfff]|' + _ESCAPE + ')*)")'  # 7 (8) a literal with escapes
    r"|(\[(\^?)([^\]\\]*)\])"  # 9 (10 11) a class without escapes
    r"|(\[(\^?)((?:[^\]\\]|" + _ESCAPE + r")*)\])"  # 12 (13 14) a class with escapes
    r"|([.()|*+?])"  # 15
    r"|(\{[ \t]*([0-9]+)[ \t]*(?:(,)[ \t]*([0-9]*)[ \t]*)?\})"  # 16 (17 18 19) {m,n}
    r")(?:[ \t]|#[^\r\n]*)*"
)
_UNIT = re.compile(
    r"""([^\\])|\\([nrt\\"\[\]])|\\x([0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})"""
)  # one character of a class or literal (the token checked the escapes' form)
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_DEPTH = 128  # (gbnf.MAX_DEPTH: the reference reader's bound)
_MAX_COUNT = 1_000_000  # (gbnf.MAX_COUNT)
_ANY = ((0, MAX_CODE_POINT),)


class _Refused(Exception):
    """Not read here (the reference reader says why, or reads it)."""


def read(text: str, externals: frozenset[str]) -> tuple[dict[str, Expr], set[str]] | None:
    """The rules of ``text`` (every rule, in definition order, before reachability and
    tail loops) and the names of the rules whose text names themselves, exactly as the
    reference reader makes them; None where this reader leaves the text to it (see
    the module's docstring). ``externals``: rule names defined elsewhere.

    Raises only what :func:`~jsonmode.budget.checkpoint` raises (the deadline).
    """
    try:
        return _read(text, externals)
    except _Refused:
        return None


def _read(text: str, externals: frozenset[str]) -> tuple[dict[str, Expr], set[str]]:
    rules: dict[str, Expr] = {}
    looping: set[str] = set()
    referenced: set[str] = set()
    calls: dict[str, Call] = {}
    spelled: dict[str, Expr] = {}  # a class's text → its expression
    sets: dict[tuple[tuple[int, int], ...], Expr] = {}  # a normal set → its expression
    name = ""
    state = 0  # 0: before a rule's name, 1: before its ::=, 2: in its body
    continued = False  # after ::= or |: a newline does not end the rule
    stack: list[tuple[list[Expr], list[Expr]]] = []  # the open groups' options and items
    options: list[Expr] = []
    items: list[Expr] = []
    stacked = most_stacked = deepest = count = 0
    position = 1 if text.startswith("\ufeff") else 0
    for match in _TOKEN.finditer(text, position):
        if match.start() != position:
            raise _Refused  # (something no token spells)
        kind = match.lastindex
        position = match.end()
        if kind == 1:
            continue
        if state != 2:
            if kind == 2 and state == 0:
                continue
            if kind == 3 and state == 0:
                name = match.group(3)
                if name in rules:
                    raise _Refused  # (defined twice)
                checkpoint()
                state = 1
            elif kind == 4 and state == 1:
                state, continued = 2, True
                options, items = [], []
            else:
                raise _Refused
            continue
        if kind == 2:
            if continued or stack:
                continue
            rules[name] = _alternatives(options, items)
            state = 0
            continue
        continued = False
        count += 1
        if not count & 63:
            checkpoint()
        if kind == 3:
            callee = match.group(3)
            call = calls.get(callee)
            if call is None:
                call = calls[callee] = Call(callee)
                referenced.add(callee)
            if callee == name:
                looping.add(name)
            items.append(call)
            stacked = 0
        elif kind == 5:
            value = match.group(6)
            items.append(Lit(value.encode("utf-8")) if value else EMPTY)
            stacked = 0
        elif kind == 15:
            char = match.group(15)
            if char == "*" or char == "+" or char == "?":
                if not items:
                    raise _Refused
                items[-1] = repeat(items[-1], 0 if char != "+" else 1, 1 if char == "?" else None)
                stacked += 1
                if stacked > most_stacked:
                    most_stacked = stacked
            elif char == "(":
                stack.append((options, items))
                options, items = [], []
                continued = True
                if len(stack) > deepest:
                    deepest = len(stack)
            elif char == ")":
                if not stack:
                    raise _Refused
                expr = _alternatives(options, items)
                options, items = stack.pop()
                items.append(expr)
                stacked = 0
            elif char == "|":
                options.append(_sequence(items))
                items = []
                continued = True
            else:  # "."
                known = spelled.get(".")
                if known is None:
                    known = spelled["."] = _set(_ANY, sets)
                items.append(known)
                stacked = 0
        elif kind == 9 or kind == 12:
            spelling = match.group(kind)
            known = spelled.get(spelling)
            if known is None:
                known = spelled[spelling] = _class(match, kind, sets)
            items.append(known)
            stacked = 0
        elif kind == 7:
            items.append(_literal(match.group(8)))
            stacked = 0
        elif kind == 16:
            if not items:
                raise _Refused
            low = _count(match.group(17))
            high = (
                (_count(match.group(19)) if match.group(19) else None) if match.group(18) else low
            )
            if high is not None and high < low:
                raise _Refused
            items[-1] = repeat(items[-1], low, high)
            stacked += 1
            if stacked > most_stacked:
                most_stacked = stacked
        else:  # ::=
            raise _Refused
    if position != len(text) or stack or state == 1:
        raise _Refused
    if state == 2:
        rules[name] = _alternatives(options, items)
    # (the deepest expression is at most this deep: see the reference reader's depth)
    if most_stacked + deepest * (2 + most_stacked) + 2 > _MAX_DEPTH:
        raise _Refused
    if not rules and "root" not in externals:
        raise _Refused
    if "root" not in rules and "root" not in externals:
        raise _Refused
    for callee in referenced:
        if callee not in rules and callee not in externals:
            raise _Refused
    return rules, looping


def _sequence(items: list[Expr]) -> Expr:
    if not items:
        return EMPTY
    return items[0] if len(items) == 1 else seq(*items)


def _alternatives(options: list[Expr], items: list[Expr]) -> Expr:
    last = _sequence(items)
    if not options:
        return last
    options.append(last)
    return alt(*options)


def _count(digits: str) -> int:
    digits = digits.lstrip("0") or "0"
    if len(digits) > 7 or int(digits) > _MAX_COUNT:
        raise _Refused  # (the reference reader's budget error)
    return int(digits)


def _literal(body: str) -> Expr:
    """A literal's body with escapes (their form checked by the token)."""
    parts = []
    for match in _UNIT.finditer(body):
        raw = match.group(1)
        if raw is not None:
            parts.append(raw)
        else:
            parts.append(_char(match))
    value = "".join(parts)
    if _SURROGATE.search(value):
        raise _Refused  # (a pair is joined, a lone one refused: the reference reader)
    return Lit(value.encode("utf-8")) if value else EMPTY


def _char(match: re.Match[str]) -> str:
    simple = match.group(2)
    if simple is not None:
        return _SIMPLE[simple]
    value = int(match.group(match.lastindex or 0), 16)
    if value > MAX_CODE_POINT:
        raise _Refused
    return chr(value)


def _class(match: re.Match[str], kind: int, sets: dict[tuple[tuple[int, int], ...], Expr]) -> Expr:
    negated = bool(match.group(kind + 1))
    body = match.group(kind + 2)
    if not body:
        raise _Refused  # (empty)
    if kind == 9:
        listed = plain_class(body)
        if listed is None:
            raise _Refused  # (a reversed range)
    else:
        listed = _escaped_class(body)
    return _set(negate(charset(listed)) if negated else listed, sets)


def _escaped_class(body: str) -> list[tuple[int, int]]:
    """The intervals a class body with escapes lists: as :func:`gbnf_sets.plain_class`
    reads one without, where only a raw ``-`` between two characters makes a range."""
    units = [
        (ord(match.group(1)), match.group(1) == "-")
        if match.group(1) is not None
        else (ord(_char(match)), False)
        for match in _UNIT.finditer(body)
    ]
    intervals = class_intervals(units)
    if intervals is None:
        raise _Refused  # (a reversed range)
    return intervals


def _set(
    intervals: list[tuple[int, int]] | tuple[tuple[int, int], ...],
    sets: dict[tuple[tuple[int, int], ...], Expr],
) -> Expr:
    """One character of the set, shared per read by the normal set (as the reference
    reader shares it)."""
    key = tuple(without_surrogates(charset(intervals)))
    known = sets.get(key)
    if known is None:
        known = sets[key] = set_expr(key)
    return known
