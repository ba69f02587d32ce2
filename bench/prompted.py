"""Benchmarks for the prompted tier: repair cost per document and façade overhead per request.

    python bench/prompted.py                # full run (1-2 minutes)
    python bench/prompted.py --quick        # short run (a few seconds)
    python bench/prompted.py --json out.json --profile

1. Repair: ~200 deterministic malformed model outputs (bench/corpus.py), each timed
   with ``json_repair.repair_json(text, return_objects=True)`` alone and with
   ``jsonmode.parse(text, schema, mode="repair")`` (the Schema built beforehand),
   then jsonmode's time split into its stages.
2. Façade: ``JsonMode(backend).generate(prompt, schema)`` with a backend that returns
   a fixed valid JSON string at once, minus the cost of calling the backend directly.

Only the standard library and jsonmode's own dependencies are used.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hashlib
import importlib.metadata
import inspect
import io
import json
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Literal

import json_repair
import pydantic
from corpus import SLIPS, Document, build_corpus

import jsonmode
import jsonmode.repair.parse
import jsonmode.repair.syntax
from jsonmode import JsonMode, Schema
from jsonmode._json import StrictJSONError, loads_strict
from jsonmode.errors import OutputError, OutputTruncatedError, SchemaViolationError
from jsonmode.repair.extract import find_candidates
from jsonmode.repair.syntax import ContentLossError, repair_syntax
from jsonmode.session.prompts import first_messages, user_messages

now = time.perf_counter_ns

RATIO_TARGET = 2.0  # jsonmode / json_repair, median over documents
OVERHEAD_TARGET_US = 1000.0  # façade overhead beyond the backend, p90

# -- statistics and tables ------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": percentile(values, 50),
        "p90": percentile(values, 90),
        "mean": statistics.fmean(values) if values else math.nan,
    }


def us(ns: float) -> str:
    return f"{ns / 1000:,.1f}"


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], title: str = "", left: int = 1
) -> str:
    """A plain-text table; the first ``left`` columns are left-aligned, the rest right."""
    body = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "-" * len(line(["-" * w for w in widths]))
    out = [title, rule] if title else [rule]
    out += [line(headers), rule, *(line(r) for r in body), rule]
    return "\n".join(out)


@contextmanager
def gc_paused(keep_gc: bool) -> Any:
    """Pause the cyclic GC around a timed loop (as ``timeit`` does) unless asked not to."""
    gc.collect()
    was_enabled = gc.isenabled()
    if not keep_gc:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# -- 1. repair ------------------------------------------------------------------------

Outcome = Literal["ok", "wrong_value", "rejected"]


def _same_modulo_number_strings(value: Any, truth: Any) -> bool:
    """Equal, counting ``"42"`` as ``42`` (json-repair does not coerce to the schema)."""
    if isinstance(truth, dict):
        return (
            isinstance(value, dict)
            and value.keys() == truth.keys()
            and all(_same_modulo_number_strings(value[k], truth[k]) for k in truth)
        )
    if isinstance(truth, list):
        return (
            isinstance(value, list)
            and len(value) == len(truth)
            and all(_same_modulo_number_strings(v, t) for v, t in zip(value, truth, strict=True))
        )
    if isinstance(truth, (int, float)) and not isinstance(truth, bool) and isinstance(value, str):
        try:
            return float(value) == truth
        except ValueError:
            return False
    return bool(value == truth) and type(value) is type(truth)


def _json_repair_outcome(doc: Document) -> str:
    try:
        value = json_repair.repair_json(doc.text, return_objects=True)
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    if value == doc.truth:
        return "exact"
    if _same_modulo_number_strings(value, doc.truth):
        return "same up to number strings"
    return "different value"


def _guard_fired(text: str) -> bool:
    """Whether the content-loss guard refused a repair of some candidate in ``text``."""
    for candidate in find_candidates(text):
        if not candidate.closed:
            continue
        try:
            loads_strict(candidate.text)
        except StrictJSONError:
            try:
                repair_syntax(candidate.text)
            except ContentLossError:
                return True
    return False


def _jsonmode_outcome(doc: Document, spec: Schema) -> tuple[Outcome, str, bool]:
    """(outcome, reason, guard fired) for one document."""
    try:
        parsed = jsonmode.parse(doc.text, spec, mode="repair")
    except OutputError as exc:
        guard = _guard_fired(doc.text)
        if isinstance(exc, OutputTruncatedError):
            kind = "reported as truncated"
        elif isinstance(exc, SchemaViolationError):
            kind = "schema violation"
        elif guard:
            kind = "content-loss guard"
        else:
            kind = "parse error"
        return "rejected", f"{kind}: {exc.message[:110]}", guard
    if parsed.data != doc.truth:
        return "wrong_value", "accepted a value that differs from the intended one", False
    return "ok", "", False


def _strict_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _size_bucket(chars: int) -> str:
    if chars < 500:
        return "< 500 chars"
    if chars < 2000:
        return "500-2000 chars"
    return ">= 2000 chars"


def bench_repair(
    corpus: list[Document], *, min_reps: int, max_reps: int, target_ns: int, keep_gc: bool
) -> list[dict[str, Any]]:
    """Per-document timings: calls of both readers interleaved, each timed on its own."""
    specs = {doc.kind: Schema.of(doc.schema) for doc in corpus}  # built before timing
    results = []
    for doc in corpus:
        text, spec = doc.text, specs[doc.kind]

        def with_json_repair(text: str = text) -> None:
            json_repair.repair_json(text, return_objects=True)

        def with_jsonmode(text: str = text, spec: Schema = spec) -> None:
            with suppress(OutputError):
                jsonmode.parse(text, spec, mode="repair")

        for warm in (with_json_repair, with_jsonmode, with_json_repair, with_jsonmode):
            warm()
        started = now()
        with_json_repair()
        with_jsonmode()
        estimate = max(now() - started, 1)
        reps = max(min_reps, min(max_reps, target_ns // estimate))
        jr_ns: list[int] = []
        jm_ns: list[int] = []
        with gc_paused(keep_gc):
            for rep in range(reps):
                order = (
                    ((with_json_repair, jr_ns), (with_jsonmode, jm_ns))
                    if rep % 2 == 0
                    else ((with_jsonmode, jm_ns), (with_json_repair, jr_ns))
                )
                for fn, sink in order:
                    t0 = now()
                    fn()
                    sink.append(now() - t0)
        outcome, reason, guard = _jsonmode_outcome(doc, spec)
        jr_median, jm_median = statistics.median(jr_ns), statistics.median(jm_ns)
        results.append(
            {
                "id": doc.id,
                "kind": doc.kind,
                "slips": list(doc.slips),
                "chars": len(doc.text),
                "strict_json": _strict_json(doc.text),
                "reps": reps,
                "json_repair_ns": {"median": jr_median, "p90": percentile(jr_ns, 90)},
                "jsonmode_ns": {"median": jm_median, "p90": percentile(jm_ns, 90)},
                "ratio": jm_median / jr_median,
                "jsonmode_outcome": outcome,
                "jsonmode_reason": reason,
                "content_loss_guard": guard,
                "json_repair_outcome": _json_repair_outcome(doc),
            }
        )
    return results


def group_rows(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {"all documents": docs}
    accepted = [d for d in docs if d["jsonmode_outcome"] == "ok"]
    groups["accepted by jsonmode"] = accepted
    groups["strict JSON (schema-level slips only)"] = [d for d in docs if d["strict_json"]]
    groups["needs syntax repair or extraction"] = [d for d in docs if not d["strict_json"]]
    for bucket in ("< 500 chars", "500-2000 chars", ">= 2000 chars"):
        groups[f"size {bucket}"] = [d for d in docs if _size_bucket(d["chars"]) == bucket]
    for kind in sorted({d["kind"] for d in docs}):
        groups[f"kind {kind}"] = [d for d in docs if d["kind"] == kind]
    for slip in SLIPS:
        groups[f"slip {slip}"] = [d for d in docs if slip in d["slips"]]
    out = {}
    for name, members in groups.items():
        if not members:
            continue
        jr = [d["json_repair_ns"]["median"] for d in members]
        jm = [d["jsonmode_ns"]["median"] for d in members]
        ratios = [d["ratio"] for d in members]
        out[name] = {
            "documents": len(members),
            "median_chars": percentile([d["chars"] for d in members], 50),
            "json_repair_ns": summary(jr),
            "jsonmode_ns": summary(jm),
            "ratio": {**summary(ratios), "of_totals": sum(jm) / sum(jr)},
        }
    return out


_STAGES = (
    ("strict parse (loads_strict)", jsonmode.repair.parse, "loads_strict"),
    ("extraction (find_candidates)", jsonmode.repair.parse, "find_candidates"),
    ("json_repair.repair_json", json_repair, "repair_json"),
    ("content-loss check (_check_content)", jsonmode.repair.syntax, "_check_content"),
    ("coercion (coerce)", jsonmode.repair.parse, "coerce"),
    ("validation (Schema.check)", Schema, "check"),
)
_CHECK = "content-loss check (_check_content)"
# Helpers of the content-loss check, timed in a second pass (those that exist and are
# plain functions: the library may rename them).
_CHECK_PARTS = ("_strip_comments", "_tokens", "_stands_in", "_empty_strings", "_finite")


@contextmanager
def probes(
    targets: Sequence[tuple[str, Any, str]], spent: Counter[str], calls: Counter[str]
) -> Any:
    """Replace each target (at the name jsonmode calls it by) with an inclusive timer.

    Recursive calls are timed once, at the outermost call.
    """
    saved = []
    depth: Counter[str] = Counter()
    for label, owner, attr in targets:
        original = getattr(owner, attr)

        def timed(*args: Any, _f: Callable[..., Any] = original, _l: str = label, **kw: Any) -> Any:
            if depth[_l]:
                return _f(*args, **kw)
            depth[_l] += 1
            t0 = now()
            try:
                return _f(*args, **kw)
            finally:
                spent[_l] += now() - t0
                calls[_l] += 1
                depth[_l] -= 1

        saved.append((owner, attr, original))
        setattr(owner, attr, timed)
    try:
        yield
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


def _parse_corpus_timed(
    corpus: list[Document], specs: dict[str, Schema], reps: int, keep_gc: bool
) -> int:
    total = 0
    with gc_paused(keep_gc):
        for _ in range(reps):
            for doc in corpus:
                t0 = now()
                with suppress(OutputError):
                    jsonmode.parse(doc.text, specs[doc.kind], mode="repair")
                total += now() - t0
    return total


def cost_split(corpus: list[Document], reps: int, keep_gc: bool) -> dict[str, Any]:
    """Where jsonmode.parse spends its time over the corpus (inclusive timers, two passes)."""
    specs = {doc.kind: Schema.of(doc.schema) for doc in corpus}
    runs = reps * len(corpus)
    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    with probes(_STAGES, spent, calls):
        total = _parse_corpus_timed(corpus, specs, reps, keep_gc)
    stages: dict[str, dict[str, Any]] = {
        label: {
            "us_per_document": spent[label] / runs / 1000,
            "calls_per_document": calls[label] / runs,
            "share": spent[label] / total,
        }
        for label, _, _ in _STAGES
    }
    rest = total - sum(spent.values())
    stages["rest of jsonmode (glue, exceptions, timers)"] = {
        "us_per_document": rest / runs / 1000,
        "calls_per_document": None,
        "share": rest / total,
    }

    syntax = jsonmode.repair.syntax
    parts = [
        (name, syntax, name)
        for name in _CHECK_PARTS
        if inspect.isfunction(getattr(syntax, name, None))
        and not inspect.isgeneratorfunction(getattr(syntax, name))
    ]
    part_spent: Counter[str] = Counter()
    part_calls: Counter[str] = Counter()
    with probes([(_CHECK, syntax, "_check_content"), *parts], part_spent, part_calls):
        _parse_corpus_timed(corpus, specs, reps, keep_gc)
    check_total = part_spent[_CHECK] or 1
    check_parts: dict[str, dict[str, Any]] = {
        name: {
            "us_per_document": part_spent[name] / runs / 1000,
            "calls_per_document": part_calls[name] / runs,
            "share_of_check": part_spent[name] / check_total,
        }
        for name, _, _ in parts
    }
    check_rest = check_total - sum(part_spent[name] for name, _, _ in parts)
    check_parts["rest (escapes, scalar walk, Counter arithmetic)"] = {
        "us_per_document": check_rest / runs / 1000,
        "calls_per_document": None,
        "share_of_check": check_rest / check_total,
    }
    return {
        "runs": runs,
        "us_per_document": total / runs / 1000,
        "stages": stages,
        "content_check_parts": check_parts,
        "content_check_us_per_document": check_total / runs / 1000,
    }


def _calls(stage: dict[str, Any]) -> str:
    count = stage["calls_per_document"]
    return "" if count is None else f"{count:.2f}"


def print_repair(
    docs: list[dict[str, Any]], groups: dict[str, Any], split: dict[str, Any], n: int
) -> None:
    overall = groups["all documents"]
    jr, jm, ratio = overall["json_repair_ns"], overall["jsonmode_ns"], overall["ratio"]
    print(
        table(
            ["per document (µs)", "median", "p90", "mean"],
            [
                ["json_repair.repair_json alone", us(jr["median"]), us(jr["p90"]), us(jr["mean"])],
                ["jsonmode.parse(mode='repair')", us(jm["median"]), us(jm["p90"]), us(jm["mean"])],
                [
                    "ratio jsonmode / json_repair",
                    f"{ratio['median']:.2f}x",
                    f"{ratio['p90']:.2f}x",
                    f"{ratio['mean']:.2f}x",
                ],
            ],
            title=f"1. Repair time per document ({n} documents; each row: median over "
            "repetitions per document, then median/p90/mean over documents)",
        )
    )
    met = "MET" if ratio["median"] <= RATIO_TARGET else "NOT MET"
    print(
        f"target: median ratio <= {RATIO_TARGET:.0f}x ... {met} ({ratio['median']:.2f}x); "
        f"ratio of summed times {ratio['of_totals']:.2f}x\n"
    )
    rows = []
    for name, group in groups.items():
        rows.append(
            [
                name,
                group["documents"],
                f"{group['median_chars']:.0f}",
                us(group["json_repair_ns"]["median"]),
                us(group["jsonmode_ns"]["median"]),
                us(group["jsonmode_ns"]["p90"]),
                f"{group['ratio']['median']:.2f}x",
                f"{group['ratio']['p90']:.2f}x",
            ]
        )
    print(
        table(
            ["group", "docs", "chars", "jr med µs", "jm med µs", "jm p90 µs", "ratio", "ratio p90"],
            rows,
            title="Breakdown (a document counts under every slip it has)",
        )
    )
    print()
    print(
        table(
            ["stage", "µs/doc", "calls/doc", "share"],
            [
                [label, f"{st['us_per_document']:,.1f}", _calls(st), f"{100 * st['share']:.1f}%"]
                for label, st in split["stages"].items()
            ],
            title=f"Where jsonmode.parse spends its time (mean over {split['runs']} parses, "
            f"{split['us_per_document']:,.1f} µs/doc with timers; inclusive timers)",
        )
    )
    print()
    print(
        table(
            ["inside the content-loss check", "µs/doc", "calls/doc", "share of check"],
            [
                [
                    label,
                    f"{st['us_per_document']:,.1f}",
                    _calls(st),
                    f"{100 * st['share_of_check']:.1f}%",
                ]
                for label, st in split["content_check_parts"].items()
            ],
            title="Content-loss check, second timed pass "
            f"({split['content_check_us_per_document']:,.1f} µs/doc with timers)",
        )
    )
    print()
    outcomes = Counter((d["jsonmode_outcome"], d["json_repair_outcome"]) for d in docs)
    print(
        table(
            ["jsonmode outcome", "json_repair alone", "docs"],
            [[a, b, c] for (a, b), c in sorted(outcomes.items())],
            title="Outcomes against the intended value",
            left=2,
        )
    )
    handled = ("exact", "same up to number strings")
    lost = [
        d for d in docs if d["jsonmode_outcome"] != "ok" and d["json_repair_outcome"] in handled
    ]
    guard = [d for d in lost if d["content_loss_guard"]]
    print(
        f"\njson_repair alone recovers the content but jsonmode does not: {len(lost)} document(s), "
        f"{len(guard)} of them through the content-loss guard"
    )
    flagged = [d for d in docs if d["jsonmode_outcome"] != "ok"]
    if flagged:
        print(
            table(
                ["id", "kind", "slips", "json_repair alone", "jsonmode"],
                [
                    [
                        d["id"],
                        d["kind"],
                        "+".join(d["slips"]),
                        d["json_repair_outcome"],
                        (d["jsonmode_reason"] or d["jsonmode_outcome"])[:100],
                    ]
                    for d in flagged
                ],
                title="Documents jsonmode did not read as intended (timed above like the rest)",
                left=5,
            )
        )
    print()


# -- 2. façade ----------------------------------------------------------------------


class Person(pydantic.BaseModel):
    name: str
    age: int
    email: str
    active: bool
    score: float
    tags: list[str]


PERSON_DICT: dict[str, Any] = {
    "title": "Person",
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
        "active": {"type": "boolean"},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "email", "active", "score", "tags"],
    "additionalProperties": False,
}

PERSON_TEXT = json.dumps(
    {
        "name": "Ada Lovelace",
        "age": 36,
        "email": "ada@example.com",
        "active": True,
        "score": 0.93,
        "tags": ["math", "poetry"],
    }
)


class Owner(pydantic.BaseModel):
    name: str
    email: str
    team: str


class Location(pydantic.BaseModel):
    city: str
    country: str
    lat: float
    lon: float


class Metrics(pydantic.BaseModel):
    views: int
    clicks: int
    ctr: float


class Flags(pydantic.BaseModel):
    archived: bool
    pinned: bool


class Ticket(pydantic.BaseModel):
    """20 leaf properties in five nested objects."""

    id: int
    title: str
    status: Literal["open", "closed", "pending"]
    priority: int
    tags: list[str]
    owner: Owner
    location: Location
    metrics: Metrics
    flags: Flags
    notes: str | None


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


_S, _I, _N, _B = ({"type": t} for t in ("string", "integer", "number", "boolean"))
TICKET_DICT: dict[str, Any] = {
    "title": "Ticket",
    **_obj(
        {
            "id": _I,
            "title": _S,
            "status": {"enum": ["open", "closed", "pending"]},
            "priority": _I,
            "tags": {"type": "array", "items": _S},
            "owner": _obj({"name": _S, "email": _S, "team": _S}),
            "location": _obj({"city": _S, "country": _S, "lat": _N, "lon": _N}),
            "metrics": _obj({"views": _I, "clicks": _I, "ctr": _N}),
            "flags": _obj({"archived": _B, "pinned": _B}),
            "notes": {"type": ["string", "null"]},
        }
    ),
}

TICKET_TEXT = json.dumps(
    {
        "id": 4711,
        "title": "Checkout fails for EU cards",
        "status": "open",
        "priority": 2,
        "tags": ["payments", "eu"],
        "owner": {"name": "Grace Hopper", "email": "grace@example.com", "team": "payments"},
        "location": {"city": "Berlin", "country": "DE", "lat": 52.52, "lon": 13.405},
        "metrics": {"views": 1234, "clicks": 87, "ctr": 0.0705},
        "flags": {"archived": False, "pinned": True},
        "notes": None,
    }
)

PROMPT = "Extract the record from: Ada Lovelace, 36, ada@example.com, active, score 0.93."

_CASES: list[tuple[str, object, str]] = [
    ("pydantic model, 6 fields", Person, PERSON_TEXT),
    ("dict JSON Schema, 6 fields", PERSON_DICT, PERSON_TEXT),
    ("pydantic model, 20 nested props", Ticket, TICKET_TEXT),
    ("dict JSON Schema, 20 nested props", TICKET_DICT, TICKET_TEXT),
]


def _round_robin(
    fns: dict[str, Callable[[], Any]], calls: int, rounds: int, keep_gc: bool
) -> dict[str, list[int]]:
    """Time every call of each function; functions take turns in ``rounds`` blocks, so
    that drift in machine speed spreads evenly over them."""
    for fn in fns.values():
        for _ in range(max(50, calls // 20)):
            fn()
    times: dict[str, list[int]] = {name: [] for name in fns}
    block = max(1, calls // rounds)
    for _ in range(rounds):
        for name, fn in fns.items():
            sink = times[name]
            with gc_paused(keep_gc):
                for _ in range(block):
                    t0 = now()
                    fn()
                    sink.append(now() - t0)
    return times


async def _around_robin(
    fns: dict[str, Callable[[], Awaitable[Any]]], calls: int, rounds: int, keep_gc: bool
) -> dict[str, list[int]]:
    """:func:`_round_robin` for coroutine functions, awaited one at a time."""
    for fn in fns.values():
        for _ in range(max(50, calls // 20)):
            await fn()
    times: dict[str, list[int]] = {name: [] for name in fns}
    block = max(1, calls // rounds)
    for _ in range(rounds):
        for name, fn in fns.items():
            sink = times[name]
            with gc_paused(keep_gc):
                for _ in range(block):
                    t0 = now()
                    await fn()
                    sink.append(now() - t0)
    return times


def _messages_for(schema: object) -> list[dict[str, Any]]:
    """What a FunctionBackend passes to the callable: the façade's first messages."""
    spec = Schema.of(schema)
    return [dict(m) for m in first_messages(spec, user_messages(PROMPT))]


def _expected(schema: object, text: str) -> Any:
    data = json.loads(text)
    return schema.model_validate(data) if isinstance(schema, type) else data


def _row(case: str, mode: str, path: str, times: list[int], base: list[int]) -> dict[str, Any]:
    call, backend = summary(times), summary(base)
    return {
        "schema": case,
        "mode": mode,
        "path": path,
        "calls": len(times),
        "call_us": {k: v / 1000 for k, v in call.items()},
        "backend_direct_us": {k: v / 1000 for k, v in backend.items()},
        "overhead_us": {k: (call[k] - backend[k]) / 1000 for k in call},
    }


SYNC = "generate"
ASYNC_SYNC_FN = "agenerate, sync fn backend"
ASYNC_ASYNC_FN = "agenerate, async fn backend"
TO_THREAD = "asyncio.to_thread(trivial fn)"


def bench_facade(calls: int, rounds: int, keep_gc: bool) -> list[dict[str, Any]]:
    """Per-request time of the façade with instant backends, minus the backend itself."""
    sync_fns: dict[str, Callable[[], Any]] = {}
    async_fns: dict[str, Callable[[], Awaitable[Any]]] = {}
    checks = []
    plan: list[tuple[str, str, str, str]] = []  # (case, mode, path, key of the baseline)
    for case, schema, text in _CASES:
        messages = _messages_for(schema)

        def backend(messages: list[dict[str, Any]], _text: str = text) -> str:
            return _text

        async def abackend(messages: list[dict[str, Any]], _text: str = text) -> str:
            return _text

        sync_fns[f"base {case}"] = lambda b=backend, m=messages: b(m)
        async_fns[f"abase {case}"] = lambda a=abackend, m=messages: a(m)
        for mode in ("strict", "repair"):
            jm = JsonMode(backend, mode=mode)
            ajm = JsonMode(abackend, mode=mode)
            checks.append((case, mode, schema, _expected(schema, text), jm, ajm))
            sync_fns[f"{SYNC} {case} {mode}"] = lambda jm=jm, s=schema: jm.generate(PROMPT, s)
            async_fns[f"{ASYNC_SYNC_FN} {case} {mode}"] = lambda jm=jm, s=schema: jm.agenerate(
                PROMPT, s
            )
            async_fns[f"{ASYNC_ASYNC_FN} {case} {mode}"] = lambda jm=ajm, s=schema: jm.agenerate(
                PROMPT, s
            )
            plan += [
                (case, mode, SYNC, f"base {case}"),
                (case, mode, ASYNC_SYNC_FN, f"base {case}"),
                (case, mode, ASYNC_ASYNC_FN, f"abase {case}"),
            ]
    async_fns[TO_THREAD] = lambda: asyncio.to_thread(len, "x")

    for case, mode, schema, expected, jm, _ in checks:
        assert jm.generate(PROMPT, schema) == expected, (case, mode)
    times = _round_robin(sync_fns, calls, rounds, keep_gc)

    async def run_async() -> dict[str, list[int]]:
        for case, mode, schema, expected, jm, ajm in checks:
            assert await jm.agenerate(PROMPT, schema) == expected, (case, mode)
            assert await ajm.agenerate(PROMPT, schema) == expected, (case, mode)
        return await _around_robin(async_fns, calls, rounds, keep_gc)

    times.update(asyncio.run(run_async()))
    rows = [
        _row(case, mode, path, times[f"{path} {case} {mode}"], times[base])
        for path in (SYNC, ASYNC_SYNC_FN, ASYNC_ASYNC_FN)
        for case, mode, path_, base in plan
        if path_ == path
    ]
    hop = summary(times[TO_THREAD])
    rows.append(
        {
            "schema": "(reference)",
            "mode": "-",
            "path": TO_THREAD,
            "calls": len(times[TO_THREAD]),
            "call_us": {k: v / 1000 for k, v in hop.items()},
            "backend_direct_us": {"median": 0.0, "p90": 0.0, "mean": 0.0},
            "overhead_us": {k: v / 1000 for k, v in hop.items()},
        }
    )
    return rows


def print_facade(rows: list[dict[str, Any]], calls: int, rounds: int) -> None:
    body = []
    for row in rows:
        over = row["overhead_us"]
        reference = row["schema"] == "(reference)"
        body.append(
            [
                row["path"],
                row["schema"],
                row["mode"],
                f"{over['median']:,.1f}",
                f"{over['p90']:,.1f}",
                f"{over['mean']:,.1f}",
                "" if reference else f"{row['backend_direct_us']['median']:,.2f}",
                "" if reference else ("ok" if over["p90"] < OVERHEAD_TARGET_US else "OVER"),
            ]
        )
    print(
        table(
            ["path", "schema", "mode", "overhead med", "p90", "mean", "backend", "<1ms p90"],
            body,
            title=f"2. Façade overhead per request, µs ({calls} calls per row in {rounds} "
            "interleaved rounds; overhead = call time minus calling the backend directly, "
            "whose median is the 'backend' column)",
            left=3,
        )
    )
    worst = max(r["overhead_us"]["p90"] for r in rows if r["schema"] != "(reference)")
    met = "MET" if worst < OVERHEAD_TARGET_US else "NOT MET"
    print(
        f"target: overhead < {OVERHEAD_TARGET_US:.0f} µs (p90, every row) ... {met} "
        f"(worst p90 {worst:,.1f} µs)\n"
    )


# -- profiles -----------------------------------------------------------------------


def _profile(label: str, fn: Callable[[], None], sort: str = "tottime", lines: int = 22) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(sort)
    stats.print_stats(lines)
    text = out.getvalue().strip()
    print(f"cProfile: {label} (sorted by {sort}; cProfile inflates call-heavy code)\n{text}\n")
    return text


def profiles(corpus: list[Document]) -> dict[str, str]:
    specs = {doc.kind: Schema.of(doc.schema) for doc in corpus}

    def parse_corpus() -> None:
        for doc in corpus:
            with suppress(OutputError):
                jsonmode.parse(doc.text, specs[doc.kind], mode="repair")

    def json_repair_corpus() -> None:
        for doc in corpus:
            json_repair.repair_json(doc.text, return_objects=True)

    def facade(schema: object, text: str) -> Callable[[], None]:
        jm = JsonMode(lambda messages: text, mode="repair")

        def run() -> None:
            for _ in range(2000):
                jm.generate(PROMPT, schema)

        return run

    return {
        "jsonmode.parse over the corpus": _profile("jsonmode.parse over the corpus", parse_corpus),
        "json_repair over the corpus": _profile("json_repair over the corpus", json_repair_corpus),
        "generate x2000, pydantic 6 fields, repair": _profile(
            "generate x2000, pydantic 6 fields, repair", facade(Person, PERSON_TEXT), "cumulative"
        ),
        "generate x2000, dict 20 nested props, repair": _profile(
            "generate x2000, dict 20 nested props, repair",
            facade(TICKET_DICT, TICKET_TEXT),
            "cumulative",
        ),
    }


# -- main ---------------------------------------------------------------------------


def _git_state() -> dict[str, Any]:
    """The commit measured, and whether jsonmode/ differs from it (None outside git)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", "jsonmode")
    return {"commit": commit, "jsonmode_modified": None if status is None else bool(status)}


def _versions() -> dict[str, str]:
    out = {}
    for name in ("jsonmode", "json_repair", "pydantic", "jsonschema"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "?"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer documents and repetitions")
    parser.add_argument("--json", metavar="PATH", help="also write every number as JSON here")
    parser.add_argument("--seed", type=int, default=20240601, help="corpus seed")
    parser.add_argument("--docs", type=int, help="corpus size (default 200, quick 60)")
    parser.add_argument("--profile", action="store_true", help="also print cProfile tables")
    parser.add_argument("--gc", action="store_true", help="keep the cyclic GC on while timing")
    args = parser.parse_args(argv)

    size = args.docs or (60 if args.quick else 200)
    if args.quick:
        settings = {
            "min_reps": 5,
            "max_reps": 100,
            "target_ms": 4,
            "split_reps": 1,
            "calls": 400,
            "rounds": 4,
        }
    else:
        settings = {
            "min_reps": 31,
            "max_reps": 1000,
            "target_ms": 60,
            "split_reps": 5,
            "calls": 4000,
            "rounds": 10,
        }
    meta = {
        "command": " ".join([os.path.basename(sys.argv[0]), *(argv or sys.argv[1:])]),
        "quick": args.quick,
        "seed": args.seed,
        "documents": size,
        "gc_during_timing": args.gc,
        "settings": settings,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "versions": _versions(),
        "git": _git_state(),
        "clock": "time.perf_counter_ns",
    }
    print(
        f"jsonmode {meta['versions']['jsonmode']}, json_repair {meta['versions']['json_repair']}, "
        f"pydantic {meta['versions']['pydantic']}, jsonschema {meta['versions']['jsonschema']}; "
        f"Python {meta['python']} on {meta['platform']}; "
        f"{'quick' if args.quick else 'full'} run, seed {args.seed}, "
        f"GC {'on' if args.gc else 'paused'} while timing; {os.cpu_count()} CPUs, "
        f"load average {meta['load_average_at_start'][0]}; "
        f"commit {(meta['git']['commit'] or '?')[:12]}"
        f"{' + uncommitted jsonmode changes' if meta['git']['jsonmode_modified'] else ''}\n"
    )
    started = time.perf_counter()
    corpus = build_corpus(size, args.seed)
    digest = hashlib.sha256("\x00".join(doc.text for doc in corpus).encode()).hexdigest()
    meta["corpus_sha256"] = digest
    print(
        f"corpus: {size} documents, {sum(len(d.text) for d in corpus):,} chars, "
        f"sha256 {digest[:16]}\n"
    )
    docs = bench_repair(
        corpus,
        min_reps=settings["min_reps"],
        max_reps=settings["max_reps"],
        target_ns=settings["target_ms"] * 1_000_000,
        keep_gc=args.gc,
    )
    groups = group_rows(docs)
    split = cost_split(corpus, settings["split_reps"], args.gc)
    print_repair(docs, groups, split, len(corpus))

    rows = bench_facade(settings["calls"], settings["rounds"], args.gc)
    print_facade(rows, settings["calls"], settings["rounds"])

    report: dict[str, Any] = {
        "meta": meta,
        "repair": {
            "targets": {"median_ratio_max": RATIO_TARGET},
            "groups": groups,
            "cost_split": split,
            "rejected_but_json_repair_recovers": [
                d["id"]
                for d in docs
                if d["jsonmode_outcome"] != "ok"
                and d["json_repair_outcome"] in ("exact", "same up to number strings")
            ],
            "documents": docs,
        },
        "facade": {"targets": {"overhead_p90_us_max": OVERHEAD_TARGET_US}, "rows": rows},
    }
    if args.profile:
        report["profiles"] = profiles(corpus)
    report["meta"]["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"total wall time {report['meta']['wall_s']} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, ensure_ascii=False, allow_nan=False, default=str)
            fh.write("\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
