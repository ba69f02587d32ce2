"""The decoder benchmark's numbers: per-engine summaries, jsonmode's findings, per schema.

Part of ``bench/decoder.py`` (see its docstring). :func:`summarize` turns one engine's
run into its correctness and speed figures; :func:`jsonmode_findings` lists everything
jsonmode got wrong (each invalid instance it accepted classified by
:func:`classify_invalid_accepted`); :func:`common_subset` times every engine on the
instances they all accepted; :func:`per_schema` is every outcome, for ``--json``.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from decoder_engines import ENGINES, OPTIONAL_ENGINES
from decoder_sample import Case, Test, _validator
from decoder_workers import GIVEN_PASS, EngineRun, SchemaResult


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mask_stats(times_ns: Sequence[int]) -> dict[str, Any]:
    if not times_ns:
        return {"tokens": 0, "mean_us": None, "median_us": None, "p99_us": None, "max_us": None}
    us = [t / 1000 for t in times_ns]
    return {
        "tokens": len(us),
        "mean_us": statistics.fmean(us),
        "median_us": _percentile(us, 50),
        "p99_us": _percentile(us, 99),
        "max_us": max(us),
    }


def _pointer_map(schema: Any) -> dict[int, str]:
    """id(subschema) -> JSON pointer (unescaped segments), for locating jsonschema errors."""
    out: dict[int, str] = {}

    def visit(node: Any, path: str) -> None:
        if isinstance(node, dict | list) and id(node) not in out:
            out[id(node)] = path
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, value in items:
                visit(value, f"{path}/{key}")

    visit(schema, "")
    return out


def _unescape(pointer: str) -> str:
    return pointer.replace("~1", "/").replace("~0", "~")


_KINDS = ("unenforced", "unenforced_keyword_elsewhere", "bug")
_BRANCHES = re.compile(r"/(?:anyOf|oneOf|allOf)/\d+(?=/|$)")


def classify_invalid_accepted(case: Case, test: Test, unenforced: Sequence[str]) -> dict[str, Any]:
    """Why jsonmode accepted an invalid instance: label noise, unenforced keywords, or a bug.

    Every violation jsonschema reports must lie under a location in ``unenforced``
    (also after dropping ``anyOf/oneOf/allOf`` branch steps, which jsonmode merges);
    for a failed ``anyOf``/``oneOf``, it is enough that one branch's violations do.
    ``unenforced_keyword_elsewhere``: the keyword is unenforced, but at another location.
    """
    if test.jsonschema_valid:
        return {"kind": "label_noise", "errors": []}
    try:
        validator = _validator(case.schema)
        errors = list(validator.iter_errors(test.data))
    except Exception as exc:
        return {"kind": "unknown", "errors": [f"jsonschema failed: {exc!r}"]}
    if not errors:
        return {"kind": "label_noise", "errors": []}
    pointers = _pointer_map(case.schema)
    skipped = [_unescape(u) for u in unenforced]
    merged = {_BRANCHES.sub("", u) for u in skipped}
    skipped_keywords = {u.rsplit("/", 1)[-1] for u in skipped}
    described: list[str] = []

    def rank(error: Any) -> int:
        location = f"{pointers.get(id(error.schema), '?')}/{error.validator}"
        if len(described) < 6:
            described.append(f"{error.validator} at {location}: {error.message[:100]}")
        if (
            location in skipped
            or any(u.startswith(location + "/") for u in skipped)
            or _BRANCHES.sub("", location) in merged
        ):
            return 0
        if error.validator in ("anyOf", "oneOf") and error.context:
            branches: dict[Any, list[Any]] = defaultdict(list)
            for sub in error.context:
                branches[sub.relative_schema_path[0]].append(sub)
            return min(max(rank(sub) for sub in subs) for subs in branches.values())
        return 1 if error.validator in skipped_keywords else 2

    kind = _KINDS[max(rank(error) for error in errors)]
    return {"kind": kind, "errors": described}


def summarize(run: EngineRun, cases: list[Case]) -> dict[str, Any]:
    out: dict[str, Any] = {"engine": run.name, "version": run.version}
    if not run.available:
        out["unavailable"] = run.unavailable_reason
        return out
    compiled = [c for c in cases if run.schemas.get(c.index, SchemaResult()).status == "ok"]
    statuses = Counter(run.schemas[c.index].status for c in cases if c.index in run.schemas)
    valid_all = sum(t.valid for c in cases for t in c.tests)
    outcomes: Counter[tuple[bool, str]] = Counter()
    as_given: Counter[str] = Counter()  # valid instances walked as MaskBench lists them
    mask_times: list[int] = []
    warm_times: list[int] = []
    first_mask: list[float] = []
    for case in compiled:
        first = None
        for test in case.tests:
            record = run.walks.get((case.index, test.index, 1), {"outcome": "missing"})
            outcomes[(test.valid, record["outcome"])] += 1
            if test.valid:
                if test.given_ids:
                    given = run.walks.get((case.index, test.index, GIVEN_PASS), {})
                    as_given["reordered"] += 1
                    as_given[given.get("outcome", "missing")] += 1
                else:
                    as_given[record["outcome"]] += 1
                mask_times.extend(record.get("times", []))
                if first is None and record.get("times"):
                    first = record["times"][0]
                warm = run.walks.get((case.index, test.index, 2))
                if warm is not None:
                    warm_times.extend(warm.get("times", []))
        compile_s = run.schemas[case.index].compile_s or 0.0
        if first is not None:
            first_mask.append(compile_s + first / 1e9)
    valid_compiled = sum(t.valid for c in compiled for t in c.tests)
    invalid_compiled = sum(not t.valid for c in compiled for t in c.tests)
    compile_ms = [run.schemas[c.index].compile_s * 1000 for c in compiled]  # type: ignore[operator]
    out.update(
        {
            "schemas": len(cases),
            "compiled": len(compiled),
            "compiled_pct": 100 * len(compiled) / max(len(cases), 1),
            "statuses": dict(statuses),
            "valid_instances_all": valid_all,
            "valid_instances_compiled": valid_compiled,
            "valid_accepted": outcomes[(True, "accepted")],
            # Capped walks (cut at --walk-cap seconds) are neither accepted nor rejected.
            "valid_accepted_pct": 100
            * outcomes[(True, "accepted")]
            / max(valid_compiled - outcomes[(True, "capped")], 1),
            "valid_accepted_pct_of_all": 100 * outcomes[(True, "accepted")] / max(valid_all, 1),
            # The same instances as MaskBench lists them (members not always in schema order).
            "valid_reordered": as_given["reordered"],
            "valid_accepted_as_given": as_given["accepted"],
            "valid_accepted_as_given_pct": 100
            * as_given["accepted"]
            / max(valid_compiled - as_given["capped"], 1),
            "valid_capped": outcomes[(True, "capped")],
            "valid_errors": outcomes[(True, "error")],
            "invalid_instances_compiled": invalid_compiled,
            "invalid_accepted": outcomes[(False, "accepted")],
            "invalid_accepted_label_noise": sum(
                1
                for c in compiled
                for t in c.tests
                if not t.valid
                and t.jsonschema_valid
                and run.walks.get((c.index, t.index, 1), {}).get("outcome") == "accepted"
            ),
            "invalid_capped": outcomes[(False, "capped")],
            "invalid_errors": outcomes[(False, "error")],
            "compile_ms_median": _percentile(compile_ms, 50),
            "compile_ms_p90": _percentile(compile_ms, 90),
            "compile_ms_max": max(compile_ms) if compile_ms else None,
            "compile_plus_first_mask_ms_median": _percentile([x * 1000 for x in first_mask], 50),
            "mask": _mask_stats(mask_times),
            "mask_second_pass": _mask_stats(warm_times),
            "setup_s": run.ready.get("setup_s"),
            "tokenizer_load_s": run.ready.get("tokenizer_load_s"),
            "rss_setup_mb": (
                run.ready.get("rss_after_setup_kb", 0) - run.ready.get("rss_baseline_kb", 0)
            )
            / 1024,
            "rss_peak_mb": max(run.peak_rss_kb - run.ready.get("rss_baseline_kb", 0), 0) / 1024,
            "workers_started": run.workers_started,
            "walk_timeouts": sum(1 for r in run.schemas.values() if r.walk_timeout),
            "wall_s": run.wall_s,
        }
    )
    if run.name == "jsonmode":
        totals: dict[str, Counter[str]] = {"pass1": Counter(), "pass2": Counter()}
        for result in run.schemas.values():
            for pass_name, counts in result.counters.items():
                totals[pass_name].update(counts)
        for pass_name, counts in totals.items():
            seen = counts["hits"] + counts["misses"]
            out[f"cache_hit_rate_{pass_name}"] = counts["hits"] / seen if seen else None
    return out


def jsonmode_findings(
    runs: dict[str, EngineRun], cases: list[Case], tokenizer: Any
) -> dict[str, Any]:
    """Everything jsonmode got wrong or crashed on, with the first examples."""
    run = runs["jsonmode"]
    peers = [r for name, r in runs.items() if name != "jsonmode" and r.available]
    findings: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_index = {c.index: c for c in cases}
    for index, result in sorted(run.schemas.items()):
        case = by_index[index]
        if result.status == "crash":
            findings["compile_crash"].append({"file": case.file, "error": result.message})
        if result.walk_timeout:
            findings["schema_walk_timeout"].append({"file": case.file})
        if result.status in ("unsupported", "budget", "invalid", "timeout"):
            findings[f"not_compiled_{result.status}"].append(
                {"file": case.file, "error": result.message[:300]}
            )
        if result.status != "ok":
            continue
        unenforced = result.info.get("unenforced", [])
        for test in case.tests:
            record = run.walks.get((index, test.index, 1))
            if record is None:
                continue
            flags = record.get("flags", {})
            where = {"file": case.file, "test": test.index, "valid": test.valid}
            if record["outcome"] == "error":
                findings["walk_exception"].append({**where, **flags})
            elif record["outcome"] == "capped":
                findings["walk_capped"].append(where)
            for flag in (
                "empty_mask",
                "advance_accepts_masked_token",
                "mask_allows_but_advance_rejects",
                "not_finished_after_eos",
            ):
                if flags.get(flag):
                    findings[flag].append({**where, "position": record.get("position")})
            if test.valid and record["outcome"] == "rejected":
                position = record["position"]
                ids = test.ids
                token = ids[position] if position < len(ids) else None
                accepted_by = [
                    peer.name
                    for peer in peers
                    if peer.walks.get((index, test.index, 1), {}).get("outcome") == "accepted"
                ]
                if flags.get("accepts_text_any_order"):
                    # Accepted in another member order: the decoder's schema order and
                    # tests/support/schema_order.py's disagree for this instance.
                    key = "valid_rejected_accepted_in_another_order"
                elif accepted_by:
                    key = "valid_rejected_peer_accepts"
                else:
                    key = "valid_rejected_no_peer_accepts"
                findings[key].append(
                    {
                        "accepted_by": accepted_by,
                        **where,
                        "position": position,
                        "tokens": len(ids),
                        "prefix": tokenizer.decode(ids[:position])[-60:],
                        "token": "<EOS>" if token is None else tokenizer.decode([token]),
                        "accepts_text": flags.get("accepts_text"),
                        "accepts_text_any_order": flags.get(
                            "accepts_text_any_order", flags.get("accepts_text_error")
                        ),
                        "jsonschema_valid": test.jsonschema_valid,
                        "instance": test.text[:300],
                    }
                )
            if not test.valid and record["outcome"] == "accepted":
                verdict = classify_invalid_accepted(case, test, unenforced)
                entry = {**where, "instance": test.text[:300], "errors": verdict["errors"][:4]}
                findings[f"invalid_accepted_{verdict['kind']}"].append(entry)
    return dict(findings)


def common_subset(runs: dict[str, EngineRun], cases: list[Case]) -> dict[str, Any] | None:
    present = [runs[n] for n in (*ENGINES, *OPTIONAL_ENGINES) if n in runs and runs[n].available]
    if len(present) < 2:
        return None
    chosen = [
        (c.index, t.index)
        for c in cases
        for t in c.tests
        if t.valid
        and all(
            r.walks.get((c.index, t.index, 1), {}).get("outcome") == "accepted" for r in present
        )
    ]
    stats = {}
    tokens = 0
    for run in present:
        times = [x for key in chosen for x in run.walks[(*key, 1)]["times"]]
        stats[run.name] = _mask_stats(times)
        tokens = len(times)
    return {"instances": len(chosen), "tokens": tokens, "stats": stats}


def per_category(runs: dict[str, EngineRun], cases: list[Case]) -> dict[str, Any] | None:
    """Per MaskBench category, on common ground (as :func:`common_subset`): each
    engine's compile median over the category's schemas every engine compiled, and its
    mask mean and p99 over the tokens of the category's valid instances every engine
    accepted (first pass)."""
    present = [runs[n] for n in (*ENGINES, *OPTIONAL_ENGINES) if n in runs and runs[n].available]
    if len(present) < 2:
        return None
    compiles = {
        run.name: {
            index: result.compile_s * 1000
            for index, result in run.schemas.items()
            if result.status == "ok" and result.compile_s is not None
        }
        for run in present
    }
    walks = {
        run.name: {key[:2]: walk for key, walk in run.walks.items() if key[2] == 1}
        for run in present
    }
    return category_table([run.name for run in present], cases, compiles, walks)


def category_table(
    names: list[str],
    cases: list[Case],
    compiles: dict[str, dict[int, float]],
    walks: dict[str, dict[tuple[int, int], dict[str, Any]]],
) -> dict[str, Any]:
    """Per category and engine: ``compile_ms_median`` (the category's schemas every
    engine compiled), ``mean_us``/``p99_us`` (the tokens of its valid instances every
    engine accepted) and how many of each; also shared by ``bench/paired.py``."""
    by_category: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        by_category[case.category].append(case)
    table: dict[str, Any] = {}
    for category, members in sorted(by_category.items()):
        schemas = [c.index for c in members if all(c.index in compiles[n] for n in names)]
        accepted = [
            (c.index, t.index)
            for c in members
            for t in c.tests
            if t.valid
            and all(
                walks[name].get((c.index, t.index), {}).get("outcome") == "accepted"
                for name in names
            )
        ]
        row: dict[str, Any] = {"schemas": len(schemas), "instances": len(accepted)}
        for name in names:
            times = [x for key in accepted for x in walks[name][key]["times"]]
            stats = _mask_stats(times)
            row[name] = {
                "compile_ms_median": _percentile([compiles[name][i] for i in schemas], 50),
                "mean_us": stats["mean_us"],
                "p99_us": stats["p99_us"],
                "tokens": stats["tokens"],
            }
        table[category] = row
    return table


def per_schema(run: EngineRun, cases: list[Case]) -> dict[str, Any]:
    """Every schema's and instance's outcome for one engine (for ``--json``)."""
    out: dict[str, Any] = {}
    for case in cases:
        result = run.schemas.get(case.index, SchemaResult())
        tests: dict[str, Any] = {}
        for test in case.tests:
            entry: dict[str, Any] = {
                "valid": test.valid,
                "jsonschema_valid": test.jsonschema_valid,
                "tokens": len(test.ids),
            }
            for pass_no in (1, 2):
                record = run.walks.get((case.index, test.index, pass_no))
                if record is not None:
                    entry[f"pass{pass_no}"] = {k: v for k, v in record.items() if k != "times"}
                    entry[f"pass{pass_no}"]["mask_ns"] = record.get("times", [])
            tests[str(test.index)] = entry
        out[str(case.index)] = {
            "file": case.file,
            "category": case.category,
            **vars(result),
            "tests": tests,
        }
    return out
