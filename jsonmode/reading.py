"""One model output → a conforming value, or a typed :class:`~jsonmode.errors.OutputError`.

``strict`` mode reads the text as one JSON document and validates it: no repair at all.
``repair`` mode, when the strict read fails or the value does not conform, extracts
the document from prose or fences, spells Python literals as JSON, repairs its
syntax (refusing any repair that would lose or invent content), coerces wrongly
typed values toward the schema, and validates again. Every change is recorded.

Repair is bounded, whatever the text: outputs over :data:`MAX_REPAIR_CHARS` are
not repaired, nesting deeper than :data:`~jsonmode.repair.syntax.MAX_REPAIR_DEPTH`
is not handed to json-repair, and extraction plus syntax repair of one output stop
at :data:`REPAIR_TIME_LIMIT`. Each bound, when hit, is an
:class:`~jsonmode.errors.OutputParseError` that says which (never a partial value).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jsonmode._json import StrictJSONError, UnrepresentableError, check_value, dumps, loads_strict
from jsonmode._watchdog import DeadlineExceeded, run_until
from jsonmode.errors import (
    OutputError,
    OutputParseError,
    OutputTruncatedError,
    SchemaViolationError,
    UsageError,
)
from jsonmode.repair.coerce import CoercionTimeoutError, coerce
from jsonmode.repair.extract import Candidate, find_candidates
from jsonmode.repair.report import Repair
from jsonmode.repair.syntax import RepairTimeoutError, normalize_literals, repair_syntax
from jsonmode.schema.core import Checked, Schema
from jsonmode.schema.formats import budget as format_budget

__all__ = ["COERCE_TIME_LIMIT", "MAX_REPAIR_CHARS", "REPAIR_TIME_LIMIT", "Mode", "Parsed", "parse"]

Mode = Literal["strict", "repair"]
MODES: tuple[Mode, ...] = ("strict", "repair")

#: Outputs longer than this are read strictly only (an OutputParseError says so).
#: Repair costs about 1.5 µs per character on realistic replies here (json-repair is
#: pure Python), so the longest repairable reply takes ~0.4 s; ~64k tokens of JSON.
MAX_REPAIR_CHARS = 262_144

#: Seconds that extraction and syntax repair of one output may take in all (wall
#: clock, interrupting json-repair where needed; see jsonmode._watchdog).
#: Realistic replies need ~1 ms per kB; hostile text (``'{]' * 8000`` took a minute)
#: stops here with an OutputParseError. Validation and coercion are not counted.
REPAIR_TIME_LIMIT = 0.5
#: Seconds schema-aware coercion may take on one value; past it the value is validated
#: uncoerced (nothing is changed half-way: the coerced copy is dropped whole).
COERCE_TIME_LIMIT = 0.5


@dataclass(frozen=True, slots=True)
class Parsed:
    """A conforming value read from one output.

    Attributes:
        value: what the caller gets: a model instance / typed value for Python types,
            else the JSON value.
        data: the plain JSON value.
        repairs: every repair applied, in order (always empty in strict mode).
    """

    value: Any
    data: Any
    repairs: tuple[Repair, ...] = ()


def check_mode(mode: str) -> Mode:
    if mode not in MODES:
        raise UsageError(f"mode must be 'strict' or 'repair', not {mode!r}")
    return mode


def parse(text: str, schema: object, mode: Mode = "strict", *, truncated: bool = False) -> Parsed:
    """Read ``text`` as a value conforming to ``schema``.

    Args:
        text: the model's output, unchanged.
        schema: anything :meth:`Schema.of` accepts.
        mode: ``"strict"`` (no repair) or ``"repair"``.
        truncated: the backend reported that generation stopped at its length limit.
            A complete document is still accepted (its closing bracket or quote proves
            it ended), but one that cannot be read, or that ends in a number (which
            could have gone on), is reported as truncated.

    Raises:
        OutputParseError, OutputTruncatedError, SchemaViolationError: the output does
            not conform; the error carries the raw text, every issue and the repairs tried.
        InvalidSchemaError, UsageError: bad schema or mode.

    Bounded: repair by the limits above; every format check of the call (each
    candidate, before and after coercion) shares one deadline
    (:data:`jsonmode.schema.formats.FORMAT_TIME_LIMIT`).
    """
    spec = Schema.of(schema)
    check_mode(mode)
    with format_budget():
        return _parse(text, spec, mode, truncated)


def _parse(text: str, spec: Schema, mode: Mode, truncated: bool) -> Parsed:
    if truncated and text.rstrip()[-1:].isdigit():
        # "12" parses, but cut off at the length limit it may be the start of "1234".
        raise _truncated(text, "output was cut off at the length limit inside a number")
    try:
        data = loads_strict(text)
    except StrictJSONError as exc:
        if mode == "strict":
            raise _unreadable(text, str(exc), truncated) from None
        if len(text) > MAX_REPAIR_CHARS:
            why = f"{exc}; at {len(text):,} characters it is too long to repair"
            limit = f"(MAX_REPAIR_CHARS = {MAX_REPAIR_CHARS:,})"
            raise _unreadable(text, f"{why} {limit}", truncated) from None
        return _repair(text, spec, truncated)
    checked = spec.check(data)
    if mode == "strict" or checked.ok:
        # Conforming output is never changed, in either mode.
        return _conforming(text, data, checked, ())
    # The whole reply is one JSON document: coerce it, never hunt inside it.
    return _validate(text, spec, *_coerced(spec, data, ()))


def _coerced(spec: Schema, data: Any, repairs: Sequence[Repair]) -> tuple[Any, tuple[Repair, ...]]:
    """``data`` coerced toward the schema, or unchanged when coercion cannot finish
    within :data:`COERCE_TIME_LIMIT` (a huge value against a schema of many branches):
    coercion is a best effort, and validation then reports what is still wrong."""
    if spec.conforms(data):
        return data, tuple(repairs)
    deadline = time.monotonic() + COERCE_TIME_LIMIT
    try:
        fixed, coercions = coerce(data, spec.json_schema, spec.validator, deadline=deadline)
    except CoercionTimeoutError:
        return data, tuple(repairs)
    return fixed, (*repairs, *coercions)


def _validate(text: str, spec: Schema, data: Any, repairs: Sequence[Repair]) -> Parsed:
    return _conforming(text, data, spec.check(data), repairs)


def _conforming(text: str, data: Any, checked: Checked, repairs: Sequence[Repair]) -> Parsed:
    """``checked`` as a Parsed value, or the SchemaViolationError listing every issue."""
    if not checked.ok:
        count = len(checked.issues)
        raise SchemaViolationError(
            f"output violates the schema ({count} issue{'s' * (count != 1)}): {checked.issues[0]}",
            raw=text,
            issues=checked.issues,
            repairs=repairs,
            value=data,
        )
    return Parsed(checked.value, data, tuple(repairs))


def _truncated(text: str, message: str) -> OutputTruncatedError:
    return OutputTruncatedError(
        message, raw=text, hint="raise max_tokens or ask for a shorter answer"
    )


def _unreadable(text: str, why: str, truncated: bool) -> OutputError:
    if truncated:
        return _truncated(text, f"output was cut off at the length limit: {why}")
    return OutputParseError(f"output is not JSON: {why}", raw=text)


def _read(candidate: Candidate, deadline: float, repairs: list[Repair]) -> Any:
    """The JSON value of one candidate document; appends the text repairs it took.

    Raises:
        StrictJSONError: it cannot be read (RepairTimeoutError when out of time).
        DeadlineExceeded: out of time before json-repair started.
    """
    try:
        return loads_strict(candidate.text)
    except UnrepresentableError:
        raise  # well-formed: no syntax to repair, no stand-in allowed
    except StrictJSONError:
        pass
    fixed = run_until(deadline, normalize_literals, candidate.text)
    if fixed is not candidate.text:
        repairs.append(Repair("$", "python_literal", candidate.text, fixed))
        try:
            return loads_strict(fixed)
        except UnrepresentableError:
            raise
        except StrictJSONError:
            pass
    data = repair_syntax(fixed, depth=candidate.depth or None, deadline=deadline)
    data = check_value(data, fixed)  # json-repair reads 1e400 as inf
    repairs.append(Repair("$", "syntax", fixed, dumps(data)))
    return data


def _out_of_time(text: str, where: str, truncated: bool) -> OutputError:
    return _unreadable(
        text,
        f"repair stopped at its time limit (REPAIR_TIME_LIMIT = {REPAIR_TIME_LIMIT} s) {where}; "
        "nothing was read",
        truncated,
    )


def _repair(text: str, spec: Schema, truncated: bool) -> Parsed:
    """Try every candidate document; exactly one distinct conforming value may win.

    Two different conforming documents in one reply are ambiguous: picking either
    would silently drop the other, so that fails. A document cut off at the end of
    the reply outranks an earlier non-conforming draft: "cut off" is the useful news.
    Running out of :data:`REPAIR_TIME_LIMIT` fails outright: the candidates not
    tried could have conformed too.
    """
    deadline = time.monotonic() + REPAIR_TIME_LIMIT
    stripped = text.strip()
    conforming: dict[str, Parsed] = {}
    violations: list[SchemaViolationError] = []
    failures: list[str] = []
    cut_off = False
    try:
        candidates = run_until(deadline, find_candidates, text)
    except DeadlineExceeded:
        raise _out_of_time(text, "while searching it for JSON", truncated) from None
    for number, candidate in enumerate(candidates, 1):
        if not candidate.closed:
            cut_off = True
            continue
        if time.monotonic() >= deadline:  # validating thousands of small documents adds up
            raise _out_of_time(text, f"at candidate {number} of {len(candidates)}", truncated)
        repairs: list[Repair] = []
        if candidate.text.strip() != stripped:
            repairs.append(Repair("$", "extract", text, candidate.text))
        try:
            data = _read(candidate, deadline, repairs)
        except (DeadlineExceeded, RepairTimeoutError):
            where = f"at candidate {number} of {len(candidates)}"
            raise _out_of_time(text, where, truncated) from None
        except StrictJSONError as exc:
            failures.append(str(exc))
            continue
        try:
            parsed = _validate(text, spec, *_coerced(spec, data, repairs))
        except SchemaViolationError as violation:
            violations.append(violation)
            continue
        conforming.setdefault(dumps(parsed.data), parsed)
    if len(conforming) == 1:
        return next(iter(conforming.values()))
    if conforming:
        raise OutputParseError(
            f"output holds {len(conforming)} different JSON documents that each conform; "
            "refusing to pick one",
            raw=text,
            hint="reply with exactly one JSON document",
        )
    if cut_off:
        raise _truncated(text, "output ends inside an unfinished JSON document (cut off?)")
    if violations:
        raise violations[0]
    raise _unreadable(text, failures[0] if failures else "nothing to read", truncated)
