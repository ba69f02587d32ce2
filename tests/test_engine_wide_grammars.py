"""Grammars whose masks allow most of the vocabulary at once: big boundary groups
finished in the token trie, and the walks of a root that no rule calls.

- A group of more than ``boundary._TRIE_RESTS`` tokens whose rests its stacks can
  read (``ws ::= [ \\t\\n]*`` before an identifier: every " word" token) is finished in
  the token trie from its entries' children (``group_starts``,
  ``Stacks.finish_in_trie``, the compiled miss's starts) instead of through a trie of
  its rests. Checked: every mask along real texts equals the masks with every group
  finished through rests, and with every group finished in the trie, on both paths;
  and a few of them against the reference matcher, token by token.
- A root that no rule calls crosses only where it calls (``Rules.signature``): a token
  going on past its end is never allowed, so its walks list no boundary there (a
  ``msg ::= [a-z ]{1,60}`` at the end of a root made every position of every such token
  one). Checked: such a root's walk has no boundary group, its masks equal the
  reference matcher's, and a root that calls itself keeps its crossing states.
"""

from __future__ import annotations

import random
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
from jsonmode.decoding.engine import boundary
from jsonmode.decoding.engine.cache import MaskEngine
from jsonmode.decoding.engine.facts import facts
from jsonmode.decoding.matcher import Matcher

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import grammars_more
import grammars_wide

# Assignments with identifiers after optional white space: the stacks after ``ws`` read
# an identifier's letters, so a boundary group holds every " word" token.
CODE = r"""
root ::= stmt+
stmt ::= ident ws "=" ws expr ";" ws
expr ::= term (ws [-+*/] ws term)*
term ::= ident | [0-9]+ | "(" ws expr ws ")" | ident "(" ws expr ws ")"
ident ::= [a-zA-Z_] [a-zA-Z0-9_]{0,15}
ws ::= [ \t\n]*
"""
CODE_TEXTS = ["x = 1;", "total = (a + b1) * f( y );\nz=w;"]
# A log line: the message runs to the end of the root, which nothing calls.
LOG = r"""
root ::= level " " msg ("\n" level " " msg){0,3}
level ::= "INFO" | "WARN"
msg ::= [a-zA-Z0-9 ,.:_-]{1,60}
"""
LOG_TEXTS = ["INFO server started on port 8080", "WARN disk at 91.5 percent\nINFO ok, fine"]


def _masks(compiled: Any, text: str, tokenizer: str) -> Iterator[tuple[Any, np.ndarray]]:
    """The state and mask before each token of ``text``, then at its end, from a
    fresh mask engine (its own caches: nothing is taken from another engine's)."""
    engine = MaskEngine(compiled.network, compiled.vocabulary)
    matcher = Matcher(engine)
    for token in _tokenizer(tokenizer).encode(text, add_special_tokens=False).ids:
        yield matcher.state, matcher.mask().copy()
        assert matcher.advance(token), text
    yield matcher.state, matcher.mask().copy()


@pytest.mark.parametrize(
    ("compiled_path", "tokenizer"),
    [(True, "qwen2.5"), (True, "llama-3"), (False, "qwen2.5")],
    ids=["compiled-qwen2.5", "compiled-llama-3", "python-qwen2.5"],
)
def test_big_groups_finish_alike_in_the_trie_and_through_rests(
    monkeypatch: pytest.MonkeyPatch, compiled_path: bool, tokenizer: str
) -> None:
    if compiled_path and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    compiled = jsonmode.compile_grammar(CODE, _vocabulary(tokenizer))
    calls = {"trie": 0}
    real = boundary.group_starts

    def counting(*args: Any) -> Any:
        found = real(*args)
        calls["trie"] += found is not None
        return found

    def count() -> None:
        monkeypatch.setattr(boundary, "group_starts", counting)

    count()
    with native.use(compiled_path):
        for text in CODE_TEXTS:
            default = [mask for _, mask in _masks(compiled, text, tokenizer)]
            assert calls["trie"], "no group was big enough to be finished in the trie"
            monkeypatch.setattr(boundary, "_TRIE_RESTS", 1 << 62)  # every group: rests
            rests = [mask for _, mask in _masks(compiled, text, tokenizer)]
            monkeypatch.setattr(boundary, "_TRIE_RESTS", -1)  # every group: the trie
            trie = [mask for _, mask in _masks(compiled, text, tokenizer)]
            monkeypatch.undo()
            count()
            for k, (a, b, c) in enumerate(zip(default, rests, trie, strict=True)):
                assert np.array_equal(a, b), (text, k)
                assert np.array_equal(b, c), (text, k)


@pytest.mark.parametrize("compiled_path", [True, False], ids=["compiled", "python"])
def test_wide_masks_equal_the_reference_matcher(compiled_path: bool) -> None:
    """GPT-2's 50 257 tokens fed one by one to the reference matcher, at the states
    where most tokens are allowed (the big groups, the uncalled root's message)."""
    if compiled_path and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    vocabulary = _vocabulary("gpt2")
    checked = 0
    with native.use(compiled_path):
        for grammar, text in ((CODE, CODE_TEXTS[1]), (LOG, LOG_TEXTS[0])):
            compiled = jsonmode.compile_grammar(grammar, vocabulary)
            wide = [
                (state, mask)
                for state, mask in _masks(compiled, text, "gpt2")
                if mask.sum() > vocabulary.size // 4
            ]
            assert wide, grammar
            for state, mask in wide[:3]:
                assert np.array_equal(mask, reference_mask(compiled, state)), (grammar, state)
                checked += 1
    assert checked >= 4


def test_an_uncalled_roots_walks_list_no_boundary_at_its_end() -> None:
    vocabulary = _vocabulary("qwen2.5")
    compiled = jsonmode.compile_grammar(LOG, vocabulary)
    engine = compiled.engine
    network = compiled.network
    root = network.rules[network.root]
    assert network.rules.complete
    # The message's states accept (the document may end there) and call nothing.
    accepting_only = root.accepting & ~np.array([bool(c) for c in root.calls])
    assert accepting_only.any()
    info = engine._walks._rules.info(network.root)
    assert not info.crossing[accepting_only].any()
    assert facts(root).crossing[accepting_only].all()  # (the stacks still cross there)
    matcher = Matcher(engine)
    for token in _tokenizer("qwen2.5").encode("INFO server", add_special_tokens=False).ids:
        assert matcher.advance(token)
    ((frame,),) = [stack[-1:] for stack in matcher.state if stack]
    assert frame[0] == network.root
    walk = engine._walks.walk(*frame)
    assert walk.groups == ()
    mask = matcher.mask()
    assert mask.sum() > 40_000  # (every word-like token may go on with the message)


def test_a_root_that_calls_itself_keeps_its_crossing_states() -> None:
    vocabulary = _vocabulary("gpt2")
    compiled = jsonmode.compile_grammar('root ::= "(" root ")" | [a-z]{1,5}', vocabulary)
    network = compiled.network
    root = network.rules[network.root]
    info = compiled.engine._walks._rules.info(network.root)
    assert np.array_equal(info.crossing, facts(root).crossing)
    matcher = compiled.matcher()
    for data in (b"(", b"(", b"ab"):
        token = next(t for t in range(vocabulary.size) if vocabulary.token_bytes(t) == data)
        assert matcher.advance(token)
        assert np.array_equal(matcher.mask(), reference_mask(compiled, matcher.state))


@pytest.mark.parametrize("name", sorted(grammars_wide.WIDE))
def test_the_wide_benchmarks_texts_are_in_their_grammars(name: str) -> None:
    """bench/grammars.py --set wide walks these texts token by token: each must be
    accepted whole, and (what makes the set wide) some mask along it must allow a
    quarter of the vocabulary."""
    gbnf, texts = grammars_wide.WIDE[name]
    vocabulary = _vocabulary("qwen2.5")
    compiled = jsonmode.compile_grammar(gbnf, vocabulary)
    widest = 0
    for text in texts(random.Random(2025)):
        assert compiled.accepts(text), text
        for _, mask in _masks(compiled, text, "qwen2.5"):
            widest = max(widest, int(mask.sum()))
    assert widest > vocabulary.size // 4


@pytest.mark.parametrize("name", sorted(grammars_more.MORE))
def test_the_more_sets_texts_are_in_their_grammars(name: str) -> None:
    """bench/grammars.py --set more walks these texts: each must be accepted whole (a
    text the grammar refuses would time nothing past its first bad token)."""
    gbnf, texts = grammars_more.MORE[name]
    compiled = jsonmode.compile_grammar(gbnf)
    for text in texts(random.Random(2025)):
        assert compiled.accepts(text), text
