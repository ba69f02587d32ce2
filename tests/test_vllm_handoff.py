"""The handoff store the vLLM adapter uses to give the engine process the automata
compiled at admission (jsonmode.adapters.handoff): importable and testable without
vLLM. What is stored loads back into matchers that mask exactly as the original's;
only a private directory is used, and only files this module wrote are read."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

import jsonmode
from jsonmode.adapters import handoff
from jsonmode.adapters.handoff import Automata, Handoff, entry_key
from jsonmode.decoding.matcher import MaskEngine, Matcher
from jsonmode.decoding.vocabulary import Vocabulary

SCHEMA = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 2}},
    "required": ["tags"],
    "additionalProperties": False,
}


def vocabulary() -> Vocabulary:
    pieces = [bytes([b]) for b in range(32, 127)] + [b'{"', b'":', b'"]', b"[]", b'"a"', b"}"]
    return Vocabulary.from_token_bytes([*pieces, b""], eos_ids=[len(pieces)])


def automata_of(schema: object) -> Automata:
    compiled = jsonmode.compile_schema(schema)
    return Automata(compiled.network, compiled.options.max_nesting_depth, compiled.depth_in_levels)


def test_stored_automata_mask_as_the_compiled_ones(tmp_path: Path) -> None:
    store = Handoff(tmp_path / "store")
    key = entry_key(json.dumps(SCHEMA))
    assert store.get(key) is None
    assert not store.touch(key)
    assert store.put(key, automata_of(SCHEMA))
    assert store.touch(key)
    loaded = store.get(key)
    assert loaded is not None
    vocab = vocabulary()
    mine = Matcher(MaskEngine(loaded.network, vocab, max_depth=loaded.max_depth))
    theirs = jsonmode.compile_schema(SCHEMA, vocab).matcher()
    for byte in b'{"tags":["a","bc"]}':
        assert np.array_equal(mine.mask(), theirs.mask())
        token = byte - 32  # the one-byte tokens come first
        assert mine.advance(token)
        assert theirs.advance(token)
    assert mine.can_end()
    assert theirs.can_end()


def test_the_directory_is_made_private_and_must_stay_so(tmp_path: Path) -> None:
    made = tmp_path / "made"
    Handoff(made)
    assert (made.stat().st_mode & 0o777) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)  # (the umask may have narrowed it)
    with pytest.raises(jsonmode.UsageError, match=r"others may use it \(mode 755\)") as caught:
        Handoff(shared)
    assert handoff.STORE_ENV in (caught.value.hint or "")
    link = tmp_path / "link"
    link.symlink_to(made)
    with pytest.raises(jsonmode.UsageError, match="not a directory"):
        Handoff(link)
    with pytest.raises(jsonmode.UsageError, match="cannot use"):
        Handoff(tmp_path / "missing" / "deeper")


def test_the_default_directory_is_per_user_or_the_environments(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(handoff.STORE_ENV, raising=False)
    assert handoff.default_directory().name == f"jsonmode-vllm-{os.geteuid()}"
    monkeypatch.setenv(handoff.STORE_ENV, str(tmp_path / "mine"))
    assert handoff.default_directory() == tmp_path / "mine"


def test_files_it_did_not_write_for_that_key_are_never_used(tmp_path: Path) -> None:
    store = Handoff(tmp_path / "store")
    one, two = entry_key("one"), entry_key("two")
    assert store.put(one, automata_of({"type": "integer"}))
    path = store.directory / f"{one}.automata"
    # an entry renamed to another key's name is not that key's
    path.rename(store.directory / f"{two}.automata")
    assert store.get(two) is None
    # a link to elsewhere is not followed; a corrupt file is a miss
    (store.directory / f"{one}.automata").symlink_to(store.directory / f"{two}.automata")
    assert store.get(one) is None
    (store.directory / f"{two}.automata").write_bytes(b"not a pickle")
    assert store.get(two) is None
    # keys are the store's own: nothing else names a file
    with pytest.raises(jsonmode.UsageError, match="not a store key"):
        store.get("../../etc/passwd")


def test_keys_name_the_text_and_the_options() -> None:
    assert entry_key("a") == entry_key("a")
    assert len({entry_key("a"), entry_key("b"), entry_key("a", "other options")}) == 3
    assert entry_key("ab", "") != entry_key("b", "a")  # (lengths keep the parts apart)


def test_the_store_is_bounded_oldest_dropped_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff, "MAX_ENTRIES", 3)
    store = Handoff(tmp_path / "store")
    automata = automata_of({"type": "boolean"})
    keys = [entry_key(str(n)) for n in range(5)]
    for age, key in enumerate(keys):
        assert store.put(key, automata)
        os.utime(store.directory / f"{key}.automata", ns=(age * 10**9, age * 10**9))
    assert store.get(keys[0]) is None
    assert store.get(keys[1]) is None
    assert all(store.get(key) is not None for key in keys[2:])
    monkeypatch.setattr(handoff, "MAX_ENTRY_BYTES", 10)
    assert not store.put(entry_key("big"), automata)  # over the cap: refused, logged
    assert store.get(entry_key("big")) is None


def test_an_entry_pickles_nothing_but_the_automata(tmp_path: Path) -> None:
    store = Handoff(tmp_path / "store")
    key = entry_key("x")
    store.put(key, automata_of({"type": "null"}))
    _magic, named, network, depth, levels = pickle.loads(
        (store.directory / f"{key}.automata").read_bytes()
    )
    assert (named, depth, levels) == (key, 64, False)
    assert type(network).__name__ == "Network"
