"""The decoder benchmark's report: the tables and the findings, as text.

Part of ``bench/decoder.py`` (see its docstring): :func:`render` prints the
correctness, speed and ratio tables from the engines' summaries
(``decoder_summary``), :func:`render_findings` jsonmode's findings.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

REFERENCE = "llguidance"
# Targets of issue 3, as ratios to llguidance in the same run.
TARGETS = {"compile_median": 3.0, "mask_mean": 2.0, "mask_p99": 3.0}


def _fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{suffix}"
    return f"{value}{suffix}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        cells = [
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return value / reference


def render(summaries: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    ref = summaries.get(REFERENCE, {})
    present = [s for s in summaries.values() if "unavailable" not in s]
    out = []
    out.append(
        f"MaskBench sample: {meta['schemas']} schemas (seed {meta['seed']}; "
        + ", ".join(f"{k} {v}" for k, v in meta["categories"].items())
        + f"), {meta['valid_instances']} valid / {meta['invalid_instances']} invalid instances; "
        f"tokenizer Qwen2.5 ({meta['vocab']} ids), EOS <|im_end|>; lanes {meta['lanes']}; "
        f"jsonmode from {meta.get('jsonmode_imported_from', '?')}"
    )
    out.append("")
    out.append(
        "Correctness (instances of the schemas the engine compiled; capped walks, cut at "
        f"{meta['settings']['walk_cap']:g} s, count neither way)"
    )
    rows = []
    for s in present:
        rows.append(
            [
                f"{s['engine']} {s['version']}",
                _fmt(s["compiled_pct"], 1, "%"),
                f"{_fmt(s['valid_accepted_pct'], 1, '%')} "
                f"({s['valid_accepted']}/{s['valid_instances_compiled'] - s['valid_capped']})",
                _fmt(s["valid_accepted_pct_of_all"], 1, "%"),
                f"{_fmt(s['valid_accepted_as_given_pct'], 1, '%')} ({s['valid_reordered']})",
                f"{s['invalid_accepted']} ({s['invalid_accepted_label_noise']})",
                str(s["valid_capped"] + s["invalid_capped"]),
                str(s["valid_errors"] + s["invalid_errors"]),
                " ".join(f"{k}:{v}" for k, v in sorted(s["statuses"].items()) if k != "ok") or "-",
            ]
        )
    out.append(
        _table(
            [
                "engine",
                "compiled",
                "valid accepted",
                "of all valid",
                "as given (reordered)",
                "invalid acc. (noise)",
                "capped",
                "errors",
                "not compiled",
            ],
            rows,
        )
    )
    out.append(
        "  valid accepted: instances with their members in schema order (the order every "
        "engine here writes declared properties in). as given: the same instances in the "
        "order MaskBench lists them; in brackets how many of the compiled schemas' valid "
        "instances that order differs for (walked both ways; the reordered walk is timed)."
    )
    out.append(
        "  invalid acc. (noise): invalid instances accepted; in brackets those the jsonschema "
        "package itself finds valid (label noise in MaskBench)."
    )
    out.append("")
    out.append(
        "Speed (mask = the mask computation call alone, per token, "
        "valid-instance walks, first pass)"
    )
    rows = []
    for s in present:
        mask = s["mask"]
        rows.append(
            [
                s["engine"],
                _fmt(s["compile_ms_median"], 2),
                _fmt(s["compile_ms_p90"], 1),
                _fmt(s["compile_plus_first_mask_ms_median"], 1),
                _fmt(mask["mean_us"], 1),
                _fmt(mask["median_us"], 1),
                _fmt(mask["p99_us"], 0),
                str(mask["tokens"]),
                _fmt(s["setup_s"], 2),
                _fmt(s["rss_setup_mb"], 0),
                _fmt(s["rss_peak_mb"], 0),
            ]
        )
    out.append(
        _table(
            [
                "engine",
                "compile med ms",
                "p90 ms",
                "+1st mask ms",
                "mask mean µs",
                "median µs",
                "p99 µs",
                "tokens",
                "setup s",
                "setup MB",
                "peak MB",
            ],
            rows,
        )
    )
    out.append(
        "  memory: RSS (VmRSS/VmHWM of the engine's own worker process) above the RSS after "
        "imports and the tokenizer load; setup = the engine's vocabulary/tokenizer "
        "preprocessing from a loaded tokenizers.Tokenizer (a transformers tokenizer for "
        "xgrammar); +1st mask = compile plus the first mask (llguidance and jsonmode build "
        "lazily, xgrammar and outlines at compile)."
    )
    out.append("")
    if ref and "unavailable" not in ref:
        out.append(
            f"Ratios to {REFERENCE} "
            "(issue 27's targets for jsonmode: compile median ≤ 1.5×, mask mean ≤ 1.0×, "
            "p99 ≤ 1.5×; every category's p99 ≤ 3×, see the per-category table)"
        )
        rows = []
        for s in present:
            rows.append(
                [
                    s["engine"],
                    _fmt(_ratio(s["compile_ms_median"], ref["compile_ms_median"]), 2, "×"),
                    _fmt(_ratio(s["mask"]["mean_us"], ref["mask"]["mean_us"]), 2, "×"),
                    _fmt(_ratio(s["mask"]["p99_us"], ref["mask"]["p99_us"]), 2, "×"),
                    _fmt(
                        _ratio(
                            s["mask_second_pass"]["mean_us"], ref["mask_second_pass"]["mean_us"]
                        ),
                        2,
                        "×",
                    ),
                ]
            )
        out.append(
            _table(
                ["engine", "compile median", "mask mean", "mask p99", "mask mean, 2nd pass"], rows
            )
        )
        out.append("")
    out.append(
        "Second pass over the same valid instances (caches warm; jsonmode keeps masks per state)"
    )
    rows = []
    for s in present:
        warm = s["mask_second_pass"]
        rows.append(
            [
                s["engine"],
                _fmt(warm["mean_us"], 1),
                _fmt(warm["median_us"], 1),
                _fmt(warm["p99_us"], 0),
                str(warm["tokens"]),
            ]
        )
    out.append(_table(["engine", "mask mean µs", "median µs", "p99 µs", "tokens"], rows))
    jm = summaries.get("jsonmode", {})
    if jm and "unavailable" not in jm:
        hit1, hit2 = jm.get("cache_hit_rate_pass1"), jm.get("cache_hit_rate_pass2")
        out.append(
            f"  jsonmode mask-cache hit rate: first pass {_fmt(hit1 and 100 * hit1, 1, '%')}, "
            f"second pass {_fmt(hit2 and 100 * hit2, 1, '%')} (MaskEngine.hits / (hits + misses))"
        )
    common = meta.get("common")
    if common:
        out.append("")
        out.append(
            f"Same tokens: the {common['instances']} valid instances "
            f"({common['tokens']} mask calls) "
            "that every engine above accepted, first pass"
        )
        rows = [
            [
                name,
                _fmt(stats["mean_us"], 1),
                _fmt(stats["median_us"], 1),
                _fmt(stats["p99_us"], 0),
                _fmt(
                    _ratio(stats["mean_us"], common["stats"].get(REFERENCE, {}).get("mean_us")),
                    2,
                    "×",
                ),
                _fmt(
                    _ratio(stats["p99_us"], common["stats"].get(REFERENCE, {}).get("p99_us")),
                    2,
                    "×",
                ),
            ]
            for name, stats in common["stats"].items()
        ]
        out.append(
            _table(
                ["engine", "mask mean µs", "median µs", "p99 µs", "mean / llg", "p99 / llg"], rows
            )
        )
    categories = meta.get("categories_common")
    if categories:
        out.append("")
        out.append(render_categories(categories))
    for s in summaries.values():
        if "unavailable" in s:
            out.append(f"{s['engine']}: {s['unavailable']}")
    return "\n".join(out)


def render_categories(table: dict[str, Any], reference: str = REFERENCE) -> str:
    """The per-category table (``decoder_summary.category_table``): each engine's
    compile median, mask mean and p99, and its ratios to ``reference``."""
    names = [k for k in next(iter(table.values())) if k not in ("schemas", "instances")]
    rows = []
    for category, row in table.items():
        base = row.get(reference, {})
        for name in names:
            stats = row[name]
            rows.append(
                [
                    category if name == names[0] else "",
                    f"{row['schemas']}/{row['instances']}" if name == names[0] else "",
                    name,
                    _fmt(stats["compile_ms_median"], 2),
                    _fmt(stats["mean_us"], 1),
                    _fmt(stats["p99_us"], 0),
                    _fmt(_ratio(stats["compile_ms_median"], base.get("compile_ms_median")), 2, "×"),
                    _fmt(_ratio(stats["mean_us"], base.get("mean_us")), 2, "×"),
                    _fmt(_ratio(stats["p99_us"], base.get("p99_us")), 2, "×"),
                ]
            )
    header = [
        "category",
        "schemas/inst.",
        "engine",
        "compile med ms",
        "mask mean µs",
        "p99 µs",
        f"compile / {reference[:3]}",
        f"mean / {reference[:3]}",
        f"p99 / {reference[:3]}",
    ]
    return (
        "Per category, common ground (schemas every engine compiled; tokens of the valid "
        "instances every engine accepted), first pass\n" + _table(header, rows)
    )


def render_findings(findings: dict[str, list[dict[str, Any]]], examples: int = 5) -> str:
    if not findings:
        return "jsonmode findings: none"
    order = [
        "compile_crash",
        "walk_exception",
        "valid_rejected_peer_accepts",
        "valid_rejected_no_peer_accepts",
        "valid_rejected_accepted_in_another_order",
        "invalid_accepted_bug",
        "invalid_accepted_unenforced_keyword_elsewhere",
        "mask_allows_but_advance_rejects",
        "advance_accepts_masked_token",
        "empty_mask",
        "not_finished_after_eos",
        "walk_capped",
        "schema_walk_timeout",
        "invalid_accepted_unenforced",
        "invalid_accepted_label_noise",
        "invalid_accepted_unknown",
        "not_compiled_timeout",
        "not_compiled_budget",
        "not_compiled_invalid",
        "not_compiled_unsupported",
    ]
    lines = ["jsonmode findings (count, first examples):"]
    for key in [*order, *sorted(set(findings) - set(order))]:
        items = findings.get(key)
        if not items:
            continue
        lines.append(f"- {key}: {len(items)}")
        if key.startswith("not_compiled"):
            reasons = Counter(_reason(item["error"]) for item in items)
            for reason, count in reasons.most_common(8):
                lines.append(f"    {count:4d} × {reason}")
            continue
        if key in ("invalid_accepted_label_noise", "invalid_accepted_unenforced"):
            continue
        for item in items[:examples]:
            shown = {k: v for k, v in item.items() if k != "traceback"}
            lines.append("    " + json.dumps(shown, ensure_ascii=False)[:600])
    return "\n".join(lines)


def _reason(message: str) -> str:
    text = message.split("\n")[0]
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:110]
