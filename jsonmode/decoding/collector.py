"""Pausing Python's cyclic garbage collector around bursts of allocation.

Compiling a schema and parsing a tokenizer.json each allocate tens of thousands of
small containers (frozensets, tuples, lists) that reference counting frees or that
outlive the burst. Every 700 allocations the cyclic collector walks the young ones,
and in a process with a large heap (torch, transformers, the decoder's caches) its
older generations too: a tenth to a third of the burst's time for no memory back.
Pausing it costs nothing: the burst makes no cyclic garbage worth collecting early,
and whatever cycles it leaves are found by the next collection after the pause.
(Mask calls are not paused: measured over the benchmark, that gained nothing.)

The pause is process-wide, as the collector is. Nested and concurrent pauses
share one: the collector is switched back on when the last one ends, and only if it
was on when the first began. A ``gc.disable()`` made by someone else while a pause
is under way is undone when it ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_depth = 0
_resume = False  # whether the outermost pause switched the collector off


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic garbage collector switched off (see module)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            if _resume:
                gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
