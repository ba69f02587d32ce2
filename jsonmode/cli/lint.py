"""``jsonmode lint SCHEMA``: the schema lint's findings (see :mod:`jsonmode.cli`).

The findings are this command's output, so they go to stdout, one line each in the
format the other commands use on stderr (``jsonmode: warning: /pointer: message``;
``jsonmode: note: ...``), or, with ``--json``, one JSON array of objects (``location``,
``keyword``, ``severity``, ``message``). A summary line goes to stderr. Exit status: 0
without warnings (notes allowed), 1 with warnings, 2 for a schema that cannot be read
or is not a valid JSON Schema (reported by :func:`jsonmode.cli.main` as any error).
Never imports litellm.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from jsonmode.cli import common
from jsonmode.errors import UsageError
from jsonmode.schema.core import Schema

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """``jsonmode lint`` (see the module docstring). Raises what :meth:`Schema.of`
    raises for a bad schema (the caller reports it, exit status 2)."""
    if args.schema == "-":
        if args.type is not None:
            raise UsageError("--type names a type of a TypeScript file, not of stdin")
        records = Schema.of(common.read_stdin()).warnings
    else:
        records = common.schema_file(pathlib.Path(args.schema), args.type).warnings
    if args.json:
        found = [
            {
                "location": record.location,
                "keyword": record.keyword,
                "severity": record.severity,
                "message": record.message,
            }
            for record in records
        ]
        print(json.dumps(found, ensure_ascii=False, indent=2))
    else:
        for record in records:
            print(common.schema_warning_line(record))
    sys.stdout.flush()
    warnings = sum(record.severity == "warning" for record in records if record.location)
    notes = sum(record.severity == "note" for record in records)
    name = "stdin" if args.schema == "-" else args.schema
    print(f"jsonmode: {name}: {_summary(warnings, notes, len(records))}", file=sys.stderr)
    return 1 if any(record.severity == "warning" for record in records) else 0


def _summary(warnings: int, notes: int, shown: int) -> str:
    if not shown:
        return "no warnings"
    parts = [f"{warnings} warning{'s' * (warnings != 1)}"]
    if notes:
        parts.append(f"{notes} note{'s' * (notes != 1)}")
    more = shown - warnings - notes
    if more:
        parts.append("more not listed")
    return ", ".join(parts)
