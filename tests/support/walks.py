"""What tests compare mask engine walks by, and where they find a network's key lexeme."""

from __future__ import annotations

from typing import Any

import numpy as np


def walk_sets(walk: Any, size: int) -> tuple[set[int], list[tuple[int, int]]]:
    """A walk's inside token ids, and its boundary tokens as (position, column) pairs
    (whether the inside tokens are held as bits or as ids)."""
    if walk.dense:
        inside = set(np.flatnonzero(np.unpackbits(walk.inside, count=size)).tolist())
    else:
        inside = set(walk.inside.tolist())
    positions, columns = walk.bounds.expand()
    return inside, sorted(zip(positions.tolist(), columns.tolist(), strict=True))


def key_lexeme(engine: Any) -> tuple[int, Any]:
    """The rule number and automaton of a network's extra-key lexeme (a key that must
    not be one of the declared names)."""
    return next(
        (rule, automaton)
        for rule, automaton in enumerate(engine.network.rules)
        if automaton.name.startswith("key_not")
    )
