"""One model output → a conforming value, or a typed :class:`~jsonmode.errors.OutputError`.

``strict`` mode reads the text as one JSON document and validates it: no repair at all.
``repair`` mode, when the strict read fails or the value does not conform, extracts
the document from prose or fences, spells Python literals as JSON, repairs its
syntax (refusing any repair that would lose or invent content), coerces wrongly
typed values toward the schema, and validates again. Every change is recorded.

Double-encoded JSON: a reply that is one JSON string whose content is a JSON object
or array (``"{\"name\": \"Ada\"}"``), where the schema does not accept that string
as it is. ``repair`` mode reads the string's content as the reply (then repairs,
coerces and validates it as usual) and records a ``double_encoded`` repair;
``strict`` mode rejects it with an issue that says the document was sent inside a
string. One level only: a string inside that string is not unwrapped again. A
schema that accepts the string (``{"type": "string"}``, ``{}``) gets it unchanged.

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
from typing import Any

from jsonmode._json import StrictJSONError, UnrepresentableError, check_value, dumps, loads_strict
from jsonmode._watchdog import DeadlineExceeded, run_until
from jsonmode.errors import (
    OutputError,
    OutputParseError,
    OutputTruncatedError,
    SchemaViolationError,
    UsageError,
)
from jsonmode.records import Mode
from jsonmode.repair.coerce import CoercionTimeoutError, coerce
from jsonmode.repair.extract import Candidate, find_candidates
from jsonmode.repair.report import Repair
from jsonmode.repair.syntax import RepairTimeoutError, normalize_literals, repair_syntax
from jsonmode.schema.core import Checked, Schema
from jsonmode.schema.formats import budget as format_budget
from jsonmode.schema.validation import Issue

__all__ = ["COERCE_TIME_LIMIT", "MAX_REPAIR_CHARS", "REPAIR_TIME_LIMIT", "Mode", "Parsed", "parse"]

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


def parse(
    text: str | bytes,
    schema: object,
    mode: Mode = "strict",
    *,
    truncated: bool = False,
    context: Any = None,
) -> Parsed:
    """Read ``text`` as a value conforming to ``schema``.

    Args:
        text: the model's output, unchanged.
        schema: anything :meth:`Schema.of` accepts.
        mode: ``"strict"`` (no repair) or ``"repair"``.
        truncated: the backend reported that generation stopped at its length limit.
            A complete document is still accepted (its closing bracket or quote proves
            it ended), but one that cannot be read, or that ends in a number (which
            could have gone on), is reported as truncated.
        context: pydantic's validation context (``info.context`` in a validator), as
            pydantic defines it for ``model_validate(..., context=...)``; handed to
            every check of the call (before and after repair or coercion). Unused
            by JSON Schema inputs.

    Raises:
        OutputParseError, OutputTruncatedError, SchemaViolationError: the output does
            not conform; the error carries the raw text, every issue and the repairs tried.
        InvalidSchemaError, UsageError: bad schema or mode; ``text`` neither ``str``
            nor UTF-8 ``bytes``/``bytearray`` (undecodable bytes are an OutputParseError).
        BudgetExceededError: a schema over a size cap, or whose reading runs past its
            deadline (see :meth:`Schema.of`).

    Bounded: repair by the limits above; every format check of the call (each
    candidate, before and after coercion) shares one CPU budget
    (:data:`jsonmode.schema.formats.FORMAT_TIME_LIMIT`).
    """
    output = _text_of(text)
    spec = Schema.of(schema)
    check_mode(mode)
    with format_budget():
        return _parse(output, spec, mode, truncated, context)


def _text_of(text: object) -> str:
    """The output as ``str``: bytes are read as UTF-8; any other type is a UsageError."""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        try:
            return bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise OutputParseError(
                f"output is not UTF-8 text (at byte {exc.start})",
                raw=bytes(text).decode("utf-8", "replace"),
            ) from None
    raise UsageError(
        f"parse() takes the model's output as str or bytes, not {type(text).__name__}",
        hint="pass the reply's text; to check a value you already have, pass json.dumps(value)",
    )


def _parse(
    text: str, spec: Schema, mode: Mode, truncated: bool, context: Any, unwrap: bool = True
) -> Parsed:
    """``unwrap``: a JSON string holding the document may be unwrapped (one level)."""
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
        return _repair(text, spec, truncated, context)
    checked = spec.check(data, context=context)
    if checked.ok:
        # Conforming output is never changed, in either mode.
        return _conforming(text, data, checked, ())
    content = _document_in(data) if unwrap else None
    if content is not None:
        return _unwrapped(text, content, data, checked, spec, mode, context)
    if mode == "strict":
        return _conforming(text, data, checked, ())  # raises
    # The whole reply is one JSON document: coerce it, never hunt inside it.
    return _validate(text, spec, *_coerced(spec, data, ()), context=context)


# Repairs of the text itself: content that needed one was not a JSON document.
_TEXT_REPAIRS = frozenset({"extract", "python_literal", "syntax"})


def _document_in(data: Any) -> str | None:
    """The content of a JSON string that looks like a JSON object or array, else None."""
    if not isinstance(data, str):
        return None
    content = data.strip()
    if (content[:1], content[-1:]) in (("{", "}"), ("[", "]")):
        return content
    return None


def _unwrapped(
    text: str, content: str, data: str, checked: Checked, spec: Schema, mode: Mode, context: Any
) -> Parsed:
    """The reply ``text`` is the JSON string ``data`` (not conforming) holding ``content``.

    Strict: a SchemaViolationError saying so when the content is a JSON document
    (plus the content's own issues), else the plain violation. Repair: the content
    read as the reply (one level: never unwrapped again), recorded as a
    ``double_encoded`` repair; when it cannot be read either, the string is coerced
    as any other value would be. A failure is blamed on the encoding only when the
    content is JSON as it stands (else the string is judged as it is).
    """
    unwrap = () if mode == "strict" else (Repair("$", "double_encoded", text, content),)
    try:
        inner = _parse(content, spec, mode, False, context, unwrap=False)
    except SchemaViolationError as violation:
        if any(repair.kind in _TEXT_REPAIRS for repair in violation.repairs):
            pass  # not JSON itself: no claim that it is a document (judged as a string)
        else:
            raise _double_encoded(
                text, content, violation.value, violation.issues, (*unwrap, *violation.repairs)
            ) from None
    except OutputError:
        pass  # not a document after all: the string is judged as it is
    else:
        if mode == "strict":
            raise _double_encoded(text, content, inner.data, (), ())
        return Parsed(inner.value, inner.data, (*unwrap, *inner.repairs))
    if mode == "strict":
        return _conforming(text, data, checked, ())  # raises
    return _validate(text, spec, *_coerced(spec, data, ()), context=context)


def _double_encoded(
    text: str,
    content: str,
    document: Any,
    issues: Sequence[Issue],
    repairs: Sequence[Repair],
) -> SchemaViolationError:
    """The reply is a JSON string holding the JSON ``document``; ``issues``: how that
    document itself fails the schema (at their paths in the document)."""
    noun = "object" if content.startswith("{") else "array"
    issue = Issue(
        "$",
        "type",
        f"the reply is a JSON string whose content is a JSON {noun} (double-encoded JSON): "
        f"send the {noun} itself, not a string that holds it",
    )
    count = len(issues) + 1
    return SchemaViolationError(
        f"output violates the schema ({count} issue{'s' * (count != 1)}): {issue}",
        raw=text,
        issues=(issue, *issues),
        repairs=repairs,
        value=document,
    )


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


def _validate(
    text: str, spec: Schema, data: Any, repairs: Sequence[Repair], *, context: Any
) -> Parsed:
    return _conforming(text, data, spec.check(data, context=context), repairs)


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


def _repair(text: str, spec: Schema, truncated: bool, context: Any) -> Parsed:
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
            parsed = _validate(text, spec, *_coerced(spec, data, repairs), context=context)
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
