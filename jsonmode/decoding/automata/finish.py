"""A rule's table from its automaton (network's last step for every rule).

:func:`finish_rule` keeps the live states and the calls to rules that accept
something and writes the rule's byte table: the compiled core's ``r3comp_fill`` where
loaded (:data:`jsonmode.native.KERNELS`, ``csrc/r3comp_objects.c``), else
:func:`finish_rule_py`, the reference, with the same tables, calls and acceptance.
Pure functions of their arguments: thread-safe.
"""

from __future__ import annotations

import numpy as np

from jsonmode import native
from jsonmode.decoding.automata.objects import Raw
from jsonmode.decoding.automata.rule_dfa import RuleDFA

__all__ = ["finish_rule", "finish_rule_py"]


def finish_rule(
    name: str,
    parts: Raw,
    live: list[bool] | None,
    accepts: dict[str, bool],
    number: dict[str, int],
) -> RuleDFA:
    """The rule's table, keeping the ``live`` states (None: all of them) and the
    calls to rules that accept something, renumbered by ``number``: the compiled
    core's ``r3comp_fill`` writes the table where loaded, else :func:`finish_rule_py`,
    with the same answers. Cost: linear in the states and edges (one table allocated)."""
    kernels = native.KERNELS
    if kernels is None:
        return finish_rule_py(name, parts, live, accepts, number)
    edges, calls, accepting = parts
    renumber: list[int] | None = None
    if live is not None:
        renumber = [-1] * len(live)
        keep = [state for state, alive in enumerate(live) if alive]
        for new, old in enumerate(keep):
            renumber[old] = new
        calls = [
            {c: renumber[t] for c, t in calls[old].items() if renumber[t] >= 0} for old in keep
        ]
        accepting = [accepting[old] for old in keep]
    trans = np.empty((len(accepting), 256), dtype=np.int32)
    kernels.r3comp_fill(trans, edges if type(edges) is list else list(edges), renumber)
    return RuleDFA(
        name, trans, _call_rows(calls, accepts, number), np.array(accepting, dtype=np.bool_)
    )


def finish_rule_py(
    name: str,
    parts: Raw,
    live: list[bool] | None,
    accepts: dict[str, bool],
    number: dict[str, int],
) -> RuleDFA:
    """:func:`finish_rule` in Python (the reference)."""
    edges, calls, accepting = parts
    if live is not None:
        keep = [state for state, alive in enumerate(live) if alive]
        renumber = {old: new for new, old in enumerate(keep)}
        edges = [
            [(lo, hi, renumber[t]) for lo, hi, t in edges[old] if t in renumber] for old in keep
        ]
        calls = [{c: renumber[t] for c, t in calls[old].items() if t in renumber} for old in keep]
        accepting = [accepting[old] for old in keep]
    trans = np.full((len(accepting), 256), -1, dtype=np.int32)
    # Single-byte edges (most of them: literals) are written in one indexed store.
    states: list[int] = []
    points: list[int] = []
    targets: list[int] = []
    for state, row in enumerate(edges):
        for lo, hi, target in row:
            if lo == hi:
                states.append(state)
                points.append(lo)
                targets.append(target)
            else:
                trans[state, lo : hi + 1] = target
    if states:
        trans[states, points] = targets
    return RuleDFA(
        name, trans, _call_rows(calls, accepts, number), np.array(accepting, dtype=np.bool_)
    )


def _call_rows(
    calls: list[dict[str, int]], accepts: dict[str, bool], number: dict[str, int]
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per state, its calls to rules that accept something, as (rule number, return state)."""
    return tuple(
        [
            tuple(
                [(number[callee], target) for callee, target in row.items() if accepts.get(callee)]
            )
            if row
            else ()
            for row in calls
        ]
    )
