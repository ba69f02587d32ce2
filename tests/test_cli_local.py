"""``jsonmode generate --model DIR --tier constrained``: a local transformers model.

The model is a random-weight Llama written offline with the Qwen2.5 tokenizer
(tests/support/tiny_llama.py): its words are noise, so a conforming value can only
come from the token mask.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from support.tiny_llama import build

from jsonmode.cli import main

SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "size": {"enum": ["S", "M", "L"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["ok", "size", "count"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return build(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def schema_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return path


def test_constrained_generation_from_a_local_folder(capsys, model_dir, schema_file):
    argv = ["generate", "--model", str(model_dir), "--schema", str(schema_file)]
    status = main([*argv, "--tier", "constrained", "--max-tokens", "48", "-v", "Pick one."])
    out, err = capsys.readouterr()
    assert status == 0, err
    value = json.loads(out)
    assert set(value) == {"ok", "size", "count"}
    assert value["size"] in ("S", "M", "L")
    assert "tier: constrained, mode: strict" in err
    attempts = [line for line in err.splitlines() if line.startswith("attempt ")]
    assert attempts[-1].startswith(f"attempt {len(attempts)}: valid (")
    assert "Loading weights" not in err  # no progress bar of transformers'
    # --max-tokens is the length guard: a limit too short for any conforming document
    status = main([*argv, "--max-tokens", "3", "--max-attempts", "1", "Pick one."])
    out, err = capsys.readouterr()
    assert (status, out) == (1, "")
    assert "truncated" in err
    assert "jsonmode: hint: raise --max-tokens" in err


def test_a_folder_without_a_model_is_a_usage_error(capsys, tmp_path, schema_file):
    (tmp_path / "empty").mkdir()
    status = main(
        ["generate", "--model", str(tmp_path / "empty"), "--schema", str(schema_file), "hi"]
    )
    _, err = capsys.readouterr()
    assert status == 2
    assert f"jsonmode: error: UsageError: {tmp_path / 'empty'} holds no transformers model" in err
    assert "jsonmode: hint: a folder written by save_pretrained" in err


def test_a_local_folder_without_transformers_says_what_to_install(
    capsys, monkeypatch, tmp_path, schema_file
):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import fails
    status = main(["generate", "--model", str(tmp_path), "--schema", str(schema_file), "hi"])
    _, err = capsys.readouterr()
    assert status == 2
    assert "is a local folder, which needs transformers" in err
    assert "pip install" in err


def test_stream_and_batch_with_a_local_folder(capsys, model_dir, schema_file, tmp_path):
    argv = ["--model", str(model_dir), "--schema", str(schema_file), "--max-tokens", "48"]
    status = main(["generate", "--stream", *argv, "Pick one."])
    out, err = capsys.readouterr()
    assert status == 0, err
    final = json.loads(out)
    events = [json.loads(line) for line in err.splitlines()]
    # the last attempt's partials: each holds only what the final value holds
    last = events[max((i for i, e in enumerate(events) if "retry" in e), default=-1) + 1 :]
    partials = [event["partial"] for event in last]
    assert len(partials) >= 2
    for partial in partials:
        assert partial.items() <= final.items()
    source = tmp_path / "in.jsonl"
    source.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    status = main(["batch", *argv, "--input", str(source), "--output", "-", "--concurrency", "2"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert [set(json.loads(line)["value"]) for line in out.splitlines()] == [set(final)] * 2
    assert err.startswith("jsonmode: 2 prompts: 2 conformed")
