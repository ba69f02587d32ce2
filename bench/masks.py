"""Masks for a batch: BatchMasker.apply against the per-row loop it replaced, per row of logits.

    python bench/masks.py                  # the table (~15 s on a quiet machine here)
    python bench/masks.py --quick          # fewer rounds and rows (~8 s)
    python bench/masks.py --all            # also the strategies that lost (torch, bool, bits)
    mkdir -p /tmp/base && git archive e8c713c | tar -x -C /tmp/base   # before BatchMasker
    python bench/masks.py --against /tmp/base  # also JsonLogitsProcessor, this checkout vs it

Matchers come from the decoder benchmark's MaskBench sample (``bench/decoder.py``) with
the Qwen2.5 tokenizer: each is a valid instance's matcher advanced by a random prefix of
its tokens, so about half sit inside strings (most tokens allowed) and half at structure
(a handful allowed). Logits are ``[batch, 151 936]`` (Qwen2.5's head: 271 columns past
the vocabulary), float32 and bfloat16, CPU torch with 2 threads; every row of the batch
is constrained, in a shuffled order. Each timed call gets fresh logits (copied untimed).

Strategies, each with its own cache of state rows:

* ``loop``: ``JsonLogitsProcessor`` before BatchMasker: per row, ``logits[r] +=``
  a cached ``0/-inf`` bias tensor of the row's state and dtype.
* ``batch``: ``BatchMasker.apply`` (the chosen strategy: on the CPU, each state's shorter
  id list, written into the logits through NumPy: the "fill" of cached rows and the
  "apply" are one pass).
* with ``--all``, the strategies that lost, BatchMasker's other paths forced onto the
  CPU: ``torch`` (the same id lists with torch ops: its path for other dtypes);
  ``bool``: ``BatchMasker.fill`` (a bool ``[B, width]`` buffer) then one ``masked_fill_``
  over the gathered rows; ``bits``: its accelerator path (packed rows, unpacked with torch
  bitwise ops, one ``masked_fill_``); and ``fill``: ``BatchMasker.fill`` alone (the bool
  masks, logits untouched).

Warm: every state already cached by every strategy; rounds interleave the strategies
(the first strategy rotates) and the median over rounds is printed, in µs per row.
First visit: before each batch the engine's mask cache and the strategies' caches are
emptied; ``engine`` is the mask computation for the batch's matchers (``Matcher.mask()``;
the engine's walk caches stay warm, so a state never seen by the process costs more),
the strategy columns the rest (building the cached rows from the engine's masks, then
applying them). Duplicate states within a batch are hits, as they would be.

``--against ROOT`` loads a second copy of jsonmode from ROOT (as ``bench/ab.py`` does) and
runs both versions' ``JsonLogitsProcessor`` over the same batches of instances (teacher
forced token by token, one schema per batch, the same random scores), alternating which
goes first at each step; it prints the median time per call and B's over A's, and checks
that both return identical scores.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import random
import statistics
import sys
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

WIDTH = 151_936  # Qwen2.5's logits width
BATCHES = (1, 8, 32, 64)
NEG_INF = float("-inf")


# -- the sample ---------------------------------------------------------------------------


def load_pool(
    schemas: int, count: int, seed: int
) -> tuple[Any, list[Any], list[tuple[Any, Any, list[int]]]]:
    """The vocabulary, ``count`` unfinished matchers at random prefixes of valid instances,
    and the (schema, compiled, ids) of every valid instance."""
    from decoder import TOKENIZER_DIR, load_sample

    import jsonmode

    vocabulary = jsonmode.Vocabulary.from_tokenizer(str(TOKENIZER_DIR / "tokenizer.json"))
    instances = []
    for case in load_sample(schemas, seed):
        try:
            compiled = jsonmode.compile_schema(case.schema, vocabulary)
        except jsonmode.JsonModeError:
            continue
        instances += [(case.schema, compiled, test.ids) for test in case.tests if test.valid]
    rng = random.Random(seed)
    pool: list[Any] = []
    while len(pool) < count:
        _, compiled, ids = rng.choice(instances)
        matcher = compiled.matcher()
        prefix = ids[: rng.randrange(len(ids) + 1)]
        if all(matcher.advance(token) for token in prefix) and not matcher.is_finished():
            pool.append(matcher)
    return vocabulary, pool, instances


# -- strategies ---------------------------------------------------------------------------


class Loop:
    """Today's JsonLogitsProcessor (before BatchMasker): a cached 0/-inf bias per state and
    dtype, added row by row."""

    def __init__(self, width: int, eos: Sequence[int], limit: int) -> None:
        self.width, self.eos, self.limit = width, sorted(eos), limit
        self.biases: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def bias(self, matcher: Any, like: Any) -> Any:
        import numpy as np
        import torch

        if matcher is None:
            bias = torch.full((self.width,), NEG_INF, dtype=like.dtype)
            bias[[e for e in self.eos if e < self.width]] = 0.0
            return bias
        key = (matcher._engine._token, matcher.state, like.dtype)
        cached = self.biases.get(key)
        if cached is not None:
            self.biases.move_to_end(key)
            return cached
        mask = matcher.mask()
        allowed = np.zeros(self.width, dtype=np.bool_)
        shared = min(self.width, mask.shape[0])
        allowed[:shared] = mask[:shared]
        if not allowed.any():
            allowed[[e for e in self.eos if e < self.width]] = True
        bias = torch.zeros(self.width, dtype=like.dtype)
        bias[torch.from_numpy(~allowed)] = NEG_INF
        self.biases[key] = bias
        if len(self.biases) > self.limit:
            self.biases.popitem(last=False)
        return bias

    def apply(self, logits: Any, rows: list[int], matchers: list[Any]) -> Any:
        for row, matcher in zip(rows, matchers, strict=True):
            logits[row] += self.bias(matcher, logits)
        return logits

    def clear(self) -> None:
        self.biases.clear()


class Batch:
    """BatchMasker.apply, its own choice of path; or ``path`` forced: "torch" (the same id
    lists written with torch ops) or "bits" (its accelerator path)."""

    def __init__(self, width: int, eos: Sequence[int], limit: int, path: str = "") -> None:
        from jsonmode.decoding.batch_masks import BatchMasker

        self.make = lambda: BatchMasker(width, eos, max_cached=limit)
        self.path = path
        self.clear()

    def clear(self) -> None:
        self.masker = self.make()
        if self.path:
            path = self.path
            self.masker._path = lambda logits: path  # type: ignore[method-assign]

    def apply(self, logits: Any, rows: list[int], matchers: list[Any]) -> Any:
        return self.masker.apply(logits, rows, matchers)


class Dense(Batch):
    """BatchMasker.fill (a bool buffer) and one masked_fill_ over the gathered rows."""

    def apply(self, logits: Any, rows: list[int], matchers: list[Any]) -> Any:
        import torch

        allowed = self.masker.fill(matchers)
        index = torch.tensor(rows, dtype=torch.long)
        chosen = logits.index_select(0, index).masked_fill_(~allowed, NEG_INF)
        return logits.index_copy_(0, index, chosen)


class Fill(Batch):
    """BatchMasker.fill alone: the bool masks, logits untouched (for its cost per row)."""

    def apply(self, logits: Any, rows: list[int], matchers: list[Any]) -> Any:
        self.masker.fill(matchers)
        return logits


def strategies(width: int, eos: Sequence[int], everything: bool) -> dict[str, Any]:
    found: dict[str, Any] = {"loop": Loop(width, eos, 1024), "batch": Batch(width, eos, 1024)}
    if everything:
        found["torch"] = Batch(width, eos, 1024, path="torch")
        found["bool"] = Dense(width, eos, 1024)
        found["bits"] = Batch(width, eos, 1024, path="bits")
        found["fill"] = Fill(width, eos, 1024)
    return found


# -- timing -------------------------------------------------------------------------------


def _timed(strategy: Any, logits: Any, rows: list[int], matchers: list[Any]) -> float:
    started = time.perf_counter()
    strategy.apply(logits, rows, matchers)
    return time.perf_counter() - started


def _masks(matchers: list[Any]) -> float:
    started = time.perf_counter()
    for matcher in matchers:
        matcher.mask()
    return time.perf_counter() - started


def measure(
    pool: list[Any], runs: dict[str, Any], dtype: Any, size: int, rounds: int, rows_per_round: int
) -> dict[str, dict[str, float]]:
    """Median µs per row, warm and first visit, of every strategy at batch ``size``."""
    import torch

    from jsonmode.decoding.engine import cache as cache_module  # (its _mask_cache)

    rng = random.Random(size)
    count = max(4, rows_per_round // size)
    batches = [rng.sample(pool, size) for _ in range(count)]
    orders = [rng.sample(range(size), size) for _ in range(count)]
    fresh = torch.randn(size, WIDTH).to(dtype)
    work = fresh.clone()
    names = list(runs)
    warm: dict[str, list[float]] = {name: [] for name in names}
    first: dict[str, list[float]] = {name: [] for name in [*names, "engine"]}
    for strategy in runs.values():  # fill every cache
        for matchers, rows in zip(batches, orders, strict=True):
            strategy.apply(work, rows, matchers)
    gc.collect()
    gc.disable()
    try:
        for turn in range(rounds):
            order = names[turn % len(names) :] + names[: turn % len(names)]
            spent = dict.fromkeys(order, 0.0)
            for matchers, rows in zip(batches, orders, strict=True):
                for name in order:
                    work.copy_(fresh)
                    spent[name] += _timed(runs[name], work, rows, matchers)
            for name in order:
                warm[name].append(spent[name] / (count * size) * 1e6)
        # First visits: a few batches per round, caches emptied before each.
        visits = max(1, count // 4)
        for turn in range(max(3, rounds // 2)):
            order = names[turn % len(names) :] + names[: turn % len(names)]
            spent = dict.fromkeys([*order, "engine"], 0.0)
            for matchers, rows in zip(batches[:visits], orders[:visits], strict=True):
                cache_module._mask_cache.clear()
                spent["engine"] += _masks(matchers)
                for name in order:
                    runs[name].clear()
                    work.copy_(fresh)
                    spent[name] += _timed(runs[name], work, rows, matchers)
            for name, value in spent.items():
                first[name].append(value / (visits * size) * 1e6)
    finally:
        gc.enable()
    return {
        "warm": {name: statistics.median(values) for name, values in warm.items()},
        "first": {name: statistics.median(values) for name, values in first.items()},
    }


def check(pool: list[Any], runs: dict[str, Any], eos: Sequence[int]) -> None:
    """Every strategy gives the reference's logits on a shuffled batch (else stop)."""
    import numpy as np
    import torch

    rng = random.Random(0)
    matchers = [*rng.sample(pool, 12), None]
    rows = rng.sample(range(16), len(matchers))
    logits = torch.randn(16, WIDTH)
    expected = logits.clone()
    for row, matcher in zip(rows, matchers, strict=True):
        allowed = np.zeros(WIDTH, dtype=np.bool_)
        if matcher is not None:
            allowed[: matcher.mask().size] = matcher.mask()
        if not allowed.any():
            allowed[sorted(eos)] = True
        expected[row][torch.from_numpy(~allowed)] = NEG_INF
    for name, strategy in runs.items():
        if isinstance(strategy, Fill):
            continue
        if not torch.equal(strategy.apply(logits.clone(), rows, matchers), expected):
            raise SystemExit(f"{name}: masked logits differ from the reference")


# -- the processor A/B --------------------------------------------------------------------


def processor_ab(
    against: Path, instances: list[tuple[Any, Any, list[int]]], size: int, batches: int, seed: int
) -> list[dict[str, Any]]:
    """JsonLogitsProcessor of this checkout (A) and of ``against`` (B), interleaved per step,
    over the same batches three times: cold float32 (each version's caches empty), then
    warm float32 and warm bfloat16 (the engines' masks cached, each processor new)."""
    import torch
    from ab import _load
    from decoder import TOKENIZER_DIR

    versions = {}
    for name, root in (("A", ROOT), ("B", against)):
        _load(root)
        importlib.import_module("jsonmode.decoding.logits")  # from that copy's package
        versions[name] = {k: v for k, v in sys.modules.items() if k.startswith("jsonmode")}
    rng = random.Random(seed)
    by_schema: dict[int, list[Any]] = {}
    for schema, compiled, ids in instances:
        by_schema.setdefault(id(compiled), []).append((schema, ids))
    groups = list(by_schema.values())
    plans = []
    for _ in range(batches):
        group = rng.choice(groups)
        plans.append([rng.choice(group) for _ in range(size)])
    reports = []
    passes = [
        ("cold float32", torch.float32),
        ("warm float32", torch.float32),
        ("warm bfloat16", torch.bfloat16),
    ]
    for label, dtype in passes:
        times: dict[str, list[float]] = {"A": [], "B": []}
        mismatches = 0
        for chosen in plans:
            processors, eos = {}, 0
            for name, modules in versions.items():
                sys.modules.update(modules)
                jsonmode = modules["jsonmode"]
                vocabulary = jsonmode.Vocabulary.from_tokenizer(
                    str(TOKENIZER_DIR / "tokenizer.json")
                )
                eos = min(vocabulary.eos_ids)
                compiled = jsonmode.compile_schema(chosen[0][0], vocabulary)
                logits = modules["jsonmode.decoding.logits"]
                processors[name] = logits.JsonLogitsProcessor(compiled)
            ids = torch.zeros((size, 1), dtype=torch.long)
            for step in range(max(len(row) for _, row in chosen) + 2):
                if step:
                    column = [row[step - 1] if step - 1 < len(row) else eos for _, row in chosen]
                    ids = torch.cat([ids, torch.tensor(column).unsqueeze(1)], dim=1)
                scores = torch.randn(size, WIDTH).to(dtype)
                outs = {}
                for name in ("A", "B") if step % 2 else ("B", "A"):
                    sys.modules.update(versions[name])
                    started = time.perf_counter()
                    outs[name] = processors[name](ids, scores)
                    times[name].append(time.perf_counter() - started)
                mismatches += not torch.equal(outs["A"], outs["B"])
        a, b = statistics.median(times["A"]), statistics.median(times["B"])
        reports.append(
            {
                "pass": label,
                "calls": len(times["A"]),
                "A": a * 1e6,
                "B": b * 1e6,
                "ratio": b / a,
                "total_ratio": sum(times["B"]) / sum(times["A"]),
                "mismatches": mismatches,
            }
        )
    sys.modules.update(versions["A"])
    return reports


# -- report -------------------------------------------------------------------------------


def render(results: dict[tuple[str, int], dict[str, dict[str, float]]], names: list[str]) -> str:
    others = [name for name in names if name != "batch"]
    head = ["dtype", "B", "warm: batch"] + [f"{n}" for n in others] + [f"{n}/batch" for n in others]
    head += ["1st: engine", "batch"] + others + [f"{n}/batch" for n in others]
    lines = [head]
    for (dtype, size), result in results.items():
        warm, first = result["warm"], result["first"]
        line = [dtype, str(size), f"{warm['batch']:.1f}"]
        line += [f"{warm[n]:.1f}" for n in others] + [
            f"{warm[n] / warm['batch']:.2f}x" for n in others
        ]
        line += [f"{first['engine']:.0f}", f"{first['batch']:.1f}"]
        line += [f"{first[n]:.1f}" for n in others]
        line += [f"{first[n] / first['batch']:.2f}x" for n in others]
        lines.append(line)
    widths = [max(len(line[k]) for line in lines) for k in range(len(head))]
    return "\n".join(
        "  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) for line in lines
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and rows")
    parser.add_argument(
        "--all", action="store_true", help="also the torch, bool, bits and fill strategies"
    )
    parser.add_argument("--rounds", type=int, default=None, help="warm rounds (default 9, quick 3)")
    parser.add_argument("--schemas", type=int, default=20, help="MaskBench schemas (default 20)")
    parser.add_argument("--pool", type=int, default=200, help="matchers to draw batches from")
    parser.add_argument("--seed", type=int, default=20250301)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--against", type=Path, help="also A/B JsonLogitsProcessor against ROOT")
    parser.add_argument("--no-table", action="store_true", help="only the A/B (with --against)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 9)
    rows_per_round = 64 if args.quick else 256

    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    vocabulary, pool, instances = load_pool(args.schemas, args.pool, args.seed)
    eos = sorted(vocabulary.eos_ids)
    runs = strategies(WIDTH, eos, args.all)
    check(pool, runs, eos)
    states = len({(m._engine._token, m.state) for m in pool})
    print(
        f"# masks for a batch: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"Qwen2.5 ({vocabulary.size} tokens), width {WIDTH}; {len(pool)} matchers "
        f"({states} states) from {args.schemas} MaskBench schemas; set-up "
        f"{time.perf_counter() - started:.1f} s"
    )
    if not args.no_table:
        results = {}
        for dtype in (torch.float32, torch.bfloat16):
            for size in BATCHES:
                results[(str(dtype).split(".")[-1], size)] = measure(
                    pool, runs, dtype, size, rounds, rows_per_round
                )
        print("µs per row (median over rounds); x = that strategy's time over batch's")
        print(render(results, list(runs)))
    if args.against is not None:
        reports = processor_ab(args.against, instances, 8, 4 if args.quick else 10, args.seed)
        print(f"\nJsonLogitsProcessor, batch 8: A = this checkout, B = {args.against}")
        for ab in reports:
            print(
                f"  {ab['pass']:>13}: {ab['calls']} calls each, median A {ab['A']:.0f} µs, "
                f"B {ab['B']:.0f} µs per call; B/A {ab['ratio']:.2f} (median), "
                f"{ab['total_ratio']:.2f} (total); outputs differing: {ab['mismatches']}"
            )
    print(f"# load average {os.getloadavg()[0]:.2f}, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
