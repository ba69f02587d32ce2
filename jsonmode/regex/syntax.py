"""ECMA-262 regular expressions (the JSON Schema subset) → a small syntax tree.

This is the parse stage of :mod:`jsonmode.regex.glushkov`; the tree it returns is
turned into a DFA there. Only what a finite automaton can do is accepted; anything
else raises :class:`~jsonmode.errors.UnsupportedSchemaError` naming the fragment
(and the offset) that cannot be handled, so the caller can fall back to
post-validation.

Semantics, as JSON Schema asks ("ECMA-262, no flags", with the test suite's
"patterns always use Unicode semantics"):

* the pattern works on **code points** (like ECMA's ``u`` flag and like Python);
  ``\\uD83D\\uDE00`` written as a surrogate-pair escape is one code point;
* ``\\d`` = ``[0-9]``, ``\\w`` = ``[A-Za-z0-9_]``, ``\\s`` = ECMA ``WhiteSpace`` +
  ``LineTerminator``; ``.`` = any code point except ``\\n \\r \\u2028 \\u2029``;
* Annex B leniencies that real schemas rely on: a lone ``{``, ``}`` or ``]`` is a
  literal; ``\\c`` not followed by a letter is a literal backslash and ``c``; in a
  class, a range with a class escape at either end (``[\\w-.]``) keeps ``-`` literal;
* ``^`` only at the start and ``$`` only at the end of the pattern or of a
  top-level alternative; anywhere else they are rejected.

Unsupported (raise): backreferences ``\\1`` ``\\k<name>``, lookaround ``(?=`` ``(?!``
``(?<=`` ``(?<!``, word boundaries ``\\b`` ``\\B``, property escapes ``\\p{..}``
``\\P{..}``, flags/modifiers ``(?i)`` ``(?i:..)``, legacy octal escapes ``\\01``, and
escapes of ASCII letters that ECMA does not define (``\\a``, ``\\z``, ``\\A`` …),
whose meaning differs between engines. Malformed patterns (``a**``, ``(a``, ``[z-a]``)
raise the same error, so the caller's fallback (post-validation) decides.

Cost: linear in the pattern length. Thread-safe (no shared state).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jsonmode.errors import UnsupportedSchemaError

__all__ = [
    "ALL",
    "DIGIT",
    "DOT",
    "MALFORMED",
    "MAX_CODE_POINT",
    "SPACE",
    "WORD",
    "Alt",
    "Branch",
    "CharSet",
    "Chars",
    "Concat",
    "Node",
    "RegexParser",
    "RegexSyntaxError",
    "Repeat",
    "charset",
    "is_quantifier_brace",
    "negate",
    "parse",
    "unsupported",
]

MAX_CODE_POINT = 0x10FFFF
#: A set of code points: sorted, disjoint, non-adjacent inclusive ``(lo, hi)`` intervals.
CharSet = tuple[tuple[int, int], ...]

#: Largest count accepted in ``{n,m}`` before even trying (the DFA budget decides below).
MAX_REPEAT_COUNT = 100_000


def charset(intervals: Iterable[tuple[int, int]]) -> CharSet:
    """Normalise intervals (any order, overlapping or adjacent) into a :data:`CharSet`."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)


def negate(cs: CharSet) -> CharSet:
    """The complement of ``cs`` within ``0..MAX_CODE_POINT``."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in cs:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return tuple(out)


ALL: CharSet = ((0, MAX_CODE_POINT),)
DIGIT: CharSet = ((0x30, 0x39),)
WORD: CharSet = charset([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
# ECMA-262 WhiteSpace (TAB VT FF SP NBSP ZWNBSP + Zs) and LineTerminator (LF CR LS PS).
SPACE: CharSet = charset(
    [
        (0x09, 0x0D),
        (0x20, 0x20),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFEFF, 0xFEFF),
    ]
)
LINE_TERMINATORS: CharSet = charset([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])
DOT: CharSet = negate(LINE_TERMINATORS)


# -- syntax tree ---------------------------------------------------------------------


@dataclass(frozen=True)
class Chars:
    """One code point from ``cs`` (an empty ``cs`` matches nothing)."""

    cs: CharSet


@dataclass(frozen=True)
class Concat:
    """The items one after the other (no items: the empty string)."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    """Any one of the items."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max=None``: unbounded)."""

    item: Node
    min: int
    max: int | None


Node = Chars | Concat | Alt | Repeat
EMPTY = Concat(())


@dataclass(frozen=True)
class Branch:
    """One top-level alternative and whether it is anchored at either end."""

    node: Node
    anchored_start: bool
    anchored_end: bool


#: The ``what`` of the errors for text that is no regular expression at all (the others
#: name valid ECMA-262 syntax that is not supported: backreferences, lookaround ...).
MALFORMED = frozenset(
    {
        "unbalanced parenthesis",
        "unmatched parenthesis",
        "quantifier range out of order",
        "nothing to repeat",
        "malformed group name",
        "unterminated group",
        "trailing backslash",
        "malformed \\x escape",
        "malformed \\u{...} escape",
        "code point out of range",
        "malformed \\u escape",
        "unterminated character class",
        "character class range out of order",
    }
)


class RegexSyntaxError(UnsupportedSchemaError):
    """A pattern this parser cannot read: ``what`` (a phrase; in :data:`MALFORMED`
    when the pattern is malformed), ``fragment`` at ``offset``."""

    def __init__(self, pattern: str, offset: int, fragment: str, what: str) -> None:
        shown = pattern if len(pattern) <= 120 else pattern[:117] + "..."
        super().__init__(
            f"regex {what} `{fragment}` at offset {offset} is not supported (pattern `{shown}`)",
            hint="the keyword is left to post-validation; rewrite the pattern without it "
            "to have it enforced while decoding",
        )
        self.pattern = pattern
        self.offset = offset
        self.fragment = fragment
        self.what = what

    @property
    def malformed(self) -> bool:
        return self.what in MALFORMED


def unsupported(pattern: str, pos: int, fragment: str, what: str) -> RegexSyntaxError:
    """The error for ``fragment`` at offset ``pos`` of ``pattern`` (message names both)."""
    return RegexSyntaxError(pattern, pos, fragment, what)


_HEX = "0123456789abcdefABCDEF"
_SIMPLE_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}
_CLASS_ESCAPES = {"d": DIGIT, "D": negate(DIGIT), "w": WORD, "W": negate(WORD), "s": SPACE}
_CLASS_ESCAPES["S"] = negate(SPACE)


def is_quantifier_brace(pattern: str, i: int) -> int:
    """If ``pattern[i:]`` starts with ``{n}``, ``{n,}`` or ``{n,m}``, its end offset, else -1."""
    j = i + 1
    n = len(pattern)
    start = j
    while j < n and pattern[j].isascii() and pattern[j].isdigit():
        j += 1
    if j == start:
        return -1
    if j < n and pattern[j] == "}":
        return j + 1
    if j >= n or pattern[j] != ",":
        return -1
    j += 1
    while j < n and pattern[j].isascii() and pattern[j].isdigit():
        j += 1
    if j < n and pattern[j] == "}":
        return j + 1
    return -1


class RegexParser:
    """A recursive-descent reader of one ECMA-262 pattern (:func:`parse` drives it; the
    schema's pattern checks reuse its pieces). Not thread-safe: one per pattern."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.n = len(pattern)

    # -- helpers ---------------------------------------------------------------------

    def error(self, pos: int, fragment: str, what: str) -> RegexSyntaxError:
        return unsupported(self.p, pos, fragment, what)

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < self.n else ""

    # -- grammar ---------------------------------------------------------------------

    def parse(self) -> tuple[Branch, ...]:
        branches: list[Branch] = []
        while True:
            anchored_start = False
            if self.peek() == "^":
                anchored_start = True
                self.i += 1
            node, anchored_end = self.alternative(top=True)
            branches.append(Branch(node, anchored_start, anchored_end))
            if self.i >= self.n:
                return tuple(branches)
            if self.peek() == "|":
                self.i += 1
                continue
            raise self.error(self.i, self.p[self.i], "unbalanced parenthesis")  # pragma: no cover

    def disjunction(self) -> Node:
        items = [self.alternative(top=False)[0]]
        while self.peek() == "|":
            self.i += 1
            items.append(self.alternative(top=False)[0])
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def alternative(self, *, top: bool) -> tuple[Node, bool]:
        items: list[Node] = []
        while self.i < self.n:
            c = self.p[self.i]
            if c == "|":
                break
            if c == ")":
                if top:
                    raise self.error(self.i, ")", "unmatched parenthesis")
                break
            if c == "$":
                if top and (self.i + 1 == self.n or self.p[self.i + 1] == "|"):
                    self.i += 1
                    return _concat(items), True
                raise self.error(self.i, "$", "anchor not at the end of the pattern")
            if c == "^":
                raise self.error(self.i, "^", "anchor not at the start of the pattern")
            start = self.i
            atom = self.atom()
            items.append(self.quantified(atom, start))
        return _concat(items), False

    def quantified(self, atom: Node, start: int) -> Node:
        c = self.peek()
        lo: int
        hi: int | None
        if c == "*":
            lo, hi = 0, None
            self.i += 1
        elif c == "+":
            lo, hi = 1, None
            self.i += 1
        elif c == "?":
            lo, hi = 0, 1
            self.i += 1
        elif c == "{" and (end := is_quantifier_brace(self.p, self.i)) >= 0:
            body = self.p[self.i + 1 : end - 1]
            if "," in body:
                a, b = body.split(",")
                lo, hi = int(a), (int(b) if b else None)
            else:
                lo = hi = int(body)
            if hi is not None and hi < lo:
                raise self.error(self.i, self.p[self.i : end], "quantifier range out of order")
            if max(lo, hi or 0) > MAX_REPEAT_COUNT:
                raise self.error(
                    self.i, self.p[self.i : end], f"repeat count above {MAX_REPEAT_COUNT}"
                )
            self.i = end
        else:
            return atom
        if self.peek() == "?":  # lazy: same language
            self.i += 1
        nxt = self.peek()
        if nxt in ("*", "+", "?") or (nxt == "{" and is_quantifier_brace(self.p, self.i) >= 0):
            raise self.error(self.i, self.p[start : self.i + 1], "nothing to repeat")
        return Repeat(atom, lo, hi)

    def atom(self) -> Node:
        p, i = self.p, self.i
        c = p[i]
        if c == ".":
            self.i += 1
            return Chars(DOT)
        if c == "(":
            return self.group()
        if c == "[":
            return Chars(self.char_class())
        if c == "\\":
            return self.atom_escape()
        if c in "*+?":
            raise self.error(i, c, "nothing to repeat")
        if c == "{" and (end := is_quantifier_brace(p, i)) >= 0:
            raise self.error(i, p[i:end], "nothing to repeat")
        self.i += 1
        return Chars(((ord(c), ord(c)),))

    def group(self) -> Node:
        p, start = self.p, self.i
        self.i += 1
        if p.startswith("?:", self.i):
            self.i += 2
        elif p.startswith("?<", self.i) and self.peek(2) not in ("=", "!"):
            end = p.find(">", self.i)
            name = p[self.i + 2 : end] if end >= 0 else ""
            if end < 0 or not _is_group_name(name):
                frag = p[start : end + 1] if end >= 0 else p[start : start + 3]
                raise self.error(start, frag, "malformed group name")
            self.i = end + 1
        elif p.startswith("?", self.i):
            for prefix, what in (
                ("(?<=", "lookbehind"),
                ("(?<!", "negative lookbehind"),
                ("(?=", "lookahead"),
                ("(?!", "negative lookahead"),
            ):
                if p.startswith(prefix, start):
                    raise self.error(start, prefix, what)
            end = start + 2
            while end < self.n and p[end].isascii() and (p[end].isalpha() or p[end] in "-"):
                end += 1
            frag = p[start : min(end + 1, self.n)]
            raise self.error(start, frag, "flag or extension group")
        node = self.disjunction()
        if self.peek() != ")":
            raise self.error(start, p[start : start + 20], "unterminated group")
        self.i += 1
        return node

    def atom_escape(self) -> Node:
        p, start = self.p, self.i
        if start + 1 >= self.n:
            raise self.error(start, "\\", "trailing backslash")
        c = p[start + 1]
        if c in "bB":
            raise self.error(start, "\\" + c, "word boundary")
        if c in _CLASS_ESCAPES:
            self.i += 2
            return Chars(_CLASS_ESCAPES[c])
        if c.isascii() and c.isdigit() and c != "0":
            end = start + 1
            while end < self.n and p[end].isascii() and p[end].isdigit():
                end += 1
            raise self.error(start, p[start:end], "backreference")
        if c == "k" and self.peek(2) == "<":
            end = p.find(">", start)
            frag = p[start : end + 1] if end >= 0 else p[start : start + 3]
            raise self.error(start, frag, "named backreference")
        cp = self.char_escape(in_class=False)
        return Chars(((cp, cp),))

    def char_escape(self, *, in_class: bool) -> int:
        """Parse a single-code-point escape at ``self.i`` (a backslash); return the code point."""
        p, start = self.p, self.i
        c = p[start + 1]
        self.i = start + 2
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if c == "0":
            if self.peek().isascii() and self.peek().isdigit():
                raise self.error(start, p[start : self.i + 1], "legacy octal escape")
            return 0
        if c == "c":
            letter = self.peek()
            if letter.isascii() and letter.isalpha():
                self.i += 1
                return ord(letter) % 32
            self.i = start + 1  # Annex B: "\c" is a literal backslash; "c" follows
            return 0x5C
        if c == "x":
            hx = p[self.i : self.i + 2]
            if len(hx) == 2 and all(h in _HEX for h in hx):
                self.i += 2
                return int(hx, 16)
            raise self.error(start, p[start : self.i + 2], "malformed \\x escape")
        if c == "u":
            return self.unicode_escape(start)
        if c in "pP":
            end = p.find("}", start) if self.peek() == "{" else -1
            frag = p[start : end + 1] if end >= 0 else p[start : start + 2]
            raise self.error(start, frag, "Unicode property escape")
        if in_class and c == "b":
            return 0x08
        if c.isascii() and c.isalnum():
            raise self.error(start, "\\" + c, "unknown escape")
        return ord(c)

    def unicode_escape(self, start: int) -> int:
        p = self.p
        if self.peek() == "{":
            end = p.find("}", self.i)
            digits = p[self.i + 1 : end] if end >= 0 else ""
            if end < 0 or not digits or any(h not in _HEX for h in digits):
                raise self.error(start, p[start : start + 4], "malformed \\u{...} escape")
            value = int(digits, 16)
            if value > MAX_CODE_POINT:
                raise self.error(start, p[start : end + 1], "code point out of range")
            self.i = end + 1
            return value
        hx = p[self.i : self.i + 4]
        if len(hx) != 4 or any(h not in _HEX for h in hx):
            raise self.error(start, p[start : self.i + 4], "malformed \\u escape")
        self.i += 4
        unit = int(hx, 16)
        if 0xD800 <= unit <= 0xDBFF and p.startswith("\\u", self.i):
            low = p[self.i + 2 : self.i + 6]
            if len(low) == 4 and all(h in _HEX for h in low) and 0xDC00 <= int(low, 16) <= 0xDFFF:
                self.i += 6
                return 0x10000 + ((unit - 0xD800) << 10) + (int(low, 16) - 0xDC00)
        return unit

    def char_class(self) -> CharSet:
        p, start = self.p, self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        parts: list[tuple[int, int]] = []
        while True:
            if self.i >= self.n:
                raise self.error(start, p[start : start + 20], "unterminated character class")
            if p[self.i] == "]":
                self.i += 1
                break
            first_pos = self.i
            first = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                second = self.class_atom()
                if isinstance(first, int) and isinstance(second, int):
                    if second < first:
                        raise self.error(
                            first_pos, p[first_pos : self.i], "character class range out of order"
                        )
                    parts.append((first, second))
                    continue
                # Annex B: a class escape at either end keeps "-" literal.
                for item in (first, second):
                    parts.extend([(item, item)] if isinstance(item, int) else item)
                parts.append((0x2D, 0x2D))
                continue
            parts.extend([(first, first)] if isinstance(first, int) else first)
        cs = charset(parts)
        return negate(cs) if negated else cs

    def class_atom(self) -> int | CharSet:
        p, i = self.p, self.i
        c = p[i]
        if c != "\\":
            self.i += 1
            return ord(c)
        if i + 1 >= self.n:
            raise self.error(i, "\\", "trailing backslash")
        e = p[i + 1]
        if e in _CLASS_ESCAPES:
            self.i += 2
            return _CLASS_ESCAPES[e]
        if e == "-":
            self.i += 2
            return 0x2D
        if e == "B":
            raise self.error(i, "\\B", "\\B in a character class")
        if e.isascii() and e.isdigit() and e != "0":
            raise self.error(i, p[i : i + 2], "backreference or octal escape in a class")
        if e == "k":
            raise self.error(i, "\\k", "\\k in a character class")
        return self.char_escape(in_class=True)


def _is_group_name(name: str) -> bool:
    if not name:
        return False
    if not (name[0].isalpha() or name[0] in "_$"):
        return False
    return all(ch.isalnum() or ch in "_$" for ch in name[1:])


def _concat(items: list[Node]) -> Node:
    return items[0] if len(items) == 1 else Concat(tuple(items))


def parse(pattern: str) -> tuple[Branch, ...]:
    """Parse ``pattern`` into its top-level alternatives.

    Raises:
        UnsupportedSchemaError: unsupported or malformed syntax; the message names the
            fragment and its offset.
    """
    try:
        return RegexParser(pattern).parse()
    except RecursionError:
        raise unsupported(pattern, 0, pattern[:20], "nesting too deep") from None
