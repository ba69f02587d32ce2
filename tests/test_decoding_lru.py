"""The byte-bounded LRU behind the decoder's process-wide caches."""

from jsonmode.lru import Lru


def test_oldest_entries_go_once_the_budget_is_passed():
    cache: Lru[str, int] = Lru(10)
    cache.put("a", 1, 4)
    cache.put("b", 2, 4)
    assert cache.get("a") == 1  # "a" is now the most recently used
    cache.put("c", 3, 4)
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c")) == (1, 3)
    assert cache.used == 8


def test_the_newest_entry_stays_however_big():
    cache: Lru[str, int] = Lru(10)
    cache.put("a", 1, 4)
    cache.put("big", 2, 50)
    assert len(cache) == 1
    assert cache.get("big") == 2


def test_replacing_a_key_and_clearing_keep_the_accounting_right():
    cache: Lru[str, int] = Lru(100)
    cache.put("a", 1, 30)
    cache.put("a", 2, 10)
    assert (cache.get("a"), cache.used) == (2, 10)
    cache.clear()
    assert (len(cache), cache.used, cache.get("a")) == (0, 0, None)


def test_identity_memo_keys_by_the_object_and_forgets_it_when_freed():
    """Equal objects are distinct keys; a freed object's entry goes (its id may be
    reused by a new object, which must not see the old value)."""
    import gc

    import numpy as np

    from jsonmode.lru import IdentityMemo

    memo: IdentityMemo[str] = IdentityMemo()
    first, equal = np.zeros(4), np.zeros(4)
    assert memo.put(first, "first") == "first"
    assert memo.get(first) == "first"
    assert memo.get(equal) is None
    del first
    gc.collect()
    assert len(memo) == 0
    for _ in range(50):  # (fresh arrays, some at the freed one's address)
        assert memo.get(np.zeros(4)) is None


def test_memoised_bounds_results_by_their_size_not_their_count():
    """Results count as ``size(result)`` bytes (plus a fixed 64) against the budget;
    keyword arguments are part of the key; None is a result like any other; an
    exception is not memoised."""
    import pytest

    from jsonmode.lru import memoised

    calls: list[int] = []

    @memoised(300, len)
    def make(n: int, *, fill: str = "x") -> str:
        calls.append(n)
        if n < 0:
            raise ValueError(n)
        return fill * n

    assert make(30) == make(30) == "x" * 30
    assert make(30, fill="y") == "y" * 30
    assert calls == [30, 30]
    make(100)  # (94 + 94 + 164 bytes: over 300, the oldest goes)
    assert make(30, fill="y") == "y" * 30
    make(30)
    assert calls == [30, 30, 100, 30]
    for _ in range(2):
        with pytest.raises(ValueError, match="-1"):
            make(-1)
    assert calls[-2:] == [-1, -1]

    nones: list[int] = []

    @memoised(1000, lambda _: 0)
    def nothing(n: int) -> None:
        nones.append(n)

    assert nothing(1) is None
    assert nothing(1) is None
    assert nones == [1]


def test_key_automata_caches_are_bounded_by_bytes(monkeypatch):
    """An object of hundreds of names has a key automaton of megabytes: the caches of
    key automata keep what fits their byte budget (here 1 MiB: the newest only), where
    caches bounded by count kept hundreds of them (~14 MB retained per schema, without
    limit, on a stream of such schemas)."""
    import random
    import string

    from jsonmode.decoding import compiled
    from jsonmode.decoding.automata import keys
    from jsonmode.decoding.compile import containers

    rng = random.Random(4)
    caches = [keys.extra_key_body.cache, containers._key_lexemes.cache, keys.key_trie.cache]
    for cache in caches[:2]:
        monkeypatch.setattr(cache, "budget", 1 << 20)
    monkeypatch.setattr(caches[2], "budget", 1 << 14)
    for _ in range(4):
        names = ["".join(rng.choice(string.ascii_letters) for _ in range(10)) for _ in range(300)]
        schema = {"type": "object", "properties": {name: {"type": "integer"} for name in names}}
        compiled.compile_schema(schema)
    assert [len(cache) for cache in caches] == [1, 1, 1]


def test_a_read_takes_no_lock_and_does_not_reorder():
    """``get`` is the mask-cache hit path: one dict lookup and a mark, no lock taken and
    no entry moved (the lock and ``move_to_end`` cost as much as the lookup)."""
    import pytest

    cache: Lru[str, int] = Lru(100)
    cache.put("a", 1, 4)
    cache.put("b", 2, 4)

    class Held:
        def __enter__(self):
            raise AssertionError("get took the lock")

        def __exit__(self, *_):
            return False

    lock = cache._lock
    cache._lock = Held()  # type: ignore[assignment]
    assert cache.get("a") == 1
    assert cache.get("missing") is None
    assert list(cache._items) == ["a", "b"]  # (read, not moved)
    with pytest.raises(AssertionError, match="took the lock"):
        cache.put("c", 3, 4)  # (a write does lock)
    cache._lock = lock


def test_read_entries_get_a_second_chance_and_the_newest_stays():
    """Evicting from the oldest end, an entry read since it was last passed over goes
    to the newest end instead; when every entry was read, the oldest goes after one
    pass; a new entry over the budget alone stays, whatever was read."""
    cache: Lru[str, int] = Lru(12)
    for n, key in enumerate("abc"):
        cache.put(key, n, 4)
    assert cache.get("a") == 0
    cache.put("d", 3, 4)  # (a read: spared; b goes)
    assert list(cache._items) == ["c", "d", "a"]
    assert cache.used == 12
    for key in "cda":
        assert cache.get(key) is not None
    cache.put("e", 4, 4)  # (all read: one pass clears the marks, then c goes)
    assert sorted(cache._items) == ["a", "d", "e"]
    assert cache.used == 12
    for key in "ade":
        cache.get(key)
    cache.put("big", 5, 50)
    assert list(cache._items) == ["big"]
    assert cache.used == 50
    assert cache.get("big") == 5


def test_put_all_is_one_put_after_another():
    """``put_all`` leaves the same entries, order, marks and accounting as ``put`` in
    turn, evictions (second chances included) and replaced keys alike."""
    import random

    rng = random.Random(11)
    for _ in range(200):
        one, many = Lru[int, int](rng.randint(1, 40)), Lru[int, int](0)
        many.budget = one.budget
        for _ in range(rng.randint(0, 4)):
            batch = [(rng.randrange(12), rng.randrange(99), rng.randint(1, 15)) for _ in range(5)]
            for key, value, size in batch:
                one.put(key, value, size)
            many.put_all(batch)
            for key in rng.sample(range(12), 3):
                assert one.get(key) == many.get(key)
        assert list(one._items.items()) == list(many._items.items())
        assert one.used == many.used
