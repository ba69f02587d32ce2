"""Inputs for the state-hash kernel (``jsonmode._native.r7hash_depths``,
csrc/r7hash_depths.c) and its pure-Python form (the depth loop of
``jsonmode.decoding.engine.state.state_hashes``): random automata drawn from a
``random.Random`` (dense rows, sparse rows, byte classes folded, crossing states, one
state or many, several depths), and malformed calls.
tests/support/native_fuzz.py puts the pair in ``PAIRS``, tests/support/native_hostile.py
runs :func:`hostile_r7hash_calls`, tests/test_native_r7hash.py uses the rest.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.engine import state as state_module
from support.native_regex import Calls


@dataclass
class HashCase:
    trans: npt.NDArray[np.int32]
    crossing: npt.NDArray[np.bool_]
    depths: tuple[int, ...]
    model: Calls = field(default_factory=Calls)


def make_hashes(rng: random.Random) -> HashCase:
    """An automaton of 1 to 60 states: rows dense, sparse (most bytes dead) or built
    from a few byte classes, transitions anywhere (self loops, back edges); crossing
    states at random; one to three ascending depths from 1 to 40."""
    states = rng.choice((1, 2, 3, 9, 27, 60))
    seed = np.random.default_rng(rng.randrange(1 << 32))
    trans = seed.integers(-1, states, size=(states, 256)).astype(np.int32)
    kind = rng.randrange(3)
    if kind == 1:
        trans[seed.random((states, 256)) < 0.95] = -1
    elif kind == 2:
        cuts = sorted(rng.sample(range(1, 256), rng.randint(1, 6)))
        for lo, hi in zip([0, *cuts], [*cuts, 256], strict=True):
            trans[:, lo:hi] = trans[:, lo : lo + 1]
    crossing = seed.random(states) < rng.choice((0.0, 0.2, 1.0))
    depths = tuple(sorted(rng.sample(range(1, 41), rng.randint(1, 3))))
    return HashCase(trans, crossing, depths)


def hashes_python(case: HashCase) -> Any:
    with native.use(False):
        found = state_module.state_hashes(case.trans, case.crossing, case.depths)
    return None if found is None else found.tolist()


def hashes_compiled(kernels: ModuleType, case: HashCase) -> Any:
    edges = state_module._weighted_edges(case.trans)
    if edges is None:
        return None
    source, target, summed = edges
    base = np.where(case.crossing, np.uint64(0x5851F42D4C957F2D), np.uint64(0x14057B7EF767814F))
    out = np.empty((len(case.depths), case.trans.shape[0]), dtype=np.uint64)
    depths = np.array(case.depths, dtype=np.int64)
    kernels.r7hash_depths(
        source, target.astype(np.int64), summed, base, int(state_module._DEAD), depths, out
    )
    return out.tolist()


def hostile_r7hash_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to ``r7hash_depths``: each must raise TypeError or ValueError."""
    i64, u64 = np.int64, np.uint64

    def call(**changes: Any) -> Callable[[], Any]:
        # Two states: 0 -> 1 and 0 -> dead, 1 -> 1.
        args: dict[str, Any] = {
            "source": np.array([0, 0, 1], dtype=i64),
            "target": np.array([1, 2, 1], dtype=i64),
            "summed": np.array([3, 5, 7], dtype=u64),
            "base": np.array([11, 13], dtype=u64),
            "dead": 17,
            "depths": np.array([1, 4], dtype=i64),
            "out": np.zeros(4, dtype=u64),
        }
        args.update(changes)
        return lambda: kernels.r7hash_depths(*args.values())

    readonly = np.zeros(4, dtype=u64)
    readonly.flags.writeable = False
    return [
        ("r7hash source of int32", call(source=np.array([0, 0, 1], dtype=np.int32))),
        ("r7hash summed of int64", call(summed=np.array([3, 5, 7], dtype=i64))),
        ("r7hash base of float64", call(base=np.array([1.0, 2.0]))),
        ("r7hash out read-only", call(out=readonly)),
        ("r7hash out too short", call(out=np.zeros(3, dtype=u64))),
        ("r7hash out not a buffer", call(out=[0, 0, 0, 0])),
        ("r7hash target shorter", call(target=np.array([1, 2], dtype=i64))),
        ("r7hash no state", call(base=np.zeros(0, dtype=u64), out=np.zeros(0, dtype=u64))),
        ("r7hash no depth", call(depths=np.zeros(0, dtype=i64), out=np.zeros(0, dtype=u64))),
        ("r7hash depth 0", call(depths=np.array([0, 4], dtype=i64))),
        ("r7hash depths descending", call(depths=np.array([4, 1], dtype=i64))),
        ("r7hash a target past the dead slot", call(target=np.array([1, 3, 1], dtype=i64))),
        ("r7hash a negative target", call(target=np.array([1, -1, 1], dtype=i64))),
        ("r7hash sources out of order", call(source=np.array([1, 0, 0], dtype=i64))),
        ("r7hash a source past the states", call(source=np.array([0, 0, 2], dtype=i64))),
        ("r7hash a state without an edge", call(source=np.array([0, 0, 0], dtype=i64))),
        ("r7hash a skipped state", call(source=np.array([0, 2, 2], dtype=i64))),
        ("r7hash a huge depth list mismatch", call(out=np.zeros(1 << 10, dtype=u64))),
        ("r7hash dead not an int", call(dead="x")),
        ("r7hash 2-D source", call(source=np.array([[0, 0, 1]], dtype=i64))),
    ]
