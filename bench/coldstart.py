"""Cold start: a fresh process compiles one ordinary schema and gives its first masks.

    python bench/coldstart.py                       # jsonmode and llguidance, 3 runs each
    python bench/coldstart.py --runs 5 --maskbench 20 --json out.json
    python bench/coldstart.py --root /tmp/base      # the jsonmode of another tree (A/B)

Issue 27's target: in a fresh process, compile + first mask of an ordinary schema
≤ 50 ms, beside llguidance. Every (schema, engine, run) is **its own Python process**
(``--child``, fed one job on stdin), so nothing is warm from an earlier schema; the
engines take turns schema by schema. A child times, with ``time.perf_counter``:

- ``import``: the engine's packages (jsonmode + tokenizers, or llguidance + tokenizers;
  NumPy with either) — not the interpreter's own start-up;
- ``setup``: loading ``tokenizer.json`` and the adapter's ``setup`` from
  ``bench/decoder_engines.py`` — everything an engine builds once per vocabulary
  (jsonmode: ``Vocabulary.from_tokenizer`` and the first mask engine's token index and
  trie, which it builds by compiling ``{}``; llguidance: its ``LLTokenizer``). jsonmode's
  process-wide caches (every module-level ``Lru`` under ``jsonmode``, and the compiled-
  schema cache) are then emptied, so that the ``{}`` warm-up leaves no lexeme, automaton
  or mask behind: compile and masks are those of a process whose first schema is this
  one (``--warm`` keeps them);
- ``compile``: the adapter's ``compile`` (jsonmode: ``compile_schema`` and the schema's
  mask engine; llguidance: ``grammar_from_json_schema`` and ``LLMatcher``);
- ``first``: a new matcher (the adapter's ``walker``) and its first mask;
- ``walk``: the masks along one valid instance (its Qwen2.5 tokens, then EOS), each
  timed alone by the decoder benchmark's ``_walk``: mean and max;
- peak RSS (``VmHWM``) after set-up and at the end.

Schemas: a few hand-written typical ones (``HAND_WRITTEN``, with an instance each) and
a seeded sample of small MaskBench schemas (``bench/decoder_sample.load_sample``, drawn
per category; "small": at most ``--max-chars`` characters of JSON, with an instance
that ``jsonschema`` accepts). The table shows per schema the median over runs, then
the medians over schemas and the jsonmode / llguidance ratios; ``--json`` writes every
child's record too. A run takes ~1-3 s per child (set-up dominates): the defaults
(5 + 10 schemas, 2 engines, 3 runs) take about 3 minutes. GC stays on, as in a real
process: a full collection inside a timed phase is part of a cold start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ENGINE_NAMES = ("jsonmode", "llguidance")

_ITEM = {"type": "string"}
#: Typical schemas of a structured-output request, each with one valid instance.
HAND_WRITTEN: dict[str, tuple[dict[str, Any], Any]] = {
    "contact": (  # the example: string, integer, email, array of strings
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "email": {"type": "string", "format": "email"},
                "tags": {"type": "array", "items": _ITEM},
            },
            "required": ["name", "age"],
        },
        {"name": "Ann Lee", "age": 42, "email": "ann@example.com", "tags": ["a", "bc"]},
    ),
    "plain": (  # the same without a format
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "city": {"type": "string"},
                "tags": {"type": "array", "items": _ITEM},
            },
            "required": ["name", "age"],
        },
        {"name": "Ann Lee", "age": 42, "city": "Oslo", "tags": ["a", "bc"]},
    ),
    "person": (
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 40},
                "birthday": {"type": "string", "format": "date"},
                "height": {"type": "number", "minimum": 0},
                "active": {"type": "boolean"},
                "nickname": {"type": ["string", "null"]},
            },
            "required": ["name", "birthday", "active"],
            "additionalProperties": False,
        },
        {"name": "Bo", "birthday": "1990-02-28", "height": 1.8, "active": True, "nickname": None},
    ),
    "order": (
        {
            "type": "object",
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "status": {"enum": ["new", "paid", "shipped"]},
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                            "qty": {"type": "integer", "minimum": 1},
                        },
                        "required": ["sku", "qty"],
                    },
                },
                "total": {"type": "number"},
            },
            "required": ["id", "status", "items"],
        },
        {
            "id": "123e4567-e89b-12d3-a456-426614174000",
            "status": "paid",
            "items": [{"sku": "ABC-1234", "qty": 2}],
            "total": 19.5,
        },
    ),
    "event": (
        {
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 80},
                "start": {"type": "string", "format": "date-time"},
                "url": {"type": "string", "format": "uri"},
                "tags": {"type": "array", "items": _ITEM, "maxItems": 5},
            },
            "required": ["title", "start"],
        },
        {
            "title": "Launch",
            "start": "2025-03-01T10:00:00Z",
            "url": "https://example.com/launch",
            "tags": ["x"],
        },
    ),
}

_PHASES = ("import", "setup", "compile", "first", "compile+first", "walk_mean", "walk_max")


# -- the child: one schema, one engine, one fresh process ----------------------------


def _rss_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _empty_jsonmode_caches() -> None:
    """Empty every process-wide cache of jsonmode (module-level ``Lru`` objects, the
    compiled-schema cache): the next compile is a process's first."""
    from jsonmode.decoding import compiled as compiled_module
    from jsonmode.lru import Lru

    for name, module in list(sys.modules.items()):
        if name.startswith("jsonmode") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, Lru):
                    value.clear()
    compiled_module._cache.clear()


def child(job: dict[str, Any]) -> dict[str, Any]:
    """Time one cold start (see the module docstring) and return the record."""
    sys.path.insert(0, str(BENCH))
    import decoder_engines  # stdlib only at import

    name = job["engine"]
    started = time.perf_counter()
    import numpy  # noqa: F401
    from tokenizers import Tokenizer

    if name == "jsonmode":
        import jsonmode
        import jsonmode.decoding.vocabulary  # noqa: F401
    else:
        import llguidance  # noqa: F401
    imported = time.perf_counter()
    engine: Any = {
        "jsonmode": decoder_engines.JsonmodeEngine,
        "llguidance": decoder_engines.LlguidanceEngine,
    }[name]()
    tokenizer = Tokenizer.from_file(job["tokenizer"])
    engine.setup(tokenizer, job["eos"])
    if name == "jsonmode" and not job["warm"]:
        _empty_jsonmode_caches()
    set_up = time.perf_counter()
    rss_setup = _rss_kib("VmHWM")
    record: dict[str, Any] = {
        "import": 1e3 * (imported - started),
        "setup": 1e3 * (set_up - imported),
        "rss_setup_mib": rss_setup / 1024,
    }
    try:
        handle = engine.compile(job["schema"])
    except decoder_engines.CompileFailure as exc:
        record.update(outcome=f"compile failed ({exc.status})", error=str(exc)[:200])
        return record
    compiled = time.perf_counter()
    walker = engine.walker(handle)
    walker_ms = 1e3 * (time.perf_counter() - compiled)
    walk = decoder_engines._walk(walker, job["ids"], job["eos"], 30.0)
    times = [t / 1e6 for t in walk["times"]]
    rest = times[1:] or [0.0]
    record.update(
        outcome=walk["outcome"],
        compile=1e3 * (compiled - set_up),
        first=walker_ms + times[0],
        walk_mean=statistics.fmean(rest),
        walk_max=max(rest),
        tokens=len(times),
        rss_peak_mib=_rss_kib("VmHWM") / 1024,
    )
    record["compile+first"] = record["compile"] + record["first"]
    return record


# -- the parent: schemas, processes, table --------------------------------------------


def _schemas(maskbench: int, seed: int, max_chars: int) -> list[dict[str, Any]]:
    """The hand-written schemas, then up to ``maskbench`` small MaskBench ones."""
    sys.path.insert(0, str(BENCH))
    from decoder_sample import TOKENIZER_DIR, load_sample
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    out = []
    for label, (schema, instance) in HAND_WRITTEN.items():
        text = json.dumps(instance, separators=(",", ":"))
        ids = list(tokenizer.encode(text, add_special_tokens=False).ids)
        out.append({"label": label, "schema": schema, "ids": ids})
    if maskbench > 0:
        small = []
        for case in load_sample(maskbench * 4, seed):
            if len(json.dumps(case.schema)) > max_chars:
                continue
            test = next((t for t in case.tests if t.valid and t.jsonschema_valid), None)
            if test is not None:
                label = f"{case.category}/{Path(case.file).stem}"[:40]
                small.append({"label": label, "schema": case.schema, "ids": test.ids})
        out += small[:maskbench]
    return out


def _run_child(job: dict[str, Any], root: Path | None) -> dict[str, Any]:
    env = dict(os.environ)
    if root is not None and job["engine"] == "jsonmode":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"outcome": "crashed", "error": proc.stderr[-400:]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _median(records: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def _fmt(value: float | None, width: int = 7) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.1f}"


def _ratio(values: list[float | None]) -> str:
    if len(values) == 2 and values[0] is not None and values[1]:
        return f"{values[0] / values[1]:8.2f}"
    return f"{'-':>8}"


def report(results: dict[str, Any], names: list[str]) -> str:
    """The table: per schema the medians over runs, then the medians over schemas and
    the ratio of the first engine to the second."""
    shown = ("compile", "first", "compile+first", "walk_mean", "walk_max")
    short = {"jsonmode": "jm", "llguidance": "llg"}
    width = 8 if len(names) > 1 else 15  # per value: a phase's columns fit its name
    lines = [
        f"{'schema (ms, median of runs)':<34}"
        + "".join(f"{p:>{width * len(names)}}" for p in shown),
        f"{'':<34}" + "".join(f"{short[n]:>{width}}" for _ in shown for n in names),
    ]
    per_schema: dict[str, dict[str, dict[str, float | None]]] = {}
    for label, by_engine in results.items():
        row = f"{label[:33]:<34}"
        per_schema[label] = {n: {} for n in names}
        for phase in shown:
            for name in names:
                value = per_schema[label][name][phase] = _median(by_engine[name], phase)
                row += _fmt(value, width)
        outcomes = {r.get("outcome") for n in names for r in by_engine[n]}
        if outcomes != {"accepted"}:
            row += "  " + ",".join(sorted(str(o) for o in outcomes))
        lines.append(row)
    lines += ["", f"{'median over schemas':<34}" + "".join(f"{n:>12}" for n in names) + "   ratio"]
    everything = {n: [r for by in results.values() for r in by[n]] for n in names}
    for phase in _PHASES:
        values: list[float | None] = []
        for name in names:
            if phase in ("import", "setup"):  # per process, whatever the schema
                values.append(_median(everything[name], phase))
            else:
                got = [v for s in per_schema.values() if (v := s[name][phase]) is not None]
                values.append(statistics.median(got) if got else None)
        lines.append(f"{phase + ' ms':<34}" + "".join(_fmt(v, 12) for v in values) + _ratio(values))
    for key, label in (
        ("rss_setup_mib", "peak RSS after set-up MiB"),
        ("rss_peak_mib", "peak RSS MiB"),
    ):
        values = [_median(everything[n], key) for n in names]
        lines.append(f"{label:<34}" + "".join(_fmt(v, 12) for v in values) + _ratio(values))
    first = [v for s in per_schema.values() if (v := s[names[0]]["compile+first"]) is not None]
    if first:
        lines.append(
            f"worst {names[0]} compile+first over schemas: {max(first):.1f} ms (target <= 50)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per schema and engine")
    parser.add_argument("--maskbench", type=int, default=10, help="small MaskBench schemas (10)")
    parser.add_argument("--seed", type=int, default=20250301, help="MaskBench sampling seed")
    parser.add_argument("--max-chars", type=int, default=1500, help="'small': JSON length cap")
    parser.add_argument(
        "--engines", default="jsonmode,llguidance", help="from: jsonmode,llguidance"
    )
    parser.add_argument("--root", type=Path, default=None, help="import jsonmode from this tree")
    parser.add_argument("--warm", action="store_true", help="keep jsonmode's caches after set-up")
    parser.add_argument("--json", type=Path, default=None, help="also write every record here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(sys.stdin.read()))))
        return 0
    names = [n.strip() for n in args.engines.split(",") if n.strip()]
    if not names or set(names) - set(ENGINE_NAMES):
        parser.error(f"engines from {', '.join(ENGINE_NAMES)}")
    sys.path.insert(0, str(BENCH))
    from decoder_sample import TOKENIZER_DIR
    from tokenizers import Tokenizer

    tokenizer_path = str(TOKENIZER_DIR / "tokenizer.json")
    eos = Tokenizer.from_file(tokenizer_path).token_to_id("<|im_end|>")
    schemas = _schemas(args.maskbench, args.seed, args.max_chars)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    started = time.perf_counter()
    for position, item in enumerate(schemas):
        by_engine: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        for run in range(args.runs):
            order = names if (position + run) % 2 == 0 else names[::-1]
            for name in order:
                job = {
                    "engine": name,
                    "schema": item["schema"],
                    "ids": item["ids"],
                    "eos": eos,
                    "tokenizer": tokenizer_path,
                    "warm": args.warm,
                }
                by_engine[name].append(_run_child(job, args.root))
        results[item["label"]] = by_engine
        print(
            f"[{position + 1}/{len(schemas)}] {item['label']}"
            f" ({time.perf_counter() - started:.0f} s)",
            file=sys.stderr,
        )
    print(report(results, names))
    if args.json is not None:
        args.json.write_text(json.dumps({"engines": names, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
