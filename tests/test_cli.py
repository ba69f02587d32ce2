"""The command line, in process (the subprocess tests against a live server are separate)."""

import io
import json
import pathlib
import subprocess
import sys

import pytest

from jsonmode.cli import main

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@pytest.fixture
def schema_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "person.json"
    path.write_text(json.dumps(SCHEMA))
    return path


def run(capsys, argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_validate_file_and_stdin(capsys, monkeypatch, schema_file, tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"name": "Ada", "age": 36}')
    status, out, err = run(capsys, ["validate", "--schema", str(schema_file), str(good)])
    assert (status, json.loads(out), err) == (0, {"name": "Ada", "age": 36}, "")
    status, out, err = run(
        capsys, ["validate", "--schema", str(schema_file)], '{"name": "Ada"}', monkeypatch
    )
    assert status == 1
    assert out == ""
    assert err.count("\n") == 1
    assert "SchemaViolationError" in err
    assert "required" in err


def test_validate_is_strict(capsys, monkeypatch, schema_file):
    status, _, err = run(
        capsys, ["validate", "--schema", str(schema_file)], "{'name': 'A', 'age': 1}", monkeypatch
    )
    assert status == 1
    assert "OutputParseError" in err


def test_repair_prints_value_and_lists_repairs_verbose(capsys, monkeypatch, schema_file):
    raw = "```json\n{'name': 'Ada', 'age': '36',}\n```"
    status, out, err = run(capsys, ["repair", "-v", "--schema", str(schema_file)], raw, monkeypatch)
    assert status == 0
    assert json.loads(out) == {"name": "Ada", "age": 36}
    assert "string_to_integer" in err
    assert "extract" in err


def test_repair_failure_verbose_shows_issues(capsys, monkeypatch, schema_file):
    status, out, err = run(
        capsys, ["repair", "-v", "--schema", str(schema_file)], '{"age": "x"}', monkeypatch
    )
    assert status == 1
    assert out == ""
    assert "issue: $ (required)" in err
    assert "issue: $.age (type)" in err


def test_indent(capsys, monkeypatch, schema_file):
    status, out, _ = run(
        capsys,
        ["validate", "--indent", "2", "--schema", str(schema_file)],
        '{"name":"A","age":1}',
        monkeypatch,
    )
    assert status == 0
    assert out == '{\n  "name": "A",\n  "age": 1\n}\n'


def test_usage_errors_exit_2(capsys, monkeypatch, tmp_path, schema_file):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": 12}')
    status, _, err = run(capsys, ["validate", "--schema", str(bad)], "{}", monkeypatch)
    assert status == 2
    assert "InvalidSchemaError" in err
    status, _, err = run(capsys, ["validate", "--schema", str(schema_file), str(tmp_path / "nope")])
    assert status == 2
    assert "cannot read" in err
    monkeypatch.delenv("JSONMODE_MODEL", raising=False)
    status, _, err = run(capsys, ["generate", "--schema", str(schema_file), "hi"])
    assert status == 2
    assert "--model" in err


def test_demo_runs_offline_and_says_it_is_scripted(capsys):
    status, out, _ = run(capsys, ["demo"])
    assert status == 0
    assert "SCRIPTED" in out
    assert out.count("valid") >= 3
    assert "truncated" in out
    assert "invalid_json" in out


def test_console_script_is_installed_and_validate_starts_fast(schema_file):
    """`jsonmode validate` must not pay for importing litellm."""
    code = (
        "import sys, runpy; sys.argv = ['jsonmode', 'validate', '--schema', sys.argv[1]];"
        "from jsonmode.cli import main; status = main(sys.argv[1:]);"
        "print('litellm' in sys.modules, status)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(schema_file)],
        input='{"name": "A", "age": 1}',
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "False 0"
