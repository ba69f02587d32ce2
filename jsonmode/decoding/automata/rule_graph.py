"""The call graph of a grammar's rules: what reaches what, which rules can match the
empty text, left recursion, and tail calls made loops.

Used by the GBNF reader (:mod:`jsonmode.decoding.grammars.gbnf`: unreachable rules, left
recursion, tail loops) and by :mod:`jsonmode.decoding.grammars.compiled` (inlining rules that
cannot recurse: :func:`components`). Every whole-grammar function is linear in the size
of the rules (the nullable fixpoint and the strongly connected components included),
iterative over the rules (no chain of rules, however long, can exhaust Python's stack
here; only :func:`tail_loop` and the left-call walk recurse, into one rule's expression,
whose depth the reader bounds), and checks the compile's deadline
(:func:`~jsonmode.budget.checkpoint`) as it goes.
"""

from __future__ import annotations

from collections.abc import Mapping

from jsonmode.budget import checkpoint
from jsonmode.decoding.ir import (
    EMPTY,
    Alt,
    Call,
    Expr,
    Lex,
    Lit,
    Members,
    Rep,
    Seq,
    alt,
    called,
    seq,
)

__all__ = [
    "calls",
    "components",
    "left_cycle",
    "nullable_rules",
    "reachable",
    "show_cycle",
    "tail_loop",
]


# -- tail recursion ---------------------------------------------------------------------


def tail_loop(name: str, expr: Expr) -> Expr:
    """``expr`` (rule ``name``'s body) with its tail calls to itself made a loop.

    A rule whose every call to itself is its last step (``list ::= item "," list |
    item``, ``ws ::= ([ \\t] ws)?``) reads ``L name | E`` where neither ``L`` nor ``E``
    calls ``name``: exactly the language ``L* E``. The matcher's call stack is bounded
    (64 deep), where llama.cpp pops a rule before its tail call; as a loop, the
    repetition has no bound. Anything else is returned unchanged.
    """
    if name not in _calls_set(expr):
        return expr
    parts = _split_tail(name, expr)
    if parts is None:
        return expr
    loop, exit_ = parts
    if loop is None or exit_ is None:
        return expr  # no self-call after all, or no way out (the rule matches nothing)
    return seq(Rep(loop, 0, None), exit_)


def _split_tail(name: str, expr: Expr) -> tuple[Expr | None, Expr | None] | None:
    """``(L, E)`` with ``expr`` ≡ ``L name | E`` (None: no such part), where neither
    calls ``name``; None when ``name`` is called other than last."""
    if expr == Call(name):
        return EMPTY, None
    if name not in _calls_set(expr):
        return None, expr
    if isinstance(expr, Alt):
        loops: list[Expr] = []
        exits: list[Expr] = []
        for option in expr.options:
            parts = _split_tail(name, option)
            if parts is None:
                return None
            if parts[0] is not None:
                loops.append(parts[0])
            if parts[1] is not None:
                exits.append(parts[1])
        return (alt(*loops) if loops else None), (alt(*exits) if exits else None)
    if isinstance(expr, Seq):
        *head, last = expr.items
        if any(name in _calls_set(item) for item in head):
            return None
        parts = _split_tail(name, last)
        if parts is None:
            return None
        loop, exit_ = parts
        return (
            None if loop is None else seq(*head, loop),
            None if exit_ is None else seq(*head, exit_),
        )
    if isinstance(expr, Rep) and (expr.low, expr.high) == (0, 1):
        parts = _split_tail(name, expr.item)
        if parts is None:
            return None
        loop, exit_ = parts
        return loop, EMPTY if exit_ is None else alt(exit_, EMPTY)
    return None


def _calls_set(expr: Expr) -> set[str]:
    return set(calls(expr))


# -- whole-grammar checks ---------------------------------------------------------------


def reachable(rules: Mapping[str, Expr], root: str) -> set[str]:
    """The rules ``root`` calls, directly or not, and ``root`` itself (names of external
    rules included). Linear in the rules' size."""
    seen = {root}
    todo = [root]
    while todo:
        checkpoint()
        name = todo.pop()
        expr = rules.get(name)
        if expr is None:
            continue  # an external rule
        for callee in calls(expr):
            if callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return seen


calls = called  # the walker lives with the IR (Grammar.calls uses it too)


def components(rules: Mapping[str, Expr]) -> list[tuple[list[str], bool]]:
    """The strongly connected components of the call graph (calls to names outside
    ``rules`` ignored), callees first: a component comes after every component its
    rules call. Each is ``(names, recursive)``; ``recursive``: its rules can reach
    themselves (it has two rules or more, or its one rule calls itself).

    Tarjan's algorithm without recursion: one pass, linear in the rules' size (a chain
    of 100 000 rules is as cheap as 100 000 unrelated ones); checks the deadline per rule.
    """
    graph: dict[str, list[str]] = {}
    for name, expr in rules.items():
        checkpoint()
        graph[name] = list(dict.fromkeys(callee for callee in calls(expr) if callee in rules))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[list[str], bool]] = []
    for first in rules:
        if first in index:
            continue
        index[first] = low[first] = len(index)
        stack.append(first)
        on_stack.add(first)
        work = [(first, iter(graph[first]))]
        while work:
            name, callees = work[-1]
            callee = next(callees, None)
            if callee is not None:
                if callee not in index:
                    checkpoint()
                    index[callee] = low[callee] = len(index)
                    stack.append(callee)
                    on_stack.add(callee)
                    work.append((callee, iter(graph[callee])))
                elif callee in on_stack and index[callee] < low[name]:
                    low[name] = index[callee]
                continue
            work.pop()
            if work and low[name] < low[work[-1][0]]:
                low[work[-1][0]] = low[name]
            if low[name] == index[name]:
                members: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == name:
                        break
                found.append((members, len(members) > 1 or name in graph[name]))
    return found


def nullable_rules(rules: dict[str, Expr]) -> set[str]:
    """The rules that can match the empty text (external rules never do).

    A least fixpoint, worked out in time linear in the rules' size (iterating "until
    nothing changes" is quadratic on a chain ``r0 ::= r1``, ``r1 ::= r2``, ...): every
    occurrence of a sub-expression is a node that becomes nullable when all (a
    sequence) or one (an alternative, a rule call) of its parts does.
    """
    parents: list[int] = []  # per node, its parent node (-1: a rule's body)
    missing: list[int] = []  # per node, how many parts must still become nullable
    body_of: dict[int, str] = {}
    calls: dict[str, list[int]] = {}
    ready: list[int] = []
    for name, body in rules.items():
        checkpoint()
        stack: list[tuple[Expr, int]] = [(body, -1)]
        while stack:
            expr, parent = stack.pop()
            node = len(parents)
            parents.append(parent)
            if parent < 0:
                body_of[node] = name
            if isinstance(expr, Seq):
                if any(_solid(item) for item in expr.items):
                    missing.append(-1)  # (its parts matter to nothing else: not walked)
                else:
                    missing.append(_parts_of(expr.items, node, calls, stack))
            elif isinstance(expr, Alt):
                _parts_of(expr.options, node, calls, stack)
                missing.append(1)  # (NEVER, no option, never becomes nullable)
            elif isinstance(expr, Rep) and expr.low > 0:
                missing.append(1)
                stack.append((expr.item, node))
            elif isinstance(expr, Call):
                missing.append(1)
                calls.setdefault(expr.rule, []).append(node)
            elif isinstance(expr, Rep) or (isinstance(expr, Lit) and not expr.data):
                missing.append(0)
            else:  # a non-empty literal, a lexeme (one character at least)
                missing.append(-1)
            if missing[-1] == 0:
                ready.append(node)
    nullable: set[str] = set()
    while ready:
        node = ready.pop()
        parent = parents[node]
        if parent < 0:
            checkpoint()
            name = body_of[node]
            nullable.add(name)
            for call in calls.get(name, ()):
                missing[call] -= 1
                if missing[call] == 0:
                    ready.append(call)
        else:
            missing[parent] -= 1
            if missing[parent] == 0:
                ready.append(parent)
    return nullable


def _solid(expr: Expr) -> bool:
    """Whether ``expr`` reads a byte at least, whatever the rules: a non-empty
    literal, a lexeme."""
    return (type(expr) is Lit and bool(expr.data)) or type(expr) is Lex


def _parts_of(
    parts: tuple[Expr, ...],
    node: int,
    calls: dict[str, list[int]],
    stack: list[tuple[Expr, int]],
) -> int:
    """Queue a sequence's or alternative's parts as children of ``node``, its calls
    to one rule counted once (``root ::= b b b ...`` waits on ``b`` once); how many
    distinct parts it waits on."""
    called: set[str] = set()
    count = 0
    for part in parts:
        if type(part) is Call:
            if part.rule not in called:
                called.add(part.rule)
                calls.setdefault(part.rule, []).append(node)
                count += 1
        else:
            stack.append((part, node))
            count += 1
    return count


def _nullable(expr: Expr, nullable: set[str]) -> bool:
    if isinstance(expr, Lit):
        return not expr.data
    if isinstance(expr, Call):
        return expr.rule in nullable
    if isinstance(expr, Seq):
        return all(_nullable(item, nullable) for item in expr.items)
    if isinstance(expr, Alt):
        return any(_nullable(option, nullable) for option in expr.options)
    if isinstance(expr, Rep):
        return expr.low == 0 or _nullable(expr.item, nullable)
    assert isinstance(expr, (Lex, Members))
    return False


def _left_calls(expr: Expr, nullable: set[str], out: list[str]) -> None:
    """Append the rules ``expr`` may call before reading a byte."""
    if isinstance(expr, Call):
        out.append(expr.rule)
    elif isinstance(expr, Seq):
        for item in expr.items:
            _left_calls(item, nullable, out)
            if not _nullable(item, nullable):
                break
    elif isinstance(expr, Alt):
        for option in expr.options:
            _left_calls(option, nullable, out)
    elif isinstance(expr, Rep):
        _left_calls(expr.item, nullable, out)


def show_cycle(cycle: list[str]) -> str:
    """``a → b → a``; a long cycle shortened in the middle."""
    if len(cycle) > 9:
        hidden = len(cycle) - 7
        cycle = [*cycle[:4], f"({hidden} more)", *cycle[-3:]]
    return " → ".join(cycle)


def left_cycle(rules: dict[str, Expr]) -> list[str]:
    """A cycle of left calls (``[a, b, a]``), the first found in definition order, or []."""
    nullable = nullable_rules(rules)
    graph: dict[str, list[str]] = {}
    for name, expr in rules.items():
        checkpoint()
        callees: list[str] = []
        _left_calls(expr, nullable, callees)
        graph[name] = list(dict.fromkeys(callee for callee in callees if callee in rules))
    done: set[str] = set()
    for first in rules:
        if first in done:
            continue
        path = [first]
        on_path = {first}
        iterators = [iter(graph[first])]
        while iterators:
            callee = next(iterators[-1], None)
            if callee is None:
                iterators.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if callee in on_path:
                return [*path[path.index(callee) :], callee]
            if callee not in done:
                checkpoint()
                path.append(callee)
                on_path.add(callee)
                iterators.append(iter(graph[callee]))
    return []
