"""What can follow each rule of a network: the bytes read first once it has returned.

A lexeme's walk records a *boundary entry* at every trie node where the lexeme could
end with bytes of the token left: the rest is for the caller to read. A free-text
lexeme (a log message, an identifier, a word) can end after every character, so its
walk records one at nearly every node of the vocabulary (~180 000 with Qwen2.5, most
of a ~20 ms walk), though what follows it may read one byte only (``"\\n"``). With
:func:`follow_bytes`, a walk keeps only the entries whose rest can start with such a
byte: the others could never be read, whatever the stacks.

``follow_bytes(network)[r]`` is, as a 256-bit integer (bit ``b``: byte ``b``), every
byte a parse may read first right after rule ``r`` returns, over every place that
calls it: what the caller reads from its return state (through the rules it calls
there, and past those that match the empty text), and, when the caller can end there,
what follows the caller. The document's end follows the root and reads no byte. It is
an over-approximation (the nesting bound, say, is not considered), which is what
dropping entries needs: an entry is dropped only when no parse could read its rest.

Cost: a fixpoint over the states that call (a lexeme has none) and over the call
edges, each step a few integer operations, after reading the bytes of the states
involved (those that call, those calls return to, each rule's start: ~0.02-0.1 ms for
the benchmark grammars). None when it cannot be known here: a network whose any-order objects make
rules on demand (their calls are not all known), or a fixpoint that has not settled
within :data:`MAX_ROUNDS` rounds. Pure; thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jsonmode.decoding.automata.families import TAIL, RuleTable
from jsonmode.decoding.automata.rule_dfa import RuleDFA

__all__ = ["ALL_BYTES", "MAX_ROUNDS", "follow_bytes", "readable_bytes"]

#: Every byte, as :func:`follow_bytes` writes a set.
ALL_BYTES = (1 << 256) - 1
#: Rounds of either fixpoint before :func:`follow_bytes` gives up (returns None).
MAX_ROUNDS = 256


def readable_bytes(rule: RuleDFA, states: list[int]) -> list[int]:
    """The bytes each of ``states`` of ``rule`` reads itself (its transitions), as
    256-bit integers."""
    packed = np.packbits(rule.trans[states] >= 0, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def follow_bytes(rules: Sequence[RuleDFA]) -> list[int] | None:
    """Per rule of a network's ``rules``, the bytes that may be read first after it
    returns (see the module); None when unknown."""
    if isinstance(rules, RuleTable) and not rules.complete:
        return None
    automata = list(rules)
    calling = [
        (number, state, calls)
        for number, rule in enumerate(automata)
        for state, calls in enumerate(rule.calls)
        if calls
    ]
    # first[(r, s)]: the bytes read first from state s of rule r, through its calls;
    # ends[(r, s)]: whether rule r can return from s reading nothing. Only the states
    # that call, that calls return to, and the rules' starts are needed.
    needed = {(number, 0) for number in range(len(automata))}
    for number, state, calls in calling:
        needed.add((number, state))
        needed.update((number, back) for _, back in calls if back != TAIL)
    by_rule: dict[int, list[int]] = {}
    for number, state in sorted(needed):
        by_rule.setdefault(number, []).append(state)
    first = {
        (number, state): found
        for number, states in by_rule.items()
        for state, found in zip(states, readable_bytes(automata[number], states), strict=True)
    }
    ends = {key: bool(automata[key[0]].accepting[key[1]]) for key in needed}
    for _ in range(MAX_ROUNDS):
        changed = False
        for number, state, calls in calling:
            here = (number, state)
            bytes_here, can_end = first[here], ends[here]
            for callee, back in calls:
                bytes_here |= first[callee, 0]
                if ends[callee, 0]:
                    if back == TAIL:
                        can_end = True
                    else:
                        bytes_here |= first[number, back]
                        can_end = can_end or ends[number, back]
            if bytes_here != first[here] or can_end != ends[here]:
                first[here], ends[here] = bytes_here, can_end
                changed = True
        if not changed:
            break
    else:
        return None
    follow = [0] * len(automata)
    for _ in range(MAX_ROUNDS):
        changed = False
        for number, _state, calls in calling:
            for callee, back in calls:
                if back == TAIL:
                    found = follow[number]
                else:
                    found = first[number, back]
                    if ends[number, back]:
                        found |= follow[number]
                merged = follow[callee] | found
                if merged != follow[callee]:
                    follow[callee] = merged
                    changed = True
        if not changed:
            return follow
    return None
