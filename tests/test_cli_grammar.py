"""``jsonmode generate|validate --grammar FILE.gbnf`` (and ``--regex``), in process."""

from __future__ import annotations

import io
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from jsonmode.cli import main

CHESS = """\
# up to four moves
root  ::= move (" " move){0,3}
move  ::= piece? [a-h] [1-8] "+"?
piece ::= [KQRBN]
"""


@pytest.fixture
def grammar_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "chess.gbnf"
    path.write_text(CHESS)
    return path


class _Stdin(io.TextIOWrapper):
    """stdin as a real process has it: text over bytes (``.buffer``)."""


def run(capsys, argv, stdin: bytes | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", _Stdin(io.BytesIO(stdin), encoding="utf-8"))
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


# -- validate ------------------------------------------------------------------------------


def test_validate_a_matching_file_writes_it_back_unchanged(capsys, grammar_file, tmp_path):
    good = tmp_path / "moves.txt"
    good.write_bytes(b"e4 Nf3 Bb5+")
    status, out, err = run(capsys, ["validate", "--grammar", str(grammar_file), str(good)])
    assert (status, out, err) == (0, "e4 Nf3 Bb5+", "")  # no newline added


def test_validate_a_mismatch_exits_1_naming_the_byte_and_the_expectation(
    capsys, monkeypatch, grammar_file
):
    status, out, err = run(
        capsys, ["validate", "--grammar", str(grammar_file)], b"e4 Nz3", monkeypatch
    )
    assert (status, out) == (1, "")
    (line,) = err.splitlines()
    assert line.startswith(
        "jsonmode: error: SchemaViolationError: output does not match the grammar: "
        'the text stops matching at byte 4, at "z" after "e4 N": expected a character in [a-h]'
    )


def test_validate_reads_bytes_without_newline_translation(capsys, monkeypatch, tmp_path):
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"a\r\nb")
    argv = ["validate", "--regex", r"a\r\nb"]
    assert run(capsys, [*argv, str(crlf)])[:2] == (0, "a\r\nb")
    assert run(capsys, argv, b"a\r\nb", monkeypatch)[:2] == (0, "a\r\nb")
    status, _, err = run(capsys, argv, b"a\nb", monkeypatch)
    assert status == 1
    assert "byte 1" in err
    # a trailing newline is a byte the grammar must allow
    status, _, err = run(capsys, ["validate", "--regex", "[a-z]+"], b"abc\n", monkeypatch)
    assert status == 1
    assert 'byte 3, at "\\n" after "abc"' in err


def test_validate_input_that_is_not_utf8_exits_2(capsys, monkeypatch):
    status, _, err = run(capsys, ["validate", "--regex", ".*"], b"\xff", monkeypatch)
    assert status == 2
    assert "not UTF-8" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('root ::= "a"\nbad ::= [a-', "line 2, column 9", id="malformed"),
        pytest.param("root ::= move", "line 1, column 10: undefined rule 'move'", id="undefined"),
        pytest.param('root ::= root "a" | "b"', "left recursion", id="left-recursion"),
    ],
)
def test_a_bad_grammar_exits_2_naming_the_file_and_place(capsys, tmp_path, text, expected):
    path = tmp_path / "bad.gbnf"
    path.write_text(text)
    status, out, err = run(capsys, ["validate", "--grammar", str(path), "-"])
    assert (status, out) == (2, "")
    first = err.splitlines()[0]
    assert first.startswith("jsonmode: error: ")
    assert f"grammar file {path}: " in first
    assert expected in first


def test_grammar_usage_errors_exit_2(capsys, tmp_path, grammar_file):
    status, _, err = run(capsys, ["validate", "--grammar", str(tmp_path / "none.gbnf")])
    assert status == 2
    assert "cannot read grammar file" in err
    status, _, err = run(capsys, ["validate", "--indent", "2", "--grammar", str(grammar_file)])
    assert status == 2
    assert "--indent is for JSON output" in err
    status, _, err = run(capsys, ["validate", "--regex", "(a"])
    assert status == 2
    for argv in (
        ["validate"],  # one of --schema, --grammar, --regex is needed
        ["validate", "--grammar", str(grammar_file), "--regex", "a"],  # only one
        ["repair", "--grammar", str(grammar_file)],  # repair is for JSON
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
    capsys.readouterr()


def test_validate_with_a_grammar_never_imports_litellm(grammar_file):
    code = (
        "import sys; from jsonmode.cli import main; "
        "status = main(['validate', '--grammar', sys.argv[1]]); "
        "print(); print('litellm' in sys.modules, status)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(grammar_file)],
        input="Ke2",
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == ["Ke2", "False 0"]


# -- generate ------------------------------------------------------------------------------


@pytest.fixture
def scripted(monkeypatch):
    """``scripted(*replies)``: the next ``generate`` talks to a ScriptedBackend."""
    from jsonmode import JsonMode, cli
    from jsonmode.backends import ScriptedBackend
    from jsonmode.retry import TransportPolicy

    def install(*replies: Any) -> ScriptedBackend:
        backend = ScriptedBackend(replies)

        def build(args: Any) -> JsonMode:
            return JsonMode(
                backend,
                args.mode,
                args.max_attempts,
                transport=TransportPolicy(sleep=lambda _: None),
            )

        monkeypatch.setattr(cli, "_jsonmode", build)
        return backend

    return install


def test_generate_prints_exactly_the_matching_text(capsys, scripted, grammar_file):
    backend = scripted("e4 Nz3", "e4 Nf3")
    argv = ["generate", "--grammar", str(grammar_file), "-v", "Two moves."]
    status, out, err = run(capsys, argv)
    assert (status, out) == (0, "e4 Nf3")
    lines = err.splitlines()
    assert lines[0] == "tier: prompted, mode: strict"
    assert lines[1].startswith("attempt 1: schema_violation (")
    assert "error: output does not match the grammar: the text stops matching at byte 4" in err
    assert CHESS in backend.requests[0].messages[0]["content"]
    assert "byte 4" in backend.requests[1].messages[-1]["content"]


def test_generate_with_a_regex(capsys, scripted):
    scripted("555-0100")
    status, out, _ = run(capsys, ["generate", "--regex", r"\d{3}-\d{4}", "A number."])
    assert (status, out) == (0, "555-0100")


def test_generate_exhausted_exits_1(capsys, scripted, grammar_file):
    scripted("no", "no")
    argv = ["generate", "--grammar", str(grammar_file), "--max-attempts", "2", "x"]
    status, out, err = run(capsys, argv)
    assert (status, out) == (1, "")
    assert err.startswith(
        "jsonmode: error: AttemptsExhaustedError: no text matching the grammar after 2 attempt(s)"
    )


def test_generate_repair_mode_strips_a_fence(capsys, scripted, grammar_file):
    scripted("```\ne4\n```")
    argv = ["generate", "--grammar", str(grammar_file), "--mode", "repair", "x"]
    assert run(capsys, argv)[:2] == (0, "e4")


def test_generate_refuses_stream_and_a_bad_grammar_before_any_request(
    capsys, scripted, grammar_file, tmp_path
):
    backend = scripted("e4")
    status, _, err = run(capsys, ["generate", "--grammar", str(grammar_file), "--stream", "x"])
    assert status == 2
    assert "--stream is for JSON output" in err
    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "a" (')
    status, _, err = run(capsys, ["generate", "--grammar", str(bad), "x"])
    assert status == 2
    assert "line 1, column 14" in err
    assert backend.requests == []


def test_generate_with_a_local_model_folder_decodes_under_the_grammar(
    capsys, tmp_path, grammar_file
):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from jsonmode import compile_grammar
    from jsonmode.demo import random_local_model

    model, tokenizer = random_local_model(seed=1)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    argv = ["generate", "--model", str(folder), "--grammar", str(grammar_file)]
    status, out, err = run(capsys, [*argv, "--temperature", "1.5", "--max-tokens", "48", "-v", "x"])
    assert status == 0, err
    assert compile_grammar(CHESS).accepts(out), out
    assert "tier: constrained, mode: strict" in err
