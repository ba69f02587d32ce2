"""bench/paired.py: two engines in one process; the ratios on their common ground."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import paired  # noqa: E402


def test_ratios_use_the_schemas_both_compiled_and_the_instances_both_accepted():
    ms = 1e-3
    result = {
        "compiles": {
            "a": {"0": 4 * ms, "1": 6 * ms, "2": 100 * ms},  # "2": only a compiled it
            "b": {"0": 2 * ms, "1": 2 * ms, "3": 100 * ms},
        },
        "walks": {
            "a": {
                (0, 0): {"outcome": "accepted", "times": [3000, 5000]},
                (0, 1): {"outcome": "accepted", "times": [10**9]},  # b rejected it
                (1, 0): {"outcome": "accepted", "times": [4000]},
            },
            "b": {
                (0, 0): {"outcome": "accepted", "times": [1000, 1000]},
                (0, 1): {"outcome": "rejected", "times": [1]},
                (1, 0): {"outcome": "accepted", "times": [4000]},
            },
        },
    }
    summary = paired.ratios(result, ["a", "b"])
    assert summary["schemas"] == 2
    assert summary["instances"] == 2
    a, b = summary["stats"]["a"], summary["stats"]["b"]
    assert a["compile_median_ms"] == pytest.approx(5.0)
    assert b["compile_median_ms"] == pytest.approx(2.0)
    assert a["mask_mean_us"] == pytest.approx(4.0)
    assert b["mask_mean_us"] == pytest.approx(2.0)
    assert summary["ratios"]["compile_median_ms"] == pytest.approx(2.5)
    assert summary["ratios"]["mask_mean_us"] == pytest.approx(2.0)


def test_two_engines_are_required(capsys):
    with pytest.raises(SystemExit) as stopped:
        paired.main(["--engines", "jsonmode"])
    assert stopped.value.code == 2
    assert "two engines" in capsys.readouterr().err


def test_no_common_ground_is_a_clear_error():
    result = {
        "compiles": {"a": {"0": 1.0}, "b": {"1": 1.0}},
        "walks": {"a": {}, "b": {}},
    }
    with pytest.raises(ValueError, match="no common ground"):
        paired.ratios(result, ["a", "b"])


@pytest.mark.parametrize("option", ["--runs", "--schemas"])
def test_nothing_to_run_is_refused(option, capsys):
    with pytest.raises(SystemExit) as stopped:
        paired.main(["--engines", "jsonmode,llguidance", option, "0"])
    assert stopped.value.code == 2
    assert "at least 1" in capsys.readouterr().err


def test_the_harness_is_frozen_out_of_the_collector_before_the_engines_are_set_up(monkeypatch):
    """The sample and what built it are frozen (gc.freeze) before any engine's set-up,
    so that the engines' own objects stay tracked and the harness's never are."""
    events: list[str] = []
    monkeypatch.setattr(paired.gc, "freeze", lambda: events.append("freeze"))
    real_load = paired.decoder.load_sample

    def load_sample(schemas, seed):
        events.append("sample")
        return real_load(schemas, seed)

    class Engine:
        def setup(self, tokenizer, eos):
            events.append("setup")

        def compile(self, schema):
            raise paired.decoder.CompileFailure("unsupported", "declined")

    monkeypatch.setattr(paired.decoder, "load_sample", load_sample)
    monkeypatch.setattr(paired.decoder, "ENGINE_CLASSES", {"a": Engine, "b": Engine})
    result = paired.one_run(["a", "b"], 1, 20250301)
    assert events == ["sample", "freeze", "setup", "setup"]
    assert result["compiles"] == {"a": {}, "b": {}}


def test_the_category_table_keeps_each_category_on_its_common_ground():
    from types import SimpleNamespace as Case

    from decoder_summary import category_table

    def test(index, valid=True):
        return Case(index=index, valid=valid)

    cases = [
        Case(index=0, category="K", tests=[test(0), test(1)]),
        Case(index=1, category="K", tests=[test(0)]),
        Case(index=2, category="G", tests=[test(0)]),  # only a compiled it
    ]
    compiles = {"a": {0: 4.0, 1: 6.0, 2: 1.0}, "b": {0: 2.0, 1: 2.0}}
    walks = {
        "a": {
            (0, 0): {"outcome": "accepted", "times": [3000, 5000]},
            (0, 1): {"outcome": "accepted", "times": [10**9]},  # b rejected it
            (1, 0): {"outcome": "accepted", "times": [4000]},
            (2, 0): {"outcome": "accepted", "times": [1000]},
        },
        "b": {
            (0, 0): {"outcome": "accepted", "times": [1000, 1000]},
            (0, 1): {"outcome": "rejected", "times": [1]},
            (1, 0): {"outcome": "accepted", "times": [4000]},
        },
    }
    table = category_table(["a", "b"], cases, compiles, walks)
    assert list(table) == ["G", "K"]
    assert table["K"]["schemas"] == 2
    assert table["K"]["instances"] == 2
    assert table["K"]["a"]["compile_ms_median"] == pytest.approx(5.0)
    assert table["K"]["a"]["mean_us"] == pytest.approx(4.0)
    assert table["K"]["b"]["mean_us"] == pytest.approx(2.0)
    assert table["G"]["schemas"] == 0
    assert table["G"]["a"]["mean_us"] is None
    rendered = paired._category_ratios([table], ["a", "b"])
    assert "| K" in rendered
    assert "2.50×" in rendered  # compile median 5 / 2
