"""The byte-bounded LRU behind the decoder's process-wide caches."""

from jsonmode.decoding.lru import Lru


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

    from jsonmode.decoding.lru import IdentityMemo

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
