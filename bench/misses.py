"""First-visit masks: how much of their time recomputes a mask the process already had.

    python bench/misses.py                     # the decoder benchmark's sample (~10 s)
    python bench/misses.py --schemas 100 --json out.json

A mask-cache miss (a matcher state the engine has not seen) costs a computation; a
hit, a lookup. Here every miss's mask is compared, by a digest of its bits, with the
masks computed before it. A miss whose mask is *new* is work no cache of whole masks
could have saved. One *seen in this schema* (its engine computed that mask before, for
another state) or *seen in an earlier schema* (only an earlier schema's engine did) is
work that a cache keyed by something coarser than the exact state, a signature of what
the state can read, could have saved, had such a key been cheap to compute. Their share
of the first-pass mask time is the ceiling for any design that shares masks across
states.

The walk is the decoder benchmark's first pass (``bench/decoder.py``): its MaskBench
sample and Qwen2.5 tokenizer, each schema compiled afresh, its valid instances walked
token by token in schema order (the invalid ones too, untimed, as there: they warm the
same caches), the mask call (``Matcher.fill_bitmask``) alone timed, in one process.
Misses are counted by ``MaskEngine.misses``, and split by time band too, to show where
the duplicated work lies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from decoder_sample import TOKENIZER_DIR, Case, load_sample  # noqa: E402

# Miss time bands, in seconds: the lower edges.
BANDS = ((0.0, "< 20 µs"), (20e-6, "20-100 µs"), (100e-6, "0.1-1 ms"), (1e-3, ">= 1 ms"))
KINDS = ("new", "seen in this schema", "seen in an earlier schema")


@dataclass(frozen=True)
class Record:
    """One timed mask call: its schema, whether the engine's mask cache had it, its
    time, and (misses only) a digest of the mask's bits."""

    schema: int
    hit: bool
    seconds: float
    digest: bytes | None = None


def classify(records: list[Record]) -> dict[str, Any]:
    """Totals of hits, and of misses by kind (see module) and time band, in record
    order: a miss is *new* when no earlier miss computed its mask, else *seen in this
    schema* when an earlier miss of its own schema did, else *seen in an earlier
    schema*.

    Raises:
        ValueError: a miss without a digest.
    """
    last_schema: dict[bytes, int] = {}  # digest -> the last schema that computed it
    hits = {"count": 0, "seconds": 0.0}
    kinds = {kind: {"count": 0, "seconds": 0.0} for kind in KINDS}
    bands = {label: {kind: {"count": 0, "seconds": 0.0} for kind in KINDS} for _, label in BANDS}
    for record in records:
        if record.hit:
            hits["count"] += 1
            hits["seconds"] += record.seconds
            continue
        if record.digest is None:
            raise ValueError("a miss needs the digest of its mask")
        known = last_schema.get(record.digest)
        own = known == record.schema
        kind = KINDS[0] if known is None else KINDS[1] if own else KINDS[2]
        last_schema[record.digest] = record.schema
        label = next(label for low, label in reversed(BANDS) if record.seconds >= low)
        for total in (kinds[kind], bands[label][kind]):
            total["count"] += 1
            total["seconds"] += record.seconds
    return {"hits": hits, "misses": kinds, "bands": bands}


def measure(cases: list[Case]) -> list[Record]:
    """The first pass of the decoder benchmark over ``cases``, one record per mask
    call on a valid instance (the digest taken outside the timed call). Set-up and
    compiles are the decoder benchmark's own adapter's (``JsonmodeEngine``); invalid
    instances are walked too, untimed, as there, since they warm the same caches."""
    import numpy as np
    from decoder_engines import CompileFailure, JsonmodeEngine
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    adapter = JsonmodeEngine()
    adapter.setup(tokenizer, tokenizer.token_to_id("<|im_end|>"))
    words = np.zeros((adapter.vocabulary.size + 31) // 32, dtype=np.int32)
    records: list[Record] = []
    for case in cases:
        try:
            compiled = adapter.compile(case.schema)
        except CompileFailure:
            continue
        engine = compiled.engine
        for test in case.tests:
            matcher = compiled.matcher()
            for token in [*test.ids, None]:
                misses = engine.misses
                started = time.perf_counter()
                matcher.fill_bitmask(words)
                seconds = time.perf_counter() - started
                if test.valid:
                    digest = None
                    if engine.misses != misses:
                        digest = hashlib.blake2b(words.tobytes(), digest_size=16).digest()
                    records.append(Record(case.index, digest is None, seconds, digest))
                if token is None or not matcher.advance(token):
                    break
    return records


def render(summary: dict[str, Any]) -> str:
    """The summary as a table (times in ms, shares of all mask time)."""
    hits, kinds = summary["hits"], summary["misses"]
    total = hits["seconds"] + sum(kind["seconds"] for kind in kinds.values())
    calls = hits["count"] + sum(kind["count"] for kind in kinds.values())
    if not calls:
        raise ValueError("no mask calls")
    lines = [
        f"{calls} mask calls, {total * 1e3:.0f} ms; mean {total / calls * 1e6:.1f} µs",
        "| calls | count | ms | share of mask time |",
        "|---|---|---|---|",
        _row("hits", hits, total),
        *(_row(f"misses, {kind}", kinds[kind], total) for kind in KINDS),
        "",
        "Misses by time band (count, ms):",
        "| band | " + " | ".join(KINDS) + " |",
        "|---|" + "---|" * len(KINDS),
    ]
    for _, label in BANDS:
        cells = summary["bands"][label]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{cells[k]['count']}, {cells[k]['seconds'] * 1e3:.0f}" for k in KINDS)
            + " |"
        )
    return "\n".join(lines)


def _row(name: str, total: dict[str, Any], all_seconds: float) -> str:
    share = total["seconds"] / all_seconds if all_seconds else 0.0
    return f"| {name} | {total['count']} | {total['seconds'] * 1e3:.0f} | {share:.1%} |"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=_positive, default=300, help="sample size (decoder.py's)")
    parser.add_argument("--seed", type=int, default=20250301, help="sample seed (decoder.py's)")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    summary = classify(measure(load_sample(args.schemas, args.seed)))
    try:
        print(render(summary))
    except ValueError as exc:  # (no schema of the sample compiled, or none has a valid instance)
        print(f"misses.py: {exc}", file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
