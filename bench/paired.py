"""Two engines in one process, schema by schema in turn: speed ratios free of machine drift.

    python bench/paired.py                          # jsonmode against llguidance, 3 runs
    python bench/paired.py --runs 5 --schemas 100
    python bench/paired.py --engines jsonmode,xgrammar

``bench/decoder.py`` runs each engine in its own worker process, one after the other
or beside another engine: on a shared two-core machine the engines' absolute times
then drift by ±20% between runs (neighbours, CPU frequency, the other lane), and a
ratio of two times taken minutes apart drifts with them. Here both engines are set up
in one process and take turns on every schema of the same MaskBench sample (which one
goes first alternates from schema to schema): each compiles the schema (timed), then
walks its instances, valid and invalid, as the decoder benchmark's workers do (the
mask call alone timed, on valid instances). Drift then falls on both alike.

Each run is a fresh process (first visits included, as in ``decoder.py``: no cache is
warm from an earlier run); the ratios of every run are printed, then their median.
Ratios: compile median over the schemas both compiled; mask mean and p99 over the
tokens of the valid instances both accepted. ``decoder.py`` remains the benchmark of
record for correctness, memory and set-up; this one only times.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import decoder  # noqa: E402  (the benchmark's sample, engines and walks)
import decoder_render  # noqa: E402
from decoder_summary import category_table  # noqa: E402


def one_run(names: list[str], schemas: int, seed: int) -> dict[str, Any]:
    """Both engines over the sample in this process: per-schema compile times and
    per-instance walks."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(decoder.TOKENIZER_DIR / "tokenizer.json"))
    eos = tokenizer.token_to_id("<|im_end|>")
    cases = decoder.load_sample(schemas, seed)
    # The sample and what built it (jsonschema's format checkers, their grammars:
    # ~160k objects) are the harness's, not an engine's: frozen out of the garbage
    # collector's reach, a full collection inside a timed call traverses the engines'
    # objects only (it took ~150 ms with them, ~25 ms without). Engines are set up
    # after this, so their own objects stay tracked.
    gc.freeze()
    engines = {}
    for name in names:
        engine = decoder.ENGINE_CLASSES[name]()
        if getattr(engine, "needs_transformers", False):
            import transformers

            transformers.logging.set_verbosity_error()
            hf = transformers.AutoTokenizer.from_pretrained(str(decoder.TOKENIZER_DIR))
            engine.setup(hf, eos)
        else:
            engine.setup(tokenizer, eos)
        engines[name] = engine
    compiles: dict[str, dict[int, float]] = {name: {} for name in names}
    walks: dict[str, dict[tuple[int, int], dict[str, Any]]] = {name: {} for name in names}
    for position, case in enumerate(cases):
        order = names if position % 2 == 0 else names[::-1]
        for name in order:
            engine = engines[name]
            started = time.perf_counter()
            try:
                handle = engine.compile(case.schema)
            except decoder.CompileFailure:
                continue
            compiles[name][case.index] = time.perf_counter() - started
            for test in case.tests:
                record = decoder._walk(engine.walker(handle), test.ids, eos, 10.0)
                if test.valid:
                    walks[name][(case.index, test.index)] = {
                        "outcome": record["outcome"],
                        "times": record["times"],
                    }
            del handle
    return {"compiles": compiles, "walks": walks}


def ratios(result: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Compile median, mask mean and p99 per engine on the common ground, and the
    ratios of the first engine to the second.

    Raises:
        ValueError: no schema both engines compiled, or no instance both accepted.
    """
    compiles, walks = result["compiles"], result["walks"]
    both = set.intersection(*(set(compiles[n]) for n in names))
    accepted = set.intersection(
        *({key for key, walk in walks[n].items() if walk["outcome"] == "accepted"} for n in names)
    )
    if not both or not accepted:
        raise ValueError(
            f"no common ground to compare on: {len(both)} schemas compiled by both, "
            f"{len(accepted)} valid instances accepted by both"
        )
    stats: dict[str, dict[str, float]] = {}
    for name in names:
        times = np.array([t for key in sorted(accepted) for t in walks[name][key]["times"]])
        by_schema = compiles[name]
        stats[name] = {
            "compile_median_ms": 1e3 * statistics.median(by_schema[i] for i in both),
            "mask_mean_us": float(times.mean()) / 1e3,
            "mask_p99_us": float(np.percentile(times, 99)) / 1e3,
        }
    first, second = (stats[n] for n in names)
    return {
        "schemas": len(both),
        "instances": len(accepted),
        "stats": stats,
        "ratios": {key: first[key] / second[key] for key in first},
    }


def _category_ratios(tables: list[dict[str, Any]], names: list[str]) -> str:
    """Per category, the median over runs of the first engine's ratios to the second."""
    first, second = names
    rows = []
    for category in tables[0]:
        ratios = []
        for key in ("compile_ms_median", "mean_us", "p99_us"):
            values = [
                t[category][first][key] / t[category][second][key]
                for t in tables
                if t[category][first][key] and t[category][second][key]
            ]
            ratios.append(f"{statistics.median(values):.2f}×" if values else "-")
        row = tables[0][category]
        rows.append([category, f"{row['schemas']}/{row['instances']}", *ratios])
    header = ["category", "schemas/inst.", "compile median", "mask mean", "mask p99"]
    return (
        f"per category, median of {len(tables)} runs, {first} / {second} (common ground):\n"
        + decoder_render._table(header, rows)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="jsonmode,llguidance", help="two, first / second")
    parser.add_argument("--schemas", type=int, default=300, help="sample size (default 300)")
    parser.add_argument("--seed", type=int, default=20250301, help="sampling seed")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes (default 3)")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    parser.add_argument("--single", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.engines.split(",") if name.strip()]
    if len(names) != 2 or set(names) - set(decoder.ENGINE_CLASSES):
        parser.error(f"two engines, from {', '.join(decoder.ENGINE_CLASSES)}")
    if args.runs < 1 or args.schemas < 1:
        parser.error("--runs and --schemas must be at least 1")
    if args.single is not None:  # one run, in this (fresh) process
        result = one_run(names, args.schemas, args.seed)
        result = {
            "compiles": {
                n: {str(k): v for k, v in c.items()} for n, c in result["compiles"].items()
            },
            "walks": {
                n: [[*key, walk] for key, walk in w.items()] for n, w in result["walks"].items()
            },
        }
        args.single.write_text(json.dumps(result))
        return 0
    runs = []
    tables = []  # per run, the per-category table
    cases = decoder.load_sample(args.schemas, args.seed)
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "run.json"
            command = [sys.executable, __file__, "--engines", ",".join(names)]
            command += ["--schemas", str(args.schemas), "--seed", str(args.seed)]
            subprocess.run([*command, "--single", str(out)], check=True)
            raw = json.loads(out.read_text())
        result = {
            "compiles": raw["compiles"],
            "walks": {n: {(a, b): walk for a, b, walk in w} for n, w in raw["walks"].items()},
        }
        try:
            summary = ratios(result, names)
        except ValueError as exc:
            print(f"run {run + 1}: {exc}", file=sys.stderr)
            return 1
        runs.append(summary)
        first, second = (summary["stats"][n] for n in names)
        r = summary["ratios"]
        print(
            f"run {run + 1}: {summary['schemas']} schemas, {summary['instances']} instances | "
            f"{names[0]} {first['compile_median_ms']:.2f} ms / {first['mask_mean_us']:.1f} µs "
            f"/ {first['mask_p99_us']:.0f} µs | {names[1]} {second['compile_median_ms']:.2f} ms "
            f"/ {second['mask_mean_us']:.1f} µs / {second['mask_p99_us']:.0f} µs | ratios "
            f"compile median {r['compile_median_ms']:.2f}×, mask mean {r['mask_mean_us']:.2f}×, "
            f"p99 {r['mask_p99_us']:.2f}×",
            flush=True,
        )
        tables.append(
            category_table(
                names,
                cases,
                {n: {int(k): 1e3 * v for k, v in c.items()} for n, c in result["compiles"].items()},
                result["walks"],
            )
        )
    keys = ("compile_median_ms", "mask_mean_us", "mask_p99_us")
    median = {key: statistics.median(run["ratios"][key] for run in runs) for key in keys}
    print(_category_ratios(tables, names))
    print(
        f"median of {len(runs)} runs, {names[0]} / {names[1]}: compile median "
        f"{median['compile_median_ms']:.2f}×, mask mean {median['mask_mean_us']:.2f}×, "
        f"mask p99 {median['mask_p99_us']:.2f}×"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": runs, "median": median}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
