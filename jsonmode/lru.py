"""Process-wide caches on the ground floor (schema checks and the decoder use them): a
byte-bounded least-recently-used map, and a memo by object identity."""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["IdentityMemo", "Lru", "memoised"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
F = TypeVar("F", bound=Callable[..., Any])


class Lru(Generic[K, V]):
    """A thread-safe least-recently-used map bounded by the bytes of its values.

    ``put`` states each value's size; the oldest entries go once ``budget`` is passed
    (the newest always stays, however big). ``budget`` may be changed at any time.

    Recency is kept the "second chance" way (CLOCK): ``get`` only marks its entry as
    used, and ``put``, evicting from the oldest end, moves a marked entry to the
    newest end (unmarked) instead of dropping it. An entry read since it was last
    passed over is never evicted before one that was not; ``get`` costs one hash
    lookup, no lock and no reordering (it is the mask engine's hot path: a mask-cache
    hit). Thread-safe: ``put`` and ``clear`` hold a lock; ``get`` is one dict lookup
    and a store into its entry, atomic under the GIL (a racing eviction at worst drops
    an entry a ``get`` has just marked).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        # key -> [value, size, read since last passed over]
        self._items: OrderedDict[K, list[Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        item[2] = True
        value: V = item[0]
        return value

    def put(self, key: K, value: V, size: int) -> None:
        with self._lock:
            self._put(key, value, size)

    def put_all(self, items: list[tuple[K, V, int]]) -> None:
        """:meth:`put` each ``(key, value, size)`` in order, under one hold of the lock
        (the same entries and evictions as one ``put`` after another)."""
        with self._lock:
            for key, value, size in items:
                self._put(key, value, size)

    def _put(self, key: K, value: V, size: int) -> None:
        """One put, the lock held."""
        items = self._items
        old = items.pop(key, None)
        if old is not None:
            self.used -= old[1]
        new = [value, size, False]
        items[key] = new
        self.used += size
        spared, limit = 0, len(items)
        while self.used > self.budget and len(items) > 1:
            oldest, item = items.popitem(last=False)
            if item is new or (item[2] and spared < limit):
                # (Read since last passed over, or the newest, which stays: back
                # to the newest end, unmarked. At most one pass is spared, however
                # often other threads read meanwhile, so this ends.)
                item[2] = False
                items[oldest] = item
                spared += 1
            else:
                self.used -= item[1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.used = 0

    def __len__(self) -> int:
        return len(self._items)


def memoised(budget: int, size: Callable[[Any], int]) -> Callable[[F], F]:
    """Memoise a function of hashable arguments in an :class:`Lru` of ``budget``
    bytes, each result counted as ``size(result)`` bytes: a cache bounded by what it
    holds, where ``functools.lru_cache`` bounds the number of results (256 automata
    of a hostile schema's size pinned gigabytes). Exceptions are not memoised. The
    wrapper's ``cache`` is the :class:`Lru` (``cache.clear()`` empties it)."""

    def decorate(function: F) -> F:
        cache: Lru[Hashable, tuple[Any]] = Lru(budget)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            known = cache.get(key)
            if known is None:
                known = (function(*args, **kwargs),)
                cache.put(key, known, 64 + size(known[0]))
            return known[0]

        wrapper.cache = cache  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


class IdentityMemo(Generic[V]):
    """Values keyed by an object's identity (a transition table shared by the networks
    that use it), each dropped when its object is freed: the objects must take weak
    references (NumPy arrays do), and a value must not refer to its object (it would
    keep it alive for good). Bounded by the objects alive. Thread-safe: a race
    computes a value twice and keeps one; the values must be equal whoever computes
    them."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref[Any], V]] = {}

    def get(self, owner: object) -> V | None:
        """The value memoised for ``owner`` (None: none)."""
        item = self._items.get(id(owner))
        if item is not None and item[0]() is owner:
            return item[1]
        return None

    def put(self, owner: object, value: V) -> V:
        """Memoise ``value`` for ``owner``; returns it."""
        key = id(owner)
        gone = functools.partial(_forget, self._items, key)
        self._items[key] = (weakref.ref(owner, gone), value)
        return value

    def __len__(self) -> int:
        return len(self._items)


def _forget(items: dict[int, Any], key: int, _: object) -> None:
    """An owner was freed: drop its value (``items`` is bound, not looked up: the
    callback may run while the interpreter tears the module down)."""
    items.pop(key, None)
