"""``jsonmode validate`` and ``jsonmode repair``: check (or repair) a document against a
schema, or a text against a grammar (see :mod:`jsonmode.cli`)."""

from __future__ import annotations

import argparse
import pathlib
import sys

from jsonmode.cli import common
from jsonmode.errors import UsageError
from jsonmode.repair.parse import Mode, parse

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """``jsonmode validate`` and ``jsonmode repair`` (``args.command``; see
    :mod:`jsonmode.cli`): INPUT's value on stdout, exit status 0; a mismatch raises (the
    caller reports it). Never imports litellm."""
    grammar = common.compiled_grammar(args)
    if grammar is not None:
        from jsonmode.texts import GrammarJudge

        text = _read_exact(args.input)
        judged = text
        if grammar.diagnose(text) is not None:  # (then as an editor saved it: see jsonmode.cli)
            ending = next((end for end in ("\r\n", "\n") if text.endswith(end)), "")
            judged = text[: len(text) - len(ending)]
        GrammarJudge(grammar, "strict").read(judged, truncated=False)  # raises on a mismatch
        common.write_text(text)
        return 0
    mode: Mode = "repair" if args.command == "repair" else "strict"
    spec = common.schema_of(args)
    common.print_schema_warnings(spec, args.strict_schema)
    parsed = parse(_read(args.input), spec, mode)
    if args.verbose:
        for repair in parsed.repairs:
            print(f"repair: {repair}", file=sys.stderr)
    common.emit(parsed.data, args.indent, sys.stdout)
    return 0


def _read(source: str) -> str:
    """INPUT (a file, or ``-`` for stdin) as UTF-8 text."""
    if source == "-":
        return common.read_stdin()
    try:
        return pathlib.Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {source}: {exc}") from None


def _read_exact(source: str) -> str:
    """INPUT as UTF-8 text without newline translation (a grammar sees every byte)."""
    try:
        if source == "-":
            buffer = getattr(sys.stdin, "buffer", None)
            if buffer is None:  # a text stream standing in for stdin (tests)
                return common.read_stdin()
            data = bytes(buffer.read())
        else:
            data = pathlib.Path(source).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "stdin" if source == "-" else source
        raise UsageError(f"cannot read {where}: not UTF-8 text (at byte {exc.start})") from None
