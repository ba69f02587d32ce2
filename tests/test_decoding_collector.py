"""The shared pause of the cyclic garbage collector."""

import gc
import threading

import pytest

from jsonmode.decoding.collector import collector_paused


def test_the_collector_is_off_inside_and_back_on_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: still off, and the inner end keeps it off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_caller_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_exception_ends_the_pause():
    try:
        with collector_paused():
            raise KeyError("boom")
    except KeyError:
        pass
    assert gc.isenabled()


def test_overlapping_pauses_in_threads_switch_it_on_once_the_last_ends():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            first_out.wait(5)
            seen["after the first ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"after the first ended": False}
    assert gc.isenabled()


def test_compiling_leaves_the_collector_on_whether_it_succeeds_or_fails():
    import jsonmode

    jsonmode.compile_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert gc.isenabled()
    with pytest.raises(jsonmode.InvalidSchemaError):
        jsonmode.compile_schema({"type": "object", "minProperties": -1})
    assert gc.isenabled()
