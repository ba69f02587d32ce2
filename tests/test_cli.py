"""The command line, in process (the subprocess tests against a live server are separate)."""

import io
import json
import pathlib
import re
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


# -- generate, in process (a scripted backend behind the CLI's model options) ----------------


@pytest.fixture
def scripted(monkeypatch):
    """``scripted(*replies)``: the next ``generate`` talks to a ScriptedBackend (no
    sleeps between transport retries); returns the backend."""
    from jsonmode import JsonMode
    from jsonmode.backends import ScriptedBackend
    from jsonmode.cli import common
    from jsonmode.retry import TransportPolicy

    def install(*replies):
        backend = ScriptedBackend(replies)

        def build(args):
            return JsonMode(
                backend,
                args.mode,
                args.max_attempts,
                transport=TransportPolicy(sleep=lambda _: None),
            )

        monkeypatch.setattr(common, "build_jsonmode", build)
        return backend

    return install


def generate(capsys, schema_file, *extra):
    return run(capsys, ["generate", "--schema", str(schema_file), *extra, "Ada, 36"])


def test_verbose_shows_each_transport_retry_and_the_calls_of_each_attempt(
    capsys, scripted, schema_file
):
    from jsonmode.errors import TransientBackendError

    limited = TransientBackendError("RateLimitError: slow down", status_code=429)
    scripted(limited, TransientBackendError("connection reset"), '{"name": "Ada", "age": 36}')
    status, out, err = generate(capsys, schema_file, "-v")
    assert status == 0
    assert json.loads(out) == {"name": "Ada", "age": 36}
    lines = err.splitlines()
    assert lines[0].startswith(
        "transport: call 1 failed (TransientBackendError, HTTP 429: RateLimitError: slow down); "
        "retrying in "
    )
    assert lines[1].startswith(
        "transport: call 2 failed (TransientBackendError: connection reset); retrying in "
    )
    assert lines[0].endswith(" s")
    assert lines[2] == "tier: prompted, mode: strict"
    assert lines[3].startswith("attempt 1: valid (")
    assert lines[3].endswith(", 3 calls)")
    # quiet without -v, and the listener is gone once the command returns
    from jsonmode import events

    assert not events.listeners
    scripted(limited, '{"name": "Ada", "age": 36}')
    status, out, err = generate(capsys, schema_file)
    assert (status, err) == (0, "")


def test_verbose_failure_after_retries_shows_the_calls(capsys, scripted, schema_file):
    from jsonmode.errors import TransientBackendError

    limited = TransientBackendError(
        "RateLimitError: litellm.RateLimitError: RateLimitError: too many", status_code=429
    )
    scripted(*[limited] * 5)
    status, out, err = generate(capsys, schema_file, "-v")
    assert (status, out) == (3, "")
    lines = err.splitlines()
    assert [line.split(" failed")[0] for line in lines[:4]] == [
        f"transport: call {call}" for call in (1, 2, 3, 4)
    ]
    # the error line names each type once
    assert lines[4] == "jsonmode: error: TransientBackendError: RateLimitError: too many"
    assert lines[5].startswith("attempt 1: backend_error (")
    assert lines[5].endswith(", 5 calls)")


def test_error_line_then_hint_line(capsys, scripted, schema_file):
    from jsonmode.errors import TransientBackendError

    timeout = TransientBackendError(
        "the call took longer than 1 s", hint="raise timeout= if the model needs longer"
    )
    scripted(*[timeout] * 5)
    status, _, err = generate(capsys, schema_file)
    assert status == 3
    assert err.splitlines() == [
        "jsonmode: error: TransientBackendError: the call took longer than 1 s",
        "jsonmode: hint: raise --timeout if the model needs longer",
    ]


def test_exhausted_strict_attempts_never_print_the_python_hint(capsys, scripted, schema_file):
    scripted(*['{"name": "Ada"}'] * 3)  # nothing to repair: a property is missing
    status, _, err = generate(capsys, schema_file)
    assert status == 1
    (line,) = err.splitlines()
    assert line.startswith("jsonmode: error: AttemptsExhaustedError: no conforming JSON")
    assert "mode='repair'" not in err
    assert "hint" not in err


def test_repairable_exhaustion_hints_in_cli_syntax(capsys):
    from jsonmode.cli.common import report
    from jsonmode.errors import AttemptsExhaustedError

    error = AttemptsExhaustedError("no conforming JSON", hint="mode='repair' fixes common slips")
    error.repairable = True  # type: ignore[attr-defined]
    report(error, verbose=False)
    assert capsys.readouterr().err.splitlines() == [
        "jsonmode: error: AttemptsExhaustedError: no conforming JSON",
        "jsonmode: hint: --mode repair would repair the last output",
    ]


def test_truncated_exhaustion_hints_max_tokens(capsys, scripted, schema_file):
    from jsonmode.backends import Completion

    scripted(*[Completion('{"name": "Ada", "a', truncated=True)] * 3)
    status, _, err = generate(capsys, schema_file)
    assert status == 1
    assert err.splitlines()[1] == "jsonmode: hint: raise --max-tokens, or ask for a shorter answer"


def test_model_option_errors(capsys, schema_file, tmp_path):
    status, _, err = generate(capsys, schema_file, "--model", "openai/x", "--tier", "constrained")
    assert status == 2
    assert "--tier constrained needs a local model" in err
    assert "jsonmode: hint: pass --model DIR" in err
    status, _, err = generate(capsys, schema_file, "--model", "openai/x", "--max-tokens", "0")
    assert status == 2
    assert "--max-tokens must be positive" in err
    status, _, err = generate(
        capsys, schema_file, "--model", str(tmp_path), "--api-base", "http://127.0.0.1:1/v1"
    )
    assert status == 2
    assert "not a local folder" in err


def test_a_retry_line_names_the_status_once():
    from jsonmode.cli.common import retry_line
    from jsonmode.events import TransportRetried

    said = TransportRetried("TransientBackendError: RateLimitError (HTTP 429): slow", 429, 1.5, 2)
    assert retry_line(said) == (
        "transport: call 2 failed (TransientBackendError: RateLimitError (HTTP 429): slow); "
        "retrying in 1.50 s"
    )
    unsaid = TransportRetried("TransientBackendError: busy", 503, 0.25, 1)
    assert retry_line(unsaid) == (
        "transport: call 1 failed (TransientBackendError, HTTP 503: busy); retrying in 0.25 s"
    )


# -- hints in the command's own terms (issue 38) ----------------------------------------------

_PYTHON_SPELLING = re.compile(
    r"\w=|\w\(|TransportPolicy|max_new_tokens|max_states|compile options|(?<!-)max_tokens"
)


def _gave_up_on_a_long_retry_after():
    from jsonmode.errors import TransientBackendError
    from jsonmode.retry import TransportPolicy

    def call():
        raise TransientBackendError("RateLimitError: slow down", status_code=429, retry_after=30)

    with pytest.raises(TransientBackendError) as caught:
        TransportPolicy(max_delay=5, sleep=lambda _: None).retrying()(call)
    return caught.value


def _hinted_errors():
    from jsonmode.backends.deadline import timed_out
    from jsonmode.errors import BudgetExceededError, TransientBackendError, UnsupportedSchemaError

    return [
        (_gave_up_on_a_long_retry_after(), "try later, or raise --max-retry-wait"),
        (timed_out("litellm:openai/x", 5), "raise --timeout if the model needs longer"),
        (  # a local model past its timeout (backends/transformers.py)
            TransientBackendError("late", hint="raise timeout= or lower max_new_tokens"),
            "raise --timeout or lower --max-tokens",
        ),
        (BudgetExceededError("automaton states", 100), "simplify the schema"),
        (  # a pattern past the DFA's state budget (decoding/regex_dfa.py)
            UnsupportedSchemaError(
                "x",
                hint="the keyword is left to post-validation; raise max_states to enforce it "
                "while decoding, at the cost of compile time and memory",
            ),
            "the keyword is left to post-validation",
        ),
    ]


def test_every_hint_names_only_what_the_command_can_do():
    from jsonmode.cli.common import cli_hint

    for error, said in _hinted_errors():
        hint = cli_hint(error)
        assert hint == said
        assert not _PYTHON_SPELLING.search(hint), hint


def test_the_retry_budget_is_named_as_the_commands_flag():
    from jsonmode.cli.common import one_line

    line = one_line(_gave_up_on_a_long_retry_after())
    assert "transport policy" not in line
    assert line.endswith(" s left of --max-retry-wait (5 s)")


# -- litellm's import: started early, said on a terminal (issue 38) ---------------------------


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize(
    ("terminal", "note", "shown"), [(True, True, True), (False, True, False), (True, False, False)]
)
def test_a_slow_litellm_import_is_said_on_a_terminal(monkeypatch, terminal, note, shown):
    import threading

    import jsonmode.backends.litellm as litellm_backend
    from jsonmode.cli import startup

    release = threading.Event()
    importer = threading.Thread(target=release.wait, daemon=True)
    importer.start()
    monkeypatch.setattr(litellm_backend, "import_in_background", lambda: importer)
    monkeypatch.setattr(startup, "NOTE_AFTER", 0.0)
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    try:
        startup.import_litellm_early("openai/x", note=note)
        for thread in threading.enumerate():
            if thread.name == "jsonmode-import-note":
                thread.join()
    finally:
        release.set()
        importer.join()
    assert stderr.getvalue() == (startup.NOTE + "\n" if shown else "")
