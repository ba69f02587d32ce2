"""compile_regex, compile_choice, CompiledGrammar.diagnose, schemas bound to grammar
rules, caching and argument errors (the GBNF syntax itself: tests/test_gbnf.py;
token walks and fuzz: tests/test_grammar_decoding.py)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

import jsonmode
from jsonmode import (
    InvalidGrammarError,
    UnsupportedSchemaError,
    UsageError,
    compile_choice,
    compile_grammar,
    compile_regex,
)
from jsonmode.decoding.grammars.compiled import CompiledGrammar, Mismatch


class Args(BaseModel):
    city: str
    days: int


# -- regular expressions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (r"[a-z]+@[a-z]+\.com", ["ab@cd.com", "x@y.com"], ["ab@cd.co", "@cd.com", "ab@cd.comm"]),
        (r"\d{3}-\d{4}", ["555-1234"], ["5551234", "555-123", "a55-1234"]),
        (r"(yes|no)!?", ["yes", "no!", "no"], ["maybe", "yes!!", ""]),
        (r"[^\n]*", ["", "anything at all ü"], ["two\nlines"]),
        (r"^abc$", ["abc"], ["abcabc", "xabc"]),  # written anchors change nothing
        (r"é+", ["é", "éé"], ["e", ""]),
    ],
)
def test_a_regex_matches_the_whole_text(pattern: str, good: list[str], bad: list[str]) -> None:
    compiled = compile_regex(pattern)
    assert compiled.kind == "regex"
    assert compiled.source == pattern
    assert compiled.unenforced == ()
    for text in good:
        assert compiled.accepts(text), text
        assert compiled.diagnose(text) is None
    for text in bad:
        assert not compiled.accepts(text), text
        assert compiled.diagnose(text) is not None


def test_a_regex_outside_the_supported_subset_is_a_typed_error() -> None:
    with pytest.raises(UnsupportedSchemaError):
        compile_regex(r"(a)\1")  # a backreference
    with pytest.raises(UnsupportedSchemaError):
        compile_regex(r"a(?=b)")  # lookahead
    with pytest.raises(UnsupportedSchemaError, match="matches no text"):
        compile_regex(r"[^\s\S]")


# -- choices --------------------------------------------------------------------------------


def test_a_choice_is_exactly_one_of_its_strings() -> None:
    compiled = compile_choice(["positive", "negative", "neutral", "positive"])
    assert compiled.kind == "choice"
    assert json.loads(compiled.source) == ["positive", "negative", "neutral", "positive"]
    for text in ("positive", "negative", "neutral"):
        assert compiled.accepts(text)
    for text in ("positiv", "positive ", "Positive", "", "neutralnegative"):
        assert not compiled.accepts(text)
    assert compile_choice(["日本", "中国"]).accepts("日本")


@pytest.mark.parametrize(
    "choices", [[], "yes", ["ok", 3], [None]], ids=["none", "a string", "a number", "None"]
)
def test_bad_choices_are_usage_errors(choices: object) -> None:
    with pytest.raises(UsageError):
        compile_choice(choices)  # type: ignore[arg-type]


# -- diagnose -------------------------------------------------------------------------------


def test_diagnose_names_the_byte_where_the_text_stops_matching() -> None:
    compiled = compile_choice(["yes", "no"])
    found = compiled.diagnose("yep")
    assert found == Mismatch(2, '"s"', False)
    assert "byte 2" in str(found)
    assert 'expected "s"' in str(found)
    start = compiled.diagnose("maybe")
    assert start is not None
    assert start.offset == 0
    assert start.expected == '"n" or "y"'


def test_diagnose_says_when_the_text_ends_too_early() -> None:
    found = compile_regex(r"\d{3}-\d{4}").diagnose("555-12")
    assert found is not None
    assert found.ended
    assert found.offset == 6
    assert found.expected == "a character in [0-9]"
    assert "ends at byte 6" in str(found)


def test_diagnose_counts_bytes_of_utf8() -> None:
    found = compile_regex("ü+x").diagnose("üüy")  # ü is two bytes
    assert found is not None
    assert found.offset == 4


def test_diagnose_describes_non_ascii_expectations() -> None:
    found = compile_regex("[α-ω]").diagnose("")
    assert found is not None
    assert found.expected == "a non-ASCII character"
    either = compile_regex("[a-zé]").diagnose("")
    assert either is not None
    assert either.expected == "a character in [a-z] or a non-ASCII character"


# -- caching and arguments ------------------------------------------------------------------


def test_compiling_the_same_constraint_twice_is_a_cache_hit() -> None:
    assert compile_regex(r"[0-9]+") is compile_regex(r"[0-9]+")
    assert compile_choice(["a", "b"]) is compile_choice(["a", "b"])
    assert compile_choice(["a", "b"]) is not compile_choice(["b", "a"])  # order is source


def test_unknown_options_and_non_text_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="unknown compile option"):
        compile_regex("a", colour="red")
    with pytest.raises(UsageError):
        compile_regex(b"a")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        compile_grammar(123)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="syntax"):
        compile_grammar('root ::= "a"', syntax="lark")  # type: ignore[arg-type]


def test_a_constraint_compiled_without_a_vocabulary_has_no_masks() -> None:
    compiled = compile_regex("a+")
    with pytest.raises(UsageError, match="vocabulary"):
        compiled.matcher()


def test_the_public_names() -> None:
    assert jsonmode.CompiledGrammar is CompiledGrammar
    assert issubclass(InvalidGrammarError, jsonmode.SchemaError)
    error = InvalidGrammarError("unexpected ')'", line=3, column=7)
    assert (error.line, error.column) == (3, 7)
    assert str(error).startswith("line 3, column 7: unexpected ')'")


# -- inlining ---------------------------------------------------------------------------------


def test_rules_that_cannot_recurse_are_written_in_place() -> None:
    compiled = compile_grammar(
        """
        root ::= "[" item ("," item)* "]"
        item ::= digit+ | word
        digit ::= [0-9]
        word ::= [a-z]+
        unused ::= "never"
        """
    )
    assert list(compiled.grammar.rules) == ["root"]  # item, digit, word inlined; unused gone
    assert compiled.accepts("[12,ab,3]")
    assert not compiled.accepts("[12,,3]")


def test_recursive_rules_stay_calls() -> None:
    compiled = compile_grammar('root ::= "<" inner ">"\ninner ::= "(" inner ")" | "x" | ""')
    assert set(compiled.grammar.rules) == {"root", "inner"}
    assert compiled.accepts("<((x))>")
    assert compiled.accepts("<>")
    assert not compiled.accepts("<((x)>")


def test_big_rules_stay_calls_so_inlining_cannot_blow_up() -> None:
    from jsonmode.decoding.grammars.compiled import MAX_INLINE_NODES

    big = " | ".join(f'"w{i}"' for i in range(MAX_INLINE_NODES + 1))
    # each level doubles the text if every rule were copied in place
    levels = "\n".join(f"r{i} ::= r{i + 1} r{i + 1}" for i in range(30))
    compiled = compile_grammar(f"root ::= r0\n{levels}\nr30 ::= big\nbig ::= {big}")
    from jsonmode.decoding.grammars.compiled import _size

    assert "big" in compiled.grammar.rules
    # no rule's body grew past twice the bound (each copies at most two kept bodies)
    assert all(_size(expr) <= 2 * MAX_INLINE_NODES + 1 for expr in compiled.grammar.rules.values())
    assert not compiled.accepts("w1")  # 2**30 words are needed


# -- JSON Schemas bound to rules --------------------------------------------------------------


def test_a_rule_bound_to_a_schema_is_exactly_its_documents() -> None:
    compiled = compile_grammar('root ::= [a-z ]* "<call>" args "</call>"', schemas={"args": Args})
    assert set(compiled.schemas) == {"args"}
    assert compiled.accepts('think <call>{"city":"Oslo","days":3}</call>')
    assert compiled.accepts('<call>{"city":"Oslo","days":3}</call>')
    assert not compiled.accepts('<call>{"city":"Oslo","days":"3"}</call>')  # days: integer
    assert not compiled.accepts('<call>{"city":"Oslo"}</call>')  # days is required
    found = compiled.diagnose('ok <call>{"city":"Oslo","days":"3"}</call>')
    assert found is not None
    assert found.offset == len('ok <call>{"city":"Oslo","days":')


def test_bound_schemas_report_what_they_leave_unenforced() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "multipleOf": 3}},
        "required": ["n"],
    }
    compiled = compile_grammar('root ::= "n=" doc', schemas={"doc": schema})
    assert compiled.unenforced == ("doc:/properties/n/multipleOf",)
    assert not compiled.fully_enforced
    assert compiled.accepts('n={"n":4}')  # multipleOf is left to post-validation


def test_a_bound_name_defined_in_the_grammar_is_refused() -> None:
    with pytest.raises(InvalidGrammarError, match="both defined"):
        compile_grammar('root ::= args\nargs ::= "x"', schemas={"args": Args})


def test_a_rule_neither_defined_nor_bound_is_refused() -> None:
    with pytest.raises(InvalidGrammarError):
        compile_grammar("root ::= args")


# -- nesting, error wording, the README's examples (issues 38 and 39) -----------------------

ARITHMETIC = """
root   ::= expr
expr   ::= term (" " [-+] " " term)*
term   ::= factor (" " [*/] " " factor)*
factor ::= [0-9]+ | "(" expr ")"
"""


def nested(levels: int) -> str:
    return "(" * levels + "1" + ")" * levels


def test_the_documented_nesting_depth_holds_whatever_the_rules_per_level() -> None:
    """256 levels (GRAMMAR_NESTING_DEPTH): each parenthesis passes three recursive
    rules (expr, term, factor), and 85 failed when the bound counted stack frames."""
    arithmetic = compile_grammar(ARITHMETIC)
    assert arithmetic.accepts(nested(85))
    assert arithmetic.accepts(nested(256))
    assert not arithmetic.accepts(nested(257))
    arrays = compile_grammar('root ::= arr\narr ::= "[" arr? "]"')
    assert arrays.accepts("[" * 256 + "]" * 256)
    assert compile_grammar(ARITHMETIC, max_nesting_depth=300).accepts(nested(300))
    assert compile_grammar(ARITHMETIC, max_nesting_depth=3).accepts(nested(3))
    assert not compile_grammar(ARITHMETIC, max_nesting_depth=3).accepts(nested(4))


def test_past_the_nesting_limit_the_mismatch_names_the_limit() -> None:
    """It says max_nesting_depth and how to raise it, and never expects the byte it
    refuses (it said 'stops matching at byte 255: expected "(" ...' of a "(")."""
    found = compile_grammar(ARITHMETIC).diagnose(nested(300))
    assert found is not None
    assert (found.offset, found.ended, found.depth) == (256, False, 256)
    assert found.expected == "a character in [0-9]"
    text = str(found)
    assert "nesting deeper than max_nesting_depth (256)" in text
    assert "max_nesting_depth=N" in text
    assert jsonmode.texts.mismatch_message(nested(300), found).endswith(found.reason)
    # a mismatch within the limit says nothing of it
    plain = compile_grammar(ARITHMETIC).diagnose("(1 x 2)")
    assert plain is not None
    assert plain.depth is None
    assert "max_nesting_depth" not in str(plain)


def test_masks_near_the_nesting_limit_are_exactly_the_live_tokens() -> None:
    """Walking to the limit and back, the mask at every state is the set of tokens
    whose bytes the reference matcher reads (so never a token after which no token
    is allowed), and never empty before the text is complete."""
    from jsonmode.decoding.vocabulary import Vocabulary

    pieces = [b"(", b"((", b"(((", b"(1", b"1", b"12", b")", b"))", b"1)", b" + ", b" ", b"+"]
    vocabulary = Vocabulary.from_token_bytes([*pieces, b""], eos_ids=[len(pieces)])
    compiled = compile_grammar(ARITHMETIC, vocabulary, max_nesting_depth=6)
    reference = compiled.reference()
    matcher = compiled.matcher()
    # "((" "((" "(" "(1": six levels, the limit; "1" ")" " + " "(" "1)" "))" ")" ")" ")"
    plan = [1, 1, 0, 3, 4, 6, 9, 0, 8, 7, 6, 6, 6]
    for step, token in enumerate(plan):
        mask = matcher.mask()
        live = [bool(reference.feed(matcher.state, piece)) for piece in pieces]
        assert mask[: len(pieces)].tolist() == live, (step, matcher.state)
        assert any(live)
        if step == 3:  # five levels: one more "(" is allowed, two are not
            assert mask[0]
            assert not mask[1]
            assert not mask[2]
        if step == 8:  # six, the limit: no token that opens a parenthesis
            assert not any(mask[[0, 1, 2, 3]])
        assert mask[token], step
        assert matcher.advance(token)
    assert matcher.can_end()
    assert matcher.advance(len(pieces))
    assert compiled.accepts(vocabulary.decode(plan))


README = __import__("pathlib").Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_grammar_examples_say_what_diagnose_says() -> None:
    """The chess example's diagnose comment and the re-ask message quoted further on
    are the library's own words (the README said [a-h] where it says [a-hx])."""
    import re

    readme = README.read_text(encoding="utf-8")
    source = re.search(r'compile_grammar\(\n    """(.*?)""",', readme, re.S)
    assert source is not None
    chess = compile_grammar(source.group(1))
    assert chess.accepts("e4 Nf3 Bxc6+")
    found = chess.diagnose("e4 Nz3")
    assert found is not None
    assert f'chess.diagnose("e4 Nz3")  # {found}\n' in readme
    quoted = jsonmode.texts.mismatch_message("e4 Nz3", found)
    flat = " ".join(readme.split())
    assert f"`{quoted}`" in flat
    assert nested(257) not in readme  # (the nesting example is quoted, not run)
    deep = compile_grammar(ARITHMETIC).diagnose(nested(257))
    assert deep is not None
    assert f"`{deep}`" in flat


def test_a_malformed_regex_is_an_invalid_regular_expression() -> None:
    with pytest.raises(InvalidGrammarError, match="invalid regular expression") as info:
        compile_regex("(a")
    assert "post-validation" not in str(info.value)
    with pytest.raises(InvalidGrammarError, match="invalid regular expression"):
        compile_regex("a{3,1}")
    with pytest.raises(UnsupportedSchemaError, match="not supported in a regular expression"):
        compile_regex(r"(a)\1")


def test_budget_errors_name_what_was_compiled() -> None:
    """(They said "compiling the schema" of a grammar.)"""
    from jsonmode.errors import BudgetExceededError

    with pytest.raises(BudgetExceededError) as info:
        compile_grammar("root ::= [a-z]{1000} [a-z]{1000}", max_rule_states=100)
    assert str(info.value).startswith("compiling the grammar exceeds the budget")
    assert "schema" not in str(info.value)
    with pytest.raises(BudgetExceededError) as info:
        compile_regex("[a-z]{1000}", max_rule_states=100)
    assert str(info.value).startswith("compiling the regular expression exceeds")


def test_too_many_parse_stacks_in_a_grammar_speak_of_the_grammar() -> None:
    """(The hint spoke of "the schema's alternatives (anyOf/oneOf ...)".)"""
    from jsonmode.errors import BudgetExceededError

    ambiguous = compile_grammar('root ::= a | b | "x"\na ::= "(" root ")"\nb ::= "(" root "]"')
    with pytest.raises(BudgetExceededError) as info:
        ambiguous.accepts("(" * 14 + "x")
    assert "the grammar's alternatives" in str(info.value)
    assert "schema" not in str(info.value)
