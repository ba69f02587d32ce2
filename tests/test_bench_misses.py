"""bench/misses.py: first-visit masks split by whether their mask was computed before."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import misses  # noqa: E402
from misses import Record  # noqa: E402


def test_a_miss_is_new_then_seen_in_its_schema_then_seen_in_an_earlier_one():
    us = 1e-6
    records = [
        Record(0, False, 30 * us, b"a"),  # new
        Record(0, True, 1 * us),  # hit
        Record(0, False, 50 * us, b"a"),  # schema 0 computed "a" before
        Record(1, False, 2000 * us, b"b"),  # new
        Record(1, False, 10 * us, b"a"),  # only schema 0 computed "a"
        Record(1, False, 40 * us, b"a"),  # now schema 1 has too
        Record(2, False, 200 * us, b"b"),  # only schema 1 computed "b"
    ]
    summary = misses.classify(records)
    assert summary["hits"] == {"count": 1, "seconds": pytest.approx(1 * us)}
    kinds = summary["misses"]
    assert kinds["new"] == {"count": 2, "seconds": pytest.approx(2030 * us)}
    assert kinds["seen in this schema"] == {"count": 2, "seconds": pytest.approx(90 * us)}
    assert kinds["seen in an earlier schema"] == {"count": 2, "seconds": pytest.approx(210 * us)}
    bands = summary["bands"]
    assert bands["< 20 µs"]["seen in an earlier schema"]["count"] == 1
    assert bands["20-100 µs"]["new"]["count"] == 1
    assert bands["20-100 µs"]["seen in this schema"]["count"] == 2
    assert bands["0.1-1 ms"]["seen in an earlier schema"]["count"] == 1
    assert bands[">= 1 ms"]["new"]["count"] == 1


def test_the_table_gives_each_kind_its_share_of_all_mask_time():
    records = [Record(0, True, 1e-3), Record(0, False, 3e-3, b"x")]
    table = misses.render(misses.classify(records))
    assert "2 mask calls, 4 ms; mean 2000.0 µs" in table
    assert "| hits | 1 | 1 | 25.0% |" in table
    assert "| misses, new | 1 | 3 | 75.0% |" in table


def test_a_miss_without_its_mask_digest_is_refused():
    with pytest.raises(ValueError, match="digest"):
        misses.classify([Record(0, False, 1e-6)])


def test_no_mask_calls_is_a_clear_error():
    with pytest.raises(ValueError, match="no mask calls"):
        misses.render(misses.classify([]))


def test_a_small_sample_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "summary.json"
    assert misses.main(["--schemas", "4", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mask calls" in printed
    summary = misses.classify(misses.measure(misses.load_sample(4, 20250301)))
    calls = summary["hits"]["count"] + sum(k["count"] for k in summary["misses"].values())
    assert calls > 0
    assert summary["misses"]["new"]["count"] > 0  # (the first of each mask is new)
    assert out.read_text().startswith("{")


def test_a_sample_size_below_one_is_refused(capsys):
    with pytest.raises(SystemExit) as stopped:
        misses.main(["--schemas", "0"])
    assert stopped.value.code == 2
    assert "at least 1" in capsys.readouterr().err


def test_invalid_instances_are_walked_but_not_recorded():
    """As in decoder.py's first pass: invalid instances warm the caches, untimed. A walk
    is as long whatever the caches hold, so the records are the valid instances' alone."""
    import dataclasses

    cases = misses.load_sample(6, 20250301)
    assert any(not test.valid for case in cases for test in case.tests)
    valid_only = [
        dataclasses.replace(case, tests=[test for test in case.tests if test.valid])
        for case in cases
    ]
    assert len(misses.measure(cases)) == len(misses.measure(valid_only)) > 0
