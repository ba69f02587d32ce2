"""The replay of boundary entries (``jsonmode._native.r6replay_states``, csrc/r6replay.c),
held to its Python forms (``Walks._replay``: the plain-Python loop for few bytes, the
vectorised step per column otherwise): the kernel's call, cases drawn from real rule
tables and token matrices, and the kernel's malformed calls."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt


def replay_compiled(
    kernels: ModuleType,
    flat: npt.NDArray[np.int32],
    state: int,
    matrix: npt.NDArray[np.uint8],
    positions: npt.NDArray[np.int64],
    cols: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    out = np.empty(positions.size, dtype=np.int64)
    kernels.r6replay_states(flat, state, matrix, positions, cols, out)
    return out


def live_entries(
    rng: random.Random,
    flat: npt.NDArray[np.int32],
    state: int,
    matrix: npt.NDArray[np.uint8],
    lengths: npt.NDArray[np.int64],
    count: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``count`` entries (position, column) whose first ``column`` bytes the table reads
    from ``state`` without leaving it (what a walk's boundary entries are): each a
    random token's prefix, up to where the table stops reading it."""
    positions, cols = [], []
    table = flat.tolist()
    while len(positions) < count:
        p = rng.randrange(matrix.shape[0])
        here, alive = state, 0
        for byte in matrix[p, : int(lengths[p])].tolist():
            here = table[here * 256 + byte]
            if here < 0:
                break
            alive += 1
        positions.append(p)
        cols.append(rng.randint(0, alive))
    return np.array(positions, dtype=np.int64), np.array(cols, dtype=np.int64)


def hostile_r6replay_calls(kernels: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Malformed calls to ``r6replay_states``: each must raise TypeError or ValueError."""
    flat = np.full(2 * 256, -1, dtype=np.int32)
    flat[ord("a")] = 1
    flat[256 + ord("a")] = 1
    matrix = np.frombuffer(b"aaaab\0\0\0\0", dtype=np.uint8).reshape(3, 3).copy()
    one = np.zeros(1, dtype=np.int64)

    def call(**changes: Any) -> Callable[[], Any]:
        args: dict[str, Any] = {
            "table": flat,
            "state": 0,
            "matrix": matrix,
            "positions": one,
            "cols": np.array([2], dtype=np.int64),
            "out": np.zeros(1, dtype=np.int64),
        }
        args.update(changes)
        return lambda: kernels.r6replay_states(*args.values())

    readonly = np.zeros(1, dtype=np.int64)
    readonly.flags.writeable = False
    return [
        ("r6replay a table of int64", call(table=flat.astype(np.int64))),
        ("r6replay a table of part of a row", call(table=flat[:300])),
        ("r6replay a table not a buffer", call(table=[0] * 256)),
        ("r6replay a matrix of int32", call(matrix=matrix.astype(np.int32))),
        ("r6replay a matrix 1-D", call(matrix=matrix.reshape(-1))),
        ("r6replay positions of int32", call(positions=one.astype(np.int32))),
        ("r6replay cols longer than positions", call(cols=np.zeros(2, dtype=np.int64))),
        ("r6replay out too short", call(out=np.zeros(0, dtype=np.int64))),
        ("r6replay out read-only", call(out=readonly)),
        ("r6replay out of float64", call(out=np.zeros(1, dtype=np.float64))),
        ("r6replay a negative state", call(state=-1)),
        ("r6replay a state past the table", call(state=2)),
        ("r6replay a position past the matrix", call(positions=np.array([3], dtype=np.int64))),
        ("r6replay a negative position", call(positions=np.array([-1], dtype=np.int64))),
        ("r6replay a column past the width", call(cols=np.array([4], dtype=np.int64))),
        ("r6replay a negative column", call(cols=np.array([-1], dtype=np.int64))),
        # Row 1 is a, b, NUL: b leaves the table.
        (
            "r6replay a step that leaves the table",
            call(positions=np.array([1], dtype=np.int64), cols=np.array([2], dtype=np.int64)),
        ),
        ("r6replay a huge state", call(state=1 << 62)),
    ]
