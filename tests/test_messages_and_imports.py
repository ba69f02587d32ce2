"""Messages that read right and imports that say what to do (issue 38)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jsonmode import InvalidSchemaError, OutputParseError, Schema, parse
from jsonmode._json import StrictJSONError, loads_strict


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": "abc', "Unterminated string starting at line 1 column 7"),
        ('["a\x01"]', "Invalid control character at line 1 column 4"),
        ('{"a" 1}', "Expecting ':' delimiter at line 1 column 6"),
    ],
)
def test_json_errors_name_the_place_once(text: str, message: str):
    with pytest.raises(StrictJSONError) as info:
        loads_strict(text)
    assert str(info.value) == message
    with pytest.raises(OutputParseError) as parsed:
        parse(text, {})
    assert parsed.value.message == f"output is not JSON: {message}"


def test_schema_text_errors_name_the_place_once():
    with pytest.raises(InvalidSchemaError) as info:
        Schema.of('{"type": "str')
    assert info.value.message == (
        "schema text is not JSON: Unterminated string starting at line 1, column 10"
    )


def test_validate_says_where_an_unterminated_string_starts(tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "jsonmode.cli", "validate", "--schema", str(schema)],
        input='{"a": "abc',
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == (
        "jsonmode: error: OutputParseError: output is not JSON: "
        "Unterminated string starting at line 1 column 7\n"
    )


def test_the_vllm_adapter_without_vllm_is_an_import_error_that_says_what_to_do():
    # (vLLM hidden even where it is installed: None in sys.modules stops its import)
    code = (
        "import sys, importlib\n"
        "sys.modules['vllm'] = None\n"
        "try:\n"
        "    importlib.import_module('jsonmode.adapters.vllm')\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc.name, sep='|')\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    kind, message = done.stdout.split("\n", 1)
    assert kind.split(".")[0] == "ModuleNotFoundError|vllm"  # (vllm.exceptions here)
    assert message.startswith("jsonmode.adapters.vllm needs vLLM, and 'vllm")
    assert "pip install vllm" in message
    assert "inside vLLM's own environment" in message
