"""GBNF, llama.cpp's grammar syntax (jsonmode.decoding.grammars.gbnf): every construct with
texts it accepts and rejects, the IR it maps to, errors with their exact line and
column, left recursion, hostile input, and a few realistic grammars of our own.
(compile_regex / compile_choice / bound schemas: tests/test_grammars.py.)"""

from __future__ import annotations

import json
import time

import pytest

from jsonmode import InvalidGrammarError, UnsupportedSchemaError, compile_grammar
from jsonmode.decoding.grammars import gbnf
from jsonmode.decoding.ir import EMPTY, Call, Lex, Lit, Rep, Seq
from jsonmode.errors import BudgetExceededError


def judge(grammar: str, good: list[str], bad: list[str]) -> None:
    compiled = compile_grammar(grammar)
    for text in good:
        assert compiled.accepts(text), f"should accept {text!r}"
        assert compiled.diagnose(text) is None
    for text in bad:
        assert not compiled.accepts(text), f"should reject {text!r}"
        assert compiled.diagnose(text) is not None


def root(text: str) -> object:
    """The IR of rule ``root`` of a one-rule grammar."""
    return gbnf.parse(text).rules["root"]


# -- literals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [
        (r'root ::= "abc"', ["abc"], ["", "ab", "abcd", "ABC"]),
        (r'root ::= ""', [""], ["a"]),
        (r'root ::= "a\nb"', ["a\nb"], ["a\\nb", "ab"]),
        (r'root ::= "\r\t"', ["\r\t"], ["\\r\\t"]),
        (r'root ::= "\\ \" \[ \]"', ['\\ " [ ]'], ['\\\\ \\" \\[ \\]']),
        (r'root ::= "\x41\x7e"', ["A~"], ["\\x41"]),
        (r'root ::= "\xe9"', ["é"], ["\xc3\xa9"]),  # \x is a code point, not a byte
        (r'root ::= "\u00E9\u4e2D"', ["é中"], ["e中"]),
        (r'root ::= "\U0001F600!"', ["😀!"], ["!"]),
        (r'root ::= "\uD83D\uDE00"', ["😀"], []),  # a surrogate pair is one character
        ('root ::= "two\nlines"', ["two\nlines"], ["twolines"]),  # a raw newline
        ('root ::= "日本語 😀"', ["日本語 😀"], ["日本語"]),
        ('root ::= "it\'s"', ["it's"], []),
    ],
)
def test_string_literals_and_their_escapes(grammar: str, good: list[str], bad: list[str]) -> None:
    judge(grammar, good, bad)


def test_adjacent_literals_merge_into_one() -> None:
    assert root('root ::= "a" "b" ("c")') == Lit(b"abc")
    assert root('root ::= ""') == EMPTY


# -- character classes and '.' -----------------------------------------------------------


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [
        ("root ::= [a-c]", ["a", "b", "c"], ["d", "", "ab", "A"]),
        ("root ::= [a-cx-z0-9_]", ["a", "y", "5", "_"], ["d", "-", "w"]),
        ("root ::= [a-]", ["a", "-"], ["b"]),  # '-' before ']' is itself
        ("root ::= [-a]", ["a", "-"], ["b"]),
        ("root ::= [^a-z]", ["A", "0", "\n", "é", "😀"], ["a", "q", "", "AB"]),
        ("root ::= [^\\n]+", ["one line", "ü"], ["two\nlines", ""]),
        (r"root ::= [\]\[\\\x2D^]", ["]", "[", "\\", "-", "^"], ["a"]),
        (r"root ::= [\x41-\x43\u00e9]", ["A", "C", "é"], ["D", "e"]),
        (r"root ::= [\t\n\r ]", ["\t", "\n", "\r", " "], ["x"]),
        ("root ::= [ぁ-ゟ]+", ["ひらがな"], ["カタカナ", "kana"]),
        (r"root ::= [\U0001F600-\U0001F64F]", ["😀", "🙏"], ["🚀", "a"]),
        ("root ::= [😀-🙏]", ["😃"], ["🚀"]),  # raw astral characters
        (r"root ::= [^\x00-\x7F]", ["é", "😀", "中"], ["a", "\x7f"]),
        (r"root ::= [\u0000-\U0010FFFF]", ["a", "😀", "\x00"], [""]),
        ('root ::= ["]', ['"'], ["a"]),  # a quote needs no escape in a class
    ],
)
def test_character_classes(grammar: str, good: list[str], bad: list[str]) -> None:
    judge(grammar, good, bad)


def test_dot_is_any_one_character() -> None:
    judge("root ::= .", ["a", "\n", "é", "😀", "\x00", '"'], ["", "ab", "😀😀"])
    judge('root ::= ... "abc" ...', ["abcabcabc", "🔵🟠✅abc❌🟠🔵"], ["aaabcccc", "🔵🟠abc🟠🔵"])


def test_equal_character_sets_share_one_label() -> None:
    rules = gbnf.parse("root ::= [a-c] [cba] [^\\x00-`d-\\U0010FFFF] [a-bc]").rules["root"]
    assert isinstance(rules, Seq)
    labels = {item.label for item in rules.items if isinstance(item, Lex)}
    assert labels == {"[a-c]"}
    assert root("root ::= .") == root(r"root ::= [\x00-\U0010FFFF]")
    assert str(root("root ::= .")) == "/./"
    assert str(root('root ::= [^"\\\\]')) == '/[^\\"\\\\]/'  # the shorter spelling


def test_a_one_character_set_is_a_literal() -> None:
    assert root("root ::= [a]") == Lit(b"a")
    assert root("root ::= [^\\x00-`b-\\U0010FFFF]") == Lit(b"a")
    assert root("root ::= [\\U0001F600]") == Lit("😀".encode())


def test_surrogates_in_a_class_match_nothing() -> None:
    judge(r'root ::= [\uD800-\uDFFF] | "x"', ["x"], ["\ud800"])


# -- repetition --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [
        ('root ::= "a"?', ["", "a"], ["aa", "b"]),
        ('root ::= "a"*', ["", "a", "a" * 70], ["b", "ab"]),
        ('root ::= "a"+', ["a", "a" * 70], ["", "ab"]),
        ('root ::= "ab"+', ["ab", "abab"], ["aba", "abb"]),  # a literal repeats whole
        ("root ::= [ab]{3}", ["aaa", "bab"], ["aa", "aaaa"]),
        ("root ::= [ab]{2,}", ["ab", "abab" * 20], ["a", ""]),
        ("root ::= [ab]{1,3}", ["a", "aba"], ["", "abab"]),
        ("root ::= [ab]{0,2}", ["", "a", "ba"], ["aaa"]),
        ('root ::= "x" "a"{0} "y"', ["xy"], ["xay"]),
        ('root ::= "a"{ 2 , 3 }', ["aa", "aaa"], ["a", "aaaa"]),
        ('root ::= ("0x" [0-9A-F]{2} " "?){3,5}', ["0xFF 0x12 0xAB"], ["0xFF 0x12", ""]),
        ('root ::= "a"{2}+', ["aa", "aaaa"], ["aaa", ""]),  # stacked: ("a"{2})+
        ('root ::= "a"?*', ["", "aaa"], ["b"]),
        ('root ::= (\n "a"{1,\n 2}\n)', ["a", "aa"], ["aaa"]),  # newlines inside () and {}
    ],
)
def test_repetition(grammar: str, good: list[str], bad: list[str]) -> None:
    judge(grammar, good, bad)


def test_repetition_maps_to_rep() -> None:
    item = Lit(b"a")
    assert root('root ::= "a"?') == Rep(item, 0, 1)
    assert root('root ::= "a"*') == Rep(item, 0, None)
    assert root('root ::= "a"+') == Rep(item, 1, None)
    assert root('root ::= "a"{3}') == Rep(item, 3, 3)
    assert root('root ::= "a"{3,}') == Rep(item, 3, None)
    assert root('root ::= "a"{0,4}') == Rep(item, 0, 4)
    assert root('root ::= "a"{1}') == item
    assert root('root ::= "a"{0}') == EMPTY


def test_a_star_first_in_an_alternative_does_not_leak_into_the_others() -> None:
    judge('root ::= "a"* | "b"', ["", "a", "aa", "b"], ["ab", "aab", "ba"])
    judge('root ::= | "0"* "x"', ["", "x", "00x"], ["0", "00"])
    judge("root ::= [0a ]* [xb] | ", ["", "x", " 0b"], [" ", "0"])


# -- grouping, alternatives, rules -------------------------------------------------------


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [
        ('root ::= "a" | "b" | "cd"', ["a", "b", "cd"], ["c", "ab", ""]),
        ('root ::= "x" ("a" | "b") "y"', ["xay", "xby"], ["xy", "xaby"]),
        ('root ::= (("a" | "b") ("c" | ("d" | "e")+))+', ["ac", "bdee", "acbe"], ["a", "ca"]),
        ('root ::= "a" | ', ["a", ""], ["b"]),  # an empty alternative
        ('root ::= | "a"', ["a", ""], ["aa"]),
        ('root ::= "x" () "y"', ["xy"], ["x y"]),
        ('root ::= "a"("b")[c]"d"', ["abcd"], ["ab cd"]),  # no spaces needed
        ('root ::= a-1 2b\na-1 ::= "x"\n2b ::= "y"', ["xy"], ["x"]),  # names: [a-zA-Z0-9-]
    ],
)
def test_alternatives_groups_and_names(grammar: str, good: list[str], bad: list[str]) -> None:
    judge(grammar, good, bad)


def test_rules_may_be_used_before_they_are_defined() -> None:
    judge('root ::= greeting " " name\nname ::= [A-Z] [a-z]*\ngreeting ::= "hi"', ["hi Bob"], [])


def test_right_recursion() -> None:
    parens = compile_grammar('root ::= "(" root ")" | ""')
    assert parens.accepts("((()))")
    assert parens.accepts("")
    assert not parens.accepts("(()")
    assert not parens.accepts("())")
    mutual = 'root ::= "a" b | ""\nb ::= "b" root'
    judge(mutual, ["", "ab", "abab"], ["a", "aba", "ba"])


def test_tail_recursion_becomes_a_loop_without_a_depth_bound() -> None:
    grammar = 'root ::= item\nitem ::= [a-z] "," item | [a-z]'
    assert str(gbnf.parse(grammar)) == 'root ::= item\nitem ::= ( /[a-z]/ "," )* /[a-z]/'
    judge(grammar, ["a", "a,b", "a," * 500 + "z"], ["", "a,", ",a"])
    spaces = 'root ::= "x" ws "y"\nws ::= ([ \\t] ws)?'
    assert str(gbnf.parse(spaces)).endswith("ws ::= /[\\t\\x20]/*")
    judge(spaces, ["xy", "x" + " \t" * 300 + "y"], ["x-y"])


# -- comments and newlines ---------------------------------------------------------------


def test_comments_and_newlines_follow_llama_cpp() -> None:
    grammar = """# a greeting grammar
root ::= # the start
  greeting ( # newlines are free inside parentheses
    " " name
    | "!"
  )?  # a trailing comment

greeting ::= "hello" |
    "hi" |   # after '|' the rule goes on
    "hey"
name ::=
  [A-Z] [a-z]*
"""
    judge(grammar, ["hello", "hi Ann", "hey!", "hello Bo"], ["hello ", "hi ann", "yo"])


def test_crlf_line_endings_and_a_byte_order_mark() -> None:
    judge('\ufeffroot ::= a |\r\n  "b"\r\na ::= "a"\r\n', ["a", "b"], ["ab"])


# -- unreachable and external rules ------------------------------------------------------


def test_rules_root_cannot_reach_are_dropped() -> None:
    grammar = gbnf.parse('root ::= "x"\nunused ::= unused "y" | [a-z]{3}')  # even left-recursive
    assert list(grammar.rules) == ["root"]
    assert grammar.root == "root"


def test_an_undefined_rule_is_an_error_even_in_an_unreachable_rule() -> None:
    with pytest.raises(InvalidGrammarError, match="undefined rule 'nowhere'") as info:
        gbnf.parse('root ::= "x"\nunused ::= "a" nowhere')
    assert (info.value.line, info.value.column) == (2, 16)


def test_external_rules_are_leaves() -> None:
    grammar = gbnf.parse('root ::= "call: " answer', externals=frozenset({"answer"}))
    assert grammar.rules == {"root": Seq((Lit(b"call: "), Call("answer")))}
    assert gbnf.parse("", externals=frozenset({"root"})).rules == {}
    # an external rule is never empty, so this is not left recursion
    gbnf.parse("root ::= answer root | answer", externals=frozenset({"answer"}))


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ('root ::= "abc', 1, 10, "unterminated string"),
        ("root ::= [abc", 1, 10, "unterminated character class"),
        ('root ::= "a\\qb"', 1, 12, "unknown escape \\q"),
        ('root ::= "\\x4"', 1, 11, "exactly 2 hex digits"),
        ("root ::= [a\\-z]", 1, 12, "unknown escape \\-"),  # llama.cpp has no \- or \^
        ('root ::= "\\u12G4"', 1, 11, "exactly 4 hex digits"),
        ('root ::= "\\U00110000"', 1, 11, "beyond U+10FFFF"),
        ('root ::= "\\uD800x"', 1, 10, "lone surrogate U+D800"),
        ('root = "a"', 1, 6, "expected '::='"),
        ('root\n::= "a"', 1, 5, "expected '::='"),
        ('root ::= "a" $', 1, 14, "unexpected character '$'"),
        ('root ::= "a")', 1, 13, "unexpected character ')'"),
        ('root ::= ("a" "b"', 1, 10, "unclosed '('"),
        ('root ::= ("a" ]', 1, 15, "unexpected character ']', expected ')'"),
        ('root ::= *"a"', 1, 10, "repeats nothing"),
        ('root ::= "a"{3,1}', 1, 13, "{3,1}"),
        ('root ::= "a"{,3}', 1, 14, "expected a number"),
        ('root ::= "a"{2 x}', 1, 16, "expected ',' or '}'"),
        ('root ::= "a"{2,3', 1, 17, "unexpected end"),
        ("root ::= [z-a]", 1, 11, "reversed"),
        ("root ::= []", 1, 10, "empty character class"),
        ("root ::= [^]", 1, 10, "empty character class"),
        ('root ::= "a"\n  | "b"', 2, 3, "expected a rule name, found '|'"),
        ('root ::= "a"\n  "b"', 2, 3, "expected a rule name"),
        ('my_rule ::= "a"', 1, 3, "unexpected character '_'"),
        ('root ::= a b ::= "x"\na ::= "y"', 1, 12, "previous rule is not ended"),
        ('root ::= ( "a" # ")"\nb ::= "x"', 2, 1, "'(' at line 1, column 10 is not closed"),
        ('root ::= "x"\n\nroot ::= "y"', 3, 1, "defined twice (first on line 1)"),
        ('root ::= "é😀" nope', 1, 15, "undefined rule 'nope'"),  # columns count characters
        ('root ::= "x"\r\nb ::= "y" c', 2, 11, "undefined rule 'c'"),
        ("root ::= é", 1, 10, "unexpected character 'é'"),
    ],
)
def test_malformed_grammars_name_the_line_and_column(
    text: str, line: int, column: int, message: str
) -> None:
    with pytest.raises(InvalidGrammarError) as info:
        gbnf.parse(text)
    error = info.value
    assert message in str(error)
    assert (error.line, error.column) == (line, column), str(error)
    assert f"line {line}, column {column}" in str(error)


def test_errors_carry_hints() -> None:
    with pytest.raises(InvalidGrammarError) as info:
        gbnf.parse('root ::= "a"\n  | "b"')
    assert info.value.hint is not None
    assert "end of the previous line" in info.value.hint
    with pytest.raises(InvalidGrammarError) as info:
        gbnf.parse('my_rule ::= "a"')
    assert info.value.hint is not None
    assert "no '_'" in info.value.hint


@pytest.mark.parametrize("text", ["", "   \n\n", "# only a comment\n"])
def test_an_empty_grammar_is_an_error(text: str) -> None:
    with pytest.raises(InvalidGrammarError, match="empty"):
        gbnf.parse(text)


def test_a_grammar_without_root_is_an_error() -> None:
    with pytest.raises(InvalidGrammarError, match="no 'root' rule") as info:
        compile_grammar('rot ::= "x"')
    assert info.value.line == 0


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("root ::= <[1000]>", "line 1, column 10"),
        ('root ::= "a"\nthink ::= <think> "x"', "line 2, column 11"),
        ("root ::= (\n  !<[42]>\n)*", "line 2, column 3"),
    ],
)
def test_token_references_are_unsupported(text: str, where: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match="token references") as info:
        gbnf.parse(text)
    assert where in str(info.value)
    assert not isinstance(info.value, InvalidGrammarError)


# -- left recursion ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cycle", "line"),
    [
        ('root ::= expr\nexpr ::= expr "+" term | term\nterm ::= [0-9]', "expr → expr", 2),
        ('root ::= "a" | root "a"', "root → root", 1),
        ('root ::= "x" a\na ::= b "x"\nb ::= a? "y"', "a → b → a", 2),
        ('root ::= a\na ::= e a "x" | "y"\ne ::= "z" | ', "a → a", 2),  # a nullable prefix
        ('root ::= a\na ::= [0-9]* (b | "q")\nb ::= "x"? a', "a → b → a", 2),
        ('root ::= a\na ::= ("x" | a "y")', "a → a", 2),  # inside a group
        ('root ::= a\na ::= (a "y")* "z"', "a → a", 2),  # inside a repetition
        ('root ::= a\na ::= "y"{0,3} a "x" | "y"', "a → a", 2),
    ],
)
def test_left_recursion_is_refused_with_the_cycle(text: str, cycle: str, line: int) -> None:
    with pytest.raises(UnsupportedSchemaError, match="left recursion") as info:
        compile_grammar(text)
    error = info.value
    assert cycle in str(error)
    assert f"(line {line})" in str(error)
    assert error.hint is not None
    assert '("+" term)*' in error.hint


def test_the_suggested_rewrite_compiles() -> None:
    judge(
        'root ::= expr\nexpr ::= term ("+" term)*\nterm ::= [0-9]+',
        ["1", "12+3+45"],
        ["+1", "1+", "1++2"],
    )


def test_a_repeated_rule_that_may_match_nothing_is_not_left_recursion() -> None:
    # (llama.cpp's rewriting of `b*` into a rule makes it one and refuses it)
    judge('root ::= b* "y"\nb ::= "x"?', ["y", "xxy"], ["", "x"])


# -- hostile input -----------------------------------------------------------------------


def test_deep_nesting_is_a_typed_error_not_a_recursion_error() -> None:
    for text in (
        "root ::= " + "(" * 10_000 + '"x"' + ")" * 10_000,
        "root ::= " + "(" * 10_000,
        'root ::= "a"' + "?" * 10_000,
        "root ::= " + '("a" ' * 5_000 + '"b"' + ' | "c")' * 5_000,
    ):
        with pytest.raises(BudgetExceededError, match="nesting depth"):
            compile_grammar(text)


def test_nesting_within_the_bound_compiles() -> None:
    depth = 60
    text = "root ::= " + '("a" ' * depth + '"b"' + ' | "c")' * depth
    judge(text, ["a" * depth + "b", "a" * (depth - 1) + "c", "c"], ["a" * depth])


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_an_oversized_text_is_refused_before_reading_it() -> None:
    text = 'root ::= "' + "a" * gbnf.MAX_TEXT_CHARS + '"'
    started = time.perf_counter()
    with pytest.raises(BudgetExceededError, match="text size"):
        gbnf.parse(text)
    assert time.perf_counter() - started < 0.5


def test_huge_repetition_counts_are_typed_errors() -> None:
    with pytest.raises(BudgetExceededError, match="repetition count"):
        gbnf.parse('root ::= "a"{' + "9" * 5_000 + "}")
    with pytest.raises(BudgetExceededError):  # within the count, over the state budget
        compile_grammar('root ::= "a"{999999}')


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_a_large_grammar_parses_in_linear_time() -> None:
    rules = "\n".join(f'r{i} ::= "word{i}" [a-z]* r{i + 1} | "end"' for i in range(4_000))
    text = "root ::= r0\n" + rules + '\nr4000 ::= "z"\n'
    started = time.perf_counter()
    grammar = gbnf.parse(text)
    assert len(grammar.rules) == 4_002
    assert time.perf_counter() - started < 5
    literal = 'root ::= "' + "ab\\n" * 200_000 + '"'
    assert gbnf.parse(literal).rules["root"] == Lit(b"ab\n" * 200_000)


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_long_rule_chains_cost_linear_time() -> None:
    n = 20_000
    chain = "\n".join(f"r{i} ::= r{i + 1}" for i in range(n))
    started = time.perf_counter()
    grammar = gbnf.parse(f'root ::= r0 "x"\n{chain}\nr{n} ::= ""')  # every rule may be empty
    assert len(grammar.rules) == n + 2
    cycle = "\n".join(f'r{i} ::= r{i + 1} | "a"' for i in range(n))
    with pytest.raises(UnsupportedSchemaError, match=r"r0 → r1 → r2 → r3 → \(\d+ more\) → r"):
        gbnf.parse(f'root ::= r0 "x"\n{cycle}\nr{n} ::= "" r0')
    assert time.perf_counter() - started < 10


# -- realistic grammars of our own -------------------------------------------------------

CHESS = r"""
# numbered moves in algebraic notation
root       ::= turn (" " turn)*
turn       ::= [1-9] [0-9]* ". " move (" " move)?
move       ::= (piece-move | pawn-move | castle) check?
piece-move ::= [KQRBN] [a-h]? [1-8]? "x"? square
pawn-move  ::= ([a-h] "x")? square promotion?
square     ::= [a-h] [1-8]
promotion  ::= "=" [QRBN]
castle     ::= "O-O" "-O"?
check      ::= [+#]
"""

ARITHMETIC = r"""
root   ::= expr
expr   ::= term (ws [+\x2D] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= "-"? (number | "(" ws expr ws ")")
number ::= [0-9]+ ("." [0-9]+)?
ws     ::= " "?
"""

BULLETS = r"""
root    ::= heading? item+
heading ::= "# " line
item    ::= "- " line ("  - " line)*
line    ::= [^\n]+ "\n"
"""

JSON = r"""
root    ::= ws value ws
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [+\x2D]? [0-9]+ )?
ws      ::= [ \t\n\r]*
"""


def test_a_chess_move_grammar() -> None:
    judge(
        CHESS,
        ["1. e4 e5 2. Nf3 Nc6 3. Bb5 a6", "1. O-O-O+", "12. exd8=Q#", "7. Nbxd7"],
        ["1. e9", "1 e4", "1. Ke", "1. e4  e5", "0. e4", "1. e4 e5 "],
    )


def test_an_arithmetic_grammar() -> None:
    judge(
        ARITHMETIC,
        ["1", "1+2*3", "(1 + 2) * -3.5", "((4))/2-1", "-(2)"],
        ["", "1+", "(1", "1 +  2", "1..2", "+1", "1 2"],
    )


def test_a_bullet_list_grammar() -> None:
    judge(
        BULLETS,
        ["- milk\n", "# Shopping\n- milk\n  - whole\n- eggs\n"],
        ["- milk", "# Shopping\n", "* milk\n", "- \n", "-milk\n"],
    )


def test_a_json_grammar_agrees_with_json_loads() -> None:
    compiled = compile_grammar(JSON)
    documents = [
        '{"a": [1, -2.5e3, true, null], "b": {"c": "d\\n\\u00e9"}}',
        " [ ] ",
        '"\\"quoted\\""',
        "0",
        '{"k":{}}',
    ]
    broken = ['{"a": 1,}', "[1 2]", "01", '"\\x"', "{'a': 1}", '{"a"}', "tru", "", '"a\nb"']
    for text in documents:
        json.loads(text)
        assert compiled.accepts(text), text
    for text in broken:
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
        assert not compiled.accepts(text), text


def test_diagnose_says_where_a_grammar_stops_matching() -> None:
    found = compile_grammar(CHESS).diagnose("1. e4 e9")
    assert found is not None
    assert found.offset == 7
    assert not found.ended
    assert "1-8" in found.expected
    ended = compile_grammar(ARITHMETIC).diagnose("(1 + 2")
    assert ended is not None
    assert ended.ended
    assert ended.offset == 6


def test_the_printed_grammar_is_pinned() -> None:
    assert str(gbnf.parse(CHESS)) == "\n".join(
        [
            'root ::= turn ( " " turn )*',
            'turn ::= /[1-9]/ /[0-9]/* ". " move ( " " move )?',
            "move ::= ( piece-move | pawn-move | castle ) check?",
            'piece-move ::= /[BKNQR]/ /[a-h]/? /[1-8]/? "x"? square',
            'pawn-move ::= ( /[a-h]/ "x" )? square promotion?',
            "square ::= /[a-h]/ /[1-8]/",
            'promotion ::= "=" /[BNQR]/',
            'castle ::= "O-O" "-O"?',
            "check ::= /[#+]/",
        ]
    )


@pytest.mark.parametrize(
    ("text", "looks", "line"),
    [
        pytest.param('start: "a" b\nb: "c"', "a Lark grammar", 1, id="lark"),
        pytest.param('root ::= "a"\n?expr: term', "a Lark grammar", 2, id="lark-inline-rule"),
        pytest.param("%import common.NUMBER\nstart: NUMBER", "a Lark grammar", 1, id="import"),
        pytest.param('root = "a" ;', "an EBNF grammar", 1, id="ebnf"),
        pytest.param('<root> ::= "a"', "a BNF grammar", 1, id="bnf"),
    ],
)
def test_another_grammar_notation_is_named_as_not_gbnf(text: str, looks: str, line: int) -> None:
    """(Before: only "unexpected character ':', expected '::='", no word of GBNF.)"""
    with pytest.raises(InvalidGrammarError) as info:
        compile_grammar(text)
    assert f"looks like {looks}" in info.value.message
    assert "not GBNF: jsonmode reads llama.cpp's GBNF" in info.value.message
    assert info.value.line == line
    assert info.value.hint is not None
    assert "root ::=" in info.value.hint


def test_a_gbnf_mistake_is_not_taken_for_another_notation() -> None:
    with pytest.raises(InvalidGrammarError) as info:
        compile_grammar('root ::= "a" b_c')
    assert "not GBNF" not in info.value.message
