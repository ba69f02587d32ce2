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
    # one final line break is not part of the text (see the subprocess tests below);
    # a second one is
    assert run(capsys, ["validate", "--regex", "[a-z]+"], b"abc\n", monkeypatch)[:2] == (
        0,
        "abc\n",
    )
    status, _, err = run(capsys, ["validate", "--regex", "[a-z]+"], b"abc\n\n", monkeypatch)
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


# -- the real command (issue 38.8, 38.5, 38.10, 39.11) -------------------------------------


def command(*argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``python -m jsonmode.cli ARGV`` in a child process (it sees this tree through
    PYTHONPATH, as the tests do)."""
    return subprocess.run(
        [sys.executable, "-m", "jsonmode.cli", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("data", "status"),
    [
        pytest.param(b"e4 Nf3", 0, id="none"),
        pytest.param(b"e4 Nf3\n", 0, id="lf"),
        pytest.param(b"e4 Nf3\r\n", 0, id="crlf"),
        pytest.param(b"e4 Nf3\n\n", 1, id="two"),
        pytest.param(b"e4 Nf3 \n", 1, id="space"),
        pytest.param(b"e4 Nf3\r", 1, id="cr"),
    ],
)
def test_validate_takes_a_file_saved_with_a_final_newline(grammar_file, tmp_path, data, status):
    """An editor ends a file with a line break: that one line break is not part of the
    text (as --schema takes whitespace after the document); the file is written back
    as it is. (Before: exit 1, 'stops matching at byte 6, at "\\n"'.)"""
    moves = tmp_path / "moves.txt"
    moves.write_bytes(data)
    done = command("validate", "--grammar", str(grammar_file), str(moves))
    assert done.returncode == status, done.stderr
    assert done.stdout == (data if status == 0 else b"")
    if status:
        assert b"does not match the grammar: the text " in done.stderr
    regex = command("validate", "--regex", r"[KQRBN]?[a-h][1-8]( [KQRBN]?[a-h][1-8])*", stdin=data)
    assert regex.returncode == status, regex.stderr


def test_validate_help_states_the_newline_rule():
    done = command("validate", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.decode().split())
    assert "one line break (\\n or \\r\\n) at the very end of INPUT is not part of the text" in (
        text
    )


def test_generated_text_still_validates_without_a_newline(capsys, scripted, grammar_file, tmp_path):
    """The round trip: generate writes the text with no newline; validate takes it."""
    scripted("e4 Nf3")
    assert main(["generate", "--grammar", str(grammar_file), "--model", "m", "moves"]) == 0
    out = capsys.readouterr().out
    assert out == "e4 Nf3"
    done = command("validate", "--grammar", str(grammar_file), stdin=out.encode())
    assert (done.returncode, done.stdout) == (0, b"e4 Nf3")


def test_a_bad_regex_is_an_invalid_regular_expression(tmp_path):
    """(Before: 'regex unterminated group ... is not supported' with a hint about
    post-validation, which a --regex never has.)"""
    done = command("validate", "--regex", "(a", stdin=b"a")
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.startswith("jsonmode: error: InvalidGrammarError: invalid regular expression")
    assert "post-validation" not in err
    unsupported = command("validate", "--regex", r"(a)\1", stdin=b"aa")
    assert unsupported.returncode == 2
    assert b"not supported in a regular expression: backreference" in unsupported.stderr
    assert b"post-validation" not in unsupported.stderr


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('start: "a" b\nb: "c"\n', id="lark"),
        pytest.param("?start: expr\nexpr: NUMBER\n%import common.NUMBER\n", id="lark-import"),
        pytest.param('root = "a" ;\n', id="ebnf"),
    ],
)
def test_a_lark_grammar_is_told_it_is_not_gbnf(tmp_path, text):
    """(Before: only "unexpected character ':', expected '::='".)"""
    path = tmp_path / "g.lark"
    path.write_text(text)
    done = command("validate", "--grammar", str(path), stdin=b"ac")
    assert done.returncode == 2
    first, hint = done.stderr.decode().splitlines()
    assert "line 1, column" in first
    assert "not GBNF" in first
    assert "llama.cpp" in first
    assert "root ::=" in hint


def test_nesting_past_the_limit_names_the_limit(tmp_path):
    """256 levels hold (85 parentheses failed: each cost three frames); past them the
    message names max_nesting_depth and does not expect the byte it refuses."""
    path = tmp_path / "arith.gbnf"
    path.write_text(ARITHMETIC)
    deep = b"(" * 256 + b"1" + b")" * 256
    done = command("validate", "--grammar", str(path), stdin=deep)
    assert (done.returncode, done.stdout) == (0, deep)
    deeper = b"(" * 257 + b"1" + b")" * 257
    done = command("validate", "--grammar", str(path), stdin=deeper)
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "stops matching at byte 256" in err
    assert "nesting deeper than max_nesting_depth (256)" in err
    assert "raise it with --max-nesting-depth N" in err  # what the command can do
    assert 'expected "("' not in err
    assert "expected a character in [0-9]" in err
    done = command("validate", "--grammar", str(path), "--max-nesting-depth", "300", stdin=deeper)
    assert (done.returncode, done.stdout) == (0, deeper)
    done = command(
        "validate", "--grammar", str(path), "--max-nesting-depth", "3", stdin=b"((((1))))"
    )
    assert done.returncode == 1
    assert "max_nesting_depth (3)" in done.stderr.decode()
    for bad in (
        ["--grammar", str(path), "--max-nesting-depth", "0"],
        ["--regex", "a", "--max-nesting-depth", "9"],
    ):
        done = command("validate", *bad, stdin=b"a")
        assert done.returncode == 2
        assert "--max-nesting-depth" in done.stderr.decode()


def test_a_grammar_over_a_budget_says_grammar(tmp_path):
    path = tmp_path / "deep.gbnf"
    path.write_text("root ::= " + "(" * 200 + '"a"' + ")" * 200 + "\n")
    done = command("validate", "--grammar", str(path), stdin=b"a")
    assert done.returncode == 2
    assert b"compiling the grammar exceeds the budget" in done.stderr
    assert b"schema" not in done.stderr


ARITHMETIC = """\
root   ::= expr
expr   ::= term (" " [-+] " " term)*
term   ::= factor (" " [*/] " " factor)*
factor ::= [0-9]+ | "(" expr ")"
"""


# -- generate ------------------------------------------------------------------------------


@pytest.fixture
def scripted(monkeypatch):
    """``scripted(*replies)``: the next ``generate`` talks to a ScriptedBackend."""
    from jsonmode import JsonMode
    from jsonmode.backends import ScriptedBackend
    from jsonmode.cli import common
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

        monkeypatch.setattr(common, "build_jsonmode", build)
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
