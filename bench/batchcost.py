"""The batch mask step against a forward pass of the ~100M model: is the mask ≤ 10 %?

    python bench/batchcost.py                 # batches 1, 8, 32; float32 and bfloat16 (~3 min)
    python bench/batchcost.py --quick         # fewer rounds (~1 min)
    python bench/batchcost.py --batches 32 --dtypes float32 --rounds 15 --json out.json

Per batch size and dtype, in one process, interleaved (each round takes every item in
a rotating order, so machine drift falls on all of them; the median over rounds is
printed):

* ``forward``: one decoding step of ``bench/throughput.py``'s ~100M random Llama
  (Qwen2.5's 151 936-wide head, tied embeddings) at batch B: one new token per row
  over a KV cache of ``--prompt`` + ``--generated`` tokens (64 + 100), under
  ``torch.inference_mode``; the cache is cropped back after each step (untimed).
* ``apply``: ``BatchMasker.apply(logits, rows, matchers)`` alone, every state's mask
  cached by the engine and its row by the masker (warm), on fresh ``[B, 151 936]``
  logits of the dtype (copied untimed), rows in a shuffled order.
* ``step``: what the vLLM adapter does per step (``JsonModeLogitsProcessor.apply``):
  per row ``Matcher.advance`` by the row's next token and ``Matcher.mask()`` (its
  ``_warm``), then the one ``BatchMasker.apply``. Warm: the new states' masks are
  cached (the step is taken once untimed, then rolled back and timed). ``+clone``
  adds the ``scores.clone()`` that ``JsonLogitsProcessor`` (the transformers backend)
  makes on top, timed as its own item.
* ``cold``: the same step, the engine's mask cache and the masker emptied before it:
  every state is a first visit and the engine computes its mask from its walks (which
  stay cached, as in a server once a schema has been seen; the schema is compiled).
* ``cold+``: as ``cold``, with the engine's module-level walk, segment, rule and
  boundary caches emptied as well (a new schema's first steps; per-engine maps such as
  the advance transitions stay).

Rows: matchers drawn from real MaskBench instance walks (``bench/masks.py``'s sample:
20 schemas of the decoder benchmark, the Qwen2.5 tokenizer), each a valid instance
advanced by a random prefix of its tokens with a next token left, so that about half
sit inside strings and half at structure. A round uses a new draw of B rows for every
item alike. Torch threads: ``--threads`` (default 2, this machine's cores); the header
prints ``torch.get_num_threads()``. The cyclic GC is paused around timed calls.

Printed per dtype and batch: ms of each item and each mask item over ``forward``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

WIDTH = 151_936
ITEMS = ("forward", "apply", "step", "clone", "cold", "cold+")
PARTS = ("step:engine", "cold:engine", "cold+:engine")


def load_rows(schemas: int, count: int, seed: int) -> tuple[Any, list[tuple[Any, int]]]:
    """The vocabulary and ``count`` (matcher, next token): each matcher a valid
    MaskBench instance advanced by a random prefix of its tokens, unfinished, whose
    next token leaves it unfinished too."""
    from masks import load_pool

    vocabulary, _, instances = load_pool(schemas, 1, seed)
    rng = random.Random(seed + 1)
    rows: list[tuple[Any, int]] = []
    while len(rows) < count:
        _, compiled, ids = rng.choice(instances)
        if len(ids) < 2:
            continue
        cut = rng.randrange(len(ids) - 1)
        matcher = compiled.matcher()
        if not all(matcher.advance(t) for t in ids[:cut]) or matcher.is_finished():
            continue
        if not matcher.advance(ids[cut]) or matcher.is_finished():
            continue
        matcher.rollback(1)
        rows.append((matcher, ids[cut]))
    return vocabulary, rows


def _engine_caches() -> list[Any]:
    """The engine's module-level caches that ``cold+`` empties (not the mask cache)."""
    from jsonmode.decoding.engine import boundary, rules, segments, walk

    return [
        walk.walk_cache,
        walk.local_walk_cache,
        segments.segment_cache,
        rules._hash_cache,
        rules._count_cache,
        rules._lexeme_infos,
        boundary._rests,
    ]


class Bench:
    """The model at one dtype and everything one (batch, dtype) round needs."""

    def __init__(self, model: Any, vocabulary: Any, dtype: Any, args: argparse.Namespace) -> None:
        import torch

        from jsonmode.decoding.batch_masks import BatchMasker

        self.model = model
        self.dtype = dtype
        self.eos = sorted(vocabulary.eos_ids)
        self.make_masker = lambda: BatchMasker(WIDTH, self.eos, max_cached=1024)
        self.masker = self.make_masker()
        self.context = args.prompt + args.generated
        self.caches: dict[int, Any] = {}
        self.torch = torch

    def cache(self, size: int) -> Any:
        """A KV cache of ``self.context`` tokens for batch ``size`` (random ids)."""
        cached = self.caches.get(size)
        if cached is None:
            torch = self.torch
            ids = torch.randint(0, 150_000, (size, self.context))
            with torch.inference_mode():
                out = self.model(input_ids=ids, use_cache=True)
            cached = self.caches[size] = out.cache
        return cached

    def forward(self, size: int) -> float:
        torch = self.torch
        cache = self.cache(size)
        ids = torch.randint(0, 150_000, (size, 1))
        position = torch.full((size, 1), self.context, dtype=torch.long)
        with torch.inference_mode():
            started = time.perf_counter()
            self.model(input_ids=ids, cache=cache, position_ids=position, use_cache=True)
            spent = time.perf_counter() - started
        cache.crop(self.context - cache.get_seq_length())  # (negative: tokens to drop)
        assert cache.get_seq_length() == self.context
        return spent


def _step(
    masker: Any, logits: Any, order: list[int], chosen: list[tuple[Any, int]]
) -> tuple[float, float]:
    """The adapter's step, timed: advance and mask() each row, then one apply; seconds
    of the first part (the engine's) and of the apply (the masker's)."""
    started = time.perf_counter()
    matchers = []
    for matcher, token in chosen:
        matcher.advance(token)
        matcher.mask()
        matchers.append(matcher)
    between = time.perf_counter()
    masker.apply(logits, order, matchers)
    ended = time.perf_counter()
    for matcher, _ in chosen:
        matcher.rollback(1)
    return between - started, ended - between


def one_round(
    bench: Bench, pool: list[tuple[Any, int]], size: int, rng: random.Random
) -> dict[str, list[float]]:
    """Every mask item once, in a shuffled order, each right after a forward pass (as in
    decoding: the forward leaves the CPU caches full of its own data); seconds."""
    import torch

    from jsonmode.decoding.engine import cache as cache_module

    chosen = rng.sample(pool, size)  # distinct rows (a matcher twice would advance twice)
    order = rng.sample(range(size), size)
    fresh = torch.randn(size, WIDTH).to(bench.dtype)
    logits = fresh.clone()
    at_state = [m for m, _ in chosen]
    # Warm every cache for these rows, both states (before and after the next token).
    bench.masker.apply(logits, order, at_state)
    _step(bench.masker, logits, order, chosen)

    def apply() -> dict[str, float]:
        logits.copy_(fresh)
        started = time.perf_counter()
        bench.masker.apply(logits, order, at_state)
        return {"apply": time.perf_counter() - started}

    def step() -> dict[str, float]:
        logits.copy_(fresh)
        engine, masker = _step(bench.masker, logits, order, chosen)
        return {"step": engine + masker, "step:engine": engine}

    def clone() -> dict[str, float]:
        started = time.perf_counter()
        logits.clone()
        return {"clone": time.perf_counter() - started}

    def cold(deep: bool) -> dict[str, float]:
        name = "cold+" if deep else "cold"
        cache_module._mask_cache.clear()
        cache_module._bits_cache.clear()
        if deep:
            for lru in _engine_caches():
                lru.clear()
        masker = bench.make_masker()
        logits.copy_(fresh)
        engine, apply = _step(masker, logits, order, chosen)
        bench.masker.apply(logits, order, at_state)  # warm again (untimed)
        _step(bench.masker, logits, order, chosen)
        return {name: engine + apply, f"{name}:engine": engine}

    items = [apply, step, clone, lambda: cold(False), lambda: cold(True)]
    rng.shuffle(items)
    spent: dict[str, list[float]] = {"forward": []}
    gc.collect()
    gc.disable()
    try:
        for item in items:
            spent["forward"].append(bench.forward(size))
            for name, value in item().items():
                spent[name] = [value]
    finally:
        gc.enable()
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 11")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens in the KV cache")
    parser.add_argument("--generated", type=int, default=100, help="generated tokens in it")
    parser.add_argument("--schemas", type=int, default=20, help="MaskBench schemas (default 20)")
    parser.add_argument("--pool", type=int, default=400, help="rows to draw batches from")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--seed", type=int, default=20250301)
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 11)
    sizes = [int(s) for s in args.batches.split(",")]

    import torch
    from throughput import build_model

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    vocabulary, pool = load_rows(args.schemas, args.pool, args.seed)
    model, _ = build_model(0)
    params = sum(p.numel() for p in model.parameters())
    in_string = 0
    for matcher, _ in pool:
        in_string += int(matcher.mask().sum()) > vocabulary.size // 2
    print(
        f"# batch mask step vs forward: torch {torch.__version__}, "
        f"torch.get_num_threads() = {torch.get_num_threads()}, "
        f"interop {torch.get_num_interop_threads()}; model {params / 1e6:.0f}M params, "
        f"KV cache {args.prompt}+{args.generated} tokens; {len(pool)} rows from "
        f"{args.schemas} MaskBench schemas ({in_string} with most tokens allowed: in strings); "
        f"{rounds} rounds; set-up {time.perf_counter() - started:.0f} s"
    )
    results: list[dict[str, Any]] = []
    ratios = ("apply", "step", "step+clone", "cold", "cold+")
    head = f"{'dtype':>8} {'B':>3}  " + "  ".join(f"{n:>8}" for n in ITEMS)
    head += "  " + "  ".join(f"{n + '/fw':>13}" for n in ratios)
    head += f"  {'cold: eng':>9}  {'cold+: eng':>10}"
    print(
        "ms per call, median over rounds; x/fw: median of x over median forward (in brackets:"
        " fastest over fastest); eng: the engine's share (advance + mask) of a cold step"
    )
    print(head, flush=True)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        bench = Bench(model.to(dtype), vocabulary, dtype, args)
        rng = random.Random(args.seed)
        for size in sizes:
            bench.forward(size)  # allocations, the cache
            times: dict[str, list[float]] = {name: [] for name in ITEMS + PARTS}
            for _ in range(rounds):
                for name, values in one_round(bench, pool, size, rng).items():
                    times[name] += [value * 1e3 for value in values]
            pairs = zip(times["step"], times["clone"], strict=True)
            times["step+clone"] = [s + c for s, c in pairs]
            med = {name: statistics.median(values) for name, values in times.items()}
            best = {name: min(values) for name, values in times.items()}
            line = f"{dtype_name:>8} {size:>3}  " + "  ".join(f"{med[n]:8.2f}" for n in ITEMS)
            line += "  " + "  ".join(
                f"{med[n] / med['forward']:5.1%} ({best[n] / best['forward']:5.1%})" for n in ratios
            )
            line += f"  {med['cold:engine'] / med['cold']:9.0%}"
            line += f"  {med['cold+:engine'] / med['cold+']:10.0%}"
            print(line, flush=True)
            results.append(
                {"dtype": dtype_name, "batch": size, "median_ms": med, "min_ms": best, "ms": times}
            )
            del bench.caches[size]
    print(f"# load average {os.getloadavg()[0]:.2f}, {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"threads": torch.get_num_threads(), "args": vars(args), "results": results},
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
