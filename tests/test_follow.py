"""Boundary entries kept only where what follows a lexeme can read on (issue 43).

A lexeme's walk records a boundary entry at each trie node where the lexeme may end
with bytes of the token left. ``automata.follow.follow_bytes`` works out, per rule, the
bytes a parse may read first once it has returned; a lexeme whose own continuation
reads other bytes (a free-text message, an identifier, a number) walks keeping only
the entries with a child on such a byte, keyed by that set.

- The sets, on hand-made networks: calls, a callee that matches the empty text, tail
  calls, the root; unknown (None) for a network whose any-order objects make rules on
  demand, and for a fixpoint that has not settled.
- The walk (``TokenTrie.walk``, both paths, random automata over synthetic tries): its
  entries are exactly the unrestricted walk's whose node has a child on a flagged byte.
- Masks: equal with and without the restriction, and equal to the reference matcher,
  along texts of wide grammars, on both paths; the restriction did apply.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.real_vocabularies import tokenizer as _tokenizer
from support.real_vocabularies import vocabulary as _vocabulary
from support.reference_masks import reference_mask

import jsonmode
from jsonmode import native
from jsonmode.decoding.automata import follow as follow_module
from jsonmode.decoding.automata.families import TAIL
from jsonmode.decoding.automata.follow import ALL_BYTES, follow_bytes
from jsonmode.decoding.automata.rule_dfa import RuleDFA
from jsonmode.decoding.engine.cache import MaskEngine
from jsonmode.decoding.engine.rules import Rules
from jsonmode.decoding.matcher import Matcher

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import grammars_wide
from support.native_fuzz import make_automaton_walk, make_wide_walk


def _rule(name: str, states: int, edges: dict[tuple[int, str], int], **kw: Any) -> RuleDFA:
    """A rule of ``states`` states reading ``edges`` ((state, characters) -> target),
    with ``calls`` and ``accepting`` (state numbers) as given."""
    trans = np.full((states, 256), -1, dtype=np.int32)
    for (state, chars), target in edges.items():
        for char in chars:
            trans[state, ord(char)] = target
    calls = [tuple(kw.get("calls", {}).get(state, ())) for state in range(states)]
    accepting = np.zeros(states, dtype=np.bool_)
    accepting[list(kw.get("accepting", ()))] = True
    return RuleDFA(name, trans, tuple(calls), accepting)


def _set(chars: str) -> int:
    return sum(1 << ord(char) for char in set(chars))


def test_what_follows_a_call_a_nullable_callee_and_a_tail_call() -> None:
    # root: item ws ";" | "(" tail ;  item: [a-z]+ ;  ws: " "* ;  tail: (item, as a tail call)
    root = _rule(
        "root",
        5,
        {(2, ";"): 3, (0, "("): 4},
        calls={0: [(1, 1)], 1: [(2, 2)], 4: [(3, TAIL)]},
        accepting=[3],
    )
    item = _rule("item", 2, {(0, "abc"): 1, (1, "abc"): 1}, accepting=[1])
    ws = _rule("ws", 1, {(0, " "): 0}, accepting=[0])
    tail = _rule("tail", 1, {}, calls={0: [(1, TAIL)]})
    found = follow_bytes([root, item, ws, tail])
    assert found is not None
    # After item: ws's space, or (ws matching nothing) the ";"; and, through the tail
    # calls, what follows root: the end of the document, no byte.
    assert found[1] == _set(" ;")
    assert found[2] == _set(";")
    assert found[0] == 0
    assert found[3] == 0  # (tail is only ever called as root's tail: root's follow)


def test_a_callee_returning_to_a_state_that_may_end_takes_its_callers_follow() -> None:
    # outer: "<" mid ">" ;  mid: word ("," word)? — mid may end right after a word.
    outer = _rule("outer", 4, {(0, "<"): 1, (2, ">"): 3}, calls={1: [(1, 2)]}, accepting=[3])
    mid = _rule("mid", 4, {(1, ","): 2}, calls={0: [(2, 1)], 2: [(2, 3)]}, accepting=[1, 3])
    word = _rule("word", 2, {(0, "xy"): 1, (1, "xy"): 1}, accepting=[1])
    found = follow_bytes([outer, mid, word])
    assert found is not None
    assert found[2] == _set(",>")
    assert found[1] == _set(">")


def test_unknown_when_rules_are_made_on_demand_or_the_fixpoint_does_not_settle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [f"p{i}" for i in range(30)]
    wide = {
        "type": "object",
        "properties": {name: {"type": "integer"} for name in names},
        "additionalProperties": False,
    }
    compiled = jsonmode.compile_schema(wide, property_order="any")
    assert not compiled.network.rules.complete
    assert follow_bytes(compiled.network.rules) is None
    # A chain of nullable calls settles a state per round: one round is not enough.
    first = _rule("a", 3, {(2, "!"): 2}, calls={0: [(1, 1)], 1: [(1, 2)]}, accepting=[2])
    empty = _rule("b", 1, {}, accepting=[0])
    assert follow_bytes([first, empty]) is not None
    monkeypatch.setattr(follow_module, "MAX_ROUNDS", 1)
    assert follow_bytes([first, empty]) is None


def _entry_nodes_with_a_flagged_child(case: Any, walked: Any) -> list[bool]:
    """Per boundary entry of ``walked``: whether its node has a child on a flagged byte."""
    levels = case.trie.levels
    kept = []
    for depth, node in zip(walked.bounds.col.tolist(), walked.bounds.node.tolist(), strict=True):
        if depth >= len(levels):
            kept.append(True)
            continue
        level, below = levels[depth - 1], levels[depth].byte
        children = below[level.child_lo[node] : level.child_hi[node]]
        kept.append(bool(case.follow[children].any()))
    return kept


@pytest.mark.parametrize("compiled_path", [True, False], ids=["compiled", "python"])
def test_a_restricted_walk_keeps_the_entries_with_a_flagged_child(compiled_path: bool) -> None:
    if compiled_path and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    rng = random.Random(2611)
    dropped = 0
    with native.use(compiled_path):
        for k in range(300):
            case = (make_wide_walk if k % 2 else make_automaton_walk)(rng)
            case.follow = np.zeros(256, dtype=np.bool_)
            alphabet = sorted(set(case.trie.levels[0].byte.tolist()))
            for byte in rng.sample(alphabet, min(len(alphabet), rng.randint(1, 2))):
                case.follow[byte] = True
            args = (case.table, case.dead, case.crossing, case.nodes, case.states, case.reads)
            free = case.trie.walk(*args, depth=case.depth, wide=case.wide)
            kept = case.trie.walk(*args, depth=case.depth, wide=case.wide, follow=case.follow)
            assert np.array_equal(free.inside, kept.inside)
            keep = np.array(_entry_nodes_with_a_flagged_child(case, free), dtype=np.bool_)
            for mine, theirs in zip(kept.bounds.pack(), free.bounds.pack(), strict=True):
                assert mine.tolist() == theirs[keep].tolist()
            dropped += int((~keep).sum())
    assert dropped > 100  # (the cases did drop entries)


LOG = grammars_wide.WIDE["log"][0]
MESSAGE_LOG = r"""
root ::= line ("\n" line){0,3}
line ::= level " " msg
level ::= "INFO" | "WARN"
msg ::= [a-zA-Z0-9 ,.:_-]{1,60}
"""
MESSAGE_TEXTS = ["INFO server started on port 8080", "WARN disk at 91.5 percent\nINFO ok, fine"]


def _masks(compiled: Any, text: str, tokenizer: str) -> list[tuple[Any, np.ndarray]]:
    """The state and mask before each token of ``text``, then at its end, from a fresh
    mask engine."""
    engine = MaskEngine(compiled.network, compiled.vocabulary)
    matcher = Matcher(engine)
    found = []
    for token in _tokenizer(tokenizer).encode(text, add_special_tokens=False).ids:
        found.append((matcher.state, matcher.mask().copy()))
        assert matcher.advance(token), text
    found.append((matcher.state, matcher.mask().copy()))
    return found


@pytest.mark.parametrize("compiled_path", [True, False], ids=["compiled", "python"])
def test_masks_equal_those_without_the_restriction_and_the_reference(
    monkeypatch: pytest.MonkeyPatch, compiled_path: bool
) -> None:
    if compiled_path and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    from jsonmode.decoding.engine import segments, walk

    def fresh() -> None:
        for kept in (segments.segment_cache, walk.walk_cache, walk.local_walk_cache):
            kept.clear()

    restricted: list[int] = []
    real_follow = Rules.follow

    def counting(self: Rules, rule: int) -> Any:
        found = real_follow(self, rule)
        if found is not None:
            restricted.append(rule)
        return found

    vocabulary = _vocabulary("gpt2")
    cases = [(MESSAGE_LOG, text) for text in MESSAGE_TEXTS]
    cases += [(LOG, text) for text in grammars_wide.WIDE["log"][1](random.Random(5))[:1]]
    checked = 0
    with native.use(compiled_path):
        for grammar, text in cases:
            compiled = jsonmode.compile_grammar(grammar, vocabulary)
            fresh()
            monkeypatch.setattr(Rules, "follow", counting)
            with_follow = _masks(compiled, text, "gpt2")
            monkeypatch.setattr(Rules, "follow", lambda self, rule: None)
            fresh()
            without = _masks(compiled, text, "gpt2")
            monkeypatch.undo()
            for k, ((state, a), (_, b)) in enumerate(zip(with_follow, without, strict=True)):
                assert np.array_equal(a, b), (text, k)
                if k % 7 == 3:
                    assert np.array_equal(a, reference_mask(compiled, state)), (text, k)
                    checked += 1
    assert restricted, "no lexeme took the restriction"
    assert checked >= 4


def test_the_free_text_message_walks_keep_a_few_entries() -> None:
    """What the restriction is for: the log message's return entries, ~180 000 with
    Qwen2.5 at each of its states, are those followed by a newline."""
    vocabulary = _vocabulary("qwen2.5")
    compiled = jsonmode.compile_grammar(LOG, vocabulary)
    network = compiled.network
    engine = compiled.engine
    lexeme = network.names["entry"]
    follow = engine._walks._rules.follow(lexeme)
    assert follow is not None
    assert np.flatnonzero(follow.flags).tolist() == [ord("\n")]
    matcher = compiled.matcher()
    line = "2024-01-10T10:11:12.123Z INFO server started"
    text = f"{line}\n{line}"  # (the first line is the root's own; the others call entry)
    for token in _tokenizer("qwen2.5").encode(text, add_special_tokens=False).ids:
        assert matcher.advance(token)
    frames = {stack[-1] for stack in matcher.state if stack}
    ((rule, state),) = [frame for frame in frames if frame[0] == lexeme]
    walk = engine._walks.walk(rule, state)
    ((_, split),) = walk.groups
    assert 0 < split.byte.size < 2_000
    assert set(split.byte.tolist()) == {ord("\n")}
    assert ALL_BYTES & ~follow_bytes(network.rules)[lexeme]  # type: ignore[index]


def test_strings_numbers_and_keys_keep_every_entry_and_their_shared_walks() -> None:
    """A schema's lexemes return after a closing quote (reading nothing) or read a dozen
    bytes where they may return (a number): none takes the restriction, so their walks
    stay shared across schemas by their usual keys, and the network's sets (~1-4 ms for
    a big schema) are never worked out."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "score": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}},
        },
        "required": ["name"],
    }
    compiled = jsonmode.compile_schema(schema, _vocabulary("qwen2.5"))
    rules = compiled.engine._walks._rules
    assert rules.lexemes
    assert all(rules.follow(rule) is None for rule in rules.lexemes)
    assert rules._follow_sets is False


@pytest.mark.parametrize("compiled_path", [True, False], ids=["compiled", "python"])
def test_a_count_that_may_end_anywhere_is_walked_by_runs_as_from_segments(
    compiled_path: bool,
) -> None:
    """A message's count states cross inside their run, which a run walk refuses
    unless what follows shares no byte with the class: then its entries (the parents
    of the run ends on a following byte) and inside tokens are the segments walk's,
    in the same order."""
    if compiled_path and native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    from support.walks import walk_sets

    vocabulary = _vocabulary("qwen2.5")
    taken = newly = 0
    with native.use(compiled_path):
        for grammar in (LOG, MESSAGE_LOG):
            engine = jsonmode.compile_grammar(grammar, vocabulary).engine
            walks, rules = engine._walks, engine._walks._rules
            for rule in rules.lexemes:
                follow = rules.follow(rule)
                info = rules.info(rule)
                for state in range(info.crossing.size):
                    if follow is None:
                        continue
                    found = walks._run_walk(info, state, follow)
                    if found is None:
                        continue
                    taken += 1
                    newly += walks._run_walk(info, state) is None
                    plain = walks._compute_walk(info, state, follow)
                    assert walk_sets(found, vocabulary.size) == walk_sets(plain, vocabulary.size), (
                        grammar,
                        state,
                    )
                    for ours, theirs in zip(found.bounds.pack(), plain.bounds.pack(), strict=True):
                        assert np.array_equal(ours, theirs), (grammar, state)
    assert taken >= 50
    assert newly >= 50  # (refused without the follow set: a boundary inside the run)
