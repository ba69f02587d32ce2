"""Quoted counted repetitions of a GBNF grammar as counted lexemes.

llama.cpp's json-schema-to-grammar writes a string of at most ``n`` characters as
``"\\"" char{m,n} "\\""`` with ``char`` a rule: too big to inline ``n`` times, the
repetition stays ``n`` calls in its caller, and every count is a new state whose first
mask walks the whole vocabulary (~15 ms with Qwen2.5 where almost every token is
allowed). :func:`counted_repetitions` makes each such window a rule of its own, a
lexeme whose automaton is built directly as the plain ``q X* q`` (``q`` the quote: any
one byte both sides, ``"`` or SQL's ``'`` say) with a count of the items begun
(``RuleDFA.lengths`` and ``counts_over``): the mask engine walks its states between
items as the plain automaton's walk less the tokens beyond the count's budget (a few
vector operations; see ``engine.rules._count_states``, which verifies every transition
of the automaton against that pairing before relying on it, and refuses anything else).

Only items whose automaton ends every item cleanly qualify: ``X`` reads no empty
string, no raw quote first, cannot come back to its start, and stops at every accepting
state (then ``X{m,n}`` splits into items in one way only, and ``X*`` returns between
items after each). Anything else is left as it was. Language-preserving: a call to a
call-free rule is the rule's text.

Cost: per window, the item's automaton (a few states) and two tables written by vector
operations, the counted one ``(n + 1) + n * |X| + 2`` states (about 600 for llama.cpp's
``char{1,40}``), each written once, already quoted (the rule's own table: the network
takes it as it is); checks the compile's deadline per window. Thread-safe (pure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from jsonmode.budget import checkpoint
from jsonmode.decoding.automata.network import build_network
from jsonmode.decoding.ir import (
    Alt,
    Call,
    Expr,
    Grammar,
    Lex,
    Lit,
    Members,
    Rep,
    Seq,
    called,
    nodes,
)
from jsonmode.errors import JsonModeError
from jsonmode.lru import Lru
from jsonmode.regex import ByteDFA

__all__ = ["MIN_COUNT", "counted_repetitions"]

#: A repetition counted past this many items (``X{m,n}`` with ``n`` over it, or
#: ``X{m,}`` with ``m`` over it) between two quotes becomes a counted lexeme; smaller ones
#: are cheap as they are.
MIN_COUNT = 8
# The windows of one grammar make at most this many times ``max_states`` states in all
# (each at most ``max_states``); past it, windows stay as written.
_TOTAL_STATES = 4
# The automata of each counted window (or None: it does not qualify), process-wide by its
# label and state budget: grammars that share a window build it once.
_BODIES: Lru[tuple[str, int], tuple[tuple[ByteDFA, ByteDFA] | None]] = Lru(16 << 20)


def counted_repetitions(grammar: Grammar, max_states: int) -> Grammar:
    """``grammar`` with every ``q X{m,n} q`` window of a sequence (``q`` one byte, the
    same both sides, that ends the text before and begins the text after; ``X`` call-free,
    or a call to a call-free rule; ``n`` or, unbounded, ``m`` over :data:`MIN_COUNT`)
    replaced by a call to a new counted lexeme rule (one per distinct window), when
    ``X`` ends its items cleanly (see the module) and the lexeme has at most
    ``max_states`` states (the grammar's, at most ``4 * max_states`` in all). Rules no
    longer called are dropped. The grammar itself when nothing changes."""
    made = _Made()
    rules = dict(grammar.rules)
    changed = False
    for name, expr in grammar.rules.items():
        checkpoint()
        new = _rewrite(expr, grammar, made, max_states)
        if new is not expr:
            rules[name] = new
            changed = True
    if not changed:
        return grammar
    for rule, body in made.rules.values():
        rules[rule] = body
    kept = {grammar.root: rules[grammar.root]}
    todo = [grammar.root]
    while todo:
        for callee in called(kept[todo.pop()]):
            if callee in rules and callee not in kept:
                kept[callee] = rules[callee]
                todo.append(callee)
    return Grammar(grammar.root, kept)


def _rewrite(expr: Expr, grammar: Grammar, made: _Made, max_states: int) -> Expr:
    """``expr`` with its windows replaced (the node itself when none is). Recurses into
    the expression (the GBNF reader and the inliner bound its depth)."""
    if isinstance(expr, Alt):
        options = [_rewrite(option, grammar, made, max_states) for option in expr.options]
        same = all(a is b for a, b in zip(options, expr.options, strict=True))
        return expr if same else Alt(tuple(options))
    if isinstance(expr, Rep):
        item = _rewrite(expr.item, grammar, made, max_states)
        return expr if item is expr.item else Rep(item, expr.low, expr.high)
    if not isinstance(expr, Seq):
        return expr
    items = [_rewrite(item, grammar, made, max_states) for item in expr.items]
    out: list[Expr] = []
    index = 0
    changed = any(a is not b for a, b in zip(items, expr.items, strict=True))
    while index < len(items):
        item = items[index]
        window = items[index : index + 3]
        if (
            len(window) == 3
            and isinstance(item, Lit)
            and item.data
            and isinstance(window[1], Rep)
            and isinstance(window[2], Lit)
            and window[2].data[:1] == item.data[-1:]
        ):
            quote = item.data[-1]
            rule = _counted_rule(window[1], quote, grammar, made, max_states)
            if rule is not None:
                if len(item.data) > 1:
                    out.append(Lit(item.data[:-1]))
                out.append(Call(rule))
                rest = window[2].data[1:]
                # (The closing text's rest may open the next window.)
                items[index + 2] = Lit(rest) if rest else Seq(())
                index += 2
                if not rest:
                    index += 1
                changed = True
                continue
        if not (isinstance(item, Seq) and not item.items):
            out.append(item)
        index += 1
    if not changed:
        return expr
    return out[0] if len(out) == 1 else Seq(tuple(out))


def _counted_rule(
    rep: Rep, quote: int, grammar: Grammar, made: _Made, max_states: int
) -> str | None:
    """The name of the counted lexeme rule for ``q rep q`` (``q`` the byte ``quote``;
    made on first use), or None when ``rep`` does not qualify."""
    low, high = rep.low, rep.high
    if (high if high is not None else low) <= MIN_COUNT or (high is not None and low > high):
        return None
    item = rep.item
    if isinstance(item, Call):
        body = grammar.rules.get(item.rule)
        if body is None:
            return None
        item = body
    if any(True for _ in called(item)) or any(isinstance(n, Members) for n in nodes(item)):
        return None
    label = f"counted {Lit(bytes([quote]))} {Rep(item, low, high)}"
    known = made.rules.get(label)
    if known is not None:
        return known[0]
    bodies = _BODIES.get((label, max_states))
    if bodies is None:
        checkpoint()
        try:
            network = build_network(Grammar("item", {"item": item}), max_states=max_states)
        except JsonModeError:
            return None
        x = network.rules[network.root]
        bodies = (_quoted_tables(x.trans, x.accepting, low, high, max_states, quote),)
        size = 256 + sum(dfa.trans.nbytes for dfa in bodies[0] or ())
        _BODIES.put((label, max_states), bodies, size)
    if bodies[0] is None:
        return None
    quoted, plain = bodies[0]
    if made.states + quoted.n_states > _TOTAL_STATES * max_states:
        return None  # (the grammar's windows made enough states: the rest stay as written)
    made.states += quoted.n_states
    name = f"counted:{len(made.rules)}"
    while name in grammar.rules:
        name += "'"
    # (The whole quoted window, one lexeme: the network takes its table as it is.)
    made.rules[label] = (name, Lex(label, quoted, (low, high), plain=plain))
    return name


@dataclass
class _Made:
    """The counted lexeme rules one rewrite made: by window label, the rule's name and
    expression; and their states in all."""

    rules: dict[str, tuple[str, Expr]] = field(default_factory=dict)
    states: int = 0


def _quoted_tables(
    trans: npt.NDArray[np.int32],
    accepting: npt.NDArray[np.bool_],
    low: int,
    high: int | None,
    max_states: int,
    quote: int,
) -> tuple[ByteDFA, ByteDFA] | None:
    """The automata of ``q X{low,high} q`` and of ``q X* q`` (``q`` the byte ``quote``)
    from ``X``'s automaton (start 0), built directly in the layout of
    :func:`~jsonmode.decoding.automata.network.quoted_rule`: state 0 before the opening
    quote, the body's states one up, the state after the closing quote last (the only
    accepting one). ``X*``'s body states are the between-items state and ``X``'s states
    inside an item; ``X{low,high}``'s are ``(items begun, that state)``. None unless
    ``X`` ends its items cleanly (see the module) or when the counted automaton would
    have more than ``max_states`` states. Each table is written once (a fresh table's
    first write costs most: ~1 ms a megabyte where pages are new)."""
    accepting = np.asarray(accepting, dtype=np.bool_)
    trans = np.asarray(trans, dtype=np.int32)
    if accepting[0] or (trans == 0).any() or trans[0, quote] >= 0:
        return None
    live = trans >= 0
    ends = live & accepting[np.maximum(trans, 0)]
    if (live[accepting]).any() or not ends[0].any():
        return None  # (an item may go on past its end, or none is a byte alone)
    inner = np.flatnonzero(~accepting)[1:]  # (the states inside an item)
    width = inner.size
    top = high if high is not None else low
    count = (top + 1) + top * width  # (the body's states; the rule has two more)
    if count + 2 > max_states:
        return None
    position = np.full(trans.shape[0], -1, dtype=np.int32)
    position[inner] = np.arange(width, dtype=np.int32)
    spot = position[np.maximum(trans, 0)]
    # q X* q: 0 before the quote, 1 between items, 2 + position inside one, last closed.
    plain_body = np.where(live, np.where(ends, 1, 2 + spot), -1).astype(np.int32)
    plain = np.full((width + 3, 256), -1, dtype=np.int32)
    plain[0, quote] = 1
    plain[1] = plain_body[0]
    plain[2 : 2 + width] = plain_body[inner]
    plain[1, quote] = width + 2
    # q X{low,high} q: k items begun, between items at 1 + k, inside one at
    # 1 + top + 1 + (k - 1) * width + position: a byte read with k begun leads to
    # ``ending + k * step`` (an item's end: 1 + k, between items; else inside it).
    closed = count + 1
    table = np.empty((count + 2, 256), dtype=np.int32)
    # (A dead entry: -1 whatever k, as -1 + k * 0.)
    ending = np.where(live, np.where(ends, 1, 2 + top - width + spot), -1).astype(np.int32)
    step = np.where(live, np.where(ends, 1, width), 0).astype(np.int32)
    begun = np.arange(1, top + 1, dtype=np.int32)[:, None]
    table[0] = -1
    table[0, quote] = 1
    # Between items with k begun (k < top): a byte begins item k + 1.
    table[1 : top + 1] = ending[0] + begun * step[0]
    # At top: an item leaves the count at top (no upper bound), or none begins.
    table[top + 1] = ending[0] + top * step[0] if high is None else -1
    # The closing quote, from between items with at least ``low`` begun (X never reads
    # it first: those entries were dead).
    table[1 + low : top + 2, quote] = closed
    table[closed] = -1
    # Inside an item, written in place (two passes over the biggest part).
    block = table[top + 2 : closed].reshape(top, width, 256)
    np.multiply(begun[:, :, None], step[inner][None], out=block)
    block += ending[inner]
    table_accepting = np.zeros(count + 2, dtype=np.bool_)
    table_accepting[closed] = True
    plain_accepting = np.zeros(width + 3, dtype=np.bool_)
    plain_accepting[-1] = True
    return _dfa(table, table_accepting), _dfa(plain, plain_accepting)


def _dfa(table: npt.NDArray[np.int32], accepting: npt.NDArray[np.bool_]) -> ByteDFA:
    table.flags.writeable = False
    accepting.flags.writeable = False
    return ByteDFA(0, accepting, table)
