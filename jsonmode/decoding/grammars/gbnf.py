"""llama.cpp's GBNF grammar text → the decoder's grammar IR.

:func:`parse` reads GBNF as llama.cpp's ``grammars/README.md`` defines it and as its
parser (``src/llama-grammar.cpp``) accepts it, and returns a
:class:`~jsonmode.decoding.ir.Grammar` whose start rule is ``root``.

Syntax and its mapping to the IR:

- ``name ::= alternatives``: one rule (a :class:`Call` elsewhere). Names are made of
  ASCII letters, digits and ``-`` (llama.cpp's ``is_word_char``: no ``_``); a rule may
  be used before it is defined, and may call itself (right recursion, nesting).
- ``a | b`` → :class:`Alt` (an empty alternative is allowed: ``x ::= "a" |``);
  ``a b`` → :class:`Seq` (adjacent literals merge); ``( ... )`` groups, inlined.
- ``"..."`` → :class:`Lit` of its UTF-8 bytes. Escapes (exactly llama.cpp's):
  ``\\n \\r \\t \\\\ \\" \\[ \\]``, ``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH`` (exactly 2, 4, 8
  hex digits; code points up to U+10FFFF). A ``\\uD8xx\\uDCxx`` surrogate pair in a
  literal is read as the one character it encodes; a lone surrogate is an error (it
  has no UTF-8 form). Raw characters, newlines included, stand for themselves.
- ``[...]`` (ranges ``a-z``, negation ``[^...]``, the same escapes, any Unicode) and
  ``.`` (any one character: every code point, U+0000 and newlines included) → one
  character of that set: :class:`Lex` over a one-character UTF-8 automaton, labelled
  by a canonical printing of the set (equal sets share a label, hence an automaton),
  or a :class:`Lit` when the set is one character. Surrogates (U+D800..U+DFFF) match
  nothing (they have no UTF-8 form); a set left empty matches nothing.
- ``?`` ``*`` ``+`` ``{m}`` ``{m,}`` ``{m,n}`` ``{0,n}`` (spaces allowed inside the braces)
  → :class:`Rep`; they apply to the item before them and may be stacked (``"a"{2}+``
  is ``("a"{2})+``).
- ``#`` starts a comment to the end of the line. Spaces and tabs separate items.
  Newlines (llama.cpp's rules exactly): between rules; anywhere inside parentheses;
  after ``::=``; after ``|``, even outside parentheses. Anywhere else a newline ends
  the rule, so a line that *starts* with ``|`` outside parentheses is an error.
- A leading byte-order mark is skipped.

Decisions where llama.cpp is silent, lax or stricter: a rule defined twice is an error
(llama.cpp keeps the last definition silently); a reversed range ``[z-a]``, an empty
class ``[]``/``[^]`` and bounds ``{3,1}`` are errors (llama.cpp reads them as matching
nothing, the empty string and exactly 3). Undefined rules are reported wherever they
are referenced (as llama.cpp does), but rules that ``root`` cannot reach are then
dropped, so they cost no automaton, and only reachable rules are checked for left
recursion (llama.cpp checks every rule). A repetition of something that may match
nothing (``b*`` with ``b ::= "x"?``, ``""*``) is accepted: llama.cpp rewrites ``x*``
into a recursive rule, which makes it left recursion (or "expecting preceding item"
for ``""``), and refuses it. A grammar whose ``root`` matches no text at all (``root
::= "a" root``) is accepted here and refused by ``compile_grammar``.

Rewriting: a rule whose every call to itself is its last step (``list ::= item ","
list | item``, ``ws ::= ([ \\t] ws)?``) becomes the equivalent loop (``( item "," )*
item``): the matcher's call stack is bounded, where llama.cpp drops a rule from its
stack before its tail call, so such a rule repeats without a bound as in llama.cpp.
Other recursion (``root ::= "(" root ")" | ""``) nests calls, up to the matcher's
depth bound.

Errors:

- :class:`~jsonmode.errors.InvalidGrammarError` (``line``, ``column``: 1-based, in
  characters, of the offending place): malformed text (unterminated string or class,
  an unknown escape, a missing ``::=``, an unexpected character, an unclosed ``(``,
  ``{3,1}``, ...), an empty grammar, an undefined rule (at the reference), a rule
  defined twice (at the second definition), no ``root`` rule (no position). Where
  malformed text looks like another notation (Lark's ``start: "a" b``, ``?rule:``,
  ``%import``; EBNF's ``rule = ...``; BNF's ``<rule> ::= ...``), the message says so
  and that the grammar must be GBNF, and the hint shows the rewrite.
- :class:`~jsonmode.errors.UnsupportedSchemaError`: llama.cpp's newer token syntax
  (``<...>``, ``<[123]>``, ``!<...>``), and left recursion (a rule that can reach
  itself before reading a byte, directly, through other rules, through rules that may
  match nothing, or inside a group or repetition): the message names the cycle
  (``expr → expr``) and the line of its first rule; the hint shows the rewrite with
  repetition. The matcher would otherwise recurse for ever.
- :class:`~jsonmode.errors.BudgetExceededError`: text over :data:`MAX_TEXT_CHARS`
  characters, nesting (parentheses, stacked repetitions) deeper than
  :data:`MAX_DEPTH`, a repetition count over :data:`MAX_COUNT`.

Two readers: :func:`gbnf_fast.read <jsonmode.decoding.grammars.gbnf_fast.read>` (one
tokenising regular expression, one loop, no recursion) reads well-formed text; what it
declines (any error, and a few rare forms) goes to the reference reader here
(``_Parser``, a recursive descent mirroring llama.cpp's), which reads it or says what is
wrong, so every error is the reference reader's. tests/test_gbnf_fast_reader.py holds
the two to the same grammars and errors.

Cost: linear in the text (one left-to-right pass, two for text the fast reader
declines; regular expressions scan tokens, literals and classes whole), plus one small
automaton per distinct character class (built straight from its ranges, in C where the
compiled core is loaded, and memoised per process for small sets), plus linear passes
over the rules for reachability, emptiness and left recursion. The reference reader
recurses only into parentheses, at most :data:`MAX_DEPTH` deep. Pure function;
thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from jsonmode.budget import checkpoint
from jsonmode.decoding.automata.rule_graph import left_cycle, reachable, show_cycle, tail_loop
from jsonmode.decoding.grammars import gbnf_fast
from jsonmode.decoding.grammars.gbnf_sets import (
    MAX_CODE_POINT,
    plain_class,
    repeat,
    set_expr,
    show,
    without_surrogates,
)
from jsonmode.decoding.ir import EMPTY, Call, Expr, Grammar, Lit, alt, seq
from jsonmode.errors import BudgetExceededError, InvalidGrammarError, UnsupportedSchemaError
from jsonmode.regex.syntax import charset, negate

__all__ = ["MAX_COUNT", "MAX_DEPTH", "MAX_TEXT_CHARS", "parse"]

#: Longest grammar text read, in characters.
MAX_TEXT_CHARS = 1_000_000
#: Deepest nesting of parentheses and of the expressions built (a group adds up to two
#: levels, each stacked repetition one).
MAX_DEPTH = 128
#: Largest repetition count in ``{m,n}``.
MAX_COUNT = 1_000_000


_SPACE = re.compile(r"(?:[ \t]|#[^\r\n]*)*")
_SPACE_NL = re.compile(r"(?:[ \t\r\n]|#[^\r\n]*)*")
_NAME = re.compile(r"[a-zA-Z0-9-]+")
_NAME_SPACE = re.compile(r"([a-zA-Z0-9-]+)(?:[ \t]|#[^\r\n]*)*")  # a name, then _SPACE
_DIGITS = re.compile(r"[0-9]+")
_PLAIN = re.compile(r'[^"\\]+')
_PLAIN_LITERAL = re.compile('"([^"\\\\\ud800-\udfff]*)"')  # a literal without escapes
_PLAIN_CLASS = re.compile(r"([^\]\\]+)\]")  # a class's body without escapes, and its ]
_HEX = re.compile(r"[0-9a-fA-F]*")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}

# Lines that GBNF never has and Lark (``start: "a" b``, ``?expr: ...``, ``%import
# common.NUMBER``) or EBNF/BNF (``rule = ... ;``, ``<rule> ::= ...``) grammars do.
_LARK_RULE = re.compile(r"^[ \t]*[?!]?[A-Za-z_][A-Za-z0-9_]*(?:\.[0-9]+)?[ \t]*:(?!:=)", re.M)
_LARK_DIRECTIVE = re.compile(r"^[ \t]*%(?:import|ignore|declare|override|extend)\b", re.M)
_EBNF_RULE = re.compile(r"^[ \t]*[A-Za-z_][A-Za-z0-9_-]*[ \t]*(?:=|:=)(?!=)", re.M)
_BNF_RULE = re.compile(r"^[ \t]*<[^>\n]+>[ \t]*::=", re.M)
_FOREIGN_HINT = (
    "write each rule as `name ::= ...` and name the start rule root (Lark's `start: "
    "\"a\" b` is `root ::= \"a\" b`); rule names are letters, digits and '-' (no '_', "
    "no `?`/`!` prefix); `%import common.NUMBER` and the like have no GBNF form: define "
    "the rule (`number ::= [0-9]+`); see llama.cpp's grammars/README.md"
)


def _foreign_syntax(text: str) -> str | None:
    """What other grammar notation ``text`` looks like (Lark, EBNF, BNF), or None."""
    if _LARK_DIRECTIVE.search(text) or _LARK_RULE.search(text):
        return "a Lark grammar"
    if _BNF_RULE.search(text):
        return "a BNF grammar (`<rule> ::= ...`)"
    if _EBNF_RULE.search(text):
        return "an EBNF grammar (`rule = ...`)"
    return None


_LEFT_RECURSION_HINT = (
    'rewrite the left recursion as repetition: `expr ::= expr "+" term | term` '
    'becomes `expr ::= term ("+" term)*`'
)


def parse(text: str, *, externals: frozenset[str] = frozenset()) -> Grammar:
    """Read GBNF ``text`` into a :class:`~jsonmode.decoding.ir.Grammar` rooted at
    ``root``, keeping only the rules ``root`` reaches.

    Args:
        text: the grammar.
        externals: rule names defined elsewhere (bound to JSON Schemas by the caller):
            references to them are not undefined; they are leaves here, never empty.
            ``root`` may be one of them.

    Raises:
        InvalidGrammarError: malformed text, an undefined or twice-defined rule, no
            ``root`` (with the line and column, where there is one place).
        UnsupportedSchemaError: token references, left recursion.
        BudgetExceededError: text, nesting or a repetition count over its limit.
    """
    if len(text) > MAX_TEXT_CHARS:
        raise BudgetExceededError(
            "grammar text size (characters)",
            MAX_TEXT_CHARS,
            hint="split the constraint, or factor repeated text into rules",
        )
    read = gbnf_fast.read(text, externals)  # (None: left to the reference reader)
    if read is not None:
        rules, looping = read
        used = reachable(rules, "root")
        rules = {name: expr for name, expr in rules.items() if name in used}
        if not left_cycle(rules):  # (else the reference reader reports the cycle)
            return Grammar(
                "root",
                {
                    name: tail_loop(name, expr) if name in looping else expr
                    for name, expr in rules.items()
                },
            )
    parser = _Parser(text)
    try:
        parser.grammar()
    except InvalidGrammarError as error:
        foreign = _foreign_syntax(text)
        if foreign is None:
            raise
        detail = error.message.removeprefix(f"line {error.line}, column {error.column}: ")
        raise InvalidGrammarError(
            f"{detail} — the grammar looks like {foreign}, not GBNF: jsonmode reads "
            "llama.cpp's GBNF",
            line=error.line,
            column=error.column,
            hint=_FOREIGN_HINT,
        ) from None
    for name, offset in parser.references:
        if name not in parser.rules and name not in externals:
            raise parser.error(
                f"undefined rule {name!r}",
                offset,
                hint="define it with `" + name + " ::= ...`, or bind it to a schema",
            )
    if not parser.rules and "root" not in externals:
        raise InvalidGrammarError(
            "the grammar is empty", hint='write at least the start rule: root ::= "..."'
        )
    if "root" not in parser.rules and "root" not in externals:
        raise InvalidGrammarError(
            "the grammar has no 'root' rule",
            hint="the start rule must be named root: root ::= ...",
        )
    used = reachable(parser.rules, "root")
    rules = {name: expr for name, expr in parser.rules.items() if name in used}
    cycle = left_cycle(rules)
    if cycle:
        line, _ = parser.position(parser.defined[cycle[0]])
        raise UnsupportedSchemaError(
            f"left recursion: {show_cycle(cycle)} (line {line}): rule {cycle[0]!r} can "
            "call itself before reading any text, which no top-down matcher can follow",
            hint=_LEFT_RECURSION_HINT,
        )
    looping = parser.self_referring  # (tail_loop leaves every other rule as it is)
    return Grammar(
        "root",
        {name: tail_loop(name, expr) if name in looping else expr for name, expr in rules.items()},
    )


class _Parser:
    """One pass over the text, mirroring llama.cpp's parse_rule / parse_alternates /
    parse_sequence; ``pos`` is the offset of the next character."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 1 if text.startswith("\ufeff") else 0
        self.rules: dict[str, Expr] = {}
        self.defined: dict[str, int] = {}
        self.references: list[tuple[str, int]] = []
        self.self_referring: set[str] = set()  # rules whose text names themselves
        self.classes: dict[tuple[tuple[int, int], ...], Expr] = {}
        self.calls: dict[str, Call] = {}  # one per rule name, shared
        self.groups: list[int] = []  # offsets of the open parentheses

    # -- positions and errors ---------------------------------------------------------

    def position(self, offset: int) -> tuple[int, int]:
        """1-based line and column of ``offset``."""
        line = self.text.count("\n", 0, offset) + 1
        return line, offset - self.text.rfind("\n", 0, offset)

    def error(self, message: str, offset: int, hint: str | None = None) -> InvalidGrammarError:
        line, column = self.position(offset)
        return InvalidGrammarError(message, line=line, column=column, hint=hint)

    def unexpected(self, offset: int, expected: str) -> InvalidGrammarError:
        """The error for the character at ``offset`` (or the end of the text)."""
        if offset >= len(self.text):
            return self.error(f"unexpected end of the grammar, expected {expected}", offset)
        char = self.text[offset]
        hint = None
        if char == "_":
            hint = "rule names may contain only ASCII letters, digits and '-' (no '_')"
        elif self.text.startswith("::=", offset):
            hint = "each rule starts on a new line"
        elif char == ")":
            hint = "this ')' closes no '('"
        return self.error(f"unexpected character {char!r}, expected {expected}", offset, hint)

    def depth_error(self, offset: int) -> BudgetExceededError:
        line, column = self.position(offset)
        return BudgetExceededError(
            "grammar nesting depth",
            MAX_DEPTH,
            hint=f"at line {line}, column {column}: split the deepest groups into rules of "
            "their own",
        )

    # -- lexical helpers ----------------------------------------------------------------

    def space(self, newlines: bool) -> None:
        pattern = _SPACE_NL if newlines else _SPACE
        match = pattern.match(self.text, self.pos)
        assert match is not None  # the pattern matches the empty string
        self.pos = match.end()

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def char(self) -> int:
        """One character of a literal or class (a raw one or an escape) → code point."""
        text = self.text
        if text[self.pos] != "\\":
            self.pos += 1
            return ord(text[self.pos - 1])
        here = self.pos
        if here + 1 >= len(text):
            raise self.error("unterminated escape at the end of the grammar", here)
        kind = text[here + 1]
        simple = _SIMPLE_ESCAPES.get(kind)
        if simple is not None:
            self.pos = here + 2
            return ord(simple)
        size = _HEX_ESCAPES.get(kind)
        if size is None:
            raise self.error(
                f"unknown escape \\{kind}",
                here,
                hint='GBNF knows \\n \\r \\t \\\\ \\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH',
            )
        match = _HEX.match(text, here + 2, min(here + 2 + size, len(text)))
        assert match is not None
        if match.end() - match.start() != size:
            raise self.error(f"\\{kind} takes exactly {size} hex digits", here)
        value = int(match.group(), 16)
        if value > MAX_CODE_POINT:
            raise self.error(f"\\{kind}{match.group()} is beyond U+10FFFF", here)
        self.pos = match.end()
        return value

    # -- the grammar ----------------------------------------------------------------------

    def grammar(self) -> None:
        text = self.text
        self.space(True)
        while self.pos < len(text):
            checkpoint()
            start = self.pos
            match = _NAME.match(text, start)
            if match is None:
                hint = None
                if text[start] == "|":
                    hint = (
                        "outside parentheses a rule continues on the next line only after "
                        "a '|' that ends a line: move the '|' to the end of the previous "
                        "line, or wrap the alternatives in parentheses"
                    )
                elif text[start] in '"[(.':
                    hint = (
                        "a rule ends at the end of its line (outside parentheses and "
                        "unless the line ends with '|'): wrap a multi-line rule in "
                        "parentheses"
                    )
                if hint is not None:
                    raise self.error(f"expected a rule name, found {text[start]!r}", start, hint)
                raise self.unexpected(start, "a rule name")
            name = match.group()
            self.pos = match.end()
            self.space(False)
            if not text.startswith("::=", self.pos):
                raise self.unexpected(self.pos, f"'::=' after the rule name {name!r}")
            if name in self.defined:
                line, _ = self.position(self.defined[name])
                raise self.error(
                    f"rule {name!r} is defined twice (first on line {line})",
                    start,
                    hint="join the definitions with '|' into one rule",
                )
            self.defined[name] = start
            self.pos += 3
            self.space(True)
            first_reference = len(self.references)
            expr, _ = self.alternatives(nested=False)
            self.rules[name] = expr
            if any(callee == name for callee, _ in self.references[first_reference:]):
                self.self_referring.add(name)
            char = self.peek()
            if char == "\r":
                self.pos += 2 if text.startswith("\r\n", self.pos) else 1
            elif char == "\n":
                self.pos += 1
            elif char:
                raise self.unexpected(self.pos, "a newline or the end of the grammar")
            self.space(True)

    def alternatives(self, nested: bool) -> tuple[Expr, int]:
        options = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            options.append(self.sequence(nested))
        if len(options) == 1:
            return options[0]
        return alt(*(expr for expr, _ in options)), 1 + max(depth for _, depth in options)

    def sequence(self, nested: bool) -> tuple[Expr, int]:
        """Items up to the first character that cannot start or modify one."""
        text = self.text
        end = len(text)
        skip = (_SPACE_NL if nested else _SPACE).match  # (self.space, inlined)
        items: list[tuple[Expr, int]] = []
        while self.pos < end:
            if not len(items) & 63:
                checkpoint()
            start = self.pos
            char = text[start]
            if char == '"':
                items.append((self.literal(), 0))
            elif char == "[":
                items.append((self.char_class(), 0))
            elif char == ".":
                self.pos += 1
                items.append((self.char_set([(0, MAX_CODE_POINT)]), 0))
            elif char == "(":
                items.append(self.group())
            elif char in "*+?{":
                if not items:
                    raise self.error(f"{char!r} repeats nothing: it must follow an item", start)
                low, high = self.repetition(nested)
                item, depth = items[-1]
                if depth + 1 > MAX_DEPTH:
                    raise self.depth_error(start)
                items[-1] = (repeat(item, low, high), depth + 1)
            elif char == "<" or text.startswith("!<", start):
                line, column = self.position(start)
                raise UnsupportedSchemaError(
                    f"line {line}, column {column}: token references (<...>, <[id]>, "
                    "!<...>) are not supported",
                    hint="write the token's text as a string literal",
                )
            else:
                match = _NAME_SPACE.match(text, start)
                if match is None:
                    break
                self.pos = match.end()
                if text.startswith("::=", self.pos):
                    if self.groups:
                        line, column = self.position(self.groups[-1])
                        raise self.error(
                            f"a rule definition ({match.group(1)!r}) inside parentheses: the "
                            f"'(' at line {line}, column {column} is not closed",
                            start,
                            hint="close the parenthesis (a '#' comment runs to the end of its "
                            "line, hiding a ')' written after it)",
                        )
                    raise self.error(
                        f"'::=' after {match.group(1)!r}: the previous rule is not ended",
                        start,
                        hint="each rule starts on a new line",
                    )
                name = match.group(1)
                self.references.append((name, start))
                call = self.calls.get(name)
                if call is None:
                    call = self.calls[name] = Call(name)
                items.append((call, 0))
                if not nested:
                    continue  # (the spaces after the name are read)
            self.pos = skip(text, self.pos).end()  # type: ignore[union-attr]
        if not items:
            return EMPTY, 0
        if len(items) == 1:
            return items[0]
        return seq(*(expr for expr, _ in items)), 1 + max(depth for _, depth in items)

    def group(self) -> tuple[Expr, int]:
        start = self.pos
        self.groups.append(start)
        if len(self.groups) > MAX_DEPTH:
            raise self.depth_error(start)
        self.pos += 1
        self.space(True)
        expr, depth = self.alternatives(nested=True)
        if self.peek() != ")":
            if self.pos >= len(self.text):
                raise self.error("unclosed '('", start, hint="add the missing ')'")
            raise self.unexpected(self.pos, "')'")
        self.pos += 1
        self.groups.pop()
        if depth > MAX_DEPTH:
            raise self.depth_error(start)
        return expr, depth

    def literal(self) -> Expr:
        text = self.text
        start = self.pos
        plain = _PLAIN_LITERAL.match(text, start)
        if plain is not None:  # (no escape, no surrogate: the text is the value)
            self.pos = plain.end()
            value = plain.group(1)
            return Lit(value.encode("utf-8")) if value else EMPTY
        self.pos += 1
        parts: list[str] = []
        while True:
            match = _PLAIN.match(text, self.pos)
            if match is not None:
                parts.append(match.group())
                self.pos = match.end()
            if self.pos >= len(text):
                raise self.error("unterminated string literal", start, hint='close it with "')
            if text[self.pos] == '"':
                self.pos += 1
                break
            parts.append(chr(self.char()))
        value = _join_surrogates("".join(parts))
        lone = _SURROGATE.search(value)
        if lone:
            raise self.error(
                f"a lone surrogate U+{ord(lone.group()):04X} in a string literal has no UTF-8 form",
                start,
            )
        return Lit(value.encode("utf-8")) if value else EMPTY

    def char_class(self) -> Expr:
        text = self.text
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        plain = _PLAIN_CLASS.match(text, self.pos)
        if plain is not None:  # (no escape)
            listed = plain_class(plain.group(1))
            if listed is not None:
                self.pos = plain.end()
                return self.char_set(negate(charset(listed)) if negated else listed)
        intervals: list[tuple[int, int]] = []
        while True:
            if self.pos >= len(text):
                raise self.error("unterminated character class", start, hint="close it with ]")
            if text[self.pos] == "]":
                break
            here = self.pos
            low = self.char()
            high = low
            # (as llama.cpp: a '-' just before ']' or the end is itself, not a range)
            if text.startswith("-", self.pos) and text[self.pos + 1 : self.pos + 2] not in "]":
                self.pos += 1
                high = self.char()
                if high < low:
                    raise self.error(f"the range {show(low)}-{show(high)} is reversed", here)
            intervals.append((low, high))
        self.pos += 1
        if not intervals:
            raise self.error(
                "empty character class", start, hint="a class lists at least one character"
            )
        return self.char_set(negate(charset(intervals)) if negated else intervals)

    def char_set(self, intervals: Iterable[tuple[int, int]]) -> Expr:
        """One character of the set: a literal, a shared lexeme, or nothing."""
        key = tuple(without_surrogates(charset(intervals)))
        known = self.classes.get(key)
        if known is None:
            known = set_expr(key)
            self.classes[key] = known
        return known

    def repetition(self, nested: bool) -> tuple[int, int | None]:
        """``?``, ``*``, ``+`` or ``{m}``, ``{m,}``, ``{m,n}`` → (low, high)."""
        text = self.text
        start = self.pos
        char = text[start]
        self.pos += 1
        if char != "{":
            return {"?": (0, 1), "*": (0, None), "+": (1, None)}[char]
        self.space(nested)
        low = self.count()
        self.space(nested)
        high: int | None = low
        comma = self.peek() == ","
        if comma:
            self.pos += 1
            self.space(nested)
            high = self.count() if _DIGITS.match(self.text, self.pos) else None
            self.space(nested)
        if self.peek() != "}":
            raise self.unexpected(self.pos, "'}'" if comma else "',' or '}'")
        self.pos += 1
        if high is not None and high < low:
            raise self.error(
                f"repetition bounds {{{low},{high}}}: the maximum is below the minimum", start
            )
        return low, high

    def count(self) -> int:
        match = _DIGITS.match(self.text, self.pos)
        if match is None:
            raise self.unexpected(self.pos, "a number")
        digits = match.group().lstrip("0") or "0"
        if len(digits) > len(str(MAX_COUNT)) or int(digits) > MAX_COUNT:
            raise BudgetExceededError("repetition count", MAX_COUNT)
        self.pos = match.end()
        return int(digits)


# -- literals ---------------------------------------------------------------------------


def _join_surrogates(value: str) -> str:
    """``value`` with each high+low surrogate pair made the character it encodes."""
    if not _SURROGATE.search(value):
        return value
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
