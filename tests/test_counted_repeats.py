"""Quoted counted repetitions of GBNF grammars as counted lexemes
(``grammars.counted``, ``RuleDFA.counts_over``, ``engine.rules._count_states`` over any
plain automaton, the walks' per-token item counts per plain automaton).

Checked: llama.cpp's ``"\\"" char{m,n} "\\""`` (and a JSON ``char`` rule, and a byte
class) become counted lexemes that the engine's verifier accepts; the masks along texts
at and around both bounds (m - 1, m, n - 1, n, n + 1 items; escapes and multi-byte
characters across the bound) equal those of the same grammar compiled without the
rewrite (calls per item) at every step, on both paths and two tokenizers, and the
reference matcher's at the states next to the bounds; windows that look counted but
are not (an ambiguous item, an item that reads the closing quote first) are left as
they were and still give exact masks; and the verifier refuses automata that are not
the plain automaton with the claimed count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from support.real_vocabularies import tokenizer as _tokenizer
from support.real_vocabularies import vocabulary as _vocabulary
from support.reference_masks import reference_mask

import jsonmode
from jsonmode import native
from jsonmode.decoding.automata.network import RuleDFA, plain_string_rule
from jsonmode.decoding.engine import rules, segments, walk
from jsonmode.decoding.engine.cache import MaskEngine
from jsonmode.decoding.engine.rules import _count_states
from jsonmode.decoding.grammars import counted
from jsonmode.decoding.ir import called
from jsonmode.decoding.matcher import Matcher
from jsonmode.decoding.vocabulary import Vocabulary

# llama.cpp's json-schema-to-grammar string of 3 to 12 characters (its ``char``: no
# raw DEL, no ``\/``), then a JSON ``char`` (both) of up to 10 and a byte class.
LLAMA = r"""
root ::= "{\"name\": " name ", \"tag\": " tag ", \"id\": " id "}"
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
jchar ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
name ::= "\"" char{3,12} "\""
tag ::= "\"" jchar{0,10} "\""
id ::= "\"" [a-z_]{1,9} "\""
"""


def _doc(name: str, tag: str = "t", ident: str = "ab") -> str:
    return '{"name": "' + name + '", "tag": "' + tag + '", "id": "' + ident + '"}'


# Names of 3, 4, 11, 12 characters (escapes and multi-byte characters at the bounds);
# tags of 0, 9, 10; ids of 1, 8, 9.
TEXTS = [
    _doc("abc", "", "a"),
    _doc('a\\"é', "ünïcödé 9", "abcdefgh"),
    _doc("hello world", "0123456789", "abcdefghi"),
    _doc("hello worl\\u00e9", "\\n\\t\\u0041bcdefg", "x_y"),
    _doc("日本語の文章です東京タ", '\\/é日本語\\\\\\"ab', "zz"),
    _doc("abcdefghij日", "abcdefghi日"),
]
# Past a bound (the masks up to the failing token, which must be refused).
BEYOND = [
    _doc("ab"),  # 2 < 3
    _doc("hello world!!"),  # 13 > 12
    _doc("hello world\\u00e9x"),  # 13, an escape across the bound
    _doc("abc", "0123456789a"),  # 11 > 10
    _doc("abc", "t", "abcdefghij"),  # 10 > 9
]


# Unbounded: at least 9 items (the count stops at 9).
UNBOUNDED = r"""
root ::= "\"" ([a-z] | "\\" [n\"]){9,} "\"" | "-"
"""
UNBOUNDED_TEXTS = ['"abcdefghi"', '"abcdefgh\\n"', '"' + "ab" * 20 + '\\""']
UNBOUNDED_BEYOND = ['"abcdefgh"', '"abcdefg\\n"']


# SQL-like literals: single quotes around a count of any character but the quote and a
# newline (2 to 12), the opening quote at the end of a longer literal, the closing one at
# the start of ``"';"``; and backquotes around letters (at least 9, unbounded).
SINGLE = r"""
root ::= "x = '" [^'\n]{2,12} "';" | "y = " lit
lit ::= "`" [a-z]{9,} "`" | "'" [^'\n]{0,10} "'"
"""
# Counts of 2, 3, 11, 12 (multi-byte characters and a double quote next to the bounds);
# 0, 9, 10 for ``lit``'s; 9 and more letters.
SINGLE_TEXTS = [
    "x = 'ab';",
    "x = 'a\"é';",
    "x = 'hello worl日';",
    "x = 'hello world!';",
    "x = '日本語の文章です東京タワ';",
    "y = ''",
    "y = 'ünïcödé 9'",
    "y = '0123456789'",
    "y = `abcdefghi`",
    "y = `" + "ab" * 20 + "`",
]
SINGLE_BEYOND = [
    "x = 'a';",
    "x = 'hello world!!';",
    "x = 'hello worlé日x';",
    "x = 'ab\n';",
    "y = '0123456789a'",
    "y = `abcdefgh`",
]


def _plain_compile(grammar: str, vocabulary: Vocabulary, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``grammar`` compiled without the rewrite (its items as calls, or unrolled)."""
    with monkeypatch.context() as patch:
        patch.setattr(counted, "MIN_COUNT", 1 << 30)
        # (A distinct text: the compile cache holds the rewritten grammar's.)
        return jsonmode.compile_grammar(grammar + "\n\n", vocabulary)


def _fresh_caches() -> None:
    """Empty the process-wide walk caches: the path under test computes every walk
    (none taken from the other path's, nor from the other grammar's)."""
    for cache in (
        walk.walk_cache,
        walk.local_walk_cache,
        walk._char_counts,
        segments.segment_cache,
        rules._lexeme_infos,
        rules._count_cache,
        rules._hash_cache,
    ):
        cache.clear()


def _walk(compiled: Any, text: str, tokenizer: str) -> Iterator[tuple[Any, np.ndarray, bool]]:
    """The state and mask before each token of ``text`` (fresh engine and caches), and
    whether the token was taken; stops after the first refused one."""
    _fresh_caches()
    matcher = Matcher(MaskEngine(compiled.network, compiled.vocabulary))
    for token in _tokenizer(tokenizer).encode(text, add_special_tokens=False).ids:
        state, mask = matcher.state, matcher.mask().copy()
        taken = matcher.advance(token)
        yield state, mask, taken
        if not taken:
            return
    yield matcher.state, matcher.mask().copy(), True


def _counted_rules(compiled: Any) -> list[int]:
    network = compiled.network
    return [
        k
        for k, rule in enumerate(network.rules)
        if rule.lengths is not None and rule.counts_over is not None
    ]


def test_the_windows_become_counted_lexemes_the_engine_verifies() -> None:
    compiled = jsonmode.compile_grammar(LLAMA, _vocabulary("gpt2"))
    found = _counted_rules(compiled)
    bounds = sorted(compiled.network.rules[k].lengths for k in found)
    assert bounds == [(0, 10), (1, 9), (3, 12)]
    rules = compiled.engine._walks._rules
    for k in found:
        info = rules.info(k)
        assert info.counted is not None, compiled.network.rules[k].name
        between = info.counted.between
        chars = info.counted.chars[info.counted.plain_of == between]
        high = compiled.network.rules[k].lengths[1]
        assert sorted(chars.tolist()) == list(range(high + 1))


def test_windows_of_any_quote_become_counted_lexemes() -> None:
    """Single quotes and backquotes as well as double ones: each window a counted rule
    whose plain automaton opens and closes on its quote, verified by the engine."""
    compiled = jsonmode.compile_grammar(SINGLE, _vocabulary("gpt2"))
    found = _counted_rules(compiled)
    network = compiled.network
    assert sorted(network.rules[k].lengths for k in found) == [(0, 10), (2, 12), (9, None)]
    quotes = []
    for k in found:
        over = network.rules[k].counts_over
        assert over is not None
        (quote,) = np.flatnonzero(over.trans[0] >= 0).tolist()
        quotes.append(chr(quote))
        info = compiled.engine._walks._rules.info(k)
        assert info.counted is not None, network.rules[k].name
    assert sorted(quotes) == ["'", "'", "`"]


def test_the_rewrite_runs_where_the_text_can_hold_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A text with no ``{`` before a digit has no counted repetition: the rewrite's pass
    over its rules is skipped. Spaces inside the braces still count."""
    spaced = LLAMA.replace("char{3,12}", "char{ 3 , 12 }")
    compiled = jsonmode.compile_grammar(spaced, _vocabulary("gpt2"))
    assert len(_counted_rules(compiled)) == 3
    from jsonmode.decoding.grammars import compiled as compiled_module

    def refuse(*args: Any) -> Any:
        raise AssertionError("the rewrite ran on a text without a count")

    monkeypatch.setattr(compiled_module, "counted_repetitions", refuse)
    plain = r'root ::= "{\"a\": \"" [a-z]+ "\"}"'
    assert jsonmode.compile_grammar(plain, _vocabulary("gpt2")).accepts('{"a": "xy"}')


@pytest.mark.parametrize(
    ("compiled_path", "tokenizer"),
    [(True, "qwen2.5"), (False, "qwen2.5"), (True, "gpt2"), (False, "gpt2")],
    ids=["compiled-qwen2.5", "python-qwen2.5", "compiled-gpt2", "python-gpt2"],
)
def test_masks_equal_those_without_the_rewrite(
    monkeypatch: pytest.MonkeyPatch, compiled_path: bool, tokenizer: str
) -> None:
    """Every mask along the texts (within and past the bounds) equals the mask of the
    grammar compiled without the rewrite; the texts within are accepted whole, those
    past a bound refused where the bound is crossed."""
    if compiled_path and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    vocabulary = _vocabulary(tokenizer)
    with native.use(compiled_path):
        for grammar, within, beyond in (
            (LLAMA, TEXTS, BEYOND),
            (UNBOUNDED, UNBOUNDED_TEXTS, UNBOUNDED_BEYOND),
            (SINGLE, SINGLE_TEXTS, SINGLE_BEYOND),
        ):
            fast = jsonmode.compile_grammar(grammar, vocabulary)
            plain = _plain_compile(grammar, vocabulary, monkeypatch)
            assert _counted_rules(fast)
            assert not _counted_rules(plain)
            for text in within + beyond:
                ours = list(_walk(fast, text, tokenizer))
                theirs = list(_walk(plain, text, tokenizer))
                assert len(ours) == len(theirs), text
                for k, ((_, a, _), (_, b, _)) in enumerate(zip(ours, theirs, strict=True)):
                    assert np.array_equal(a, b), (text, k, np.flatnonzero(a != b)[:8])
                assert all(took for _, _, took in ours) == (text in within), text
                assert fast.accepts(text) == (text in within), text


@pytest.mark.parametrize("compiled_path", [True, False], ids=["compiled", "python"])
def test_masks_next_to_the_bounds_equal_the_reference_matchers(compiled_path: bool) -> None:
    """GPT-2's tokens fed one by one to the reference matcher at the states inside a
    counted window close to its bounds."""
    if compiled_path and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    vocabulary = _vocabulary("gpt2")
    grammar = 'root ::= "\\"" char{3,12} "\\""\nchar ::= [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ["n]'
    texts = ['"ab\\nd"', '"hello world"', '"hello worl\\""', '"ab"', '"hello worlds!"']
    # (Single quotes: a count of 2 to 12 of any character but the quote and a newline.)
    single = 'root ::= "\'" [^\'\\n]{2,12} "\'"'
    single_texts = ["'ab'", "'hello world!'", "'hello wor\"d'", "'a'", "'hello worlds!'"]
    checked = 0
    with native.use(compiled_path):
        for source, group in ((grammar, texts), (single, single_texts)):
            compiled = jsonmode.compile_grammar(source, vocabulary)
            assert _counted_rules(compiled)
            for text in group:
                states = list(_walk(compiled, text, "gpt2"))
                for state, mask, _ in states[1:]:
                    assert np.array_equal(mask, reference_mask(compiled, state)), (text, state)
                    checked += 1
    assert checked >= 16


AMBIGUOUS = r"""
root ::= "\"" ("a" | "aa"){1,9} "\"" " " "\"" ("\"" "x" | "b"){0,12} "\"" " " single
single ::= "'" ("'" "x" | "b"){0,12} "'" " " "'" [a-z]{0,12} "`"
"""


@pytest.mark.parametrize("compiled_path", [True, False], ids=["compiled", "python"])
def test_windows_that_only_look_counted_are_left_as_they_were(compiled_path: bool) -> None:
    """An ambiguous item (``"a" | "aa"``: items may end and go on), items that read the
    quote first (double or single) and a window whose quotes differ are not rewritten;
    their masks equal the reference matcher's."""
    if compiled_path and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    vocabulary = _vocabulary("gpt2")
    with native.use(compiled_path):
        compiled = jsonmode.compile_grammar(AMBIGUOUS, vocabulary)
        assert not _counted_rules(compiled)
        for text in [
            '"aaaaaaaaaaaaaaaaaa" "bbbbbbbbbbbb" \'bbbbbbbbbbbb\' \'ab`',
            '"a" ""x"xbb" \'\'x\'xbb\' \'`',
        ]:
            assert compiled.accepts(text), text
            for state, mask, took in list(_walk(compiled, text, "gpt2"))[-4:]:
                assert took
                assert np.array_equal(mask, reference_mask(compiled, state)), (text, state)
        assert not compiled.accepts('"' + "a" * 19 + "\" \"\" '' '`")


def _counted(low: int, high: int | None, item: str = '[a-z] | "\\\\" [nu]') -> RuleDFA:
    grammar = jsonmode.compile_grammar(
        f'root ::= "\\"" c{{{low},{high or ""}}} "\\""\nc ::= {item}'
    )
    (rule,) = [r for r in grammar.network.rules if r.counts_over is not None]
    return rule


def test_the_verifier_refuses_automata_that_are_not_the_plain_one_counted() -> None:
    rule = _counted(3, 12)
    plain = rule.counts_over
    assert plain is not None
    table = plain.trans
    found = _count_states(rule, table)
    assert found is not None
    between = int(table[0, ord('"')])
    assert sorted(found[1][found[0] == between].tolist()) == list(range(13))

    def claim(lengths: tuple[int, int | None], trans: Any = None) -> RuleDFA:
        return RuleDFA(
            "c", rule.trans if trans is None else trans, rule.calls, rule.accepting, lengths
        )

    # A wrong bound either side.
    for lengths in ((3, 11), (3, 13), (2, 12), (4, 12), (3, None)):
        assert _count_states(claim(lengths), table) is None, lengths
    # One transition moved: an item's byte leading one count too far.
    trans = rule.trans.copy()
    one = trans[trans[0, ord('"')], ord("a")]
    trans[one, ord("b")] = trans[trans[one, ord("a")], ord("a")]
    assert _count_states(claim((3, 12), trans), table) is None
    # Against another plain automaton (items of letters only; the JSON string).
    assert _count_states(rule, _counted(3, 12, "[a-z]").counts_over.trans) is None
    assert _count_states(rule, plain_string_rule().trans) is None
    # A plain automaton that closes from inside an item.
    closing = table.shape[0] - 1
    odd = table.copy()
    inside = int(table[between, ord("\\")])
    odd[inside, ord('"')] = closing
    assert _count_states(rule, odd) is None
    # Unbounded: the count stops at the lower bound.
    loose = _counted(9, None)
    assert loose.counts_over is not None
    assert _count_states(loose, loose.counts_over.trans) is not None


def test_the_rewrite_keeps_the_language() -> None:
    compiled = jsonmode.compile_grammar('root ::= "\\"" c{3,12} "\\""\nc ::= [a-z] | "\\\\" [nu]')
    for count in range(15):
        for piece in ("a", "\\n"):
            text = '"' + piece * count + '"'
            assert compiled.accepts(text) == (3 <= count <= 12), text
    assert not compiled.accepts('"abc\\"')
    assert not compiled.accepts('"abc\\x"')


@pytest.mark.parametrize("tokenizer", ["qwen2.5", "gpt2"])
def test_the_trie_replay_is_alike_in_c_and_in_python(tokenizer: str) -> None:
    """``TokenTrie.replay`` (the per-token item counts) through ``r7count_replay`` and
    through the gather per level, over real tries, from every state of the plain
    automata of the grammar's windows and of the JSON plain string."""
    if native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    vocabulary = _vocabulary(tokenizer)
    compiled = jsonmode.compile_grammar(LLAMA, vocabulary)
    engine = compiled.engine
    trie = engine._index.trie
    plains = [engine._walks._rules.plain()]
    plains += [
        rules_info.counted.plain
        for rules_info in map(engine._walks._rules.info, _counted_rules(compiled))
        if rules_info.counted
    ]
    assert len(plains) == 4
    for plain in plains:
        table, _ = plain.dead()
        weights = np.zeros(table.size, dtype=np.int16)
        weights[: plain.flat.size] = np.arange(plain.flat.size) % 3
        for state in range(plain.crossing.size + 1):
            with native.use(True):
                got = trie.replay(table, state, weights)
            with native.use(False):
                want = trie.replay(table, state, weights)
            assert np.array_equal(got[0], want[0]), state
            assert np.array_equal(got[1], want[1]), state


@pytest.mark.parametrize("tokenizer", ["qwen2.5", "gpt2"])
def test_the_counts_by_token_id_are_alike_in_c_and_in_python(tokenizer: str) -> None:
    """``Walks._char_counts`` (what every token does from a plain automaton's
    between-characters state) gathers the replay by token id with ``r7count_ids`` on the
    compiled path and with NumPy on the other: the same arrays, dtypes included, for the
    grammar's windows and the JSON plain string; tokens that begin characters, close the
    string, and die are all among them."""
    if native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    from jsonmode.decoding.engine import walk as walk_module

    vocabulary = _vocabulary(tokenizer)
    compiled = jsonmode.compile_grammar(LLAMA, vocabulary)
    engine = compiled.engine
    walks, rules = engine._walks, engine._walks._rules
    plains = [rules.plain()]
    plains += [
        info.counted.plain for info in map(rules.info, _counted_rules(compiled)) if info.counted
    ]
    assert len(plains) == 4
    for plain in plains:
        found = {}
        for path in (True, False):
            walk_module._char_counts.clear()
            with native.use(path):
                found[path] = walks._char_counts(plain)
        for name in ("chars", "closed", "at_nodes"):
            a, b = getattr(found[True], name), getattr(found[False], name)
            assert a.dtype == b.dtype, name
            assert np.array_equal(a, b), name
        chars = found[True].chars
        assert (chars > 0).any()
        assert (chars < 0).any()
        assert found[True].closed.any()
    walk_module._char_counts.clear()


def test_r7count_ids_refuses_malformed_buffers() -> None:
    kernels = native.KERNELS
    if kernels is None:
        pytest.skip("the compiled core is not loaded")
    states = np.array([5, 1, 2, 3], dtype=np.int64)
    sums = np.array([7, 8, 9, 10], dtype=np.int16)
    ends, ids = np.array([0, 1, 2], dtype=np.int64), np.array([4, 0, 2], dtype=np.int64)
    chars, closed = np.zeros(5, dtype=np.int16), np.ones(5, dtype=np.bool_)
    kernels.r7count_ids(states, sums, ends, ids, 1, 2, chars, closed)
    # (Id 4 ends in node 0, id 0 in node 1 (dead), id 2 in node 2 (closing); 1 and 3 are
    # no token of the index.)
    assert chars.tolist() == [-1, -1, 9, -1, 7]
    assert closed.tolist() == [False, False, True, False, False]
    for bad_ends, bad_ids in [(ends + 2, ids), (ends - 1, ids), (ends, ids + 1), (ends, ids - 5)]:
        chars[:] = 3
        with pytest.raises(ValueError, match="out of range"):
            kernels.r7count_ids(states, sums, bad_ends, bad_ids, 1, 2, chars, closed)
        assert chars.tolist() == [3] * 5  # (checked before anything is written)
    with pytest.raises(ValueError, match="one length"):
        kernels.r7count_ids(states, sums[:3], ends, ids, 1, 2, chars, closed)
    with pytest.raises(ValueError, match="one length"):
        kernels.r7count_ids(states, sums, ends, ids[:2], 1, 2, chars, closed)
    with pytest.raises(ValueError, match="one length"):
        kernels.r7count_ids(states, sums, ends, ids, 1, 2, chars, closed[:4])
    with pytest.raises(TypeError, match="int16"):
        kernels.r7count_ids(states, sums.astype(np.int32), ends, ids, 1, 2, chars, closed)
    chars.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):  # (NumPy refuses the buffer)
        kernels.r7count_ids(states, sums, ends, ids, 1, 2, chars, closed)


def test_the_windows_of_a_grammar_make_a_bounded_number_of_states() -> None:
    """Each window at most ``max_states`` states, all of a grammar's at most four times
    that: past it, windows stay as written (a hostile grammar of many distinct
    windows makes no more tables than that)."""
    from jsonmode.decoding.grammars import gbnf

    fields = " ".join(f'"\\"" [a-z]{{0,{40 + k}}} "\\""' for k in range(12))
    grammar = gbnf.parse(f"root ::= {fields}\n")
    rewritten = counted.counted_repetitions(grammar, 100)
    made = [name for name in rewritten.rules if name.startswith("counted:")]
    assert len(made) == 8  # (41 + ... + 48 states <= 400 < 41 + ... + 49)
    assert len(list(called(rewritten.rules["root"]))) == 8
    assert counted.counted_repetitions(grammar, 40).rules == grammar.rules  # (each > 40)
