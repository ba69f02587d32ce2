"""What metrics cost: per request through the façade, and per decoding step.

    python bench/metrics.py                  # ~20 s
    python bench/metrics.py --quick          # ~3 s
    python bench/metrics.py --multiprocess   # the same with PROMETHEUS_MULTIPROC_DIR set
    python bench/metrics.py --decoder        # also per decoding step (needs the local extra)
    python bench/metrics.py --json out.json

1. Façade: ``JsonMode(fn).run(prompt, schema)`` with a function backend that answers at
   once, timed call by call with metrics off (no listener: the façade builds no event)
   and on (``jsonmode.metrics.enable`` on a fresh registry), in many short interleaved
   rounds; the cost is the median over rounds of (on median - off median), so drift and
   a busy machine hit both sides alike. Scenarios: valid first try; repaired (repair
   mode, 3 repairs); retried (2 attempts, 2 schema issues). Target: < 50 µs.
   "isolated" replays the events one request emits into the metrics, and adds the
   cost of building them: the metrics' own work without the noise of a whole request.
2. Decoder (``--decoder``): one ``JsonLogitsProcessor`` call per token of a valid
   document, on the demo's random model vocabulary, with metrics off, on (one step in
   ``events.mask_sample_every`` timed) and on with every step timed.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

import jsonmode
import jsonmode.metrics
from jsonmode import events

TARGET_US = 50.0
GOOD = '{"name": "Ada Lovelace", "age": 36, "languages": ["English", "French"]}'
FENCED = "Sure:\n```json\n{'name': 'Ada Lovelace', 'age': '36', 'languages': ['English',]}\n```"
BAD = '{"name": "Ada Lovelace", "age": "thirty-six"}'


class Person(BaseModel):
    name: str
    age: int
    languages: list[str]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def timed(call: Callable[[], Any], n: int) -> list[float]:
    """Per-call wall time in µs, n calls."""
    out = []
    now = time.perf_counter_ns
    for _ in range(n):
        start = now()
        call()
        out.append((now() - start) / 1000)
    return out


def compare(call: Callable[[], Any], rounds: int, per_round: int) -> dict[str, list[float]]:
    """Interleaved rounds of ``call`` with metrics off and on (fresh registry)."""
    registry = CollectorRegistry()
    samples: dict[str, list[float]] = {"off": [], "on": [], "diffs": []}
    for index in range(rounds):
        medians = {}
        for state in ("off", "on") if index % 2 == 0 else ("on", "off"):
            if state == "on":
                jsonmode.metrics.enable(registry)
            else:
                jsonmode.metrics.disable()
            call()  # warm
            times = timed(call, per_round)
            medians[state] = statistics.median(times)
            samples[state] += times
        samples["diffs"].append(medians["on"] - medians["off"])
    jsonmode.metrics.disable()
    return samples


def isolated(call: Callable[[], Any], repeat: int) -> float:
    """µs the metrics spend on one request's events, building them included."""
    seen: list[events.Event] = []
    unsubscribe = events.subscribe(seen.append)
    try:
        call()
    finally:
        unsubscribe()
    from jsonmode.metrics._collectors import Collectors

    collectors = Collectors(CollectorRegistry())
    fields = [(type(e), [getattr(e, f) for f in e.__dataclass_fields__]) for e in seen]

    def replay() -> None:
        for kind, values in fields:
            collectors(kind(*values))

    return statistics.median(timed(replay, repeat))


def facade(rounds: int, per_round: int) -> list[dict[str, Any]]:
    def replying(text: str) -> Callable[[str], str]:
        def backend(prompt: str) -> str:
            return text

        return backend

    def bad_then_good(messages: list[dict[str, str]]) -> str:
        return GOOD if any(m["role"] == "assistant" for m in messages) else BAD

    scenarios = [
        ("first try", jsonmode.JsonMode(replying(GOOD), "strict", schema_name="person")),
        ("repaired", jsonmode.JsonMode(replying(FENCED), "repair", schema_name="person")),
        ("retried (2 attempts)", jsonmode.JsonMode(bad_then_good, "strict", schema_name="person")),
    ]
    rows = []
    for name, jm in scenarios:
        result = jm.run("Extract: Ada Lovelace, 36, English and French", Person)

        def call(jm: jsonmode.JsonMode = jm) -> Any:
            return jm.run("Extract: Ada Lovelace, 36, English and French", Person)

        samples = compare(call, rounds, per_round)
        rows.append(
            {
                "scenario": name,
                "attempts": len(result.attempts),
                "repairs": len(result.repairs),
                **summarise(samples),
                "isolated_us": isolated(call, 20 * per_round),
            }
        )
    return rows


def summarise(samples: dict[str, list[float]]) -> dict[str, float]:
    off, on, diffs = samples["off"], samples["on"], samples["diffs"]
    return {
        "off_median_us": statistics.median(off),
        "on_median_us": statistics.median(on),
        "cost_us": statistics.median(diffs),
        "cost_iqr_us": percentile(diffs, 75) - percentile(diffs, 25),
        "calls": len(off) + len(on),
    }


def decoder(rounds: int) -> list[dict[str, Any]]:
    import torch

    from jsonmode.decoding.compiled import compile_schema
    from jsonmode.decoding.logits import JsonLogitsProcessor
    from jsonmode.decoding.vocabulary import Vocabulary
    from jsonmode.demo import CONSTRAINED_SCHEMA, random_local_model

    _, tokenizer = random_local_model()
    vocabulary = Vocabulary.from_tokenizer(tokenizer)
    compiled = compile_schema(CONSTRAINED_SCHEMA, vocabulary)
    document = (
        '{"name":"Ada","age":36,"email":"ada@example.org",'
        '"languages":["English","French"],"verified":true}'
    )
    ids = tokenizer(document, add_special_tokens=False)["input_ids"]
    matcher = compiled.matcher()
    if not all(matcher.advance(i) for i in ids):
        raise SystemExit("the bench document does not tokenize into an accepted sequence")
    scores = torch.zeros((1, vocabulary.size))

    def generation() -> list[float]:
        processor = JsonLogitsProcessor(compiled)
        prompt = torch.zeros((1, 1), dtype=torch.long)
        out = []
        for step in range(len(ids) + 1):
            sequence = torch.cat([prompt, torch.tensor([ids[:step]], dtype=torch.long)], dim=1)
            start = time.perf_counter_ns()
            processor(sequence, scores)
            out.append((time.perf_counter_ns() - start) / 1000)
        return out

    generation()  # warm every cache
    registry = CollectorRegistry()
    rows = []
    samples: dict[str, list[float]] = {"off": [], "on (sampled)": [], "on (every step)": []}
    sample_every = events.mask_sample_every
    for index in range(rounds):
        order = list(samples) if index % 2 == 0 else list(reversed(samples))
        for state in order:
            if state == "off":
                jsonmode.metrics.disable()
            else:
                jsonmode.metrics.enable(registry)
                events.mask_sample_every = 1 if state == "on (every step)" else sample_every
            samples[state] += generation()
    jsonmode.metrics.disable()
    events.mask_sample_every = sample_every
    base = statistics.median(samples["off"])
    for state, values in samples.items():
        rows.append(
            {
                "state": state,
                "median_us": statistics.median(values),
                "mean_us": statistics.fmean(values),
                "cost_median_us": statistics.median(values) - base,
                "steps": len(values),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--decoder", action="store_true", help="also time decoding steps")
    parser.add_argument("--multiprocess", action="store_true", help="PROMETHEUS_MULTIPROC_DIR set")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    parser.add_argument("--gc", action="store_true", help="keep the garbage collector on")
    args = parser.parse_args()
    if args.multiprocess and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        with tempfile.TemporaryDirectory() as directory:
            env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=directory)
            return subprocess.call([sys.executable, *sys.argv], env=env)

    rounds, per_round = (40, 50) if args.quick else (300, 50)
    if not args.gc:
        gc.collect()
        gc.disable()
    mode = "multiprocess" if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else "single process"
    print(f"metrics cost, {mode}; python {platform.python_version()}, {platform.machine()}")
    print(f"\nper request (façade, instant function backend; {rounds} rounds x {per_round} calls)")
    print(
        f"{'scenario':<22}{'off µs':>9}{'on µs':>9}{'cost µs':>10}{'(IQR)':>8}{'isolated µs':>13}"
    )
    rows = facade(rounds, per_round)
    for row in rows:
        print(
            f"{row['scenario']:<22}{row['off_median_us']:>9.1f}{row['on_median_us']:>9.1f}"
            f"{row['cost_us']:>10.1f}{row['cost_iqr_us']:>8.1f}{row['isolated_us']:>13.1f}"
        )
    worst = max(row["cost_us"] for row in rows)
    verdict = "within" if worst < TARGET_US else "OVER"
    print(f"worst median cost {worst:.1f} µs per request: {verdict} the {TARGET_US:.0f} µs target")
    report: dict[str, Any] = {"mode": mode, "facade": rows, "target_us": TARGET_US}
    if args.decoder:
        print(
            f"\nper decoding step (JsonLogitsProcessor call; sampled = 1 in "
            f"{events.mask_sample_every})"
        )
        print(f"{'state':<18}{'median µs':>11}{'mean µs':>10}{'cost µs':>10}")
        report["decoder"] = decoder(3 if args.quick else 10)
        for row in report["decoder"]:
            print(
                f"{row['state']:<18}{row['median_us']:>11.1f}{row['mean_us']:>10.1f}"
                f"{row['cost_median_us']:>10.1f}"
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2)
    return 0 if worst < TARGET_US else 1


if __name__ == "__main__":
    sys.exit(main())
