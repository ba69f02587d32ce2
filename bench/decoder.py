"""Constrained-decoding engines side by side: jsonmode, xgrammar, llguidance, outlines-core.

    python bench/decoder.py                   # 300 MaskBench schemas (15-25 min on 2 cores)
    python bench/decoder.py --quick           # 40 schemas (2-4 min)
    python bench/decoder.py --schemas 500 --seed 7 --json out.json

Every engine gets the same stratified MaskBench sample and the same Qwen2.5 tokenizer,
in one run. Each schema is compiled; each of its test instances is serialised compactly
(``json.dumps(x, separators=(",", ":"))``) with its object members in schema order (the
order every engine here writes declared properties in; ``tests/support/schema_order.py``),
tokenized with ``tokenizers`` (no special tokens) and walked token by token: at every
step the engine computes its mask (the timed call), the next token must be in it and
must advance the engine, and after the last token the end-of-sequence id
(``<|im_end|>``) must be allowed and accepted. A valid instance that MaskBench lists in
another order is also walked as given, untimed, for the "as given" column.

Each engine runs in its own worker process (a ``spawn``ed child) so that a compile that
hangs in native code can be killed (``--compile-timeout``), a crash cannot stop the run,
and memory is that engine's alone (RSS high-water mark minus the RSS after imports and
the tokenizer load; Linux ``/proc/self/status``). Peers are optional: an engine whose
package is missing is reported as such. Plain CPU: no GPU is used or needed.

Optional bench dependencies (see bench/README.md):
``pip install llguidance==1.9.1 outlines-core==0.2.14 apache-tvm-ffi``
and ``pip install --no-deps xgrammar==0.2.8`` (its hard dependency on ``triton`` and
``torch`` would otherwise be resolved; torch must stay the pinned CPU build).

The benchmark's parts, in the order a run goes through them: ``decoder_sample`` (the
MaskBench sample), ``decoder_engines`` (one adapter per engine, and the timed walk of
an instance), ``decoder_workers`` (a worker process per engine, driven by lanes here),
``decoder_summary`` (the numbers) and ``decoder_render`` (the report). This module is
the command line, and re-exports what other benchmarks take from it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from decoder_engines import (
    ENGINE_CLASSES,
    ENGINES,
    OPTIONAL_ENGINES,
    CompileFailure,
    Walker,
    _bit,
    _walk,
)
from decoder_render import render, render_findings
from decoder_sample import MASKBENCH, ROOT, TOKENIZER_DIR, Case, Test, load_sample
from decoder_summary import common_subset, jsonmode_findings, per_category, per_schema, summarize
from decoder_workers import EngineRun, drive, probe

__all__ = [
    "ENGINE_CLASSES",
    "MASKBENCH",
    "TOKENIZER_DIR",
    "Case",
    "CompileFailure",
    "Test",
    "Walker",
    "_bit",
    "_walk",
    "load_sample",
    "main",
]

# Relative wall time per schema on MaskBench (for scheduling lanes only).
EXPECTED_COST = {
    "outlines": 5.0,
    "jsonmode": 4.0,
    "xgrammar-compliant": 3.0,
    "xgrammar": 0.3,
    "llguidance": 0.2,
}
STEAL_MIN = 8  # a second lane joins an engine only when this many schemas are left


def _source_digest(folder: Path) -> str:
    """sha256 of jsonmode's decoder sources, subpackages (the mask engine's) included
    (the engine changes often: which one ran)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _imported_jsonmode() -> Path:
    """The folder of the ``jsonmode`` package the engine workers import (the editable
    install's tree, not necessarily this benchmark's: see the warning in ``main``)."""
    spec = importlib.util.find_spec("jsonmode")
    if spec is None or spec.origin is None:  # pragma: no cover - jsonmode runs this
        raise RuntimeError("jsonmode is not importable")
    return Path(spec.origin).resolve().parent


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--schemas", type=int, default=None, help="sample size (default 300; 40 with --quick)"
    )
    parser.add_argument("--seed", type=int, default=20250301, help="sampling seed")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    parser.add_argument("--quick", action="store_true", help="40 schemas, for a smoke run")
    parser.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated, from {','.join(ENGINES + OPTIONAL_ENGINES)}",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        choices=(1, 2, 3, 4),
        help="engines running at once (default 2: one busy core each, slowest engines "
        "first; 1: each engine alone)",
    )
    parser.add_argument("--compile-timeout", type=float, default=10.0, help="seconds per compile")
    parser.add_argument(
        "--walk-cap", type=float, default=10.0, help="seconds per instance walk before it is capped"
    )
    parser.add_argument(
        "--schema-timeout",
        type=float,
        default=60.0,
        help="seconds for all walks of one schema before its worker is killed",
    )
    parser.add_argument(
        "--setup-timeout", type=float, default=300.0, help="seconds for worker setup"
    )
    parser.add_argument(
        "--mem-limit-gb", type=float, default=8.0, help="address-space limit per worker (0: none)"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="let the engines' own warnings through"
    )
    args = parser.parse_args(argv)
    if args.schemas is None:
        args.schemas = 40 if args.quick else 300
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(engines) - set(ENGINES + OPTIONAL_ENGINES)
    if unknown:
        parser.error(f"unknown engines: {', '.join(sorted(unknown))}")

    lock = threading.Lock()
    begun = time.perf_counter()

    def log(text: str) -> None:
        with lock:
            print(f"[{time.perf_counter() - begun:6.0f}s] {text}", file=sys.stderr, flush=True)

    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    eos = tokenizer.token_to_id("<|im_end|>")
    cases = load_sample(args.schemas, args.seed)
    n_valid = sum(t.valid for c in cases for t in c.tests)
    n_invalid = sum(not t.valid for c in cases for t in c.tests)
    log(f"sample: {len(cases)} schemas, {n_valid} valid + {n_invalid} invalid instances")
    package = _imported_jsonmode()
    if package != (ROOT / "jsonmode").resolve():
        # (An editable install of another checkout wins over this tree unless this
        # tree is on PYTHONPATH: an A/B of two trees would time one of them twice.)
        log(
            f"warning: jsonmode is imported from {package}, not from this tree ({ROOT}): "
            f"the jsonmode numbers are that tree's (run with PYTHONPATH={ROOT} for this one)"
        )

    # Engines are taken from this queue by ``--jobs`` lanes, slowest first.
    # ``--jobs`` lanes take engines slowest first; a lane with nothing new to start
    # helps with the engine that has the most work left (its own worker process).
    order = sorted(engines, key=lambda e: EXPECTED_COST.get(e, 0), reverse=True)
    runs: dict[str, EngineRun] = {}
    for name in order:
        runs[name] = probe(name)
        runs[name].pending.extend(cases)
        if not runs[name].available:
            log(f"[{name}] {runs[name].unavailable_reason}: skipped")
    started: set[str] = set()
    schedule: list[str] = []

    def remaining(name: str) -> float:
        return len(runs[name].pending) * EXPECTED_COST.get(name, 1.0)

    def lane_main(lane: int) -> None:
        while True:
            with lock:
                live = [n for n in order if runs[n].available and runs[n].pending]
                fresh = [n for n in live if n not in started]
                helping = [n for n in live if len(runs[n].pending) >= STEAL_MIN]
                if fresh:
                    name = fresh[0]
                elif helping:
                    name = max(helping, key=remaining)
                else:
                    return
                started.add(name)
            log(f"[{name}] {'starting' if name in fresh else 'helping'} (lane {lane})")
            begin = time.perf_counter() - begun
            drive(runs[name], len(cases), args, eos, log)
            end = time.perf_counter() - begun
            with lock:
                schedule.append(f"{name} (lane {lane}, {begin:.0f}-{end:.0f} s)")

    threads = [threading.Thread(target=lane_main, args=(n + 1,)) for n in range(args.jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in order:
        if runs[name].available:
            log(f"[{name}] finished in {runs[name].wall_s:.0f} s")

    summaries = {name: summarize(runs[name], cases) for name in engines}
    meta = {
        "schemas": len(cases),
        "seed": args.seed,
        "categories": dict(Counter(c.category for c in cases)),
        "valid_instances": n_valid,
        "invalid_instances": n_invalid,
        "vocab": tokenizer.get_vocab_size(with_added_tokens=True),
        "lanes": f"{args.jobs}: " + ", ".join(schedule),
        "python": platform.python_version(),
        "jsonmode_imported_from": str(package),
        "jsonmode_decoding_sha256": _source_digest(package / "decoding"),
        "packages": {
            name: _version(name)
            for name in ("numpy", "tokenizers", "transformers", "torch", "jsonschema")
        },
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "settings": {
            k: getattr(args, k)
            for k in ("compile_timeout", "walk_cap", "schema_timeout", "mem_limit_gb", "jobs")
        },
        "wall_s": time.perf_counter() - begun,
        "common": common_subset(runs, cases),
        "categories_common": per_category(runs, cases),
    }
    findings = (
        jsonmode_findings(runs, cases, tokenizer)
        if "jsonmode" in runs and runs["jsonmode"].available
        else {}
    )
    print(render(summaries, meta))
    print()
    print(render_findings(findings))
    print(
        f"\ntotal wall time {meta['wall_s']:.0f} s; "
        f"load average at end {meta['load_average_at_end']}"
    )
    if args.json is not None:
        payload = {
            "meta": meta,
            "summaries": summaries,
            "jsonmode_findings": findings,
            "schemas": {
                name: per_schema(run, cases) for name, run in runs.items() if run.available
            },
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
