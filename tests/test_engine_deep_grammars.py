"""A C-like grammar (the shape of llama.cpp's grammars/c.gbnf): deep parse stacks with
white space before expressions, where every identifier and number token may start.

- After ``x = `` the stacks that read an identifier's letters (``factor``'s,
  ``funcCall``'s, through ``expression`` and ``term``) sit five to a node all over the
  " word" subtree of the vocabulary. The compiled miss walks that subtree with the
  stacks alive at a node as one set, the set after a byte worked out once per walk
  (csrc/r7deep_sets.c); the Python path steps every stack on its own (the reference).
- A structural rule's narrow walk over an identifier's tokens leaves hundreds of boundary
  entries (its wide walk, past 20 000 live tokens, ~66 000); the compiled narrow walk sorts
  them by position with a stable radix sort (csrc/r6narrow_cut.c), as
  ``segments._trie_walk`` + ``_split`` order them.

Checked: every mask along C texts on the compiled path equals the Python path's; the
widest and deepest states' masks equal the reference matcher's, token by token, on
GPT-2 and Qwen2.5, on both paths; the compiled narrow walk of the grammar's states equals
its Python form on the real vocabulary (positions past 2 ** 11: several radix passes); and
JSON in GBNF near a low nesting bound, whose stacks there are walked whole (by sets of
stacks on the compiled path), masks the same on both paths.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.real_vocabularies import tokenizer as _tokenizer
from support.real_vocabularies import vocabulary as _vocabulary
from support.reference_masks import reference_mask

import jsonmode
from jsonmode import native
from jsonmode.decoding.engine import segments
from jsonmode.decoding.engine.cache import MaskEngine
from jsonmode.decoding.matcher import Matcher

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import grammars

STATEMENT = " | ".join(
    [
        '( dataType identifier ws "=" ws expression ";" )',
        '( identifier ws "=" ws expression ";" )',
        '( identifier ws "(" argList? ")" ";" )',
        '( "return" ws expression ";" )',
        '( "while" "(" condition ")" "{" statement* "}" )',
        '( "if" "(" condition ")" "{" statement* "}" ("else" "{" statement* "}")? )',
        "singleLineComment",
        "multiLineComment",
    ]
)
# (llama.cpp's grammars/c.gbnf, its statement rule on one line.)
C = r"""
root ::= (declaration)*
declaration ::= dataType identifier "(" parameter? ")" "{" statement* "}"
dataType ::= "int" ws | "float" ws | "char" ws
identifier ::= [a-zA-Z_] [a-zA-Z_0-9]*
parameter ::= dataType identifier
{statement}
condition ::= expression relationOperator expression
relationOperator ::= ("<=" | "<" | "==" | "!=" | ">=" | ">")
expression ::= term (("+" | "-") term)*
term ::= factor(("*" | "/") factor)*
factor ::= identifier | number | unaryTerm | funcCall | parenExpression
unaryTerm ::= "-" factor
funcCall ::= identifier "(" argList? ")"
parenExpression ::= "(" ws expression ws ")"
argList ::= expression ("," ws expression)*
number ::= [0-9]+
singleLineComment ::= "//" [^\n]* "\n"
multiLineComment ::= "/*" ( [^*] | ("*" [^/]) )* "*/"
ws ::= ([ \t\n]+)
""".replace("{statement}", "statement ::= " + STATEMENT)
TEXTS = [
    "int main(){int x = 3;while(x<10){x = x+1;}return x;}",
    "float f(int a){// comment here\nreturn a*2;}",
    "char g(){/* multi * line */ y = h(1, 2);}",
    "int h(int n){if(n<2){return n;}return h(n-1)+ h( n -2 );}",
]
# Prefixes whose state is wide and deep: white space (or an operator) before an
# expression, an open condition, an identifier that may go on or end.
DEEP = ["int main(){int x = ", "int main(){int x = 3;while(x", "int h(int n){return h("]


def _engine(compiled: Any) -> MaskEngine:
    """A fresh mask engine (its own caches, its own stack numbering: compiled or not as
    ``native.use`` says now) with ``compiled.engine``'s nesting bound."""
    return MaskEngine(
        compiled.network,
        compiled.vocabulary,
        max_depth=compiled.options.max_nesting_depth,
        levels=compiled.depth_in_levels,
    )


def _masks(compiled: Any, text: str, tokenizer: str) -> Iterator[tuple[Any, np.ndarray]]:
    """The state and mask before each token of ``text`` (as far as the grammar takes
    it), from a fresh mask engine."""
    engine = _engine(compiled)
    matcher = Matcher(engine)
    for token in _tokenizer(tokenizer).encode(text, add_special_tokens=False).ids:
        yield matcher.state, matcher.mask().copy()
        if not matcher.advance(token):
            return
    yield matcher.state, matcher.mask().copy()


def _state_after(compiled: Any, prefix: str, tokenizer: str) -> Any:
    matcher = compiled.matcher()
    for token in _tokenizer(tokenizer).encode(prefix, add_special_tokens=False).ids:
        assert matcher.advance(token), prefix
    return matcher.state


def _compiled_core() -> None:
    if native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")


@pytest.mark.parametrize("tokenizer", ["qwen2.5", "gpt2"])
def test_every_mask_along_c_texts_is_the_same_on_both_paths(tokenizer: str) -> None:
    _compiled_core()
    compiled = jsonmode.compile_grammar(C, _vocabulary(tokenizer))
    wide = 0
    for text in TEXTS:
        with native.use(True):
            fast = list(_masks(compiled, text, tokenizer))
        with native.use(False):
            slow = list(_masks(compiled, text, tokenizer))
        assert len(fast) == len(slow) > 5, text
        for k, ((state, a), (again, b)) in enumerate(zip(fast, slow, strict=True)):
            assert state == again, (text, k)
            assert np.array_equal(a, b), (text, k, int(a.sum()), int(b.sum()))
            wide += int(a.sum()) > compiled.vocabulary.size // 5
    assert wide >= 6  # (the states after white space allow every " word" token)


@contextlib.contextmanager
def _levels_only(vocabulary: Any) -> Iterator[None]:
    """Within the block, the vocabulary's compiled trie without its preorder layout: the
    compiled walks by sets of stacks (and the wide walks) go level by level."""
    engine = MaskEngine(jsonmode.compile_grammar('root ::= "a"', vocabulary).network, vocabulary)
    tokens = engine._index.trie
    kept = tokens.compiled(native.KERNELS)
    assert kept.preorder  # (the layout the walks read by default)
    tokens._native = native.KERNELS.Trie(
        [(lv.lo, lv.hi, lv.term, lv.child_lo, lv.child_hi, lv.byte) for lv in tokens.levels],
        preorder=False,
    )
    try:
        yield
    finally:
        tokens._native = kept


@pytest.mark.parametrize("tokenizer", ["qwen2.5", "gpt2"])
def test_walks_by_sets_of_stacks_read_the_trie_in_preorder_as_by_levels(tokenizer: str) -> None:
    """The compiled miss walks a big boundary group (white space before an expression:
    every " word" token) by sets of stacks over the trie laid out in preorder
    (csrc/r7deep_sets.c); over the levels (a trie without that layout) it reads the
    same tokens: every mask along the C texts, and along JSON near a low nesting bound
    (whole stacks walked by sets from the first level), from fresh engines."""
    _compiled_core()
    vocabulary = _vocabulary(tokenizer)
    cases = [(jsonmode.compile_grammar(C, vocabulary), text) for text in TEXTS[:2]] + [
        (
            jsonmode.compile_grammar(grammars.JSON_GBNF, vocabulary, max_nesting_depth=5),
            '[[{"a": [[1, 2]]}, [[["x"]]]]]',
        )
    ]
    wide = 0
    for compiled, text in cases:
        with native.use(True):
            fast = list(_masks(compiled, text, tokenizer))
            with _levels_only(vocabulary):
                levels = list(_masks(compiled, text, tokenizer))
        assert len(fast) == len(levels) > 5, text
        for k, ((state, a), (again, b)) in enumerate(zip(fast, levels, strict=True)):
            assert state == again, (text, k)
            assert np.array_equal(a, b), (text, k, int(a.sum()), int(b.sum()))
            wide += int(a.sum()) > vocabulary.size // 5
    assert wide >= 4


@pytest.mark.parametrize("tokenizer", ["gpt2", "qwen2.5"])
@pytest.mark.parametrize("compiled_path", [True, False], ids=["compiled", "python"])
def test_deep_masks_equal_the_reference_matcher(compiled_path: bool, tokenizer: str) -> None:
    """Every token fed whole to the reference matcher (seconds per mask): the states
    where the stacks are deepest and the masks widest."""
    if compiled_path:
        _compiled_core()
    compiled = jsonmode.compile_grammar(C, _vocabulary(tokenizer))
    prefixes = DEEP if tokenizer == "gpt2" else DEEP[:2]
    for prefix in prefixes:
        state = _state_after(compiled, prefix, tokenizer)
        with native.use(compiled_path):
            mask = _engine(compiled).mask(state)
        expected = reference_mask(compiled, state)
        assert np.array_equal(mask, expected), (prefix, int(mask.sum()), int(expected.sum()))
        assert expected.sum() > compiled.vocabulary.size // 5, prefix


def test_the_narrow_walks_of_the_c_states_equal_their_python_form() -> None:
    """``r6narrow_walk_cut`` (its radix sort over positions up to ~150 000, for walks of
    more than 64 entries) against
    ``segments._trie_walk`` then ``_split`` on Qwen2.5, for every state of the grammar's
    rules: the same positions and the same entries in the same order."""
    _compiled_core()
    compiled = jsonmode.compile_grammar(C, _vocabulary("qwen2.5"))
    engine = compiled.engine
    index = engine._index
    rules = engine._walks._rules
    walked = entries = 0
    for rule in range(len(compiled.network.rules)):
        info = rules.info(rule)
        for state in range(info.crossing.size):
            firsts, afters, _ = segments._live_keys(index, info, state)
            missing = list(zip(firsts, afters, strict=True))
            if not missing or segments._wide(index, info, missing):
                continue
            found, cut = segments._walk_cut(index, info, missing, firsts)
            with native.use(False):
                reference = segments._trie_walk(index, info, missing, False)
            assert np.array_equal(found.inside, reference.inside), (rule, state)
            for a, b in zip(found.bounds.pack(), reference.bounds.pack(), strict=True):
                assert np.array_equal(a, b), (rule, state)
            assert list(cut) == segments._split(index, reference, firsts), (rule, state)
            walked += 1
            if found.bounds.size > 64:  # (past the insertion sort's: radix-sorted)
                entries = max(entries, int(found.bounds.lo.max()))
    assert walked >= 10
    assert entries > 1 << 11  # (positions past one radix pass's 11 bits)


@pytest.mark.parametrize("depth", [5, 6])
@pytest.mark.parametrize("tokenizer", ["gpt2", "qwen2.5"])
def test_masks_near_the_nesting_bound_are_the_same_on_both_paths(
    tokenizer: str, depth: int
) -> None:
    """JSON in GBNF nested up to a low ``max_nesting_depth``: a stack whose context is
    near the bound is walked whole through the token trie (``boundary.direct`` with
    ``whole``; on the compiled path by sets of stacks), not by its rule's walk."""
    _compiled_core()
    vocabulary = _vocabulary(tokenizer)
    compiled = jsonmode.compile_grammar(grammars.JSON_GBNF, vocabulary, max_nesting_depth=depth)
    text = '[[{"a": [[1, 2]]}, [[["x"]]]]]'
    with native.use(True):
        engine = _engine(compiled)
        matcher = Matcher(engine)
        fast = []
        for token in _tokenizer(tokenizer).encode(text, add_special_tokens=False).ids:
            fast.append((matcher.state, matcher.mask().copy()))
            assert matcher.advance(token), text
        assert any(engine._stacks.near), "no context came near the nesting bound"
    with native.use(False):
        slow = _engine(compiled)
        for k, (state, mask) in enumerate(fast):
            assert np.array_equal(mask, slow.mask(state)), (k, int(mask.sum()))
    if tokenizer == "gpt2":  # (the widest state, token by token)
        state, mask = max(fast, key=lambda pair: int(pair[1].sum()))
        assert np.array_equal(mask, reference_mask(compiled, state))
